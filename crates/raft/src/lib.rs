//! larch as the storage of an [openraft](https://docs.rs/openraft/0.9) cluster: the Raft log,
//! the vote and a key-value state machine in one larch file, with openraft doing the
//! consensus (as etcd runs bbolt under Raft and TiKV runs RocksDB).
//!
//! - [`LogStore`] is openraft's `RaftLogStorage` (and `RaftLogReader`): log entries keyed by
//!   index in the tree [`LOG_TREE`], the vote, the committed log id and the last purged log
//!   id in [`LOG_META_TREE`]. `truncate` and `purge` are range deletes; reads are range scans
//!   that decode each entry straight from the map. It is generic over the
//!   `RaftTypeConfig`, so any state machine can sit beside it.
//! - [`StateMachine`] is openraft's `RaftStateMachine` for [`TypeConfig`]: a key-value map
//!   in [`SM_DATA_TREE`], the applied log id and the membership in [`SM_META_TREE`], written
//!   in the same transaction as the data they describe. A snapshot is a larch read snapshot
//!   of the file (no copy is made until it is sent); installing one replaces the data, the
//!   applied log id and the membership in one transaction.
//! - [`network::Router`] and [`cluster::Cluster`] run several nodes in one process (tests, the
//!   `raft_kv` example, the `cluster` bench); [`mem`] is an in-memory store, the ceiling the
//!   bench measures larch against.
//!
//! # Durability: which commits sync, and why that is enough
//!
//! One file holds the log and the state machine, and larch commits are totally ordered: a
//! crash opens the file at exactly its last durable commit, so **if a commit is durable, so is
//! every commit before it**, whichever tree it wrote. Each write therefore asks only for the
//! durability its own promise needs:
//!
//! - **`append`**: openraft wants the entries readable when `append` returns and the callback
//!   called once they are on disk. So `append` only queues them (encoded; readers find them
//!   in the queue) and returns. The store's log thread writes everything queued in one
//!   `Async` commit, calls [`larch::Db::sync`] once and then fires the callbacks of every
//!   append it wrote: **group commit** of the log. A callback never fires before its
//!   entries, and everything committed before them, are durable. How much a round holds is
//!   up to the caller: openraft 0.9's core task awaits each append's callback before it runs
//!   its next command (`RaftCore::append_to_log`), so under 0.9 a round is one append (one
//!   client write on a leader, one AppendEntries batch on a follower), and the leader's
//!   write rate is bounded by one log round per write; appends that do overlap share a round.
//! - **`save_vote`**: `Sync`. A vote must survive a crash before the node answers the
//!   candidate, and nothing else would sync it.
//! - **`save_committed`**: written with the next round of appends (`Async`), so it never
//!   reaches the file before the entries it covers.
//! - **`apply`**: `Async`. **The log is the source of truth.** The state machine may fall back
//!   after a crash, to an applied log id whose entries are still in the log: openraft
//!   re-applies from the log on restart (from the applied log id up to the committed one
//!   this store keeps) or from the leader. If it is durable *ahead* of the log (a follower
//!   may apply an entry that is still in its queue, and a vote's sync may land between), the
//!   entries it applied were committed by a quorum, and openraft's startup treats such a
//!   state machine as a snapshot and purges the log up to it.
//! - **`purge`**, **`truncate`**: `Async`, after the queue is written. A lost purge leaves
//!   extra log entries (harmless); a lost truncate leaves entries the next append's truncate
//!   removes again, and a later append cannot be durable without it. Openraft purges only
//!   entries that a snapshot covers, and a durable purge implies the durable state machine
//!   reached that snapshot (it was applied before the purge was committed), so the log never
//!   loses an entry the state machine still needs.
//! - **`install_snapshot`**: `Sync`. The node tells the leader it holds the snapshot as soon
//!   as this returns.
//!
//! `Async` commits also cost no sync of their own: every fdatasync the log thread or a vote
//! does makes all of them durable too. Calls that wait for the disk (a vote's sync, a commit
//! that waits for a sync in progress, building or installing a snapshot) run on tokio's
//! blocking threads: a larch commit waits for a `Db::sync` of the same file in progress, and
//! when the first version of this crate committed appends and applies on the runtime's own
//! workers (two, on a 2-core machine), those waits stalled every node of the process
//! (docs/benchmarks.md, "larch under openraft").
//!
//! # Encoding
//!
//! Entries, votes, log ids and memberships are stored as JSON (`serde_json`): it is already a
//! dependency of the workspace (no new crate), it is self-describing (a stored entry still
//! decodes after a request type gains an optional field), and an entry of a one-key write is
//! about 150 bytes, small next to the 4 KiB pages its commit writes. Log keys are the index
//! as 8 big-endian bytes (they sort numerically); state machine keys and values are the
//! strings' bytes, stored as they are, so `larch dump --tree sm.data` shows the data itself.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use larch_raft::{network::Router, Request, TypeConfig};
//! use openraft::{BasicNode, Config, Raft};
//!
//! let dir = tempfile::tempdir()?;
//! let db = larch::Db::open(dir.path().join("node1.larch"), larch::Options::default())?;
//! let (log, sm) = larch_raft::stores(db.clone())?;
//! let router = Router::default();
//! let config = Arc::new(Config::default().validate()?);
//! let raft: Raft<TypeConfig> = Raft::new(1, config, router.clone(), log, sm).await?;
//! router.add(1, raft.clone());
//! raft.initialize(BTreeMap::from([(1, BasicNode::default())])).await?;
//! raft.client_write(Request::set("k", "v")).await?;
//! let rx = db.begin_read()?;
//! assert_eq!(rx.open_tree(larch_raft::SM_DATA_TREE)?.get(b"k")?, Some(&b"v"[..]));
//! raft.shutdown().await?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// openraft's traits return its `StorageError` and `RPCError` (over 128 bytes); the helpers
// that build them return them too.
#![allow(clippy::result_large_err)]

