//! A tree inside a write transaction ([`WriteTree`]): point reads, ranges in both directions,
//! and a cursor ([`WriteCursor`]), all seeing the transaction's own writes.
//!
//! The tree's dirty nodes are lent to the handle by its transaction (write.rs, `Txn::lend`),
//! so reads borrow them, and the committed pages they did not replace, straight from the
//! handle: zero-copy for every entry. Writes hand the nodes back to the transaction for the
//! length of the operation (`WriteTree::edit`), where the tree algorithms (mutate.rs) run.
//!
//! A range walks one leaf at a time: within a leaf it steps by index; past a leaf's end it
//! descends again from the root to the separator that bounds the leaf (every key of the next
//! leaf is at or above it), so a step is O(1) within a leaf and O(depth) between leaves.

use std::cell::RefCell;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use larch_pager::{Map, PageRole};

use crate::append::Tail;
use crate::cursor::finish;
use crate::error::{Error, Result};
use crate::file::Snapshot;
use crate::node::{Child, Node, Val};
use crate::node_page::{Limits, NodePage};
use crate::view::{View, MAX_DEPTH};
use crate::write::{TreeIdx, TreeState, Txn};
use crate::PageId;

/// One tree inside a write transaction: reads see the transaction's own writes. Get one
/// from [`crate::WriteTx::open_tree`]; it gives the tree back to the transaction when dropped.
///
/// What it reads borrows it, so a value cannot outlive the tree:
///
/// ```compile_fail
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = larch_engine::Db::open(dir.path().join("t.larch"), larch_engine::Options::default()).unwrap();
/// let tx = db.begin_write().unwrap();
/// let value = {
///     let t = tx.open_tree("t").unwrap();
///     t.get(b"k").unwrap()
/// }; // error: `t` is dropped while `value` borrows it
/// drop(value);
/// ```
///
/// and the transaction cannot commit while one of its trees is open:
///
/// ```compile_fail
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = larch_engine::Db::open(dir.path().join("t.larch"), larch_engine::Options::default()).unwrap();
/// let tx = db.begin_write().unwrap();
/// let t = tx.open_tree("t").unwrap();
/// tx.commit().unwrap(); // error: `tx` is borrowed by `t`
/// drop(t);
/// ```
pub struct WriteTree<'tx> {
    pub(crate) txn: &'tx RefCell<Txn>,
    pub(crate) base: &'tx Snapshot,
    pub(crate) verify: bool,
    pub(crate) limits: Limits,
    pub(crate) idx: TreeIdx,
    /// The tree, lent by the transaction.
    pub(crate) state: TreeState,
    /// Covers the overflow runs the transaction wrote (`fresh_pages` pages of it).
    pub(crate) map: Arc<Map>,
    pub(crate) fresh_pages: PageId,
    /// The transaction wrote leaves before its commit (`Txn::spill`): committed pages are
    /// read through `map`, which holds those too, up to `fresh_pages`.
    pub(crate) spilled: bool,
    /// The rightmost path kept by [`WriteTree::append`] (append.rs); any other edit clears it.
    pub(crate) tail: Tail,
}

impl std::fmt::Debug for WriteTree<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTree")
            .field("name", &self.state.name)
            .field("entries", &self.state.entries)
            .finish()
    }
}

impl Drop for WriteTree<'_> {
    fn drop(&mut self) {
        // Borrowed only inside `edit`, never across user code; a panic that unwound out of
        // `edit` released that borrow before this runs.
        let Ok(mut txn) = self.txn.try_borrow_mut() else {
            return;
        };
        // After a panic inside `edit` the transaction holds the tree and this handle the
        // placeholder: leave the tree where it is (the transaction is marked interrupted).
        if !self.state.lent {
            txn.trees[self.idx] = std::mem::replace(&mut self.state, placeholder());
        }
    }
}

fn placeholder() -> TreeState {
    TreeState {
        name: None,
        role: PageRole::Data,
        root: None,
        entries: 0,
        depth: 0,
        dirty: false,
        deleted: false,
        nodes: Vec::new(),
        lent: true,
        full_leaves: Vec::new(),
    }
}

