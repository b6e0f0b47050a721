//! The policy that never reuses a page.

use crate::{ExtentSet, FreeSpacePolicy, PageId, PolicyKind};

/// Never hands out a page, so every write appends: the control every smarter policy is
/// measured against.
///
/// Only [`FreeSpacePolicy::allocate`] refuses: [`FreeSpacePolicy::allocate_lowest`] still hands
/// out the lowest run, so in-place compaction can shrink a file written under Null.
///
/// It still records what is reusable, so stats and the persisted free map stay exact and a
/// database can be reopened under another policy without losing track of free pages.
#[derive(Debug, Default, Clone)]
pub struct NullPolicy {
    set: ExtentSet,
}

impl NullPolicy {
    /// An empty policy.
    pub fn new() -> Self {
        Self::default()
    }
}

impl FreeSpacePolicy for NullPolicy {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Null
    }

    fn allocate(&mut self, _n: u64) -> Option<PageId> {
        None
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
    fn null_never_reuses_but_counts() {
        let mut p = NullPolicy::new();
        p.insert(3, 4);
        p.insert(10, 1);
        for n in 1..6 {
            assert_eq!(p.allocate(n), None);
        }
        assert_eq!(p.len(), 5);
        assert!(p.contains(3) && p.contains(6) && p.contains(10));
        assert!(!p.contains(7));
        assert_eq!(p.extents(), vec![(3, 4), (10, 1)]);
    }

    #[test]
    fn null_answers_set_queries() {
        let mut p = NullPolicy::new();
        p.insert(0, 8);
        assert!(p.remove(2, 2));
        assert!(!p.remove(2, 1));
        assert_eq!(p.extents(), vec![(0, 2), (4, 4)]);
        assert_eq!(p.tail_run(8), 4);
        p.truncate(6);
        assert_eq!(p.extents(), vec![(0, 2), (4, 2)]);
        assert_eq!(p.len(), 4);
        assert!(!p.is_empty());
    }

    #[test]
    fn allocate_lowest_works_under_null() {
        let mut p = NullPolicy::new();
        p.insert(20, 4);
        p.insert(3, 2);
        assert_eq!(p.allocate_lowest(3), Some(20));
        assert_eq!(p.allocate_lowest(1), Some(3));
        assert_eq!(p.allocate_lowest(2), None, "runs left: (4, 1) and (23, 1)");
        assert_eq!(p.allocate_lowest(0), None);
        assert_eq!(p.extents(), vec![(4, 1), (23, 1)]);
        assert_eq!(p.len(), 2);
        assert_eq!(p.allocate(1), None, "allocate itself still never reuses");
    }
}
