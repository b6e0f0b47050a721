//! Sorted bulk load (issue 14): `cargo bench -p larch-bench --bench bulk_load`. 1,000,000
//! entries (16-byte big-endian keys, 32-byte values) loaded into an empty tree in one
//! transaction (Async commit, so no fsync is timed) three ways: `WriteTree::append` in key
//! order, `insert` in key order, and `insert` in a random order. Before the timings, each
//! way's file size and leaf fill (file bytes / logical key+value bytes) is printed once.
//!
//! For instruction counts, `LARCH_BULK_LOAD_ONCE=append|insert_sorted|insert_random` makes the
//! binary load once that way and exit, without criterion (docs/performance.md):
//! `LARCH_BULK_LOAD_ONCE=append valgrind --tool=callgrind target/release/deps/bulk_load-*`.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use larch_engine::{Db, Durability, Options};

const N: u64 = 1_000_000;
const VALUE: [u8; 32] = [7; 32];

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.to_be_bytes());
    k[8..].copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
    k
}

/// 0..N in a fixed random order (Fisher-Yates over xorshift64).
fn shuffled() -> Vec<u64> {
    let mut v: Vec<u64> = (0..N).collect();
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..v.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

#[derive(Clone, Copy)]
enum Way {
    Append,
    InsertSorted,
    InsertRandom,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Append => "append",
            Way::InsertSorted => "insert_sorted",
            Way::InsertRandom => "insert_random",
        }
    }
}

/// Load N entries into a new file at `path`; returns the time of the load and commit.
fn load(path: &Path, way: Way, order: &[u64]) -> Duration {
    let db = Db::open(path, Options::default().durability(Durability::Async)).expect("open");
    let start = Instant::now();
    let tx = db.begin_write().expect("begin");
    {
        let mut t = tx.open_tree("t").expect("tree");
        match way {
            Way::Append => (0..N).for_each(|i| t.append(&key(i), &VALUE).expect("append")),
            Way::InsertSorted => (0..N).for_each(|i| t.insert(&key(i), &VALUE).expect("insert")),
            Way::InsertRandom => order
                .iter()
                .for_each(|&i| t.insert(&key(i), &VALUE).expect("insert")),
        }
    }
    tx.commit().expect("commit");
    let took = start.elapsed();
    db.sync().expect("sync");
    took
}

const WAYS: [Way; 3] = [Way::Append, Way::InsertSorted, Way::InsertRandom];

fn bulk_load(c: &mut Criterion) {
    let order = shuffled();
    let ways = WAYS;
    let logical = N * (16 + VALUE.len() as u64);
    for way in ways {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.larch");
        load(&path, way, &order);
        let bytes = std::fs::metadata(&path).expect("stat").len();
        eprintln!(
            "bulk_load/{}: file {:.1} MiB, {:.2}x the {:.1} MiB of keys and values",
            way.name(),
            bytes as f64 / (1 << 20) as f64,
            bytes as f64 / logical as f64,
            logical as f64 / (1 << 20) as f64
        );
    }
    let mut g = c.benchmark_group("bulk_load");
    g.throughput(Throughput::Elements(N));
    for way in ways {
        g.bench_function(BenchmarkId::new(way.name(), N), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().expect("tempdir");
                    total += load(&dir.path().join("b.larch"), way, &order);
                }
                total
            })
        });
    }
    g.finish();
}

/// `LARCH_BULK_LOAD_ONCE`: one load, no criterion (for callgrind).
fn once(name: &str) {
    let Some(way) = WAYS.into_iter().find(|w| w.name() == name) else {
        panic!("LARCH_BULK_LOAD_ONCE={name}: expected append, insert_sorted or insert_random");
    };
    let order = match way {
        Way::InsertRandom => shuffled(),
        _ => Vec::new(),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let took = load(&dir.path().join("b.larch"), way, &order);
    eprintln!("bulk_load/{name}: one load of {N} entries in {took:?}");
}

fn main() {
    match std::env::var("LARCH_BULK_LOAD_ONCE") {
        Ok(name) => once(&name),
        Err(_) => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    targets = bulk_load
}
