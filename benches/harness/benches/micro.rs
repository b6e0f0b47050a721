//! The criterion suite: `cargo bench --bench micro [-- FILTER]`. One group per operation,
//! one `BenchmarkId::new(engine, param)` per engine, `Throughput` in elements. Each engine
//! is opened on a fresh directory holding DOCS documents (16-byte hashed keys, 256-byte
//! values) through the same adapters as the workload harness. These catch regressions; the
//! workload harness makes the claims. A few minutes in all (short samples on purpose).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use larch_bench_core::keys::{KeyGen, Rng, Values, MAX_KEY};
use larch_bench_core::run::write_documents;
use larch_bench_core::{Durability, Engine, EngineConfig, EngineFactory};

const DOCS: u64 = 20_000;
const KEY: usize = 16;
const VALUE: usize = 256;
const BATCH: usize = 1000;
const RANGE: usize = 20;
const CURSOR: usize = 1000;

fn cfg() -> EngineConfig {
    EngineConfig {
        docs: DOCS,
        key_size: KEY,
        value_size: VALUE,
        threads: 1,
        mem_limit: None,
    }
}

fn setup_name(f: &dyn EngineFactory) -> String {
    f.setups(&[larch_bench_core::config::default_larch_setup()])
        .remove(0)
}

/// A fresh database of DOCS documents.
fn loaded(f: &dyn EngineFactory) -> (tempfile::TempDir, Box<dyn Engine>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = f
        .open(dir.path(), &setup_name(f), &cfg())
        .expect("open engine");
    e.set_durability(Durability::Async).expect("durability");
    let keys = KeyGen::new(KEY).expect("key size");
    let values = Values::new(VALUE, 1);
    let mut rng = Rng::new(1);
    {
        let mut w = e.writer().expect("writer");
        write_documents(&mut *w, &keys, KEY, &values, &mut rng, DOCS, BATCH, |_| {}).expect("load");
    }
    e.sync().expect("sync");
    (dir, e)
}

fn engines() -> Vec<&'static dyn EngineFactory> {
    larch_bench::engines()
}

fn get(c: &mut Criterion) {
    let mut g = c.benchmark_group("get");
    g.throughput(Throughput::Elements(1));
    for f in engines() {
        let (_dir, e) = loaded(f);
        let mut r = e.reader().expect("reader");
        let keys = KeyGen::new(KEY).unwrap();
        let mut rng = Rng::new(2);
        let mut buf = [0u8; MAX_KEY];
        g.bench_function(BenchmarkId::new(f.name(), DOCS), |b| {
            b.iter(|| {
                let k = keys.key(rng.doc(DOCS), &mut buf);
                r.get(k).expect("get").expect("present")
            })
        });
    }
    g.finish();
}

fn insert(c: &mut Criterion) {
    let mut g = c.benchmark_group("insert");
    g.throughput(Throughput::Elements(BATCH as u64));
    for f in engines() {
        let (_dir, e) = loaded(f);
        e.set_durability(Durability::Async).unwrap();
        let mut w = e.writer().expect("writer");
        let keys = KeyGen::new(KEY).unwrap();
        let values = Values::new(VALUE, 3);
        let mut rng = Rng::new(3);
        let mut bufs = vec![[0u8; MAX_KEY]; BATCH];
        g.bench_function(BenchmarkId::new(f.name(), BATCH), |b| {
            b.iter(|| {
                for buf in bufs.iter_mut() {
                    keys.key(rng.doc(DOCS), buf);
                }
                let pairs: Vec<(&[u8], &[u8])> = bufs
                    .iter()
                    .map(|k| (&k[..KEY], values.pick(&mut rng)))
                    .collect();
                w.write(&pairs).expect("write")
            })
        });
    }
    g.finish();
}

fn scan(c: &mut Criterion, group: &str, n: usize) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(n as u64));
    for f in engines() {
        let (_dir, e) = loaded(f);
        let mut r = e.reader().expect("reader");
        let keys = KeyGen::new(KEY).unwrap();
        let mut rng = Rng::new(4);
        let mut buf = [0u8; MAX_KEY];
        let mut bytes = 0u64;
        g.bench_function(BenchmarkId::new(f.name(), n), |b| {
            b.iter(|| {
                let k = keys.key(rng.doc(DOCS), &mut buf);
                r.scan(k, n, &mut bytes).expect("scan")
            })
        });
    }
    g.finish();
}

fn range_scan(c: &mut Criterion) {
    scan(c, "range_scan", RANGE);
}

fn cursor_iter(c: &mut Criterion) {
    scan(c, "cursor_iter", CURSOR);
}

fn commit(c: &mut Criterion, group: &str, d: Durability) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    for f in engines() {
        let (_dir, e) = loaded(f);
        e.set_durability(d).unwrap();
        let mut w = e.writer().expect("writer");
        let keys = KeyGen::new(KEY).unwrap();
        let values = Values::new(VALUE, 5);
        let mut rng = Rng::new(5);
        let mut buf = [0u8; MAX_KEY];
        g.bench_function(BenchmarkId::new(f.name(), 1), |b| {
            b.iter(|| {
                let k = keys.key(rng.doc(DOCS), &mut buf);
                w.write(&[(k, values.pick(&mut rng))]).expect("commit")
            })
        });
    }
    g.finish();
}

fn commit_sync(c: &mut Criterion) {
    commit(c, "commit_sync", Durability::Sync);
}

fn commit_async(c: &mut Criterion) {
    commit(c, "commit_async", Durability::Async);
}

fn open(c: &mut Criterion) {
    let mut g = c.benchmark_group("open");
    g.throughput(Throughput::Elements(1));
    for f in engines() {
        let (dir, e) = loaded(f);
        e.close().expect("close");
        let setup = setup_name(f);
        g.bench_function(BenchmarkId::new(f.name(), DOCS), |b| {
            b.iter(|| {
                let e = f.open(dir.path(), &setup, &cfg()).expect("open");
                e.close().expect("close")
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! {
    name = micro;
    config = config();
    targets = get, insert, range_scan, cursor_iter, commit_sync, commit_async, open
}
criterion_main!(micro);
