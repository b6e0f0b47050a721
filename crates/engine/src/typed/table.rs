//! `Table<K, V>`: a tree read and written as keys of type `K` and values of type `V`.

use std::borrow::Borrow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use super::key::{Key, PrefixKey, Value};
use super::{decode_error, prefix_end};
use crate::{OwnedReadTree, Range, ReadTree, ReadTx, Result, WriteRange, WriteTree, WriteTx};

/// The name and types of a table, usually a `const`:
/// `const USERS: Table<&str, u64> = Table::new("users");`.
///
/// The name is the tree's name; the types say how its keys and values are encoded. Open it
/// with [`ReadTx::open_table`] or [`WriteTx::open_table`].
///
/// Methods take keys and values by value or by reference (`impl Borrow<K::SelfType>`):
/// `t.insert("alice", 7)` and `t.insert(&name, &n)` both work for a `Table<&str, u64>`.
///
/// ```
/// use larch_engine::{Db, Options, Table};
///
/// const SCORES: Table<&str, u64> = Table::new("scores");
///
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path().join("t.larch"), Options::default())?;
/// let mut tx = db.begin_write()?;
/// {
///     let mut scores = tx.open_table(&SCORES)?;
///     scores.insert("alice", 7)?;
///     scores.insert("bob", 3)?;
/// }
/// tx.commit()?;
///
/// let rx = db.begin_read()?;
/// let scores = rx.open_table(&SCORES)?;
/// assert_eq!(scores.get("alice")?, Some(7));
/// let all: Vec<(&str, u64)> = scores.iter()?.collect::<Result<_, _>>()?;
/// assert_eq!(all, [("alice", 7), ("bob", 3)]);
/// # Ok::<(), larch_engine::Error>(())
/// ```
pub struct Table<K: Key, V: Value> {
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Value> Table<K, V> {
    /// A table named `name` (the tree's name) with keys `K` and values `V`.
    ///
    /// ```
    /// const IDS: larch_engine::Table<(u32, &str), ()> = larch_engine::Table::new("ids");
    /// assert_eq!(IDS.name(), "ids");
    /// ```
    pub const fn new(name: &'static str) -> Self {
        Table {
            name,
            types: PhantomData,
        }
    }

    /// The tree's name.
    ///
    /// ```
    /// assert_eq!(larch_engine::Table::<u8, u8>::new("t").name(), "t");
    /// ```
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<K: Key, V: Value> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key, V: Value> Copy for Table<K, V> {}

impl<K: Key, V: Value> fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .field("key", &std::any::type_name::<K>())
            .field("value", &std::any::type_name::<V>())
            .finish()
    }
}

impl ReadTx {
    /// Open a typed table for reading; [`Error::TreeNotFound`](crate::Error::TreeNotFound) if
    /// no tree has its name.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u32, &str> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// tx.open_table(&T)?.insert(1, "one")?;
    /// tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let t = rx.open_table(&T)?;
    /// let one: &str = t.get(1)?.unwrap(); // borrowed from the page
    /// assert_eq!(one, "one");
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_table<K: Key, V: Value>(&self, def: &Table<K, V>) -> Result<ReadTable<'_, K, V>> {
        Ok(ReadTable {
            tree: self.open_tree(def.name)?,
            name: def.name,
            types: PhantomData,
        })
    }
}

impl ReadTx {
    /// [`ReadTx::open_table`], as a handle that keeps its snapshot alive by itself: keep it in
    /// a struct next to other state, or move it to another thread.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const USERS: Table<&str, u32> = Table::new("users");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_table(&USERS)?.insert("alice", 42)?;
    /// # tx.commit()?;
    /// let users = db.begin_read()?.open_table_owned(&USERS)?;
    /// let age = std::thread::spawn(move || users.table().get("alice")).join().unwrap()?;
    /// assert_eq!(age, Some(42));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_table_owned<K: Key, V: Value>(
        &self,
        def: &Table<K, V>,
    ) -> Result<OwnedReadTable<K, V>> {
        Ok(OwnedReadTable {
            tree: self.open_tree_owned(def.name)?,
            name: def.name,
            types: PhantomData,
        })
    }
}

