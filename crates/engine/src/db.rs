//! The database handle: open, snapshots and the reader table, the writer lock, sync, close.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use larch_freelist::FreeSpace;
use larch_pager::{OpenedMetas, Pager, PagerOptions, Storage};

use crate::durability::DurableState;
use crate::error::Result;
use crate::file::{OpenFile, Shared, Snapshot, WriterState};
use crate::options::Options;
use crate::read::ReadTx;
use crate::readers::ReaderTable;
use crate::view::View;
use crate::write::WriteTx;

/// Writes and syncs a handle has made.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
/// let tx = db.begin_write()?;
/// tx.open_tree("t")?.insert(b"k", b"v")?;
/// tx.commit()?;
/// let io = db.io_stats();
/// assert_eq!(io.commits, 1);
/// assert!(io.write_calls >= 1 && io.syncs >= 1);
/// # Ok::<(), larch_engine::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Calls to the storage's write (one per contiguous run of pages, plus meta writes).
    pub write_calls: u64,
    /// Bytes handed to the storage's write.
    pub bytes_written: u64,
    /// fdatasync/msync calls.
    pub syncs: u64,
    /// Txid of the newest commit (commits made, counting those of earlier handles).
    pub commits: u64,
}

/// An open database file. `Send + Sync`: share it between threads by reference or `Arc`.
///
/// ```
/// use larch_engine::{Db, Options};
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path().join("example.larch"), Options::default())?;
/// let mut tx = db.begin_write()?;
/// tx.open_tree("users")?.insert(b"alice", b"1")?;
/// tx.commit()?;
/// let rx = db.begin_read()?;
/// assert_eq!(rx.open_tree("users")?.get(b"alice")?, Some(&b"1"[..]));
/// # Ok::<(), larch_engine::Error>(())
/// ```
#[derive(Debug)]
pub struct Db {
    pub(crate) shared: Arc<Shared>,
}

impl Clone for Db {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::AcqRel);
        Db {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last handle: a background compaction must not outlive it (it would keep the
            // file locked after the user closed it).
            self.shared.compaction.stop();
        }
    }
}