pub mod cluster;
mod codec;
mod log_store;
pub mod mem;
pub mod network;
mod state_machine;

use std::io::Cursor;

use serde::{Deserialize, Serialize};

pub use log_store::{FlushHook, LogReader, LogStore};
pub use state_machine::{dump_tree, SnapshotBuilder, StateMachine};

/// Log entries: key = the index as 8 big-endian bytes, value = the entry (JSON).
pub const LOG_TREE: &str = "raft.log";
/// The log's markers: [`VOTE_KEY`], [`COMMITTED_KEY`], [`PURGED_KEY`] (JSON).
pub const LOG_META_TREE: &str = "raft.meta";
/// The state machine's data: key and value bytes as the client wrote them.
pub const SM_DATA_TREE: &str = "sm.data";
/// The state machine's markers: [`APPLIED_KEY`], [`MEMBERSHIP_KEY`] (JSON).
pub const SM_META_TREE: &str = "sm.meta";

/// In [`LOG_META_TREE`]: the vote.
pub const VOTE_KEY: &[u8] = b"vote";
/// In [`LOG_META_TREE`]: the last committed log id openraft reported.
pub const COMMITTED_KEY: &[u8] = b"committed";
/// In [`LOG_META_TREE`]: the last purged log id.
pub const PURGED_KEY: &[u8] = b"purged";
/// In [`SM_META_TREE`]: the last applied log id.
pub const APPLIED_KEY: &[u8] = b"applied";
/// In [`SM_META_TREE`]: the last applied membership (a `StoredMembership`).
pub const MEMBERSHIP_KEY: &[u8] = b"membership";

/// A node's id.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The type configuration of the key-value cluster: [`Request`] in, [`Response`] out,
    /// `u64` node ids, `BasicNode` addresses, snapshots as bytes.
    pub TypeConfig:
        D = Request,
        R = Response,
);

/// A client's write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Set `key` to `value`.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: String,
    },
}

impl Request {
    /// `Request::Set` of `key` and `value`.
    ///
    /// ```
    /// assert_eq!(
    ///     larch_raft::Request::set("k", "v"),
    ///     larch_raft::Request::Set { key: "k".into(), value: "v".into() }
    /// );
    /// ```
    pub fn set(key: impl Into<String>, value: impl Into<String>) -> Request {
        Request::Set {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// What applying a [`Request`] returns: the key's value before it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The previous value, if the key was set.
    pub previous: Option<String>,
}

/// The log store and the state machine of one node, both on `db` (clones of one handle: one
/// file). Creates the four trees if they are missing.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let db = larch::Db::open(dir.path().join("n.larch"), larch::Options::default())?;
/// let (_log, _sm) = larch_raft::stores(db.clone())?;
/// let names = db.begin_read()?.tree_names()?;
/// assert!(names.contains(&larch_raft::LOG_TREE.to_string()));
/// # Ok::<(), larch::Error>(())
/// ```
pub fn stores(db: larch::Db) -> Result<(LogStore<TypeConfig>, StateMachine), larch::Error> {
    Ok((LogStore::new(db.clone())?, StateMachine::new(db)?))
}

/// Create `names` if missing, in one `Sync` commit (nothing is written when all exist).
pub(crate) fn ensure_trees(db: &larch::Db, names: &[&str]) -> Result<(), larch::Error> {
    let existing = db.begin_read()?.tree_names()?;
    if names.iter().all(|n| existing.iter().any(|e| e == n)) {
        return Ok(());
    }
    let mut tx = db.begin_write()?;
    tx.set_durability(larch::Durability::Sync);
    for name in names {
        drop(tx.open_tree(name)?);
    }
    tx.commit()
}

/// The snapshot data type of [`TypeConfig`].
pub type SnapshotData = Cursor<Vec<u8>>;
