//! Page allocation of a write transaction, freeing, and the undo log that puts the free-space
//! state back when the transaction does not commit.
//!
//! A page this transaction frees is not reusable at once unless this transaction allocated it:
//! a committed page stays pending under the transaction's txid (or reader-pinned, unpinned.rs)
//! until no reader and no crash fallback can reach it (docs/format.md, invariant 1).

use crate::write::Txn;
use crate::{PageId, TxId};

/// What to undo if the transaction does not commit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Undo {
    /// Pages taken from the policy's reusable set.
    Alloc(PageId, u64),
    /// Pages allocated by this transaction and given back to the policy.
    FreshFreed(PageId, u64),
    /// Committed pages this transaction stopped reaching (pending under its txid).
    Freed(PageId, u64),
    /// The same, for pages written after the last durable commit (unpinned.rs).
    ReaderFreed(PageId, u64),
}

impl Txn {
    /// `n` contiguous pages this transaction may write.
    pub(crate) fn alloc(&mut self, n: u64) -> PageId {
        let got = if self.compacting {
            self.writer.free.policy.allocate_lowest(n)
        } else {
            self.writer.free.policy.allocate(n)
        };
        let p = match got {
            Some(p) => {
                self.undo.push(Undo::Alloc(p, n));
                p
            }
            None => {
                let p = self.high_water;
                self.high_water += n;
                p
            }
        };
        for i in 0..n {
            self.freemap_changes.insert(p + i, false);
        }
        p
    }

    /// Committed pages this transaction no longer reaches: pending until safe.
    pub(crate) fn free_committed(&mut self, p: PageId, n: u64) {
        let written = self
            .base_view()
            .pages(p, 1)
            .ok()
            .and_then(larch_pager::PageHeader::read)
            .map_or(0, |h| h.txid);
        self.free_written(p, n, written);
    }

    /// [`Txn::free_committed`] of pages whose header (already read) says `written`
    /// wrote them.
    pub(crate) fn free_written(&mut self, p: PageId, n: u64, written: TxId) {
        // Written after the last durable commit: only readers can reach it (unpinned.rs).
        if written > self.on_disk {
            self.writer.reader_pinned.add(self.txid, p, n, written);
            self.undo.push(Undo::ReaderFreed(p, n));
        } else {
            self.writer.free.free(self.txid, p, n);
            self.undo.push(Undo::Freed(p, n));
        }
        for i in 0..n {
            self.freemap_changes.insert(p + i, true);
        }
    }

    /// Pages this transaction allocated and no longer needs: reusable at once, unless a
    /// savepoint may still need them. An overflow run is written when its value is inserted,
    /// so a run allocated before a savepoint, freed after it and reused would be overwritten
    /// under the entry a rollback brings back; such pages wait for the commit (`held_fresh`).
    pub(crate) fn free_fresh(&mut self, p: PageId, n: u64) {
        if self.savepoints.is_empty() {
            self.writer.free.policy.insert(p, n);
        } else {
            self.held_fresh.push((p, n));
        }
        self.undo.push(Undo::FreshFreed(p, n));
        for i in 0..n {
            self.freemap_changes.insert(p + i, true);
        }
    }

    /// Put the free-space state back as it was when the transaction began, and drop every
    /// dirty node.
    pub(crate) fn rollback(&mut self) {
        self.undo_to(0, self.base.meta.high_water);
        self.held_fresh.clear();
        self.park();
        for t in &mut self.trees {
            t.nodes.clear();
        }
        self.freemap_changes.clear();
    }

    /// Undo the allocations and frees logged after the first `len` entries of the undo log,
    /// and lower the high-water mark back to `high_water` (its value when the log was `len`
    /// long): the free-space state of that moment (a savepoint, or the transaction's start).
    pub(crate) fn undo_to(&mut self, len: usize, high_water: PageId) {
        let txid = self.txid;
        let writer = &mut *self.writer;
        let free = &mut writer.free;
        for u in self.undo.drain(len..).rev() {
            match u {
                Undo::Alloc(p, n) => {
                    if p < high_water {
                        free.policy.insert(p, n.min(high_water - p));
                    }
                }
                Undo::FreshFreed(p, n) => {
                    for q in p..p + n {
                        if free.policy.contains(q) {
                            free.policy.remove(q, 1);
                        }
                    }
                }
                Undo::Freed(p, n) => {
                    free.pending.remove(txid, p, n);
                }
                Undo::ReaderFreed(p, n) => {
                    writer.reader_pinned.remove(txid, p, n);
                }
            }
        }
        free.policy.truncate(high_water);
        self.high_water = high_water;
    }

    /// Lower the high-water mark over a run of reusable pages at the end of the file. Only
    /// runs worth it (1/32 of the file, at least 16 pages) unless compacting, so a file that
    /// breathes does not shrink and regrow on every commit. The file itself is truncated once
    /// a meta with the lower mark is durable (`OpenFile::trim_to_durable`).
    pub(crate) fn shrink_free_tail(&mut self) {
        let tail = self.writer.free.policy.tail_run(self.high_water);
        let worth = if self.compacting {
            1
        } else {
            (self.high_water / 32).max(16)
        };
        if tail < worth || tail == 0 {
            return;
        }
        let new_high_water = self.high_water - tail;
        if !self.writer.free.policy.remove(new_high_water, tail) {
            return;
        }
        // Like an allocation: undo puts the pages back.
        self.undo.push(Undo::Alloc(new_high_water, tail));
        for p in new_high_water..self.high_water {
            self.freemap_changes.insert(p, false);
        }
        self.high_water = new_high_water;
    }
}
