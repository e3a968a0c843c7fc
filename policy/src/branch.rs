//! Branch patterns of `protected_branches`.
//!
//! Patterns are matched against the short branch name (`refs/heads/` removed), with
//! `fnmatch` rules as Kitsoki's Python implementation applies them:
//!
//! * `*` matches any run of characters, **including `/`**: `integration/*` matches
//!   `integration/x` *and* `integration/x/y`. A nested branch under a protected namespace is
//!   still that namespace's branch; when in doubt the gate protects more, not less.
//! * `?` matches exactly one character (also `/`).
//! * `[abc]`, `[a-z]`, `[!x]` match one character of (or not of) a set.
//! * Everything else matches itself; matching is case-sensitive, like git ref names.

/// Does `branch` match `pattern`?
pub fn matches(pattern: &str, branch: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = branch.chars().collect();
    glob(&p, &s)
}

/// The first pattern of `patterns` that `branch` matches.
pub fn first_match<'a>(patterns: &'a [String], branch: &str) -> Option<&'a str> {
    patterns
        .iter()
        .find(|p| matches(p, branch))
        .map(String::as_str)
}

/// Iterative glob with single-star backtracking (linear in practice, no recursion).
fn glob(p: &[char], s: &[char]) -> bool {
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                '[' => {
                    if let Some((ok, next)) = class(p, pi, s[si]) {
                        if ok {
                            pi = next;
                            si += 1;
                            continue;
                        }
                    } else if s[si] == '[' {
                        // an unclosed `[` is a literal
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[si] {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// Match `c` against the class starting at `p[start] == '['`. Returns (matched, index after
/// the class), or None when the class is not closed.
fn class(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = i < p.len() && (p[i] == '!' || p[i] == '^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns() {
        let cases = [
            ("main", "main", true),
            ("main", "main2", false),
            ("main", "mai", false),
            ("main", "Main", false),
            ("integration/*", "integration/x", true),
            ("integration/*", "integration/x/y", true),
            ("integration/*", "integration", false),
            ("integration/*", "integration/", true),
            ("integration/*", "feature/integration/x", false),
            ("staging/*", "staging-x", false),
            ("release-?", "release-1", true),
            ("release-?", "release-10", false),
            ("release-[0-9]*", "release-1.2", true),
            ("release-[0-9]*", "release-x", false),
            ("[!f]*", "feature", false),
            ("[!f]*", "main", true),
            ("a[", "a[", true),
            ("*", "anything/at/all", true),
            ("*-wip", "a-b-wip", true),
            ("*-wip", "a-b-wip2", false),
        ];
        for (p, b, want) in cases {
            assert_eq!(matches(p, b), want, "pattern {p:?} branch {b:?}");
        }
    }
}
