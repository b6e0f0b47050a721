//! The B+tree algorithms of a write transaction: copy a page into a dirty node when it is
//! first touched, insert with splits, remove with merges and redistribution.
//!
//! Nodes split as soon as they overflow a page (a leaf first tries to share with a sibling:
//! redistribute.rs) and rebalance as soon as they fall under half a page, so every node
//! always fits its page and stays at least about half full.

use larch_pager::{PageHeader, PageRole, PageType};

use crate::error::{Error, Result};
use crate::node::{Child, Node, NodeIdx, Run, Val};
use crate::node_page::{ValRef, OVERFLOW_HEADER};
use crate::view::MAX_DEPTH;
use crate::write::{TreeIdx, Txn};

/// A node that split: the separator and the new right node.
pub(crate) type Split = Option<(Vec<u8>, NodeIdx)>;

/// What an insert below a node did: whether the key existed, and how the node split.
type Inserted = (bool, Split);

/// The shortest key `s` with `left < s <= right` (suffix truncation of leaf separators).
pub(crate) fn separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right[..(common + 1).min(right.len())].to_vec()
}

impl Txn {
    pub(crate) fn limits_check(&self, key: &[u8], value_len: usize) -> Result<()> {
        if key.is_empty() {
            return Err(Error::EmptyKey);
        }
        if key.len() > self.limits.max_key {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: self.limits.max_key,
            });
        }
        if value_len > u32::MAX as usize {
            return Err(Error::ValueTooLarge { len: value_len });
        }
        Ok(())
    }

    /// Make `child` a dirty node: a committed page is copied to a newly allocated page and
    /// the old page freed (pending).
    pub(crate) fn touch(&mut self, child: Child, role: PageRole) -> Result<NodeIdx> {
        match child {
            Child::Node(i) => Ok(i),
            Child::Page(p) => {
                let pages = self.committed_pages();
                let page = pages.view().node(p, role)?;
                let written = self
                    .writer
                    .written
                    .take(p, page.txid(), role, page.leaf, page.count);
                let mut node = match written {
                    Some(n) => {
                        #[cfg(debug_assertions)]
                        {
                            let d = Node::decode_reusing(&page, 0, role, &mut Default::default())?;
                            assert!(
                                n.same_entries(&d),
                                "the node kept for page {p} differs from the page"
                            );
                        }
                        n
                    }
                    None => Node::decode_reusing(&page, 0, role, &mut self.writer.spare_nodes)?,
                };
                node.page = self.alloc_node();
                node.hot = page.txid() + 1 >= self.txid;
                node.sequential = false;
                self.free_written(p, 1, page.txid());
                if self.nodes.len() == self.nodes.capacity() && self.nodes.len() >= 8 {
                    // No more than this tree has pages to dirty: a committed leaf holds an
                    // entry at least and a branch two children, so at most twice its entries.
                    // The hint is the last transaction's largest tree; without this, each
                    // small tree of a transaction touching many reserved that much.
                    let entries = self.trees.get(self.active).map_or(0, |t| t.entries);
                    let pages = usize::try_from(entries.saturating_mul(2)).unwrap_or(usize::MAX);
                    let want = self
                        .writer
                        .spare_nodes
                        .arena_hint()
                        .min(pages.saturating_add(8));
                    if want > self.nodes.len() {
                        self.nodes.reserve_exact(want - self.nodes.len());
                    }
                }
                self.nodes.push(node);
                Ok(self.nodes.len() - 1)
            }
        }
    }

    fn node_mut(&mut self, i: NodeIdx) -> &mut Node {
        &mut self.nodes[i]
    }

    /// Read `key` in tree `t`, through dirty nodes and committed pages alike.
    pub(crate) fn get_in(&self, t: TreeIdx, key: &[u8]) -> Result<Option<&[u8]>> {
        let tree = &self.trees[t];
        let nodes = self.arena(t);
        let Some(mut cur) = tree.root else {
            return Ok(None);
        };
        let mut levels = tree.depth;
        if levels == 0 || levels > MAX_DEPTH {
            return Err(Error::corrupt(
                0,
                format!("tree depth {levels} is impossible"),
            ));
        }
        loop {
            match cur {
                Child::Node(i) => {
                    let n = &nodes[i];
                    if n.leaf {
                        return match n.search(key) {
                            Ok(j) => match n.val(j) {
                                Val::Inline(v) => Ok(Some(v)),
                                Val::Overflow {
                                    page,
                                    len,
                                    fresh: true,
                                } => self.fresh_view().overflow(page, len).map(Some),
                                Val::Overflow {
                                    page,
                                    len,
                                    fresh: false,
                                } => self.base_view().overflow(page, len).map(Some),
                            },
                            Err(_) => Ok(None),
                        };
                    }
                    cur = n.children[n.child_index(key)];
                    levels -= 1;
                }
                Child::Page(p) => {
                    let root = larch_pager::TreeRoot {
                        root: p,
                        entries: 0,
                        depth: levels,
                    };
                    return self.committed_view().get(&root, tree.role, key);
                }
            }
        }
    }

    /// Insert or overwrite; true if the key existed.
    pub(crate) fn insert(&mut self, t: TreeIdx, key: &[u8], value: &[u8]) -> Result<bool> {
        self.limits_check(key, value.len())?;
        self.activate(t);
        self.spill_full_leaves(t)?;
        let role = self.trees[t].role;
        let val = if self.limits.inline(key.len(), value.len()) {
            Val::Inline(value)
        } else {
            self.write_overflow(value)?
        };
        let root = match self.trees[t].root {
            Some(r) => self.touch(r, role)?,
            None => {
                let page = self.alloc_node();
                self.nodes.push(Node::empty(page, true, role));
                self.trees[t].depth = 1;
                self.nodes.len() - 1
            }
        };
        self.trees[t].root = Some(Child::Node(root));
        let (existed, split) = self.insert_at(root, key, val, 1, true)?;
        if let Some((sep, right)) = split {
            self.grow_root(t, root, sep, right);
        }
        if !existed {
            self.trees[t].entries = self.trees[t].entries.saturating_add(1);
        }
        Ok(existed)
    }

    /// Insert into the subtree at `id`; `edge`: `id` is on the tree's rightmost path.
    fn insert_at(
        &mut self,
        id: NodeIdx,
        key: &[u8],
        val: Val<'_>,
        level: u32,
        edge: bool,
    ) -> Result<Inserted> {
        if level > MAX_DEPTH {
            return Err(too_deep(self.nodes[id].page));
        }
        let existed;
        // Did the new entry land at the end of this node? Then keys are likely arriving in
        // order, and a split should leave the left node full, not half full.
        let at_end;
        if self.nodes[id].leaf {
            // Only a root is a leaf here: a branch handles its leaves' overflow itself.
            (existed, at_end) = self.insert_in_leaf(id, key, val);
        } else {
            let i = self.nodes[id].child_index_counted(key);
            let role = self.nodes[id].role;
            let c = self.touch(self.nodes[id].children[i], role)?;
            self.nodes[id].children[i] = Child::Node(c);
            let before = self.nodes[id].children.len();
            let last = i + 1 == before;
            if self.nodes[c].leaf {
                let (e, end) = self.insert_in_leaf(c, key, val);
                existed = e;
                if self.nodes[c].size() > self.limits.capacity {
                    self.leaf_overflow(id, i, c, end, edge && last)?;
                }
            } else {
                let (e, split) = self.insert_at(c, key, val, level + 1, edge && last)?;
                existed = e;
                if let Some((sep, right)) = split {
                    self.node_mut(id)
                        .insert_child(i + 1, &sep, Child::Node(right));
                }
            }
            at_end = i + 1 == before && self.nodes[id].children.len() > before;
        }
        if self.nodes[id].size() > self.limits.capacity {
            // At the end of a branch (or of a root leaf), keys are arriving in order: the
            // left node stays full behind them.
            self.nodes[id].sequential |= at_end;
            return Ok((existed, Some(self.split(id, at_end))));
        }
        Ok((existed, None))
    }

    /// Put `key`/`val` into leaf `id`; whether the key existed, and whether the new entry
    /// is the leaf's last.
    fn insert_in_leaf(&mut self, id: NodeIdx, key: &[u8], val: Val<'_>) -> (bool, bool) {
        let n = self.node_mut(id);
        match n.search(key) {
            Ok(i) => {
                let old = n.run(i);
                n.set_val(i, val);
                self.free_value(old);
                (true, false)
            }
            Err(i) => {
                let at_end = i == n.len();
                n.insert_entry(i, key, val);
                (false, at_end)
            }
        }
    }

    /// Split an overfull node in two; returns the separator and the new right node. With
    /// `fill_left` (an append at the end) the left node keeps as much as fits, so keys loaded
    /// in order fill their pages; otherwise the halves are as even as possible.
    pub(crate) fn split(&mut self, id: NodeIdx, fill_left: bool) -> (Vec<u8>, NodeIdx) {
        let cap = self.limits.capacity;
        let n = &self.nodes[id];
        let sizes: Vec<usize> = (0..n.len()).map(|i| n.entry_size(i)).collect();
        let total: usize = sizes.iter().sum();
        // Pick the most even split point where both halves fit (one always exists: every
        // entry is at most a third of a page).
        let mut best = 1;
        let mut best_diff = usize::MAX;
        let mut left = 0;
        // A branch keeps at least two children on each side when it can, so no subtree hangs
        // from a one-child branch.
        let edge = if !n.leaf && sizes.len() >= 4 { 2 } else { 1 };
        for at in 1..sizes.len() {
            left += sizes[at - 1];
            let right = if n.leaf {
                total - left
            } else {
                total - left - n.key(at).len()
            };
            if left <= cap && right <= cap {
                let lopsided = if at < edge || sizes.len() - at < edge {
                    usize::MAX / 2
                } else {
                    0
                };
                let diff = lopsided
                    + if fill_left {
                        cap - left
                    } else {
                        left.abs_diff(right)
                    };
                if diff < best_diff {
                    best_diff = diff;
                    best = at;
                }
            }
        }
        let page = self.alloc_node();
        let n = &mut self.nodes[id];
        let mut right = n.split_off(best, page);
        let sep = if n.leaf {
            separator(n.last_key(), right.key(0))
        } else {
            let sep = right.key(0).to_vec();
            right.set_key(0, &[]);
            sep
        };
        self.nodes.push(right);
        (sep, self.nodes.len() - 1)
    }

    pub(crate) fn free_value(&mut self, v: Option<Run>) {
        if let Some(Run { page, len, fresh }) = v {
            let n = self.limits.overflow_pages(len);
            if fresh {
                self.free_fresh(page, n);
            } else {
                self.free_committed(page, n);
            }
        }
    }

    /// Write a large value to a new overflow run now (it is unreachable until commit, so
    /// writing early is safe and keeps it out of memory).
    pub(crate) fn write_overflow(&mut self, value: &[u8]) -> Result<Val<'static>> {
        let len = value.len() as u64;
        let n = self.limits.overflow_pages(len);
        let page = self.alloc(n);
        let ps = self.limits.page_size;
        let mut buf = vec![0u8; n as usize * ps];
        PageHeader {
            page_type: PageType::Overflow,
            role: PageRole::Data,
            count: 0,
            txid: self.txid,
        }
        .write(&mut buf);
        buf[16..24].copy_from_slice(&len.to_le_bytes());
        buf[OVERFLOW_HEADER..OVERFLOW_HEADER + value.len()].copy_from_slice(value);
        larch_pager::set_run_checksum(&mut buf);
        let written = self.db.pager.ensure_pages(page + n).and_then(|()| {
            self.map = self.db.pager.map();
            self.db.pager.write_pages(page, &[&buf])
        });
        if let Err(e) = written {
            // The run never became reachable: give it back so the free map stays exact.
            self.free_fresh(page, n);
            return Err(e.into());
        }
        Ok(Val::Overflow {
            page,
            len,
            fresh: true,
        })
    }

    /// Remove `key`; true if it was there. Touches no page when the key is absent.
    pub(crate) fn remove(&mut self, t: TreeIdx, key: &[u8]) -> Result<bool> {
        if key.is_empty() || self.get_in(t, key)?.is_none() {
            return Ok(false);
        }
        self.activate(t);
        let role = self.trees[t].role;
        let Some(r) = self.trees[t].root else {
            return Ok(false);
        };
        let root = self.touch(r, role)?;
        self.trees[t].root = Some(Child::Node(root));
        let Some(split) = self.remove_at(root, key, 1)? else {
            return Ok(false);
        };
        self.trees[t].entries = self.trees[t].entries.saturating_sub(1);
        if let Some((sep, right)) = split {
            // Rebalancing below lengthened a separator until the root overflowed: grow a level.
            self.grow_root(t, root, sep, right);
        }
        self.shrink_root(t);
        Ok(true)
    }

    /// Shrink the root: a branch with one child gives way to it; an empty root empties the
    /// tree.
    pub(crate) fn shrink_root(&mut self, t: TreeIdx) {
        while let Some(Child::Node(idx)) = self.trees[t].root {
            let n = &self.nodes[idx];
            let page = n.page;
            if !n.leaf && n.children.len() == 1 {
                let child = n.children[0];
                self.nodes[idx].live = false;
                self.free_fresh(page, 1);
                self.trees[t].root = Some(child);
                self.trees[t].depth -= 1;
                continue;
            }
            if n.is_empty() {
                self.nodes[idx].live = false;
                self.free_fresh(page, 1);
                self.trees[t].root = None;
                self.trees[t].depth = 0;
            }
            break;
        }
    }

    /// A new root over `left` and `right`.
    pub(crate) fn grow_root(&mut self, t: TreeIdx, left: NodeIdx, sep: Vec<u8>, right: NodeIdx) {
        let role = self.trees[t].role;
        let page = self.alloc_node();
        let mut n = Node::empty(page, false, role);
        n.push(&[], Val::Inline(&[]));
        n.push(&sep, Val::Inline(&[]));
        n.children = vec![Child::Node(left), Child::Node(right)];
        self.nodes.push(n);
        let tree = &mut self.trees[t];
        tree.root = Some(Child::Node(self.nodes.len() - 1));
        tree.depth += 1;
    }

    /// Remove `key` below node `id`. None if it was not there; otherwise the split of `id`
    /// if rebalancing below made it overflow (a longer separator), as an insert would.
    fn remove_at(&mut self, id: NodeIdx, key: &[u8], level: u32) -> Result<Option<Split>> {
        if level > MAX_DEPTH {
            return Err(too_deep(self.nodes[id].page));
        }
        if self.nodes[id].leaf {
            let n = self.node_mut(id);
            let Ok(i) = n.search(key) else {
                return Ok(None);
            };
            let old = n.run(i);
            n.remove(i);
            self.free_value(old);
            return Ok(Some(None));
        }
        let i = self.nodes[id].child_index(key);
        let role = self.nodes[id].role;
        let c = self.touch(self.nodes[id].children[i], role)?;
        self.nodes[id].children[i] = Child::Node(c);
        let Some(split) = self.remove_at(c, key, level + 1)? else {
            return Ok(None);
        };
        if let Some((sep, right)) = split {
            self.node_mut(id)
                .insert_child(i + 1, &sep, Child::Node(right));
        }
        if self.nodes[c].is_empty() {
            // An empty child goes: its page is freed and its separator dropped.
            self.drop_child(id, i);
        } else if self.nodes[c].size() < self.limits.capacity / 2
            && self.nodes[id].children.len() > 1
        {
            self.rebalance(id, i)?;
        }
        if self.nodes[id].size() > self.limits.capacity {
            return Ok(Some(Some(self.split(id, false))));
        }
        Ok(Some(None))
    }

    /// Remove child `i` (a dirty node with no entries) from branch `parent`.
    pub(crate) fn drop_child(&mut self, parent: NodeIdx, i: usize) {
        let Child::Node(c) = self.nodes[parent].children[i] else {
            return;
        };
        let page = self.nodes[c].page;
        self.nodes[c].live = false;
        self.free_fresh(page, 1);
        self.unlink_child(parent, i);
    }

    /// Take child `i` out of branch `parent` (its pages are freed already). A branch whose
    /// last child goes is left with no entries (its parent drops it in turn).
    pub(crate) fn unlink_child(&mut self, parent: NodeIdx, i: usize) {
        let p = self.node_mut(parent);
        p.children.remove(i);
        if p.children.is_empty() {
            while !p.is_empty() {
                p.remove_key(0);
            }
        } else {
            // Child 0 has no separator of its own: the next child's becomes the (empty) first.
            p.remove_key(if i == 0 { 1 } else { i });
            p.set_key(0, &[]);
        }
    }

    /// Child `i` of `parent` is under half full: merge it with a sibling if both fit one
    /// page, otherwise share entries evenly between the two.
    pub(crate) fn rebalance(&mut self, parent: NodeIdx, i: usize) -> Result<()> {
        let (li, ri) = if i > 0 { (i - 1, i) } else { (i, i + 1) };
        let role = self.nodes[parent].role;
        let l = self.touch(self.nodes[parent].children[li], role)?;
        self.nodes[parent].children[li] = Child::Node(l);
        let r = self.touch(self.nodes[parent].children[ri], role)?;
        self.nodes[parent].children[ri] = Child::Node(r);
        let sep = self.nodes[parent].key(ri).to_vec();
        let leaf = self.nodes[l].leaf;
        // Gather both nodes into one sequence (a branch's right half gets the parent
        // separator as its first key).
        let mut right = std::mem::replace(&mut self.nodes[r], Node::empty(0, leaf, role));
        let right_page = right.page;
        if !leaf {
            right.set_key(0, &sep);
        }
        let ln = &mut self.nodes[l];
        ln.append(&mut right);
        if ln.size() <= self.limits.capacity {
            // Merge: the right node disappears.
            self.nodes[r].live = false;
            self.free_fresh(right_page, 1);
            self.node_mut(parent).remove(ri);
            return Ok(());
        }
        // Redistribute: split the combined node again at its most even point.
        let (new_sep, tmp) = self.split(l, false);
        // `split` allocated a fresh page for the new right half; keep the old right page.
        let tmp_page = self.nodes[tmp].page;
        self.free_fresh(tmp_page, 1);
        self.nodes[tmp].page = right_page;
        self.nodes.swap(r, tmp);
        self.nodes[tmp].live = false;
        self.node_mut(parent).set_key(ri, &new_sep);
        Ok(())
    }

    /// Free every page of a subtree (tree deletion, a range removal that covers it); returns
    /// how many entries it held.
    pub(crate) fn free_subtree(&mut self, root: Child, depth: u32, role: PageRole) -> Result<u64> {
        let mut entries = 0u64;
        let pages = self.committed_pages();
        let view = pages.view();
        let mut stack = vec![(root, depth)];
        let mut visited: u64 = 0;
        while let Some((c, level)) = stack.pop() {
            visited += 1;
            // Dirty nodes may have provisional pages (`Txn::alloc_node`), past the mark.
            if visited > self.high_water + self.provisional || level == 0 {
                return Err(Error::corrupt(
                    0,
                    "tree walk visits more pages than the file holds (cycle?)",
                ));
            }
            match c {
                Child::Node(i) => {
                    let n = self.nodes[i].clone();
                    self.nodes[i].live = false;
                    if n.leaf {
                        entries += n.len() as u64;
                        for r in n.runs() {
                            self.free_value(Some(r));
                        }
                    } else {
                        stack.extend(n.children.iter().map(|&k| (k, level - 1)));
                    }
                    self.free_fresh(n.page, 1);
                }
                Child::Page(p) => {
                    let page = view.node(p, role)?;
                    if page.leaf {
                        entries += page.count as u64;
                        for j in 0..page.count {
                            if let ValRef::Overflow { page: op, len } = page.entry(j)?.1 {
                                let n = self.limits.overflow_pages(len);
                                self.free_committed(op, n);
                            }
                        }
                    } else {
                        for j in 0..page.count {
                            stack.push((Child::Page(page.child(j)?), level - 1));
                        }
                    }
                    self.free_committed(p, 1);
                }
            }
        }
        Ok(entries)
    }
}

/// A descent deeper than any tree larch builds: the pages form a cycle (a damaged file, or
/// pages reused while reachable). An error, not a stack overflow.
pub(crate) fn too_deep(page: crate::PageId) -> Error {
    Error::corrupt(
        page,
        format!("a tree deeper than {MAX_DEPTH} levels (a cycle of pages?)"),
    )
}
