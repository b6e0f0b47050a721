//! Progress on stderr for long commands, only when a person is watching (stderr is a
//! terminal); scripts and pipes see nothing. Counted progress stays hidden for its first
//! second, so quick runs on small files do not flash a bar.

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long counted progress waits before drawing.
const REVEAL_AFTER: Duration = Duration::from_secs(1);
/// Look at the clock once per this many items, not on every one.
const CLOCK_EVERY: u64 = 1024;

/// A progress bar or spinner, or nothing when stderr is not a terminal.
pub struct Progress(Option<Shown>);

struct Shown {
    pb: ProgressBar,
    start: Instant,
    hidden: Cell<bool>,
    since_clock: Cell<u64>,
}

impl Progress {
    /// A bar counting up to `len` items.
    pub fn bar(len: u64, what: &str) -> Progress {
        let template = "{msg} [{bar:40}] {human_pos}/{human_len} ({elapsed}, eta {eta})";
        Progress::counted(Some(len), template, what)
    }

    /// A spinner with a running count, for work of unknown size (stdin).
    pub fn counter(what: &str) -> Progress {
        Progress::counted(None, "{spinner} {msg} {human_pos} ({elapsed})", what)
    }

    /// A spinner for one long call that reports nothing on the way (a check). Drawn at once:
    /// there are no items to wait for, and it is cleared when the call returns.
    pub fn spinner(what: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let pb = ProgressBar::new_spinner()
            .with_style(style)
            .with_message(what.to_string());
        pb.enable_steady_tick(Duration::from_millis(120));
        Progress(Some(Shown {
            pb,
            start: Instant::now(),
            hidden: Cell::new(false),
            since_clock: Cell::new(0),
        }))
    }

    fn counted(len: Option<u64>, template: &str, what: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let style = ProgressStyle::with_template(template)
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        // Built hidden: styling a bar that draws to stderr would draw it once already.
        let pb = ProgressBar::with_draw_target(len, ProgressDrawTarget::hidden())
            .with_style(style)
            .with_message(what.to_string());
        Progress(Some(Shown {
            pb,
            start: Instant::now(),
            hidden: Cell::new(true),
            since_clock: Cell::new(0),
        }))
    }

    /// Count `n` more items done.
    #[inline]
    pub fn inc(&self, n: u64) {
        let Some(s) = &self.0 else { return };
        s.pb.inc(n);
        if s.hidden.get() {
            let c = s.since_clock.get() + n;
            s.since_clock.set(c % CLOCK_EVERY);
            if c >= CLOCK_EVERY && s.start.elapsed() >= REVEAL_AFTER {
                s.pb.set_draw_target(ProgressDrawTarget::stderr());
                s.hidden.set(false);
            }
        }
    }

    /// Remove the bar, leaving the terminal as it was.
    pub fn finish(&self) {
        if let Some(s) = &self.0 {
            s.pb.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // An early return (an error) must not leave a half-drawn bar above the message.
        self.finish();
    }
}