/// `Bound<&[u8]>` from a user's bound on `&[u8]`.
pub(crate) fn bound_slice<'k>(b: Bound<&&'k [u8]>) -> Bound<&'k [u8]> {
    match b {
        Bound::Included(k) => Bound::Included(*k),
        Bound::Excluded(k) => Bound::Excluded(*k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl<'tx> WriteTree<'tx> {
    /// Run a tree algorithm on this tree inside the transaction: the tree goes back to the
    /// transaction for the call and comes back after it.
    fn edit<R>(&mut self, f: impl FnOnce(&mut Txn, TreeIdx) -> Result<R>) -> Result<R> {
        // Any edit but an append may change the rightmost path.
        self.tail.clear();
        self.edit_keeping_tail(f)
    }

    /// `edit`, keeping the rightmost path (for `append`, which maintains it).
    fn edit_keeping_tail<R>(
        &mut self,
        f: impl FnOnce(&mut Txn, TreeIdx) -> Result<R>,
    ) -> Result<R> {
        let mut txn = self.txn.borrow_mut();
        // The transaction holds a placeholder while the tree is lent: swap the two.
        std::mem::swap(&mut txn.trees[self.idx], &mut self.state);
        // Cleared below unless `f` panics: then the tree's state is unknown (a split half
        // done, say) and the commit must not write it.
        txn.interrupted = true;
        let r = f(&mut txn, self.idx);
        txn.interrupted = false;
        txn.park();
        std::mem::swap(&mut txn.trees[self.idx], &mut self.state);
        if !Arc::ptr_eq(&self.map, &txn.map) {
            self.map = txn.map.clone();
        }
        self.fresh_pages = txn.fresh_pages();
        self.spilled = !txn.spilled.is_empty();
        r
    }

    fn reader(&self) -> TreeReader<'_> {
        let ps = self.limits.page_size;
        let base = if self.spilled {
            View {
                map: &self.map,
                page_size: ps,
                high_water: self.fresh_pages,
                verify: self.verify,
            }
        } else {
            View::new(&self.base.map, &self.base.meta, self.verify)
        };
        TreeReader {
            base,
            fresh: View {
                map: &self.map,
                page_size: ps,
                high_water: self.fresh_pages,
                verify: false,
            },
            nodes: &self.state.nodes,
            root: self.state.root,
            depth: self.state.depth,
            role: self.state.role,
        }
    }

    /// Insert or overwrite `key` with `value`. Keys are 1 to page size / 4 bytes
    /// ([`crate::Error::EmptyKey`], [`crate::Error::KeyTooLarge`]); values up to `u32::MAX`.
    ///
    /// A value too large to stay in its leaf is written to its overflow run at once; when that
    /// write or the file's growth fails ([`crate::Error::Io`], disk full included), the error
    /// is returned and the tree and the transaction are as they were before the call: the
    /// transaction may go on, retry, roll back to a savepoint or commit (tests/crash.rs and
    /// tests/model.rs generate each). The same holds for [`WriteTree::append`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// t.insert(b"k", b"1")?;
    /// t.insert(b"k", b"2")?;
    /// assert_eq!((t.get(b"k")?, t.len()?), (Some(&b"2"[..]), 1));
    /// assert!(matches!(t.insert(b"", b"v"), Err(larch_engine::Error::EmptyKey)));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.edit(|txn, t| {
            txn.trees[t].dirty = true;
            txn.insert(t, key, value).map(|_| ())
        })
    }

    /// Add `key` with `value` after the tree's last entry: the sorted bulk load. `key` must
    /// be greater than every key in the tree, including those written earlier in this
    /// transaction, or it is [`crate::Error::KeyNotGreater`] and nothing changes. No search
    /// per key: the tree's rightmost path stays in memory between appends, and leaves are
    /// filled to capacity (an `insert` in order fills them almost as well, but searches from
    /// the root every time). The leaves it fills are written before the commit, 64 at a time
    /// ([`crate::IoStats::spilled_pages`]; so are those inserts in key order fill), so a long
    /// append holds few of them in memory; an error of such a write fails the append (or
    /// insert) that made it, with nothing changed. Appends mix
    /// freely with every other operation; the first append after another edit walks the
    /// rightmost path once. Limits as for [`WriteTree::insert`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for i in 0..1000u32 {
    ///     t.append(&i.to_be_bytes(), b"v")?;
    /// }
    /// assert!(matches!(
    ///     t.append(&7u32.to_be_bytes(), b"v"),
    ///     Err(larch_engine::Error::KeyNotGreater { .. })
    /// ));
    /// assert_eq!(t.len()?, 1000);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let last = match self.tail.leaf() {
            Some(leaf) => Some(self.state.nodes[leaf].last_key()),
            None => self.last()?.map(|(k, _)| k),
        };
        if let Some(last) = last {
            if key <= last {
                return Err(Error::KeyNotGreater {
                    key: key.to_vec(),
                    last: last.to_vec(),
                });
            }
        }
        // The common case needs nothing of the transaction: an inline entry that fits the
        // last leaf, which is already dirty and in this handle's arena.
        if let Some(leaf) = self.tail.leaf() {
            let cap = self.limits.capacity;
            if key.len() <= self.limits.max_key && self.limits.inline(key.len(), value.len()) {
                let val = Val::Inline(value);
                let n = &mut self.state.nodes[leaf];
                if n.has_room(Node::leaf_entry_size(key, &val), cap) {
                    n.push(key, val);
                    self.state.entries = self.state.entries.saturating_add(1);
                    return Ok(());
                }
            }
        }
        let mut tail = std::mem::take(&mut self.tail);
        let r = self.edit_keeping_tail(|txn, t| txn.append(t, &mut tail, key, value));
        if r.is_ok() {
            self.tail = tail;
        }
        r
    }

    /// Remove `key`; true if it was there.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// assert!(t.remove(b"b")?);
    /// assert!(!t.remove(b"b")?);
    /// assert_eq!(t.len()?, 2);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn remove(&mut self, key: &[u8]) -> Result<bool> {
        if self.get(key)?.is_none() {
            return Ok(false);
        }
        self.edit(|txn, t| {
            let removed = txn.remove(t, key)?;
            if removed {
                txn.trees[t].dirty = true;
            }
            Ok(removed)
        })
    }

    /// Remove every entry with a key in `range`; returns how many. Subtrees the range covers
    /// whole are freed without copying their leaves.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), larch_engine::Options::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for i in 0..100u32 {
    ///     t.insert(&i.to_be_bytes(), b"v")?;
    /// }
    /// let from = 10u32.to_be_bytes();
    /// let to = 90u32.to_be_bytes();
    /// assert_eq!(t.remove_range(&from[..]..&to[..])?, 80);
    /// assert_eq!(t.len()?, 20);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn remove_range<'k, R: RangeBounds<&'k [u8]>>(&mut self, range: R) -> Result<u64> {
        let start = bound_slice(range.start_bound());
        let end = bound_slice(range.end_bound());
        if self.range((start, end))?.next().transpose()?.is_none() {
            return Ok(0);
        }
        self.edit(|txn, t| {
            let n = txn.remove_range(t, start, end)?;
            if n > 0 {
                txn.trees[t].dirty = true;
            }
            Ok(n)
        })
    }

    /// Keep only the entries for which `keep(key, value)` is true; returns how many were
    /// removed.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for i in 0..10u8 {
    ///     t.insert(&[i], &[i % 2])?;
    /// }
    /// assert_eq!(t.retain(|_, v| v == [0])?, 5);
    /// assert!(t.iter()?.all(|e| e.unwrap().1 == [0]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64> {
        let mut removed = 0;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = match &after {
                Some(k) => Bound::Excluded(&k[..]),
                None => Bound::Unbounded,
            };
            let next = self.range((lower, Bound::Unbounded))?.next().transpose()?;
            let Some((k, v)) = next else {
                return Ok(removed);
            };
            let drop_it = !keep(k, v);
            let key = k.to_vec();
            if drop_it {
                self.remove(&key)?;
                removed += 1;
            }
            after = Some(key);
        }
    }

    /// Remove and return the first entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// assert_eq!(t.pop_first()?, Some((b"a".to_vec(), b"v".to_vec())));
    /// assert_eq!(t.len()?, 2);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn pop_first(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some((k, v)) = self.first()?.map(|(k, v)| (k.to_vec(), v.to_vec())) else {
            return Ok(None);
        };
        self.remove(&k)?;
        Ok(Some((k, v)))
    }

    /// Remove and return the last entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// assert_eq!(t.pop_last()?.map(|(k, _)| k), Some(b"c".to_vec()));
    /// assert_eq!(t.last()?.map(|(k, _)| k), Some(&b"b"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn pop_last(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some((k, v)) = self.last()?.map(|(k, v)| (k.to_vec(), v.to_vec())) else {
            return Ok(None);
        };
        self.remove(&k)?;
        Ok(Some((k, v)))
    }

    /// The value of `key`, including this transaction's writes. The slice borrows the tree.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// assert_eq!(t.get(b"k")?, None);
    /// t.insert(b"k", b"v")?;
    /// assert_eq!(t.get(b"k")?, Some(&b"v"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn get(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        self.reader().get(key)
    }

    /// Entries with keys in `range`, in order, including this transaction's writes; `.rev()`
    /// for descending. Borrows the tree, so it cannot change while the range lives (use
    /// [`WriteTree::cursor`] to change entries while moving).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), larch_engine::Options::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"")?;
    /// }
    /// let keys: Vec<&[u8]> = t
    ///     .range(&b"b"[..]..)?
    ///     .map(|e| e.map(|(k, _)| k))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [&b"b"[..], &b"c"[..]]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<WriteRange<'_>> {
        Ok(WriteRange {
            reader: self.reader(),
            start: owned(bound_slice(range.start_bound())),
            end: owned(bound_slice(range.end_bound())),
            front: None,
            back: None,
            front_key: None,
            back_key: None,
            done: false,
        })
    }

    /// Every entry, in order, including this transaction's writes; `.rev()` for descending.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let keys: Vec<&[u8]> = t.iter()?.rev().map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [&b"c"[..], &b"b"[..], &b"a"[..]]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn iter(&self) -> Result<WriteRange<'_>> {
        self.range::<(Bound<&[u8]>, Bound<&[u8]>)>((Bound::Unbounded, Bound::Unbounded))
    }

    /// The first entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// assert_eq!(t.first()?, Some((&b"a"[..], &b"v"[..])));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn first(&self) -> Result<Option<(&[u8], &[u8])>> {
        self.iter()?.next().transpose()
    }

    /// The last entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// assert_eq!(t.last()?, Some((&b"c"[..], &b"v"[..])));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn last(&self) -> Result<Option<(&[u8], &[u8])>> {
        self.iter()?.next_back().transpose()
    }

    /// Number of entries (O(1)), including this transaction's writes.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// assert_eq!(t.len()?, 3);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        Ok(self.state.entries)
    }

    /// True if the tree has no entries.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// assert!(t.is_empty()?);
    /// t.insert(b"k", b"v")?;
    /// assert!(!t.is_empty()?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.state.entries == 0)
    }

    /// A cursor that can replace or delete the entry it stands on while it moves.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), larch_engine::Options::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for (k, v) in [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")] {
    ///     t.insert(k, v)?;
    /// }
    /// let mut c = t.cursor();
    /// while let Some((_, v)) = c.next()? {
    ///     if v == b"2" {
    ///         c.delete_current()?;
    ///     } else {
    ///         c.put_current(b"odd")?;
    ///     }
    /// }
    /// assert_eq!(t.get(b"b")?, None);
    /// assert_eq!(t.get(b"c")?, Some(&b"odd"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn cursor(&mut self) -> WriteCursor<'_, 'tx> {
        WriteCursor {
            tree: self,
            at: None,
        }
    }
}

