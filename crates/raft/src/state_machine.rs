//! openraft's `RaftStateMachine` on larch: a key-value map in [`SM_DATA_TREE`], the applied log
//! id and membership in [`SM_META_TREE`], committed together; snapshots are larch read
//! snapshots of the file.

use std::fmt::Debug;
use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use larch::{Db, Durability, ReadTx};
use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageError, StoredMembership,
};

use crate::codec::{
    blocking, decode, encode, read_sm, read_snapshot, write_sm, write_snapshot, Failure,
};
use crate::{
    NodeId, Request, Response, TypeConfig, APPLIED_KEY, MEMBERSHIP_KEY, SM_DATA_TREE, SM_META_TREE,
};

type Meta = SnapshotMeta<NodeId, BasicNode>;
type Membership = StoredMembership<NodeId, BasicNode>;

/// The key-value state machine of one node, over a larch [`Db`] (the same file as its
/// [`crate::LogStore`]).
///
/// `apply` writes the data, the applied log id and the membership in one `Async` commit (the
/// crate docs say why that is safe). A snapshot is a larch [`ReadTx`] taken when it is
/// built: it costs no copy until it is sent, and keeps the pages it sees from reuse until the
/// next snapshot replaces it (so the file holds at most the data as of the last snapshot plus
/// what changed since).
pub struct StateMachine {
    db: Db,
    current: Arc<Mutex<Option<Current>>>,
    builds: Arc<AtomicU64>,
}

impl Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine")
            .field("path", &self.db.path())
            .finish_non_exhaustive()
    }
}

/// The current snapshot: its meta and the read transaction its data is read from.
struct Current {
    meta: Meta,
    rx: ReadTx,
}

/// Builds a snapshot of the state machine as it is when `build_snapshot` runs.
pub struct SnapshotBuilder {
    db: Db,
    current: Arc<Mutex<Option<Current>>>,
    builds: Arc<AtomicU64>,
}

impl StateMachine {
    /// The state machine over `db`; creates its trees if missing.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = larch::Db::open(dir.path().join("n.larch"), larch::Options::default())?;
    /// let sm = larch_raft::StateMachine::new(db)?;
    /// assert_eq!(sm.get(b"k")?, None);
    /// # Ok::<(), larch::Error>(())
    /// ```
    pub fn new(db: Db) -> Result<Self, larch::Error> {
        crate::ensure_trees(&db, &[SM_DATA_TREE, SM_META_TREE])?;
        Ok(StateMachine {
            db,
            current: Default::default(),
            builds: Default::default(),
        })
    }

    /// The handle the state machine writes through.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// `key`'s value as of the last applied entry (a read of the local state machine: not
    /// linearizable unless the caller made sure, e.g. with `Raft::ensure_linearizable`).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, larch::Error> {
        let rx = self.db.begin_read()?;
        let v = rx.open_tree(SM_DATA_TREE)?.get(key)?.map(<[u8]>::to_vec);
        Ok(v)
    }

    fn builder(&self) -> SnapshotBuilder {
        SnapshotBuilder {
            db: self.db.clone(),
            current: self.current.clone(),
            builds: self.builds.clone(),
        }
    }
}

/// The applied log id and membership as of `rx`.
fn applied_in(rx: &ReadTx) -> Result<(Option<LogId<NodeId>>, Membership), Failure> {
    let meta = rx.open_tree(SM_META_TREE)?;
    let applied = match meta.get(APPLIED_KEY)? {
        Some(v) => decode(v)?,
        None => None,
    };
    let membership = match meta.get(MEMBERSHIP_KEY)? {
        Some(v) => decode(v)?,
        None => Membership::default(),
    };
    Ok((applied, membership))
}

/// The snapshot stream of the data tree as of `rx`: for each entry in key order, the key's
/// length (u32, big-endian), the key, the value's length, the value.
fn snapshot_bytes(rx: &ReadTx) -> Result<Vec<u8>, Failure> {
    let data = rx.open_tree(SM_DATA_TREE)?;
    let mut out = Vec::new();
    for item in data.iter()? {
        let (k, v) = item?;
        push_pair(&mut out, k, v);
    }
    Ok(out)
}

