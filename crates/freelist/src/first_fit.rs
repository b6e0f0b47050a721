//! The policy that reuses the lowest-addressed run that fits.

use crate::{ExtentSet, FreeSpacePolicy, PageId, PolicyKind};

/// Hands out the lowest-addressed run of free pages long enough for the request.
///
/// Preferring low addresses packs live data toward the start of the file, which leaves a free
/// tail the engine can truncate away.
///
/// A commit's pages ([`FreeSpacePolicy::allocate_runs`]) come from whole extents instead,
/// fewest runs first, which needs the length index.
#[derive(Debug, Clone)]
pub struct FirstFitPolicy {
    set: ExtentSet,
}

impl FirstFitPolicy {
    /// An empty policy.
    pub fn new() -> Self {
        Self {
            set: ExtentSet::with_length_index(),
        }
    }
}

impl Default for FirstFitPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl FreeSpacePolicy for FirstFitPolicy {
    fn kind(&self) -> PolicyKind {
        PolicyKind::FirstFit
    }

    fn allocate(&mut self, n: u64) -> Option<PageId> {
        self.set.take_first_fit(n)
    }

    fn allocate_runs(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        self.set.take_runs(n, 2, out)
    }

    fn allocate_pages(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        self.set.take_lowest(n, out)
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

    #[test]
    fn first_fit_hands_out_lowest_run_first() {
        let mut p = FirstFitPolicy::new();
        p.insert(40, 5);
        p.insert(10, 2);
        p.insert(20, 3);
        assert_eq!(p.allocate(1), Some(10));
        assert_eq!(p.allocate(2), Some(20));
        assert_eq!(p.allocate(2), Some(40));
        assert_eq!(p.extents(), vec![(11, 1), (22, 1), (42, 3)]);
        assert_eq!(p.len(), 5);
    }

    #[test]
    fn first_fit_returns_none_when_no_run_is_long_enough() {
        let mut p = FirstFitPolicy::new();
        assert_eq!(p.allocate(1), None);
        p.insert(0, 2);
        p.insert(3, 2);
        assert_eq!(p.allocate(3), None);
        assert_eq!(p.len(), 4, "a failed allocate takes nothing");
    }

    #[test]
    fn first_fit_reuses_coalesced_runs() {
        let mut p = FirstFitPolicy::new();
        p.insert(5, 2);
        p.insert(7, 2);
        assert_eq!(p.allocate(4), Some(5));
        assert!(p.is_empty());
    }

    #[test]
    fn first_fit_never_hands_out_a_page_twice() {
        let mut p = FirstFitPolicy::new();
        p.insert(0, 3);
        let got: Vec<_> = (0..4).map(|_| p.allocate(1)).collect();
        assert_eq!(got, vec![Some(0), Some(1), Some(2), None]);
    }

    #[test]
    fn first_fit_remove_undoes_insert() {
        let mut p = FirstFitPolicy::new();
        p.insert(4, 4);
        assert!(p.remove(4, 4));
        assert_eq!(p.allocate(1), None);
    }

    #[test]
    fn first_fit_allocate_lowest_matches_allocate() {
        let mut p = FirstFitPolicy::new();
        p.insert(30, 4);
        p.insert(10, 1);
        let mut q = p.clone();
        for n in [2, 1, 1, 3] {
            assert_eq!(p.allocate_lowest(n), q.allocate(n));
        }
        assert_eq!(p.extents(), q.extents());
    }
}
