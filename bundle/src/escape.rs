//! Showing hostile text on a terminal: names and content that a spec author or a sandboxed
//! task wrote (file names in the workspace or the home layer, symlink targets, a file's
//! lines in a diff, a spec's text, error messages quoting them) are passed through here
//! before any human-readable output, so that none can move the cursor, clear the screen,
//! retitle the terminal, forge a line of output or look like another name.
//!
//! Escaped, visibly:
//! - C0 controls (U+0000–U+001F) and DEL: `\n`, `\r`, `\t`, `\e`… are shown as `\n`, `\r`,
//!   `\t` and `\xNN` (ESC is `\x1b`);
//! - C1 controls (U+0080–U+009F; a terminal may read U+009B as CSI): `\u{9b}`;
//! - bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E,
//!   U+2066–U+2069), which can make a name read differently from what it is, and the
//!   invisible ones that make two names look alike (zero-width U+200B–U+200D, U+2060–U+2064,
//!   U+FEFF) or break a line in some viewers (U+2028, U+2029): `\u{202e}`;
//! - bytes that are not UTF-8: `\xNN`.
//!
//! [`name`] also escapes the backslash (`\\`), so two different names never look alike:
//! the form is unambiguous. [`text_line`] keeps backslashes (file content, a spec's lines:
//! `printf 'a\n'` reads as written) and tabs; what it escapes is still shown.
//!
//! JSON output (`--json`, `events.jsonl`) is for programs and stays faithful: serde_json
//! already escapes U+0000–U+001F, and everything else is kept as is. The one exception is a
//! name that is not UTF-8, which JSON cannot carry: [`serialize_path`] writes it in the
//! [`name`] form (valid UTF-8 names are written unchanged).

use std::ffi::OsStr;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Is `c` a character that must never reach a terminal raw (beyond C0 and DEL)?
fn is_dangerous(c: char) -> bool {
    matches!(c,
        '\u{80}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}'
        | '\u{feff}')
}

fn push_char(out: &mut String, c: char, keep_backslash: bool, keep_tab: bool) {
    match c {
        '\\' if !keep_backslash => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' if keep_tab => out.push('\t'),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if is_dangerous(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

fn escape(bytes: &[u8], keep_backslash: bool, keep_tab: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c, keep_backslash, keep_tab);
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A name (file name, path, symlink target, capsule name) as one safe, unambiguous line.
pub fn name(bytes: &[u8]) -> String {
    escape(bytes, false, false)
}

/// [`name`] of a path.
pub fn path(p: &Path) -> String {
    name(p.as_os_str().as_bytes())
}

/// [`name`] of an `OsStr`.
pub fn os(s: &OsStr) -> String {
    name(s.as_bytes())
}

/// One line of content (no newline expected; one inside is escaped): backslashes and
/// tabs kept, every other control escaped.
pub fn text_line(s: &str) -> String {
    escape(s.as_bytes(), true, true)
}

/// Text of several lines (an error message, a probe's output): each line as
/// [`text_line`], joined again with `\n`. A `\r` never returns to the start of a line.
pub fn text(s: &str) -> String {
    s.split('\n').map(text_line).collect::<Vec<_>>().join("\n")
}

/// Does `s` hold anything [`text_line`] would escape?
pub fn needs_escape(s: &str) -> bool {
    s.chars()
        .any(|c| (c as u32) < 0x20 && c != '\t' || c == '\u{7f}' || is_dangerous(c))
}

/// Serialize a path for JSON: as is when it is UTF-8, else in the [`name`] form.
pub fn serialize_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    match p.to_str() {
        Some(t) => s.serialize_str(t),
        None => s.serialize_str(&path(p)),
    }
}

/// [`serialize_path`] for an optional path.
pub fn serialize_opt_path<S: serde::Serializer>(
    p: &Option<std::path::PathBuf>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => serialize_path(p, s),
        None => s.serialize_none(),
    }
}

/// [`serialize_path`] for a list of paths.
pub fn serialize_paths<S: serde::Serializer>(
    ps: &[std::path::PathBuf],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    struct P<'a>(&'a Path);
    impl serde::Serialize for P<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            serialize_path(self.0, s)
        }
    }
    let mut seq = s.serialize_seq(Some(ps.len()))?;
    for p in ps {
        seq.serialize_element(&P(p))?;
    }
    seq.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_sent() {
        assert_eq!(name(b"a\n+ added: ~/.bashrc"), "a\\n+ added: ~/.bashrc");
        assert_eq!(name(b"\x1b[2Jx\r\t\x7f\0"), "\\x1b[2Jx\\r\\t\\x7f\\x00");
        assert_eq!(name("a\u{9b}31m".as_bytes()), "a\\u{9b}31m");
        assert_eq!(name("x\u{202e}txt.exe".as_bytes()), "x\\u{202e}txt.exe");
        assert_eq!(
            name("\u{2066}\u{2069}\u{200f}".as_bytes()),
            "\\u{2066}\\u{2069}\\u{200f}"
        );
        assert_eq!(name(b"bad\xff\xfe"), "bad\\xff\\xfe");
        assert_eq!(name(".bash\u{200b}rc".as_bytes()), ".bash\\u{200b}rc");
        assert_eq!(
            name("a\u{2028}b\u{feff}".as_bytes()),
            "a\\u{2028}b\\u{feff}"
        );
        assert_eq!(name(b"back\\slash"), "back\\\\slash");
        // two different names never look alike
        assert_ne!(name(b"a\\x1b"), name(b"a\x1b"));
        // ordinary names and non-ASCII letters are untouched
        assert_eq!(
            name("~/.config/gr\u{fc}n é".as_bytes()),
            "~/.config/gr\u{fc}n é"
        );
    }

    #[test]
    fn text_keeps_tabs_and_backslashes() {
        assert_eq!(text_line("\tprintf 'a\\n'"), "\tprintf 'a\\n'");
        assert_eq!(text_line("evil\rgood"), "evil\\rgood");
        assert_eq!(text_line("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
        assert_eq!(text("one\ntwo\x1b[A"), "one\ntwo\\x1b[A");
        assert!(needs_escape("a\x1b") && needs_escape("\u{85}") && !needs_escape("a\tb"));
    }

    #[test]
    fn json_paths_are_faithful_when_utf8() {
        #[derive(serde::Serialize)]
        struct T {
            #[serde(serialize_with = "serialize_path")]
            p: std::path::PathBuf,
        }
        let v = serde_json::to_string(&T {
            p: "a\u{202e}\n".into(),
        })
        .unwrap();
        assert_eq!(v, "{\"p\":\"a\u{202e}\\n\"}");
        let p = std::path::PathBuf::from(OsStr::from_bytes(b"x\xff"));
        let v = serde_json::to_string(&T { p }).unwrap();
        assert_eq!(v, "{\"p\":\"x\\\\xff\"}");
    }
}
