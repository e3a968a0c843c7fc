//! Package caches of the capsule's own: for each tool (npm, cargo, pip, uv, Go, NuGet,
//! Yarn, pnpm) the person's cache directory is the read-only lower layer of an overlay whose
//! upper layer is `<bundle>/cache/<tool>/`, so a task starts with what the person already
//! downloaded and whatever it adds stays in the capsule. Caches are not part of the home
//! review ([`super::layer`]).
//!
//! Credentials in those tools' configuration stay hidden: `~/.cargo/credentials*` and
//! `~/.npmrc` are in the bundle's `HOME_CREDENTIALS`. npm also reads registry settings from
//! `~/.npmrc`, so instead of hiding it outright the runtime may show a filtered copy without
//! auth lines ([`filtered_npmrc`]), mounted read-only over `~/.npmrc`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One tool cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDir {
    /// Short name; also the directory under `<bundle>/cache/`.
    pub tool: &'static str,
    /// The person's cache directory (absolute; may not exist).
    pub host: PathBuf,
}

/// The cache directories of every supported tool, honoring the tools' own environment
/// overrides (`env` looks a variable up in the person's environment).
pub fn cache_dirs(home: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> Vec<CacheDir> {
    let var = |k: &str| {
        env(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let xdg_cache = var("XDG_CACHE_HOME").unwrap_or_else(|| home.join(".cache"));
    let xdg_data = var("XDG_DATA_HOME").unwrap_or_else(|| home.join(".local/share"));
    let cargo_home = var("CARGO_HOME").unwrap_or_else(|| home.join(".cargo"));
    let gopath = env("GOPATH")
        .and_then(|v| std::env::split_paths(&v).next().filter(|p| p.is_absolute()))
        .unwrap_or_else(|| home.join("go"));
    let mut v = vec![
        CacheDir {
            tool: "npm",
            host: var("npm_config_cache").unwrap_or_else(|| home.join(".npm")),
        },
        CacheDir {
            tool: "cargo-registry",
            host: cargo_home.join("registry"),
        },
        CacheDir {
            tool: "cargo-git",
            host: cargo_home.join("git"),
        },
        CacheDir {
            tool: "pip",
            host: var("PIP_CACHE_DIR").unwrap_or_else(|| xdg_cache.join("pip")),
        },
        CacheDir {
            tool: "uv",
            host: var("UV_CACHE_DIR").unwrap_or_else(|| xdg_cache.join("uv")),
        },
        CacheDir {
            tool: "go-mod",
            host: var("GOMODCACHE").unwrap_or_else(|| gopath.join("pkg/mod")),
        },
        CacheDir {
            tool: "go-build",
            host: var("GOCACHE").unwrap_or_else(|| xdg_cache.join("go-build")),
        },
        CacheDir {
            tool: "nuget",
            host: var("NUGET_PACKAGES").unwrap_or_else(|| home.join(".nuget/packages")),
        },
        CacheDir {
            tool: "yarn",
            host: var("YARN_CACHE_FOLDER").unwrap_or_else(|| xdg_cache.join("yarn")),
        },
        CacheDir {
            tool: "yarn-berry",
            host: home.join(".yarn/berry/cache"),
        },
        CacheDir {
            tool: "pnpm-store",
            host: xdg_data.join("pnpm/store"),
        },
        CacheDir {
            tool: "pnpm",
            host: xdg_cache.join("pnpm"),
        },
    ];
    // one overlay per directory: drop duplicates and caches nested in another cache
    v.sort_by(|a, b| a.host.cmp(&b.host));
    let mut out: Vec<CacheDir> = Vec::new();
    for c in v {
        if !out.iter().any(|o| c.host.starts_with(&o.host)) {
            out.push(c);
        }
    }
    out
}

/// The person's caches as seen from the process environment.
pub fn host_cache_dirs(home: &Path) -> Vec<CacheDir> {
    cache_dirs(home, &|k| std::env::var_os(k))
}

/// The directories of one capsule cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLayer {
    pub tool: &'static str,
    /// Where the cache appears inside the sandbox (the person's path).
    pub target: PathBuf,
    /// The person's cache, read-only underneath; `None` when it does not exist (then the
    /// capsule's own directory is bound read-write at `target` instead of an overlay).
    pub lower: Option<PathBuf>,
    /// `<bundle>/cache/<tool>`: what the task adds.
    pub upper: PathBuf,
    /// `<bundle>/cache/.work/<tool>`: the overlay's work directory.
    pub work: PathBuf,
}

/// Make the cache directories of a bundle (0700) and describe the overlays.
pub fn prepare(bundle_dir: &Path, caches: &[CacheDir]) -> std::io::Result<Vec<CacheLayer>> {
    layers(bundle_dir, caches, true)
}

/// The overlays [`prepare`] would describe, without making any folder.
pub fn describe(bundle_dir: &Path, caches: &[CacheDir]) -> Vec<CacheLayer> {
    // nothing is created, so nothing can fail
    layers(bundle_dir, caches, false).unwrap_or_default()
}

/// [`prepare`] (`make`) or [`describe`].
fn layers(bundle_dir: &Path, caches: &[CacheDir], make: bool) -> std::io::Result<Vec<CacheLayer>> {
    use std::os::unix::fs::DirBuilderExt;
    let base = bundle_dir.join(capsule_bundle::layout::bundle_files::CACHE);
    // the folders made by an earlier exec, read once (two mkdir/stat per folder otherwise)
    let made = |dir: &Path| -> Vec<OsString> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.file_name())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (made_upper, made_work) = (made(&base), made(&base.join(".work")));
    let mut out = Vec::new();
    for c in caches {
        let upper = base.join(c.tool);
        let work = base.join(".work").join(c.tool);
        for (d, made) in [(&upper, &made_upper), (&work, &made_work)] {
            if !make || made.iter().any(|m| m == c.tool) {
                continue;
            }
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)?;
        }
        // most people have only some of the caches: one stat for a missing one
        let lower = std::fs::metadata(&c.host)
            .is_ok_and(|m| m.is_dir())
            .then(|| canonicalize(&c.host).ok())
            .flatten();
        out.push(CacheLayer {
            tool: c.tool,
            target: c.host.clone(),
            lower,
            upper,
            work,
        });
    }
    Ok(out)
}