/// Append one entry to a snapshot stream.
pub(crate) fn push_pair(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    out.extend_from_slice(&(k.len() as u32).to_be_bytes());
    out.extend_from_slice(k);
    out.extend_from_slice(&(v.len() as u32).to_be_bytes());
    out.extend_from_slice(v);
}

/// Keys and values, borrowed from a snapshot stream.
pub(crate) type Pairs<'a> = Vec<(&'a [u8], &'a [u8])>;

/// The entries of a snapshot stream (see [`snapshot_bytes`]).
pub(crate) fn parse_snapshot(mut b: &[u8]) -> Result<Pairs<'_>, Failure> {
    fn take<'a>(b: &mut &'a [u8]) -> Result<&'a [u8], Failure> {
        if b.len() < 4 {
            return Err(Failure::BadSnapshot("a length is cut short"));
        }
        let n = u32::from_be_bytes(b[..4].try_into().unwrap()) as usize;
        if b.len() - 4 < n {
            return Err(Failure::BadSnapshot("a key or value is cut short"));
        }
        let (item, rest) = b[4..].split_at(n);
        *b = rest;
        Ok(item)
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let k = take(&mut b)?;
        let v = take(&mut b)?;
        out.push((k, v));
    }
    Ok(out)
}

impl SnapshotBuilder {
    fn build(&mut self) -> Result<Snapshot<TypeConfig>, Failure> {
        // One read snapshot: the data and the applied log id it is tagged with agree, since
        // `apply` commits them together.
        let rx = self.db.begin_read()?;
        let (last_log_id, last_membership) = applied_in(&rx)?;
        let n = self.builds.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match &last_log_id {
            Some(l) => format!(
                "{}-{}-{}-{n}",
                l.leader_id.term, l.leader_id.node_id, l.index
            ),
            None => format!("none-{n}"),
        };
        let meta = Meta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        let data = snapshot_bytes(&rx)?;
        *self.current.lock().unwrap() = Some(Current {
            meta: meta.clone(),
            rx,
        });
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let mut b = SnapshotBuilder {
            db: self.db.clone(),
            current: self.current.clone(),
            builds: self.builds.clone(),
        };
        blocking(move || b.build())
            .await
            .map_err(|e| read_snapshot(&e))
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let rx = self.db.begin_read().map_err(|e| read_sm(&e))?;
        applied_in(&rx).map_err(|e| read_sm(&e))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let db = self.db.clone();
        blocking(move || apply_entries(&db, entries))
            .await
            .map_err(|e| write_sm(&e))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.builder()
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
        let (db, current, meta) = (self.db.clone(), self.current.clone(), meta.clone());
        blocking(move || install(&db, &current, meta, &bytes))
            .await
            .map_err(|e| write_snapshot(&e))
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        // None built or installed since the file was opened: `None`. Openraft then builds
        // one at startup if the log has been purged (the durable state machine covers every
        // purged entry, as the crate docs argue), and never needs one otherwise.
        let Some((meta, rx)) = self
            .current
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| (c.meta.clone(), c.rx.clone()))
        else {
            return Ok(None);
        };
        let data = blocking(move || snapshot_bytes(&rx))
            .await
            .map_err(|e| read_snapshot(&e))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

/// Apply `entries` in one `Async` commit: the data, the applied log id and the membership.
fn apply_entries(
    db: &Db,
    entries: Vec<openraft::Entry<TypeConfig>>,
) -> Result<Vec<Response>, Failure> {
    let mut replies = Vec::with_capacity(entries.len());
    let mut tx = db.begin_write()?;
    // The log is the source of truth: a crash may lose this commit, and openraft applies the
    // entries again from the log.
    tx.set_durability(Durability::Async);
    {
        let mut data = tx.open_tree(SM_DATA_TREE)?;
        let mut last = None;
        let mut membership = None;
        for entry in entries {
            let mut reply = Response::default();
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(Request::Set { key, value }) => {
                    let k = key.as_bytes();
                    reply.previous = data
                        .get(k)?
                        .map(|v| String::from_utf8_lossy(v).into_owned());
                    data.insert(k, value.as_bytes())?;
                }
                EntryPayload::Normal(Request::Delete { key }) => {
                    let k = key.as_bytes();
                    reply.previous = data
                        .get(k)?
                        .map(|v| String::from_utf8_lossy(v).into_owned());
                    data.remove(k)?;
                }
                EntryPayload::Membership(m) => {
                    membership = Some(Membership::new(Some(entry.log_id), m));
                }
            }
            last = Some(entry.log_id);
            replies.push(reply);
        }
        drop(data);
        let mut meta = tx.open_tree(SM_META_TREE)?;
        if let Some(last) = last {
            meta.insert(APPLIED_KEY, &encode(&Some(last)))?;
        }
        if let Some(m) = membership {
            meta.insert(MEMBERSHIP_KEY, &encode(&m))?;
        }
    }
    tx.commit()?;
    Ok(replies)
}

