//! The progress line of a long `open` or `verify`: after a second (or
//! `CAPSULE_PROGRESS_DELAY_MS`), one line on stderr, redrawn in place ten times a second
//! with the phase and its counts (`capsule_bundle::progress`), erased when the work ends.
//! Drawn only when stderr is a terminal and the output is not `--json`.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A progress line being drawn (or not); erased and stopped on drop.
pub struct Line {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long the work runs before the line shows.
fn delay() -> Duration {
    std::env::var("CAPSULE_PROGRESS_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(1))
}

impl Line {
    /// Start the line, unless `json` or stderr is not a terminal.
    pub fn start(json: bool) -> Line {
        let stop = Arc::new(AtomicBool::new(false));
        if json || !std::io::stderr().is_terminal() {
            return Line { stop, thread: None };
        }
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || draw(&s))
            .ok();
        Line { stop, thread }
    }
}

/// The line for the phases under way (empty: none), e.g.
/// `capsule: reading objects 120345, checking out 812/868`.
fn render(phases: &[(&str, u64, u64)]) -> String {
    if phases.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = phases
        .iter()
        .map(|(phase, done, total)| {
            if *total > 0 {
                format!("{phase} {done}/{total}")
            } else {
                format!("{phase} {done}")
            }
        })
        .collect();
    format!("capsule: {}", parts.join(", "))
}

fn draw(stop: &AtomicBool) {
    let start = Instant::now();
    let wait = delay();
    let mut drawn = false;
    let mut last = String::new();
    let show = |line: &str| {
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r{line}\x1b[K");
        let _ = e.flush();
    };
    while !stop.load(Ordering::Relaxed) {
        std::thread::park_timeout(Duration::from_millis(100));
        if stop.load(Ordering::Relaxed) || start.elapsed() < wait {
            continue;
        }
        let line = render(&capsule_bundle::progress::snapshot());
        if !line.is_empty() && line != last {
            show(&line);
            drawn = true;
            last = line;
        }
    }
    // the work ended after the delay but before the first redraw: its last state, once
    if !drawn && start.elapsed() >= wait {
        if let Some(l) = capsule_bundle::progress::last() {
            show(&render(&[l]));
            drawn = true;
        }
    }
    if drawn {
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[K");
        let _ = e.flush();
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