/// A typed table of a read transaction that owns its snapshot ([`ReadTx::open_table_owned`]).
/// Read it through [`table`](OwnedReadTable::table); what that returns borrows the handle.
pub struct OwnedReadTable<K: Key, V: Value> {
    tree: OwnedReadTree,
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Value> OwnedReadTable<K, V> {
    /// The table, borrowing this handle.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u8, u8> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_table(&T)?.insert(1, 2)?;
    /// # tx.commit()?;
    /// struct Snapshot {
    ///     t: larch_engine::OwnedReadTable<u8, u8>,
    /// }
    /// let s = Snapshot { t: db.begin_read()?.open_table_owned(&T)? };
    /// assert_eq!(s.t.table().first()?, Some((1, 2)));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn table(&self) -> ReadTable<'_, K, V> {
        ReadTable {
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

impl<K: Key, V: Value> Clone for OwnedReadTable<K, V> {
    fn clone(&self) -> Self {
        OwnedReadTable {
            tree: self.tree.clone(),
            name: self.name,
            types: PhantomData,
        }
    }
}

impl<K: Key, V: Value> fmt::Debug for OwnedReadTable<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedReadTable")
            .field("name", &self.name)
            .finish()
    }
}

impl WriteTx<'_> {
    /// Open (creating it if missing) a typed table for reading and writing.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<(&str, u16), bool> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// t.insert(("a", 1), true)?;
    /// assert_eq!(t.get(("a", 1))?, Some(true));
    /// drop(t);
    /// tx.commit()?;
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn open_table<K: Key, V: Value>(&self, def: &Table<K, V>) -> Result<WriteTable<'_, K, V>> {
        Ok(WriteTable {
            tree: self.open_tree(def.name)?,
            name: def.name,
            types: PhantomData,
        })
    }
}

/// A typed table inside a read transaction ([`ReadTx::open_table`]). What it returns borrows
/// from the transaction's pages (for `&str`/`&[u8]`) and lives as long as the transaction.
pub struct ReadTable<'r, K: Key, V: Value> {
    tree: ReadTree<'r>,
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Value> Clone for ReadTable<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key, V: Value> Copy for ReadTable<'_, K, V> {}

impl<K: Key, V: Value> fmt::Debug for ReadTable<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadTable")
            .field("name", &self.name)
            .finish()
    }
}

/// The byte bounds of a typed range (the encoded keys, kept while the range is made).
fn encode_bounds<'a, 'k: 'a, K, KR, R>(
    range: &'a R,
) -> (Bound<K::AsBytes<'a>>, Bound<K::AsBytes<'a>>)
where
    K: Key + 'k,
    KR: Borrow<K::SelfType<'k>> + 'a,
    R: RangeBounds<KR>,
{
    (
        range.start_bound().map(|k| K::as_bytes(k.borrow())),
        range.end_bound().map(|k| K::as_bytes(k.borrow())),
    )
}

fn as_slices<B: AsRef<[u8]>>(bounds: &(Bound<B>, Bound<B>)) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (
        bounds.0.as_ref().map(AsRef::as_ref),
        bounds.1.as_ref().map(AsRef::as_ref),
    )
}

/// The byte range of every key that starts with `prefix`.
pub(super) fn prefix_range(prefix: &[u8]) -> (Bound<&[u8]>, Bound<Vec<u8>>) {
    let start = match prefix {
        [] => Bound::Unbounded,
        p => Bound::Included(p),
    };
    let end = prefix_end(prefix).map_or(Bound::Unbounded, Bound::Excluded);
    (start, end)
}

impl<'r, K: Key + 'r, V: Value + 'r> ReadTable<'r, K, V> {
    /// The value of `key`.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<&[u8], &[u8]> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_table(&T)?.insert(&b"k"[..], &b"v"[..])?;
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let t = rx.open_table(&T)?;
    /// assert_eq!(t.get(&b"k"[..])?, Some(&b"v"[..]));
    /// assert_eq!(t.get(&b"x"[..])?, None);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<V::Decoded<'r>>>
    where
        K: 'k,
    {
        let k = K::as_bytes(key.borrow());
        match self.tree.get(k.as_ref())? {
            Some(v) => V::from_bytes(v)
                .map(Some)
                .map_err(|e| decode_error(self.name, e)),
            None => Ok(None),
        }
    }