/// Replace the state machine with the snapshot stream `bytes` tagged `meta`, in one `Sync`
/// commit, and make it the current snapshot.
fn install(
    db: &Db,
    current: &Mutex<Option<Current>>,
    meta: Meta,
    bytes: &[u8],
) -> Result<(), Failure> {
    // Parsed whole before the file is touched: a bad stream changes nothing.
    let pairs = parse_snapshot(bytes)?;
    let mut tx = db.begin_write()?;
    // The node acknowledges the snapshot when this returns.
    tx.set_durability(Durability::Sync);
    {
        let mut data = tx.open_tree(SM_DATA_TREE)?;
        data.remove_range::<std::ops::RangeFull>(..)?;
        for (k, v) in pairs {
            // The stream is in key order: the sorted bulk load; out of order, it is not a
            // stream `build_snapshot` made.
            data.append(k, v).map_err(|e| match e {
                larch::Error::KeyNotGreater { .. } => Failure::BadSnapshot("keys out of order"),
                e => Failure::Larch(e),
            })?;
        }
        drop(data);
        let mut m = tx.open_tree(SM_META_TREE)?;
        m.insert(APPLIED_KEY, &encode(&meta.last_log_id))?;
        m.insert(MEMBERSHIP_KEY, &encode(&meta.last_membership))?;
    }
    tx.commit()?;
    // The state machine's worker runs one call at a time: nothing was applied since the
    // commit, so this read is the installed state.
    let rx = db.begin_read()?;
    *current.lock().unwrap() = Some(Current { meta, rx });
    Ok(())
}

/// The entries of `tree` in `larch dump`'s format: one `HEXKEY<TAB>HEXVALUE` line per
/// entry, in key order, lowercase hex. Tests compare nodes' state machines with it.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let db = larch::Db::open(dir.path().join("n.larch"), larch::Options::default())?;
/// let tx = db.begin_write()?;
/// tx.open_tree("t")?.insert(b"k", b"v")?;
/// tx.commit()?;
/// assert_eq!(larch_raft::dump_tree(&db, "t")?, "6b\t76\n");
/// # Ok::<(), larch::Error>(())
/// ```
pub fn dump_tree(db: &Db, tree: &str) -> Result<String, larch::Error> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let hex = |bytes: &[u8], out: &mut String| {
        for &b in bytes {
            out.push(DIGITS[(b >> 4) as usize] as char);
            out.push(DIGITS[(b & 15) as usize] as char);
        }
    };
    let rx = db.begin_read()?;
    let t = rx.open_tree(tree)?;
    let mut out = String::new();
    for item in t.iter()? {
        let (k, v) = item?;
        hex(k, &mut out);
        out.push('\t');
        hex(v, &mut out);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_stream_parses_back_and_a_cut_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("t.larch"), Default::default()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree(SM_DATA_TREE).unwrap();
            for i in 0..300u32 {
                t.insert(format!("k{i:05}").as_bytes(), &vec![b'v'; i as usize])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
        let bytes = snapshot_bytes(&db.begin_read().unwrap()).unwrap();
        let pairs = parse_snapshot(&bytes).unwrap();
        assert_eq!(pairs.len(), 300);
        assert_eq!(pairs[7], (&b"k00007"[..], &b"vvvvvvv"[..]));
        for cut in [1, 3, 5, 9, bytes.len() - 1] {
            assert!(matches!(
                parse_snapshot(&bytes[..cut]),
                Err(Failure::BadSnapshot(_))
            ));
        }
        assert!(parse_snapshot(&[]).unwrap().is_empty());
    }
}
