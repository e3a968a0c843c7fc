//! The manifest parsers: the path references ([`PathRef`]) a Cargo.toml, package.json,
//! .csproj/.fsproj/.vbproj, go.mod or go.work writes, read from its text
//! ([`parse_manifest`]). go.mod / go.work are read with a small tokenizer of their
//! documented grammar (<https://go.dev/ref/mod#go-mod-file-grammar>).

use super::ManifestKind;
use std::path::{Path, PathBuf};

/// A path reference found in a manifest, relative to the manifest's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRef {
    pub field: String,
    pub written: String,
    /// Folder (or file, for a tarball dependency) as a relative or absolute path.
    pub path: PathBuf,
}

/// Parse one manifest's text; `file` only names it in errors and picks the parser.
pub fn parse_manifest(kind: ManifestKind, file: &Path, text: &str) -> Result<Vec<PathRef>, String> {
    let _ = file;
    match kind {
        ManifestKind::Cargo => cargo_refs(text),
        ManifestKind::Npm => npm_refs(text),
        ManifestKind::Dotnet => dotnet_refs(text),
        ManifestKind::GoMod | ManifestKind::GoWork => go_refs(text),
    }
}

/// Cargo.toml: `path` of dependencies (all kinds, target-specific, workspace), `[patch.*]`,
/// `[replace]`, and workspace members written as paths.
pub fn cargo_refs(text: &str) -> Result<Vec<PathRef>, String> {
    let m = cargo_toml::Manifest::from_slice(text.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut deps = |section: &str, set: &cargo_toml::DepsSet| {
        for (name, dep) in set {
            if let Some(p) = dep.detail().and_then(|d| d.path.as_ref()) {
                out.push(PathRef {
                    field: format!("{section}.{name}"),
                    written: p.clone(),
                    path: PathBuf::from(p),
                });
            }
        }
    };
    deps("dependencies", &m.dependencies);
    deps("dev-dependencies", &m.dev_dependencies);
    deps("build-dependencies", &m.build_dependencies);
    for (t, target) in &m.target {
        deps(&format!("target.{t}.dependencies"), &target.dependencies);
        deps(
            &format!("target.{t}.dev-dependencies"),
            &target.dev_dependencies,
        );
        deps(
            &format!("target.{t}.build-dependencies"),
            &target.build_dependencies,
        );
    }
    for (reg, set) in &m.patch {
        deps(&format!("patch.{reg}"), set);
    }
    #[allow(deprecated)]
    deps("replace", &m.replace);
    if let Some(ws) = &m.workspace {
        deps("workspace.dependencies", &ws.dependencies);
        for member in &ws.members {
            if let Some(prefix) = literal_prefix(member) {
                out.push(PathRef {
                    field: "workspace.members".into(),
                    written: member.clone(),
                    path: prefix,
                });
            }
        }
    }
    Ok(out)
}

/// The part of a glob before its first wildcard, as a folder (`../pkgs/*` -> `../pkgs`).
/// `None` for a pattern that is only a wildcard.
fn literal_prefix(pattern: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in pattern.split('/') {
        if part.contains(['*', '?', '[', '{']) {
            break;
        }
        out.push(part);
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// package.json: `file:` / `link:` / `portal:` specifiers in dependencies,
/// devDependencies, optionalDependencies and peerDependencies, and `workspaces` patterns.
pub fn npm_refs(text: &str) -> Result<Vec<PathRef>, String> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("line {} column {}: {e}", e.line(), e.column()))?;
    let mut out = Vec::new();
    for section in [
        "dependencies",
        "devDependencies",
        "optionalDependencies",
        "peerDependencies",
    ] {
        let Some(map) = v.get(section).and_then(|s| s.as_object()) else {
            continue;
        };
        for (name, spec) in map {
            let Some(spec) = spec.as_str() else { continue };
            let local = ["file:", "link:", "portal:"]
                .iter()
                .find_map(|p| spec.strip_prefix(p));
            if let Some(p) = local {
                out.push(PathRef {
                    field: format!("{section}.{name}"),
                    written: spec.to_string(),
                    path: PathBuf::from(p),
                });
            }
        }
    }
    let patterns: Vec<&str> = match v.get("workspaces") {
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_str()).collect(),
        Some(serde_json::Value::Object(o)) => o
            .get("packages")
            .and_then(|p| p.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    for p in patterns {
        if let Some(prefix) = literal_prefix(p) {
            out.push(PathRef {
                field: "workspaces".into(),
                written: p.to_string(),
                path: prefix,
            });
        }
    }
    Ok(out)
}

/// .csproj / .fsproj / .vbproj: `Include` of `<ProjectReference>` (the referenced project's
/// folder; MSBuild writes `\` as the separator).
pub fn dotnet_refs(text: &str) -> Result<Vec<PathRef>, String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut out = Vec::new();
    loop {
        let pos = reader.buffer_position();
        match reader.read_event() {
            Ok(Event::Start(e)) | Ok(Event::Empty(e)) => {
                if e.local_name().as_ref() != b"ProjectReference" {
                    continue;
                }
                for a in e.attributes() {
                    let a = a.map_err(|err| format!("byte {pos}: {err}"))?;
                    if a.key.local_name().as_ref() != b"Include" {
                        continue;
                    }
                    let v = a
                        .unescape_value()
                        .map_err(|err| format!("byte {pos}: {err}"))?
                        .into_owned();
                    // MSBuild items may list several paths separated by ';'
                    for item in v.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                        if item.contains("$(") {
                            continue; // property-dependent: cannot be known statically
                        }
                        let p = PathBuf::from(item.replace('\\', "/"));
                        let folder = p.parent().map(Path::to_path_buf).unwrap_or_default();
                        out.push(PathRef {
                            field: "ProjectReference".into(),
                            written: item.to_string(),
                            path: if folder.as_os_str().is_empty() {
                                PathBuf::from(".")
                            } else {
                                folder
                            },
                        });
                    }
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => {
                let line = text[..(pos as usize).min(text.len())].matches('\n').count() + 1;
                return Err(format!("line {line}: {e}"));
            }
        }
    }
    Ok(out)
}

/// A token of the go.mod lexical grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GoTok {
    Word(String),
    LParen,
    RParen,
    Arrow,
    Newline,
}

/// Does a word of go.mod end before byte `i` (space, bracket, quote, comment, arrow)?
fn ends_word(b: &[u8], i: usize) -> bool {
    let next = b.get(i + 1);
    matches!(
        b[i],
        b' ' | b'\t' | b'\r' | b'\n' | b'(' | b')' | b'"' | b'`'
    ) || (b[i] == b'/' && next == Some(&b'/'))
        || (b[i] == b'=' && next == Some(&b'>'))
}

/// Tokenize go.mod / go.work: identifiers, interpreted ("…") and raw (`…`) strings,
/// `(`, `)`, `=>`, newlines; `//` comments dropped.
fn go_tokens(text: &str) -> Result<Vec<(usize, GoTok)>, String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    let mut line = 1;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                out.push((line, GoTok::Newline));
                line += 1;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => {
                out.push((line, GoTok::LParen));
                i += 1;
            }
            b')' => {
                out.push((line, GoTok::RParen));
                i += 1;
            }
            b'=' if b.get(i + 1) == Some(&b'>') => {
                out.push((line, GoTok::Arrow));
                i += 2;
            }
            b'"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match b.get(i) {
                        None | Some(b'\n') => {
                            return Err(format!("line {line}: unterminated string"))
                        }
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => {
                            match b.get(i + 1) {
                                Some(b'"') => s.push('"'),
                                Some(b'\\') => s.push('\\'),
                                Some(b'n') => s.push('\n'),
                                Some(b't') => s.push('\t'),
                                _ => {
                                    return Err(format!(
                                        "line {line}: unsupported escape in string"
                                    ))
                                }
                            }
                            i += 2;
                        }
                        Some(_) => {
                            let start = i;
                            while i < b.len() && !matches!(b[i], b'"' | b'\\' | b'\n') {
                                i += 1;
                            }
                            s.push_str(&text[start..i]);
                        }
                    }
                }
                out.push((line, GoTok::Word(s)));
            }
            b'`' => {
                let start = i + 1;
                let Some(end) = text[start..].find('`') else {
                    return Err(format!("line {line}: unterminated raw string"));
                };
                let s = &text[start..start + end];
                line += s.matches('\n').count();
                out.push((line, GoTok::Word(s.to_string())));
                i = start + end + 1;
            }
            _ => {
                let start = i;
                while i < b.len() && !ends_word(b, i) {
                    i += 1;
                }
                out.push((line, GoTok::Word(text[start..i].to_string())));
            }
        }
    }
    out.push((line, GoTok::Newline));
    Ok(out)
}

