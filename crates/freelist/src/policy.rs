//! The interface every free-space policy implements.

use crate::{ExtentSet, PageId, PolicyKind};

/// The set of pages that may be overwritten now, and how runs of them are handed out.
pub trait FreeSpacePolicy: Send + Sync + std::fmt::Debug {
    /// Which policy this is.
    fn kind(&self) -> PolicyKind;

    /// A run of `n` (>=1) contiguous reusable pages, removed from the set, lowest id returned.
    /// None means "append at the end of the file" (the caller extends the file).
    fn allocate(&mut self, n: u64) -> Option<PageId>;

    /// The lowest-addressed run of `n` (>=1) contiguous reusable pages, removed from the set,
    /// whatever this policy would prefer; None if no run is long enough (or `n == 0`).
    ///
    /// In-place compaction uses it to move live pages toward the head of the file, so it hands
    /// out pages under every policy, including [`PolicyKind::Null`] whose
    /// [`allocate`](FreeSpacePolicy::allocate) never does. The default scans the extents
    /// (O(extents)); the policies in this crate override it without the intermediate `Vec`.
    fn allocate_lowest(&mut self, n: u64) -> Option<PageId> {
        self.set_mut().take_first_fit(n)
    }

    /// Does [`allocate_runs`](FreeSpacePolicy::allocate_runs) gather pages into runs? Only
    /// then does the engine move a commit's pages, already allocated one at a time, to runs.
    fn hands_out_runs(&self) -> bool {
        false
    }

    /// One run of `n` pages if the policy has one, chosen cheaply (the shortest that fits, with
    /// the length index); None otherwise. The default never has one.
    fn allocate_run(&mut self, n: u64) -> Option<PageId> {
        let _ = n;
        None
    }

    /// Up to `n` pages for one commit, in as few runs as this policy is willing to hand out,
    /// appended to `out` as `(start, len)`; returns how many it gave (the caller appends the
    /// rest at the end of the file). The default asks [`allocate`](FreeSpacePolicy::allocate)
    /// for one page at a time, so a policy's choice of pages is unchanged; FirstFit and
    /// BestFit take whole extents ([`ExtentSet::take_runs`]), so a commit's pages are written
    /// in few calls.
    fn allocate_runs(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        allocate_singles(self, n, out)
    }

    /// As [`allocate_runs`](FreeSpacePolicy::allocate_runs), but lowest first: whole extents
    /// of two pages or more in address order, then single pages ([`ExtentSet::take_low_runs`]
    /// in FirstFit and BestFit); the default asks `allocate` for one page at a time.
    fn allocate_low_runs(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        allocate_singles(self, n, out)
    }

    /// Up to `n` pages in runs of `min_run` pages or more, lowest first, appended to `out`;
    /// returns how many it gave (the caller appends the rest at the end of the file). For a
    /// commit so large that filling every short hole would cost it a write call per hole
    /// (`ExtentSet::take_long_runs` in FirstFit and BestFit); the default gives none.
    fn allocate_long_runs(&mut self, n: u64, min_run: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        let _ = (n, min_run, out);
        0
    }

    /// Up to `n` pages, the ones `n` calls of [`allocate`](FreeSpacePolicy::allocate)`(1)`
    /// would give, appended to `out` as runs `(start, len)` with adjacent pages merged;
    /// returns how many it gave. The default is those calls ([`allocate_singles`]); FirstFit
    /// takes its lowest `n` pages in one pass ([`ExtentSet::take_lowest`]).
    fn allocate_pages(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        allocate_singles(self, n, out)
    }

    /// Make pages start..start+n reusable (they must not already be in the set; debug_assert it).
    fn insert(&mut self, start: PageId, n: u64) {
        self.set_mut().insert(start, n);
    }

    /// Make every run in `runs` reusable, as [`insert`](FreeSpacePolicy::insert) of each:
    /// sorted and adjacent runs joined first, so pages freed one at a time (a commit's hot
    /// run) cost one insert, not one each. Leaves `runs` sorted and coalesced.
    fn insert_runs(&mut self, runs: &mut Vec<(PageId, u64)>) {
        coalesce(runs);
        self.set_mut().insert_sorted(runs);
    }

