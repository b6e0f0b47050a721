//! openraft's `RaftLogStorage` on larch: entries by index in [`LOG_TREE`], the vote, the
//! committed and the last purged log id in [`LOG_META_TREE`], appends made durable by a flush
//! thread that group-commits them (the crate docs say why each write has the durability it
//! has).

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use larch::{Db, Durability, ReadTx};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{
    borrow_bounds, decode, encode, index_key, key_bounds, read_logs, read_vote, write_logs,
    write_vote, Failure,
};
use crate::{COMMITTED_KEY, LOG_META_TREE, LOG_TREE, PURGED_KEY, VOTE_KEY};

/// Called by the flush thread after each sync, before it fires the callbacks that sync
/// acknowledged, with the highest log index the sync made durable (`None`: the log was
/// empty). Tests use it to know which appends were acknowledged at a given point of the
/// file's I/O.
pub type FlushHook = Arc<dyn Fn(Option<u64>) + Send + Sync>;

/// The Raft log of one node: a `RaftLogStorage` over a larch [`Db`] (it shares the file
/// with the state machine: pass it a clone of the same handle).
///
/// An `append` is an `Async` commit, readable at once; its callback fires after the flush
/// thread's next [`Db::sync`] (group commit: one fdatasync acknowledges every append made
/// before it started). Dropping the store stops the flush thread after its last sync.
pub struct LogStore<C: RaftTypeConfig> {
    db: Db,
    flusher: Flusher<C>,
    /// The last index appended (`u64::MAX`: none since the store was made, or the log
    /// emptied): what the next sync makes durable, for [`FlushHook`].
    last_index: Arc<AtomicU64>,
}

impl<C: RaftTypeConfig> Debug for LogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("path", &self.db.path())
            .finish_non_exhaustive()
    }
}

/// A reader of the log (what replication tasks read from); any number, each its own read
/// transaction per call.
pub struct LogReader<C: RaftTypeConfig> {
    db: Db,
    _c: PhantomData<fn() -> C>,
}

const NONE: u64 = u64::MAX;

impl<C> LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    /// The log store over `db`; creates its trees if missing.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = larch::Db::open(dir.path().join("n.larch"), larch::Options::default())?;
    /// let log: larch_raft::LogStore<larch_raft::TypeConfig> = larch_raft::LogStore::new(db)?;
    /// # drop(log);
    /// # Ok::<(), larch::Error>(())
    /// ```
    pub fn new(db: Db) -> Result<Self, larch::Error> {
        Self::with_flush_hook(db, None)
    }

    /// [`LogStore::new`], calling `hook` after each sync of the flush thread.
    pub fn with_flush_hook(db: Db, hook: Option<FlushHook>) -> Result<Self, larch::Error> {
        crate::ensure_trees(&db, &[LOG_TREE, LOG_META_TREE])?;
        let last = db
            .begin_read()?
            .open_tree(LOG_TREE)?
            .last()?
            .and_then(|(k, _)| crate::codec::key_index(k));
        let last_index = Arc::new(AtomicU64::new(last.unwrap_or(NONE)));
        Ok(LogStore {
            flusher: Flusher::spawn(db.clone(), last_index.clone(), hook),
            db,
            last_index,
        })
    }

    /// The handle the store writes through.
    pub fn db(&self) -> &Db {
        &self.db
    }

    fn put_meta<T: Serialize>(&self, key: &[u8], v: &T, d: Durability) -> larch::Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(d);
        tx.open_tree(LOG_META_TREE)?.insert(key, &encode(v))?;
        tx.commit()
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, Failure> {
        let rx = self.db.begin_read()?;
        let meta = rx.open_tree(LOG_META_TREE)?;
        Ok(match meta.get(key)? {
            Some(v) => Some(decode(v)?),
            None => None,
        })
    }
}

/// Every entry in `range`, decoded straight from the map of one read snapshot.
fn read_entries<C>(
    db: &Db,
    range: impl RangeBounds<u64>,
) -> Result<Vec<C::Entry>, StorageError<C::NodeId>>
where
    C: RaftTypeConfig,
    C::Entry: DeserializeOwned,
{
    let rx = db.begin_read().map_err(|e| read_logs(&e))?;
    let log = rx.open_tree(LOG_TREE).map_err(|e| read_logs(&e))?;
    let bounds = key_bounds(&range);
    let mut out = Vec::new();
    for item in log
        .range(borrow_bounds(&bounds))
        .map_err(|e| read_logs(&e))?
    {
        let (_, v) = item.map_err(|e| read_logs(&e))?;
        out.push(decode(v).map_err(|e| read_logs(&e))?);
    }
    Ok(out)
}

/// The last entry's log id in `rx`, if the log has any.
fn last_log_id<C>(rx: &ReadTx) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>>
where
    C: RaftTypeConfig,
    C::Entry: DeserializeOwned,
{
    let log = rx.open_tree(LOG_TREE).map_err(|e| read_logs(&e))?;
    match log.last().map_err(|e| read_logs(&e))? {
        None => Ok(None),
        Some((_, v)) => {
            let e: C::Entry = decode(v).map_err(|e| read_logs(&e))?;
            Ok(Some(e.get_log_id().clone()))
        }
    }
}