    /// Entries with keys in `range`, in key order; `.rev()` for descending.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<i32, ()> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # { let mut t = tx.open_table(&T)?; for k in -3..3 { t.insert(k, ())?; } }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let t = rx.open_table(&T)?;
    /// let keys: Vec<i32> = t.range(-1..=1)?.map(|e| e.map(|(k, ())| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [-1, 0, 1]);
    /// let down: Vec<i32> = t.range(..0)?.rev().map(|e| e.map(|(k, ())| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(down, [-1, -2, -3]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn range<'k, KR>(&self, range: impl RangeBounds<KR>) -> Result<TableRange<'r, K, V>>
    where
        K: 'k,
        KR: Borrow<K::SelfType<'k>>,
    {
        let bounds = encode_bounds::<K, KR, _>(&range);
        let open_file = self.tree.range(as_slices(&bounds))?;
        Ok(TableRange::new(open_file, self.name))
    }

    /// Entries whose keys start with `prefix`: leading bytes or text for `&[u8]`/`&str`
    /// keys, the first element for tuple keys ([`PrefixKey`]).
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const WORDS: Table<&str, ()> = Table::new("words");
    /// const POSTINGS: Table<(&str, u32), ()> = Table::new("postings");
    /// let mut tx = db.begin_write()?;
    /// for w in ["car", "cart", "cat", "dog"] {
    ///     tx.open_table(&WORDS)?.insert(w, ())?;
    /// }
    /// for (w, doc) in [("car", 2), ("car", 1), ("cart", 5)] {
    ///     tx.open_table(&POSTINGS)?.insert((w, doc), ())?;
    /// }
    /// tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let words = rx.open_table(&WORDS)?;
    /// let car: Vec<&str> = words.range_prefix("car")?.map(|e| e.map(|(k, ())| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(car, ["car", "cart"]);
    /// let postings = rx.open_table(&POSTINGS)?;
    /// let docs: Vec<u32> = postings.range_prefix("car")?.map(|e| e.map(|((_, d), ())| d)).collect::<Result<_, _>>()?;
    /// assert_eq!(docs, [1, 2]); // "cart" is another first element
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn range_prefix<'p>(
        &self,
        prefix: impl Borrow<<K::Prefix as Value>::SelfType<'p>>,
    ) -> Result<TableRange<'r, K, V>>
    where
        K: PrefixKey,
        K::Prefix: 'p,
    {
        let mut p = Vec::new();
        K::encode_prefix(prefix.borrow(), &mut p);
        let (start, end) = prefix_range(&p);
        let open_file = self.tree.range((start, end.as_ref().map(Vec::as_slice)))?;
        Ok(TableRange::new(open_file, self.name))
    }

    /// Every entry, in key order.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u8, String> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # { let mut t = tx.open_table(&T)?; t.insert(2, "b")?; t.insert(1, "a")?; }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// let all: Vec<(u8, String)> = rx.open_table(&T)?.iter()?.collect::<Result<_, _>>()?;
    /// assert_eq!(all, [(1, "a".to_string()), (2, "b".to_string())]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn iter(&self) -> Result<TableRange<'r, K, V>> {
        Ok(TableRange::new(self.tree.iter()?, self.name))
    }

    /// The entry with the smallest key.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u64, u64> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # { let mut t = tx.open_table(&T)?; t.insert(20, 2)?; t.insert(10, 1)?; }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_table(&T)?.first()?, Some((10, 1)));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn first(&self) -> Result<Option<(K::Decoded<'r>, V::Decoded<'r>)>> {
        self.iter()?.next().transpose()
    }

    /// The entry with the largest key.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u64, u64> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # { let mut t = tx.open_table(&T)?; t.insert(20, 2)?; t.insert(10, 1)?; }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_table(&T)?.last()?, Some((20, 2)));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn last(&self) -> Result<Option<(K::Decoded<'r>, V::Decoded<'r>)>> {
        self.iter()?.next_back().transpose()
    }

    /// Number of entries (O(1)).
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u8, ()> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # { let mut t = tx.open_table(&T)?; t.insert(1, ())?; t.insert(2, ())?; }
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert_eq!(rx.open_table(&T)?.len()?, 2);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.tree.len()
    }

    /// True if the table has no entries.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u8, ()> = Table::new("t");
    /// # let mut tx = db.begin_write()?;
    /// # tx.open_table(&T)?;
    /// # tx.commit()?;
    /// let rx = db.begin_read()?;
    /// assert!(rx.open_table(&T)?.is_empty()?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.tree.is_empty()
    }
}