/// A cursor over a [`WriteTree`]. It stands on a key (or, after
/// [`WriteCursor::delete_current`], between its neighbours); `next`/`prev` move from there,
/// and see every change made through the cursor or before it. See [`WriteTree::cursor`]
/// for an example.
pub struct WriteCursor<'c, 'tx> {
    tree: &'c mut WriteTree<'tx>,
    at: Option<Vec<u8>>,
}

impl std::fmt::Debug for WriteCursor<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteCursor").field("at", &self.at).finish()
    }
}

impl WriteCursor<'_, '_> {
    fn go(
        &mut self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        back: bool,
    ) -> Result<Option<(&[u8], &[u8])>> {
        let mut range = self.tree.range((start, end))?;
        let found = if back {
            range.next_back()
        } else {
            range.next()
        };
        match found.transpose()? {
            Some((k, v)) => {
                self.at = Some(k.to_vec());
                Ok(Some((k, v)))
            }
            None => Ok(None),
        }
    }

    /// Move to the first entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// assert_eq!(c.first()?.map(|(k, _)| k), Some(&b"a"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn first(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        self.go(Bound::Unbounded, Bound::Unbounded, false)
    }

    /// Move to the last entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// assert_eq!(c.last()?.map(|(k, _)| k), Some(&b"c"[..]));
    /// assert_eq!(c.prev()?.map(|(k, _)| k), Some(&b"b"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn last(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        self.go(Bound::Unbounded, Bound::Unbounded, true)
    }

    /// Move to the first entry at or after `key`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// assert_eq!(c.seek(b"bb")?.map(|(k, _)| k), Some(&b"c"[..]));
    /// assert_eq!(c.seek(b"d")?, None);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn seek(&mut self, key: &[u8]) -> Result<Option<(&[u8], &[u8])>> {
        self.go(Bound::Included(key), Bound::Unbounded, false)
    }

    /// Move to the next entry (the first, if the cursor has not moved yet). `None` at the end
    /// leaves the cursor where it was.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// let mut keys = Vec::new();
    /// while let Some((k, _)) = c.next()? {
    ///     keys.push(k.to_vec());
    /// }
    /// assert_eq!(keys, [b"a", b"b", b"c"]);
    /// assert_eq!(c.current()?.map(|(k, _)| k), Some(&b"c"[..])); // still on the last
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        match self.at.take() {
            None => self.first(),
            Some(at) => {
                let moved = {
                    let mut range = self
                        .tree
                        .range((Bound::Excluded(&at[..]), Bound::Unbounded))?;
                    range.next().transpose()?.map(|(k, _)| k.to_vec())
                };
                match moved {
                    Some(k) => {
                        self.at = Some(k);
                        self.current()
                    }
                    None => {
                        self.at = Some(at);
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Move to the previous entry (the last, if the cursor has not moved yet). `None` at the
    /// start leaves the cursor where it was.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// assert_eq!(c.prev()?.map(|(k, _)| k), Some(&b"c"[..]));
    /// assert_eq!(c.prev()?.map(|(k, _)| k), Some(&b"b"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn prev(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        match self.at.take() {
            None => self.last(),
            Some(at) => {
                let moved = {
                    let mut range = self
                        .tree
                        .range((Bound::Unbounded, Bound::Excluded(&at[..])))?;
                    range.next_back().transpose()?.map(|(k, _)| k.to_vec())
                };
                match moved {
                    Some(k) => {
                        self.at = Some(k);
                        self.current()
                    }
                    None => {
                        self.at = Some(at);
                        Ok(None)
                    }
                }
            }
        }
    }

    /// The entry the cursor stands on; `None` if it has not moved yet or that entry was
    /// deleted.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// assert_eq!(c.current()?, None);
    /// c.seek(b"b")?;
    /// assert_eq!(c.current()?.map(|(k, _)| k), Some(&b"b"[..]));
    /// c.delete_current()?;
    /// assert_eq!(c.current()?, None);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn current(&self) -> Result<Option<(&[u8], &[u8])>> {
        let Some(at) = &self.at else {
            return Ok(None);
        };
        let tree: &WriteTree<'_> = self.tree;
        let mut range = tree.range((Bound::Included(&at[..]), Bound::Included(&at[..])))?;
        range.next().transpose()
    }

    /// Replace the value of the entry the cursor stands on; [`crate::Error::NoCurrentEntry`]
    /// if it stands on none.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// assert!(matches!(c.put_current(b"x"), Err(larch_engine::Error::NoCurrentEntry)));
    /// c.seek(b"b")?;
    /// c.put_current(b"x")?;
    /// drop(c);
    /// assert_eq!(t.get(b"b")?, Some(&b"x"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn put_current(&mut self, value: &[u8]) -> Result<()> {
        let Some(at) = self.at.clone() else {
            return Err(Error::NoCurrentEntry);
        };
        if self.tree.get(&at)?.is_none() {
            return Err(Error::NoCurrentEntry);
        }
        self.tree.insert(&at, value)
    }

    /// Delete the entry the cursor stands on; false if there is none. The cursor then stands
    /// between its neighbours: `next` and `prev` move to them.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_tree("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"v")?;
    /// }
    /// let mut c = t.cursor();
    /// c.seek(b"b")?;
    /// assert!(c.delete_current()?);
    /// assert!(!c.delete_current()?);
    /// assert_eq!(c.next()?.map(|(k, _)| k), Some(&b"c"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn delete_current(&mut self) -> Result<bool> {
        let Some(at) = self.at.clone() else {
            return Ok(false);
        };
        self.tree.remove(&at)
    }
}

