//! A set of page ids stored as sorted, coalesced extents.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use crate::PageId;

/// [`ExtentSet::insert_sorted`] rebuilds the set for a batch of at least this many runs...
const BULK_INSERT_MIN: usize = 32;
/// ...that is at least 1/`BULK_INSERT_RATIO` of the extents already in the set.
const BULK_INSERT_RATIO: usize = 8;

thread_local! {
    /// A smaller batch for which both batch paths are taken on this thread, whatever the
    /// set's size; 0: the thresholds above. Set by tests ([`set_bulk_batch_min`]).
    static BULK_MIN_OVERRIDE: Cell<usize> = const { Cell::new(0) };
    /// Batches this thread's [`ExtentSet::insert_sorted`] and [`ExtentSet::take_lowest`] took
    /// their batch path for ([`bulk_batches`]).
    static BULK_BATCHES: Cell<[u64; 2]> = const { Cell::new([0; 2]) };
}

/// How many batches [`ExtentSet::insert_sorted`] and [`ExtentSet::take_lowest`], in that
/// order, called on this thread took their batch path for: tests check their generators
/// reach it. For tests only.
#[doc(hidden)]
pub fn bulk_batches() -> [u64; 2] {
    BULK_BATCHES.with(Cell::get)
}

fn count_bulk(which: usize) {
    BULK_BATCHES.with(|c| {
        let mut n = c.get();
        n[which] += 1;
        c.set(n);
    });
}

/// Make [`ExtentSet::insert_sorted`] and [`ExtentSet::take_lowest`] called on this thread take
/// their batch path for every batch of at least `n` runs (0: the built-in thresholds), so
/// that tests with small files reach it. Both paths leave the same set; this chooses only
/// which one runs. For tests only.
#[doc(hidden)]
pub fn set_bulk_batch_min(n: usize) {
    BULK_MIN_OVERRIDE.with(|c| c.set(n));
}

/// Does a batch of `runs` runs (or whole extents) against a set of `extents` take the batch
/// path?
fn bulk(runs: usize, extents: usize) -> bool {
    match BULK_MIN_OVERRIDE.with(Cell::get) {
        0 => runs >= BULK_INSERT_MIN && runs * BULK_INSERT_RATIO >= extents,
        n => runs >= n,
    }
}

/// A set of page ids kept as sorted, non-empty, coalesced extents `start -> len`.
///
/// Every policy stores its reusable set here and differs only in how it picks from it.
/// Extents never touch or overlap: that keeps "is there a run of n pages" a question about a
/// single extent, and makes [`ExtentSet::extents`] directly the persisted form.
///
/// A set made with [`ExtentSet::with_length_index`] also keeps every extent indexed by
/// `(len, start)`, so [`ExtentSet::best_fit`] and [`ExtentSet::largest`] are O(log extents)
/// instead of a scan. Both indexes change only through two private helpers, so coalescing,
/// splitting and truncation keep them consistent by construction. Policies that never ask by
/// length leave the index off and pay nothing for it.
///
/// A run whose end would pass `u64::MAX` is clamped there: such page ids can never exist in a
/// file, and clamping keeps every stored `start + len` free of overflow.
#[derive(Debug, Default, Clone)]
pub struct ExtentSet {
    by_start: BTreeMap<PageId, u64>,
    /// `(len, start)` of every extent in `by_start`, when the length index is on.
    by_len: Option<BTreeSet<(u64, PageId)>>,
    pages: u64,
}

/// Two sets are equal when they hold the same pages, whether or not either keeps a length index.
impl PartialEq for ExtentSet {
    fn eq(&self, other: &Self) -> bool {
        self.by_start == other.by_start
    }
}

impl Eq for ExtentSet {}

