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

    /// Make pages start..start+n reusable (they must not already be in the set; debug_assert it).
    fn insert(&mut self, start: PageId, n: u64) {
        self.set_mut().insert(start, n);
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
