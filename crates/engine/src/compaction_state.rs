//! The background compaction's state that commits and the handle share: whether one runs,
//! the throttle that holds writers back while it catches up, and the `Trigger` a commit feeds
//! to decide when to start one. Starting and running it (copy, catch-up, switch) is
//! maintenance code, in autocompact.rs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::Mutex;

/// The background compaction of one handle.
#[derive(Debug, Default)]
pub(crate) struct Compaction {
    pub(crate) running: AtomicBool,
    /// While a compaction runs: the file length past which writers wait for it (0: none).
    pub(crate) limit: AtomicU64,
    /// Writers waiting for the running compaction to end.
    pub(crate) ended: parking_lot::Condvar,
    pub(crate) ended_lock: Mutex<()>,
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
    pub(crate) last: Mutex<Option<std::result::Result<CompactReport, String>>>,
    pub(crate) completed: AtomicU64,
    /// Compactions the threshold called for but that were not started (switch_refused).
    pub(crate) refused: AtomicU64,
    /// The handle's threshold timer (autocompact::start_timer).
    pub(crate) timer: Timer,
}

/// A handle's threshold timer: its thread and how to stop it.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    stop: Mutex<bool>,
    wake: parking_lot::Condvar,
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
}

impl Timer {
    /// Wait `every` (or until stopped); true if stopped.
    pub(crate) fn wait(&self, every: std::time::Duration) -> bool {
        let mut g = self.stop.lock();
        if !*g {
            self.wake.wait_for(&mut g, every);
        }
        *g
    }

