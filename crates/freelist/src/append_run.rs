//! The policy that appends unless a long free run is available.

use crate::{ExtentSet, FreeSpacePolicy, PageId, PolicyKind};

/// Reuses free space only in runs of at least [`AppendPreferringPolicy::min_run`] pages (8 by
/// default); otherwise it appends at the end of the file.
///
/// # Why it might beat the others
///
/// A commit's cost on a disk (and, less so, on an SSD's FTL) is dominated by the number of
/// separate write runs, not by the bytes. [`NullPolicy`](crate::NullPolicy) writes each commit
/// as one sequential run but never reuses anything, so the file grows with every overwrite;
/// [`FirstFitPolicy`](crate::FirstFitPolicy) and [`BestFitPolicy`](crate::BestFitPolicy) keep
/// the file small but, under random updates, the holes they fill are single pages scattered
/// all over the file, so a commit of 100 pages turns into up to 100 seeks.
///
/// This policy sits between them: it writes into a free run only when the run is long enough
/// that filling it costs one seek for at least `min_run` pages, and it keeps writing into that
/// run (the *cursor*) until the run is used up, even once the remainder is shorter than
/// `min_run`, so a commit's pages land together just as if appended. Free runs shorter than
/// `min_run` are left alone until neighbours are freed and they coalesce into a long one (or
/// compaction or tail truncation takes them). Copy-on-write frees a commit's old pages
/// together, and those were themselves written together, so long runs do form; the file
/// settles at a bounded multiple of the live data instead of growing without end.
///
/// The run to start a cursor in is the lowest-addressed one of at least `min_run` pages
/// (and at least the request), which keeps data drifting toward the head of the file so that
/// the tail can be truncated. Finding it costs a scan of the long runs only (a by-length index
/// skips the short fragments), and it happens at most once per `min_run` pages handed out.
#[derive(Debug, Clone)]
pub struct AppendPreferringPolicy {
    set: ExtentSet,
    min_run: u64,
    /// Where the run being filled continues; only a hint, checked against the set on use.
    cursor: Option<PageId>,
}

impl AppendPreferringPolicy {
    /// The default shortest run worth reusing.
    pub const DEFAULT_MIN_RUN: u64 = 8;

    /// An empty policy reusing runs of at least [`Self::DEFAULT_MIN_RUN`] pages.
    pub fn new() -> Self {
        Self::with_min_run(Self::DEFAULT_MIN_RUN)
    }

    /// An empty policy reusing runs of at least `min_run` pages (0 is taken as 1).
    pub fn with_min_run(min_run: u64) -> Self {
        Self {
            set: ExtentSet::with_length_index(),
            min_run: min_run.max(1),
            cursor: None,
        }
    }

    /// The shortest free run this policy starts reusing.
    pub fn min_run(&self) -> u64 {
        self.min_run
    }

    /// The lowest-addressed extent of at least `len` pages, scanning only the long ones.
    fn lowest_long_run(&self, len: u64) -> Option<PageId> {
        if len <= 1 {
            return self.set.first_fit(1).map(|(s, _)| s);
        }
        self.set.long_extents(len).map(|(s, _)| s).min()
    }
}

impl Default for AppendPreferringPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl FreeSpacePolicy for AppendPreferringPolicy {
    fn kind(&self) -> PolicyKind {
        PolicyKind::AppendPreferring
    }

    fn allocate(&mut self, n: u64) -> Option<PageId> {
        if n == 0 {
            return None;
        }
        // Keep filling the current run: its pages are adjacent to the ones just handed out.
        let start = match self.cursor.take() {
            Some(c) if self.set.extent_at(c).is_some_and(|l| l >= n) => c,
            _ => self.lowest_long_run(n.max(self.min_run))?,
        };
        let taken = self.set.remove(start, n);
        debug_assert!(taken);
        self.cursor = start.checked_add(n);
        Some(start)
    }

    fn set(&self) -> &ExtentSet {
        &self.set
    }

