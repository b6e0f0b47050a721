//! Read transactions: a snapshot, zero-copy slices into the map for as long as it lives.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use larch_pager::{PageRole, TreeRoot};

use crate::cursor::Range;
use crate::error::{Error, Result};
use crate::file::OpenFile;
use crate::readers::ReadSnap;
use crate::view::View;
use crate::TxId;

/// A read transaction: sees exactly the state of the newest commit at `begin_read`, however
/// many commits follow. Holds its pages from reuse until dropped (and until every
/// [`OwnedReadTree`] taken from it is dropped). Cloning it is cheap and reads the same
/// snapshot.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
/// # let tx = db.begin_write()?;
/// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
/// # tx.commit()?;
/// let rx = db.begin_read()?;
/// let rx2 = rx.clone(); // the same snapshot, e.g. for another thread
/// std::thread::spawn(move || assert_eq!(rx2.open_tree("t").unwrap().len().unwrap(), 3))
///     .join()
///     .unwrap();
/// assert_eq!(rx.txid(), 1);
/// # Ok::<(), larch_engine::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ReadTx {
    hold: Arc<Registered>,
}

/// A snapshot registered in the reader table: unregistered when the last holder drops it.
#[derive(Debug)]
struct Registered {
    snap: Arc<ReadSnap>,
    /// The reader-table shard it is registered in.
    shard: usize,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.snap
            .open_file
            .end_read(self.shard, self.snap.meta.txid);
    }
}

impl ReadTx {
    pub(crate) fn new(snap: Arc<ReadSnap>, shard: usize) -> ReadTx {
        ReadTx {
            hold: Arc::new(Registered { snap, shard }),
        }
    }

    fn snap(&self) -> &ReadSnap {
        &self.hold.snap
    }

    /// The commit this snapshot shows. See [`ReadTx`] for an example.
    pub fn txid(&self) -> TxId {
        self.snap().meta.txid
    }

    /// The file this snapshot reads.
    pub(crate) fn file(&self) -> &Arc<OpenFile> {
        &self.snap().open_file
    }

    pub(crate) fn meta(&self) -> larch_pager::Meta {
        self.snap().meta
    }

    pub(crate) fn view(&self) -> View<'_> {
        View::new(
            &self.snap().map,
            &self.snap().meta,
            self.snap().open_file.opts.verify_checksums,
        )
    }

    /// Open a tree for reading; [`Error::TreeNotFound`] if it does not exist.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_tree("t")?.get(b"a")?, Some(&b"v"[..]));
    /// assert!(matches!(rx.open_tree("nope"), Err(larch_engine::Error::TreeNotFound(_))));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_tree(&self, name: &str) -> Result<ReadTree<'_>> {
        let view = self.view();
        let cached = self.snap().first_tree.get();
        if let Some((n, root)) = cached {
            if **n == *name {
                return Ok(ReadTree { view, root: *root });
            }
        }
        let v = view
            .get(
                &self.snap().meta.catalog,
                PageRole::Catalog,
                name.as_bytes(),
            )?
            .ok_or_else(|| Error::TreeNotFound(name.to_string()))?;
        let root = TreeRoot::decode(v).ok_or_else(|| {
            Error::corrupt(
                self.snap().meta.catalog.root,
                format!("catalog entry {name:?} is short"),
            )
        })?;
        if cached.is_none() {
            let _ = self.snap().first_tree.set((name.into(), root));
        }
        Ok(ReadTree { view, root })
    }

    /// Names of every tree, sorted.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("b")?.insert(b"k", b"v")?;
    /// tx.open_tree("a")?;
    /// tx.commit()?;
    /// assert_eq!(db.begin_read()?.tree_names()?, ["a", "b"]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn tree_names(&self) -> Result<Vec<String>> {
        let range = Range::new(
            self.view(),
            self.snap().meta.catalog,
            PageRole::Catalog,
            Bound::Unbounded,
            Bound::Unbounded,
        );
        range
            .map(|e| e.map(|(k, _)| String::from_utf8_lossy(k).into_owned()))
            .collect()
    }
}

/// A tree of a read transaction that owns its snapshot: keep it in a struct, send it to
/// another thread, hold it as long as needed. Slices it returns borrow it.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = larch_engine::Db::open(dir.path().join("o.larch"), larch_engine::Options::default())?;
/// # let tx = db.begin_write()?;
/// # tx.open_tree("users")?.insert(b"alice", b"1")?;
/// # tx.commit()?;
/// struct Lookup {
///     users: larch_engine::OwnedReadTree,
/// }
/// let lookup = Lookup { users: db.begin_read()?.open_tree_owned("users")? };
/// assert_eq!(lookup.users.get(b"alice")?, Some(&b"1"[..]));
/// # Ok::<(), larch_engine::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct OwnedReadTree {
    tx: ReadTx,
    root: TreeRoot,
}

impl ReadTx {
    /// [`ReadTx::open_tree`], as a handle that keeps the snapshot alive by itself. See
    /// [`OwnedReadTree`] for an example.
    pub fn open_tree_owned(&self, name: &str) -> Result<OwnedReadTree> {
        let root = self.open_tree(name)?.root;
        Ok(OwnedReadTree {
            tx: self.clone(),
            root,
        })
    }
}

