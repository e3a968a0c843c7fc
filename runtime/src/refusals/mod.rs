//! What the sandbox refused, listed: the [`Refusal`] model, the per-exec [`Collector`]
//! (deduplicated with counts, bounded), the stderr lines (live or after the command), the
//! exec record's `refusals` array and the capsule's `refusals.jsonl`.
//!
//! Sources feed one [`Collector`] per exec: the seccomp supervisor (refused syscalls,
//! `crate::linux::notify`), the allowlist proxy (refused connects, `crate::net::proxy`).
//! A refusal is identified by its kind, target and program; a repeat only counts. At most
//! [`MAX_DISTINCT`] distinct refusals are kept per exec: the first half of them as they
//! came, and the latest of the rest (a newer one pushes the oldest of those out); repeats
//! of kept ones still count, and every refusal not kept (pushed out, or a repeat of one
//! pushed out) is counted in `dropped`, between the two halves. So a storm of refusals
//! keeps the record (and the log) bounded, and never hides the first ones, nor the last.
//!
//! What is never in it: file contents, environment values. A target is the name the
//! sandbox saw (a path as the task named it, a syscall's name, `host:port`); targets and
//! programs are the task's own text, so every human-readable line passes through
//! [`capsule_bundle::escape`]. JSON keeps them faithful.

pub mod listing;
pub mod log;

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::SystemTime;

/// Distinct refusals kept per exec.
pub const MAX_DISTINCT: usize = 256;
/// Longest target or program kept (bytes; longer ones are cut at a character boundary).
pub const MAX_TEXT: usize = 512;

/// What was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Reading or listing a hidden path.
    Read,
    /// Writing, creating, renaming, removing or changing the mode of a path outside the
    /// writable paths.
    Write,
    /// Executing a program the policy blocks.
    Exec,
    /// A system call the seccomp filter refuses.
    Syscall,
    /// A network connection (the allowlist proxy, or a connect refused inside).
    Connect,
    /// A socket the sandbox refuses to create.
    Socket,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Exec => "exec",
            Kind::Syscall => "syscall",
            Kind::Connect => "connect",
            Kind::Socket => "socket",
        }
    }
}

/// One distinct refusal of an exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub kind: Kind,
    /// What was refused, as the sandbox named it: a path, a syscall's name, `host:port`.
    pub target: String,
    /// The program that asked (its `comm`; for a connect the proxy refused, the process
    /// holding the client's socket: `crate::net::owner`), empty when unknown.
    #[serde(default)]
    pub program: String,
    /// Its pid as the sandbox sees it (the first time), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// How many times (repeats are counted, not listed).
    pub count: u64,
    /// The flag that would allow it, when one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
    /// Why, in a few words, when the kind alone does not say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For a secret's placeholder sent to a host it is not for: the header (or `request
    /// target`) it was in. Never the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

/// One refusal as a source reports it (count 1).
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    pub target: String,
    pub program: String,
    pub pid: Option<i32>,
    pub grant: Option<String>,
    pub reason: Option<String>,
    pub header: Option<String>,
}

impl Refusal {
    /// The line said on stderr (escaped for a terminal), without `capsule: `.
    pub fn line(&self) -> String {
        use capsule_bundle::escape::name;
        let mut s = format!(
            "refused {} {}",
            self.kind.as_str(),
            name(self.target.as_bytes())
        );
        if !self.program.is_empty() {
            s.push_str(&format!(" ({})", name(self.program.as_bytes())));
        }
        if let Some(r) = &self.reason {
            s.push_str(&format!(": {}", name(r.as_bytes())));
        }
        if self.count > 1 {
            s.push_str(&format!(", {} times", self.count));
        }
        if let Some(g) = &self.grant {
            s.push_str(&format!("; to allow: {}", name(g.as_bytes())));
        }
        s
    }
}

/// When the lines are said on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Say {
    /// After the command, one line per distinct refusal.
    #[default]
    After,
    /// As they happen (the first of each), then a count for those repeated.
    Live,
    /// Not at all (`--quiet-refusals`); the record and the log still have them.
    Quiet,
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

type Key = (Kind, String, String);

/// How many of the first distinct refusals are always kept ([`MAX_DISTINCT`] less the
/// latest ones).
pub const KEEP_FIRST: usize = MAX_DISTINCT / 2;

/// A kept refusal: what it is, when first and last seen.
type Kept = (Refusal, SystemTime, SystemTime);

/// Where a kept refusal is.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// Index into `first`.
    First(usize),
    /// Sequence number among the latest (the front of `latest` is `latest_front`).
    Latest(u64),
}

