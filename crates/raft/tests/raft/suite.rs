//! openraft's own storage test suite (`openraft::testing::Suite::test_all`, written by
//! openraft's authors) against the larch store: the acceptance test of `LogStore` and
//! `StateMachine`. Every case gets a fresh file. The in-memory store the bench compares
//! against runs it too, so the ceiling is a correct store.
//!
//! The suite sleeps a second in eight of its cases (it allows a store to purge in the
//! background), so this file takes about ten seconds whatever the store does.

use larch::{Db, Options};
use larch_raft::mem::{MemLog, MemStateMachine};
use larch_raft::{LogStore, NodeId, StateMachine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use tempfile::TempDir;

struct LarchBuilder;

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, StateMachine, TempDir> for LarchBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore<TypeConfig>, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("suite.larch"), Options::default()).unwrap();
        let (log, sm) = larch_raft::stores(db).unwrap();
        Ok((dir, log, sm))
    }
}

struct MemBuilder;

impl StoreBuilder<TypeConfig, MemLog, MemStateMachine> for MemBuilder {
    async fn build(&self) -> Result<((), MemLog, MemStateMachine), StorageError<NodeId>> {
        Ok(((), MemLog::default(), MemStateMachine::default()))
    }
}

#[test]
fn openraft_storage_suite_passes_on_larch() {
    Suite::test_all(LarchBuilder).unwrap();
}

#[test]
fn openraft_storage_suite_passes_on_the_in_memory_ceiling() {
    Suite::test_all(MemBuilder).unwrap();
}
