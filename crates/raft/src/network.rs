//! An in-process network: a [`Router`] from node ids to the `Raft` handles of one process,
//! each RPC a direct call on the target's handle. For tests, the `raft_kv` example and the
//! benchmark. A node removed from the router is unreachable (as if killed); an isolated one
//! can neither send nor receive, and a reply that comes back after it was isolated is lost
//! (a clean cut: nothing it does afterwards reaches another node).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft, RaftNetwork, RaftNetworkFactory};

use crate::{NodeId, TypeConfig};

#[derive(Default)]
struct Table {
    nodes: BTreeMap<NodeId, Raft<TypeConfig>>,
    isolated: BTreeSet<NodeId>,
    /// Snapshot chunks sent, by target.
    snapshot_chunks: BTreeMap<NodeId, u64>,
}

/// The nodes of one process by id. Clones share the table; each node gets its own clone
/// from [`Router::for_node`], so its connections know where they come from.
#[derive(Clone, Default)]
pub struct Router {
    table: Arc<Mutex<Table>>,
    from: Option<NodeId>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.table.lock().unwrap();
        f.debug_struct("Router")
            .field("nodes", &t.nodes.keys().collect::<Vec<_>>())
            .field("isolated", &t.isolated)
            .field("from", &self.from)
            .finish()
    }
}

impl Router {
    /// Make `raft` reachable as node `id`.
    pub fn add(&self, id: NodeId, raft: Raft<TypeConfig>) {
        let mut t = self.table.lock().unwrap();
        t.nodes.insert(id, raft);
        t.isolated.remove(&id);
    }

    /// Make node `id` unreachable; returns its handle.
    pub fn remove(&self, id: NodeId) -> Option<Raft<TypeConfig>> {
        self.table.lock().unwrap().nodes.remove(&id)
    }

    /// Cut node `id` off both ways, from now on: it receives nothing, what it sends is lost,
    /// and so is any reply to it or from it still under way.
    pub fn isolate(&self, id: NodeId) {
        self.table.lock().unwrap().isolated.insert(id);
    }

    /// Node `id`'s handle, if it is in the router and not isolated.
    pub fn get(&self, id: NodeId) -> Option<Raft<TypeConfig>> {
        let t = self.table.lock().unwrap();
        if t.isolated.contains(&id) {
            return None;
        }
        t.nodes.get(&id).cloned()
    }

    /// How many snapshot chunks (`install_snapshot` RPCs) were sent to node `id`: how tests
    /// tell a catch-up by snapshot from one by the log.
    pub fn snapshot_chunks_to(&self, id: NodeId) -> u64 {
        let t = self.table.lock().unwrap();
        t.snapshot_chunks.get(&id).copied().unwrap_or(0)
    }

    /// The reachable nodes' ids.
    pub fn ids(&self) -> Vec<NodeId> {
        let t = self.table.lock().unwrap();
        t.nodes
            .keys()
            .filter(|id| !t.isolated.contains(id))
            .copied()
            .collect()
    }

    /// The router as node `id` uses it (the network factory to give its `Raft`).
    pub fn for_node(&self, id: NodeId) -> Router {
        Router {
            table: self.table.clone(),
            from: Some(id),
        }
    }

    /// `target`'s handle if a message from this router's node can reach it now.
    fn reach<E: std::error::Error>(
        &self,
        target: NodeId,
    ) -> Result<Raft<TypeConfig>, RPCError<NodeId, BasicNode, E>> {
        let raft = match self.from {
            Some(from) if self.table.lock().unwrap().isolated.contains(&from) => None,
            _ => self.get(target),
        };
        raft.ok_or_else(|| {
            let e = std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("node {target} is unreachable from {:?}", self.from),
            );
            RPCError::Unreachable(Unreachable::new(&e))
        })
    }
}

/// A connection to one node through a [`Router`].
pub struct Connection {
    router: Router,
    target: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.clone(),
            target,
        }
    }
}

/// Send one RPC: reach the target, call it, and deliver the reply only if the two can still
/// reach each other.
macro_rules! rpc {
    ($self:ident, $method:ident, $rpc:expr) => {{
        let raft = $self.router.reach($self.target)?;
        let reply = raft.$method($rpc).await;
        $self.router.reach($self.target)?;
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new($self.target, e)))
    }};
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        rpc!(self, append_entries, rpc)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        // Counted before the call: the target may apply the snapshot before the reply is back.
        *self
            .router
            .table
            .lock()
            .unwrap()
            .snapshot_chunks
            .entry(self.target)
            .or_default() += 1;
        rpc!(self, install_snapshot, rpc)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        rpc!(self, vote, rpc)
    }
}