    fn set_mut(&mut self) -> &mut ExtentSet {
        &mut self.set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(runs: &[(PageId, u64)]) -> AppendPreferringPolicy {
        let mut p = AppendPreferringPolicy::new();
        for &(s, n) in runs {
            p.insert(s, n);
        }
        p
    }

    #[test]
    fn append_run_appends_while_only_short_runs_are_free() {
        let mut p = policy(&[(0, 7), (10, 1), (20, 7)]);
        for n in 1..=7 {
            assert_eq!(p.allocate(n), None);
        }
        assert_eq!(p.len(), 15, "nothing was taken");
    }

    #[test]
    fn append_run_reuses_a_run_of_min_run_pages() {
        let mut p = policy(&[(0, 3), (10, 8)]);
        assert_eq!(p.allocate(1), Some(10));
        assert_eq!(p.extents(), vec![(0, 3), (11, 7)]);
    }

    #[test]
    fn append_run_keeps_filling_its_run_below_min_run() {
        let mut p = policy(&[(0, 3), (10, 8), (40, 9)]);
        let got: Vec<_> = (0..8).map(|_| p.allocate(1)).collect();
        let expected: Vec<_> = (10..18).map(Some).collect();
        assert_eq!(got, expected, "one commit's pages land together");
        assert_eq!(p.allocate(2), Some(40), "used up: start the next long run");
        assert_eq!(p.allocate(3), Some(42));
        assert_eq!(p.extents(), vec![(0, 3), (45, 4)]);
    }

    #[test]
    fn append_run_moves_on_when_the_rest_of_its_run_is_too_short() {
        let mut p = policy(&[(10, 8), (30, 8)]);
        assert_eq!(p.allocate(6), Some(10));
        assert_eq!(
            p.allocate(3),
            Some(30),
            "two pages left at 16: not enough for 3"
        );
        assert_eq!(p.allocate(2), Some(33), "the cursor follows the newest run");
        assert_eq!(p.extents(), vec![(16, 2), (35, 3)]);
    }

    #[test]
    fn append_run_starts_at_the_lowest_long_run() {
        let mut p = policy(&[(50, 20), (30, 8), (0, 2), (90, 8)]);
        assert_eq!(p.allocate(1), Some(30));
        let mut q = policy(&[(50, 20), (30, 8)]);
        assert_eq!(
            q.allocate(10),
            Some(50),
            "the run must also hold the request"
        );
    }

    #[test]
    fn append_run_continues_into_pages_freed_after_its_cursor() {
        let mut p = policy(&[(10, 8)]);
        assert_eq!(p.allocate(8), Some(10));
        p.insert(18, 2);
        assert_eq!(
            p.allocate(1),
            Some(18),
            "adjacent to the last pages handed out"
        );
    }

    #[test]
    fn append_run_forgets_a_cursor_whose_pages_went_elsewhere() {
        let mut p = policy(&[(10, 8)]);
        assert_eq!(p.allocate(1), Some(10));
        assert!(p.remove(11, 7));
        assert_eq!(p.allocate(1), None);
        p.insert(11, 3);
        assert_eq!(
            p.allocate(1),
            None,
            "a 3-page run is too short to restart on"
        );
    }

    #[test]
    fn append_run_min_run_is_configurable() {
        let mut p = AppendPreferringPolicy::with_min_run(2);
        assert_eq!(p.min_run(), 2);
        p.insert(0, 1);
        p.insert(5, 2);
        assert_eq!(p.allocate(1), Some(5));
        assert_eq!(AppendPreferringPolicy::with_min_run(0).min_run(), 1);
    }

    #[test]
    fn allocate_lowest_works_under_append_run() {
        let mut p = policy(&[(2, 1), (10, 8)]);
        assert_eq!(p.allocate_lowest(1), Some(2));
        assert_eq!(p.allocate_lowest(2), Some(10));
        assert_eq!(p.allocate(6), None, "what is left is shorter than min_run");
        assert_eq!(
            p.allocate_lowest(6),
            Some(12),
            "but compaction may still use it"
        );
        assert!(p.is_empty());
    }
}