/// Reads one tree of a write transaction: dirty nodes, committed pages, and overflow runs of
/// either.
#[derive(Clone, Copy)]
pub(crate) struct TreeReader<'a> {
    base: View<'a>,
    fresh: View<'a>,
    nodes: &'a [Node],
    root: Option<Child>,
    depth: u32,
    role: PageRole,
}

/// A leaf: a dirty node or a committed page.
#[derive(Clone, Copy)]
enum Leaf<'a> {
    Node(&'a Node),
    Page(NodePage<'a>),
}

/// Where a descent goes.
#[derive(Clone, Copy)]
enum Seek<'k> {
    First,
    Last,
    /// The leaf where `key` is or would be.
    Key(&'k [u8]),
    /// The leaf holding the last key below `key`, when `key` is a separator.
    Below(&'k [u8]),
}

/// A leaf found by a descent, with the separators around it: every key in it is at least
/// `lo` and below `hi` (`None`: no bound on that side).
struct Found<'a> {
    leaf: Leaf<'a>,
    lo: Option<&'a [u8]>,
    hi: Option<&'a [u8]>,
}

impl<'a> Leaf<'a> {
    fn len(&self) -> usize {
        match self {
            Leaf::Node(n) => n.len(),
            Leaf::Page(p) => p.count,
        }
    }

    fn key(&self, i: usize) -> Result<&'a [u8]> {
        match self {
            Leaf::Node(n) => Ok(n.key(i)),
            Leaf::Page(p) => p.key(i),
        }
    }

    /// Position of `key`: `Ok(i)` if at `i`, `Err(i)` where it would go.
    fn search(&self, key: &[u8]) -> Result<std::result::Result<usize, usize>> {
        match self {
            Leaf::Node(n) => Ok(n.search(key)),
            Leaf::Page(p) => p.search(key),
        }
    }
}

