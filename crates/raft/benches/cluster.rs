//! Writes per second through a three-node in-process openraft cluster on larch files, against
//! one larch file taking the same writes as `Sync` commits (no Raft), and against the same
//! cluster on the in-memory store (`larch_raft::mem`: the ceiling, what Raft and the
//! in-process network cost with storage that costs nothing).
//!
//! ```text
//! cargo bench -p larch-raft --bench cluster
//! LARCH_RAFT_BENCH_WRITES=20000 LARCH_RAFT_BENCH_CLIENTS=1,16,64 LARCH_RAFT_BENCH_ROUNDS=5 \
//!     cargo bench -p larch-raft --bench cluster
//! ```
//!
//! Each write sets one key (`key%08d`, a 32-byte value). The files go in
//! `LARCH_RAFT_BENCH_DIR` (default: the system temporary directory), which should be on the
//! disk being measured, not tmpfs. Each cell is the median of `LARCH_RAFT_BENCH_ROUNDS` (3)
//! runs, the three columns of a row interleaved, and the device's own fdatasync rate is
//! printed before and after: compare ratios of one run (the machine the figures in
//! docs/benchmarks.md come from is shared and noisy).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use larch::{Db, Durability, Options};
use larch_raft::cluster::{test_config, Cluster};
use larch_raft::Request;

const T: Duration = Duration::from_secs(60);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        })
        .unwrap_or(default)
}

fn key(i: usize) -> String {
    format!("key{i:08}")
}

fn value(i: usize) -> String {
    format!("{i:032}")
}

/// One larch file, `clients` threads each committing one key per `Sync` transaction.
fn single_larch(dir: &std::path::Path, n: usize, clients: usize) -> f64 {
    let path = dir.join("single.larch");
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path, Options::default().durability(Durability::Sync)).unwrap();
    let started = Instant::now();
    std::thread::scope(|s| {
        for c in 0..clients {
            let db = &db;
            s.spawn(move || {
                for i in (0..n).filter(|i| i % clients == c) {
                    let tx = db.begin_write().unwrap();
                    tx.open_tree("sm.data")
                        .unwrap()
                        .insert(key(i).as_bytes(), value(i).as_bytes())
                        .unwrap();
                    tx.commit().unwrap();
                }
            });
        }
    });
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(db);
    std::fs::remove_file(&path).unwrap();
    rate
}

/// A three-node cluster, larch files in `dir` or in memory; `clients` tasks write `n` keys
/// through the leader. Returns writes per second.
async fn cluster(dir: Option<&std::path::Path>, n: usize, clients: usize) -> f64 {
    let mut c = Cluster::new(test_config()).unwrap();
    let mut paths = Vec::new();
    for id in 1..=3 {
        match dir {
            Some(dir) => {
                let path = dir.join(format!("node{id}.larch"));
                let _ = std::fs::remove_file(&path);
                c.start_larch(id, Db::open(&path, Options::default()).unwrap())
                    .await
                    .unwrap();
                paths.push(path);
            }
            None => c.start_mem(id).await.unwrap(),
        }
    }
    c.initialize(&[1, 2, 3]).await.unwrap();
    c.leader(T).await.unwrap();
    let c = Arc::new(c);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..clients {
        let client = c.client();
        tasks.push(tokio::spawn(async move {
            for i in (0..n).filter(|i| i % clients == w) {
                client
                    .write(Request::set(key(i), value(i)), T)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    Arc::try_unwrap(c).unwrap().shutdown().await.unwrap();
    for p in paths {
        std::fs::remove_file(p).unwrap();
    }
    rate
}

/// fdatasyncs per second of a 4 KiB overwrite in `dir`: the device's rate, measured in the
/// same run (the disk of the machine behind docs/benchmarks.md varies several-fold by the
/// minute).
fn fdatasync_rate(dir: &std::path::Path) -> f64 {
    use std::os::unix::fs::FileExt;
    let path = dir.join("fdatasync.probe");
    let f = std::fs::File::create(&path).unwrap();
    f.write_all_at(&[0u8; 4096 * 8], 0).unwrap();
    f.sync_all().unwrap();
    let n = 300;
    let started = Instant::now();
    for i in 0..n {
        f.write_all_at(&[i as u8; 4096], (i % 8) * 4096).unwrap();
        f.sync_data().unwrap();
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    std::fs::remove_file(path).unwrap();
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too: keep that short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = env_usize("LARCH_RAFT_BENCH_WRITES", if quick { 200 } else { 5000 });
    let rounds = env_usize("LARCH_RAFT_BENCH_ROUNDS", if quick { 1 } else { 3 });
    let clients: Vec<usize> = std::env::var("LARCH_RAFT_BENCH_CLIENTS")
        .unwrap_or_else(|_| "1,16,64".into())
        .split(',')
        .map(|c| c.trim().parse().expect("LARCH_RAFT_BENCH_CLIENTS: numbers"))
        .collect();
    let dir: PathBuf = std::env::var_os("LARCH_RAFT_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!(
        "{n} writes of one key each, files in {}; median of {rounds} interleaved rounds",
        dir.path().display()
    );
    println!(
        "device: {:.0} fdatasync/s (4 KiB overwrite) before",
        fdatasync_rate(dir.path())
    );
    println!(
        "{:>8} {:>20} {:>20} {:>20} {:>11} {:>11}",
        "clients",
        "larch alone, Sync",
        "3 nodes on larch",
        "3 nodes in memory",
        "raft/alone",
        "raft/memory"
    );
    for &cl in &clients {
        let (mut alone, mut on_larch, mut in_mem) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            alone.push(single_larch(dir.path(), n, cl));
            on_larch.push(rt.block_on(cluster(Some(dir.path()), n, cl)));
            in_mem.push(rt.block_on(cluster(None, n, cl)));
        }
        let (alone, on_larch, in_mem) = (median(alone), median(on_larch), median(in_mem));
        println!(
            "{cl:>8} {:>20} {:>20} {:>20} {:>10.2}x {:>10.3}x",
            format!("{alone:.0}/s"),
            format!("{on_larch:.0}/s"),
            format!("{in_mem:.0}/s"),
            on_larch / alone,
            on_larch / in_mem
        );
    }
    println!(
        "device: {:.0} fdatasync/s (4 KiB overwrite) after",
        fdatasync_rate(dir.path())
    );
}