#[derive(Default)]
struct State {
    by_key: HashMap<Key, Slot>,
    /// The first [`KEEP_FIRST`] distinct refusals.
    first: Vec<Kept>,
    /// The latest distinct ones after them, oldest first.
    latest: std::collections::VecDeque<(Key, Kept)>,
    /// The sequence number of the front of `latest`.
    latest_front: u64,
    /// Refusals not kept (counted with their repeats).
    dropped: u64,
}

impl State {
    fn get_mut(&mut self, slot: Slot) -> Option<&mut Kept> {
        match slot {
            Slot::First(i) => self.first.get_mut(i),
            Slot::Latest(seq) => {
                let i = seq.checked_sub(self.latest_front)?;
                self.latest.get_mut(i as usize).map(|(_, k)| k)
            }
        }
    }

    fn kept(&self) -> impl Iterator<Item = &Kept> {
        self.first.iter().chain(self.latest.iter().map(|(_, k)| k))
    }
}

/// The refusals of one exec, shared by its sources (threads).
#[derive(Default)]
pub struct Collector {
    say: Say,
    state: Mutex<State>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").field("say", &self.say).finish()
    }
}

impl Collector {
    pub fn new(say: Say) -> Collector {
        Collector {
            say,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        }
    }

    /// Count one refusal; said at once when live and new.
    pub fn add(&self, e: Event) {
        let now = SystemTime::now();
        let key = (e.kind, cut(e.target), cut(e.program));
        let mut st = self.lock();
        if let Some(&slot) = st.by_key.get(&key) {
            if let Some(r) = st.get_mut(slot) {
                r.0.count = r.0.count.saturating_add(1);
                r.2 = now;
            }
            return;
        }
        let r = Refusal {
            kind: key.0,
            target: key.1.clone(),
            program: key.2.clone(),
            pid: e.pid,
            count: 1,
            // a grant naming a path cut short would grant something else
            grant: e.grant.filter(|g| g.len() <= 2 * MAX_TEXT),
            reason: e.reason,
            header: e.header,
        };
        if self.say == Say::Live && st.first.len() < KEEP_FIRST {
            say(&r.line());
        }
        if st.first.len() < KEEP_FIRST {
            let i = st.first.len();
            st.first.push((r, now, now));
            st.by_key.insert(key, Slot::First(i));
            return;
        }
        if st.latest.len() >= MAX_DISTINCT - KEEP_FIRST {
            // the oldest of the latest makes room: counted, no longer kept
            if let Some((old, k)) = st.latest.pop_front() {
                st.by_key.remove(&old);
                st.dropped = st.dropped.saturating_add(k.0.count);
                st.latest_front += 1;
            }
        }
        let seq = st.latest_front + st.latest.len() as u64;
        st.latest.push_back((key.clone(), (r, now, now)));
        st.by_key.insert(key, Slot::Latest(seq));
    }

    /// Is this refusal listed already (a repeat would only count)?
    pub fn knows(&self, kind: Kind, target: &str, program: &str) -> bool {
        let key = (kind, cut(target.to_string()), cut(program.to_string()));
        self.lock().by_key.contains_key(&key)
    }

    /// The distinct refusals kept, in the order first seen (the first ones, then the
    /// latest; those dropped were between them).
    pub fn refusals(&self) -> Vec<Refusal> {
        self.lock().kept().map(|r| r.0.clone()).collect()
    }

    /// Refusals not kept (pushed out of the latest ones, with their repeats).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Where the dropped refusals were: after this many of [`Collector::refusals`].
    pub fn dropped_after(&self) -> usize {
        self.lock().first.len()
    }

    /// Say on stderr what the command was refused (after it ended): every refusal
    /// (after), or those repeated since they were said (live).
    pub fn say_after(&self) {
        let st = self.lock();
        let first = st.first.len();
        let mut said_drop = false;
        for (i, r) in st.kept().enumerate() {
            if i == first && st.dropped > 0 {
                said_drop = true;
                drop_line(st.dropped, self.say);
            }
            match self.say {
                Say::Quiet => return,
                Say::After => say(&r.0.line()),
                // live: those not said yet (past the first), and repeats
                Say::Live if i >= first || r.0.count > 1 => say(&r.0.line()),
                Say::Live => {}
            }
        }
        if st.dropped > 0 && !said_drop {
            drop_line(st.dropped, self.say);
        }
    }

    /// Every distinct refusal kept as a log line, with the times it was first and last
    /// seen; the first of the latest says how many were dropped before it.
    pub fn lines(&self, exec_started_at: &str) -> Vec<log::Line> {
        let st = self.lock();
        let first = st.first.len();
        st.kept()
            .enumerate()
            .map(|(i, (r, f, l))| {
                let mut line = log::Line::new(r.clone(), *f, *l, exec_started_at);
                if i == first && st.dropped > 0 {
                    line.omitted_before = Some(st.dropped);
                }
                line
            })
            .collect()
    }

