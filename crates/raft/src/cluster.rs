//! An in-process cluster over a [`Router`]: start nodes on larch files (or in memory), find
//! the leader, write through it with retries, kill and restart nodes. The `raft_kv` example,
//! the tests and the `cluster` bench drive it; it is not a server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use larch::{Db, Options};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Config, Raft, ServerState};

use crate::mem::{MemLog, MemStateMachine};
use crate::network::Router;
use crate::{LogStore, NodeId, Request, Response, StateMachine, TypeConfig, SM_DATA_TREE};

/// Errors of the cluster helpers, as text.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// What a node stores its state in.
enum Store {
    Larch { db: Db, path: PathBuf },
    Mem(MemStateMachine),
}

/// One running node.
struct Node {
    raft: Raft<TypeConfig>,
    store: Store,
}

/// Nodes of one process, connected by one [`Router`].
pub struct Cluster {
    router: Router,
    config: Arc<Config>,
    nodes: BTreeMap<NodeId, Node>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("running", &self.nodes.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The Raft timing the tests and the example use: heartbeats every 50 ms, elections after
/// 150-300 ms of silence, so a killed leader is replaced within about half a second.
pub fn test_config() -> Config {
    Config {
        cluster_name: "larch-raft".into(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        ..Default::default()
    }
}

impl Cluster {
    /// No nodes yet; every node will run with `config`.
    pub fn new(config: Config) -> Result<Cluster, Error> {
        Ok(Cluster {
            router: Router::default(),
            config: Arc::new(config.validate()?),
            nodes: BTreeMap::new(),
        })
    }

    /// The router the nodes talk through.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Start node `id` on the larch file `db` (its log, vote and state machine; a file from
    /// an earlier run resumes where it was).
    pub async fn start_larch(&mut self, id: NodeId, db: Db) -> Result<(), Error> {
        let log = LogStore::new(db.clone())?;
        self.start_larch_with(id, db, log).await
    }

    /// [`Cluster::start_larch`] with a log store made by the caller (e.g. with a flush hook).
    pub async fn start_larch_with(
        &mut self,
        id: NodeId,
        db: Db,
        log: LogStore<TypeConfig>,
    ) -> Result<(), Error> {
        let sm = StateMachine::new(db.clone())?;
        let raft = Raft::new(id, self.config.clone(), self.router.for_node(id), log, sm).await?;
        self.router.add(id, raft.clone());
        let path = db.path().to_path_buf();
        self.nodes.insert(
            id,
            Node {
                raft,
                store: Store::Larch { db, path },
            },
        );
        Ok(())
    }

    /// Start node `id` on the in-memory store.
    pub async fn start_mem(&mut self, id: NodeId) -> Result<(), Error> {
        let sm = MemStateMachine::default();
        let raft = Raft::new(
            id,
            self.config.clone(),
            self.router.for_node(id),
            MemLog::default(),
            sm.clone(),
        )
        .await?;
        self.router.add(id, raft.clone());
        self.nodes.insert(
            id,
            Node {
                raft,
                store: Store::Mem(sm),
            },
        );
        Ok(())
    }

    /// Make `voters` the cluster's membership, from the first of them (once, on a new
    /// cluster).
    pub async fn initialize(&self, voters: &[NodeId]) -> Result<(), Error> {
        let members: BTreeMap<NodeId, BasicNode> = voters
            .iter()
            .map(|&id| (id, BasicNode::new(format!("in-process:{id}"))))
            .collect();
        self.raft(voters[0])?.initialize(members).await?;
        Ok(())
    }

    /// The running nodes' ids.
    pub fn running(&self) -> BTreeSet<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Node `id`'s Raft handle.
    pub fn raft(&self, id: NodeId) -> Result<&Raft<TypeConfig>, Error> {
        Ok(&self
            .nodes
            .get(&id)
            .ok_or_else(|| format!("node {id} is not running"))?
            .raft)
    }

    /// Node `id`'s larch file, if it runs on one.
    pub fn db(&self, id: NodeId) -> Option<&Db> {
        match &self.nodes.get(&id)?.store {
            Store::Larch { db, .. } => Some(db),
            Store::Mem(_) => None,
        }
    }

    /// A client of the cluster (it finds the leader through the router, so it can run in
    /// another task while nodes are killed and restarted).
    pub fn client(&self) -> Client {
        Client {
            router: self.router.clone(),
        }
    }

    /// [`Client::leader`].
    pub async fn leader(&self, timeout: Duration) -> Result<NodeId, Error> {
        self.client().leader(timeout).await
    }

    /// [`Client::write`].
    pub async fn write(&self, req: Request, timeout: Duration) -> Result<Response, Error> {
        self.client().write(req, timeout).await
    }

    /// `key` in node `id`'s state machine (a local read).
    pub fn get(&self, id: NodeId, key: &str) -> Result<Option<String>, Error> {
        match &self
            .nodes
            .get(&id)
            .ok_or_else(|| format!("node {id} is not running"))?
            .store
        {
            Store::Larch { db, .. } => {
                let rx = db.begin_read()?;
                let v = rx.open_tree(SM_DATA_TREE)?.get(key.as_bytes())?;
                Ok(v.map(|v| String::from_utf8_lossy(v).into_owned()))
            }
            Store::Mem(sm) => Ok(sm.get(key)),
        }
    }

    /// Wait until every running node has applied the log up to `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), Error> {
        for (id, node) in &self.nodes {
            node.raft
                .wait(Some(timeout))
                .applied_index_at_least(Some(index), format!("node {id} applies {index}"))
                .await?;
        }
        Ok(())
    }

    /// Make node `id` snapshot what it has applied and purge its log up to there (a node
    /// that has fallen behind it must then catch up by a snapshot). Returns the snapshot's
    /// last log index.
    pub async fn snapshot_and_purge(&self, id: NodeId, timeout: Duration) -> Result<u64, Error> {
        let raft = self.raft(id)?;
        let applied = raft
            .metrics()
            .borrow()
            .last_applied
            .ok_or("nothing applied")?
            .index;
        raft.trigger().snapshot().await?;
        raft.wait(Some(timeout))
            .metrics(|m| m.snapshot.map(|s| s.index) >= Some(applied), "snapshot")
            .await?;
        raft.trigger().purge_log(applied).await?;
        raft.wait(Some(timeout))
            .metrics(|m| m.purged.map(|p| p.index) >= Some(applied), "purge")
            .await?;
        Ok(applied)
    }

    /// Kill node `id`: cut it off, shut its Raft down and close its file (waiting until
    /// every handle on it is gone). Returns the file's path for a restart.
    pub async fn kill(&mut self, id: NodeId) -> Result<Option<PathBuf>, Error> {
        self.router.remove(id);
        let node = self
            .nodes
            .remove(&id)
            .ok_or_else(|| format!("node {id} is not running"))?;
        node.raft.shutdown().await?;
        let path = match node.store {
            Store::Larch { db, path } => {
                drop(db);
                drop(node.raft);
                wait_closed(&path, Duration::from_secs(10)).await?;
                Some(path)
            }
            Store::Mem(_) => None,
        };
        Ok(path)
    }

    /// Kill every node (closing their files).
    pub async fn shutdown(mut self) -> Result<(), Error> {
        for id in self.running() {
            self.kill(id).await?;
        }
        Ok(())
    }
}

/// Writes through whichever reachable node leads.
#[derive(Clone, Debug)]
pub struct Client {
    router: Router,
}

impl Client {
    /// A reachable node that is leader by its own metrics, waiting up to `timeout` for one;
    /// of several (a restarted leader claims its old term until it hears of the new one),
    /// the one of the highest term.
    pub async fn leader(&self, timeout: Duration) -> Result<NodeId, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut best: Option<(u64, NodeId)> = None;
            for id in self.router.ids() {
                let Some(raft) = self.router.get(id) else {
                    continue;
                };
                let m = raft.metrics().borrow().clone();
                if m.state == ServerState::Leader && m.current_leader == Some(id) {
                    best = best.max(Some((m.current_term, id)));
                }
            }
            if let Some((_, id)) = best {
                return Ok(id);
            }
            if Instant::now() > deadline {
                return Err(
                    format!("no leader among {:?} after {timeout:?}", self.router.ids()).into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Write `req` through the leader, retrying (on a new leader if need be) until it is
    /// acknowledged or `timeout` passes. A retried write may be applied twice: the requests
    /// here are idempotent sets and deletes.
    pub async fn write(&self, req: Request, timeout: Duration) -> Result<Response, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let leader = self.leader(left).await?;
            if let Some(raft) = self.router.get(leader) {
                match raft.client_write(req.clone()).await {
                    Ok(r) => return Ok(r.data),
                    // Not the leader any more, or shut down under the request: try again.
                    Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))
                    | Err(RaftError::Fatal(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if Instant::now() > deadline {
                return Err(format!("write not acknowledged after {timeout:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Wait until no handle of this process holds the larch file at `path` (openraft's tasks
/// drop their store handles as they finish, after `shutdown` returns): a second open fails
/// with `AlreadyOpen` until then.
pub async fn wait_closed(path: &Path, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        match Db::open(path, Options::default().read_only(true).create(false)) {
            Ok(_) => return Ok(()),
            Err(larch::Error::AlreadyOpen { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Err(e) => return Err(format!("{} is still open: {e}", path.display()).into()),
        }
    }
}
