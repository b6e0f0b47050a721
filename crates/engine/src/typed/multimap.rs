//! `MultimapTable<K, V>`: several values per key, kept sorted.
//!
//! A multimap is a tree whose keys are the pairs `(key, value)` in the tuple encoding and
//! whose values are empty: the same tree a `Table<(K, V), ()>` reads, which is how to walk
//! every pair. A key's values are the pairs starting with the key's nested encoding, so
//! `get_all` is one prefix range, already in value order.

use std::borrow::Borrow;
use std::fmt;
use std::marker::PhantomData;

use super::decode_error;
use super::key::Key;
use super::table::prefix_range;
use crate::{OwnedReadTree, Range, ReadTree, ReadTx, Result, WriteRange, WriteTree, WriteTx};

/// The name and types of a multimap table: each key holds a sorted set of values.
///
/// ```
/// use larch_engine::{Db, MultimapTable, Options};
///
/// const TAGS: MultimapTable<&str, &str> = MultimapTable::new("tags");
///
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path().join("t.larch"), Options::default())?;
/// let mut tx = db.begin_write()?;
/// {
///     let mut tags = tx.open_multimap_table(&TAGS)?;
///     tags.insert("doc1", "rust")?;
///     tags.insert("doc1", "db")?;
///     tags.insert("doc2", "rust")?;
/// }
/// tx.commit()?;
///
/// let rx = db.begin_read()?;
/// let tags = rx.open_multimap_table(&TAGS)?;
/// let doc1: Vec<&str> = tags.get_all("doc1")?.collect::<Result<_, _>>()?;
/// assert_eq!(doc1, ["db", "rust"]);
/// assert_eq!(tags.len()?, 3);
/// # Ok::<(), larch_engine::Error>(())
/// ```
pub struct MultimapTable<K: Key, V: Key> {
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Key> MultimapTable<K, V> {
    /// A multimap table named `name` (the tree's name) with keys `K` and values `V`.
    ///
    /// ```
    /// const M: larch_engine::MultimapTable<u64, u64> = larch_engine::MultimapTable::new("m");
    /// assert_eq!(M.name(), "m");
    /// ```
    pub const fn new(name: &'static str) -> Self {
        MultimapTable {
            name,
            types: PhantomData,
        }
    }

    /// The tree's name.
    ///
    /// ```
    /// assert_eq!(larch_engine::MultimapTable::<u8, u8>::new("m").name(), "m");
    /// ```
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<K: Key, V: Key> Clone for MultimapTable<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key, V: Key> Copy for MultimapTable<K, V> {}

impl<K: Key, V: Key> fmt::Debug for MultimapTable<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultimapTable")
            .field("name", &self.name)
            .field("key", &std::any::type_name::<K>())
            .field("value", &std::any::type_name::<V>())
            .finish()
    }
}

/// The tree key of the pair `(key, value)`: the key nested, then the value as a whole key.
fn pair<K: Key, V: Key>(key: &K::SelfType<'_>, value: &V::SelfType<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    K::encode_nested(key, &mut out);
    out.extend_from_slice(V::as_bytes(value).as_ref());
    out
}

impl ReadTx {
    /// Open a multimap table for reading; [`Error::TreeNotFound`](crate::Error::TreeNotFound)
    /// if no tree has its name.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u32, u32> = MultimapTable::new("m");
    /// let mut tx = db.begin_write()?;
    /// tx.open_multimap_table(&M)?.insert(1, 10)?;
    /// tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert!(rx.open_multimap_table(&M)?.contains(1, 10)?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_multimap_table<K: Key, V: Key>(
        &self,
        def: &MultimapTable<K, V>,
    ) -> Result<ReadMultimapTable<'_, K, V>> {
        Ok(ReadMultimapTable {
            tree: self.open_tree(def.name)?,
            name: def.name,
            types: PhantomData,
        })
    }
}

impl ReadTx {
    /// [`ReadTx::open_multimap_table`], as a handle that keeps its snapshot alive by itself.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u32, u32> = MultimapTable::new("m");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_multimap_table(&M)?.insert(1, 10)?;
    /// # tx.commit()?;
    /// let m = db.begin_read()?.open_multimap_table_owned(&M)?;
    /// let n = std::thread::spawn(move || m.table().get_all(1).map(Iterator::count))
    ///     .join()
    ///     .unwrap()?;
    /// assert_eq!(n, 1);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_multimap_table_owned<K: Key, V: Key>(
        &self,
        def: &MultimapTable<K, V>,
    ) -> Result<OwnedReadMultimapTable<K, V>> {
        Ok(OwnedReadMultimapTable {
            tree: self.open_tree_owned(def.name)?,
            name: def.name,
            types: PhantomData,
        })
    }
}