impl<C> RaftLogReader<C> for LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        read_entries::<C>(&self.db, range)
    }
}

impl<C> RaftLogReader<C> for LogReader<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        read_entries::<C>(&self.db, range)
    }
}

impl<C> RaftLogStorage<C> for LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    type LogReader = LogReader<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        // One read snapshot, so the purged id and the last entry agree.
        let rx = self.db.begin_read().map_err(|e| read_logs(&e))?;
        let meta = rx.open_tree(LOG_META_TREE).map_err(|e| read_logs(&e))?;
        let last_purged_log_id: Option<LogId<C::NodeId>> =
            match meta.get(PURGED_KEY).map_err(|e| read_logs(&e))? {
                Some(v) => Some(decode(v).map_err(|e| read_logs(&e))?),
                None => None,
            };
        let last_log_id = last_log_id::<C>(&rx)?.or_else(|| last_purged_log_id.clone());
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader {
            db: self.db.clone(),
            _c: PhantomData,
        }
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.put_meta(VOTE_KEY, vote, Durability::Sync)
            .map_err(|e| write_vote(&e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        self.get_meta(VOTE_KEY).map_err(|e| read_vote(&e))
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        self.put_meta(COMMITTED_KEY, &committed, Durability::Async)
            .map_err(|e| write_logs(&e))
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        let got: Option<Option<LogId<C::NodeId>>> =
            self.get_meta(COMMITTED_KEY).map_err(|e| read_logs(&e))?;
        Ok(got.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut last = None;
        let r: larch::Result<()> = (|| {
            let mut tx = self.db.begin_write()?;
            tx.set_durability(Durability::Async);
            {
                let mut log = tx.open_tree(LOG_TREE)?;
                for entry in entries {
                    let index = entry.get_log_id().index;
                    let key = index_key(index);
                    let value = encode(&entry);
                    // Entries come after the last one (openraft truncates a conflicting
                    // suffix first), so the sorted bulk load applies; an overwrite, should
                    // one come, is an insert.
                    match log.append(&key, &value) {
                        Err(larch::Error::KeyNotGreater { .. }) => log.insert(&key, &value)?,
                        r => r?,
                    }
                    last = Some(index);
                }
            }
            tx.commit()
        })();
        r.map_err(|e| write_logs(&e))?;
        if let Some(i) = last {
            self.last_index.store(i, Ordering::Release);
        }
        // Readable now; durable, and acknowledged, at the flush thread's next sync.
        self.flusher.send(callback);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let r: larch::Result<()> = (|| {
            let mut tx = self.db.begin_write()?;
            tx.set_durability(Durability::Async);
            let from = index_key(log_id.index);
            tx.open_tree(LOG_TREE)?.remove_range(&from[..]..)?;
            tx.commit()
        })();
        r.map_err(|e| write_logs(&e))?;
        self.last_index.store(
            log_id.index.checked_sub(1).unwrap_or(NONE),
            Ordering::Release,
        );
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let r: larch::Result<()> = (|| {
            let mut tx = self.db.begin_write()?;
            tx.set_durability(Durability::Async);
            {
                let upto = index_key(log_id.index);
                tx.open_tree(LOG_TREE)?.remove_range(..=&upto[..])?;
                tx.open_tree(LOG_META_TREE)?
                    .insert(PURGED_KEY, &encode(&log_id))?;
            }
            tx.commit()
        })();
        r.map_err(|e| write_logs(&e))
    }
}

/// The flush thread: takes the callbacks of the appends made so far, syncs the file once,
/// fires them.
struct Flusher<C: RaftTypeConfig> {
    tx: Option<mpsc::Sender<LogFlushed<C>>>,
    thread: Option<JoinHandle<()>>,
}

impl<C: RaftTypeConfig> Flusher<C> {
    fn spawn(db: Db, last_index: Arc<AtomicU64>, hook: Option<FlushHook>) -> Self {
        let (tx, rx) = mpsc::channel::<LogFlushed<C>>();
        let thread = std::thread::Builder::new()
            .name("larch-raft-flush".into())
            .spawn(move || {
                // Ends when the store (the only sender) is dropped.
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    // Every callback in `batch` was queued after its append committed, so
                    // this sync covers them all (and whatever was appended since).
                    let index = last_index.load(Ordering::Acquire);
                    let r = db.sync();
                    if r.is_ok() {
                        if let Some(hook) = &hook {
                            hook((index != NONE).then_some(index));
                        }
                    }
                    for cb in batch {
                        cb.log_io_completed(
                            r.as_ref()
                                .map(|_| ())
                                .map_err(|e| std::io::Error::other(e.to_string())),
                        );
                    }
                }
            })
            .expect("spawn the larch-raft flush thread");
        Flusher {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn send(&self, cb: LogFlushed<C>) {
        if let Some(tx) = &self.tx {
            // The thread lives as long as the sender; a send fails only if it panicked.
            if let Err(mpsc::SendError(cb)) = tx.send(cb) {
                cb.log_io_completed(Err(std::io::Error::other("larch-raft flush thread died")));
            }
        }
    }
}

impl<C: RaftTypeConfig> Drop for Flusher<C> {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