impl<'a> TreeReader<'a> {
    fn descend(&self, seek: Seek<'_>) -> Result<Option<Found<'a>>> {
        let Some(mut cur) = self.root else {
            return Ok(None);
        };
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(Error::corrupt(
                0,
                format!("tree depth {} is impossible", self.depth),
            ));
        }
        let (mut lo, mut hi) = (None, None);
        for level in (1..=self.depth).rev() {
            let (count, key_at, child_at): (usize, KeyAt<'a>, ChildAt<'a>) = match cur {
                Child::Node(i) => {
                    let Some(n) = self.nodes.get(i) else {
                        return Err(Error::corrupt(0, "a dirty node index is out of range"));
                    };
                    if n.leaf != (level == 1) {
                        return Err(Error::corrupt(
                            n.page,
                            "tree depth disagrees with its nodes",
                        ));
                    }
                    if n.leaf {
                        return Ok(Some(Found {
                            leaf: Leaf::Node(n),
                            lo,
                            hi,
                        }));
                    }
                    (n.len(), KeyAt::Node(n), ChildAt::Node(n))
                }
                Child::Page(p) => {
                    let page = self.base.node(p, self.role)?;
                    if page.leaf != (level == 1) {
                        return Err(Error::corrupt(p, "tree depth disagrees with its pages"));
                    }
                    if page.leaf {
                        return Ok(Some(Found {
                            leaf: Leaf::Page(page),
                            lo,
                            hi,
                        }));
                    }
                    (page.count, KeyAt::Page(page), ChildAt::Page(page))
                }
            };
            if count == 0 {
                return Err(Error::corrupt(0, "a branch has no children"));
            }
            let i = match seek {
                Seek::First => 0,
                Seek::Last => count - 1,
                Seek::Key(k) => key_at.child_index(k)?,
                Seek::Below(k) => {
                    let i = key_at.child_index(k)?;
                    if i > 0 && key_at.key(i)? >= k {
                        i - 1
                    } else {
                        i
                    }
                }
            };
            if i > 0 {
                lo = Some(key_at.key(i)?);
            }
            if i + 1 < count {
                hi = Some(key_at.key(i + 1)?);
            }
            cur = child_at.child(i)?;
        }
        Err(Error::corrupt(0, "tree is deeper than its recorded depth"))
    }