    /// Stop the timer and wait for its thread (the last handle is closing).
    pub(crate) fn stop(&self) {
        *self.stop.lock() = true;
        self.wake.notify_all();
        let t = self.thread.lock().take();
        if let Some(t) = t {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Compaction {
    /// Wait for the thread of a running compaction, if any, to end.
    pub(crate) fn join(&self) {
        let t = self.thread.lock().take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    /// The compaction has ended (done, failed or stopped): wake the writers waiting for it.
    pub(crate) fn finish(&self) {
        let _g = self.ended_lock.lock();
        self.limit.store(0, Ordering::Release);
        self.running.store(false, Ordering::Release);
        self.ended.notify_all();
    }

    /// Before a write transaction: while a compaction runs and the file has grown past its
    /// limit, wait for the switch. Without this a fast writer outruns the copy (the copy's
    /// snapshot pins every page freed meanwhile, so the old file grows as under `Null`) and
    /// the file has no bound; with it, the file stays within (1 + t) of its length when the
    /// compaction started. Writers never wait while holding the writer lock, so the last
    /// catch-up round can always take it.
    pub(crate) fn throttle(&self, file_len: impl Fn() -> u64) {
        let limit = self.limit.load(Ordering::Acquire);
        if limit == 0 || file_len() <= limit {
            return;
        }
        let mut g = self.ended_lock.lock();
        while self.running.load(Ordering::Acquire) && self.limit.load(Ordering::Acquire) != 0 {
            self.ended.wait(&mut g);
        }
    }
}

/// What the threshold is compared with: free pages the writer has not needed lately.
///
/// The dead ratio (`Stats::dead_ratio`) is the wrong trigger for a policy that reuses pages: it
/// counts free pages the next commits will take, and pages that wait for the next sync (crash
/// safety forbids reusing them before it; under Async commits they can be most of the tree).
/// Compaction cannot give those back, so a threshold below the share a workload holds on its own
/// would only compact back to back. What compaction can give back is slack: free pages that
/// stayed free through the last two sync windows (a window ends when the durable txid
/// advances), the fewest free pages seen over them. Pages that only readers hold count as
/// free: compaction routes around a long-lived reader (it keeps the old file until it ends).
/// Pages on their way back to the free set (the next begin's releases, the newest commit's
/// frees while it is not durable) count less what the last commit took from the free set per
/// commit in flight ([`Trigger::taken_since_begin`]): every commit frees its copied pages again,
/// so a minimum taken after each commit never sees them used.
/// A file that compaction created starts with
/// the free pages its catch-up commits left; they count only once the writer has used them.
///
/// A trigger without history (a handle just opened, or a writer state just rebuilt because
/// another process committed) cannot tell slack from working space: the free pages it first
/// sees include what the writer will reuse, and counting them all compacted a file of
/// working space at every open, and a file two processes write in turn at every turn. It
/// counts them less two spans (the `max_unsynced_bytes` limit in pages, see
/// [`Trigger::observe`]; none counted when that is off): what a writer of Async commits
/// leaves free when it closes, the pages that waited for a durable commit and those released
/// at the last one that it had not reused yet. After two windows it counts what it has seen.
#[derive(Debug, Default)]
pub(crate) struct Trigger {
    started: bool,
    /// Fewest free pages since the durable txid last advanced, and in the window before.
    cur_min: u64,
    prev_min: u64,
    /// Durable txid the current window began at.
    window: crate::TxId,
    /// For a compacted file: the fewest slack pages seen since the switch (not counted).
    born: Option<u64>,
    /// Commits observed since the last quiet check ([`Trigger::quiet`]).
    commits: u64,
    /// Commits observed in the current window, and in the one before it.
    window_commits: u64,
    prev_commits: u64,
    /// Free pages when the current window began, and how far they may grow before the window
    /// ends anyway (see [`Trigger::observe`]).
    window_base: u64,
    span: u64,
    /// Free pages when the last transaction began, after its releases
    /// ([`Trigger::began`]).
    free_at_begin: u64,
    /// The durable txid and high-water mark at the last check without a commit
    /// ([`Trigger::quiet`]).
    checked_at: Option<(crate::TxId, u64)>,
}

impl Trigger {
    /// Record the free pages after a commit; the pages of slack over the baseline.
    /// A window also ends once free pages have grown by half of `span` since it began (the
    /// `max_unsynced_bytes` limit, in pages): under a policy that does not reuse them (Null)
    /// and commits that are not durable, the durable txid may stand still for many commits
    /// while garbage piles up, and a window that never ends would never count it. Slack is
    /// the minimum over two windows, so it trails the free pages by up to two windows'
    /// growth: with a whole span a window, a Null writer of Async commits whose durable
    /// points were slow to finish grew its file to 3.7-4.1 MB against the 3.36 MB bound of
    /// `threshold_compaction_bounds_steady_overwrites_under_every_policy_and_durability`.
    pub(crate) fn observe(&mut self, free: u64, durable: crate::TxId, span: u64) -> u64 {
        self.commits += 1;
        self.window_commits += 1;
        self.span = span;
        self.roll(free, durable)
    }

    /// A check without a commit (a timer, `Db::sync`, open): if nothing was committed since
    /// the last one, the file is quiet and the interval ends a window as a durable advance
    /// does, so free pages that stay free through two quiet intervals count as slack. `span`
    /// as for [`Trigger::observe`].
    ///
    /// A check that finds the durable txid and the high-water mark where the last check left
    /// them ends the window too, commits or not: a writer of Async commits that finds what it
    /// needs in the free set (the file did not grow) may never wait for a durable point
    /// (nothing piles up to `max_unsynced_bytes`), and without `Db::sync` its window would
    /// never end, keeping the one before a large delete (nothing free) as the previous window
    /// for good, so the file was never compacted. A file that grew meanwhile ran short of free
    /// pages: what it has free is working space, and the window goes on (a load of Async
    /// commits, `threshold_compaction_leaves_a_bulk_load_of_a_reusing_policy_alone`).
    pub(crate) fn quiet(
        &mut self,
        free: u64,
        durable: crate::TxId,
        span: u64,
        high_water: u64,
    ) -> u64 {
        let stalled = matches!(self.checked_at, Some((d, h)) if d == durable && high_water <= h);
        if self.started
            && self.commits > 0
            && durable != self.window
            && self.window_commits < self.prev_commits
            && self.cur_min < self.window_base
        {
            // A `Db::sync` (or close) made the newest commit durable partway through a
            // window shorter than the one before it, while the writer was still taking the
            // free pages the last durable point released (fewer free than at the window's
            // start: a policy that reuses pages). Ending the window here kept a minimum taken
            // before the writer had used them, and short-lived processes that sync before
            // closing compacted a file of working space. The window goes on. Under Null the
            // free pages only grow, and the window ends: what piled up counts.
            self.window = durable;
        }
        if self.started && (self.commits == 0 || stalled) && durable == self.window {
            (self.prev_min, self.cur_min) = (self.cur_min, free);
            self.window_base = free;
            self.prev_commits = std::mem::take(&mut self.window_commits);
        }
        self.checked_at = Some((durable, high_water));
        self.commits = 0;
        self.span = span;
        self.roll(free, durable)
    }

    fn roll(&mut self, free: u64, durable: crate::TxId) -> u64 {
        if !self.started {
            self.started = true;
            // No history: count what is free less the working space (see the type's doc). A
            // compacted file counts nothing it starts with anyway (`born`).
            let seed = match self.born {
                Some(_) => free,
                None => free.saturating_sub(self.span.saturating_mul(2)),
            };
            (self.cur_min, self.prev_min, self.window) = (seed, seed, durable);
            self.window_base = free;
        } else if durable != self.window
            || (self.span > 0 && free >= self.window_base.saturating_add(self.span / 2))
        {
            (self.prev_min, self.cur_min, self.window) = (self.cur_min, free, durable);
            self.window_base = free;
            self.prev_commits = std::mem::take(&mut self.window_commits);
        } else {
            self.cur_min = self.cur_min.min(free);
        }
        let slack = self.cur_min.min(self.prev_min);
        let base = match &mut self.born {
            Some(b) => {
                *b = (*b).min(slack);
                *b
            }
            None => 0,
        };
        slack - base
    }

    /// A transaction began with `free` pages in the free set (after what its begin released).
    pub(crate) fn began(&mut self, free: u64) {
        self.free_at_begin = free;
    }

    /// Pages the transaction since [`Trigger::began`] took from the free set, given what it
    /// holds now: the working space a commit like it takes from what the next ones release.
    pub(crate) fn taken_since_begin(&self, free: u64) -> u64 {
        self.free_at_begin.saturating_sub(free)
    }

    /// No commit since the last look: nothing takes the pages on their way back.
    pub(crate) fn idle(&self) -> bool {
        self.started && self.commits == 0
    }

    /// A file made by compaction: its leftover free pages are not the writer's.
    pub(crate) fn compacted() -> Trigger {
        Trigger {
            born: Some(u64::MAX),
            ..Trigger::default()
        }
    }
}

/// What a compaction did: [`crate::Db::compact`], [`crate::Db::compact_to`],
/// [`crate::Db::wait_for_compaction`].
///
/// ```
/// let r = larch_engine::CompactReport { before_bytes: 3 << 20, after_bytes: 1 << 20 };
/// assert_eq!(r.gain(), 3.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactReport {
    /// File bytes before.
    pub before_bytes: u64,
    /// File bytes after.
    pub after_bytes: u64,
}

impl CompactReport {
    /// before / after (how many times smaller the file became).
    pub fn gain(&self) -> f64 {
        if self.after_bytes == 0 {
            return 1.0;
        }
        self.before_bytes as f64 / self.after_bytes as f64
    }
}

#[cfg(test)]
mod tests {
    use super::Trigger;
    use proptest::prelude::*;

    /// One call the writer and the checks make.
    #[derive(Clone, Debug)]
    enum Event {
        /// A commit (`observe`) with this many free pages; `advance`: the durable txid moved.
        Commit { free: u64, advance: bool },
        /// A check without a commit (`quiet`): timer, `Db::sync`, open; `grew`: the file did.
        Quiet {
            free: u64,
            advance: bool,
            grew: bool,
        },
        /// A transaction began (`began`).
        Began { free: u64 },
    }

    fn event(free: impl Strategy<Value = u64> + Clone) -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => (free.clone(), any::<bool>()).prop_map(|(free, advance)| Event::Commit { free, advance }),
            1 => (free.clone(), any::<bool>(), any::<bool>())
                .prop_map(|(free, advance, grew)| Event::Quiet { free, advance, grew }),
            1 => free.prop_map(|free| Event::Began { free }),
        ]
    }

    /// Feeds `events` to `t`; returns, per event, the free pages it saw and the slack it
    /// reported (`None` for `Began`) and whether it was a commit that moved the durable txid.
    struct Run {
        durable: u64,
        high_water: u64,
        span: u64,
    }

    impl Run {
        fn apply(&mut self, t: &mut Trigger, e: &Event) -> Option<(u64, u64, bool)> {
            match *e {
                Event::Commit { free, advance } => {
                    self.durable += u64::from(advance);
                    Some((free, t.observe(free, self.durable, self.span), advance))
                }
                Event::Quiet {
                    free,
                    advance,
                    grew,
                } => {
                    self.durable += u64::from(advance);
                    self.high_water += u64::from(grew);
                    let slack = t.quiet(free, self.durable, self.span, self.high_water);
                    Some((free, slack, false))
                }
                Event::Began { free } => {
                    t.began(free);
                    None
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Safety: compaction is never told of more slack than the pages free right now,
        /// whatever the order of commits, durable points and checks.
        #[test]
        fn slack_never_exceeds_what_is_free(
            events in prop::collection::vec(event(0u64..3000), 1..200),
            span in prop_oneof![Just(0u64), 1u64..2000],
            compacted in any::<bool>(),
        ) {
            let mut t = if compacted { Trigger::compacted() } else { Trigger::default() };
            let mut run = Run { durable: 1, high_water: 100, span };
            for e in &events {
                if let Some((free, slack, _)) = run.apply(&mut t, e) {
                    prop_assert!(slack <= free, "slack {slack} with {free} free after {e:?}");
                }
            }
        }

        /// Liveness, the threshold's promise (docs/format.md): dead space that comes back and
        /// stays free through two durable points after the trigger's first call counts, whatever came before it (a
        /// compaction, working space, checks), so the trigger fires again. For a compacted
        /// file, once the writer has used the pages the compaction left (free fell to 0).
        #[test]
        fn free_pages_that_stay_free_through_two_durable_points_count(
            before in prop::collection::vec(event(0u64..3000), 0..100),
            floor in 1u64..1000,
            after in prop::collection::vec(event(0u64..2000), 0..100),
            span in prop_oneof![Just(0u64), 1u64..2000],
            compacted in any::<bool>(),
        ) {
            let mut t = if compacted { Trigger::compacted() } else { Trigger::default() };
            let mut run = Run { durable: 1, high_water: 100, span };
            for e in &before {
                run.apply(&mut t, e);
            }
            if compacted {
                run.apply(&mut t, &Event::Commit { free: 0, advance: false });
            }
            // From here on at least `floor` pages are free at every call.
            let lift = |e: &Event| match *e {
                Event::Commit { free, advance } => Event::Commit { free: free + floor, advance },
                Event::Quiet { free, advance, grew } => {
                    Event::Quiet { free: free + floor, advance, grew }
                }
                Event::Began { free } => Event::Began { free: free + floor },
            };
            let two_points = [
                Event::Commit { free: floor, advance: true },
                Event::Commit { free: floor, advance: true },
            ];
            // Durable points count once the trigger has started (its first call seeds it).
            let mut started = !before.iter().all(|e| matches!(e, Event::Began { .. })) || compacted;
            let mut advances = 0;
            for e in after.iter().map(lift).chain(two_points) {
                if let Some((free, slack, advanced)) = run.apply(&mut t, &e) {
                    advances += usize::from(advanced && started);
                    started = true;
                    if advances >= 2 {
                        prop_assert!(
                            slack >= floor,
                            "slack {slack} < {floor} pages free throughout, {free} now, after {e:?}"
                        );
                    }
                }
            }
        }
    }

    /// A writer under a reusing policy: each window it takes what the durable point before
    /// it released, 20 pages a commit, down to nothing.
    fn cycle(t: &mut Trigger, durable: u64, commits: u64) -> u64 {
        let mut slack = 0;
        for i in 0..commits {
            slack = t.observe(256u64.saturating_sub(20 * i), durable, 1000);
        }
        slack
    }

    #[test]
    fn a_sync_partway_through_a_short_window_does_not_end_it() {
        let mut t = Trigger::default();
        t.quiet(0, 1, 1000, 500);
        for d in [10, 30, 50] {
            assert_eq!(cycle(&mut t, d, 20), 0);
        }
        // A point at 70, six commits (free 256 -> 156), then `Db::sync` makes 76 durable:
        // the writer had not yet taken what the point released.
        cycle(&mut t, 70, 6);
        assert_eq!(t.quiet(256, 76, 1000, 500), 0);
        // The next commits go on in the same window; the next point ends it.
        cycle(&mut t, 76, 14);
        assert_eq!(cycle(&mut t, 90, 20), 0);
    }

    #[test]
    fn a_sync_after_a_window_as_long_as_the_one_before_ends_it() {
        let mut t = Trigger::default();
        t.quiet(0, 1, 1000, 500);
        // Dead space: 300 free pages the writer never takes, each window as long as the last.
        let mut d = 1;
        for _ in 0..3 {
            d += 10;
            for _ in 0..10 {
                t.observe(300, d, 1000);
            }
        }
        assert_eq!(t.quiet(300, d + 10, 1000, 500), 300);
    }

    #[test]
    fn a_sync_partway_through_a_short_window_of_a_writer_that_takes_nothing_ends_it() {
        // Null: free pages only grow, windows end at durable points every ten commits.
        let mut t = Trigger::default();
        t.quiet(0, 1, 1000, 500);
        let mut free = 0;
        for d in [10, 20, 30] {
            for _ in 0..10 {
                free += 10;
                t.observe(free, d, 1000);
            }
        }
        // Three commits into the next window, a sync: the window ends, and the one before it
        // (which began at 210 free) becomes the older of the two.
        for _ in 0..3 {
            free += 10;
            t.observe(free, 40, 1000);
        }
        assert_eq!(t.quiet(free, 43, 1000, 500), 310);
    }
}
