//! The buffers a write transaction fills and empties every time, kept by the writer between
//! transactions ([`crate::file::WriterState::scratch`]).
//!
//! A one-key commit used about 30 heap allocations: the transaction's lists (trees, names,
//! undo log, dirty-node arenas), the commit's page order, its write buffer and manifest, and
//! the page runs it takes and frees. With a run of small commits, `malloc` and `free` were 7%
//! of the CPU time of one-key Async overwrites (`perf record` of `write_cost`,
//! docs/performance.md "Allocations per commit"). A buffer is taken from here emptied, and
//! put back emptied with its capacity, unless it grew past [`KEEP_BYTES`]: a large commit
//! does not make the writer hold its memory afterwards.

use std::collections::HashMap;

use larch_pager::ManifestRun;

use crate::alloc::Undo;
use crate::node::{Node, NodeIdx};
use crate::write::{TreeIdx, TreeState};
use crate::PageId;

/// The largest buffer kept, in bytes of capacity.
pub(crate) const KEEP_BYTES: usize = 64 << 10;

/// The most dirty-node arenas kept (a transaction has one per tree it changed).
const KEEP_ARENAS: usize = 8;

/// The most nodes a kept arena has room for: what an arena grows to by itself before
/// `Txn::touch` sizes it from the tree (`SpareNodes::arena_hint`). A larger one, taken by the
/// next transaction's first small tree, would give it room for far more nodes than it has.
const KEEP_ARENA_NODES: usize = 8;

#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Emptied arenas of dirty nodes (`Txn::nodes`, `TreeState::nodes`).
    arenas: Vec<Vec<Node>>,
    pub trees: Vec<TreeState>,
    pub names: HashMap<String, TreeIdx>,
    pub undo: Vec<Undo>,
    /// `Txn::write_dirty_pages`: (page, tree, node) in page order, the encoded pages, the
    /// manifest.
    pub order: Vec<(PageId, TreeIdx, NodeIdx)>,
    pub buf: Vec<u8>,
    pub manifest: Vec<ManifestRun>,
    /// `Txn::gather_hot_pages`: (class, tree, page, node).
    pub hot_order: Vec<(u8, TreeIdx, PageId, NodeIdx)>,
    /// Page runs a commit takes or frees (`Txn::gather_hot_pages`, `Txn::commit_inner`).
    pub runs: [Vec<(PageId, u64)>; 3],
    /// `Txn::keep_written`: the pages of one tree's dirty nodes.
    pub pages: Vec<PageId>,
    /// Emptied strings, for tree names (`Txn::tree_index`).
    strings: Vec<String>,
    /// `Txn::freemap_changes`, emptied.
    pub changes: crate::freemap::Changes,
    /// When the heap large transactions freed goes back to the system.
    pub heap: HeapRelease,
}

/// When the heap a large transaction's dirty nodes freed goes back to the system
/// (`larch_pager::release_free_heap`). glibc keeps it otherwise: 1.7 GB after a
/// one-transaction load of 5,000,000 keys, counted in the process's resident memory and
/// unusable by the page cache (docs/performance.md, "Memory after a large transaction").
/// Given back, it must be faulted in again by the next large transaction: eight transactions
/// of 300,000 random inserts in a row ran about a fifth slower when every one gave it back
/// (`big_txn_memory` with `BIG_TXN_ROUNDS=8`). So:
/// a large transaction after a small one gives the heap back when it ends; one after a large
/// one keeps it for the next; the first small transaction after kept heap gives it back.
#[derive(Debug, Default)]
pub(crate) struct HeapRelease {
    /// The last transaction held [`HeapRelease::LARGE`] or more.
    last_large: bool,
    /// A large transaction ended without giving its heap back.
    kept: bool,
}

impl HeapRelease {
    /// A transaction whose dirty nodes held this many bytes of heap is large.
    pub const LARGE: usize = 64 << 20;

    /// A transaction whose dirty nodes held `held` bytes of heap ended (its nodes freed or
    /// kept as spares): whether to give the free heap back now.
    pub fn ended(&mut self, held: usize) -> bool {
        let large = held >= Self::LARGE;
        let release = if large { !self.last_large } else { self.kept };
        self.kept = large && !release;
        self.last_large = large;
        release
    }
}

