//! A power cut under one node of a three-node cluster, with the power-cut simulation's
//! images. Node 3 runs on a recording `Storage`, and its flush hook notes, after each sync,
//! the last log index that sync made durable (its append callbacks fire after the hook, so
//! every acknowledged entry is at or below it).
//!
//! While clients write, node 3 is cut off from the network (nothing it says afterwards
//! reaches anyone: a reply under way is lost too) and the number of storage operations it had
//! done is the power cut's point: everything it ever told another node was said before it.
//! The file a cut would leave at that point (the operations after the last sync lost, all
//! landed, or landed at random, torn writes included), and at earlier points, must open,
//! check clean and hold every entry acknowledged by then. Node 3 then restarts from the
//! image at the cut, rejoins behind the others, catches up, and no acknowledged write is
//! missing from any state machine.
//!
//! Restarting from an image *earlier* than what the node told the leader is not a power cut:
//! openraft refuses it ("follower log reversion is not allowed"), as it should.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larch::{Db, Options};
use larch_raft::cluster::{test_config, Client, Cluster};
use larch_raft::{dump_tree, FlushHook, LogStore, Request, LOG_TREE, SM_DATA_TREE};
use larch_testkit::images::{image_at, Image};
use larch_testkit::recording::{open_rw, IoLog, IoOp, Recording};

const T: Duration = Duration::from_secs(20);

fn keys() -> usize {
    if std::env::var_os("LARCH_RAFT_LONG").is_some() {
        3000
    } else {
        200
    }
}

/// Every entry of the log tree, by index key.
fn log_of(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree(LOG_TREE).unwrap();
    t.iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

async fn write_keys(client: Client, range: std::ops::Range<usize>) {
    let mut tasks = Vec::new();
    for w in 0..8 {
        let client = client.clone();
        let range = range.clone();
        tasks.push(tokio::spawn(async move {
            for i in range.filter(|i| i % 8 == w) {
                client
                    .write(Request::set(format!("k{i:06}"), format!("v{i}")), T)
                    .await
                    .unwrap_or_else(|e| panic!("write {i}: {e}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

fn open(path: &Path) -> Db {
    Db::open(path, Options::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_restarted_from_a_power_cut_image_keeps_every_acknowledged_entry_and_rejoins() {
    let dir = larch_testkit::scratch_dir();
    let path = |i: u64| dir.path().join(format!("node{i}.larch"));
    let mut cluster = Cluster::new(test_config()).unwrap();
    cluster.start_larch(1, open(&path(1))).await.unwrap();
    cluster.start_larch(2, open(&path(2))).await.unwrap();

    // Node 3 on a recording storage; its flush hook notes, after each sync, how many storage
    // operations had been done and the last log index that sync made durable.
    drop(open(&path(3)));
    let initial = std::fs::read(path(3)).unwrap();
    let ops: IoLog = Default::default();
    let acks: Arc<Mutex<Vec<(usize, u64)>>> = Default::default();
    let hook: FlushHook = {
        let (ops, acks) = (ops.clone(), acks.clone());
        Arc::new(move |index| {
            if let Some(i) = index {
                let done = ops.lock().unwrap().len();
                acks.lock().unwrap().push((done, i));
            }
        })
    };
    let storage = Recording::new(open_rw(&path(3)), &ops);
    let db3 = Db::open_with_storage(path(3), Box::new(storage), Options::default()).unwrap();
    let log3 = LogStore::with_flush_hook(db3.clone(), Some(hook)).unwrap();
    cluster.start_larch_with(3, db3, log3).await.unwrap();
    cluster.initialize(&[1, 2, 3]).await.unwrap();

    // Node 3 follows (so the cut leaves a leader).
    while cluster.leader(T).await.unwrap() == 3 {
        cluster.raft(1).unwrap().trigger().elect().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Clients write; a third of the way, the power fails under node 3.
    let n = keys();
    let writing = {
        let client = cluster.client();
        tokio::spawn(async move { write_keys(client, 0..n).await })
    };
    let acked_writes = || acks.lock().unwrap().last().map_or(0, |a| a.1);
    while acked_writes() < (n / 3) as u64 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    cluster.router().isolate(3);
    let cut = ops.lock().unwrap().len();
    cluster.kill(3).await.unwrap();
    writing.await.unwrap();
    let final_log = log_of(&open(&path(3)));
    let ops: Vec<IoOp> = ops.lock().unwrap().clone();
    let acks = acks.lock().unwrap().clone();
    assert!(acks.len() >= 10, "only {} flushes recorded", acks.len());
    let acked_at = |k: usize| acks.iter().filter(|a| a.0 <= k).map(|a| a.1).max();

    // Cut points: right after a flush's sync and inside the I/O before the next, up to the
    // cut; the cut itself last.
    let mut cuts = Vec::new();
    for j in (0..acks.len() - 1).step_by((acks.len() / 8).max(1)) {
        if acks[j + 1].0 <= cut {
            cuts.push(acks[j].0);
            cuts.push((acks[j].0 + acks[j + 1].0) / 2);
        }
    }
    cuts.push(cut);
    let image_path = dir.path().join("image.larch");
    let mut chosen = None;
    for (c, &k) in cuts.iter().enumerate() {
        for how in [
            Image::DurableOnly,
            Image::Everything,
            Image::Random(c as u64 + 7),
        ] {
            let img = image_at(&initial, &ops, k, how, 4096);
            std::fs::write(&image_path, &img).unwrap();
            let db = Db::open(&image_path, Options::default())
                .unwrap_or_else(|e| panic!("cut at op {k} ({how:?}): open failed: {e}"));
            db.check()
                .unwrap_or_else(|e| panic!("cut at op {k} ({how:?}): check failed: {e}"));
            let log = log_of(&db);
            if let Some(acked) = acked_at(k) {
                for (key, value) in final_log.range(..=acked.to_be_bytes().to_vec()) {
                    assert_eq!(
                        log.get(key),
                        Some(value),
                        "cut at op {k} ({how:?}): acknowledged entry {} lost or changed",
                        u64::from_be_bytes(key[..].try_into().unwrap())
                    );
                }
            }
            if k == cut && matches!(how, Image::Random(_)) {
                chosen = Some(img);
            }
        }
    }

    // Node 3 restarts from the image at the cut, behind the others, and catches up.
    let img = chosen.unwrap();
    std::fs::write(path(3), &img).unwrap();
    cluster.start_larch(3, open(&path(3))).await.unwrap();
    write_keys(cluster.client(), n..n + n / 4).await;
    let leader = cluster.leader(T).await.unwrap();
    let last = cluster
        .raft(leader)
        .unwrap()
        .metrics()
        .borrow()
        .last_log_index
        .unwrap();
    cluster.wait_applied(last, T).await.unwrap();
    for id in 1..=3 {
        for i in 0..n + n / 4 {
            assert_eq!(
                cluster.get(id, &format!("k{i:06}")).unwrap(),
                Some(format!("v{i}")),
                "node {id} key {i}"
            );
        }
    }
    cluster.shutdown().await.unwrap();
    let dumps: Vec<String> = (1..=3)
        .map(|i| {
            let db = Db::open(path(i), Options::default().read_only(true)).unwrap();
            db.check().unwrap();
            dump_tree(&db, SM_DATA_TREE).unwrap()
        })
        .collect();
    assert_eq!(dumps[0].lines().count(), n + n / 4);
    assert!(
        dumps[0] == dumps[1] && dumps[1] == dumps[2],
        "state machines differ"
    );
}
