//! A small SBPL reader: s-expressions (lists, symbols, `"strings"`, `#"regex strings"`,
//! `;` comments) turned back into the typed model of [`crate::sbpl`]. It exists so every
//! generated profile can be read back (round trip) and so the linter and evaluator work
//! on what was actually written, not on what the generator meant to write.

use crate::sbpl::{Action, Filter, Item, Modifier, Operation, Profile, Rule, Str};

/// A parse error with the 1-based line and column where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile line {line}, column {column}: {msg}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub msg: String,
}

/// An s-expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sexp {
    List(Vec<Sexp>),
    Symbol(String),
    Str(String),
    /// `#"..."`
    RegexStr(String),
}

enum Tok {
    Open,
    Close,
    Sym(String),
    Str(String),
    Regex(String),
    Comment(String),
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    col: usize,
}

impl<'a> Lexer<'a> {
    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            column: self.col,
            msg: msg.into(),
        }
    }
    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }
    fn string(&mut self, line: usize, column: usize) -> Result<String, ParseError> {
        // opening quote already consumed; an unterminated string is reported where it began
        let mut s = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(ParseError {
                        line,
                        column,
                        msg: "unterminated string".into(),
                    })
                }
                Some('"') => return Ok(s),
                Some('\\') => match self.bump() {
                    Some('\\') => s.push('\\'),
                    Some('"') => s.push('"'),
                    Some(c) => return Err(self.err(format!("unknown escape \\{c}"))),
                    None => return Err(self.err("unterminated string")),
                },
                Some(c) => s.push(c),
            }
        }
    }
    fn next(&mut self) -> Result<Option<(Tok, usize, usize)>, ParseError> {
        loop {
            let (line, col) = (self.line, self.col);
            let Some(&c) = self.chars.peek() else {
                return Ok(None);
            };
            match c {
                c if c.is_whitespace() => {
                    self.bump();
                }
                ';' => {
                    self.bump();
                    let mut s = String::new();
                    while let Some(&c) = self.chars.peek() {
                        if c == '\n' {
                            break;
                        }
                        s.push(c);
                        self.bump();
                    }
                    return Ok(Some((Tok::Comment(s), line, col)));
                }
                '(' => {
                    self.bump();
                    return Ok(Some((Tok::Open, line, col)));
                }
                ')' => {
                    self.bump();
                    return Ok(Some((Tok::Close, line, col)));
                }
                '"' => {
                    self.bump();
                    return Ok(Some((Tok::Str(self.string(line, col)?), line, col)));
                }
                '#' => {
                    self.bump();
                    if self.chars.peek() == Some(&'"') {
                        self.bump();
                        return Ok(Some((Tok::Regex(self.string(line, col)?), line, col)));
                    }
                    let mut s = String::from("#");
                    while let Some(&c) = self.chars.peek() {
                        if c.is_whitespace() || c == '(' || c == ')' || c == '"' || c == ';' {
                            break;
                        }
                        s.push(c);
                        self.bump();
                    }
                    return Ok(Some((Tok::Sym(s), line, col)));
                }
                _ => {
                    let mut s = String::new();
                    while let Some(&c) = self.chars.peek() {
                        if c.is_whitespace() || c == '(' || c == ')' || c == '"' || c == ';' {
                            break;
                        }
                        s.push(c);
                        self.bump();
                    }
                    return Ok(Some((Tok::Sym(s), line, col)));
                }
            }
        }
    }
}

/// A top-level form (or a comment between forms) and where it starts (line, column).
pub type Located = (Result<Sexp, String>, usize, usize);

/// Read the top-level forms of `text`; comments between forms are kept (as
/// `Err(comment)`), comments inside a form are dropped.
pub fn read_sexps(text: &str) -> Result<Vec<Located>, ParseError> {
    let mut lx = Lexer {
        chars: text.chars().peekable(),
        line: 1,
        col: 1,
    };
    let mut out = Vec::new();
    // stack of open lists with their start position
    let mut stack: Vec<(Vec<Sexp>, usize, usize)> = Vec::new();
    while let Some((tok, line, col)) = lx.next()? {
        let atom = match tok {
            Tok::Open => {
                stack.push((Vec::new(), line, col));
                continue;
            }
            Tok::Close => {
                let Some((items, l, c)) = stack.pop() else {
                    return Err(ParseError {
                        line,
                        column: col,
                        msg: "unbalanced ')'".into(),
                    });
                };
                match stack.last_mut() {
                    Some(parent) => {
                        parent.0.push(Sexp::List(items));
                        continue;
                    }
                    None => {
                        out.push((Ok(Sexp::List(items)), l, c));
                        continue;
                    }
                }
            }
            Tok::Comment(c) => {
                if stack.is_empty() {
                    out.push((Err(c), line, col));
                }
                continue;
            }
            Tok::Sym(s) => Sexp::Symbol(s),
            Tok::Str(s) => Sexp::Str(s),
            Tok::Regex(s) => Sexp::RegexStr(s),
        };
        match stack.last_mut() {
            Some(parent) => parent.0.push(atom),
            None => out.push((Ok(atom), line, col)),
        }
    }
    if let Some((_, l, c)) = stack.last() {
        return Err(ParseError {
            line: *l,
            column: *c,
            msg: "unclosed '('".into(),
        });
    }
    Ok(out)
}

fn head(items: &[Sexp]) -> Option<&str> {
    match items.first() {
        Some(Sexp::Symbol(s)) => Some(s),
        _ => None,
    }
}

fn describe(s: &Sexp) -> String {
    match s {
        Sexp::List(items) => {
            let parts: Vec<String> = items.iter().map(describe).collect();
            format!("({})", parts.join(" "))
        }
        Sexp::Symbol(s) => s.clone(),
        Sexp::Str(s) => format!("{s:?}"),
        Sexp::RegexStr(s) => format!("#{s:?}"),
    }
}