/// A typed table inside a write transaction ([`WriteTx::open_table`]); reads see the
/// transaction's own writes.
pub struct WriteTable<'t, K: Key, V: Value> {
    tree: WriteTree<'t>,
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key, V: Value> fmt::Debug for WriteTable<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteTable")
            .field("name", &self.name)
            .finish()
    }
}

impl<K: Key, V: Value> WriteTable<'_, K, V> {
    /// Insert or overwrite `key` with `value`. A key that encodes to no bytes (an empty
    /// string, `()`) is refused with [`Error::EmptyKey`](crate::Error::EmptyKey).
    ///
    /// ```
    /// # use larch_engine::{Db, Error, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<&str, Vec<u8>> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// t.insert("k", &b"v1"[..])?;
    /// t.insert("k", &b"v2"[..])?;
    /// assert_eq!(t.get("k")?, Some(b"v2".to_vec()));
    /// assert!(matches!(t.insert("", &b""[..]), Err(Error::EmptyKey)));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<()>
    where
        K: 'k,
        V: 'v,
    {
        let k = K::as_bytes(key.borrow());
        let v = V::as_bytes(value.borrow());
        self.tree.insert(k.as_ref(), v.as_ref())
    }

    /// Add `key` after the table's last entry without searching for its place (the sorted
    /// bulk load, [`crate::WriteTree::append`]): keys must come in ascending order of their
    /// encoding (which is the key type's order), above every key in the table, or it is
    /// [`crate::Error::KeyNotGreater`] and nothing changes.
    ///
    /// ```
    /// # use larch_engine::{Db, Error, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u64, &str> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// for i in 0..100u64 {
    ///     t.append(i, "v")?;
    /// }
    /// assert!(matches!(t.append(5, "v"), Err(Error::KeyNotGreater { .. })));
    /// assert_eq!(t.len()?, 100);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn append<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<()>
    where
        K: 'k,
        V: 'v,
    {
        let k = K::as_bytes(key.borrow());
        let v = V::as_bytes(value.borrow());
        self.tree.append(k.as_ref(), v.as_ref())
    }

    /// Remove `key`; true if it was there.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u32, u32> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// t.insert(1, 10)?;
    /// assert!(t.remove(1)?);
    /// assert!(!t.remove(1)?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool>
    where
        K: 'k,
    {
        let k = K::as_bytes(key.borrow());
        self.tree.remove(k.as_ref())
    }

    /// The value of `key`, including this transaction's writes.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u32, &str> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// t.insert(1, "one")?;
    /// assert_eq!(t.get(1)?, Some("one"));
    /// assert_eq!(t.get(2)?, None);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<V::Decoded<'_>>>
    where
        K: 'k,
    {
        let k = K::as_bytes(key.borrow());
        match self.tree.get(k.as_ref())? {
            Some(v) => V::from_bytes(v)
                .map(Some)
                .map_err(|e| decode_error(self.name, e)),
            None => Ok(None),
        }
    }

    /// Number of entries (O(1)).
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u32, ()> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// t.insert(1, ())?;
    /// assert_eq!(t.len()?, 1);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.tree.len()
    }

    /// True if the table has no entries.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u32, ()> = Table::new("t");
    /// let mut tx = db.begin_write()?;
    /// assert!(tx.open_table(&T)?.is_empty()?);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.tree.is_empty()
    }
}

impl<'t, K: Key, V: Value> WriteTable<'t, K, V> {
    /// Decode an entry read from the tree, reporting bytes of the wrong type as an error.
    #[allow(clippy::type_complexity)]
    fn decode<'a>(&self, k: &'a [u8], v: &'a [u8]) -> Result<(K::Decoded<'a>, V::Decoded<'a>)>
    where
        K: 'a,
        V: 'a,
    {
        let k = K::from_bytes(k).map_err(|e| decode_error(self.name, e))?;
        let v = V::from_bytes(v).map_err(|e| decode_error(self.name, e))?;
        Ok((k, v))
    }

