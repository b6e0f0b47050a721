//! Three openraft nodes in one process, each on its own larch file: a client writes and
//! reads keys, the leader is killed and replaced, the old leader restarts from its file and
//! catches up by the log; then a follower is killed, the leader snapshots and purges its log,
//! and the follower restarts and catches up by a snapshot. At the end the three state
//! machines are compared.
//!
//! ```text
//! cargo run --release -p larch-raft --example raft_kv [-- --dir DIR] [--keys N]
//! ```
//!
//! With `--dir` the files stay there afterwards, for `larch dump DIR/node1.larch --tree
//! sm.data` and friends.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use larch::{Db, Options};
use larch_raft::cluster::{test_config, Cluster};
use larch_raft::{dump_tree, NodeId, Request, LOG_TREE, SM_DATA_TREE};

type Result<T> = std::result::Result<T, larch_raft::cluster::Error>;

const T: Duration = Duration::from_secs(10);

/// Write keys `from..to` with 16 concurrent clients; returns writes per second.
async fn write(cluster: &Cluster, from: usize, to: usize) -> Result<f64> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..16 {
        let client = cluster.client();
        tasks.push(tokio::spawn(async move {
            for i in (from..to).filter(|i| i % 16 == w) {
                client
                    .write(Request::set(format!("key{i:06}"), format!("value{i}")), T)
                    .await?;
            }
            Ok::<_, larch_raft::cluster::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok((to - from) as f64 / started.elapsed().as_secs_f64())
}

/// The node's log on disk: (first index, last index, entries).
fn log_span(cluster: &Cluster, id: NodeId) -> Result<String> {
    let db = cluster.db(id).ok_or("not a larch node")?;
    let rx = db.begin_read()?;
    let log = rx.open_tree(LOG_TREE)?;
    let idx = |k: &[u8]| u64::from_be_bytes(k.try_into().unwrap());
    Ok(match (log.first()?, log.last()?) {
        (Some((a, _)), Some((b, _))) => {
            format!("log {}..={} ({} entries)", idx(a), idx(b), log.len()?)
        }
        _ => "log empty".into(),
    })
}

async fn wait_caught_up(cluster: &Cluster) -> Result<()> {
    let leader = cluster.leader(T).await?;
    let last = cluster
        .raft(leader)?
        .metrics()
        .borrow()
        .last_log_index
        .unwrap_or(0);
    cluster.wait_applied(last, T).await
}

async fn linearizable_get(cluster: &Cluster, key: &str) -> Result<Option<String>> {
    let leader = cluster.leader(T).await?;
    cluster.raft(leader)?.ensure_linearizable().await?;
    cluster.get(leader, key)
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut dir: Option<PathBuf> = None;
    let mut keys = 3000usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = Some(args.next().ok_or("--dir needs a path")?.into()),
            "--keys" => keys = args.next().ok_or("--keys needs a number")?.parse()?,
            _ => return Err(format!("unknown argument {a:?} (use --dir DIR, --keys N)").into()),
        }
    }
    // Without --dir, a temporary directory removed at exit.
    let tmp = tempfile::tempdir()?;
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d)?;
            d
        }
        None => tmp.path().to_path_buf(),
    };
    let path = |id: NodeId| dir.join(format!("node{id}.larch"));
    for id in 1..=3 {
        if path(id).exists() {
            return Err(format!("{} exists: give an empty --dir", path(id).display()).into());
        }
    }

    let mut cluster = Cluster::new(test_config())?;
    for id in 1..=3 {
        cluster
            .start_larch(id, Db::open(path(id), Options::default())?)
            .await?;
    }
    cluster.initialize(&[1, 2, 3]).await?;
    let leader = cluster.leader(T).await?;
    println!(
        "3 nodes on {}/node{{1,2,3}}.larch; leader: node {leader}",
        dir.display()
    );

    let q = keys / 3;
    let rate = write(&cluster, 0, q).await?;
    println!("wrote keys 0..{q} through the leader: {rate:.0} writes/s");
    let v = linearizable_get(&cluster, "key000007").await?;
    println!("linearizable read of key000007 on node {leader}: {v:?}");

    // The leader dies; the others elect a new one and writes go on.
    let killed_at = Instant::now();
    let old = leader;
    cluster.kill(old).await?;
    let leader = cluster.leader(T).await?;
    println!(
        "killed node {old} (Raft shut down, file closed); node {leader} leads after {} ms",
        killed_at.elapsed().as_millis()
    );
    write(&cluster, q, 2 * q).await?;
    println!("wrote keys {q}..{} with node {old} down", 2 * q);

    // The old leader restarts from its file: it has what it had, and the leader sends it
    // the rest of the log.
    cluster
        .start_larch(old, Db::open(path(old), Options::default())?)
        .await?;
    println!(
        "restarted node {old} from its file: {}",
        log_span(&cluster, old)?
    );
    wait_caught_up(&cluster).await?;
    println!(
        "node {old} caught up by the log ({} snapshot chunks sent to it): {}, key{:06} = {:?}",
        cluster.router().snapshot_chunks_to(old),
        log_span(&cluster, old)?,
        2 * q - 1,
        cluster.get(old, &format!("key{:06}", 2 * q - 1))?
    );

    // A follower dies; the leader writes on, snapshots and purges its log, so the follower
    // can only catch up from the snapshot.
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    cluster.kill(follower).await?;
    write(&cluster, 2 * q, keys).await?;
    wait_caught_up(&cluster).await?;
    let mut applied = 0;
    for id in cluster.running() {
        applied = cluster.snapshot_and_purge(id, T).await?;
    }
    println!(
        "killed follower node {follower}; wrote keys {}..{keys}; the two running nodes snapshotted at index {applied} and purged their logs: {}",
        2 * q,
        log_span(&cluster, leader)?
    );
    cluster
        .start_larch(follower, Db::open(path(follower), Options::default())?)
        .await?;
    println!(
        "restarted node {follower} from its file: {}",
        log_span(&cluster, follower)?
    );
    wait_caught_up(&cluster).await?;
    println!(
        "node {follower} caught up by a snapshot ({} snapshot chunks sent to it), key{:06} = {:?}",
        cluster.router().snapshot_chunks_to(follower),
        keys - 1,
        cluster.get(follower, &format!("key{:06}", keys - 1))?
    );

    // Compare the three state machines, closed.
    cluster.shutdown().await?;
    let mut dumps = Vec::new();
    for id in 1..=3 {
        let db = Db::open(path(id), Options::default().read_only(true))?;
        db.check()?;
        dumps.push(dump_tree(&db, SM_DATA_TREE)?);
    }
    let same = dumps.iter().all(|d| *d == dumps[0]);
    println!(
        "state machines: {} keys each, identical on all three: {same}",
        dumps[0].lines().count()
    );
    if !same || dumps[0].lines().count() != keys {
        return Err("the state machines differ or miss writes".into());
    }
    Ok(())
}