fn to_str(s: &Sexp) -> Option<Str> {
    match s {
        Sexp::Str(v) => Some(Str::Lit(v.clone())),
        Sexp::List(items) if head(items) == Some("param") && items.len() == 2 => match &items[1] {
            Sexp::Str(n) => Some(Str::Param(n.clone())),
            _ => None,
        },
        _ => None,
    }
}

fn to_filter(s: &Sexp) -> Filter {
    let other = || Filter::Other(describe(s));
    let Sexp::List(items) = s else {
        return other();
    };
    let args = &items[1.min(items.len())..];
    let one_str = |f: fn(Str) -> Filter| -> Filter {
        match args {
            [a] => to_str(a).map(f).unwrap_or_else(other),
            _ => other(),
        }
    };
    match head(items) {
        Some("literal") => one_str(Filter::Literal),
        Some("subpath") => one_str(Filter::Subpath),
        Some("global-name") => one_str(Filter::GlobalName),
        Some("regex") => match args {
            [Sexp::RegexStr(r)] | [Sexp::Str(r)] => Filter::Regex(r.clone()),
            _ => other(),
        },
        Some("require-all") => Filter::RequireAll(args.iter().map(to_filter).collect()),
        Some("require-any") => Filter::RequireAny(args.iter().map(to_filter).collect()),
        Some("require-not") => match args {
            [f] => Filter::RequireNot(Box::new(to_filter(f))),
            _ => other(),
        },
        Some("target") => match args {
            [Sexp::Symbol(t)] => Filter::Target(t.clone()),
            _ => other(),
        },
        Some(side @ ("remote" | "local")) => match args {
            [Sexp::Symbol(k), Sexp::Str(a)] if k == "ip" => {
                if side == "remote" {
                    Filter::RemoteIp(a.clone())
                } else {
                    Filter::LocalIp(a.clone())
                }
            }
            [Sexp::Symbol(k), f @ Sexp::List(_)] if k == "unix-socket" => {
                let inner = Box::new(to_filter(f));
                if side == "remote" {
                    Filter::RemoteUnixSocket(inner)
                } else {
                    Filter::LocalUnixSocket(inner)
                }
            }
            _ => other(),
        },
        _ => other(),
    }
}

fn to_modifier(items: &[Sexp]) -> Modifier {
    match &items[1..] {
        [Sexp::Symbol(m), Sexp::Str(t)] if m == "message" => Modifier::Message(t.clone()),
        [Sexp::Symbol(m)] if m == "report" => Modifier::Report,
        [Sexp::Symbol(m)] if m == "no-sandbox" => Modifier::NoSandbox,
        _ => Modifier::Other(describe(&Sexp::List(items.to_vec()))),
    }
}

/// Parse a profile into the typed model. Unknown operations, filters, modifiers and
/// top-level forms are kept (as `Other`) for the linter; only malformed text is an error.
pub fn parse(text: &str) -> Result<Profile, ParseError> {
    let mut items = Vec::new();
    for (form, line, column) in read_sexps(text)? {
        let err = |msg: String| ParseError { line, column, msg };
        let form = match form {
            Err(comment) => {
                items.push(Item::Comment(
                    comment.strip_prefix(' ').unwrap_or(&comment).into(),
                ));
                continue;
            }
            Ok(f) => f,
        };
        let Sexp::List(list) = &form else {
            return Err(err(format!(
                "expected a list at top level, found {}",
                describe(&form)
            )));
        };
        match head(list) {
            Some("version") => match &list[1..] {
                [Sexp::Symbol(n)] => {
                    let v = n
                        .parse()
                        .map_err(|_| err(format!("bad version number {n:?}")))?;
                    items.push(Item::Version(v));
                }
                _ => return Err(err("(version N) takes one number".into())),
            },
            Some(a @ ("allow" | "deny")) => {
                let action = if a == "allow" {
                    Action::Allow
                } else {
                    Action::Deny
                };
                let mut rule = Rule {
                    action,
                    operations: Vec::new(),
                    filters: Vec::new(),
                    modifiers: Vec::new(),
                };
                for arg in &list[1..] {
                    match arg {
                        Sexp::Symbol(op) => rule.operations.push(Operation(op.clone())),
                        Sexp::List(l) if head(l) == Some("with") => {
                            rule.modifiers.push(to_modifier(l))
                        }
                        other => rule.filters.push(to_filter(other)),
                    }
                }
                if rule.operations.is_empty() {
                    return Err(err(format!("({a} ...) names no operation")));
                }
                items.push(Item::Rule(rule));
            }
            Some(other) => items.push(Item::Other(other.to_string())),
            None => return Err(err(format!("form {} has no head", describe(&form)))),
        }
    }
    Ok(Profile { items })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_hand_written_profile() {
        let p = parse(
            "(version 1)\n; hi\n(deny default (with message \"n\"))\n(allow file-read* (subpath (param \"A\")) (regex #\"^/x\"))\n(import \"system.sb\")\n(allow foo (bar 1))",
        )
        .unwrap();
        assert_eq!(p.items.len(), 6);
        assert_eq!(p.items[1], Item::Comment("hi".into()));
        assert_eq!(p.items[4], Item::Other("import".into()));
        let Item::Rule(r) = &p.items[5] else { panic!() };
        assert_eq!(r.filters, vec![Filter::Other("(bar 1)".into())]);
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse("(version 1)\n(allow file-read* (subpath \"a)\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse("(version 1))").unwrap_err();
        assert_eq!((e.line, e.column), (1, 12));
        assert!(parse("(allow)").is_err());
    }
}