    /// Remove exactly pages start..start+n from the set (used to undo an insert); returns false
    /// and changes nothing if any of them is not in the set.
    fn remove(&mut self, start: PageId, n: u64) -> bool {
        self.set_mut().remove(start, n)
    }

    /// Is this page in the set?
    fn contains(&self, page: PageId) -> bool {
        self.set().contains(page)
    }

    /// Number of pages in the set.
    fn len(&self) -> u64 {
        self.set().len()
    }

    /// Is the set empty?
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop every page >= `end` from the set (the file was truncated to `end` pages).
    fn truncate(&mut self, end: PageId) {
        self.set_mut().truncate(end);
    }

    /// Length of the run of set pages that ends exactly at `end` (pages end-k..end all in the set).
    fn tail_run(&self, end: PageId) -> u64 {
        self.set().tail_run(end)
    }

    /// The set as sorted, coalesced extents (start, len).
    fn extents(&self) -> Vec<(PageId, u64)> {
        self.set().extents()
    }

    /// The reusable pages themselves, which the methods above manage by default. A policy
    /// differs from another only in which run `allocate` picks.
    fn set(&self) -> &ExtentSet;

    /// The reusable pages, for changing them.
    fn set_mut(&mut self) -> &mut ExtentSet;
}

/// Sort `runs` by first page and join runs that touch (`(4, 2)` and `(6, 1)` become `(4, 3)`).
/// Runs must not overlap.
pub fn coalesce(runs: &mut Vec<(PageId, u64)>) {
    if runs.len() < 2 {
        return;
    }
    if !runs.is_sorted_by_key(|&(p, _)| p) {
        runs.sort_unstable_by_key(|&(p, _)| p);
    }
    let mut out = 0;
    for i in 1..runs.len() {
        let (p, n) = runs[i];
        let last = &mut runs[out];
        if last.0 + last.1 == p {
            last.1 += n;
        } else {
            out += 1;
            runs[out] = (p, n);
        }
    }
    runs.truncate(out + 1);
}

/// Up to `n` pages from `policy` one at a time ([`FreeSpacePolicy::allocate`]`(1)`), appended
/// to `out` as `(start, len)` with adjacent pages merged into one run; returns how many it
/// gave. What the default [`FreeSpacePolicy::allocate_runs`] does, so a policy's choice of
/// pages is unchanged.
pub fn allocate_singles<P: FreeSpacePolicy + ?Sized>(
    policy: &mut P,
    n: u64,
    out: &mut Vec<(PageId, u64)>,
) -> u64 {
    let mut got = 0;
    while got < n {
        let Some(p) = policy.allocate(1) else { break };
        match out.last_mut() {
            Some((start, len)) if *start + *len == p => *len += 1,
            _ => out.push((p, 1)),
        }
        got += 1;
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_sorts_and_joins_touching_runs_only() {
        let mut runs = vec![(9, 1), (4, 2), (12, 3), (6, 1), (1, 1), (10, 1)];
        coalesce(&mut runs);
        assert_eq!(runs, vec![(1, 1), (4, 3), (9, 2), (12, 3)]);
        let mut one = vec![(3, 2)];
        coalesce(&mut one);
        assert_eq!(one, vec![(3, 2)]);
        let mut none: Vec<(PageId, u64)> = Vec::new();
        coalesce(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn insert_runs_leaves_the_same_set_as_inserting_each() {
        let runs = vec![(20, 1), (7, 1), (8, 2), (21, 4), (2, 1), (30, 1)];
        let mut a = crate::first_fit::FirstFitPolicy::default();
        let mut b = crate::first_fit::FirstFitPolicy::default();
        for &(p, n) in &runs {
            a.insert(p, n);
        }
        b.insert_runs(&mut runs.clone());
        assert_eq!(a.extents(), b.extents());
        assert_eq!(b.extents(), vec![(2, 1), (7, 3), (20, 5), (30, 1)]);
        assert_eq!(a.len(), b.len());
    }
}
