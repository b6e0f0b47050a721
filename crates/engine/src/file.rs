//! One open file and what every clone of a `Db` shares: the pager, the reader table and the
//! newest snapshot, the writer's state and lock, the durability state and group commit.
//! Background compaction replaces a handle's whole `OpenFile`; readers keep the old one.
//! Transactions (read.rs, write.rs) and durability (durability.rs) work on these types; the
//! `Db` handle (db.rs) opens them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use larch_freelist::FreeSpace;
use larch_pager::{Map, Meta, OpenedMetas, Pager};

use crate::durability::DurableState;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::process::{InodeClaim, ProcessLock};
use crate::read::ReadTx;
use crate::readers::{ReadSnap, ReaderTable, SnapshotCache};
use crate::TxId;

/// How long a group-commit follower waits for a later commit's sync before it syncs itself.
/// Long enough for the writer behind it to commit and sync (a few fdatasyncs), short enough
/// that a writer that holds its transaction open costs the follower little.
const GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

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
    pub trigger: crate::compaction_state::Trigger,
    /// Buffers of the dirty nodes of finished transactions, for the next ones' copies.
    pub spare_nodes: crate::node::SpareNodes,
    /// The nodes the last commits wrote, for the next transactions' copies of their pages.
    pub written: crate::node::WrittenNodes,
    /// Bytes of replaced pages waiting for a durable point when a background flush was last
    /// started ahead of it (`Txn::unsynced_over_limit`).
    pub flush_started_at: u64,
    /// A commit has already placed its hot pages at the end of the file because the free set
    /// had no run for them (`Txn::gather_hot_pages`): done by at most one commit that lands
    /// per open file (a commit that fails restores it, `Txn::rollback`).
    pub hot_run_grown: bool,
    /// The first free-map slot of the last commit's hot run (`Txn::gather_hot_pages`).
    pub last_hot_run: Option<crate::PageId>,
    /// Free-map bits the newest commit's free map does not have yet (page -> unreachable):
    /// Async commits leave them to the next commit that saves the free map (`Txn::commit`,
    /// docs/format.md "A free map behind its meta"). Empty when the free map is current.
    pub freemap_carried: crate::freemap::Changes,
    /// The buffers every transaction fills and empties, kept for the next one (scratch.rs).
    pub scratch: crate::scratch::Scratch,
}

/// One open file: its pager, snapshots and writer state. Background compaction replaces the
/// whole `OpenFile` of a handle with one for the compacted file; readers keep the old one.
#[derive(Debug)]
pub(crate) struct OpenFile {
    /// This process has the file open (at most once per process, by inode). The first field,
    /// so it is dropped before `pager` closes the descriptor: once that is closed, the inode
    /// of a file without a name (the old file of a switch, a removed one) is free, and a file
    /// created meanwhile can get its number, which a claim still registered would refuse as
    /// already open.
    pub inode: OnceLock<InodeClaim>,
    pub pager: Pager,
    pub opts: Options,
    /// The newest snapshot and the readers of older ones (readers.rs).
    pub readers: ReaderTable,
    pub writer: Arc<larch_pager::UnfairMutex<WriterState>>,
    /// Which commits are written and durable. Lock order: `writer`, then this.
    pub durability: Mutex<DurableState>,
    pub opened: OpenedMetas,
    /// Replaced by a compacted file: writers that waited for its lock must start over.
    pub retired: AtomicBool,
    /// The compacted file that replaced this one (set before `retired`): its name may not be
    /// durable yet (`Pager::sync_name`), which a commit made here waits for. Weak: a reader
    /// of this file must not keep every later compacted file open.
    pub successor: OnceLock<std::sync::Weak<OpenFile>>,
    /// A compaction switch renamed its file over this one's path (set before `retired`, and
    /// with no lock file as well): the lock file names the new file's commits from then on,
    /// so nothing of this file may publish to it or release the writer lock it shares. Set
    /// under this file's durability lock, which everything that publishes holds.
    pub superseded: AtomicBool,
    /// Writers waiting for the writer lock (a Sync commit with company joins a group).
    pub waiting_writers: AtomicUsize,
    /// The writer's durable txid, for group-commit followers (who do not hold the lock).
    pub durable_txid: std::sync::atomic::AtomicU64,
    /// Followers wait here for a durable txid that covers their commit.
    pub group: Mutex<()>,
    pub group_synced: parking_lot::Condvar,
    /// The lock file through which other processes share the file (process.rs); unset for a
    /// file without one (test storage, a compaction copy until it is switched in).
    pub lock: OnceLock<Arc<ProcessLock>>,
}

