//! Where the entries of a leaf that overflows go (B*-tree style): into a sibling under the
//! same parent when the two can share them, into three leaves when two full siblings cannot,
//! and otherwise into a new leaf (`Txn::split`).
//!
//! Even splits leave random-order inserts with leaves about 69% full (each leaf lives between
//! half full and full). Sharing with a sibling, and splitting two full leaves into three
//! two-thirds-full ones, keeps leaves fuller: about 81% when every sibling is dirty (a large
//! transaction), about 77% when siblings are clean pages (small random commits), where
//! sharing is rationed because a clean sibling is one more page to write. An insert at the
//! end of a leaf (keys arriving in order) still splits it with the left part full, so
//! in-order loads keep full pages. Measurements: docs/journal/2026-11-24-leaf-fill.md.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use larch_pager::{PageId, PageRole};

use crate::error::Result;
use crate::mutate::separator;
use crate::node::{Child, Node, NodeIdx};
use crate::node_page::ValRef;
use crate::write::Txn;

impl Txn {
    /// Leaf `c`, child `i` of branch `parent`, is over capacity after an insert (`at_end`:
    /// the new entry is its last; `edge`: `c` is the tree's last leaf). Share its entries
    /// with a sibling, or split two siblings into three, or split it in two, inserting the
    /// new child into `parent`.
    pub(crate) fn leaf_overflow(
        &mut self,
        parent: NodeIdx,
        i: usize,
        c: NodeIdx,
        at_end: bool,
        edge: bool,
    ) -> Result<()> {
        if !at_end {
            if let Some(s) = self.sharing_sibling(parent, i, c)? {
                let (l, r) = (i.min(s), i.max(s));
                let role = self.nodes[parent].role;
                let mut sizes = self.leaf_entry_sizes(self.nodes[parent].children[l], role)?;
                sizes.extend(self.leaf_entry_sizes(self.nodes[parent].children[r], role)?);
                let cap = self.limits.capacity;
                let dirty = matches!(self.nodes[parent].children[s], Child::Node(_));
                let counts = &self.shared.leaf_overflows;
                if let Some(cut) = even_cut(&sizes, cap) {
                    counts.count(if dirty {
                        &counts.shared_with_dirty
                    } else {
                        &counts.shared_with_clean
                    });
                    return self.reshape(parent, l, r, &[cut]);
                }
                // Three leaves from two: only with a dirty sibling (see `sharing_sibling`).
                if let Some((a, b)) = thirds_cut(&sizes, cap).filter(|_| dirty) {
                    counts.count(&counts.three_from_two);
                    return self.reshape(parent, l, r, &[a, b]);
                }
            }
        }
        let counts = &self.shared.leaf_overflows;
        counts.count(&counts.split_in_two);
        // The last leaf of its branch, grown at its end: keys are arriving in order, and the
        // left node stays full behind them (a leaf grown at its end elsewhere is one in
        // fifteen or so of a random load's).
        let in_order = at_end && i + 1 == self.nodes[parent].children.len();
        self.nodes[c].sequential |= in_order;
        let (sep, right) = self.split(c, at_end);
        self.nodes[parent].insert_child(i + 1, &sep, Child::Node(right));
        if in_order && edge && self.nodes[c].role == PageRole::Data && self.gathers_pages() {
            // Full behind keys arriving in order past the tree's last key (the leaf is the
            // tree's last): written before the commit with the next ones (append.rs,
            // `Txn::spill`). Not the last leaf of any other branch, which random inserts grow
            // at its end too and come back to. A user's tree only: the catalog and the free
            // map are edited by the commit itself, whose allocations must all come after.
            self.trees[self.active].full_leaves.push((c, parent));
        }
        Ok(())
    }

