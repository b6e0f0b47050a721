//! Sorted bulk load inside a write transaction (`WriteTree::append`): entries whose keys come
//! in ascending order are added at the end of the tree without a search per key.
//!
//! The tree's rightmost path (root to last leaf) is made dirty once and kept as a `Tail`;
//! each append pushes into the last leaf. A full leaf is not split in half as an insert would
//! split it: it stays full and a new leaf starts, with the shortest separator in its parent;
//! a full branch likewise starts a new branch beside it, and a full root grows a level. This
//! is the fill rule of compaction's copy (compact.rs, `Node::has_room`), so a tree loaded by
//! appends has full pages except along its right edge.
//!
//! The tail is only valid while nothing else edits the tree: `WriteTree` drops it on every
//! other edit, and keeps it in the handle, not the transaction, so a savepoint, a commit or a
//! deleted tree (none possible while the handle is open) never sees it.
//!
//! A leaf left full is final unless a later edit of the same transaction lands in it, so a
//! long append does not keep it in memory until the commit: the tree notes each one with the
//! branch that holds it (`TreeState::full_leaves`; so does an insert that splits the tree's
//! last leaf at its end, redistribute.rs), and every [`SPILL_BATCH`] of them are
//! written at once before the commit (`Txn::spill`, docs/format.md "Pages written before the
//! commit"). Their branch then holds their pages, their buffers serve the next leaves, and
//! the commit lists them in its manifest with the pages it writes itself.

use crate::alloc::PROVISIONAL;
use crate::error::{Error, Result};
use crate::mutate::separator;
use crate::node::{Child, Node, NodeIdx, Val};
use crate::write::{TreeIdx, Txn};
use larch_pager::{ManifestRun, PageRole};

/// How many full leaves a spill writes at once: 256 KiB of 4 KiB pages in one write call
/// when the free set or the end of the file has the run, so a big transaction makes about as
/// few write calls as its commit would (one per 1 MiB run), and holds no more than this many
/// finished leaves in memory.
pub(crate) const SPILL_BATCH: usize = 64;

/// The most a spill grows the file past the pages it writes: a long append grows it in
/// steps of 1 MiB, not 1/8 of the file (`larch_pager::growth_step`), so that what the append
/// leaves allocated past its last page stays small.
pub(crate) const SPILL_GROWTH: u64 = 1 << 20;

thread_local! {
    static SPILL_BATCH_OVERRIDE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Make appends on this thread write their full leaves before the commit in batches of `n`
/// (0: [`SPILL_BATCH`]), so that tests with small trees reach the spill and what follows it
/// (a later edit of a written leaf, a savepoint, a failed write). For tests only.
#[doc(hidden)]
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub fn set_spill_batch(n: usize) {
    SPILL_BATCH_OVERRIDE.with(|c| c.set(n));
}

fn spill_batch() -> usize {
    match SPILL_BATCH_OVERRIDE.with(std::cell::Cell::get) {
        0 => SPILL_BATCH,
        n => n,
    }
}

/// What a `WriteTree` keeps between appends. Empty until the first append of a handle
/// finds the path.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    /// The rightmost path of the tree, root first: every node on it is dirty.
    path: Vec<NodeIdx>,
}

impl Tail {
    /// Forget the path (another edit may have changed it).
    pub(crate) fn clear(&mut self) {
        self.path.clear();
    }

    /// The last leaf.
    pub(crate) fn leaf(&self) -> Option<NodeIdx> {
        self.path.last().copied()
    }
}

