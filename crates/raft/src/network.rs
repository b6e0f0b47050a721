//! An in-process network: a [`Router`] from node ids to the `Raft` handles of one process,
//! each RPC a direct call on the target's handle. For tests, the `raft_kv` example and the
//! benchmark; a node removed from the router is unreachable (as if killed or cut off).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft, RaftNetwork, RaftNetworkFactory};

use crate::{NodeId, TypeConfig};

/// The nodes of one process by id. Cloning shares the table.
#[derive(Clone, Default)]
pub struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, Raft<TypeConfig>>>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<NodeId> = self.nodes.lock().unwrap().keys().copied().collect();
        f.debug_struct("Router").field("nodes", &ids).finish()
    }
}

impl Router {
    /// Make `raft` reachable as node `id`.
    pub fn add(&self, id: NodeId, raft: Raft<TypeConfig>) {
        self.nodes.lock().unwrap().insert(id, raft);
    }

    /// Make node `id` unreachable; returns its handle.
    pub fn remove(&self, id: NodeId) -> Option<Raft<TypeConfig>> {
        self.nodes.lock().unwrap().remove(&id)
    }

    /// Node `id`'s handle, if it is reachable.
    pub fn get(&self, id: NodeId) -> Option<Raft<TypeConfig>> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }

    fn target<E: std::error::Error>(
        &self,
        id: NodeId,
    ) -> Result<Raft<TypeConfig>, RPCError<NodeId, BasicNode, E>> {
        self.get(id).ok_or_else(|| {
            let e = std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("node {id} is not in the router"),
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

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.router.target(self.target)?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let raft = self.router.target(self.target)?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.router.target(self.target)?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}