    /// The sibling that overfull leaf `c`, child `i` of `parent`, should shed entries into,
    /// if one pays. A sibling already dirty in this transaction takes them for free: shared
    /// evenly, or, when both are full, the two split into three on one new page (the cost of
    /// a plain split). A clean sibling costs a page write, as the new page of a split would;
    /// but the fuller leaves get, the more often they overflow, so a clean sibling is shared
    /// with only when both then keep an eighth of a page free (2-to-3 splits with clean
    /// siblings, two page writes, traded writes for fill worse: see
    /// docs/journal/2026-11-24-leaf-fill.md).
    fn sharing_sibling(&self, parent: NodeIdx, i: usize, c: NodeIdx) -> Result<Option<usize>> {
        let cap = self.limits.capacity;
        let p = &self.nodes[parent];
        let own = self.nodes[c].size();
        let right = (i + 1 < p.children.len()).then_some(i + 1);
        // Lowest first: (pages the commit gains, leaves the tree gains, pooled bytes).
        let mut best: Option<((usize, usize, usize), usize)> = None;
        for s in [i.checked_sub(1), right].into_iter().flatten() {
            let child = p.children[s];
            let total = own + self.leaf_bytes(child, p.role)?;
            let cost = match child {
                Child::Node(_) if total <= 2 * cap => (0, 0, total),
                Child::Node(_) => (1, 1, total),
                Child::Page(_) if total + cap / 4 <= 2 * cap => (1, 0, total),
                Child::Page(_) => continue,
            };
            if best.is_none_or(|b| cost < b.0) {
                best = Some((cost, s));
            }
        }
        Ok(best.map(|b| b.1))
    }

    /// The bytes leaf `child` takes (its `Node::size`), a dirty node or a committed page.
    fn leaf_bytes(&self, child: Child, role: PageRole) -> Result<usize> {
        match child {
            Child::Node(n) => Ok(self.nodes[n].size()),
            Child::Page(p) => self
                .page_entry_sizes(p, role)?
                .try_fold(0, |sum, s| Ok(sum + s?)),
        }
    }

    /// The bytes each entry of leaf `child` takes, a dirty node or a committed page.
    fn leaf_entry_sizes(&self, child: Child, role: PageRole) -> Result<Vec<usize>> {
        match child {
            Child::Node(n) => {
                let n = &self.nodes[n];
                Ok((0..n.len()).map(|j| n.entry_size(j)).collect())
            }
            Child::Page(p) => self.page_entry_sizes(p, role)?.collect(),
        }
    }

    /// The bytes each entry of committed leaf `page` takes, read in place.
    fn page_entry_sizes(
        &self,
        page: PageId,
        role: PageRole,
    ) -> Result<impl Iterator<Item = Result<usize>> + '_> {
        let view = self.committed_view();
        let page = view.node(page, role)?;
        Ok((0..page.count).map(move |j| {
            let (k, v) = page.entry(j)?;
            let stored = match v {
                ValRef::Inline(v) => v.len(),
                ValRef::Overflow { .. } => 8,
            };
            Ok(Node::leaf_entry_len(k.len(), stored))
        }))
    }

    /// Make leaves `l` and `l + 1 == r` of `parent` dirty, pool their entries and cut them
    /// again at `cuts` (ascending indexes into the pool): one cut redistributes the two, two
    /// cuts make three leaves, the third on a new page after `r`.
    fn reshape(&mut self, parent: NodeIdx, l: usize, r: usize, cuts: &[usize]) -> Result<()> {
        let role = self.nodes[parent].role;
        let ln = self.touch(self.nodes[parent].children[l], role)?;
        self.nodes[parent].children[l] = Child::Node(ln);
        let rn = self.touch(self.nodes[parent].children[r], role)?;
        self.nodes[parent].children[r] = Child::Node(rn);
        // Work on the right leaf out of the arena, so both can be borrowed at once.
        let right_page = self.nodes[rn].page;
        let mut right = std::mem::replace(&mut self.nodes[rn], Node::empty(right_page, true, role));
        let left = &mut self.nodes[ln];
        let nl = left.len();
        match cuts[0] {
            a if a < nl => left.move_entries(a..nl, &mut right, 0),
            a => right.move_entries(0..a - nl, left, nl),
        }
        let third = cuts.get(1).map(|&b| {
            let page = self.alloc_node();
            right.split_off(b - cuts[0], page)
        });
        self.nodes[rn] = right;
        if let Some(third) = third {
            let sep = separator(self.nodes[rn].last_key(), third.key(0));
            self.nodes.push(third);
            let tn = self.nodes.len() - 1;
            self.nodes[parent].insert_child(r + 1, &sep, Child::Node(tn));
        }
        let sep = separator(self.nodes[ln].last_key(), self.nodes[rn].key(0));
        self.nodes[parent].set_key(r, &sep);
        Ok(())
    }
}

/// How [`Txn::leaf_overflow`] resolved the leaves that overflowed under a leaf's parent, in
/// every transaction of a handle (committed or not): what [`crate::Db::leaf_overflows`] reads.
#[derive(Debug, Default)]
pub(crate) struct LeafOverflowCounts {
    pub shared_with_dirty: AtomicU64,
    pub shared_with_clean: AtomicU64,
    pub three_from_two: AtomicU64,
    pub split_in_two: AtomicU64,
}

