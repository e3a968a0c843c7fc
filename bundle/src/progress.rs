//! What a long open or verify is doing, for a progress line: the phases under way and
//! their counts, in process-wide atomics that the work updates (a relaxed add per object
//! or file) and a renderer reads (the command line's progress line, drawn only on a
//! terminal). Phases may run at once (a first open checks out while it copies the
//! history). Nothing here writes anywhere.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;

/// The phases, by number (0: none).
pub const PHASES: &[&str] = &[
    "",
    "reading objects",
    "copying objects",
    "checking out",
    "hashing files",
    "running probes",
];
pub const READING: usize = 1;
pub const COPYING: usize = 2;
pub const CHECKOUT: usize = 3;
pub const HASHING: usize = 4;
pub const PROBES: usize = 5;

struct Slot {
    active: AtomicBool,
    done: Arc<AtomicUsize>,
    total: AtomicU64,
}

fn state() -> &'static [Slot] {
    static S: OnceLock<Vec<Slot>> = OnceLock::new();
    S.get_or_init(|| {
        (0..PHASES.len())
            .map(|_| Slot {
                active: AtomicBool::new(false),
                done: Arc::new(AtomicUsize::new(0)),
                total: AtomicU64::new(0),
            })
            .collect()
    })
}

/// A phase under way; it ends when this is dropped.
#[must_use = "the phase ends when this is dropped"]
pub struct Phase(usize);

impl Drop for Phase {
    fn drop(&mut self) {
        if let Some(s) = state().get(self.0) {
            s.active.store(false, Ordering::Relaxed);
        }
    }
}

/// The phase started last (0: none), kept after it ended.
static LAST: AtomicUsize = AtomicUsize::new(0);

/// Start `phase` with `total` steps (0: not known), its count at 0.
pub fn phase(phase: usize, total: u64) -> Phase {
    LAST.store(phase, Ordering::Relaxed);
    if let Some(s) = state().get(phase) {
        s.done.store(0, Ordering::Relaxed);
        s.total.store(total, Ordering::Relaxed);
        s.active.store(true, Ordering::Relaxed);
    }
    Phase(phase)
}

/// `n` more steps done in `phase`.
pub fn inc(phase: usize, n: usize) {
    if let Some(s) = state().get(phase) {
        s.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// The phases under way: name, steps done and total (0: not known).
pub fn snapshot() -> Vec<(&'static str, u64, u64)> {
    state()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.active.load(Ordering::Relaxed))
        .map(|(i, s)| {
            (
                PHASES[i],
                s.done.load(Ordering::Relaxed) as u64,
                s.total.load(Ordering::Relaxed),
            )
        })
        .collect()
}

/// The phase started last, with its final counts, even when it has ended (for a line
/// that is due when the work ends before it was first drawn).
pub fn last() -> Option<(&'static str, u64, u64)> {
    let i = LAST.load(Ordering::Relaxed);
    let s = state().get(i).filter(|_| i > 0)?;
    Some((
        PHASES[i],
        s.done.load(Ordering::Relaxed) as u64,
        s.total.load(Ordering::Relaxed),
    ))
}

/// The count of one phase as gix's progress counter (its checkout counts files through
/// it, from several threads).
pub struct Counter(pub usize);

impl Counter {
    fn slot(&self) -> &'static Slot {
        &state()[self.0.min(PHASES.len() - 1)]
    }
}

impl gix::progress::Count for Counter {
    fn set(&self, step: usize) {
        self.slot().done.store(step, Ordering::Relaxed);
    }
    fn step(&self) -> usize {
        self.slot().done.load(Ordering::Relaxed)
    }
    fn inc_by(&self, step: usize) {
        self.slot().done.fetch_add(step, Ordering::Relaxed);
    }
    fn counter(&self) -> gix::progress::StepShared {
        self.slot().done.clone()
    }
}