    /// Entries with keys in `range`, in key order, including this transaction's writes;
    /// `.rev()` for descending. The range borrows the table, so the table cannot change while
    /// it lives: collect what to change first, or use [`retain`](WriteTable::retain) or
    /// [`remove_range`](WriteTable::remove_range).
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u32, &str> = Table::new("t");
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// for (k, v) in [(1, "a"), (2, "b"), (3, "c"), (4, "d")] {
    ///     t.insert(k, v)?;
    /// }
    /// let mid: Vec<(u32, &str)> = t.range(2..4)?.collect::<Result<_, _>>()?;
    /// assert_eq!(mid, [(2, "b"), (3, "c")]);
    /// let down: Vec<u32> = t.range(2..)?.rev().map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(down, [4, 3, 2]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn range<'a, 'k, KR>(
        &'a self,
        range: impl RangeBounds<KR>,
    ) -> Result<TableRange<'a, K, V, WriteRange<'a>>>
    where
        K: 'k,
        KR: Borrow<K::SelfType<'k>>,
    {
        let bounds = encode_bounds::<K, KR, _>(&range);
        let open_file = self.tree.range(as_slices(&bounds))?;
        Ok(TableRange::new(open_file, self.name))
    }

    /// Every entry, in key order, including this transaction's writes.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<&str, u8> = Table::new("t");
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// t.insert("b", 2)?;
    /// t.insert("a", 1)?;
    /// let all: Vec<(&str, u8)> = t.iter()?.collect::<Result<_, _>>()?;
    /// assert_eq!(all, [("a", 1), ("b", 2)]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn iter(&self) -> Result<TableRange<'_, K, V, WriteRange<'_>>> {
        Ok(TableRange::new(self.tree.iter()?, self.name))
    }

    /// Entries whose keys start with `prefix` (see [`ReadTable::range_prefix`]), including
    /// this transaction's writes.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<(&str, u32), ()> = Table::new("t");
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// for k in [("car", 2), ("car", 1), ("cart", 3)] {
    ///     t.insert(k, ())?;
    /// }
    /// let car: Vec<u32> = t.range_prefix("car")?.map(|e| e.map(|((_, n), ())| n)).collect::<Result<_, _>>()?;
    /// assert_eq!(car, [1, 2]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn range_prefix<'p>(
        &self,
        prefix: impl Borrow<<K::Prefix as Value>::SelfType<'p>>,
    ) -> Result<TableRange<'_, K, V, WriteRange<'_>>>
    where
        K: PrefixKey,
        K::Prefix: 'p,
    {
        let mut p = Vec::new();
        K::encode_prefix(prefix.borrow(), &mut p);
        let (start, end) = prefix_range(&p);
        let open_file = self.tree.range((start, end.as_ref().map(Vec::as_slice)))?;
        Ok(TableRange::new(open_file, self.name))
    }

    /// The entry with the smallest key, including this transaction's writes.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<i64, &str> = Table::new("t");
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// assert_eq!(t.first()?, None);
    /// t.insert(5, "five")?;
    /// t.insert(-5, "minus five")?;
    /// assert_eq!(t.first()?, Some((-5, "minus five")));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn first(&self) -> Result<Option<(K::Decoded<'_>, V::Decoded<'_>)>> {
        self.iter()?.next().transpose()
    }

    /// The entry with the largest key, including this transaction's writes.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<i64, &str> = Table::new("t");
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// t.insert(5, "five")?;
    /// t.insert(-5, "minus five")?;
    /// assert_eq!(t.last()?, Some((5, "five")));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn last(&self) -> Result<Option<(K::Decoded<'_>, V::Decoded<'_>)>> {
        self.iter()?.next_back().transpose()
    }

    /// Remove the entry with the smallest key and return it, as an [`OwnedEntry`] that
    /// decodes on demand. An entry whose bytes are not of the table's types is an error and
    /// stays in the table.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const QUEUE: Table<u64, &str> = Table::new("queue");
    /// let tx = db.begin_write()?;
    /// let mut q = tx.open_table(&QUEUE)?;
    /// q.insert(2, "second")?;
    /// q.insert(1, "first")?;
    /// let e = q.pop_first()?.unwrap();
    /// assert_eq!((e.key(), e.value()), (1, "first"));
    /// assert_eq!(q.len()?, 1);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn pop_first(&mut self) -> Result<Option<OwnedEntry<K, V>>> {
        self.pop(false)
    }

    /// Remove the entry with the largest key and return it; see
    /// [`pop_first`](WriteTable::pop_first).
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const STACK: Table<u64, String> = Table::new("stack");
    /// let tx = db.begin_write()?;
    /// let mut s = tx.open_table(&STACK)?;
    /// s.insert(1, "bottom")?;
    /// s.insert(2, "top")?;
    /// let e = s.pop_last()?.unwrap();
    /// assert_eq!(e.key(), 2);
    /// assert_eq!(e.value(), "top");
    /// assert!(s.pop_last()?.is_some());
    /// assert!(s.pop_last()?.is_none());
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn pop_last(&mut self) -> Result<Option<OwnedEntry<K, V>>> {
        self.pop(true)
    }

    fn pop(&mut self, last: bool) -> Result<Option<OwnedEntry<K, V>>> {
        let entry = if last {
            self.tree.last()?
        } else {
            self.tree.first()?
        };
        let Some((k, v)) = entry else {
            return Ok(None);
        };
        // Checked before removing, so that an entry of another type is not lost, and so
        // that `OwnedEntry`'s accessors decode without failing.
        self.decode(k, v)?;
        let (k, v) = (k.to_vec(), v.to_vec());
        self.tree.remove(&k)?;
        Ok(Some(OwnedEntry {
            key: k,
            value: v,
            types: PhantomData,
        }))
    }

    /// Keep only the entries for which `keep(key, value)` is true; returns how many were
    /// removed. Sees this transaction's writes.
    ///
    /// An entry whose bytes are not of the table's types stops it with an error; the entries
    /// removed before it stay removed (roll back to a [`Savepoint`](crate::Savepoint), or
    /// abort, to undo them).
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const T: Table<u32, &str> = Table::new("t");
    /// let tx = db.begin_write()?;
    /// let mut t = tx.open_table(&T)?;
    /// for (k, v) in [(1, "keep"), (2, "drop"), (3, "keep"), (4, "drop")] {
    ///     t.insert(k, v)?;
    /// }
    /// assert_eq!(t.retain(|_, v| v == "keep")?, 2);
    /// let keys: Vec<u32> = t.iter()?.map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [1, 3]);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn retain<F>(&mut self, mut keep: F) -> Result<u64>
    where
        F: for<'a> FnMut(K::Decoded<'a>, V::Decoded<'a>) -> bool,
    {
        let name = self.name;
        let mut removed = 0;
        let mut c = self.tree.cursor();
        loop {
            let drop_it = match c.next()? {
                None => return Ok(removed),
                Some((k, v)) => {
                    let k = K::from_bytes(k).map_err(|e| decode_error(name, e))?;
                    let v = V::from_bytes(v).map_err(|e| decode_error(name, e))?;
                    !keep(k, v)
                }
            };
            if drop_it && c.delete_current()? {
                removed += 1;
            }
        }
    }

    /// Remove every entry with a key in `range`; returns how many. Whole subtrees inside the
    /// range are freed without visiting their leaves, so a large range costs about as much as
    /// its two ends.
    ///
    /// ```
    /// # use larch_engine::{Db, Options, Table};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// const LOG: Table<u64, &str> = Table::new("log");
    /// let tx = db.begin_write()?;
    /// let mut log = tx.open_table(&LOG)?;
    /// for seq in 0..1000u64 {
    ///     log.insert(seq, "event")?;
    /// }
    /// assert_eq!(log.remove_range(..900)?, 900); // drop all but the last 100
    /// assert_eq!(log.first()?, Some((900, "event")));
    /// assert_eq!(log.remove_range(950..=950)?, 1);
    /// assert_eq!(log.len()?, 99);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn remove_range<'k, KR>(&mut self, range: impl RangeBounds<KR>) -> Result<u64>
    where
        K: 'k,
        KR: Borrow<K::SelfType<'k>>,
    {
        let bounds = encode_bounds::<K, KR, _>(&range);
        self.tree.remove_range(as_slices(&bounds))
    }
}

