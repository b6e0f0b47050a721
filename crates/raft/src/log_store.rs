//! openraft's `RaftLogStorage` on larch: entries by index in [`LOG_TREE`], the vote, the
//! committed and the last purged log id in [`LOG_META_TREE`], appends written and made
//! durable by a log thread that group-commits them (the crate docs say why each write has
//! the durability it has).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use larch::{Db, Durability, ReadTx};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{
    blocking, borrow_bounds, decode, encode, index_key, key_bounds, read_logs, read_vote,
    write_logs, write_vote, Failure,
};
use crate::{COMMITTED_KEY, LOG_META_TREE, LOG_TREE, PURGED_KEY, VOTE_KEY};

/// Called by the log thread after each sync, before it fires the callbacks that sync
/// acknowledged, with the last log index in the file when the sync began (`None`: the log
/// was empty). Tests use it to know which appends were acknowledged at a given point of the
/// file's I/O.
pub type FlushHook = Arc<dyn Fn(Option<u64>) + Send + Sync>;

/// The Raft log of one node: a `RaftLogStorage` over a larch [`Db`] (it shares the file
/// with the state machine: pass it a clone of the same handle).
///
/// `append` only queues its entries (encoded) and returns: they are readable from the
/// queue at once. The store's log thread writes everything queued in one `Async` commit,
/// syncs the file once with [`Db::sync`] and then fires the callbacks of every append it
/// wrote: **group commit**. Appends that arrive while it syncs queue up for the next round
/// (under openraft 0.9 none do: its core awaits each append's callback before the next).
/// Dropping the store lets the thread write and sync what is queued, then stops it.
pub struct LogStore<C: RaftTypeConfig> {
    db: Db,
    shared: Arc<Shared<C>>,
    thread: Option<JoinHandle<()>>,
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
    shared: Arc<Shared<C>>,
}

/// What the store and its log thread share.
struct Shared<C: RaftTypeConfig> {
    queue: Mutex<Queue<C>>,
    /// Signalled when there is work for the log thread.
    work: Condvar,
    /// Signalled when the log thread has written a round (the queue may be empty now).
    written: Condvar,
}

/// The appends not yet in the file.
struct Queue<C: RaftTypeConfig> {
    /// Entries by index: log id and encoding. They stay here until the commit that writes
    /// them is visible, so a reader finds each entry in the queue, the file, or both.
    entries: BTreeMap<u64, (LogId<C::NodeId>, Vec<u8>)>,
    /// Callbacks of the appends queued, in order.
    callbacks: Vec<LogFlushed<C>>,
    /// A committed log id to write with the next round.
    committed: Option<Option<LogId<C::NodeId>>>,
    /// The last committed log id saved since the store was made (what `read_committed`
    /// returns before it reaches the file).
    last_committed: Option<Option<LogId<C::NodeId>>>,
    /// The log thread is writing a round taken from here.
    writing: bool,
    /// The store is dropped: write what is queued and stop.
    closed: bool,
}

impl<C: RaftTypeConfig> Shared<C> {
    fn lock(&self) -> MutexGuard<'_, Queue<C>> {
        // A panic while holding this lock leaves nothing half-done that matters more than
        // failing loudly later.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until every queued append is in the file (not necessarily durable).
    fn drain(&self) {
        let mut q = self.lock();
        while !q.entries.is_empty() || q.writing {
            q = self.written.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The queued entries in `range`, decoded.
    fn queued<R: RangeBounds<u64>>(&self, range: R) -> Result<Vec<(u64, C::Entry)>, Failure>
    where
        C::Entry: DeserializeOwned,
    {
        let q = self.lock();
        let mut out = Vec::new();
        for (&i, (_, bytes)) in q.entries.range(range) {
            out.push((i, decode(bytes)?));
        }
        Ok(out)
    }
}

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

    /// [`LogStore::new`], calling `hook` after each sync of the log thread.
    pub fn with_flush_hook(db: Db, hook: Option<FlushHook>) -> Result<Self, larch::Error> {
        crate::ensure_trees(&db, &[LOG_TREE, LOG_META_TREE])?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                entries: BTreeMap::new(),
                callbacks: Vec::new(),
                committed: None,
                last_committed: None,
                writing: false,
                closed: false,
            }),
            work: Condvar::new(),
            written: Condvar::new(),
        });
        let thread = {
            let (db, shared) = (db.clone(), shared.clone());
            std::thread::Builder::new()
                .name("larch-raft-log".into())
                .spawn(move || log_thread(db, shared, hook))
                .expect("spawn the larch-raft log thread")
        };
        Ok(LogStore {
            db,
            shared,
            thread: Some(thread),
        })
    }

    /// The handle the store writes through.
    pub fn db(&self) -> &Db {
        &self.db
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

/// Run `edit` on the log trees in one `Async` commit, after every queued append is in the
/// file (truncate and purge: rare, and simplest in order).
fn edit_after_queue<C: RaftTypeConfig>(
    db: &Db,
    shared: &Shared<C>,
    edit: impl FnOnce(&mut larch::WriteTree, &mut larch::WriteTree) -> larch::Result<()>,
) -> larch::Result<()> {
    shared.drain();
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Async);
    {
        let mut log = tx.open_tree(LOG_TREE)?;
        let mut meta = tx.open_tree(LOG_META_TREE)?;
        edit(&mut log, &mut meta)?;
    }
    tx.commit()
}

