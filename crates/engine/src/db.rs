//! The database handle: open, snapshots and the reader table, the writer lock, sync, close.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use larch_freelist::FreeSpace;
use larch_pager::{FileLock, LockFile, LockFileError, OpenedMetas, Pager, PagerOptions, Storage};

use crate::durability::DurableState;
use crate::error::Result;
use crate::file::{OpenFile, Shared, Snapshot, WriterState};
use crate::options::Options;
use crate::process::{InodeClaim, ProcessLock};
use crate::read::ReadTx;
use crate::readers::ReaderTable;
use crate::redistribute::LeafOverflows;
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
    /// fdatasyncs started on another thread ahead of a durable point that
    /// [`Options::max_unsynced_bytes`] forces, so it finds less to write.
    pub background_flushes: u64,
    /// Metas written durable by themselves (`RWF_DSYNC`): durable points that
    /// [`Options::max_unsynced_bytes`] started, finished in the background.
    pub durable_meta_writes: u64,
    /// Async commits at the [`Options::max_unsynced_bytes`] bound that waited for the
    /// fdatasync of a durable point in the background and then wrote the point's meta
    /// (unless a sync had overtaken the point meanwhile), instead of making themselves
    /// durable.
    pub point_waits: u64,
    /// Leaves left full behind keys arriving in order (a sorted append,
    /// [`crate::WriteTree::append`], or inserts in key order) written before their
    /// transaction's commit, 64 at a time, so that a long load keeps few finished leaves in
    /// memory (whether their transaction committed or not).
    pub spilled_pages: u64,
    /// Txid of the newest commit (commits made, counting those of earlier handles).
    pub commits: u64,
}

impl IoStats {
    /// What happened between `before` (an earlier [`Db::io_stats`] of the same handle) and
    /// this one.
    pub fn since(&self, before: &IoStats) -> IoStats {
        IoStats {
            write_calls: self.write_calls - before.write_calls,
            bytes_written: self.bytes_written - before.bytes_written,
            syncs: self.syncs - before.syncs,
            background_flushes: self.background_flushes - before.background_flushes,
            durable_meta_writes: self.durable_meta_writes - before.durable_meta_writes,
            point_waits: self.point_waits - before.point_waits,
            spilled_pages: self.spilled_pages - before.spilled_pages,
            commits: self.commits - before.commits,
        }
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
            // The last handle: neither the timer nor a background compaction may outlive it
            // (they would keep the file locked after the user closed it). A running
            // compaction is finished, not dropped: its copy, the longest part, cannot be
            // interrupted, and a process that closes before its compaction ends (one that
            // opens, writes a little and closes) would otherwise never compact the file
            // (docs/format.md, "By threshold").
            self.shared.age_timer.stop();
            self.shared.compaction.timer.stop();
            self.shared.compaction.join();
        }
    }
}

/// [`Db::sync`] for every handle of `shared` (the handle's own calls and its age timer).
pub(crate) fn sync_shared(shared: &Arc<Shared>) -> Result<()> {
    loop {
        let open_file = shared.current_file();
        open_file.pager.check_writable()?;
        let writer = open_file.writer.try_lock();
        let mut st = open_file.durability.lock();
        if open_file.superseded.load(Ordering::Acquire) {
            // A switch renamed a compacted file over this one and is making it current:
            // the lock file names the new file's commits already, and this file may
            // neither publish nor take the writer lock (a sync here that published
            // this file's newest commit had the next writer rebuild from an older meta).
            drop((st, writer));
            std::thread::yield_now();
            continue;
        }
        if let Some(lock) = open_file.lock() {
            if !lock.held() {
                // Every commit of this process has its meta on disk (it keeps the writer
                // lock until then), and another process may be writing: no meta may be
                // written from here. Syncing the file makes them durable. The durability
                // lock is held across the sync: a writer thread of this process may take
                // the writer lock meanwhile, and a meta it wrote after the sync began
                // (NoMetaSync) must not be counted as synced (commit_meta waits for it).
                // Every meta on disk when the sync starts is durable when it ends.
                let on_disk = lock.file.committed_txid();
                open_file.pager.sync()?;
                if let Some(k) = on_disk {
                    lock.file.publish_durable(k);
                }
                st.synced_on_disk();
                open_file.note_durable(st.durable);
                drop(st);
                // Catching up with other processes costs a take of their writer lock and a
                // rebuild: only for the threshold.
                let threshold = shared.opts.compaction_threshold.is_some();
                if let Some(mut w) = writer.filter(|_| threshold) {
                    if open_file.writer_state_for_check(&mut w) {
                        crate::autocompact::check_quiet(shared, &open_file, &mut w);
                    }
                    open_file.release_writer_if_on_disk();
                }
                return Ok(());
            }
        }
        if open_file.retired.load(Ordering::Acquire) {
            continue;
        }
        st.sync_all(&open_file)?;
        open_file.publish_on_disk(&st);
        if let Some(mut w) = writer {
            open_file.trim_to_durable(&st);
            drop(st);
            // The durable txid moved: a window ended for the compaction threshold.
            crate::autocompact::check_quiet(shared, &open_file, &mut w);
            open_file.release_writer_if_on_disk();
        }
        return Ok(());
    }
}

