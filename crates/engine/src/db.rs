//! The database handle: open, snapshots and the reader table, the writer lock, sync, close.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use larch_freelist::FreeSpace;
use larch_pager::{Map, Meta, OpenedMetas, Pager, PagerOptions, Storage};

use crate::durability::DurableState;
use crate::error::Result;
use crate::options::Options;
use crate::read::ReadTx;
use crate::readers::{ReadSnap, ReaderTable, SnapshotCache};
use crate::view::View;
use crate::write::WriteTx;
use crate::TxId;

/// How long a group-commit follower waits for a later commit's sync before it syncs itself.
/// Long enough for the writer behind it to commit and sync (a few fdatasyncs), short enough
/// that a writer that holds its transaction open costs the follower little.
const GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Writes and syncs a handle has made.
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

/// One committed state: a meta and the map to read it through.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub meta: Meta,
    pub map: Arc<Map>,
}

/// State only the writer touches (under the writer lock).
#[derive(Debug)]
pub(crate) struct WriterState {
    pub free: FreeSpace,
    /// Freed pages only readers can reach (written after the last durable commit).
    pub reader_pinned: crate::unpinned::ReaderPinned,
    /// What the compaction threshold is compared with (autocompact.rs).
    pub trigger: crate::autocompact::Trigger,
}

/// One open file: its pager, snapshots and writer state. Background compaction replaces the
/// whole `OpenFile` of a handle with one for the compacted file; readers keep the old one.
#[derive(Debug)]
pub(crate) struct OpenFile {
    pub pager: Pager,
    pub opts: Options,
    /// The newest snapshot and the readers of older ones (readers.rs).
    pub readers: ReaderTable,
    pub writer: Arc<Mutex<WriterState>>,
    /// Which commits are written and durable. Lock order: `writer`, then this.
    pub durability: Mutex<DurableState>,
    pub opened: OpenedMetas,
    /// Replaced by a compacted file: writers that waited for its lock must start over.
    pub retired: AtomicBool,
    /// Writers waiting for the writer lock (a Sync commit with company joins a group).
    pub waiting_writers: AtomicUsize,
    /// The writer's durable txid, for group-commit followers (who do not hold the lock).
    pub durable_txid: std::sync::atomic::AtomicU64,
    /// Followers wait here for a durable txid that covers their commit.
    pub group: Mutex<()>,
    pub group_synced: parking_lot::Condvar,
}

/// What every clone of a `Db` shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub path: PathBuf,
    pub opts: Options,
    pub current: RwLock<Arc<OpenFile>>,
    /// Live `Db` clones; the last one to drop stops a running compaction.
    pub handles: AtomicUsize,
    pub compaction: crate::autocompact::Compaction,
    /// Directory operations and new files of compaction (the real file system but in tests).
    pub fs: Arc<dyn crate::fs::CompactionFs>,
    /// Each shard's last snapshot of `current`, so reads of an unchanged file share no lock.
    pub snapshots: SnapshotCache,
}

impl Shared {
    /// The current file.
    pub(crate) fn current_file(&self) -> Arc<OpenFile> {
        self.current.read().clone()
    }
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
    pub(crate) handle: Arc<Shared>,
}

impl Clone for Db {
    fn clone(&self) -> Self {
        self.handle.handles.fetch_add(1, Ordering::AcqRel);
        Db {
            handle: self.handle.clone(),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if self.handle.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last handle: a background compaction must not outlive it (it would keep the
            // file locked after the user closed it).
            self.handle.compaction.stop();
        }
    }
}

impl Db {
    /// Open `path`, creating it if missing (unless `Options::create(false)`). Fails with a
    /// clear error if another handle has it open, or it is not a valid larch file.
    ///
    /// The database is the file, not the name: symlinks in `path` are resolved at open (a
    /// missing file is created in the resolved directory; a dangling symlink is refused), and
    /// [`Db::path`] is the resolved path. Through a symlink or any hard link, the lock keeps a
    /// second writer out (docs/format.md, "Locking").
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