impl Db {
    /// Open `path`, creating it if missing (unless `Options::create(false)`); an empty (0-byte)
    /// file becomes a new database too. Fails with [`crate::Error::AlreadyOpen`] if another
    /// handle has it open, and [`crate::Error::NotADatabase`] if it is not a larch file.
    ///
    /// The database is the file, not the name: symlinks in `path` are resolved at open (a
    /// missing file is created in the resolved directory; a dangling symlink is refused), and
    /// [`Db::path`] is the resolved path. Through a symlink or any hard link, the lock keeps a
    /// second writer out (docs/format.md, "Locking").
    ///
    /// ```
    /// use larch_engine::{Db, Error, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("t.larch");
    /// std::fs::File::create(&path).unwrap(); // an empty file becomes a new database
    /// let db = Db::open(&path, Options::default())?;
    /// assert!(matches!(Db::open(&path, Options::default()), Err(Error::AlreadyOpen { .. })));
    /// drop(db);
    /// let missing = dir.path().join("missing.larch");
    /// assert!(Db::open(&missing, Options::default().create(false)).is_err());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let path = path.as_ref();
        opts.validate()?;
        let popts = PagerOptions {
            page_size: opts.page_size,
            write_mode: opts.write_mode,
            advice: opts.advice,
            read_only: opts.read_only,
            create: opts.create,
            fall_back_on_damage: opts.fall_back_on_damage,
        };
        let (pager, opened) = Pager::open(path, popts)?;
        Ok(Self::wrap(Self::from_pager(pager, opened, opts)?))
    }

    fn wrap(open_file: OpenFile) -> Db {
        Self::wrap_with_fs(open_file, Arc::new(crate::fs::RealFs))
    }

    fn wrap_with_fs(open_file: OpenFile, fs: Arc<dyn crate::fs::CompactionFs>) -> Db {
        Db {
            shared: Arc::new(Shared {
                path: open_file.pager.path().to_path_buf(),
                opts: open_file.opts,
                current: RwLock::new(Arc::new(open_file)),
                handles: AtomicUsize::new(1),
                compaction: Default::default(),
                fs,
                snapshots: Default::default(),
            }),
        }
    }

    /// The current file's state.
    pub(crate) fn current_file(&self) -> Arc<OpenFile> {
        self.shared.current_file()
    }

    /// Open an existing database whose writes, syncs and resizes go through `storage`
    /// (reads still come from a map of `storage.file()`). Tests use this to record every
    /// operation and simulate power cuts; `Options::write_mode` is the storage's business.
    /// A test hook: only with the feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    pub fn open_with_storage(
        path: impl AsRef<Path>,
        storage: Box<dyn Storage>,
        opts: Options,
    ) -> Result<Db> {
        let path = larch_pager::resolve_path(path.as_ref())?;
        Self::open_storage_at(&path, storage, opts, Arc::new(crate::fs::RealFs))
    }

    /// [`Db::open_with_storage`], with compaction's new files and directory operations going
    /// through `fs` too (the power-cut simulation of compaction records them). A test hook:
    /// only with the feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    pub fn open_with_storage_and_fs(
        path: impl AsRef<Path>,
        storage: Box<dyn Storage>,
        opts: Options,
        fs: Arc<dyn crate::fs::CompactionFs>,
    ) -> Result<Db> {
        let path = larch_pager::resolve_path(path.as_ref())?;
        Self::open_storage_at(&path, storage, opts, fs)
    }

    /// Open `storage` as the database at `path`, taken as it is (already resolved).
    pub(crate) fn open_storage_at(
        path: &Path,
        storage: Box<dyn Storage>,
        opts: Options,
        fs: Arc<dyn crate::fs::CompactionFs>,
    ) -> Result<Db> {
        opts.validate()?;
        let popts = PagerOptions {
            page_size: opts.page_size,
            write_mode: opts.write_mode,
            advice: opts.advice,
            read_only: opts.read_only,
            create: false,
            fall_back_on_damage: opts.fall_back_on_damage,
        };
        let (pager, opened) = Pager::open_storage(path, storage, popts)?;
        Ok(Self::wrap_with_fs(
            Self::from_pager(pager, opened, opts)?,
            fs,
        ))
    }

    pub(crate) fn from_pager(pager: Pager, opened: OpenedMetas, opts: Options) -> Result<OpenFile> {
        let meta = opened.current;
        let map = pager.map();
        let mut free = FreeSpace::new(opts.policy);
        if !opts.read_only {
            crate::freemap::load(
                &View::new(&map, &meta, opts.verify_checksums),
                &meta,
                &mut free,
            )?;
        }
        let open_file = OpenFile {
            readers: ReaderTable::new(Snapshot { meta, map }),
            writer: Arc::new(Mutex::new(WriterState {
                free,
                reader_pinned: Default::default(),
                trigger: Default::default(),
            })),
            durability: Mutex::new(DurableState::new(meta)),
            pager,
            opts,
            opened,
            retired: AtomicBool::new(false),
            waiting_writers: AtomicUsize::new(0),
            durable_txid: std::sync::atomic::AtomicU64::new(meta.txid),
            group: Mutex::new(()),
            group_synced: parking_lot::Condvar::new(),
        };
        Ok(open_file)
    }

    /// Begin a read transaction: a snapshot of the newest commit. Any number, on any thread;
    /// readers never block the writer or each other.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"old")?;
    /// tx.commit()?;
    /// let before = db.begin_read()?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"new")?;
    /// tx.commit()?;
    /// // The snapshot still sees the state it began with.
    /// assert_eq!(before.open_tree("t")?.get(b"k")?, Some(&b"old"[..]));
    /// assert_eq!(db.begin_read()?.open_tree("t")?.get(b"k")?, Some(&b"new"[..]));
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn begin_read(&self) -> Result<ReadTx> {
        let (snap, shard) = self.shared.snapshots.begin(&self.shared)?;
        Ok(ReadTx::new(snap, shard))
    }

    /// Begin the write transaction, waiting for the current one to end. (Do not call this, or
    /// [`Db::sync`], on a thread that already holds a write transaction: it would wait forever.)
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// drop(tx); // not committed: aborted
    /// assert!(db.begin_read()?.open_tree("t").is_err());
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn begin_write(&self) -> Result<WriteTx<'_>> {
        WriteTx::begin(&self.shared)
    }

    /// Make every commit so far durable (Async and NoMetaSync ones included). Does not wait
    /// for a write transaction in progress (it may be called while one is open).
    ///
    /// ```
    /// use larch_engine::{Db, Durability, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path().join("t.larch"), Options::default().durability(Durability::Async))?;
    /// for i in 0..10u8 {
    ///     let tx = db.begin_write()?;
    ///     tx.open_tree("t")?.insert(&[i], b"v")?; // visible at once, durable later
    ///     tx.commit()?;
    /// }
    /// db.sync()?; // all ten survive power loss from here on
    /// assert_eq!(db.stats()?.durable_txid, 10);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        loop {
            let open_file = self.current_file();
            open_file.pager.check_writable()?;
            let writer = open_file.writer.try_lock();
            let mut st = open_file.durability.lock();
            if open_file.retired.load(Ordering::Acquire) {
                continue;
            }
            st.sync_all(&open_file)?;
            if writer.is_some() {
                open_file.trim_to_durable(&st);
            }
            return Ok(());
        }
    }

    /// What this handle has written and synced so far (for benchmarks: write calls are
    /// separate runs of pages, i.e. seeks).
    /// See [`IoStats`] for an example.
    pub fn io_stats(&self) -> IoStats {
        use std::sync::atomic::Ordering::Relaxed;
        let open_file = self.current_file();
        let c = open_file.pager.counters();
        let commits = open_file.durability.lock().committed.txid;
        IoStats {
            write_calls: c.write_calls.load(Relaxed),
            bytes_written: c.bytes_written.load(Relaxed),
            syncs: c.syncs.load(Relaxed),
            commits,
        }
    }

    /// The file's path, resolved at open (absolute, no symlinks): where background compaction
    /// puts the compacted file. Not necessarily the path `open` was given.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// assert!(db.path().is_absolute());
    /// assert_eq!(db.path().file_name().unwrap(), "t.larch");
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The file's page size.
    ///
    /// ```
    /// use larch_engine::{Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("t.larch");
    /// drop(Db::open(&path, Options::default().page_size(16384))?);
    /// // An existing file keeps its page size, whatever the options say.
    /// assert_eq!(Db::open(&path, Options::default())?.page_size(), 16384);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn page_size(&self) -> usize {
        self.current_file().pager.page_size()
    }

    /// The options it was opened with.
    ///
    /// ```
    /// use larch_engine::{Db, Durability, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path().join("t.larch"), Options::default().durability(Durability::Async))?;
    /// assert_eq!(db.options().get_durability(), Durability::Async);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn options(&self) -> Options {
        self.shared.opts
    }
}