/// The handle's timer for [`Options::max_unsynced_age`](crate::Options::max_unsynced_age):
/// while the handle is open, every quarter of the age (but not more often than once a
/// millisecond), make the newest commit durable when the oldest commit not durable is that
/// old: after a burst of Async commits with none after it, no commit comes to do it. Also
/// when a background switch's directory fsync failed and waits for the next sync: the
/// commits the switch carried over are durable in the new file but not under its name, and
/// the new file's state, which starts durable, gives them no age. Errors are the next call's
/// (a failed sync poisons the handle).
pub(crate) fn start_age_timer(shared: &Arc<Shared>) {
    let Some(age) = shared.opts.max_unsynced_age else {
        return;
    };
    if shared.opts.read_only || !shared.opts.unsynced_age_timer {
        return;
    }
    let weak = Arc::downgrade(shared);
    let every = (age / 4).max(std::time::Duration::from_millis(1));
    let spawned = std::thread::Builder::new()
        .name("larch-age-timer".into())
        .spawn(move || loop {
            let Some(h) = weak.upgrade() else {
                return;
            };
            if h.age_timer.wait(every) {
                return;
            }
            let f = h.current_file();
            let stale = f
                .durability
                .lock()
                .unsynced_age(std::time::Instant::now())
                .is_some_and(|a| a >= age);
            if stale || f.pager.name_unsynced() {
                drop(f);
                let _ = sync_shared(&h);
            }
        });
    if let Ok(t) = spawned {
        *shared.age_timer.thread.lock() = Some(t);
    }
}