impl<C: RaftTypeConfig> Drop for LogStore<C> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The log thread: write what is queued in one `Async` commit, sync, fire the callbacks;
/// again, until the store is dropped and the queue is empty.
fn log_thread<C: RaftTypeConfig>(db: Db, shared: Arc<Shared<C>>, hook: Option<FlushHook>) {
    loop {
        let (batch, callbacks, committed) = {
            let mut q = shared.lock();
            while q.entries.is_empty()
                && q.callbacks.is_empty()
                && q.committed.is_none()
                && !q.closed
            {
                q = shared.work.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            if q.entries.is_empty() && q.callbacks.is_empty() && q.committed.is_none() {
                return; // closed, and nothing left
            }
            q.writing = true;
            let batch: Vec<(u64, Vec<u8>)> = q
                .entries
                .iter()
                .map(|(&i, (_, b))| (i, b.clone()))
                .collect();
            (batch, std::mem::take(&mut q.callbacks), q.committed.take())
        };
        let written = write_round(&db, &batch, committed);
        {
            let mut q = shared.lock();
            // Visible in the file now (or failed): out of the queue either way, so that a
            // truncate or purge waiting for the queue does not wait forever.
            for (i, _) in &batch {
                q.entries.remove(i);
            }
            q.writing = false;
        }
        shared.written.notify_all();
        if callbacks.is_empty() {
            continue;
        }
        // Every callback taken was queued after its entries, so this sync covers them all.
        let r = written.and_then(|last| {
            db.sync()?;
            Ok(last)
        });
        if let (Ok(last), Some(hook)) = (&r, &hook) {
            hook(*last);
        }
        for cb in callbacks {
            cb.log_io_completed(
                r.as_ref()
                    .map(|_| ())
                    .map_err(|e| std::io::Error::other(e.to_string())),
            );
        }
    }
}

/// Write `batch` (and the committed log id, if one was saved) in one `Async` commit; returns
/// the log's last index after it.
fn write_round<NID: openraft::NodeId>(
    db: &Db,
    batch: &[(u64, Vec<u8>)],
    committed: Option<Option<LogId<NID>>>,
) -> larch::Result<Option<u64>> {
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Async);
    let last = {
        let mut log = tx.open_tree(LOG_TREE)?;
        for (i, bytes) in batch {
            let key = index_key(*i);
            // Entries come after the last one (openraft truncates a conflicting suffix
            // first), so the sorted bulk load applies; an overwrite, should one come, is an
            // insert.
            match log.append(&key, bytes) {
                Err(larch::Error::KeyNotGreater { .. }) => log.insert(&key, bytes)?,
                r => r?,
            }
        }
        if let Some(c) = committed {
            tx.open_tree(LOG_META_TREE)?
                .insert(COMMITTED_KEY, &encode(&c))?;
        }
        let last = log.last()?.and_then(|(k, _)| crate::codec::key_index(k));
        last
    };
    tx.commit()?;
    Ok(last)
}