/// An entry removed from a table ([`WriteTable::pop_first`], [`pop_last`](WriteTable::pop_last)):
/// it owns the entry's bytes and decodes them when asked, borrowing itself for
/// `&str`/`&[u8]`.
///
/// ```
/// # use larch_engine::{Db, OwnedEntry, Options, Table};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
/// const T: Table<(&str, u8), &[u8]> = Table::new("t");
/// let tx = db.begin_write()?;
/// let mut t = tx.open_table(&T)?;
/// t.insert(("k", 1), &b"v"[..])?;
/// let e: OwnedEntry<(&str, u8), &[u8]> = t.pop_first()?.unwrap();
/// drop(t); // the entry outlives the table
/// let (name, n) = e.key();
/// assert_eq!((&*name, n, e.value()), ("k", 1, &b"v"[..]));
/// assert_eq!(e.value_bytes(), b"v");
/// # Ok::<(), larch_engine::Error>(())
/// ```
pub struct OwnedEntry<K: Value, V: Value> {
    key: Vec<u8>,
    value: Vec<u8>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Value, V: Value> OwnedEntry<K, V> {
    /// The key.
    pub fn key(&self) -> K::Decoded<'_> {
        K::from_bytes(&self.key).expect("decoded when the entry was removed")
    }

    /// The value.
    pub fn value(&self) -> V::Decoded<'_> {
        V::from_bytes(&self.value).expect("decoded when the entry was removed")
    }

    /// The key's bytes, as the tree stored them.
    pub fn key_bytes(&self) -> &[u8] {
        &self.key
    }

    /// The value's bytes, as the tree stored them.
    pub fn value_bytes(&self) -> &[u8] {
        &self.value
    }

    /// The key's and the value's bytes.
    pub fn into_bytes(self) -> (Vec<u8>, Vec<u8>) {
        (self.key, self.value)
    }
}

