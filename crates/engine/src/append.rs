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

use crate::error::{Error, Result};
use crate::mutate::separator;
use crate::node::{Child, Node, NodeIdx, Val};
use crate::write::{TreeIdx, Txn};

/// The rightmost path of a tree, root first: every node on it is dirty. Empty until the
/// first append of a `WriteTree` finds it.
pub(crate) type Tail = Vec<NodeIdx>;

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
        if tail.is_empty() {
            self.find_tail(t, tail, key)?;
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
        let Some(&leaf) = tail.last() else {
            // An empty tree: its first leaf is the root.
            let page = self.alloc_node();
            let mut n = Node::empty(page, true, role);
            n.push(key, val);
            self.nodes.push(n);
            let root = self.nodes.len() - 1;
            self.trees[t].root = Some(Child::Node(root));
            self.trees[t].depth = 1;
            tail.push(root);
            return Ok(());
        };
        if self.nodes[leaf].has_room(Node::leaf_entry_size(key, &val), cap) {
            self.nodes[leaf].push(key, val);
            return Ok(());
        }
        // The last leaf is full: a new one starts, and its separator goes up the tail.
        let sep = separator(self.nodes[leaf].last_key(), key);
        let page = self.alloc_node();
        let mut n = Node::empty(page, true, role);
        // It will fill up: grow its arena once, not entry by entry.
        n.reserve(self.limits.page_size, 1 + cap / (key.len() + 16));
        n.push(key, val);
        self.nodes.push(n);
        let mut child = self.nodes.len() - 1;
        let mut level = tail.len() - 1;
        loop {
            let full = std::mem::replace(&mut tail[level], child);
            // Left behind full: later commits seldom rewrite it.
            self.nodes[full].sequential = true;
            if level == 0 {
                self.grow_root(t, full, sep, child);
                let Some(Child::Node(root)) = self.trees[t].root else {
                    unreachable!("grow_root leaves a dirty root");
                };
                tail.insert(0, root);
                return Ok(());
            }
            level -= 1;
            let parent = tail[level];
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

    /// Make tree `t`'s rightmost path dirty and record it in `tail` (empty for an empty
    /// tree). `key` is the key about to be appended, already known to be greater than the
    /// tree's last key; every separator on the path must be at most `key` too, or the key
    /// would land in a leaf where a search could not find it.
    fn find_tail(&mut self, t: TreeIdx, tail: &mut Tail, key: &[u8]) -> Result<()> {
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
