//! The whole in-memory free-space state of one database.

use crate::{FreeSpacePolicy, PageId, Pending, PolicyKind, TxId};

/// A policy plus the pending queue: the whole in-memory free-space state of one database.
#[derive(Debug)]
pub struct FreeSpace {
    /// Pages that may be overwritten now.
    pub policy: Box<dyn FreeSpacePolicy>,
    /// Pages freed but possibly still reachable by a reader or the fallback meta.
    pub pending: Pending,
}

impl FreeSpace {
    /// Empty state using the given policy.
    pub fn new(kind: PolicyKind) -> Self {
        Self {
            policy: kind.build(),
            pending: Pending::new(),
        }
    }

    /// Pages freed by `txid`: they become reusable only after `release(safe)` with safe >= txid.
    pub fn free(&mut self, txid: TxId, start: PageId, n: u64) {
        self.pending.add(txid, start, n);
    }

    /// Move everything freed by transactions <= safe into the policy's reusable set. Returns pages moved.
    pub fn release(&mut self, safe: TxId) -> u64 {
        let mut runs = self.pending.release(safe);
        self.policy.insert_runs(&mut runs);
        let n = runs.iter().map(|&(_, n)| n).sum();
        self.pending.recycle(runs);
        n
    }

    /// Pages reusable now.
    pub fn free_pages(&self) -> u64 {
        self.policy.len()
    }

    /// Pages freed but not yet reusable.
    pub fn pending_pages(&self) -> u64 {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_pages_not_reusable_until_release() {
        let mut fs = FreeSpace::new(PolicyKind::FirstFit);
        fs.free(5, 10, 2);
        assert_eq!(fs.policy.allocate(1), None);
        assert_eq!(fs.pending_pages(), 2);
        assert_eq!(fs.free_pages(), 0);

        assert_eq!(fs.release(4), 0, "freed by 5, not safe at 4");
        assert_eq!(fs.policy.allocate(1), None);

        assert_eq!(fs.release(5), 2);
        assert_eq!(fs.pending_pages(), 0);
        assert_eq!(fs.free_pages(), 2);
        assert_eq!(fs.policy.allocate(2), Some(10));
    }

    #[test]
    fn release_coalesces_runs_from_different_transactions() {
        let mut fs = FreeSpace::new(PolicyKind::FirstFit);
        fs.free(1, 4, 2);
        fs.free(2, 6, 2);
        fs.free(3, 8, 2);
        assert_eq!(fs.release(2), 4);
        assert_eq!(fs.policy.extents(), vec![(4, 4)]);
        assert_eq!(fs.release(3), 2);
        assert_eq!(fs.policy.extents(), vec![(4, 6)]);
        assert_eq!(fs.policy.tail_run(10), 6);
    }

    #[test]
    fn null_policy_releases_but_never_hands_out() {
        let mut fs = FreeSpace::new(PolicyKind::Null);
        fs.free(1, 0, 3);
        assert_eq!(fs.release(1), 3);
        assert_eq!(fs.free_pages(), 3);
        assert_eq!(fs.policy.allocate(1), None);
    }
}