impl LeafOverflowCounts {
    fn count(&self, which: &AtomicU64) {
        which.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LeafOverflows {
        LeafOverflows {
            shared_with_dirty: self.shared_with_dirty.load(Relaxed),
            shared_with_clean: self.shared_with_clean.load(Relaxed),
            three_from_two: self.three_from_two.load(Relaxed),
            split_in_two: self.split_in_two.load(Relaxed),
        }
    }
}

/// How the leaves that overflowed in a handle's write transactions (committed, aborted or
/// rolled back alike) made room, since the handle was opened: a leaf under a branch that
/// grows past its page shares its entries with a sibling, or two siblings become three, or
/// it splits in two. A root leaf's split is not counted. For tests and benchmarks: which of
/// the paths a workload takes. See [`crate::Db::leaf_overflows`].
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
/// let tx = db.begin_write()?;
/// let mut t = tx.open_tree("t")?;
/// // Keys in random order, in one transaction: overfull leaves meet dirty siblings.
/// for i in 0..3000u32 {
///     t.insert(&i.wrapping_mul(2_654_435_761).to_be_bytes(), &[7; 100])?;
/// }
/// drop(t);
/// tx.commit()?;
/// let o = db.leaf_overflows();
/// assert!(o.split_in_two > 0 && o.shared_with_dirty > 0 && o.three_from_two > 0);
/// // Clean siblings are shared with only by later transactions.
/// assert_eq!(o.shared_with_clean, 0);
/// # Ok::<(), larch_engine::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeafOverflows {
    /// Evened out with a sibling this transaction had already copied (no page written more).
    pub shared_with_dirty: u64,
    /// Evened out with a committed sibling (copied: one page written more).
    pub shared_with_clean: u64,
    /// Two full siblings, one of them dirty, cut into three leaves.
    pub three_from_two: u64,
    /// Split in two (no sibling could share, or the new entry was the leaf's last).
    pub split_in_two: u64,
}

/// The most even cut of entries of `sizes` into two non-empty runs that each fit `cap`.
fn even_cut(sizes: &[usize], cap: usize) -> Option<usize> {
    let total: usize = sizes.iter().sum();
    let mut left = 0;
    let mut best: Option<(usize, usize)> = None;
    for (at, s) in sizes.iter().enumerate().take(sizes.len() - 1) {
        left += s;
        let right = total - left;
        if left <= cap && right <= cap && best.is_none_or(|b| left.abs_diff(right) < b.1) {
            best = Some((at + 1, left.abs_diff(right)));
        }
    }
    best.map(|b| b.0)
}

/// Two cuts of `sizes` into three non-empty runs of about a third each, all fitting `cap`.
fn thirds_cut(sizes: &[usize], cap: usize) -> Option<(usize, usize)> {
    let total: usize = sizes.iter().sum();
    let a = nearest_cut(sizes, 0, total / 3)?;
    let before: usize = sizes[..a].iter().sum();
    let b = nearest_cut(sizes, a, before + (total - before) / 2)?;
    let middle: usize = sizes[a..b].iter().sum();
    (b < sizes.len() && before <= cap && middle <= cap && total - before - middle <= cap)
        .then_some((a, b))
}

/// The cut in `from+1..sizes.len()` whose prefix sum is nearest `target`.
fn nearest_cut(sizes: &[usize], from: usize, target: usize) -> Option<usize> {
    let mut sum: usize = sizes[..from].iter().sum();
    let mut best: Option<(usize, usize)> = None;
    for (at, s) in sizes
        .iter()
        .enumerate()
        .skip(from)
        .take(sizes.len() - from - 1)
    {
        sum += s;
        if best.is_none_or(|b| sum.abs_diff(target) < b.1) {
            best = Some((at + 1, sum.abs_diff(target)));
        }
    }
    best.map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_cut_balances_bytes_and_respects_capacity() {
        assert_eq!(even_cut(&[10, 10, 10, 10], 100), Some(2));
        assert_eq!(even_cut(&[30, 10, 10, 10], 35), Some(1));
        assert_eq!(even_cut(&[30, 30, 30], 50), None);
        assert_eq!(even_cut(&[10], 100), None);
    }

    #[test]
    fn thirds_cut_makes_three_fitting_runs() {
        assert_eq!(thirds_cut(&[10; 9], 30), Some((3, 6)));
        assert_eq!(thirds_cut(&[10; 9], 25), None);
        assert_eq!(thirds_cut(&[10, 10], 100), None);
    }
}