/// What every clone of a `Db` shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub path: PathBuf,
    pub opts: Options,
    pub current: RwLock<Arc<OpenFile>>,
    /// Live `Db` clones; the last one to drop waits for a running compaction to end.
    pub handles: AtomicUsize,
    pub compaction: crate::compaction_state::Compaction,
    /// Directory operations and new files of compaction (the real file system but in tests).
    pub fs: Arc<dyn crate::fs::CompactionFs>,
    /// Each shard's last snapshot of `current`, so reads of an unchanged file share no lock.
    pub snapshots: SnapshotCache,
    /// How overfull leaves made room (`Db::leaf_overflows`), across file switches.
    pub leaf_overflows: crate::redistribute::LeafOverflowCounts,
    /// Leaves written before their commit (`Txn::spill`, `IoStats::spilled_pages`).
    pub spilled_pages: std::sync::atomic::AtomicU64,
    /// The timer of `Options::max_unsynced_age` (db.rs, `start_age_timer`).
    pub age_timer: crate::compaction_state::Timer,
}

impl Shared {
    /// The current file.
    pub(crate) fn current_file(&self) -> Arc<OpenFile> {
        self.current.read().clone()
    }
}

impl WriterState {
    /// Pages below the high-water mark no tree of the newest state reaches.
    pub(crate) fn unreachable_pages(&self) -> u64 {
        self.free.free_pages() + self.free.pending_pages() + self.reader_pinned.len()
    }
}

impl OpenFile {
    /// The lock file, if the file has one.
    #[inline]
    pub(crate) fn lock(&self) -> Option<&Arc<ProcessLock>> {
        self.lock.get()
    }

    /// A snapshot of this file's newest commit, registered in its reader table.
    pub(crate) fn begin_read(self: &Arc<Self>) -> Result<ReadTx> {
        if self.pager.is_poisoned() {
            // After a failed sync the file's contents are unknown: refuse to read from it.
            self.pager.check_writable()?;
        }
        let shard = crate::readers::shard_index();
        let snap = self.begin_snapshot(shard)?;
        Ok(ReadTx::new(
            Arc::new(ReadSnap::new(self.clone(), &snap)),
            shard,
        ))
    }

    /// Register a reader of the newest snapshot (of any process) in shard `i`.
    pub(crate) fn begin_snapshot(&self, i: usize) -> Result<Arc<Snapshot>> {
        loop {
            self.catch_up()?;
            if let Some(snap) = self.readers.begin(i, || self.reader_lock())? {
                return Ok(snap);
            }
        }
    }

    /// The lock file readers of this file register in: none once a switch superseded it.
    /// Then the lock file names the new file's commits (a reader here re-checking against
    /// them would start over forever, or wait for a meta this file never gets), and no
    /// process writes this inode again, so its snapshots pin nothing.
    pub(crate) fn reader_lock(&self) -> Option<&ProcessLock> {
        if self.superseded.load(Ordering::Acquire) {
            return None;
        }
        self.lock().map(|l| &**l)
    }

