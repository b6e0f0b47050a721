//! The reader table: which snapshots open read transactions hold, kept so that beginning and
//! ending a read touches only memory private to the reading thread's shard.
//!
//! LMDB gives each thread a reader slot; a reader writes its txid into its slot and re-checks
//! the meta, and the writer scans every slot for the oldest txid. Here the slots are
//! [`SHARDS`] cache-line-padded shards, each a small mutex over reader counts per txid; a thread
//! always uses the same shard ([`shard_index`]) and the first [`SHARDS`] threads to read each
//! get their own, so reading threads share no lock and no cache line and the mutexes do not
//! park.
//!
//! ## Why the writer never misses a reader (invariant 1 of docs/format.md)
//!
//! The writer first publishes its snapshot X ([`ReaderTable::publish`]: the current snapshot,
//! then the `published` txid), and only later (at the next `begin_write`) locks each shard in
//! turn to find the oldest registered txid ([`ReaderTable::oldest`]). A reader loads the
//! current snapshot *and* registers its txid inside one critical section of its shard's mutex.
//! For each shard, the two critical sections are ordered by that mutex:
//! - the reader's came first: the writer's scan sees its registration;
//! - the writer's scan came first: the publication of X happened before the scan, which
//!   happened before the reader locked the shard, so the reader sees X or newer and registers
//!   a txid >= X. Pages freed by txids <= X are not in the tree of X or any newer commit.
//!
//! Either way the writer's "oldest reader or, if none, X" bounds every snapshot a reader can
//! still hold or take.
//!
//! ## Other processes
//!
//! With a lock file (process.rs), each shard also owns one reader slot there, holding the
//! oldest txid its readers hold, so that writers in other processes see them. Registering a
//! txid lower than the slot holds stores it first and then re-checks the lock file's published
//! commit, as LMDB's readers do ([`ReaderTable::register`]; the proof is in docs/format.md,
//! "The lock file"). Raising or clearing the slot at the end of a read needs no check. `OpenFile::begin_read` and the snapshot cache of `Db::begin_read`
//! (`SnapshotCache`) both register inside the shard's critical section.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use larch_pager::{Map, Meta, TreeRoot};

use crate::error::Result;
use crate::file::{OpenFile, Shared, Snapshot};
use crate::process::ProcessLock;
use crate::TxId;

/// Shards of the reader table. More than the threads that read at once on this class of
/// machine, so each reading thread has its own; the writer locks all of them once per
/// transaction (32 uncontended lock/unlock pairs, around a microsecond: small beside a commit).
pub(crate) const SHARDS: usize = 32;