impl Txn {
    /// Add `key`/`value` after the last entry of tree `t`. The caller has checked that `key`
    /// is greater than the tree's last key; `tail` is the tree's rightmost path from an
    /// earlier call, or empty.
    pub(crate) fn append(
        &mut self,
        t: TreeIdx,
        tail: &mut Tail,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        self.limits_check(key, value.len())?;
        self.activate(t);
        self.spill_full_leaves(t)?;
        if tail.path.is_empty() {
            self.find_tail(t, &mut tail.path, key)?;
        }
        let val = if self.limits.inline(key.len(), value.len()) {
            Val::Inline(value)
        } else {
            self.write_overflow(value)?
        };
        self.trees[t].dirty = true;
        self.trees[t].entries = self.trees[t].entries.saturating_add(1);
        let cap = self.limits.capacity;
        let role = self.trees[t].role;
        let Some(leaf) = tail.leaf() else {
            // An empty tree: its first leaf is the root.
            let page = self.alloc_node();
            let mut n = Node::empty(page, true, role);
            n.push(key, val);
            self.nodes.push(n);
            let root = self.nodes.len() - 1;
            self.trees[t].root = Some(Child::Node(root));
            self.trees[t].depth = 1;
            tail.path.push(root);
            return Ok(());
        };
        if self.nodes[leaf].has_room(Node::leaf_entry_size(key, &val), cap) {
            self.nodes[leaf].push(key, val);
            return Ok(());
        }
        // The last leaf is full: a new one starts, and its separator goes up the tail.
        let sep = separator(self.nodes[leaf].last_key(), key);
        let page = self.alloc_node();
        let mut n = Node::empty_reusing(page, true, role, &mut self.writer.spare_nodes);
        // It will fill up: grow its arena once, not entry by entry.
        n.reserve(self.limits.page_size, 1 + cap / (key.len() + 16));
        n.push(key, val);
        self.nodes.push(n);
        let mut child = self.nodes.len() - 1;
        let mut level = tail.path.len() - 1;
        loop {
            let full = std::mem::replace(&mut tail.path[level], child);
            // Left behind full: later commits seldom rewrite it.
            self.nodes[full].sequential = true;
            if level == 0 {
                self.grow_root(t, full, sep, child);
                let Some(Child::Node(root)) = self.trees[t].root else {
                    unreachable!("grow_root leaves a dirty root");
                };
                tail.path.insert(0, root);
                if full == leaf {
                    self.trees[t].full_leaves.push((leaf, root));
                }
                return Ok(());
            }
            level -= 1;
            let parent = tail.path[level];
            if full == leaf {
                // The full leaf stays this branch's last child whatever happens next: a new
                // child goes after it, or into a new branch beside this one.
                self.trees[t].full_leaves.push((leaf, parent));
            }
            if self.nodes[parent].has_room(Node::branch_entry_size(&sep), cap) {
                self.nodes[parent].push_child(&sep, Child::Node(child));
                return Ok(());
            }
            // The parent is full too: a new branch beside it takes the new child, and the
            // same separator goes one level further up.
            let page = self.alloc_node();
            let mut b = Node::empty(page, false, role);
            b.push_child(&[], Child::Node(child));
            self.nodes.push(b);
            child = self.nodes.len() - 1;
        }
    }

    /// Once tree `t` (active) has noted [`SPILL_BATCH`] full leaves, write them
    /// ([`Txn::spill`]): called by an append or an insert before it changes anything, so that
    /// if the write fails, nothing has changed (the leaves stay dirty, the commit writes them).
    pub(crate) fn spill_full_leaves(&mut self, t: TreeIdx) -> Result<()> {
        if self.trees[t].full_leaves.len() < spill_batch() || self.trees[t].role != PageRole::Data {
            return Ok(());
        }
        let full = std::mem::take(&mut self.trees[t].full_leaves);
        self.spill(&full)
    }

