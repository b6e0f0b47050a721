//! A set of page ids stored as sorted, coalesced extents.

use std::collections::BTreeMap;

use crate::PageId;

/// A set of page ids kept as sorted, non-empty, coalesced extents `start -> len`.
///
/// Every policy stores its reusable set here and differs only in how it picks from it.
/// Extents never touch or overlap: that keeps "is there a run of n pages" a question about a
/// single extent, and makes [`ExtentSet::extents`] directly the persisted form.
///
/// A run whose end would pass `u64::MAX` is clamped there: such page ids can never exist in a
/// file, and clamping keeps every stored `start + len` free of overflow.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExtentSet {
    by_start: BTreeMap<PageId, u64>,
    pages: u64,
}

impl ExtentSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pages in the set.
    pub fn len(&self) -> u64 {
        self.pages
    }

    /// Is the set empty?
    pub fn is_empty(&self) -> bool {
        self.pages == 0
    }

    /// Number of extents; a fragmentation measure.
    pub fn extent_count(&self) -> usize {
        self.by_start.len()
    }

    /// Is this page in the set?
    pub fn contains(&self, page: PageId) -> bool {
        self.extent_containing(page).is_some()
    }

    /// Add pages start..start+n. Pages already present are a caller bug (debug-asserted); in
    /// release builds they are merged rather than double-counted so the set stays consistent.
    pub fn insert(&mut self, start: PageId, n: u64) {
        let mut lo = start;
        let mut hi = start.saturating_add(n);
        if lo >= hi {
            return;
        }
        debug_assert!(
            !self.overlaps(lo, hi),
            "pages {start}..{hi} are already partly in the set"
        );
        let mut absorbed = 0;
        // A predecessor that reaches `lo` must merge, or the set would stop being coalesced.
        if let Some((&s, &l)) = self.by_start.range(..=lo).next_back() {
            if s + l >= lo {
                lo = s;
                hi = hi.max(s + l);
                absorbed += l;
                self.by_start.remove(&s);
            }
        }
        // `..=hi` so that an extent starting exactly at the new end is merged too.
        while let Some((&s, &l)) = self.by_start.range(lo..=hi).next() {
            hi = hi.max(s + l);
            absorbed += l;
            self.by_start.remove(&s);
        }
        self.by_start.insert(lo, hi - lo);
        self.pages += (hi - lo) - absorbed;
    }

    /// Remove exactly pages start..start+n; false and no change if any is missing.
    pub fn remove(&mut self, start: PageId, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let Some(end) = start.checked_add(n) else {
            return false;
        };
        // Coalescing means a run fully in the set lies inside a single extent.
        let Some((s, l)) = self.extent_containing(start) else {
            return false;
        };
        if s + l < end {
            return false;
        }
        self.by_start.remove(&s);
        if start > s {
            self.by_start.insert(s, start - s);
        }
        if s + l > end {
            self.by_start.insert(end, s + l - end);
        }
        self.pages -= n;
        true
    }

    /// Take `n` pages from the start of the lowest extent holding at least `n`.
    ///
    /// The scan is linear in the number of extents that are too short, so single-page
    /// requests (the common case) cost one lookup.
    pub fn take_first_fit(&mut self, n: u64) -> Option<PageId> {
        if n == 0 {
            return None;
        }
        let (s, l) = self
            .by_start
            .iter()
            .map(|(&s, &l)| (s, l))
            .find(|&(_, l)| l >= n)?;
        self.by_start.remove(&s);
        if l > n {
            self.by_start.insert(s + n, l - n);
        }
        self.pages -= n;
        Some(s)
    }

    /// Drop every page >= `end`.
    pub fn truncate(&mut self, end: PageId) {
        let dropped = self.by_start.split_off(&end);
        self.pages -= dropped.values().sum::<u64>();
        if let Some((&s, l)) = self.by_start.iter_mut().next_back() {
            if s + *l > end {
                self.pages -= s + *l - end;
                *l = end - s;
            }
        }
    }

    /// Length of the run of set pages ending exactly at `end`.
    pub fn tail_run(&self, end: PageId) -> u64 {
        match end
            .checked_sub(1)
            .and_then(|last| self.extent_containing(last))
        {
            Some((s, _)) => end - s,
            None => 0,
        }
    }

    /// The extents `(start, len)` in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (PageId, u64)> + '_ {
        self.by_start.iter().map(|(&s, &l)| (s, l))
    }

    /// The extents `(start, len)` in ascending order, collected.
    pub fn extents(&self) -> Vec<(PageId, u64)> {
        self.iter().collect()
    }

    fn extent_containing(&self, page: PageId) -> Option<(PageId, u64)> {
        let (&s, &l) = self.by_start.range(..=page).next_back()?;
        (page - s < l).then_some((s, l))
    }

    fn overlaps(&self, lo: PageId, hi: PageId) -> bool {
        self.by_start
            .range(..hi)
            .next_back()
            .is_some_and(|(&s, &l)| s + l > lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(runs: &[(PageId, u64)]) -> ExtentSet {
        let mut s = ExtentSet::new();
        for &(start, n) in runs {
            s.insert(start, n);
        }
        s
    }

    #[test]
    fn insert_adjacent_runs_coalesce() {
        let s = set(&[(10, 2), (14, 2), (12, 2)]);
        assert_eq!(s.extents(), vec![(10, 6)]);
        assert_eq!(s.len(), 6);

        let s = set(&[(5, 1), (4, 1), (6, 1)]);
        assert_eq!(s.extents(), vec![(4, 3)]);
    }

    #[test]
    fn insert_separate_runs_stay_apart() {
        let s = set(&[(20, 1), (10, 3), (14, 2)]);
        assert_eq!(s.extents(), vec![(10, 3), (14, 2), (20, 1)]);
        assert_eq!(s.len(), 6);
        assert_eq!(s.extent_count(), 3);
    }

    #[test]
    fn insert_bridging_many_extents_merges_them_all() {
        let s = set(&[(0, 1), (2, 1), (4, 1), (6, 1), (1, 1), (3, 1), (5, 1)]);
        assert_eq!(s.extents(), vec![(0, 7)]);
        assert_eq!(s.len(), 7);
    }

    #[test]
    fn insert_of_zero_pages_is_a_no_op() {
        let s = set(&[(3, 0)]);
        assert!(s.is_empty());
        assert_eq!(s.extents(), vec![]);
    }

    #[test]
    fn insert_near_max_page_is_clamped() {
        let s = set(&[(u64::MAX - 2, 10)]);
        assert_eq!(s.extents(), vec![(u64::MAX - 2, 2)]);
        assert!(s.contains(u64::MAX - 1));
        assert!(!s.contains(u64::MAX));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "already partly in the set")]
    fn insert_of_present_page_is_caught_in_debug() {
        set(&[(10, 4), (12, 1)]);
    }

    #[test]
    fn contains_respects_extent_bounds() {
        let s = set(&[(10, 3)]);
        assert!(!s.contains(9));
        assert!(s.contains(10));
        assert!(s.contains(12));
        assert!(!s.contains(13));
        assert!(!ExtentSet::new().contains(0));
    }

    #[test]
    fn remove_splits_extent() {
        let mut s = set(&[(10, 10)]);
        assert!(s.remove(13, 2));
        assert_eq!(s.extents(), vec![(10, 3), (15, 5)]);
        assert_eq!(s.len(), 8);
    }

    #[test]
    fn remove_at_extent_edges_shrinks_it() {
        let mut s = set(&[(10, 5)]);
        assert!(s.remove(10, 1));
        assert!(s.remove(14, 1));
        assert_eq!(s.extents(), vec![(11, 3)]);
        assert!(s.remove(11, 3));
        assert!(s.is_empty());
    }

    #[test]
    fn remove_of_missing_pages_changes_nothing() {
        let mut s = set(&[(10, 3), (14, 3)]);
        let before = s.clone();
        assert!(!s.remove(12, 3), "page 13 is not in the set");
        assert!(!s.remove(9, 1));
        assert!(!s.remove(16, 2));
        assert!(!s.remove(u64::MAX, 2));
        assert_eq!(s, before);
    }

    #[test]
    fn take_first_fit_uses_lowest_extent_long_enough() {
        let mut s = set(&[(2, 1), (5, 3), (10, 2), (20, 4)]);
        assert_eq!(s.take_first_fit(2), Some(5));
        assert_eq!(s.extents(), vec![(2, 1), (7, 1), (10, 2), (20, 4)]);
        assert_eq!(s.take_first_fit(3), Some(20));
        assert_eq!(s.take_first_fit(5), None);
        assert_eq!(s.take_first_fit(1), Some(2));
        assert_eq!(s.take_first_fit(0), None);
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn truncate_drops_pages_past_end() {
        let mut s = set(&[(2, 2), (6, 4), (12, 3)]);
        s.truncate(8);
        assert_eq!(s.extents(), vec![(2, 2), (6, 2)]);
        assert_eq!(s.len(), 4);
        s.truncate(6);
        assert_eq!(s.extents(), vec![(2, 2)]);
        s.truncate(100);
        assert_eq!(s.extents(), vec![(2, 2)]);
        s.truncate(0);
        assert!(s.is_empty());
        assert_eq!(s.extents(), vec![]);
    }

    #[test]
    fn tail_run_measures_free_tail() {
        let s = set(&[(2, 2), (6, 4)]);
        assert_eq!(s.tail_run(10), 4);
        assert_eq!(s.tail_run(8), 2);
        assert_eq!(s.tail_run(11), 0);
        assert_eq!(s.tail_run(5), 0);
        assert_eq!(s.tail_run(4), 2);
        assert_eq!(s.tail_run(0), 0);
    }
}