/// A multimap table of a read transaction that owns its snapshot
/// ([`ReadTx::open_multimap_table_owned`]); read it through
/// [`table`](OwnedReadMultimapTable::table).
pub struct OwnedReadMultimapTable<K: Key, V: Key> {
    tree: OwnedReadTree,
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Key> OwnedReadMultimapTable<K, V> {
    /// The table, borrowing this handle.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u8, u8> = MultimapTable::new("m");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_multimap_table(&M)?.insert(1, 2)?;
    /// # tx.commit()?;
    /// let m = db.begin_read()?.open_multimap_table_owned(&M)?;
    /// assert!(m.table().contains(1, 2)?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn table(&self) -> ReadMultimapTable<'_, K, V> {
        ReadMultimapTable {
            tree: self.tree.tree(),
            name: self.name,
            types: PhantomData,
        }
    }

    /// The snapshot this table reads.
    pub fn transaction(&self) -> &ReadTx {
        self.tree.transaction()
    }
}

impl<K: Key, V: Key> Clone for OwnedReadMultimapTable<K, V> {
    fn clone(&self) -> Self {
        OwnedReadMultimapTable {
            tree: self.tree.clone(),
            name: self.name,
            types: PhantomData,
        }
    }
}

impl<K: Key, V: Key> fmt::Debug for OwnedReadMultimapTable<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedReadMultimapTable")
            .field("name", &self.name)
            .finish()
    }
}

impl WriteTx<'_> {
    /// Open (creating it if missing) a multimap table for reading and writing.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<&str, u32> = MultimapTable::new("m");
    /// let mut tx = db.begin_write()?;
    /// let mut m = tx.open_multimap_table(&M)?;
    /// assert!(m.insert("a", 1)?);
    /// assert!(!m.insert("a", 1)?); // already there
    /// drop(m);
    /// tx.commit()?;
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_multimap_table<K: Key, V: Key>(
        &self,
        def: &MultimapTable<K, V>,
    ) -> Result<WriteMultimapTable<'_, K, V>> {
        Ok(WriteMultimapTable {
            tree: self.open_tree(def.name)?,
            name: def.name,
            types: PhantomData,
        })
    }
}

/// A multimap table inside a read transaction ([`ReadTx::open_multimap_table`]).
pub struct ReadMultimapTable<'r, K: Key, V: Key> {
    tree: ReadTree<'r>,
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Key> Clone for ReadMultimapTable<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key, V: Key> Copy for ReadMultimapTable<'_, K, V> {}

impl<K: Key, V: Key> fmt::Debug for ReadMultimapTable<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadMultimapTable")
            .field("name", &self.name)
            .finish()
    }
}

impl<'r, K: Key + 'r, V: Key + 'r> ReadMultimapTable<'r, K, V> {
    /// The values of `key`, in value order (`.rev()` for descending); empty if it has none.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<&str, u32> = MultimapTable::new("m");
    /// # let mut tx = db.begin_write()?;
    /// # { let mut m = tx.open_multimap_table(&M)?; for v in [3, 1, 2] { m.insert("a", v)?; } m.insert("ab", 9)?; }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let m = rx.open_multimap_table(&M)?;
    /// let a: Vec<u32> = m.get_all("a")?.collect::<Result<_, _>>()?;
    /// assert_eq!(a, [1, 2, 3]);
    /// assert_eq!(m.get_all("a")?.rev().next().transpose()?, Some(3));
    /// assert_eq!(m.get_all("zz")?.count(), 0);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn get_all<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<MultimapValues<'r, K, V>>
    where
        K: 'k,
    {
        let mut prefix = Vec::new();
        K::encode_nested(key.borrow(), &mut prefix);
        let (start, end) = prefix_range(&prefix);
        let open_file = self.tree.range((start, end.as_ref().map(Vec::as_slice)))?;
        Ok(MultimapValues::new(open_file, prefix.len(), self.name))
    }

    /// True if `key` holds `value`.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u8, &str> = MultimapTable::new("m");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_multimap_table(&M)?.insert(1, "x")?;
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let m = rx.open_multimap_table(&M)?;
    /// assert!(m.contains(1, "x")?);
    /// assert!(!m.contains(1, "y")?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn contains<'k, 'v>(
        &self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool>
    where
        K: 'k,
        V: 'v,
    {
        let k = pair::<K, V>(key.borrow(), value.borrow());
        Ok(self.tree.get(&k)?.is_some())
    }