    /// If another process published a commit newer than this process's newest snapshot,
    /// read its meta from the file and make it the snapshot new readers get. A no-op in the
    /// process that holds the writer lock (nobody else commits). One atomic load when there
    /// is nothing to do.
    pub(crate) fn catch_up(&self) -> Result<()> {
        let Some(lock) = self.reader_lock() else {
            return Ok(());
        };
        match lock.file.committed_txid() {
            Some(k) if k > self.readers.published() => {}
            _ => return Ok(()),
        }
        let _g = lock.catch_up.lock();
        let mut last = 0;
        // The writer may be rewriting the slot for a newer commit: then the txid moves on.
        for _ in 0..100_000 {
            if self.superseded.load(Ordering::Acquire) {
                // The txid is the new file's: this file's newest snapshot is all there is.
                return Ok(());
            }
            let Some(k) = lock.file.committed_txid() else {
                return Ok(());
            };
            if k <= self.readers.published() {
                return Ok(());
            }
            last = k;
            if let Some(meta) = self.pager.read_meta_of(k)? {
                self.publish(meta);
                return Ok(());
            }
            std::thread::yield_now();
        }
        Err(Error::LockFile {
            path: lock.file.path().to_path_buf(),
            reason: format!(
                "the lock file names commit {last} as the newest, but the database holds no such meta page (was the database file replaced while in use?)"
            ),
        })
    }