impl OwnedReadTree {
    /// The tree as a [`ReadTree`] borrowing this handle.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// let r: larch_engine::ReadTree<'_> = t.tree();
    /// assert_eq!(r.len()?, 3);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn tree(&self) -> ReadTree<'_> {
        ReadTree {
            view: self.tx.view(),
            root: self.root,
        }
    }

    /// The snapshot this tree reads.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert_eq!(t.transaction().txid(), 1);
    /// assert_eq!(t.transaction().tree_names()?, ["t"]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn transaction(&self) -> &ReadTx {
        &self.tx
    }

    /// See [`ReadTree::get`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert_eq!(t.get(b"b")?, Some(&b"v"[..]));
    /// assert_eq!(t.get(b"z")?, None);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn get(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        self.tree().get(key)
    }

    /// See [`ReadTree::range`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert_eq!(t.range(&b"b"[..]..)?.count(), 2);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Range<'_>> {
        self.tree().range(range)
    }

    /// See [`ReadTree::iter`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert_eq!(t.iter()?.rev().next().transpose()?, Some((&b"c"[..], &b"v"[..])));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn iter(&self) -> Result<Range<'_>> {
        self.tree().iter()
    }

    /// See [`ReadTree::first`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert_eq!(t.first()?.map(|(k, _)| k), Some(&b"a"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn first(&self) -> Result<Option<(&[u8], &[u8])>> {
        self.tree().first()
    }

    /// See [`ReadTree::last`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert_eq!(t.last()?.map(|(k, _)| k), Some(&b"c"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn last(&self) -> Result<Option<(&[u8], &[u8])>> {
        self.tree().last()
    }

    /// See [`ReadTree::len`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert_eq!(t.len()?, 3);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.tree().len()
    }

    /// See [`ReadTree::is_empty`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let t = db.begin_read()?.open_tree_owned("t")?;
    /// assert!(!t.is_empty()?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.tree().is_empty()
    }
}

/// A tree inside a read transaction. Slices it returns live as long as the transaction, and
/// no longer:
///
/// ```compile_fail
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = larch_engine::Db::open(dir.path().join("r.larch"), larch_engine::Options::default()).unwrap();
/// let value = {
///     let rx = db.begin_read().unwrap();
///     let t = rx.open_tree("t").unwrap();
///     t.get(b"k").unwrap()
/// }; // error: `rx` is dropped while `value` borrows it
/// drop(value);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ReadTree<'r> {
    view: View<'r>,
    root: TreeRoot,
}

fn bound_slice<'k>(b: Bound<&&'k [u8]>) -> Bound<&'k [u8]> {
    match b {
        Bound::Included(k) => Bound::Included(*k),
        Bound::Excluded(k) => Bound::Excluded(*k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl<'r> ReadTree<'r> {
    /// The value of `key`: a slice straight out of the map, no copy.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let t = rx.open_tree("t")?;
    /// let v: &[u8] = t.get(b"a")?.unwrap(); // lives as long as `rx`
    /// assert_eq!(v, b"v");
    /// assert_eq!(t.get(b"z")?, None);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    #[inline]
    pub fn get(&self, key: &[u8]) -> Result<Option<&'r [u8]>> {
        self.view.get(&self.root, PageRole::Data, key)
    }

    /// Entries with keys in `range`, in order; `.rev()` for descending.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("r.larch"), larch_engine::Options::default())?;
    /// # let mut tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"")?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let t = rx.open_tree("t")?;
    /// let keys: Vec<&[u8]> = t.range(&b"b"[..]..)?.map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, vec![&b"b"[..], &b"c"[..]]);
    /// let all = (Bound::<&[u8]>::Unbounded, Bound::<&[u8]>::Unbounded);
    /// assert_eq!(t.range(all)?.rev().count(), 3);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Range<'r>> {
        Ok(Range::new(
            self.view,
            self.root,
            PageRole::Data,
            bound_slice(range.start_bound()),
            bound_slice(range.end_bound()),
        ))
    }

    /// Every entry, in key order; `.rev()` for descending.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let t = rx.open_tree("t")?;
    /// let keys: Vec<&[u8]> = t.iter()?.rev().map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [&b"c"[..], &b"b"[..], &b"a"[..]]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn iter(&self) -> Result<Range<'r>> {
        Ok(Range::new(
            self.view,
            self.root,
            PageRole::Data,
            Bound::Unbounded,
            Bound::Unbounded,
        ))
    }

    /// The smallest entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_tree("t")?.first()?, Some((&b"a"[..], &b"v"[..])));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn first(&self) -> Result<Option<(&'r [u8], &'r [u8])>> {
        self.iter()?.next().transpose()
    }

    /// The largest entry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_tree("t")?.last()?, Some((&b"c"[..], &b"v"[..])));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn last(&self) -> Result<Option<(&'r [u8], &'r [u8])>> {
        self.iter()?.next_back().transpose()
    }

    pub(crate) fn root(&self) -> TreeRoot {
        self.root
    }

    /// Number of entries (O(1): the count is stored with the tree).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// # let tx = db.begin_write()?;
    /// # { let mut t = tx.open_tree("t")?; for k in [b"a", b"b", b"c"] { t.insert(k, b"v")?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_tree("t")?.len()?, 3);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        Ok(self.root.entries)
    }

    /// True if the tree has no entries.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("empty")?;
    /// tx.commit()?;
    /// assert!(db.begin_read()?.open_tree("empty")?.is_empty()?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.root.entries == 0)
    }
}