    /// Write the full leaves `full` noted (each with the branch that holds it) before the
    /// commit, as one run of pages where the free set or the end of the file has one: their
    /// branch then holds their pages and their buffers go back to the writer's spares. The
    /// pages are listed in the commit's manifest (`Txn::write_dirty_pages`); until the meta
    /// that reaches them is written, nothing does, and a transaction that does not commit
    /// gives them back (`Undo::Alloc`). A leaf that is no longer as the append left it
    /// (merged away, no longer that branch's child) or that holds an overflow run this
    /// transaction wrote (listed through its leaf at commit) stays dirty: each leaf is
    /// checked as it is now, so a note an edit made stale costs nothing but the write of a
    /// leaf that is still its branch's child. On an error nothing has changed but the pages
    /// written, which are free again.
    pub(crate) fn spill(&mut self, full: &[(NodeIdx, NodeIdx)]) -> Result<()> {
        if !self.gathers_pages() || self.gathered {
            return Ok(());
        }
        let mut batch: Vec<(NodeIdx, NodeIdx, usize, u64)> = Vec::with_capacity(full.len());
        for &(leaf, parent) in full {
            let (Some(n), Some(b)) = (self.nodes.get(leaf), self.nodes.get(parent)) else {
                continue;
            };
            if !n.live || !n.leaf || n.page < PROVISIONAL || n.fresh_runs().next().is_some() {
                continue;
            }
            if !b.live || b.leaf {
                continue;
            }
            let Some(pos) = b.children.iter().rposition(|&c| c == Child::Node(leaf)) else {
                continue;
            };
            if batch.iter().any(|&(l, ..)| l == leaf) {
                // Noted twice (split at its end again after its right sibling went): one
                // page, or the first would stay allocated with nothing reaching it.
                continue;
            }
            batch.push((leaf, parent, pos, n.page));
        }
        if batch.is_empty() {
            return Ok(());
        }
        let n = batch.len() as u64;
        let first = self.alloc(n);
        let ps = self.limits.page_size;
        let mut buf = std::mem::take(&mut self.writer.scratch.buf);
        buf.clear();
        for (k, &(leaf, ..)) in batch.iter().enumerate() {
            self.nodes[leaf].page = first + k as u64;
            let nodes = &self.nodes;
            nodes[leaf].encode(&mut buf, ps, self.txid, |c| nodes[c].page);
        }
        let written = self
            .db
            .pager
            .ensure_pages_ahead(first + n, SPILL_GROWTH)
            .and_then(|()| {
                self.map = self.db.pager.map();
                self.db.pager.write_pages_in_order(first, &[&buf], false)
            });
        if let Err(e) = written {
            for &(leaf, _, _, provisional) in &batch {
                self.nodes[leaf].page = provisional;
            }
            self.writer.scratch.buf = crate::scratch::emptied(buf);
            self.free_fresh(first, n);
            return Err(e.into());
        }
        let txid = self.txid;
        for (k, &(leaf, parent, pos, _)) in batch.iter().enumerate() {
            let page = first + k as u64;
            self.spilled.insert(
                page,
                ManifestRun {
                    start: page,
                    pages: 1,
                    overflow: false,
                    txid,
                    checksum: larch_pager::stored_checksum(&buf[k * ps..(k + 1) * ps]),
                },
            );
            self.nodes[parent].set_child_written(pos, page, ps);
            let role = self.nodes[leaf].role;
            let mut gone = Node::empty(page, true, role);
            gone.live = false;
            let old = std::mem::replace(&mut self.nodes[leaf], gone);
            self.writer.spare_nodes.put(old, ps);
        }
        self.writer.scratch.buf = crate::scratch::emptied(buf);
        self.shared
            .spilled_pages
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Make tree `t`'s rightmost path dirty and record it in `tail` (empty for an empty
    /// tree). `key` is the key about to be appended, already known to be greater than the
    /// tree's last key; every separator on the path must be at most `key` too, or the key
    /// would land in a leaf where a search could not find it.
    fn find_tail(&mut self, t: TreeIdx, tail: &mut Vec<NodeIdx>, key: &[u8]) -> Result<()> {
        let role = self.trees[t].role;
        let Some(root) = self.trees[t].root else {
            return Ok(());
        };
        let mut cur = self.touch(root, role)?;
        self.trees[t].root = Some(Child::Node(cur));
        tail.push(cur);
        while !self.nodes[cur].leaf {
            if tail.len() > crate::view::MAX_DEPTH as usize {
                tail.clear();
                return Err(crate::mutate::too_deep(self.nodes[cur].page));
            }
            let n = &self.nodes[cur];
            let Some(last) = n.children.len().checked_sub(1) else {
                tail.clear();
                return Err(Error::corrupt(n.page, "a branch without children"));
            };
            if last > 0 && n.key(last) > key {
                tail.clear();
                return Err(Error::corrupt(
                    n.page,
                    "the last separator of a branch is above the tree's last key",
                ));
            }
            let c = self.touch(n.children[last], role)?;
            self.nodes[cur].children[last] = Child::Node(c);
            tail.push(c);
            cur = c;
        }
        Ok(())
    }
}