impl ExtentSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty set that also indexes its extents by length (see [`ExtentSet::best_fit`]).
    pub fn with_length_index() -> Self {
        Self {
            by_len: Some(BTreeSet::new()),
            ..Self::default()
        }
    }

    /// Does this set keep the by-length index?
    pub fn has_length_index(&self) -> bool {
        self.by_len.is_some()
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

    /// Length of the extent that starts exactly at `start`, if one does.
    pub fn extent_at(&self, start: PageId) -> Option<u64> {
        self.by_start.get(&start).copied()
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
                self.unlink(s, l);
            }
        }
        // `..=hi` so that an extent starting exactly at the new end is merged too.
        while let Some((&s, &l)) = self.by_start.range(lo..=hi).next() {
            hi = hi.max(s + l);
            absorbed += l;
            self.unlink(s, l);
        }
        self.link(lo, hi - lo);
        self.pages += (hi - lo) - absorbed;
    }

    /// Add every run of `runs`, sorted by start: the same set as [`ExtentSet::insert`] of
    /// each. A batch that is large beside the set (a commit releasing the ~1,000 scattered
    /// pages a load commit freed) is merged with the extents in one pass and the indexes are
    /// built again from the sorted result, where one insert each would cost two or three
    /// B-tree searches and updates per run (~1,500 instructions a page at 200,000 documents,
    /// docs/performance.md, "The free set's batch insert").
    pub fn insert_sorted(&mut self, runs: &[(PageId, u64)]) {
        debug_assert!(
            runs.windows(2)
                .all(|w| w[0].0.saturating_add(w[0].1) <= w[1].0),
            "runs not sorted or overlapping"
        );
        if !bulk(runs.len(), self.by_start.len()) {
            for &(p, n) in runs {
                self.insert(p, n);
            }
            return;
        }
        debug_assert!(
            runs.iter()
                .all(|&(p, n)| !self.overlaps(p, p.saturating_add(n))),
            "runs already partly in the set"
        );
        count_bulk(0);
        let mut merged: Vec<(PageId, u64)> = Vec::with_capacity(self.by_start.len() + runs.len());
        // Pages already present are merged, not double-counted, as insert does.
        let mut push = |s: PageId, e: PageId| {
            if s >= e {
                return;
            }
            if let Some(last) = merged.last_mut() {
                if last.0 + last.1 >= s {
                    last.1 = last.1.max(e - last.0);
                    return;
                }
            }
            merged.push((s, e - s));
        };
        let mut new = runs
            .iter()
            .map(|&(p, n)| (p, p.saturating_add(n)))
            .peekable();
        for (&s, &l) in &self.by_start {
            while let Some(&(p, e)) = new.peek().filter(|r| r.0 < s) {
                push(p, e);
                new.next();
            }
            push(s, s + l);
        }
        for (p, e) in new {
            push(p, e);
        }
        self.pages = merged.iter().map(|&(_, l)| l).sum();
        // Built from sorted input: `BTreeMap::from_iter` finds the order and builds in bulk.
        self.by_start = merged.iter().copied().collect();
        if let Some(by_len) = &mut self.by_len {
            *by_len = merged.iter().map(|&(s, l)| (l, s)).collect();
        }
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
        self.unlink(s, l);
        if start > s {
            self.link(s, start - s);
        }
        if s + l > end {
            self.link(end, s + l - end);
        }
        self.pages -= n;
        true
    }

    /// The lowest extent `(start, len)` holding at least `n` pages.
    ///
    /// The scan is linear in the number of extents that are too short, so single-page
    /// requests (the common case) cost one lookup.
    pub fn first_fit(&self, n: u64) -> Option<(PageId, u64)> {
        self.iter().find(|&(_, l)| l >= n.max(1))
    }

    /// The shortest extent `(start, len)` holding at least `n` pages; among equally short ones,
    /// the lowest. O(log extents) with the length index, a full scan without it.
    pub fn best_fit(&self, n: u64) -> Option<(PageId, u64)> {
        let n = n.max(1);
        match &self.by_len {
            Some(by_len) => by_len.range((n, 0)..).next().map(|&(l, s)| (s, l)),
            None => self
                .iter()
                .filter(|&(_, l)| l >= n)
                .min_by_key(|&(s, l)| (l, s)),
        }
    }

    /// The longest extent `(start, len)`; among equally long ones, the lowest. O(log extents)
    /// with the length index, a full scan without it.
    pub fn largest(&self) -> Option<(PageId, u64)> {
        match &self.by_len {
            Some(by_len) => {
                let &(l, _) = by_len.iter().next_back()?;
                by_len.range((l, 0)..).next().map(|&(l, s)| (s, l))
            }
            None => self.iter().max_by_key(|&(s, l)| (l, std::cmp::Reverse(s))),
        }
    }

    /// Every extent `(start, len)` with `len >= min_len`, in no particular order. With the
    /// length index this visits only those extents; without it, all of them.
    pub fn long_extents(&self, min_len: u64) -> impl Iterator<Item = (PageId, u64)> + '_ {
        let indexed = self
            .by_len
            .as_ref()
            .map(|by_len| by_len.range((min_len, 0)..).map(|&(l, s)| (s, l)));
        let scanned = self
            .by_len
            .is_none()
            .then(|| self.iter().filter(move |&(_, l)| l >= min_len));
        indexed
            .into_iter()
            .flatten()
            .chain(scanned.into_iter().flatten())
    }

    /// Take `n` pages from the start of the lowest extent holding at least `n`.
    ///
    /// Linear in the number of extents that are too short, like [`ExtentSet::first_fit`].
    pub fn take_first_fit(&mut self, n: u64) -> Option<PageId> {
        if n == 0 {
            return None;
        }
        let (s, l) = self.first_fit(n)?;
        self.take_front(s, l, n);
        Some(s)
    }

    /// Take the lowest `n` pages of the set (fewer if it holds fewer), appending them to `out`
    /// as runs `(start, len)`, lowest first; returns how many it took. The same pages, in the
    /// same order, as `n` calls of [`ExtentSet::take_first_fit`]`(1)`, in one pass: a batch
    /// that empties many extents splits the start index once and builds the length index
    /// again from what is left, where one call each would search and update both per page.
    pub fn take_lowest(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        if n == 0 {
            return 0;
        }
        // The whole extents the batch empties, and the pages it takes from the next one.
        let mut whole = 0usize;
        let mut pages = 0u64;
        let mut split: Option<(PageId, u64)> = None;
        for (&s, &l) in &self.by_start {
            if pages + l > n {
                split = Some((s, l));
                break;
            }
            pages += l;
            whole += 1;
            if pages == n {
                break;
            }
        }
        let mut push = |s: PageId, l: u64| match out.last_mut() {
            Some((start, len)) if *start + *len == s => *len += l,
            _ => out.push((s, l)),
        };
        if bulk(whole, self.by_start.len()) {
            count_bulk(1);
            let rest = match self.by_start.iter().nth(whole) {
                Some((&s, _)) => self.by_start.split_off(&s),
                None => BTreeMap::new(),
            };
            let taken = std::mem::replace(&mut self.by_start, rest);
            for (&s, &l) in &taken {
                push(s, l);
            }
            if let Some(by_len) = &mut self.by_len {
                *by_len = self.by_start.iter().map(|(&s, &l)| (l, s)).collect();
            }
            self.pages -= pages;
        } else {
            for _ in 0..whole {
                let (s, l) = self
                    .by_start
                    .first_key_value()
                    .map(|(&s, &l)| (s, l))
                    .expect("counted");
                self.take_front(s, l, l);
                push(s, l);
            }
        }
        if let Some((s, l)) = split {
            let k = n - pages;
            self.take_front(s, l, k);
            push(s, k);
            pages += k;
        }
        pages
    }

    /// Take `n` pages from the start of the shortest extent holding at least `n` (ties: the
    /// lowest). See [`ExtentSet::best_fit`] for the cost.
    pub fn take_best_fit(&mut self, n: u64) -> Option<PageId> {
        if n == 0 {
            return None;
        }
        let (s, l) = self.best_fit(n)?;
        self.take_front(s, l, n);
        Some(s)
    }

    /// Take up to `n` pages in as few runs as the set allows, appending each `(start, len)` to
    /// `out`: the shortest extent that holds all that is still wanted if there is one, else
    /// the longest extent, again, until no extent of `min_run` pages or more is left; then
    /// single pages, lowest first. Returns the pages taken (fewer than `n` only when the set
    /// runs out). With the length index each run costs O(log extents), without it a scan.
    pub fn take_runs(&mut self, n: u64, min_run: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        let mut left = n;
        while left > 0 {
            if let Some((s, l)) = self.best_fit(left) {
                self.take_front(s, l, left);
                out.push((s, left));
                left = 0;
                break;
            }
            match self.largest() {
                Some((s, l)) if l >= min_run.max(2) => {
                    self.take_front(s, l, l);
                    out.push((s, l));
                    left -= l;
                }
                _ => break,
            }
        }
        left -= self.take_singles(left, out);
        n - left
    }

    /// Take up to `n` pages lowest first, in whole extents of `min_run` pages or more (the last
    /// one only in part) as long as there are such extents, then single pages, lowest first;
    /// each `(start, len)` appended to `out`. Returns the pages taken (fewer than `n` only when
    /// the set runs out). Unlike [`ExtentSet::take_runs`] it does not reach for the longest
    /// extent, which is often the free tail of the file that would otherwise be given back.
    /// O(extents) for the scan.
    pub fn take_low_runs(&mut self, n: u64, min_run: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        let got = self.take_long_runs(n, min_run, out);
        got + self.take_singles(n - got, out)
    }

    /// Take up to `n` pages lowest first, in whole extents of `min_run` pages or more (the last
    /// one only in part), and nothing from shorter extents; each `(start, len)` appended to
    /// `out`. Returns the pages taken. O(extents) for the scan.
    pub fn take_long_runs(&mut self, n: u64, min_run: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        let mut left = n;
        let mut picked = Vec::new();
        for (&s, &l) in &self.by_start {
            if left == 0 {
                break;
            }
            if l >= min_run.max(2) {
                let k = l.min(left);
                picked.push((s, l, k));
                left -= k;
            }
        }
        for (s, l, k) in picked {
            self.take_front(s, l, k);
            out.push((s, k));
        }
        n - left
    }

    /// Up to `n` single pages, lowest first, appended to `out` (a page right after the last
    /// run extends it). Returns the pages taken.
    fn take_singles(&mut self, n: u64, out: &mut Vec<(PageId, u64)>) -> u64 {
        let mut got = 0;
        while got < n {
            let Some(s) = self.take_first_fit(1) else {
                break;
            };
            match out.last_mut() {
                Some((start, len)) if *start + *len == s => *len += 1,
                _ => out.push((s, 1)),
            }
            got += 1;
        }
        got
    }

    /// Drop every page >= `end`.
    pub fn truncate(&mut self, end: PageId) {
        let dropped = self.by_start.split_off(&end);
        for (&s, &l) in &dropped {
            self.pages -= l;
            if let Some(by_len) = &mut self.by_len {
                by_len.remove(&(l, s));
            }
        }
        if let Some((&s, &l)) = self.by_start.iter().next_back() {
            if s + l > end {
                self.unlink(s, l);
                self.link(s, end - s);
                self.pages -= s + l - end;
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

    /// Remove the first `n` (1..=l) pages of the extent `(s, l)`.
    fn take_front(&mut self, s: PageId, l: u64, n: u64) {
        debug_assert!(n >= 1 && n <= l && self.by_start.get(&s) == Some(&l));
        self.unlink(s, l);
        if l > n {
            self.link(s + n, l - n);
        }
        self.pages -= n;
    }

    /// Record extent `(s, l)` in every index. Does not touch the page count.
    fn link(&mut self, s: PageId, l: u64) {
        debug_assert!(l > 0);
        let old = self.by_start.insert(s, l);
        debug_assert!(old.is_none(), "extent at {s} linked twice");
        if let Some(by_len) = &mut self.by_len {
            by_len.insert((l, s));
        }
    }

    /// Forget extent `(s, l)` in every index. Does not touch the page count.
    fn unlink(&mut self, s: PageId, l: u64) {
        let old = self.by_start.remove(&s);
        debug_assert_eq!(old, Some(l), "extent at {s} is not of length {l}");
        if let Some(by_len) = &mut self.by_len {
            let had = by_len.remove(&(l, s));
            debug_assert!(had, "length index lost extent ({s}, {l})");
        }
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

    /// Panics unless both indexes and the page count agree (tests only).
    #[cfg(test)]
    fn assert_consistent(&self) {
        let mut prev_end: Option<PageId> = None;
        for (s, l) in self.iter() {
            assert!(l > 0, "empty extent at {s}");
            if let Some(e) = prev_end {
                assert!(e < s, "extents touch or overlap at {s}");
            }
            prev_end = Some(s + l);
        }
        assert_eq!(self.pages, self.iter().map(|(_, l)| l).sum::<u64>());
        if let Some(by_len) = &self.by_len {
            let expected: BTreeSet<(u64, PageId)> = self.iter().map(|(s, l)| (l, s)).collect();
            assert_eq!(by_len, &expected, "length index out of step");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Insert `runs` into `a` one at a time and into `b` as a batch: the same set after.
    fn insert_both_ways(
        a: &mut ExtentSet,
        b: &mut ExtentSet,
        runs: &[(PageId, u64)],
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        for &(p, n) in runs {
            a.insert(p, n);
        }
        b.insert_sorted(runs);
        b.assert_consistent();
        proptest::prop_assert_eq!(a.extents(), b.extents());
        proptest::prop_assert_eq!(a.len(), b.len());
        Ok(())
    }

    /// `n` calls of `take_first_fit(1)`, the pages merged into runs as `take_lowest` gives them.
    fn take_one_at_a_time(set: &mut ExtentSet, n: u64) -> Vec<(PageId, u64)> {
        let mut runs: Vec<(PageId, u64)> = Vec::new();
        for _ in 0..n {
            let Some(p) = set.take_first_fit(1) else {
                break;
            };
            match runs.last_mut() {
                Some((s, l)) if *s + *l == p => *l += 1,
                _ => runs.push((p, 1)),
            }
        }
        runs
    }

    proptest::proptest! {
        /// A batch insert leaves the same set, page count and length index as inserting each
        /// run, on both of its paths (one insert each for small batches, merge and rebuild for
        /// large ones), with runs that touch each other and the extents already there.
        #[test]
        fn insert_sorted_matches_inserting_each(
            // Per page of a 3,000-page file: 0 neither, 1 in the set, 2 in the batch.
            owner in proptest::collection::vec(0u8..3, 3000),
            // Where the batch's runs are cut (pages that start a new run though they touch).
            cuts in proptest::collection::vec(proptest::bool::ANY, 3000),
            indexed_set in proptest::bool::ANY,
            sparse in 1usize..40,
        ) {
            // Thin the batch so that some cases fall under the bulk thresholds.
            let owner: Vec<u8> = owner
                .iter()
                .enumerate()
                .map(|(i, &o)| if o == 2 && i % sparse != 0 { 0 } else { o })
                .collect();
            let mut a = if indexed_set { ExtentSet::with_length_index() } else { ExtentSet::new() };
            for (p, _) in owner.iter().enumerate().filter(|(_, &o)| o == 1) {
                a.insert(p as PageId, 1);
            }
            let mut b = a.clone();
            let mut runs: Vec<(PageId, u64)> = Vec::new();
            for (p, _) in owner.iter().enumerate().filter(|(_, &o)| o == 2) {
                let p = p as PageId;
                match runs.last_mut() {
                    Some(last) if last.0 + last.1 == p && !cuts[p as usize] => last.1 += 1,
                    _ => runs.push((p, 1)),
                }
            }
            insert_both_ways(&mut a, &mut b, &runs)?;
            proptest::prop_assert_eq!(a.has_length_index(), b.has_length_index());
        }
    }

    proptest::proptest! {
        /// Taking the lowest `n` pages in one call leaves the same set and hands out the same
        /// pages in the same order as `n` calls of `take_first_fit(1)`, on both of its paths.
        #[test]
        fn take_lowest_matches_taking_one_page_at_a_time(
            member in proptest::collection::vec(0u8..4, 2000),
            n in 0u64..1500,
            indexed_set in proptest::bool::ANY,
        ) {
            let mut a = if indexed_set { ExtentSet::with_length_index() } else { ExtentSet::new() };
            for (p, _) in member.iter().enumerate().filter(|(_, &m)| m != 0) {
                a.insert(p as PageId, 1);
            }
            let mut b = a.clone();
            let want = take_one_at_a_time(&mut a, n);
            let mut got = Vec::new();
            let took = b.take_lowest(n, &mut got);
            b.assert_consistent();
            proptest::prop_assert_eq!(took, want.iter().map(|r| r.1).sum::<u64>());
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(a.extents(), b.extents());
            proptest::prop_assert_eq!(a.len(), b.len());
        }
    }

    #[test]
    fn insert_sorted_of_a_large_batch_merges_with_neighbours() {
        for mut s in [set(&[(0, 1), (100, 5)]), indexed(&[(0, 1), (100, 5)])] {
            // 40 runs: past BULK_INSERT_MIN, so the set is rebuilt.
            let mut runs: Vec<(PageId, u64)> = (0..40).map(|i| (2 + 2 * i, 1)).collect();
            runs.push((95, 5)); // ends where (100, 5) starts
            runs.push((105, 2)); // starts where it ends
            runs.push((1 << 40, u64::MAX)); // clamped at u64::MAX, as insert does
            s.insert_sorted(&runs);
            s.assert_consistent();
            let mut want: Vec<(PageId, u64)> = vec![(0, 1)];
            want.extend((0..40).map(|i| (2 + 2 * i, 1)));
            want.push((95, 12));
            want.push((1 << 40, u64::MAX - (1 << 40)));
            assert_eq!(s.extents(), want);
            assert_eq!(s.len(), 1 + 40 + 12 + (u64::MAX - (1 << 40)));
        }
    }

    proptest::proptest! {
        /// Release builds, where the debug_asserts against pages already in the set are off:
        /// a batch that overlaps itself and the set, some of it clamped at `u64::MAX`, leaves
        /// the union on both paths of `insert_sorted`, as `insert` of each run does, and
        /// `take_lowest` then hands out what `take_first_fit(1)` would.
        #[test]
        #[cfg(not(debug_assertions))]
        fn overlapping_and_clamped_batches_match_one_at_a_time(
            set_runs in proptest::collection::vec((0u64..400, 0u64..6), 0..80),
            mut runs in proptest::collection::vec((0u64..400, 0u64..6), 0..120),
            near_max in proptest::bool::ANY,
            indexed_set in proptest::bool::ANY,
        ) {
            // Near u64::MAX every start is at most 200 pages below it, so runs get clamped.
            let at = |p: u64| if near_max { u64::MAX - 200 + p.min(200) } else { p };
            let mut a = if indexed_set { ExtentSet::with_length_index() } else { ExtentSet::new() };
            for &(p, n) in &set_runs {
                a.insert(at(p), n);
            }
            runs.sort_unstable();
            let runs: Vec<(PageId, u64)> = runs.iter().map(|&(p, n)| (at(p), n)).collect();
            let mut b = a.clone();
            insert_both_ways(&mut a, &mut b, &runs)?;
            let n = 2 * runs.len() as u64;
            let want = take_one_at_a_time(&mut a, n);
            let mut got = Vec::new();
            proptest::prop_assert_eq!(b.take_lowest(n, &mut got), want.iter().map(|r| r.1).sum::<u64>());
            b.assert_consistent();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(a.extents(), b.extents());
            proptest::prop_assert_eq!(a.len(), b.len());
        }
    }

    fn set(runs: &[(PageId, u64)]) -> ExtentSet {
        let mut s = ExtentSet::new();
        for &(start, n) in runs {
            s.insert(start, n);
        }
        s
    }

    #[test]
    fn take_runs_takes_the_shortest_extent_that_holds_everything() {
        for mut s in [
            set(&[(2, 1), (10, 8), (30, 5), (50, 20)]),
            indexed(&[(2, 1), (10, 8), (30, 5), (50, 20)]),
        ] {
            let mut out = Vec::new();
            assert_eq!(s.take_runs(6, 2, &mut out), 6);
            assert_eq!(out, vec![(10, 6)]);
            assert_eq!(s.extents(), vec![(2, 1), (16, 2), (30, 5), (50, 20)]);
            assert_eq!(s.len(), 28);
        }
    }

    #[test]
    fn take_runs_takes_the_longest_extents_then_single_pages() {
        for mut s in [
            set(&[(2, 1), (4, 1), (10, 3), (20, 4), (40, 1)]),
            indexed(&[(2, 1), (4, 1), (10, 3), (20, 4), (40, 1)]),
        ] {
            let mut out = Vec::new();
            // 4 + 3 from the two long extents, then the lowest single pages.
            assert_eq!(s.take_runs(9, 2, &mut out), 9);
            assert_eq!(out, vec![(20, 4), (10, 3), (2, 1), (4, 1)]);
            assert_eq!(s.extents(), vec![(40, 1)]);
            // More than the set holds: all of it, and the count says so.
            let mut out = Vec::new();
            assert_eq!(s.take_runs(5, 2, &mut out), 1);
            assert_eq!(out, vec![(40, 1)]);
            assert!(s.is_empty());
        }
        // Extents shorter than min_run are taken one page at a time, lowest first.
        let mut s = indexed(&[(7, 2), (3, 2)]);
        let mut out = Vec::new();
        assert_eq!(s.take_runs(5, 3, &mut out), 4);
        assert_eq!(out, vec![(3, 2), (7, 2)]);
    }

    #[test]
    fn take_low_runs_takes_the_lowest_long_extents_then_single_pages() {
        for mut s in [
            set(&[(2, 1), (4, 1), (10, 3), (20, 4), (40, 1), (50, 30)]),
            indexed(&[(2, 1), (4, 1), (10, 3), (20, 4), (40, 1), (50, 30)]),
        ] {
            let mut out = Vec::new();
            // 3 + 4 from the lowest long extents, 2 of the next, never the long tail first.
            assert_eq!(s.take_low_runs(9, 2, &mut out), 9);
            assert_eq!(out, vec![(10, 3), (20, 4), (50, 2)]);
            assert_eq!(s.extents(), vec![(2, 1), (4, 1), (40, 1), (52, 28)]);
            // Then the single pages once no long extent is left.
            let mut out = Vec::new();
            assert_eq!(s.take_low_runs(28, 2, &mut out), 28);
            assert_eq!(out, vec![(52, 28)]);
            let mut out = Vec::new();
            assert_eq!(s.take_low_runs(5, 2, &mut out), 3);
            assert_eq!(out, vec![(2, 1), (4, 1), (40, 1)]);
            assert!(s.is_empty());
        }
    }

    #[test]
    fn take_long_runs_takes_only_extents_of_the_minimum_length_lowest_first() {
        for mut s in [
            set(&[(2, 1), (4, 15), (30, 16), (60, 3), (80, 40)]),
            indexed(&[(2, 1), (4, 15), (30, 16), (60, 3), (80, 40)]),
        ] {
            let mut out = Vec::new();
            assert_eq!(s.take_long_runs(20, 16, &mut out), 20);
            assert_eq!(out, vec![(30, 16), (80, 4)]);
            let mut out = Vec::new();
            // Short of pages: what the long extents have, nothing from the short ones.
            assert_eq!(s.take_long_runs(100, 16, &mut out), 36);
            assert_eq!(out, vec![(84, 36)]);
            assert_eq!(s.extents(), vec![(2, 1), (4, 15), (60, 3)]);
        }
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

    fn indexed(runs: &[(PageId, u64)]) -> ExtentSet {
        let mut s = ExtentSet::with_length_index();
        for &(start, n) in runs {
            s.insert(start, n);
        }
        s.assert_consistent();
        s
    }

    #[test]
    fn best_fit_picks_shortest_extent_then_lowest() {
        for mut s in [
            set(&[(2, 5), (10, 2), (20, 3), (30, 2)]),
            indexed(&[(2, 5), (10, 2), (20, 3), (30, 2)]),
        ] {
            assert_eq!(s.best_fit(1), Some((10, 2)));
            assert_eq!(s.best_fit(3), Some((20, 3)));
            assert_eq!(s.best_fit(4), Some((2, 5)));
            assert_eq!(s.best_fit(6), None);
            assert_eq!(s.take_best_fit(2), Some(10));
            assert_eq!(s.take_best_fit(2), Some(30));
            assert_eq!(s.take_best_fit(1), Some(20));
            assert_eq!(s.take_best_fit(0), None);
            assert_eq!(s.extents(), vec![(2, 5), (21, 2)]);
            assert_eq!(s.len(), 7);
        }
    }

    #[test]
    fn largest_prefers_lowest_among_equal_extents() {
        for s in [
            set(&[(40, 3), (2, 1), (10, 3)]),
            indexed(&[(40, 3), (2, 1), (10, 3)]),
        ] {
            assert_eq!(s.largest(), Some((10, 3)));
        }
        assert_eq!(ExtentSet::with_length_index().largest(), None);
        assert_eq!(ExtentSet::new().largest(), None);
    }

    #[test]
    fn first_fit_and_extent_at_look_without_taking() {
        let s = set(&[(2, 1), (5, 3), (10, 2)]);
        assert_eq!(s.first_fit(2), Some((5, 3)));
        assert_eq!(s.first_fit(4), None);
        assert_eq!(s.extent_at(5), Some(3));
        assert_eq!(s.extent_at(6), None);
        assert_eq!(s.len(), 6);
    }

    #[test]
    fn long_extents_lists_exactly_the_long_ones() {
        for s in [
            set(&[(0, 2), (5, 8), (20, 9), (40, 1)]),
            indexed(&[(0, 2), (5, 8), (20, 9), (40, 1)]),
        ] {
            let mut got: Vec<_> = s.long_extents(8).collect();
            got.sort();
            assert_eq!(got, vec![(5, 8), (20, 9)]);
            assert_eq!(s.long_extents(10).count(), 0);
            assert_eq!(s.long_extents(0).count(), 4);
        }
    }

    #[test]
    fn equality_ignores_the_length_index() {
        assert_eq!(set(&[(1, 2), (3, 4)]), indexed(&[(1, 6)]));
        assert_ne!(set(&[(1, 2)]), indexed(&[(1, 3)]));
    }

    #[test]
    fn length_index_follows_coalescing_splitting_and_truncation() {
        // A deterministic pseudo-random mix of every mutation, checked against an unindexed twin.
        let mut plain = ExtentSet::new();
        let mut idx = ExtentSet::with_length_index();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..4000 {
            let (a, b) = (next(200), 1 + next(6));
            match next(6) {
                0 | 1 => {
                    if !(a..a + b).any(|p| plain.contains(p)) {
                        plain.insert(a, b);
                        idx.insert(a, b);
                    }
                }
                2 => assert_eq!(plain.remove(a, b), idx.remove(a, b)),
                3 => assert_eq!(plain.take_best_fit(b), idx.take_best_fit(b)),
                4 => assert_eq!(plain.take_first_fit(b), idx.take_first_fit(b)),
                _ => {
                    if next(8) == 0 {
                        plain.truncate(a + 20);
                        idx.truncate(a + 20);
                    }
                }
            }
            idx.assert_consistent();
            plain.assert_consistent();
            assert_eq!(plain, idx);
            assert_eq!(plain.len(), idx.len());
            assert_eq!(plain.largest(), idx.largest());
            assert_eq!(plain.best_fit(b), idx.best_fit(b));
        }
    }
}