    /// Append every distinct refusal, with the times it was first and last seen, to the
    /// capsule's log.
    pub fn append_to(&self, log: &std::path::Path, exec_started_at: &str) -> std::io::Result<()> {
        let empty = {
            let st = self.lock();
            st.first.is_empty() && st.dropped == 0
        };
        if empty {
            return Ok(());
        }
        let lines = self.lines(exec_started_at);
        let left_out = log::append(log, &lines)?;
        if left_out > 0 && self.say != Say::Quiet {
            say(&format!(
                "{left_out} refusals not written to {} (at most {} KiB per exec: the first and the last are)",
                capsule_bundle::escape::path(log),
                log::MAX_APPEND >> 10
            ));
        }
        Ok(())
    }
}

fn drop_line(n: u64, how: Say) {
    if how != Say::Quiet {
        say(&format!(
            "... {n} more refusals here not listed (at most {MAX_DISTINCT} distinct ones per exec: the first {KEEP_FIRST} and the latest)"
        ));
    }
}

/// One line on stderr, written at once (one `write`, so it does not interleave with
/// another line of ours).
fn say(line: &str) {
    let mut l = String::with_capacity(line.len() + 10);
    l.push_str("capsule: ");
    l.push_str(line);
    l.push('\n');
    let _ = std::io::stderr().lock().write_all(l.as_bytes());
}

/// A path as refusals name it: its bytes when they are UTF-8, else escaped (the record
/// is JSON text; the terminal escapes every target again when it says it).
pub fn path_target(p: &std::path::Path) -> String {
    p.to_str()
        .map(str::to_string)
        .unwrap_or_else(|| capsule_bundle::escape::path(p))
}

/// The grant that would allow reaching `host:port` through the proxy.
pub fn connect_grant(target: &str) -> String {
    format!("--allow-host {target}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: Kind, target: &str, program: &str) -> Event {
        Event {
            kind,
            target: target.into(),
            program: program.into(),
            pid: Some(2),
            grant: None,
            reason: None,
            header: None,
        }
    }

    #[test]
    fn counts_repeats_and_bounds_distinct() {
        let c = Collector::new(Say::Quiet);
        for _ in 0..1000 {
            c.add(ev(Kind::Syscall, "keyctl", "keyctl"));
        }
        c.add(ev(Kind::Syscall, "keyctl", "python3"));
        let r = c.refusals();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].count, 1000);
        assert_eq!(r[1].count, 1);
        for i in 0..(MAX_DISTINCT * 2) {
            c.add(ev(Kind::Read, &format!("/x/{i}"), "cat"));
        }
        let r = c.refusals();
        assert_eq!(r.len(), MAX_DISTINCT);
        assert_eq!(c.dropped(), (MAX_DISTINCT + 2) as u64);
        // the first ones kept, and the latest
        assert_eq!(r[0].target, "keyctl");
        assert_eq!(r[0].count, 1000);
        assert_eq!(
            r.last().unwrap().target,
            format!("/x/{}", MAX_DISTINCT * 2 - 1)
        );
        assert_eq!(c.dropped_after(), KEEP_FIRST);
        // a repeat of a kept latest one counts; of a dropped one, comes back as latest
        c.add(ev(
            Kind::Read,
            &format!("/x/{}", MAX_DISTINCT * 2 - 1),
            "cat",
        ));
        assert_eq!(c.refusals().last().unwrap().count, 2);
        let lines = c.lines("x");
        assert_eq!(lines[KEEP_FIRST].omitted_before, Some(c.dropped()));
        assert!(lines[..KEEP_FIRST]
            .iter()
            .all(|l| l.omitted_before.is_none()));
    }

    #[test]
    fn line_is_escaped() {
        let r = Refusal {
            kind: Kind::Connect,
            target: "evil\x1b[2J.com:443".into(),
            program: "cu\u{202e}rl".into(),
            pid: None,
            count: 3,
            grant: Some(connect_grant("evil\x1b[2J.com:443")),
            reason: Some("not on the allowlist".into()),
            header: None,
        };
        let l = r.line();
        assert!(!l.contains('\x1b') && !l.contains('\u{202e}'), "{l}");
        assert_eq!(
            l,
            "refused connect evil\\x1b[2J.com:443 (cu\\u{202e}rl): not on the allowlist, 3 times; to allow: --allow-host evil\\x1b[2J.com:443"
        );
    }

    #[test]
    fn long_targets_are_cut() {
        let c = Collector::new(Say::Quiet);
        c.add(ev(Kind::Write, &"é".repeat(2000), "sh"));
        let t = &c.refusals()[0].target;
        assert!(t.len() <= MAX_TEXT + '…'.len_utf8(), "{}", t.len());
    }
}
