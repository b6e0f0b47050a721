//! An in-memory log store and state machine for [`TypeConfig`]: nothing is durable, an
//! append is acknowledged as soon as it is in the map. It is the ceiling the `cluster`
//! bench measures the larch store against (the same cluster, network and requests, with
//! storage that costs only memory). openraft's own in-memory store, `openraft-memstore`
//! 0.9, implements the v1 `RaftStorage`, which cannot be used once `storage-v2` is on, and
//! has its own request type; this one is the same size of code on the v2 traits.
//! It passes openraft's storage suite too (`tests/raft/suite.rs`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, LogState, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StoredMembership, Vote,
};

use crate::codec::write_snapshot;
use crate::state_machine::{parse_snapshot, push_pair};
use crate::{NodeId, Request, Response, TypeConfig};

type Meta = SnapshotMeta<NodeId, BasicNode>;
type Membership = StoredMembership<NodeId, BasicNode>;

#[derive(Default)]
struct LogInner {
    log: BTreeMap<u64, Entry<TypeConfig>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
}

/// The in-memory log; clones share it (a clone is its own log reader).
#[derive(Clone, Default)]
pub struct MemLog {
    inner: Arc<Mutex<LogInner>>,
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.inner.lock().unwrap();
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = MemLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.inner.lock().unwrap();
        let last = inner.log.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: last.or(inner.purged),
        })
    }

    async fn get_log_reader(&mut self) -> MemLog {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().unwrap().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().unwrap().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().unwrap().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().unwrap().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut inner = self.inner.lock().unwrap();
            for e in entries {
                inner.log.insert(e.log_id.index, e);
            }
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().unwrap().log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock().unwrap();
        inner.log = inner.log.split_off(&(log_id.index + 1));
        inner.purged = Some(log_id);
        Ok(())
    }
}

#[derive(Default)]
struct SmInner {
    data: BTreeMap<String, String>,
    applied: Option<LogId<NodeId>>,
    membership: Membership,
    current: Option<(Meta, Vec<u8>)>,
    builds: u64,
}

/// The in-memory key-value state machine; clones share it (a clone is its own snapshot
/// builder).
#[derive(Clone, Default)]
pub struct MemStateMachine {
    inner: Arc<Mutex<SmInner>>,
}

impl MemStateMachine {
    /// `key`'s value.
    pub fn get(&self, key: &str) -> Option<String> {
        self.inner.lock().unwrap().data.get(key).cloned()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for MemStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let mut inner = self.inner.lock().unwrap();
        let mut data = Vec::new();
        for (k, v) in &inner.data {
            push_pair(&mut data, k.as_bytes(), v.as_bytes());
        }
        inner.builds += 1;
        let meta = Meta {
            last_log_id: inner.applied,
            last_membership: inner.membership.clone(),
            snapshot_id: format!("mem-{}", inner.builds),
        };
        inner.current = Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for MemStateMachine {
    type SnapshotBuilder = MemStateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let inner = self.inner.lock().unwrap();
        Ok((inner.applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.inner.lock().unwrap();
        let mut replies = Vec::new();
        for e in entries {
            inner.applied = Some(e.log_id);
            let previous = match e.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(Request::Set { key, value }) => inner.data.insert(key, value),
                EntryPayload::Normal(Request::Delete { key }) => inner.data.remove(&key),
                EntryPayload::Membership(m) => {
                    inner.membership = Membership::new(Some(e.log_id), m);
                    None
                }
            };
            replies.push(Response { previous });
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> MemStateMachine {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let pairs = parse_snapshot(&bytes).map_err(|e| write_snapshot(&e))?;
        let data = pairs
            .into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        let mut inner = self.inner.lock().unwrap();
        inner.data = data;
        inner.applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.current = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.inner.lock().unwrap();
        Ok(inner.current.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}