    fn value(&self, leaf: Leaf<'a>, i: usize) -> Result<&'a [u8]> {
        match leaf {
            Leaf::Node(n) => match n.val(i) {
                Val::Inline(v) => Ok(v),
                Val::Overflow {
                    page,
                    len,
                    fresh: true,
                } => self.fresh.overflow(page, len),
                Val::Overflow {
                    page,
                    len,
                    fresh: false,
                } => self.base.overflow(page, len),
            },
            Leaf::Page(p) => self.base.value(p.entry(i)?.1),
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<&'a [u8]>> {
        let Some(found) = self.descend(Seek::Key(key))? else {
            return Ok(None);
        };
        match found.leaf.search(key)? {
            Ok(i) => self.value(found.leaf, i).map(Some),
            Err(_) => Ok(None),
        }
    }
}

/// A branch's keys, dirty or committed.
#[derive(Clone, Copy)]
enum KeyAt<'a> {
    Node(&'a Node),
    Page(NodePage<'a>),
}

impl<'a> KeyAt<'a> {
    fn key(&self, i: usize) -> Result<&'a [u8]> {
        match self {
            KeyAt::Node(n) => Ok(n.key(i)),
            KeyAt::Page(p) => p.key(i),
        }
    }

    fn child_index(&self, k: &[u8]) -> Result<usize> {
        match self {
            KeyAt::Node(n) => Ok(n.child_index(k)),
            KeyAt::Page(p) => p.child_index(k),
        }
    }
}

/// A branch's children, dirty or committed.
#[derive(Clone, Copy)]
enum ChildAt<'a> {
    Node(&'a Node),
    Page(NodePage<'a>),
}

impl ChildAt<'_> {
    fn child(&self, i: usize) -> Result<Child> {
        match self {
            ChildAt::Node(n) => n
                .children
                .get(i)
                .copied()
                .ok_or_else(|| Error::corrupt(n.page, "a branch has fewer children than keys")),
            ChildAt::Page(p) => p.child(i).map(Child::Page),
        }
    }
}

/// Entries of a [`WriteTree`] in a key range, from either end; see [`WriteTree::range`] for
/// an example. Items are `Result`s: a damaged page ends the iteration with an error.
pub struct WriteRange<'a> {
    reader: TreeReader<'a>,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// The leaf the front stands in, the index of the entry it returned last, and the
    /// separator above the leaf.
    front: Option<(Leaf<'a>, usize, Option<&'a [u8]>)>,
    /// The same for the back; the index is one past the entry it returned last.
    back: Option<(Leaf<'a>, usize, Option<&'a [u8]>)>,
    front_key: Option<&'a [u8]>,
    back_key: Option<&'a [u8]>,
    done: bool,
}

impl std::fmt::Debug for WriteRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteRange")
            .field("start", &self.start)
            .field("end", &self.end)
            .finish()
    }
}