impl Scratch {
    /// An empty arena for dirty nodes, with room if one was kept.
    pub fn arena(&mut self) -> Vec<Node> {
        self.arenas.pop().unwrap_or_default()
    }

    /// Keep an arena whose nodes were taken out (`SpareNodes::put`).
    pub fn put_arena(&mut self, a: Vec<Node>) {
        debug_assert!(a.is_empty());
        if (1..=KEEP_ARENA_NODES).contains(&a.capacity()) && self.arenas.len() < KEEP_ARENAS {
            self.arenas.push(a);
        }
    }
}

impl Scratch {
    /// A copy of `s`, in a kept string if there is one.
    pub fn string(&mut self, s: &str) -> String {
        let mut out = self.strings.pop().unwrap_or_default();
        out.push_str(s);
        out
    }

    /// Keep `s`'s buffer for [`Scratch::string`].
    pub fn put_string(&mut self, mut s: String) {
        if self.strings.len() < KEEP_STRINGS && (1..=KEEP_STRING_BYTES).contains(&s.capacity()) {
            s.clear();
            self.strings.push(s);
        }
    }
}

/// The most strings kept, and the longest.
const KEEP_STRINGS: usize = 16;
const KEEP_STRING_BYTES: usize = 256;

/// `v` emptied, to be stored back in a [`Scratch`] field: with its capacity unless that is
/// past [`KEEP_BYTES`].
pub(crate) fn emptied<T>(mut v: Vec<T>) -> Vec<T> {
    if fits(&v) {
        v.clear();
        v
    } else {
        Vec::new()
    }
}

fn fits<T>(v: &Vec<T>) -> bool {
    v.capacity().saturating_mul(std::mem::size_of::<T>()) <= KEEP_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emptied_keeps_small_buffers_and_drops_large_ones() {
        let mut small = Vec::with_capacity(100);
        small.extend_from_slice(&[1u8; 100]);
        let kept = emptied(small);
        assert!(kept.is_empty());
        assert_eq!(kept.capacity(), 100);
        let large = vec![0u64; KEEP_BYTES / 8 + 1];
        assert_eq!(emptied(large).capacity(), 0);
    }

    #[test]
    fn arenas_are_kept_up_to_a_count() {
        let mut s = Scratch::default();
        for _ in 0..KEEP_ARENAS + 3 {
            s.put_arena(Vec::with_capacity(4));
        }
        s.put_arena(Vec::new());
        s.put_arena(Vec::with_capacity(KEEP_ARENA_NODES + 1));
        assert_eq!(s.arenas.len(), KEEP_ARENAS);
        assert_eq!(s.arena().capacity(), 4);
    }

    #[test]
    fn kept_strings_come_back_empty_and_hold_the_copy() {
        let mut s = Scratch::default();
        let a = s.string("tree");
        assert_eq!(a, "tree");
        s.put_string(a);
        s.put_string(String::new());
        s.put_string("x".repeat(KEEP_STRING_BYTES + 1));
        assert_eq!(s.strings.len(), 1);
        assert_eq!(s.string("t"), "t");
        assert!(s.strings.is_empty());
    }
}

#[cfg(test)]
mod heap_release_tests {
    use super::HeapRelease;

    const BIG: usize = HeapRelease::LARGE;

    #[test]
    fn the_heap_goes_back_after_a_lone_large_transaction_and_is_kept_between_large_ones() {
        let mut h = HeapRelease::default();
        assert!(
            !h.ended(1 << 20),
            "small transactions keep nothing to give back"
        );
        assert!(
            h.ended(BIG),
            "a large transaction after a small one gives its heap back"
        );
        assert!(
            !h.ended(1 << 20),
            "nothing kept: the small one after it has none to give"
        );
        assert!(h.ended(2 * BIG));
        assert!(
            !h.ended(2 * BIG),
            "a large one after a large one keeps the heap"
        );
        assert!(!h.ended(3 * BIG), "and so does the next");
        assert!(
            h.ended(0),
            "the first small one after kept heap gives it back"
        );
        assert!(!h.ended(0));
        assert!(h.ended(BIG));
    }
}