    fn wrap(inner: OpenFile) -> Db {
        Self::wrap_with_fs(inner, Arc::new(crate::fs::RealFs))
    }

    fn wrap_with_fs(inner: OpenFile, fs: Arc<dyn crate::fs::CompactionFs>) -> Db {
        Db {
            handle: Arc::new(Shared {
                path: inner.pager.path().to_path_buf(),
                opts: inner.opts,
                current: RwLock::new(Arc::new(inner)),
                handles: AtomicUsize::new(1),
                compaction: Default::default(),
                fs,
                snapshots: Default::default(),
            }),
        }
    }

    /// The current file's state.
    pub(crate) fn current_file(&self) -> Arc<OpenFile> {
        self.handle.current_file()
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
        let inner = OpenFile {
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
        Ok(inner)
    }

    /// Begin a read transaction: a snapshot of the newest commit. Any number, on any thread;
    /// readers never block the writer or each other.
    pub fn begin_read(&self) -> Result<ReadTx> {
        let (snap, shard) = self.handle.snapshots.begin(&self.handle)?;
        Ok(ReadTx::new(snap, shard))
    }

    /// Begin the write transaction, waiting for the current one to end. (Do not call this, or
    /// [`Db::sync`], on a thread that already holds a write transaction: it would wait forever.)
    pub fn begin_write(&self) -> Result<WriteTx<'_>> {
        WriteTx::begin(&self.handle)
    }

    /// Make every commit so far durable (Async and NoMetaSync ones included). Does not wait
    /// for a write transaction in progress (it may be called while one is open).
    pub fn sync(&self) -> Result<()> {
        loop {
            let inner = self.current_file();
            inner.pager.check_writable()?;
            let writer = inner.writer.try_lock();
            let mut st = inner.durability.lock();
            if inner.retired.load(Ordering::Acquire) {
                continue;
            }
            st.sync_all(&inner)?;
            if writer.is_some() {
                inner.trim_to_durable(&st);
            }
            return Ok(());
        }
    }

    /// What this handle has written and synced so far (for benchmarks: write calls are
    /// separate runs of pages, i.e. seeks).
    pub fn io_stats(&self) -> IoStats {
        use std::sync::atomic::Ordering::Relaxed;
        let inner = self.current_file();
        let c = inner.pager.counters();
        let commits = inner.durability.lock().committed.txid;
        IoStats {
            write_calls: c.write_calls.load(Relaxed),
            bytes_written: c.bytes_written.load(Relaxed),
            syncs: c.syncs.load(Relaxed),
            commits,
        }
    }

    /// The file's path, resolved at open (absolute, no symlinks): where background compaction
    /// puts the compacted file. Not necessarily the path `open` was given.
    pub fn path(&self) -> &Path {
        &self.handle.path
    }

    /// The file's page size.
    pub fn page_size(&self) -> usize {
        self.current_file().pager.page_size()
    }

    /// The options it was opened with.
    pub fn options(&self) -> Options {
        self.handle.opts
    }
}

impl WriterState {
    /// Pages below the high-water mark no tree of the newest state reaches.
    pub(crate) fn unreachable_pages(&self) -> u64 {
        self.free.free_pages() + self.free.pending_pages() + self.reader_pinned.len()
    }
}

impl OpenFile {
    /// A snapshot of this file's newest commit, registered in its reader table.
    pub(crate) fn begin_read(self: &Arc<Self>) -> Result<ReadTx> {
        if self.pager.is_poisoned() {
            // After a failed sync the file's contents are unknown: refuse to read from it.
            self.pager.check_writable()?;
        }
        let shard = crate::readers::shard_index();
        let snap = self.readers.begin(shard);
        Ok(ReadTx::new(
            Arc::new(ReadSnap::new(self.clone(), &snap)),
            shard,
        ))
    }

