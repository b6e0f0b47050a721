//! The policy that reuses the shortest run that fits.

use crate::{ExtentSet, FreeSpacePolicy, PageId, PolicyKind};

/// Hands out the shortest run of free pages long enough for the request (ties: the lowest
/// address), taken from that run's start.
///
/// Short holes are used up by short requests, so the long runs survive for the requests that
/// need them: a commit's pages asked for as one run, or a multi-page overflow value, still find
/// a contiguous place instead of forcing the file to grow. The set keeps a by-length index
/// ([`ExtentSet::with_length_index`]), so `allocate` is O(log extents) whatever the
/// fragmentation.
///
/// Note the flip side: one-page requests go to the smallest holes first, which are scattered;
/// an engine that asks page by page gets contiguity only from a request for the whole run.
#[derive(Debug, Clone)]
pub struct BestFitPolicy {
    set: ExtentSet,
}

impl BestFitPolicy {
    /// An empty policy.
    pub fn new() -> Self {
        Self {
            set: ExtentSet::with_length_index(),
        }
    }
}

impl Default for BestFitPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl FreeSpacePolicy for BestFitPolicy {
    fn kind(&self) -> PolicyKind {
        PolicyKind::BestFit
    }

    fn allocate(&mut self, n: u64) -> Option<PageId> {
        self.set.take_best_fit(n)
    }

    fn allocate_runs(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        self.set.take_runs(n, 2, out)
    }

    fn allocate_low_runs(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        self.set.take_low_runs(n, 2, out)
    }

    fn allocate_long_runs(&mut self, n: u64, min_run: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        self.set.take_long_runs(n, min_run, out)
    }

    fn hands_out_runs(&self) -> bool {
        true
    }

    fn allocate_run(&mut self, n: u64) -> Option<PageId> {
        self.set.take_best_fit(n)
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

    fn policy(runs: &[(PageId, u64)]) -> BestFitPolicy {
        let mut p = BestFitPolicy::new();
        for &(s, n) in runs {
            p.insert(s, n);
        }
        p
    }

    #[test]
    fn best_fit_picks_smallest_run_that_fits() {
        let mut p = policy(&[(0, 10), (20, 3), (30, 5), (40, 1)]);
        assert_eq!(p.allocate(3), Some(20), "the 3-run, not the lower 10-run");
        assert_eq!(p.allocate(4), Some(30));
        assert_eq!(
            p.allocate(1),
            Some(34),
            "the 1-page leftover of the 5-run ties with 40"
        );
        assert_eq!(p.allocate(1), Some(40));
        assert_eq!(p.allocate(6), Some(0));
        assert_eq!(p.extents(), vec![(6, 4)]);
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn best_fit_prefers_lowest_address_among_equal_runs() {
        let mut p = policy(&[(50, 2), (10, 2), (30, 2), (0, 7)]);
        assert_eq!(p.allocate(2), Some(10));
        assert_eq!(p.allocate(1), Some(30));
        assert_eq!(
            p.allocate(1),
            Some(31),
            "the single leftover page is now the best fit"
        );
        assert_eq!(p.allocate(2), Some(50));
        assert_eq!(p.allocate(2), Some(0));
    }

    #[test]
    fn best_fit_keeps_long_runs_for_multi_page_requests() {
        // First fit would cut the 8-run at 0 for the single pages; best fit leaves it whole.
        let mut p = policy(&[(0, 8), (9, 1), (11, 1), (13, 1)]);
        for expected in [9, 11, 13] {
            assert_eq!(p.allocate(1), Some(expected));
        }
        assert_eq!(p.allocate(8), Some(0));
        assert!(p.is_empty());
    }

    #[test]
    fn best_fit_returns_none_when_no_run_is_long_enough() {
        let mut p = policy(&[(0, 2), (3, 2)]);
        assert_eq!(p.allocate(3), None);
        assert_eq!(p.allocate(0), None);
        assert_eq!(p.len(), 4, "a failed allocate takes nothing");
        assert_eq!(BestFitPolicy::new().allocate(1), None);
    }

    #[test]
    fn best_fit_sees_runs_coalesced_by_insert() {
        let mut p = policy(&[(10, 2), (14, 2), (20, 3)]);
        p.insert(12, 2);
        assert_eq!(p.extents(), vec![(10, 6), (20, 3)]);
        assert_eq!(p.allocate(4), Some(10), "only the merged run holds 4");
        assert_eq!(
            p.allocate(2),
            Some(14),
            "the 2-page leftover beats the 3-run"
        );
    }

    #[test]
    fn best_fit_sees_runs_split_by_remove_and_cut_by_truncate() {
        let mut p = policy(&[(0, 10), (20, 6)]);
        assert!(p.remove(3, 4));
        assert_eq!(p.extents(), vec![(0, 3), (7, 3), (20, 6)]);
        p.truncate(23);
        assert_eq!(p.extents(), vec![(0, 3), (7, 3), (20, 3)]);
        assert_eq!(
            p.allocate(4),
            None,
            "the truncated run is gone from the length index too"
        );
        assert_eq!(p.allocate(3), Some(0));
        assert_eq!(p.allocate(3), Some(7));
        assert_eq!(p.allocate(3), Some(20));
        assert!(p.is_empty());
    }

    #[test]
    fn best_fit_allocate_lowest_ignores_length() {
        let mut p = policy(&[(0, 9), (20, 2)]);
        assert_eq!(p.allocate_lowest(2), Some(0));
        assert_eq!(p.allocate(2), Some(20));
        assert_eq!(p.extents(), vec![(2, 7)]);
    }

    #[test]
    fn best_fit_never_hands_out_a_page_twice() {
        let mut p = policy(&[(0, 3)]);
        let got: Vec<_> = (0..4).map(|_| p.allocate(1)).collect();
        assert_eq!(got, vec![Some(0), Some(1), Some(2), None]);
    }
}