/// Is a go.mod replacement target a file path (not a module path)? Per the reference:
/// it starts with `./` or `../`, or is absolute.
fn go_is_path(s: &str) -> bool {
    s.starts_with("./") || s.starts_with("../") || s == "." || s == ".." || s.starts_with('/')
}

/// go.mod / go.work: `replace old [v] => ./path` (single or block form) and, in go.work,
/// `use ./path`.
pub fn go_refs(text: &str) -> Result<Vec<PathRef>, String> {
    let toks = go_tokens(text)?;
    // split into lines of (verb, args) respecting blocks `verb ( … )`
    let mut lines: Vec<(usize, String, Vec<GoTok>)> = Vec::new();
    let mut i = 0;
    let mut block: Option<String> = None;
    while i < toks.len() {
        let (line, t) = &toks[i];
        match t {
            GoTok::Newline => {
                i += 1;
            }
            GoTok::RParen if block.is_some() => {
                block = None;
                i += 1;
            }
            _ => {
                let mut cur: Vec<GoTok> = Vec::new();
                while i < toks.len() && toks[i].1 != GoTok::Newline {
                    cur.push(toks[i].1.clone());
                    i += 1;
                }
                if let Some(verb) = &block {
                    if cur.last() == Some(&GoTok::RParen) {
                        cur.pop();
                        if !cur.is_empty() {
                            lines.push((*line, verb.clone(), cur));
                        }
                        block = None;
                    } else {
                        lines.push((*line, verb.clone(), cur));
                    }
                    continue;
                }
                let verb = match cur.first() {
                    Some(GoTok::Word(w)) => w.clone(),
                    _ => return Err(format!("line {line}: expected a directive")),
                };
                let args: Vec<GoTok> = cur[1..].to_vec();
                if args.first() == Some(&GoTok::LParen) {
                    let rest: Vec<GoTok> = args[1..].to_vec();
                    if rest.last() == Some(&GoTok::RParen) {
                        // `verb ( a b )` on one line
                        let inner = rest[..rest.len() - 1].to_vec();
                        if !inner.is_empty() {
                            lines.push((*line, verb, inner));
                        }
                    } else {
                        if !rest.is_empty() {
                            lines.push((*line, verb.clone(), rest));
                        }
                        block = Some(verb);
                    }
                } else {
                    lines.push((*line, verb, args));
                }
            }
        }
    }
    if block.is_some() {
        return Err("unterminated ( block".into());
    }
    let mut out = Vec::new();
    for (line, verb, args) in lines {
        match verb.as_str() {
            "replace" => {
                let Some(arrow) = args.iter().position(|t| *t == GoTok::Arrow) else {
                    return Err(format!("line {line}: replace without =>"));
                };
                if let Some(GoTok::Word(target)) = args.get(arrow + 1) {
                    // a version after the target means a module path, not a folder
                    if go_is_path(target) && args.len() == arrow + 2 {
                        out.push(PathRef {
                            field: "replace".into(),
                            written: target.clone(),
                            path: PathBuf::from(target),
                        });
                    }
                } else {
                    return Err(format!("line {line}: replace without a target"));
                }
            }
            "use" => {
                for a in args {
                    if let GoTok::Word(w) = a {
                        out.push(PathRef {
                            field: "use".into(),
                            written: w.clone(),
                            path: PathBuf::from(w),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_all_sections() {
        let t = r#"
[package]
name = "app"
version = "0.1.0"
[dependencies]
shared = { path = "../shared" }
serde = "1"
inh = { workspace = true }
[dev-dependencies]
testkit = { path = "../testkit", version = "0.1" }
[target.'cfg(unix)'.build-dependencies]
gen = { path = "../../tools/gen" }
[workspace]
members = ["crates/*", "../sibling/*"]
[workspace.dependencies]
wsdep = { path = "../wsdep" }
[patch.crates-io]
log = { path = "../log-fork" }
"#;
        let r = cargo_refs(t).unwrap();
        let paths: Vec<_> = r
            .iter()
            .map(|r| r.path.to_string_lossy().into_owned())
            .collect();
        for want in [
            "../shared",
            "../testkit",
            "../../tools/gen",
            "../wsdep",
            "../log-fork",
            "../sibling",
            "crates",
        ] {
            assert!(
                paths.contains(&want.to_string()),
                "{want} missing from {paths:?}"
            );
        }
        assert_eq!(paths.len(), 7, "{paths:?}");
        assert!(cargo_refs("[dependencies\n").is_err());
    }

    #[test]
    fn npm_specs() {
        let t = r#"{"dependencies":{"ui":"file:../ui","x":"^1"},
            "devDependencies":{"l":"link:../linked"},
            "optionalDependencies":{"o":"file:../o.tgz"},
            "peerDependencies":{"p":"portal:../portal"},
            "workspaces":{"packages":["../pkgs/*","packages/*"]}}"#;
        let r = npm_refs(t).unwrap();
        let paths: Vec<_> = r
            .iter()
            .map(|r| r.path.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            paths,
            [
                "../ui",
                "../linked",
                "../o.tgz",
                "../portal",
                "../pkgs",
                "packages"
            ]
        );
        let e = npm_refs("{\n \"a\": }").unwrap_err();
        assert!(e.starts_with("line 2"), "{e}");
    }

    #[test]
    fn dotnet_backslashes() {
        let t = r#"<Project Sdk="Microsoft.NET.Sdk">
  <ItemGroup>
    <ProjectReference Include="..\Shared\Shared.csproj" />
    <ProjectReference Include="..\Lib\Lib.fsproj"></ProjectReference>
    <PackageReference Include="Newtonsoft.Json" Version="13" />
    <ProjectReference Include="$(Root)\X\X.csproj" />
  </ItemGroup>
</Project>"#;
        let r = dotnet_refs(t).unwrap();
        let paths: Vec<_> = r
            .iter()
            .map(|r| r.path.to_string_lossy().into_owned())
            .collect();
        assert_eq!(paths, ["../Shared", "../Lib"]);
        assert!(dotnet_refs("<Project><ItemGroup></Project>").is_err());
    }

    #[test]
    fn gomod_replace_forms() {
        let t = r#"module example.com/app // the app

go 1.22

require example.com/x v1.0.0

replace example.com/x => ../x
replace example.com/y v1.2.3 => "../y dir"
replace example.com/z => example.com/z2 v1.0.0
replace (
	example.com/a => ./local/a // inside
	example.com/b v0.1.0 => ../b
)
replace ( example.com/c => /abs/c )
"#;
        let r = go_refs(t).unwrap();
        let paths: Vec<_> = r
            .iter()
            .map(|r| r.path.to_string_lossy().into_owned())
            .collect();
        assert_eq!(paths, ["../x", "../y dir", "./local/a", "../b", "/abs/c"]);
        let w = go_refs("go 1.22\nuse (\n  .\n  ../mod2\n)\n").unwrap();
        let paths: Vec<_> = w
            .iter()
            .map(|r| r.path.to_string_lossy().into_owned())
            .collect();
        assert_eq!(paths, [".", "../mod2"]);
        assert!(go_refs("replace (\n a => ../a\n").is_err());
        assert!(go_refs("replace a ../a\n").is_err());
    }
}