/// `std::fs::canonicalize`, in fewer system calls on Linux.
fn canonicalize(p: &Path) -> std::io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    return crate::kernel::sys::canonicalize(p);
    #[cfg(not(target_os = "linux"))]
    return std::fs::canonicalize(p);
}

/// `.npmrc` keys that carry credentials (also as `//registry/:<key>`).
const NPMRC_SECRET_KEYS: &[&str] = &[
    "_auth",
    "_authtoken",
    "_password",
    "password",
    "username",
    "email",
    "certfile",
    "keyfile",
    "cert",
    "key",
    "otp",
    "tokenhelper",
];

/// `~/.npmrc` without auth lines: every `key = value` whose key (after an optional
/// `//host/path/:` scope) is a credential is dropped, as are lines that cannot be parsed.
/// Registry and other settings stay.
pub fn filtered_npmrc(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let Some((key, _)) = t.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let bare = key.rsplit_once(':').map(|(_, k)| k).unwrap_or(key);
        let bare = bare.trim().to_ascii_lowercase();
        if key.starts_with("//") && !key.contains(':') {
            continue;
        }
        if NPMRC_SECRET_KEYS.contains(&bare.as_str())
            || bare.contains("token")
            || bare.contains("auth")
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let home = Path::new("/home/u");
        let none = cache_dirs(home, &|_| None);
        let get = |v: &[CacheDir], t: &str| v.iter().find(|c| c.tool == t).map(|c| c.host.clone());
        assert_eq!(get(&none, "npm").unwrap(), home.join(".npm"));
        assert_eq!(
            get(&none, "cargo-registry").unwrap(),
            home.join(".cargo/registry")
        );
        assert_eq!(get(&none, "cargo-git").unwrap(), home.join(".cargo/git"));
        assert_eq!(get(&none, "pip").unwrap(), home.join(".cache/pip"));
        assert_eq!(get(&none, "uv").unwrap(), home.join(".cache/uv"));
        assert_eq!(get(&none, "go-mod").unwrap(), home.join("go/pkg/mod"));
        assert_eq!(
            get(&none, "go-build").unwrap(),
            home.join(".cache/go-build")
        );
        assert_eq!(get(&none, "nuget").unwrap(), home.join(".nuget/packages"));
        assert_eq!(get(&none, "yarn").unwrap(), home.join(".cache/yarn"));
        assert_eq!(
            get(&none, "yarn-berry").unwrap(),
            home.join(".yarn/berry/cache")
        );
        assert_eq!(
            get(&none, "pnpm-store").unwrap(),
            home.join(".local/share/pnpm/store")
        );
        assert_eq!(get(&none, "pnpm").unwrap(), home.join(".cache/pnpm"));
        let env = |k: &str| match k {
            "CARGO_HOME" => Some("/opt/cargo".into()),
            "GOPATH" => Some("/gp:/other".into()),
            "GOCACHE" => Some("relative/ignored".into()),
            _ => None,
        };
        let o = cache_dirs(home, &env);
        assert_eq!(
            get(&o, "cargo-registry").unwrap(),
            PathBuf::from("/opt/cargo/registry")
        );
        assert_eq!(get(&o, "go-mod").unwrap(), PathBuf::from("/gp/pkg/mod"));
        assert_eq!(get(&o, "go-build").unwrap(), home.join(".cache/go-build"));
        // nested caches collapse into one overlay
        let env = |k: &str| (k == "GOMODCACHE").then(|| "/home/u/.cache/go-build/mod".into());
        let o = cache_dirs(home, &env);
        assert!(get(&o, "go-mod").is_none());
    }

    #[test]
    fn npmrc_keeps_registry_drops_auth() {
        let t = "registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken=SECRET1\n_auth = SECRET2\n@me:registry=https://npm.me/\n//npm.me/:_password=SECRET3\nemail=a@b\n; comment\nalways-auth=true\nstrict-ssl=false\n";
        let f = filtered_npmrc(t);
        assert!(!f.contains("SECRET"), "{f}");
        assert!(!f.contains("email"), "{f}");
        assert!(f.contains("registry=https://registry.npmjs.org/"));
        assert!(f.contains("@me:registry=https://npm.me/"));
        assert!(f.contains("strict-ssl=false"));
    }

    #[test]
    fn prepare_makes_the_folders_once_and_finds_the_lower_layers() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let (bundle, home) = (t.path().join("bundle"), t.path().join("home"));
        std::fs::create_dir_all(home.join(".npm")).unwrap();
        std::fs::create_dir_all(t.path().join("real-cargo/registry")).unwrap();
        std::os::unix::fs::symlink(t.path().join("real-cargo"), home.join(".cargo")).unwrap();
        std::fs::create_dir_all(home.join(".cache")).unwrap();
        std::fs::write(home.join(".cache/pip"), "a file, not a cache").unwrap();
        let dirs = cache_dirs(&home, &|_| None);
        let first = prepare(&bundle, &dirs).unwrap();
        // a folder removed since is made again; the others are left as they are
        std::fs::remove_dir(bundle.join("cache/.work/uv")).unwrap();
        let second = prepare(&bundle, &dirs).unwrap();
        assert_eq!(first, second);
        for c in &second {
            for d in [&c.upper, &c.work] {
                let m = std::fs::symlink_metadata(d).unwrap();
                assert!(m.is_dir(), "{}", d.display());
                assert_eq!(m.permissions().mode() & 0o777, 0o700, "{}", d.display());
            }
            let want = match c.tool {
                "npm" => Some(home.join(".npm")),
                "cargo-registry" => Some(t.path().join("real-cargo/registry")),
                _ => None,
            };
            assert_eq!(c.lower, want, "{}", c.tool);
        }
    }
}