/// A read-write open makes the file's name durable before anything is built on it: a process
/// killed after renaming or linking a compacted file into place (the background switch,
/// `compact_to`) and before fsyncing the directory leaves a name that a power cut could undo,
/// and every commit this handle acknowledged as durable would go with it; so does a process
/// still attached whose switch could not fsync the directory (docs/format.md, "Compaction").
fn sync_name(fs: &dyn crate::fs::CompactionFs, path: &Path) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs.sync_dir(dir)
        .map_err(|e| crate::Error::io("fsync directory", dir, e))
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
        let mut popts = PagerOptions {
            page_size: opts.page_size,
            write_mode: opts.write_mode,
            advice: opts.advice,
            cache_folios: opts.cache_folios,
            read_only: opts.read_only,
            create: opts.create,
            fall_back_on_damage: opts.fall_back_on_damage,
            flock: FileLock::ByMode,
            live: false,
        };
        let resolved = larch_pager::resolve_path(path)?;
        if !resolved.exists() && (opts.read_only || !opts.create) {
            // Nothing to attach to: let the pager say what is missing. (Exclusive: should the
            // file appear meanwhile, a handle without the lock file must read alone.)
            popts.flock = FileLock::Exclusive;
            let (pager, opened) = Pager::open(&resolved, popts)?;
            return Ok(Self::wrap(Self::from_pager(pager, opened, opts, None)?));
        }
        // This process's own handles first: attaching a second time could wait forever for
        // the writer lock this process holds.
        let claim = match resolved.exists() {
            true => Some(InodeClaim::claim_path(&resolved, !opts.read_only)?),
            false => None,
        };
        // A file with several names (hard links) is opened without the lock file and alone,
        // as larch did before it had one: a process opening it through another name would
        // attach to that name's lock file and never see this one's readers and writer. The
        // exclusive flock keeps out every other handle, lock-file ones included (they hold it
        // shared), whichever handle came first.
        let linked = std::fs::metadata(&resolved).is_ok_and(|m| m.nlink() > 1);
        let lock = match (!linked).then(|| LockFile::open(&resolved, true)) {
            None => None,
            Some(Ok(l)) => Some(Arc::new(ProcessLock::new(l))),
            // A read-only opener that may not write the lock file (a read-only directory or
            // file system) reads alone: it keeps every other handle out by an exclusive flock.
            Some(Err(LockFileError::NotWritable { .. } | LockFileError::Missing { .. }))
                if opts.read_only =>
            {
                None
            }
            Some(Err(e)) => return Err(e.into()),
        };
        let Some(lock) = lock else {
            popts.flock = FileLock::Exclusive;
            let (pager, opened) = Pager::open(&resolved, popts)?;
            if !opts.read_only {
                sync_name(&crate::fs::RealFs, &resolved)?;
            }
            let open_file = Self::from_pager(pager, opened, opts, None)?;
            if let Some(c) = claim {
                let _ = open_file.inode.set(c);
            }
            return Ok(Self::wrap(open_file));
        };
        let resolved2 = resolved.clone();
        Self::open_attached(
            &resolved,
            opts,
            popts,
            lock,
            Some(claim),
            move |p| Ok(Pager::open(&resolved2, p)?),
            Arc::new(crate::fs::RealFs),
        )
    }

    /// Open through the lock file `lock`: `open_pager` opens the data file with the options
    /// given. `claim`: `Some` to keep the file open once per process (the claim made before
    /// attaching, if the file existed); `None` for a test handle that stands for another
    /// process.
    fn open_attached(
        resolved: &Path,
        opts: Options,
        mut popts: PagerOptions,
        lock: Arc<ProcessLock>,
        mut claim: Option<Option<InodeClaim>>,
        open_pager: impl FnOnce(PagerOptions) -> Result<(Pager, OpenedMetas)>,
        fs: Arc<dyn crate::fs::CompactionFs>,
    ) -> Result<Db> {
        popts.flock = FileLock::Shared;
        // A read-write open builds the writer's state, and the first open after every
        // process detached recovers the file (manifest checks, fsync): both under the writer
        // lock, so no other process commits meanwhile. A read-only open of a live file needs
        // no lock: its readers follow the reader protocol.
        let need_writer = !opts.read_only || lock.file.committed_txid().is_none();
        if need_writer {
            lock.file.acquire_writer(true)?;
        }
        popts.live = lock.file.committed_txid().is_some();
        let opened_file = (|| -> Result<OpenFile> {
            let (pager, opened) = open_pager(popts)?;
            if let Some(claim) = claim.as_mut() {
                match claim {
                    Some(c) if c.is_of(pager.file()) => {}
                    _ => {
                        // Created now, or renamed over since the stat: claim what was opened.
                        *claim = None;
                        *claim = Some(InodeClaim::claim_file(
                            pager.file(),
                            !opts.read_only,
                            resolved,
                        )?);
                    }
                }
            }
            if !opts.read_only {
                // Also while other processes are attached: one of them may have renamed a
                // compacted file into place and failed to fsync the directory (its own next
                // sync retries, but only its pager knows), and this handle's commits would
                // be acknowledged under a name a power cut could undo.
                sync_name(&*fs, resolved)?;
            }
            let meta = opened.current;
            if !opts.read_only
                && popts.live
                && lock.file.durable_txid().is_none_or(|d| d < meta.txid)
            {
                // The last writer left its newest commit unsynced (NoMetaSync): make it
                // durable before building on it as the fallback.
                pager.sync()?;
            }
            if !opts.read_only {
                // Published before the readers are scanned (the reader protocol): a reader
                // that registers an older snapshot after the scan sees it on its re-check.
                // (A writer killed before publishing its meta leaves the file newer than
                // the lock file.)
                lock.file.publish_committed(meta.txid);
                lock.file.publish_durable(meta.txid);
            }
            // Readers of other processes may hold older snapshots than the opened one.
            let _ = lock.file.clear_stale();
            let pinned_by = lock
                .file
                .oldest_reader()
                .is_some_and(|o| o < meta.txid)
                .then_some(meta.txid);
            Self::from_pager(pager, opened, opts, pinned_by)
        })();
        if need_writer {
            let _ = lock.file.release_writer();
        }
        let open_file = opened_file?;
        let _ = open_file.lock.set(lock);
        if let Some(Some(c)) = claim {
            let _ = open_file.inode.set(c);
        }
        Ok(Self::wrap_with_fs(open_file, fs))
    }

    /// Open the database at `path` as if from another process: attached to its lock file
    /// like [`Db::open`], but with writes, syncs and resizes going through the storage
    /// `storage` makes of the file (called once attached, as `Db::open` opens the file only
    /// then), and without the one-open-per-process rule. Two such handles in one test behave
    /// as two processes (their lock-file locks exclude each other), so the power-cut
    /// simulation can record both in one log. A test hook: only with the feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    pub fn open_with_storage_as_process(
        path: impl AsRef<Path>,
        storage: impl FnOnce(&Path) -> Box<dyn Storage>,
        opts: Options,
    ) -> Result<Db> {
        Self::open_with_storage_as_process_and_fs(path, storage, opts, Arc::new(crate::fs::RealFs))
    }

    /// [`Db::open_with_storage_as_process`], with compaction's new files and directory
    /// operations going through `fs`. A test hook: only with the feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    pub fn open_with_storage_as_process_and_fs(
        path: impl AsRef<Path>,
        storage: impl FnOnce(&Path) -> Box<dyn Storage>,
        opts: Options,
        fs: Arc<dyn crate::fs::CompactionFs>,
    ) -> Result<Db> {
        Self::open_as_process(path, storage, opts, fs, None)
    }

    /// [`Db::open_with_storage_as_process_and_fs`] for a process that `killer` may kill at
    /// any step of the lock-file protocol from its attach on (larch_pager's kill.rs says what
    /// a killed attachment leaves; the storage's writes are the test's to stop). The power-cut
    /// simulation of several processes kills them this way. A test hook: only with the
    /// feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn open_with_storage_as_killable_process(
        path: impl AsRef<Path>,
        storage: impl FnOnce(&Path) -> Box<dyn Storage>,
        opts: Options,
        fs: Arc<dyn crate::fs::CompactionFs>,
        killer: Arc<dyn larch_pager::Killer>,
    ) -> Result<Db> {
        Self::open_as_process(path, storage, opts, fs, Some(killer))
    }

    #[cfg(feature = "test-hooks")]
    fn open_as_process(
        path: impl AsRef<Path>,
        storage: impl FnOnce(&Path) -> Box<dyn Storage>,
        opts: Options,
        fs: Arc<dyn crate::fs::CompactionFs>,
        killer: Option<Arc<dyn larch_pager::Killer>>,
    ) -> Result<Db> {
        opts.validate()?;
        let resolved = larch_pager::resolve_path(path.as_ref())?;
        let file = LockFile::open(&resolved, true)?;
        if let Some(k) = killer {
            file.set_killer(k);
        }
        let lock = Arc::new(ProcessLock::new(file));
        let popts = PagerOptions {
            page_size: opts.page_size,
            write_mode: opts.write_mode,
            advice: opts.advice,
            cache_folios: opts.cache_folios,
            read_only: opts.read_only,
            create: false,
            fall_back_on_damage: opts.fall_back_on_damage,
            flock: FileLock::Shared,
            live: false,
        };
        let r2 = resolved.clone();
        Self::open_attached(
            &resolved,
            opts,
            popts,
            lock,
            None,
            move |p| Ok(Pager::open_storage(&r2, storage(&r2), p)?),
            fs,
        )
    }

    fn wrap(open_file: OpenFile) -> Db {
        Self::wrap_with_fs(open_file, Arc::new(crate::fs::RealFs))
    }

    fn wrap_with_fs(open_file: OpenFile, fs: Arc<dyn crate::fs::CompactionFs>) -> Db {
        let db = Db {
            shared: Arc::new(Shared {
                path: open_file.pager.path().to_path_buf(),
                opts: open_file.opts,
                current: RwLock::new(Arc::new(open_file)),
                handles: AtomicUsize::new(1),
                compaction: Default::default(),
                fs,
                snapshots: Default::default(),
                leaf_overflows: Default::default(),
                spilled_pages: Default::default(),
                age_timer: Default::default(),
            }),
        };
        start_age_timer(&db.shared);
        crate::autocompact::start_timer(&db.shared);
        crate::autocompact::at_open(&db.shared);
        db
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
        Self::open_storage_at(
            &path,
            storage,
            opts,
            Arc::new(crate::fs::RealFs),
            FileLock::ByMode,
        )
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
        Self::open_storage_at(&path, storage, opts, fs, FileLock::ByMode)
    }

    /// Open `storage` as the database at `path`, taken as it is (already resolved), without
    /// a lock file, flock'ed as `flock` says.
    pub(crate) fn open_storage_at(
        path: &Path,
        storage: Box<dyn Storage>,
        opts: Options,
        fs: Arc<dyn crate::fs::CompactionFs>,
        flock: FileLock,
    ) -> Result<Db> {
        opts.validate()?;
        let popts = PagerOptions {
            page_size: opts.page_size,
            write_mode: opts.write_mode,
            advice: opts.advice,
            cache_folios: opts.cache_folios,
            read_only: opts.read_only,
            create: false,
            fall_back_on_damage: opts.fall_back_on_damage,
            flock,
            live: false,
        };
        let (pager, opened) = Pager::open_storage(path, storage, popts)?;
        Ok(Self::wrap_with_fs(
            Self::from_pager(pager, opened, opts, None)?,
            fs,
        ))
    }

    /// The open file for `pager`. `pinned_by`: see `freemap::load`.
    pub(crate) fn from_pager(
        pager: Pager,
        opened: OpenedMetas,
        opts: Options,
        pinned_by: Option<crate::TxId>,
    ) -> Result<OpenFile> {
        let meta = opened.current;
        let map = pager.map();
        let mut free = FreeSpace::new(opts.policy);
        let mut freemap_carried = Default::default();
        if !opts.read_only {
            freemap_carried = crate::freemap::load(
                &View::new(&map, &meta, opts.verify_checksums),
                &meta,
                &mut free,
                pinned_by,
                opts.carried_max,
            )?;
        }
        let open_file = OpenFile {
            readers: ReaderTable::new(Snapshot { meta, map }),
            writer: Arc::new(larch_pager::UnfairMutex::new(WriterState {
                free,
                reader_pinned: Default::default(),
                trigger: Default::default(),
                spare_nodes: Default::default(),
                written: Default::default(),
                flush_started_at: 0,
                hot_run_grown: false,
                last_hot_run: None,
                freemap_carried,
                scratch: Default::default(),
            })),
            durability: Mutex::new(DurableState::new(meta)),
            pager,
            opts,
            opened,
            retired: AtomicBool::new(false),
            superseded: AtomicBool::new(false),
            successor: Default::default(),
            waiting_writers: AtomicUsize::new(0),
            durable_txid: std::sync::atomic::AtomicU64::new(meta.txid),
            group: Mutex::new(()),
            group_synced: parking_lot::Condvar::new(),
            lock: Default::default(),
            inode: Default::default(),
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
    /// Waiters are not served in order: the thread that ends a transaction may begin the next
    /// one before a waiting thread wakes, as with LMDB's and redb's writer locks, which keeps
    /// a thread that commits in a loop from paying a context switch per commit; a thread that
    /// has waited 20 ms gets the next turn (docs/performance.md, "owa.n's p99").
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
        WriteTx::begin(&self.shared, true)
    }

    /// Begin the write transaction if no other is in progress, in this process or another
    /// that has the file open; else fail at once with [`crate::Error::WriterBusy`]. It also
    /// fails while a thread of this process has waited in [`Db::begin_write`] for 20 ms or
    /// more: that thread's turn comes first.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = larch_engine::Db::open(dir.path().join("t.larch"), Default::default())?;
    /// let tx = db.try_begin_write()?;
    /// assert!(matches!(db.try_begin_write(), Err(larch_engine::Error::WriterBusy { .. })));
    /// drop(tx);
    /// assert!(db.try_begin_write().is_ok());
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn try_begin_write(&self) -> Result<WriteTx<'_>> {
        WriteTx::begin(&self.shared, false)
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
        sync_shared(&self.shared)
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
            background_flushes: c.background_flushes.load(Relaxed),
            durable_meta_writes: c.durable_meta_writes.load(Relaxed),
            point_waits: c.flush_waits.load(Relaxed),
            spilled_pages: self.shared.spilled_pages.load(Relaxed),
            commits,
        }
    }

    /// How the leaves that overflowed in this handle's write transactions made room (shared
    /// with a sibling, three from two, or split in two). See [`LeafOverflows`] for an example.
    pub fn leaf_overflows(&self) -> LeafOverflows {
        self.shared.leaf_overflows.snapshot()
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