    /// Number of (key, value) pairs (O(1)).
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u8, u8> = MultimapTable::new("m");
    /// # let mut tx = db.begin_write()?;
    /// # { let mut m = tx.open_multimap_table(&M)?; m.insert(1, 1)?; m.insert(1, 2)?; m.insert(2, 1)?; }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_multimap_table(&M)?.len()?, 3);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.tree.len()
    }

    /// True if the table holds no pairs.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u8, u8> = MultimapTable::new("m");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_multimap_table(&M)?;
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert!(rx.open_multimap_table(&M)?.is_empty()?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.tree.is_empty()
    }
}

/// A multimap table inside a write transaction ([`WriteTx::open_multimap_table`]); reads
/// see the transaction's own writes.
pub struct WriteMultimapTable<'t, K: Key, V: Key> {
    tree: WriteTree<'t>,
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Key> fmt::Debug for WriteMultimapTable<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteMultimapTable")
            .field("name", &self.name)
            .finish()
    }
}

impl<K: Key, V: Key> WriteMultimapTable<'_, K, V> {
    /// Add `value` to `key`'s values; true if it was not there already (then nothing is
    /// written).
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<&str, &str> = MultimapTable::new("m");
    /// let mut tx = db.begin_write()?;
    /// let mut m = tx.open_multimap_table(&M)?;
    /// assert!(m.insert("k", "a")?);
    /// assert!(m.insert("k", "b")?);
    /// assert!(!m.insert("k", "a")?);
    /// assert_eq!(m.len()?, 2);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool>
    where
        K: 'k,
        V: 'v,
    {
        let k = pair::<K, V>(key.borrow(), value.borrow());
        if self.tree.get(&k)?.is_some() {
            return Ok(false);
        }
        self.tree.insert(&k, &[])?;
        Ok(true)
    }

    /// Remove `value` from `key`'s values; true if it was there.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u32, u32> = MultimapTable::new("m");
    /// let mut tx = db.begin_write()?;
    /// let mut m = tx.open_multimap_table(&M)?;
    /// m.insert(1, 10)?;
    /// assert!(m.remove(1, 10)?);
    /// assert!(!m.remove(1, 10)?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn remove<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool>
    where
        K: 'k,
        V: 'v,
    {
        let k = pair::<K, V>(key.borrow(), value.borrow());
        self.tree.remove(&k)
    }

    /// True if `key` holds `value`, including this transaction's writes.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u32, bool> = MultimapTable::new("m");
    /// let mut tx = db.begin_write()?;
    /// let mut m = tx.open_multimap_table(&M)?;
    /// m.insert(1, true)?;
    /// assert!(m.contains(1, true)?);
    /// assert!(!m.contains(1, false)?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn contains<'k, 'v>(
        &self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool>
    where
        K: 'k,
        V: 'v,
    {
        let k = pair::<K, V>(key.borrow(), value.borrow());
        Ok(self.tree.get(&k)?.is_some())
    }

    /// Number of (key, value) pairs (O(1)).
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u8, u8> = MultimapTable::new("m");
    /// let mut tx = db.begin_write()?;
    /// let mut m = tx.open_multimap_table(&M)?;
    /// m.insert(1, 1)?;
    /// m.insert(1, 2)?;
    /// assert_eq!(m.len()?, 2);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.tree.len()
    }

    /// True if the table holds no pairs.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const M: MultimapTable<u8, u8> = MultimapTable::new("m");
    /// let mut tx = db.begin_write()?;
    /// assert!(tx.open_multimap_table(&M)?.is_empty()?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.tree.is_empty()
    }
}

impl<'t, K: Key, V: Key> WriteMultimapTable<'t, K, V> {
    /// The values of `key`, in value order (`.rev()` for descending), including this
    /// transaction's writes; empty if it has none. The iterator borrows the table.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const POSTINGS: MultimapTable<&str, u32> = MultimapTable::new("postings");
    /// let tx = db.begin_write()?;
    /// let mut p = tx.open_multimap_table(&POSTINGS)?;
    /// for doc in [7, 3, 5] {
    ///     p.insert("tree", doc)?;
    /// }
    /// p.insert("trees", 1)?; // another key, though "tree" is a prefix of it
    /// let docs: Vec<u32> = p.get_all("tree")?.collect::<Result<_, _>>()?;
    /// assert_eq!(docs, [3, 5, 7]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn get_all<'k>(
        &self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<MultimapValues<'_, K, V, WriteRange<'_>>>
    where
        K: 'k,
    {
        let mut prefix = Vec::new();
        K::encode_nested(key.borrow(), &mut prefix);
        let (start, end) = prefix_range(&prefix);
        let open_file = self.tree.range((start, end.as_ref().map(Vec::as_slice)))?;
        Ok(MultimapValues::new(open_file, prefix.len(), self.name))
    }