    /// The newest snapshot and the oldest txid any reader holds. The snapshot is read first:
    /// the scan then sees every reader that could hold anything older (readers.rs).
    pub(crate) fn snapshot_and_oldest_reader(&self) -> (Arc<Snapshot>, Option<TxId>) {
        let current = self.readers.current();
        let (oldest, _) = self.readers.oldest();
        (current, oldest)
    }

    /// Make `meta` the snapshot new readers get.
    pub(crate) fn publish(&self, meta: Meta) {
        let map = self.pager.map();
        self.readers.publish(Snapshot { meta, map });
    }

    /// Truncate a file that is much longer than the durable high-water mark (pages past it
    /// are free: no reader and no fallback meta reaches them), when the newest commit is the
    /// durable one. Keeps one growth step of slack so a growing file does not shrink and
    /// regrow. Only with the writer lock held: a write transaction in progress may have
    /// written past the mark. A failure only leaves the file long.
    pub(crate) fn trim_to_durable(&self, st: &DurableState) {
        let Some(hwm) = st.durable_high_water() else {
            return;
        };
        let ps = self.pager.page_size() as u64;
        let want = hwm * ps;
        let step = (want / 8).clamp(256 << 10, 256 << 20);
        if self.pager.file_len() > want + 2 * step {
            let _ = self.pager.truncate((want + step).div_ceil(ps));
        }
    }

    /// The writer made `txid` durable: wake group-commit followers it covers.
    pub(crate) fn note_durable(&self, txid: TxId) {
        if self.durable_txid.load(Ordering::Acquire) >= txid {
            return;
        }
        self.durable_txid.store(txid, Ordering::Release);
        let _g = self.group.lock();
        self.group_synced.notify_all();
    }

    /// A group-commit follower: return once commit `txid` is durable. A later writer's sync
    /// normally covers it; if none is coming (nobody holds or waits for the writer lock), or
    /// none has come within [`GROUP_WAIT`], make it durable here. That takes only the
    /// durability lock, never the writer lock, so the return never depends on a later
    /// transaction ending (docs/format.md, "Group commit"). An error if a sync failed
    /// meanwhile (the handle is poisoned).
    pub(crate) fn wait_durable(&self, txid: TxId) -> Result<()> {
        let deadline = std::time::Instant::now() + GROUP_WAIT;
        loop {
            if self.durable_txid.load(Ordering::Acquire) >= txid {
                return Ok(());
            }
            self.pager.check_writable()?;
            if self.retired.load(Ordering::Acquire) {
                // Background compaction copied every commit of this file into its successor
                // (the last round under the writer lock) and synced it before the switch.
                return Ok(());
            }
            let writer = if self.waiting_writers.load(Ordering::Acquire) == 0 {
                self.writer.try_lock()
            } else {
                None
            };
            if writer.is_some() || std::time::Instant::now() >= deadline {
                let mut st = self.durability.lock();
                if self.retired.load(Ordering::Acquire) {
                    return Ok(());
                }
                if st.durable < txid {
                    st.sync_all(self)?;
                }
                if writer.is_some() {
                    self.trim_to_durable(&st);
                }
                return Ok(());
            }
            drop(writer);
            let mut g = self.group.lock();
            if self.durable_txid.load(Ordering::Acquire) < txid {
                self.group_synced
                    .wait_for(&mut g, std::time::Duration::from_micros(200));
            }
        }
    }

    /// End a reader of `txid` registered in `shard`.
    pub(crate) fn end_read(&self, shard: usize, txid: TxId) {
        self.readers.end(shard, txid);
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        // Close makes Async commits durable; errors have nowhere to go (call Db::sync to see them).
        let retired = self.retired.load(Ordering::Acquire);
        if !self.pager.read_only() && !self.pager.is_poisoned() && !retired {
            let _w = self.writer.lock();
            let mut st = self.durability.lock();
            if st.sync_all(self).is_ok() {
                self.trim_to_durable(&st);
                // A clean close: the newest commit is durable; say so in the older meta, so a
                // later mismatch of its pages reads as damage, not a torn commit.
                let _ = self.pager.mark_closed_at(st.committed.txid);
            }
        }
    }
}
