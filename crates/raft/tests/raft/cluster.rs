//! Three nodes on larch files in one process: the leader is killed while clients write,
//! a new one is elected, the old one restarts from its file and catches up (by the log, or
//! by a snapshot when the leader has purged what it missed); then every acknowledged write
//! must be in all three state machines and their `larch dump`s must be identical.
//!
//! `LARCH_RAFT_LONG=1` writes 20 times as many keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use larch::{Db, Options};
use larch_raft::cluster::{test_config, Client, Cluster};
use larch_raft::{dump_tree, Request, SM_DATA_TREE};

const T: Duration = Duration::from_secs(20);

fn keys() -> usize {
    if std::env::var_os("LARCH_RAFT_LONG").is_some() {
        6000
    } else {
        300
    }
}

fn key(i: usize) -> String {
    format!("key{i:06}")
}

fn value(i: usize) -> String {
    format!("value-{i}")
}

/// Write keys `range` with `writers` concurrent clients, each retrying until acknowledged;
/// `acked` counts acknowledgements.
async fn write_keys(
    client: &Client,
    range: std::ops::Range<usize>,
    writers: usize,
    acked: &Arc<AtomicUsize>,
) {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let client = client.clone();
        let acked = acked.clone();
        let range = range.clone();
        tasks.push(tokio::spawn(async move {
            for i in range.filter(|i| i % writers == w) {
                client
                    .write(Request::set(key(i), value(i)), T)
                    .await
                    .unwrap_or_else(|e| panic!("write {i}: {e}"));
                acked.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + T;
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The `larch` binary, when cargo built it beside this test (`cargo test --workspace` does).
fn larch_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("larch");
    bin.is_file().then_some(bin)
}

/// The state machine trees of the closed files at `paths`: identical to each other and to
/// `model`, by this crate's dump and by `larch dump` when the binary is there. Each file also
/// passes `check()`.
fn assert_same_state_machines(paths: &[PathBuf], model: &BTreeMap<String, String>) {
    let expect = {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("model.larch"), Options::default()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree(SM_DATA_TREE).unwrap();
            for (k, v) in model {
                t.insert(k.as_bytes(), v.as_bytes()).unwrap();
            }
        }
        tx.commit().unwrap();
        dump_tree(&db, SM_DATA_TREE).unwrap()
    };
    for path in paths {
        let db = Db::open(path, Options::default().read_only(true).create(false)).unwrap();
        db.check().unwrap();
        let dump = dump_tree(&db, SM_DATA_TREE).unwrap();
        assert!(
            dump == expect,
            "{}: state machine differs from the acknowledged writes ({} lines, want {})",
            path.display(),
            dump.lines().count(),
            expect.lines().count()
        );
        drop(db);
        if let Some(bin) = larch_bin() {
            let out = std::process::Command::new(bin)
                .args(["dump", "--tree", SM_DATA_TREE])
                .arg(path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8(out.stdout).unwrap(),
                expect,
                "larch dump of {}",
                path.display()
            );
        } else {
            eprintln!("(no larch binary beside the test: compared with dump_tree only)");
        }
    }
}

fn open(path: &Path) -> Db {
    Db::open(path, Options::default()).unwrap()
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum CatchUp {
    Log,
    Snapshot,
}

async fn leader_killed_and_restarted(catch_up: CatchUp) {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (1..=3)
        .map(|i| dir.path().join(format!("node{i}.larch")))
        .collect();
    let mut config = test_config();
    if catch_up == CatchUp::Log {
        // No snapshots (so no purges) of their own: the old node's entries stay in the log.
        config.snapshot_policy = openraft::SnapshotPolicy::Never;
    }
    let mut cluster = Cluster::new(config).unwrap();
    for (i, p) in paths.iter().enumerate() {
        cluster.start_larch(i as u64 + 1, open(p)).await.unwrap();
    }
    cluster.initialize(&[1, 2, 3]).await.unwrap();
    let old = cluster.leader(T).await.unwrap();

    // Clients write all the keys; when a third are acknowledged, the leader is killed under
    // them (its Raft shut down, its file closed). Their writes go on with the new leader.
    let n = keys();
    let acked = Arc::new(AtomicUsize::new(0));
    let client = cluster.client();
    let writing = {
        let acked = acked.clone();
        tokio::spawn(async move { write_keys(&client, 0..n, 8, &acked).await })
    };
    wait_for("a third of the writes", || {
        acked.load(Ordering::Relaxed) >= n / 3
    })
    .await;
    let at_kill = acked.load(Ordering::Relaxed);
    let path = cluster.kill(old).await.unwrap().unwrap();
    writing.await.unwrap();
    assert_eq!(acked.load(Ordering::Relaxed), n);
    assert!(at_kill < n, "the leader died before the last write");
    let new = cluster.leader(T).await.unwrap();
    assert_ne!(new, old);

    if catch_up == CatchUp::Snapshot {
        // Both running nodes snapshot and purge their logs, so the old node cannot catch up
        // from the log, whichever of them leads when it is back: it must install a snapshot.
        let last = cluster
            .raft(new)
            .unwrap()
            .metrics()
            .borrow()
            .last_log_index
            .unwrap();
        cluster.wait_applied(last, T).await.unwrap();
        for id in cluster.running() {
            cluster.snapshot_and_purge(id, T).await.unwrap();
        }
    }

    // The old leader restarts from its file and catches up.
    cluster.start_larch(old, open(&path)).await.unwrap();
    let last = cluster
        .raft(new)
        .unwrap()
        .metrics()
        .borrow()
        .last_log_index
        .unwrap();
    cluster.wait_applied(last, T).await.unwrap();
    let chunks = cluster.router().snapshot_chunks_to(old);
    match catch_up {
        CatchUp::Log => assert_eq!(chunks, 0, "caught up by the log: no snapshot sent"),
        CatchUp::Snapshot => {
            assert!(chunks > 0, "caught up by a snapshot");
            let m = cluster.raft(old).unwrap().metrics().borrow().clone();
            assert!(m.snapshot.map(|s| s.index) >= m.purged.map(|p| p.index));
        }
    }

    // Every acknowledged write is in every state machine, read through the running nodes...
    for id in 1..=3 {
        for i in 0..n {
            assert_eq!(
                cluster.get(id, &key(i)).unwrap(),
                Some(value(i)),
                "node {id} key {i}"
            );
        }
    }
    // ... and their files, closed, dump the same.
    cluster.shutdown().await.unwrap();
    let model = (0..n).map(|i| (key(i), value(i))).collect();
    assert_same_state_machines(&paths, &model);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_leader_is_replaced_and_catches_up_by_log_after_restart() {
    leader_killed_and_restarted(CatchUp::Log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_leader_is_replaced_and_catches_up_by_snapshot_after_restart() {
    leader_killed_and_restarted(CatchUp::Snapshot).await;
}
