//! One open file and what every clone of a `Db` shares: the pager, the reader table and the
//! newest snapshot, the writer's state and lock, the durability state and group commit.
//! Background compaction replaces a handle's whole `OpenFile`; readers keep the old one.
//! Transactions (read.rs, write.rs) and durability (durability.rs) work on these types; the
//! `Db` handle (db.rs) opens them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use larch_freelist::FreeSpace;
use larch_pager::{Map, Meta, OpenedMetas, Pager};

use crate::durability::DurableState;
use crate::error::Result;
use crate::options::Options;
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
    pub compaction: crate::compaction_state::Compaction,
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