impl<K: Value, V: Value> fmt::Debug for OwnedEntry<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedEntry")
            .field("key", &self.key)
            .field("value", &self.value)
            .finish()
    }
}

/// Iterator over a typed table's entries, in key order, from either end
/// ([`ReadTable::range`], [`iter`](ReadTable::iter), [`range_prefix`](ReadTable::range_prefix)).
///
/// Items are `Result`s: a damaged page, or bytes that are not of the table's types, end the
/// iteration with an error.
///
/// ```
/// # use larch_engine::{Db, Options, Table, TableRange};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Db::open(dir.path().join("t.larch"), Options::default())?;
/// const T: Table<u8, u8> = Table::new("t");
/// # let mut tx = db.begin_write()?;
/// # { let mut t = tx.open_table(&T)?; for k in 0..5 { t.insert(k, k * 10)?; } }
/// # tx.commit()?;
/// let rx = db.begin_read()?;
/// let t = rx.open_table(&T)?;
/// let mut r: TableRange<u8, u8> = t.iter()?;
/// assert_eq!(r.next().transpose()?, Some((0, 0)));
/// assert_eq!(r.next_back().transpose()?, Some((4, 40)));
/// assert_eq!(r.count(), 3);
/// # Ok::<(), larch_engine::Error>(())
/// ```
///
/// `I` is the byte iterator underneath: a read snapshot's [`Range`] unless named otherwise.
pub struct TableRange<'r, K: Key, V: Value, I = Range<'r>> {
    open_file: I,
    name: &'static str,
    /// The items borrow for `'r` from what `inner` reads.
    items: PhantomData<&'r ()>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<'r, K: Key + 'r, V: Value + 'r, I> TableRange<'r, K, V, I> {
    pub(super) fn new(open_file: I, name: &'static str) -> Self {
        TableRange {
            open_file,
            name,
            items: PhantomData,
            types: PhantomData,
        }
    }

    #[allow(clippy::type_complexity)]
    fn decode(
        &self,
        entry: Option<Result<(&'r [u8], &'r [u8])>>,
    ) -> Option<Result<(K::Decoded<'r>, V::Decoded<'r>)>> {
        let (k, v) = match entry? {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e)),
        };
        let decoded = K::from_bytes(k)
            .and_then(|k| Ok((k, V::from_bytes(v)?)))
            .map_err(|e| decode_error(self.name, e));
        Some(decoded)
    }
}

impl<K: Key, V: Value, I: fmt::Debug> fmt::Debug for TableRange<'_, K, V, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableRange")
            .field("name", &self.name)
            .field("open_file", &self.open_file)
            .finish()
    }
}

impl<'r, K, V, I> Iterator for TableRange<'r, K, V, I>
where
    K: Key + 'r,
    V: Value + 'r,
    I: Iterator<Item = Result<(&'r [u8], &'r [u8])>>,
{
    type Item = Result<(K::Decoded<'r>, V::Decoded<'r>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.open_file.next();
        self.decode(entry)
    }
}

impl<'r, K, V, I> DoubleEndedIterator for TableRange<'r, K, V, I>
where
    K: Key + 'r,
    V: Value + 'r,
    I: DoubleEndedIterator<Item = Result<(&'r [u8], &'r [u8])>>,
{
    fn next_back(&mut self) -> Option<Self::Item> {
        let entry = self.open_file.next_back();
        self.decode(entry)
    }
}