/// A bound on how many leaves a range may descend into without finding an entry: a valid
/// tree has no empty leaf, so more means damage.
const MAX_EMPTY_LEAVES: u32 = 1 << 20;

impl<'a> WriteRange<'a> {
    fn below_end(&self, k: &[u8]) -> bool {
        let in_bound = match &self.end {
            Bound::Included(e) => k <= &e[..],
            Bound::Excluded(e) => k < &e[..],
            Bound::Unbounded => true,
        };
        in_bound && self.back_key.is_none_or(|b| k < b)
    }

    fn above_start(&self, k: &[u8]) -> bool {
        let in_bound = match &self.start {
            Bound::Included(s) => k >= &s[..],
            Bound::Excluded(s) => k > &s[..],
            Bound::Unbounded => true,
        };
        in_bound && self.front_key.is_none_or(|f| k > f)
    }

    fn step_front(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>> {
        let (mut leaf, mut i, mut hi) = match self.front {
            Some((leaf, i, hi)) => (leaf, i + 1, hi),
            None => {
                let seek = match &self.start {
                    Bound::Unbounded => Seek::First,
                    Bound::Included(k) | Bound::Excluded(k) => Seek::Key(k),
                };
                let Some(f) = self.reader.descend(seek)? else {
                    return Ok(None);
                };
                let i = match &self.start {
                    Bound::Unbounded => 0,
                    Bound::Included(k) => match f.leaf.search(k)? {
                        Ok(i) | Err(i) => i,
                    },
                    Bound::Excluded(k) => match f.leaf.search(k)? {
                        Ok(i) => i + 1,
                        Err(i) => i,
                    },
                };
                (f.leaf, i, f.hi)
            }
        };
        let mut empty = 0;
        while i >= leaf.len() {
            // Past this leaf: the next one starts at the separator above it.
            let Some(sep) = hi else {
                return Ok(None);
            };
            empty += 1;
            if empty > MAX_EMPTY_LEAVES {
                return Err(Error::corrupt(
                    0,
                    "a range finds no entries in leaf after leaf",
                ));
            }
            let Some(f) = self.reader.descend(Seek::Key(sep))? else {
                return Ok(None);
            };
            if f.hi.is_some_and(|h| h <= sep) {
                return Err(Error::corrupt(0, "separators do not increase"));
            }
            i = match f.leaf.search(sep)? {
                Ok(i) | Err(i) => i,
            };
            (leaf, hi) = (f.leaf, f.hi);
        }
        let k = leaf.key(i)?;
        if !self.below_end(k) {
            return Ok(None);
        }
        let v = self.reader.value(leaf, i)?;
        self.front = Some((leaf, i, hi));
        self.front_key = Some(k);
        Ok(Some((k, v)))
    }

    fn step_back(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>> {
        let (mut leaf, mut i, mut lo) = match self.back {
            Some((leaf, i, lo)) => (leaf, i - 1, lo),
            None => {
                let seek = match &self.end {
                    Bound::Unbounded => Seek::Last,
                    Bound::Included(k) | Bound::Excluded(k) => Seek::Key(k),
                };
                let Some(f) = self.reader.descend(seek)? else {
                    return Ok(None);
                };
                // One past the last entry at or below the end.
                let i = match &self.end {
                    Bound::Unbounded => f.leaf.len(),
                    Bound::Included(k) => match f.leaf.search(k)? {
                        Ok(i) => i + 1,
                        Err(i) => i,
                    },
                    Bound::Excluded(k) => match f.leaf.search(k)? {
                        Ok(i) | Err(i) => i,
                    },
                };
                (f.leaf, i, f.lo)
            }
        };
        let mut empty = 0;
        while i == 0 {
            // Before this leaf: the previous one holds the keys below its lower separator.
            let Some(sep) = lo else {
                return Ok(None);
            };
            empty += 1;
            if empty > MAX_EMPTY_LEAVES {
                return Err(Error::corrupt(
                    0,
                    "a range finds no entries in leaf after leaf",
                ));
            }
            let Some(f) = self.reader.descend(Seek::Below(sep))? else {
                return Ok(None);
            };
            if f.lo.is_some_and(|l| l >= sep) {
                return Err(Error::corrupt(0, "separators do not increase"));
            }
            i = match f.leaf.search(sep)? {
                Ok(i) | Err(i) => i,
            };
            (leaf, lo) = (f.leaf, f.lo);
        }
        let k = leaf.key(i - 1)?;
        if !self.above_start(k) {
            return Ok(None);
        }
        let v = self.reader.value(leaf, i - 1)?;
        self.back = Some((leaf, i, lo));
        self.back_key = Some(k);
        Ok(Some((k, v)))
    }
}

impl<'a> Iterator for WriteRange<'a> {
    type Item = Result<(&'a [u8], &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step_front();
        finish(&mut self.done, r)
    }
}

impl DoubleEndedIterator for WriteRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step_back();
        finish(&mut self.done, r)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Db, Error, Options};

    #[test]
    fn a_panic_inside_a_tree_edit_leaves_a_transaction_that_only_aborts() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("p.larch"), Options::default()).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"before", b"1").unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut t = tx.open_tree("t").unwrap();
            let _ = t.edit(|txn, i| {
                txn.insert(i, b"half", b"done")?;
                panic!("a bug inside the tree algorithms");
                #[allow(unreachable_code)]
                Ok(())
            });
        }));
        assert!(panicked.is_err());
        assert!(matches!(tx.commit(), Err(Error::Interrupted)));
        // Nothing of it reached the file; the next transaction starts clean.
        let rx = db.begin_read().unwrap();
        assert!(rx.open_tree("t").is_err());
        drop(rx);
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"after", b"2").unwrap();
        tx.commit().unwrap();
        db.check().unwrap();
    }
}
