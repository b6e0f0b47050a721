//! Removing a key range from a tree (`WriteTree::remove_range`): children the range covers
//! whole are freed without being copied (their pages are only read, to count their entries
//! and find their overflow runs); only the leaves at the range's two edges, and the branches
//! above them, are copied and edited. Then the nodes on those edges are rebalanced bottom-up
//! as a single removal would (mutate.rs), so the tree keeps its shape.

use std::ops::Bound;

use crate::error::Result;
use crate::mutate::Split;
use crate::node::{Child, Node, NodeIdx};
use crate::write::{TreeIdx, Txn};

/// The range being removed.
#[derive(Clone, Copy)]
struct Span<'k> {
    start: Bound<&'k [u8]>,
    end: Bound<&'k [u8]>,
}

impl Span<'_> {
    /// Every key at or above `lo` (`None`: no lower bound) is at or after the start.
    fn starts_by(&self, lo: Option<&[u8]>) -> bool {
        match self.start {
            Bound::Unbounded => true,
            Bound::Included(s) => lo.is_some_and(|l| l >= s),
            Bound::Excluded(s) => lo.is_some_and(|l| l > s),
        }
    }

    /// Every key below `hi` (`None`: no upper bound) is at or before the end.
    fn ends_by(&self, hi: Option<&[u8]>) -> bool {
        match self.end {
            Bound::Unbounded => true,
            Bound::Included(e) | Bound::Excluded(e) => hi.is_some_and(|h| h <= e),
        }
    }

    /// Indexes `a..b` of a leaf's entries inside the range.
    fn in_leaf(&self, n: &Node) -> (usize, usize) {
        let a = match self.start {
            Bound::Unbounded => 0,
            Bound::Included(s) => n.search(s).unwrap_or_else(|i| i),
            Bound::Excluded(s) => match n.search(s) {
                Ok(i) => i + 1,
                Err(i) => i,
            },
        };
        let b = match self.end {
            Bound::Unbounded => n.len(),
            Bound::Included(e) => match n.search(e) {
                Ok(i) => i + 1,
                Err(i) => i,
            },
            Bound::Excluded(e) => n.search(e).unwrap_or_else(|i| i),
        };
        (a, b.max(a))
    }
}

impl Txn {
    /// Remove every key of tree `t` within `start..end`; returns how many.
    pub(crate) fn remove_range(
        &mut self,
        t: TreeIdx,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<u64> {
        self.activate(t);
        let role = self.trees[t].role;
        let Some(r) = self.trees[t].root else {
            return Ok(0);
        };
        let depth = self.trees[t].depth;
        let root = self.touch(r, role)?;
        self.trees[t].root = Some(Child::Node(root));
        let span = Span { start, end };
        let (removed, split) = self.remove_span(root, span, None, None, depth)?;
        self.trees[t].entries = self.trees[t].entries.saturating_sub(removed);
        if let Some((sep, right)) = split {
            self.grow_root(t, root, sep, right);
        }
        self.shrink_root(t);
        Ok(removed)
    }

    /// Remove the range's keys below dirty node `id` (at `level`, 1 = leaf), whose keys all
    /// lie in `lo..hi`. Returns how many, and the split of `id` if rebalancing below made it
    /// overflow.
    fn remove_span(
        &mut self,
        id: NodeIdx,
        span: Span<'_>,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        level: u32,
    ) -> Result<(u64, Split)> {
        if !self.nodes[id].leaf && level <= 1 {
            // A branch where the tree's depth puts leaves: the pages form a cycle, or the
            // depth is wrong. An error, not a descent without end.
            return Err(crate::mutate::too_deep(self.nodes[id].page));
        }
        if self.nodes[id].leaf {
            let (a, b) = span.in_leaf(&self.nodes[id]);
            for j in (a..b).rev() {
                let n = &mut self.nodes[id];
                let run = n.run(j);
                n.remove(j);
                self.free_value(run);
            }
            return Ok(((b - a) as u64, None));
        }
        let role = self.nodes[id].role;
        let count = self.nodes[id].len();
        let first = match span.start {
            Bound::Unbounded => 0,
            Bound::Included(s) | Bound::Excluded(s) => self.nodes[id].child_index(s),
        };
        let last = match span.end {
            Bound::Unbounded => count - 1,
            Bound::Included(e) | Bound::Excluded(e) => self.nodes[id].child_index(e),
        };
        let mut removed = 0;
        // First remove everything in range below this node, then rebalance what was edited:
        // rebalancing earlier could move entries not yet visited into a child already done.
        let mut edited = Vec::new();
        for i in (first..=last).rev() {
            let n = &self.nodes[id];
            if i >= n.len() {
                continue;
            }
            // This child's keys lie in clo..chi.
            let clo = if i == 0 {
                lo.map(<[u8]>::to_vec)
            } else {
                Some(n.key(i).to_vec())
            };
            let chi = if i + 1 < n.len() {
                Some(n.key(i + 1).to_vec())
            } else {
                hi.map(<[u8]>::to_vec)
            };
            if span.starts_by(clo.as_deref()) && span.ends_by(chi.as_deref()) {
                let child = self.nodes[id].children[i];
                removed += self.free_subtree(child, level - 1, role)?;
                self.unlink_child(id, i);
                continue;
            }
            let c = self.touch(self.nodes[id].children[i], role)?;
            self.nodes[id].children[i] = Child::Node(c);
            let (n, split) =
                self.remove_span(c, span, clo.as_deref(), chi.as_deref(), level - 1)?;
            removed += n;
            edited.push(c);
            if let Some((sep, right)) = split {
                self.nodes[id].insert_child(i + 1, &sep, Child::Node(right));
            }
        }
        // Drop the edited children left empty, then rebalance those left under half full
        // (a rebalance needs a sibling with entries).
        for i in (0..self.nodes[id].children.len()).rev() {
            if let Child::Node(c) = self.nodes[id].children[i] {
                if edited.contains(&c) && self.nodes[c].is_empty() {
                    let page = self.nodes[c].page;
                    self.nodes[c].live = false;
                    self.free_fresh(page, 1);
                    self.unlink_child(id, i);
                }
            }
        }
        let mut i = 0;
        while i < self.nodes[id].children.len() {
            if let Child::Node(c) = self.nodes[id].children[i] {
                if edited.contains(&c)
                    && self.nodes[c].size() < self.limits.capacity / 2
                    && self.nodes[id].children.len() > 1
                {
                    self.rebalance(id, i)?;
                }
            }
            i += 1;
        }
        if self.nodes[id].size() > self.limits.capacity {
            return Ok((removed, Some(self.split(id, false))));
        }
        Ok((removed, None))
    }
}
