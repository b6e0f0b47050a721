//! larch's memory in the insert benchmark, for heaptrack or /proc: `ib_heap DIR ROWS [INSERTS]`
//! opens a fresh database in DIR (removed first) with the harness's default larch setup and runs
//! ib.l.i0 (ROWS rows in id order, 100 a commit), ib.l.x (the three indexes, 1,000 rows a
//! commit) and ib.l.i1 (INSERTS more rows with the indexes, deleting as many of the oldest),
//! all Async then one sync, the way the harness's larch adapter does. After each step it prints
//! the process's RssAnon and the file's size, so a run under `heaptrack` or a plain run shows
//! what larch's own heap takes (docs/benchmarks.md, "Insert benchmark").

use std::ops::Bound;
use std::path::PathBuf;

use larch_bench_core::ib;
use larch_engine::{Db, Durability, Options};

const ROW: usize = 100;

fn rss_anon_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn row(id: u64) -> Vec<u8> {
    let mut v = vec![0x5a; ROW];
    for k in 0..3 {
        v[8 * k..8 * k + 8].copy_from_slice(&ib::field(id, k).to_be_bytes());
    }
    v
}

fn report(step: &str, path: &std::path::Path) {
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    println!(
        "{step:8} RssAnon {:6} KiB  file {:6} KiB",
        rss_anon_kib(),
        len >> 10
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, rows, inserts) = match args.as_slice() {
        [dir, rows] => (PathBuf::from(dir), rows.parse::<u64>()?, 0),
        [dir, rows, ins] => (PathBuf::from(dir), rows.parse()?, ins.parse::<u64>()?),
        _ => return Err("usage: ib_heap DIR ROWS [INSERTS]".into()),
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("db.larch");
    let db = Db::open(&path, Options::default())?;
    report("open", &path);
    let mut id = 0u64;
    while id < rows {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Async);
        {
            let mut t = tx.open_tree(ib::TABLES[0])?;
            for _ in 0..100.min(rows - id) {
                t.insert(&ib::row_key(id), &row(id))?;
                id += 1;
            }
        }
        tx.commit()?;
    }
    db.sync()?;
    report("ib.l.i0", &path);
    let mut after: Option<Vec<u8>> = None;
    loop {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Async);
        let batch: Vec<(Vec<u8>, Vec<u8>)> = {
            let t = tx.open_tree(ib::TABLES[0])?;
            let from = match &after {
                Some(k) => Bound::Excluded(k.as_slice()),
                None => Bound::Unbounded,
            };
            let mut v = Vec::new();
            for e in t.range((from, Bound::Unbounded))?.take(ib::BUILD_CHUNK) {
                let (k, val) = e?;
                v.push((k.to_vec(), val.to_vec()));
            }
            v
        };
        if batch.is_empty() {
            break;
        }
        for (j, name) in ib::TABLES[1..].iter().enumerate() {
            let mut t = tx.open_tree(name)?;
            for (k, v) in &batch {
                t.insert(&ib::index_key(v, j, ib::id_of(k)), b"")?;
            }
        }
        tx.commit()?;
        after = batch.last().map(|(k, _)| k.clone());
    }
    db.sync()?;
    report("ib.l.x", &path);
    let end = id + inserts;
    while id < end {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Async);
        {
            let mut rows_t = tx.open_tree(ib::TABLES[0])?;
            let mut ix = [
                tx.open_tree(ib::TABLES[1])?,
                tx.open_tree(ib::TABLES[2])?,
                tx.open_tree(ib::TABLES[3])?,
            ];
            for _ in 0..100 {
                let v = row(id);
                rows_t.insert(&ib::row_key(id), &v)?;
                for (j, t) in ix.iter_mut().enumerate() {
                    t.insert(&ib::index_key(&v, j, id), b"")?;
                }
                id += 1;
                let Some((k, v)) = rows_t.pop_first()? else {
                    break;
                };
                for (j, t) in ix.iter_mut().enumerate() {
                    t.remove(&ib::index_key(&v, j, ib::id_of(&k)))?;
                }
            }
        }
        tx.commit()?;
    }
    db.sync()?;
    report("ib.l.i1", &path);
    Ok(())
}