/// Every entry in `range`: the queued ones, then (for indexes the queue does not have) the
/// file's, decoded straight from the map of one read snapshot. The queue is read first: an
/// entry that leaves it in between is in the file by then.
fn read_entries<C>(
    db: &Db,
    shared: &Shared<C>,
    range: impl RangeBounds<u64> + Clone,
) -> Result<Vec<C::Entry>, StorageError<C::NodeId>>
where
    C: RaftTypeConfig,
    C::Entry: DeserializeOwned,
{
    let queued = shared.queued(range.clone()).map_err(|e| read_logs(&e))?;
    let rx = db.begin_read().map_err(|e| read_logs(&e))?;
    let log = rx.open_tree(LOG_TREE).map_err(|e| read_logs(&e))?;
    let bounds = key_bounds(&range);
    let first_queued = queued.first().map_or(u64::MAX, |(i, _)| *i);
    let mut out = Vec::new();
    for item in log
        .range(borrow_bounds(&bounds))
        .map_err(|e| read_logs(&e))?
    {
        let (k, v) = item.map_err(|e| read_logs(&e))?;
        if crate::codec::key_index(k).is_some_and(|i| i >= first_queued) {
            break;
        }
        out.push(decode(v).map_err(|e| read_logs(&e))?);
    }
    out.extend(queued.into_iter().map(|(_, e)| e));
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
        read_entries::<C>(&self.db, &self.shared, range)
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
        read_entries::<C>(&self.db, &self.shared, range)
    }
}

impl<C> RaftLogStorage<C> for LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    type LogReader = LogReader<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        // The queue first (see `read_entries`); then one read snapshot, so the purged id and
        // the last entry in the file agree.
        let queued_last = self
            .shared
            .lock()
            .entries
            .values()
            .next_back()
            .map(|(id, _)| id.clone());
        let rx = self.db.begin_read().map_err(|e| read_logs(&e))?;
        let meta = rx.open_tree(LOG_META_TREE).map_err(|e| read_logs(&e))?;
        let last_purged_log_id: Option<LogId<C::NodeId>> =
            match meta.get(PURGED_KEY).map_err(|e| read_logs(&e))? {
                Some(v) => Some(decode(v).map_err(|e| read_logs(&e))?),
                None => None,
            };
        let last_log_id = queued_last
            .or(last_log_id::<C>(&rx)?)
            .or_else(|| last_purged_log_id.clone());
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader {
            db: self.db.clone(),
            shared: self.shared.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        // Durable before openraft acts on it; nothing else would sync it.
        let (db, bytes) = (self.db.clone(), encode(vote));
        let r = blocking(move || -> larch::Result<()> {
            let mut tx = db.begin_write()?;
            tx.set_durability(Durability::Sync);
            tx.open_tree(LOG_META_TREE)?.insert(VOTE_KEY, &bytes)?;
            tx.commit()
        });
        r.await.map_err(|e| write_vote(&e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        self.get_meta(VOTE_KEY).map_err(|e| read_vote(&e))
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        // Written with the next round of appends, so it never reaches the file before the
        // entries it covers.
        let mut q = self.shared.lock();
        q.committed = Some(committed.clone());
        q.last_committed = Some(committed);
        drop(q);
        self.shared.work.notify_one();
        Ok(())
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        if let Some(c) = self.shared.lock().last_committed.clone() {
            return Ok(c);
        }
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
        // Encoded here, out of the lock; readable from the queue once queued; written and
        // synced by the log thread, which then calls `callback`.
        let encoded: Vec<(u64, LogId<C::NodeId>, Vec<u8>)> = entries
            .into_iter()
            .map(|e| {
                let id = e.get_log_id().clone();
                (id.index, id, encode(&e))
            })
            .collect();
        let mut q = self.shared.lock();
        for (i, id, bytes) in encoded {
            q.entries.insert(i, (id, bytes));
        }
        q.callbacks.push(callback);
        drop(q);
        self.shared.work.notify_one();
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let (db, shared) = (self.db.clone(), self.shared.clone());
        let from = index_key(log_id.index);
        blocking(move || {
            edit_after_queue(&db, &shared, |log, _| {
                log.remove_range(&from[..]..).map(|_| ())
            })
        })
        .await
        .map_err(|e| write_logs(&e))
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let (db, shared) = (self.db.clone(), self.shared.clone());
        let upto = index_key(log_id.index);
        let purged = encode(&log_id);
        blocking(move || {
            edit_after_queue(&db, &shared, |log, meta| {
                log.remove_range(..=&upto[..])?;
                meta.insert(PURGED_KEY, &purged)
            })
        })
        .await
        .map_err(|e| write_logs(&e))
    }
}