    /// The newest snapshot and the oldest txid any reader holds, in this process or (through
    /// the lock file) any other. The snapshot is read first: the scan then sees every reader
    /// that could hold anything older (readers.rs; docs/format.md, "The lock file").
    pub(crate) fn snapshot_and_oldest_reader(&self) -> (Arc<Snapshot>, Option<TxId>) {
        let current = self.readers.current();
        let (mut oldest, _) = self.readers.oldest();
        if let Some(lock) = self.lock() {
            let mut other = lock.file.oldest_reader();
            if other.is_some_and(|o| o < current.meta.txid && oldest.is_none_or(|m| o < m)) {
                // Something older than this process's readers: a reader of another process,
                // or one that died. Clear dead slots (one fcntl each) and look again.
                let _ = lock.file.clear_stale();
                other = lock.file.oldest_reader();
            }
            oldest = match (oldest, other) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        (current, oldest)
    }

    /// Tell other processes about what is on disk: the newest commit whose meta is written,
    /// and the newest durable one. Every commit of this process up to `st.on_disk()` has its
    /// meta in the file by now.
    pub(crate) fn publish_on_disk(&self, st: &DurableState) {
        if self.superseded.load(Ordering::Acquire) {
            // Its txids are not the lock file's any more (a publish here would name a
            // commit the new file does not have, and the next writer would rebuild its
            // state from an older meta).
            return;
        }
        if let Some(lock) = self.lock() {
            if lock.held() {
                lock.file.publish_committed(st.on_disk());
                lock.file.publish_durable(st.durable);
            }
        }
    }

    /// Is this process's writer state the file's (no other process committed since this
    /// process's newest commit)? Without a lock file, always.
    pub(crate) fn writer_state_current(&self) -> bool {
        match self.lock() {
            None => true,
            Some(l) if l.held() => true,
            Some(l) => {
                let known = self.durability.lock().committed.txid;
                l.file.committed_txid().is_none_or(|k| k <= known)
            }
        }
    }

    /// For a look at the compaction threshold without a transaction (the handle's timer,
    /// `Db::sync`), with the in-process writer lock held as `w`: make `w` the file's writer
    /// state. If another process committed since this process's newest commit, take the
    /// cross-process writer lock if nobody holds it (never wait) and rebuild `w` from the
    /// file, as a write transaction would; else a handle that stays open without writing
    /// would never count what other processes left (they cannot compact while it is
    /// attached). False if `w` is stale and stays so. The caller then calls
    /// [`OpenFile::release_writer_if_on_disk`].
    pub(crate) fn writer_state_for_check(&self, w: &mut WriterState) -> bool {
        if self.pager.read_only() || self.superseded.load(Ordering::Acquire) {
            // Superseded: a switch made another file the database (the handle's timer can
            // take this one just before); its state is nobody's, and it may neither take
            // the writer lock (it could not let go of it) nor start or refuse a compaction.
            return false;
        }
        if self.writer_state_current() {
            return true;
        }
        let Some(lock) = self.lock() else {
            return true;
        };
        if !matches!(lock.acquire(false), Ok(true)) {
            return false;
        }
        self.reload_if_changed(w).is_ok()
    }

    /// Release the cross-process writer lock if every commit of this process is on disk.
    /// Caller holds the in-process writer lock.
    pub(crate) fn release_writer_if_on_disk(&self) {
        if let Some(lock) = self.lock() {
            if lock.held() {
                let st = self.durability.lock();
                if self.superseded.load(Ordering::Acquire) {
                    // The lock is the new file's now (the switch releases it).
                    return;
                }
                if st.on_disk() >= st.committed.txid {
                    self.publish_on_disk(&st);
                    lock.release();
                }
            }
        }
    }

    /// Caller holds the cross-process writer lock and the in-process one (`w`). If another
    /// process committed since this process's newest commit, rebuild the writer's state from
    /// the file. Every commit of that process is on disk (it released the lock only then) or
    /// lost with it (it died), so the file's newest meta is the state to build on; it is
    /// synced first unless the lock file says it is durable.
    ///
    /// A writer killed between writing its meta and publishing it leaves the lock file naming
    /// the commit before, so the file's newest meta is checked too, unless no other process
    /// took the lock since this one last checked (the lock file counts takes; every take of
    /// this process that did not get here, the open's or a compaction switch's that gave up,
    /// leaves the check due: `ProcessLock::taken_elsewhere`). That meta is whole (its pages
    /// reached the page cache first), a process opening the file now takes it, and pages it
    /// reaches are not free.
    pub(crate) fn reload_if_changed(&self, w: &mut WriterState) -> Result<()> {
        // A switch supersedes a file holding its writer lock and retires it before letting
        // go, and every caller checks `retired` after taking the lock.
        debug_assert!(!self.superseded.load(Ordering::Acquire));
        let Some(lock) = self.lock() else {
            return Ok(());
        };
        let known = self.durability.lock().committed.txid;
        let k = lock.file.committed_txid();
        if k.is_none() {
            // Nobody published since the lock file was made (this process opened read-only
            // first): what this process opened at is on disk.
            lock.file.publish_committed(known);
            return Ok(());
        }
        let published_newer = k.is_some_and(|k| k > known);
        // Only a take by another process since this one last looked can have left an
        // unpublished meta (the lock file counts takes): a single writing process skips the
        // reads. Not only on a fresh take: a check that failed may have kept the lock.
        if !(published_newer || lock.taken_elsewhere()) {
            return Ok(());
        }
        let meta = self.pager.read_newest_meta()?;
        if let Some(k) = k.filter(|&k| k > meta.txid) {
            // A commit is published only once its meta is written, and no process writes
            // while this one holds the writer lock: the lock file is not this file's. Never
            // rebuild from a meta older than what was published (or than this process's own).
            return Err(Error::LockFile {
                path: lock.file.path().to_path_buf(),
                reason: format!(
                    "the lock file names commit {k} as the newest, but the database's newest meta is {} (was the database file replaced while in use?)",
                    meta.txid
                ),
            });
        }
        if !published_newer && meta.txid <= known {
            lock.checked();
            return Ok(());
        }
        if lock.file.durable_txid().is_none_or(|d| d < meta.txid) {
            self.pager.sync()?;
        }
        // Publish before scanning the readers (the reader protocol, docs/format.md "The lock
        // file"): a reader that registers an older snapshot after the scan then sees this
        // commit when it re-checks, and starts over on it.
        lock.file.publish_committed(meta.txid);
        lock.file.publish_durable(meta.txid);
        let map = self.pager.map();
        // Readers (here or elsewhere) of snapshots older than the file's newest may still
        // reach pages its free map calls free: hold all of them until they are gone.
        let oldest = {
            let (_, oldest) = self.snapshot_and_oldest_reader();
            oldest
        };
        let pinned_by = oldest.is_some_and(|o| o < meta.txid).then_some(meta.txid);
        let mut free = larch_freelist::FreeSpace::new(self.opts.policy);
        let freemap_carried = crate::freemap::load(
            &crate::view::View::new(&map, &meta, self.opts.verify_checksums),
            &meta,
            &mut free,
            pinned_by,
            self.opts.carried_max,
        )?;
        *w = WriterState {
            free,
            reader_pinned: Default::default(),
            // What the trigger saw is history of a state that is gone (the other process may
            // have used or freed any page, or switched in a compacted file): it starts again
            // from the file's free pages, less the working space (`Trigger`).
            trigger: Default::default(),
            spare_nodes: std::mem::take(&mut w.spare_nodes),
            // Another process may have written any page since (each under a newer txid,
            // which `WrittenNodes::take` would see, but nothing is gained by keeping them).
            written: Default::default(),
            flush_started_at: 0,
            hot_run_grown: w.hot_run_grown,
            last_hot_run: None,
            freemap_carried,
            scratch: std::mem::take(&mut w.scratch),
        };
        *self.durability.lock() = DurableState::new(meta);
        self.durable_txid.store(meta.txid, Ordering::Release);
        if meta.txid > self.readers.published() {
            self.publish(meta);
        }
        lock.checked();
        Ok(())
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
        if self.lock().is_some_and(|l| !l.held()) {
            // Another process may be writing: this process's state may be stale.
            return;
        }
        let Some(hwm) = st.durable_high_water() else {
            return;
        };
        let ps = self.pager.page_size() as u64;
        let want = hwm * ps;
        let step = larch_pager::growth_step(want);
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
                // (the last round under the writer lock) and synced it before the switch;
                // durable once the successor's name is (a failed directory fsync after the
                // rename leaves a name a power cut could undo, bringing this file back).
                return self.successor_named();
            }
            let writer = if self.waiting_writers.load(Ordering::Acquire) == 0 {
                self.writer.try_lock()
            } else {
                None
            };
            if writer.is_some() || std::time::Instant::now() >= deadline {
                let mut st = self.durability.lock();
                if self.retired.load(Ordering::Acquire) {
                    drop(st);
                    return self.successor_named();
                }
                if st.durable < txid {
                    st.sync_all(self)?;
                    self.publish_on_disk(&st);
                }
                if writer.is_some() {
                    self.trim_to_durable(&st);
                    drop(st);
                    self.release_writer_if_on_disk();
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

    /// A retired file's commits are durable in its successor once the successor's name is:
    /// make sure of it (a directory fsync the switch could not make is retried here).
    fn successor_named(&self) -> Result<()> {
        match self.successor.get().and_then(std::sync::Weak::upgrade) {
            Some(next) => Ok(next.pager.sync_name()?),
            // Closed since (its close synced what it could) or never set.
            None => Ok(()),
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
        if self.pager.read_only() || self.pager.is_poisoned() || retired {
            return;
        }
        let _w = self.writer.lock();
        let mut alone = true;
        if let Some(lock) = self.lock() {
            // Without the writer lock this process has nothing unsynced (it keeps the lock
            // while it does) and must not write: another process may be writing.
            let fresh = !lock.held();
            if !matches!(lock.acquire(false), Ok(true)) {
                // Another process writes: no meta from here, but this process's commits all
                // have theirs on disk (NoMetaSync ones unsynced), and a sync makes them durable.
                let _ = self.pager.sync();
                return;
            }
            let known = self.durability.lock().committed.txid;
            // Taken just now: a writer killed before publishing may have left a newer meta.
            let newer_on_disk = || {
                fresh
                    && lock.taken_elsewhere()
                    && self
                        .pager
                        .read_newest_meta()
                        .map_or(true, |m| m.txid > known)
            };
            if lock.file.committed_txid().is_some_and(|k| k > known) || newer_on_disk() {
                // Another process wrote since: this process's state is stale, and its own
                // commits are all on disk.
                lock.release();
                return;
            }
            alone = !lock.file.others_attached().unwrap_or(true);
        }
        let mut st = self.durability.lock();
        if st.sync_all(self).is_ok() {
            self.publish_on_disk(&st);
            if alone {
                self.trim_to_durable(&st);
                // A clean close: the newest commit is durable; say so in the older meta, so
                // a later mismatch of its pages reads as damage, not a torn commit. Not
                // while others have the file open: they may be reading that meta.
                let _ = self.pager.mark_closed_at(st.committed.txid);
            }
        }
        drop(st);
        if let Some(lock) = self.lock() {
            lock.release();
        }
    }
}