/// Keeps each shard on its own cache lines (128 bytes: adjacent-line prefetch pairs lines).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub T);

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's shard: threads are dealt shards in turn, so the first `SHARDS`
/// threads to read each get their own.
#[inline]
pub(crate) fn shard_index() -> usize {
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

/// Readers of one shard: how many hold each txid (a handful of txids at most in practice).
#[derive(Debug, Default)]
pub(crate) struct ShardReaders {
    held: Vec<(TxId, usize)>,
    /// With a lock file: this shard's reader slot there (claimed at its first reader), which
    /// holds the oldest txid of `held` so that writers in other processes see it.
    slot: Option<larch_pager::SlotHandle>,
    /// What `slot` holds.
    slot_min: Option<TxId>,
}

impl ShardReaders {
    fn add(&mut self, txid: TxId) {
        match self.held.iter_mut().find(|(t, _)| *t == txid) {
            Some((_, n)) => *n += 1,
            None => self.held.push((txid, 1)),
        }
    }

    fn remove(&mut self, txid: TxId) {
        if let Some(i) = self.held.iter().position(|(t, _)| *t == txid) {
            self.held[i].1 -= 1;
            if self.held[i].1 == 0 {
                self.held.swap_remove(i);
            }
        }
    }
}

/// One shard, locked by a reader while it registers (or, for the snapshot cache, while it
/// also checks its cached snapshot against `published`).
pub(crate) type Shard = Padded<Mutex<ShardReaders>>;

/// The newest snapshot and every registered reader of one file.
#[derive(Debug)]
pub(crate) struct ReaderTable {
    /// The snapshot new readers get. Locked by readers only when their shard's cached copy is
    /// stale (once per commit per shard) and by the writer when it publishes.
    current: Mutex<Arc<Snapshot>>,
    /// Txid of `current`, readable without its lock.
    published: AtomicU64,
    shards: Box<[Shard]>,
}

impl ReaderTable {
    /// A table whose current snapshot is `snap`, with no readers.
    pub(crate) fn new(snap: Snapshot) -> ReaderTable {
        ReaderTable {
            published: AtomicU64::new(snap.meta.txid),
            current: Mutex::new(Arc::new(snap)),
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    /// The newest snapshot.
    pub(crate) fn current(&self) -> Arc<Snapshot> {
        self.current.lock().clone()
    }

    /// Txid of the newest snapshot.
    #[inline]
    pub(crate) fn published(&self) -> TxId {
        self.published.load(Ordering::Acquire)
    }

    /// Make `snap` the snapshot new readers get, unless a newer one is published already.
    /// Must happen before any scan ([`ReaderTable::oldest`]) that relies on it (module docs).
    ///
    /// Never moves back: a reader catching up with another process's commit (`catch_up`)
    /// reads its meta without the writer lock, and a writer thread of this process may
    /// commit (Async: other processes never see it) before that reader publishes; going back
    /// would hide the newer commit from this process's readers and make the next write
    /// transaction start from the older one, reusing the newer one's txid and losing it.
    pub(crate) fn publish(&self, snap: Snapshot) {
        let txid = snap.meta.txid;
        let mut current = self.current.lock();
        if txid < current.meta.txid {
            return;
        }
        *current = Arc::new(snap);
        self.published.store(txid, Ordering::Release);
    }

    /// Shard `i` (lock it to register or end a reader).
    #[inline]
    pub(crate) fn shard(&self, i: usize) -> &Mutex<ShardReaders> {
        &self.shards[i].0
    }

    /// Register a reader of the newest snapshot in shard `i` and return that snapshot;
    /// `None` if another process published a newer commit meanwhile (catch up, then retry).
    /// `lock` (the file's `OpenFile::reader_lock`) is asked under the shard lock: a switch
    /// supersedes the file before it clears the shards' slots (`release_slots`, shard by
    /// shard under the same lock), so a reader either registers before that clears its slot
    /// or sees the file superseded and takes no slot.
    pub(crate) fn begin<'l>(
        &self,
        i: usize,
        lock: impl FnOnce() -> Option<&'l ProcessLock>,
    ) -> Result<Option<Arc<Snapshot>>> {
        let mut s = self.shard(i).lock();
        let snap = self.current();
        Ok(Self::register(&mut s, snap.meta.txid, lock())?.then_some(snap))
    }

    /// Register a reader of `txid` in a shard the caller holds locked. With a lock file, a
    /// txid older than what the shard's slot holds is stored there first and the published
    /// commit re-checked (the reader protocol, docs/format.md "The lock file"): if another
    /// process published a newer commit, nothing is registered and this returns false.
    #[inline]
    pub(crate) fn register(
        s: &mut ShardReaders,
        txid: TxId,
        lock: Option<&ProcessLock>,
    ) -> Result<bool> {
        if let Some(lock) = lock {
            let cur = s.slot_min;
            if cur.is_none_or(|m| txid < m) {
                if s.slot.is_none() {
                    s.slot = Some(lock.file.claim_slot()?);
                }
                let slot = s.slot.as_ref().expect("claimed above");
                slot.begin(txid);
                if lock.file.committed_txid().is_some_and(|k| k > txid) {
                    match cur {
                        Some(m) => slot.begin(m),
                        None => slot.end(),
                    }
                    return Ok(false);
                }
                s.slot_min = Some(txid);
            }
        }
        s.add(txid);
        Ok(true)
    }

    /// End a reader of `txid` registered in shard `i`.
    #[inline]
    pub(crate) fn end(&self, i: usize, txid: TxId) {
        let mut s = self.shard(i).lock();
        s.remove(txid);
        if s.slot_min.is_some() {
            let min = s.held.iter().map(|&(t, _)| t).min();
            if min != s.slot_min {
                if let Some(slot) = s.slot.as_ref() {
                    match min {
                        // Only ever raised here: no re-check needed.
                        Some(m) => slot.begin(m),
                        None => slot.end(),
                    }
                }
                s.slot_min = min;
            }
        }
    }

    /// The file was switched away (background compaction): its readers read an inode that
    /// nothing writes any more, so their lock-file slots protect nothing. Clear them: the new
    /// file shares the lock file, and its writers would take these old-file txids for readers
    /// of their own and reuse no page while such a reader lives. The readers carry on (their
    /// counts stay). The file is superseded before this runs, and a reader that registers
    /// on it once it is claims no slot (`OpenFile::reader_lock`, read under the shard lock).
    pub(crate) fn release_slots(&self) {
        for sh in self.shards.iter() {
            let mut s = sh.0.lock();
            if let Some(slot) = s.slot.take() {
                slot.end();
            }
            s.slot_min = None;
        }
    }

    /// The oldest txid any reader holds, and how many readers there are.
    pub(crate) fn oldest(&self) -> (Option<TxId>, usize) {
        let mut oldest: Option<TxId> = None;
        let mut count = 0;
        for sh in self.shards.iter() {
            let s = sh.0.lock();
            for &(t, n) in &s.held {
                oldest = Some(oldest.map_or(t, |o| o.min(t)));
                count += n;
            }
        }
        (oldest, count)
    }

    /// Every txid readers hold, with its count, sorted by txid.
    pub(crate) fn held(&self) -> Vec<(TxId, usize)> {
        let mut all = std::collections::BTreeMap::new();
        for sh in self.shards.iter() {
            for &(t, n) in &sh.0.lock().held {
                *all.entry(t).or_insert(0) += n;
            }
        }
        all.into_iter().collect()
    }
}

/// What a read transaction holds: its file and its snapshot, in one allocation per shard and
/// commit so that the reference counts a read touches are shared only within its shard.
#[derive(Debug)]
pub(crate) struct ReadSnap {
    /// The file (kept open, and its lock held, while a reader can read it).
    pub open_file: Arc<OpenFile>,
    /// The commit.
    pub meta: Meta,
    /// The map to read it through.
    pub map: Arc<Map>,
    /// The first tree opened in this snapshot and its root: a snapshot never changes, so
    /// the catalog lookup of each later `open_tree` of that name can be skipped.
    pub first_tree: OnceLock<(Box<str>, TreeRoot)>,
}

impl ReadSnap {
    pub(crate) fn new(open_file: Arc<OpenFile>, snap: &Snapshot) -> ReadSnap {
        ReadSnap {
            open_file,
            meta: snap.meta,
            map: snap.map.clone(),
            first_tree: OnceLock::new(),
        }
    }
}

/// Per handle and shard, the last [`ReadSnap`] handed out, so that a read of an unchanged
/// file takes no global lock and clones no globally shared `Arc`. Holds no reader
/// registration: a cached snapshot pins no pages.
#[derive(Debug)]
pub(crate) struct SnapshotCache {
    shards: Box<[CachedSnap]>,
}

/// One shard of a [`SnapshotCache`].
type CachedSnap = Padded<Mutex<Option<Arc<ReadSnap>>>>;

impl Default for SnapshotCache {
    fn default() -> Self {
        SnapshotCache {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
        }
    }
}

impl SnapshotCache {
    /// Begin a read of the newest commit of `shared`'s current file, registered in the calling
    /// thread's shard.
    pub(crate) fn begin(&self, shared: &Shared) -> Result<(Arc<ReadSnap>, usize)> {
        let i = shard_index();
        let mut cached = self.shards[i].0.lock();
        if let Some(rs) = cached.as_ref() {
            let open_file = &rs.open_file;
            // A retired file is only read by snapshots that began before the switch.
            if !open_file.retired.load(Ordering::Acquire) && !open_file.pager.is_poisoned() {
                open_file.catch_up()?;
                let mut s = open_file.readers.shard(i).lock();
                // Checked under the shard lock: see the module docs.
                if open_file.readers.published() == rs.meta.txid
                    && ReaderTable::register(&mut s, rs.meta.txid, open_file.reader_lock())?
                {
                    return Ok((rs.clone(), i));
                }
            }
        }
        let open_file = shared.current_file();
        if open_file.pager.is_poisoned() {
            // After a failed sync the file's contents are unknown: refuse to read from it.
            open_file.pager.check_writable()?;
        }
        let snap = open_file.begin_snapshot(i)?;
        let rs = Arc::new(ReadSnap::new(open_file, &snap));
        *cached = Some(rs.clone());
        Ok((rs, i))
    }

    /// Forget every cached snapshot (after the handle switched files, so the old file is
    /// closed once its last reader ends).
    pub(crate) fn clear(&self) {
        for sh in self.shards.iter() {
            *sh.0.lock() = None;
        }
    }
}
