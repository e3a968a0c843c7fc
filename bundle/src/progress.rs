//! What a long open or verify is doing, for a progress line: the current phase and its
//! counts, in process-wide atomics that the work updates (a relaxed add per object or
//! file) and a renderer reads (the command line's progress line, drawn only on a
//! terminal). Nothing here writes anywhere.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

struct State {
    phase: AtomicUsize,
    done: Arc<AtomicUsize>,
    total: AtomicU64,
}

fn state() -> &'static State {
    static S: OnceLock<State> = OnceLock::new();
    S.get_or_init(|| State {
        phase: AtomicUsize::new(0),
        done: Arc::new(AtomicUsize::new(0)),
        total: AtomicU64::new(0),
    })
}

/// Enter `phase` with `total` steps (0: not known), its count at 0.
pub fn phase(phase: usize, total: u64) {
    let s = state();
    s.done.store(0, Ordering::Relaxed);
    s.total.store(total, Ordering::Relaxed);
    s.phase.store(phase, Ordering::Relaxed);
}

/// `n` more steps done in the current phase.
pub fn inc(n: usize) {
    state().done.fetch_add(n, Ordering::Relaxed);
}

/// The current phase's name (empty: none), steps done and total (0: not known).
pub fn snapshot() -> (&'static str, u64, u64) {
    let s = state();
    let p = s.phase.load(Ordering::Relaxed);
    (
        PHASES.get(p).copied().unwrap_or(""),
        s.done.load(Ordering::Relaxed) as u64,
        s.total.load(Ordering::Relaxed),
    )
}

/// The count of the current phase as gix's progress counter (its checkout counts files
/// through it, from several threads).
pub struct Counter;

impl gix::progress::Count for Counter {
    fn set(&self, step: usize) {
        state().done.store(step, Ordering::Relaxed);
    }
    fn step(&self) -> usize {
        state().done.load(Ordering::Relaxed)
    }
    fn inc_by(&self, step: usize) {
        inc(step)
    }
    fn counter(&self) -> gix::progress::StepShared {
        state().done.clone()
    }
}