    /// Remove every value of `key`; returns how many. One range removal over the key's
    /// pairs, so a key with many values costs about as much as one with few.
    ///
    /// ```
    /// # use larch_engine::{Db, MultimapTable, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const TAGS: MultimapTable<u32, &str> = MultimapTable::new("tags");
    /// let tx = db.begin_write()?;
    /// let mut tags = tx.open_multimap_table(&TAGS)?;
    /// for t in ["a", "b", "c"] {
    ///     tags.insert(1, t)?;
    /// }
    /// tags.insert(2, "a")?;
    /// assert_eq!(tags.remove_all(1)?, 3);
    /// assert_eq!(tags.remove_all(1)?, 0);
    /// assert_eq!(tags.len()?, 1);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn remove_all<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<u64>
    where
        K: 'k,
    {
        let mut prefix = Vec::new();
        K::encode_nested(key.borrow(), &mut prefix);
        let (start, end) = prefix_range(&prefix);
        self.tree
            .remove_range((start, end.as_ref().map(Vec::as_slice)))
    }
}

/// Iterator over one key's values in a multimap, in value order, from either end
/// ([`ReadMultimapTable::get_all`]). Items are `Result`s, as for [`TableRange`](super::TableRange).
///
/// ```
/// # use larch_engine::{Db, MultimapTable, MultimapValues, Options};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
/// const M: MultimapTable<u8, u8> = MultimapTable::new("m");
/// # let mut tx = db.begin_write()?;
/// # { let mut m = tx.open_multimap_table(&M)?; for v in 0..4 { m.insert(7, v)?; } }
/// # tx.commit()?;
/// let rx = db.begin_read()?;
/// let m = rx.open_multimap_table(&M)?;
/// let mut vals: MultimapValues<u8, u8> = m.get_all(7)?;
/// assert_eq!(vals.next_back().transpose()?, Some(3));
/// assert_eq!(vals.next().transpose()?, Some(0));
/// # Ok::<(), larch_engine::Error>(())
/// ```
///
/// `I` is the byte iterator underneath: a read snapshot's [`Range`] unless named otherwise.
pub struct MultimapValues<'r, K: Key, V: Key, I = Range<'r>> {
    open_file: I,
    /// Length of the key's nested encoding, in front of every value.
    skip: usize,
    name: &'static str,
    /// The items borrow for `'r` from what `inner` reads.
    items: PhantomData<&'r ()>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<'r, K: Key + 'r, V: Key + 'r, I> MultimapValues<'r, K, V, I> {
    fn new(open_file: I, skip: usize, name: &'static str) -> Self {
        MultimapValues {
            open_file,
            skip,
            name,
            items: PhantomData,
            types: PhantomData,
        }
    }

    fn decode(
        &self,
        entry: Option<Result<(&'r [u8], &'r [u8])>>,
    ) -> Option<Result<V::Decoded<'r>>> {
        let (k, _) = match entry? {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e)),
        };
        // Every key in the range starts with the prefix, so `skip` is in bounds; `get`
        // keeps a damaged page from becoming a panic all the same.
        let value = k.get(self.skip..).unwrap_or_default();
        Some(V::from_bytes(value).map_err(|e| decode_error(self.name, e)))
    }
}

impl<K: Key, V: Key, I: fmt::Debug> fmt::Debug for MultimapValues<'_, K, V, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultimapValues")
            .field("name", &self.name)
            .field("open_file", &self.open_file)
            .finish()
    }
}

impl<'r, K, V, I> Iterator for MultimapValues<'r, K, V, I>
where
    K: Key + 'r,
    V: Key + 'r,
    I: Iterator<Item = Result<(&'r [u8], &'r [u8])>>,
{
    type Item = Result<V::Decoded<'r>>;

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.open_file.next();
        self.decode(entry)
    }
}

impl<'r, K, V, I> DoubleEndedIterator for MultimapValues<'r, K, V, I>
where
    K: Key + 'r,
    V: Key + 'r,
    I: DoubleEndedIterator<Item = Result<(&'r [u8], &'r [u8])>>,
{
    fn next_back(&mut self) -> Option<Self::Item> {
        let entry = self.open_file.next_back();
        self.decode(entry)
    }
}
