//! redb.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use larch_bench_core::engine::Result;
use larch_bench_core::ib;
use larch_bench_core::{
    Durability, Engine, EngineConfig, EngineFactory, IbReader, IbRow, IbWriter, Reader, Writer,
};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
/// The insert benchmark's tables: rows, ix1, ix2, ix3 (names as `ib::TABLES`).
const IB: [TableDefinition<&[u8], &[u8]>; 4] = [
    TableDefinition::new("rows"),
    TableDefinition::new("ix1"),
    TableDefinition::new("ix2"),
    TableDefinition::new("ix3"),
];
/// redb's own default cache: 1 GiB.
const CACHE: u64 = 1 << 30;

/// Makes redb engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct RedbFactory;

impl EngineFactory for RedbFactory {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn supports_ib(&self) -> bool {
        true
    }

    fn describe(&self, _setup: &str, cfg: &EngineConfig) -> Vec<(String, String)> {
        let v = |k: &str, v: String| (k.to_string(), v);
        vec![
            v("crate", "redb 4".into()),
            v(
                "cache_size",
                format!(
                    "{} MiB ({})",
                    cfg.own_cache_bytes(CACHE) >> 20,
                    if cfg.mem_limit.is_some() {
                        "a quarter of the memory limit: redb's cache is heap memory"
                    } else {
                        "redb's default"
                    }
                ),
            ),
            v("sync", "Durability::Immediate (redb's default commit: durable on return; two-phase commit off, the default)".into()),
            v("async", "Durability::None (persisted by the next Immediate commit)".into()),
            v("sync_all", "an empty write transaction committed with Durability::Immediate".into()),
            v("reads", "one read transaction (begin_read + open_table) per get or scan".into()),
            v("writes", "one write transaction per batch (begin_write waits for the writer)".into()),
            v("sorted_writes", "rb.sorted: Table::upper_bound_mut(Unbounded) then CursorMut::insert_before per pair and close (redb's appending cursor: buffers the pairs and splices packed leaves), as redb's benchmark".into()),
            v("table", "TableDefinition<&[u8], &[u8]> \"bench\"".into()),
            v("insert_benchmark", "tables rows, ix1, ix2, ix3 (&[u8] -> &[u8]) opened side by side in one write transaction per commit; the oldest row is Table::pop_first on rows plus a remove of each index entry; ib.l.x reads 1,000 rows a transaction with range and inserts their entries; a range query is range on an index then get of each row in one read transaction".into()),
        ]
    }

    fn open(&self, dir: &Path, _setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let db = Database::builder()
            .set_cache_size(cfg.own_cache_bytes(CACHE) as usize)
            .create(dir.join("bench.redb"))?;
        let exists = db.begin_read()?.open_table(TABLE).is_ok();
        if !exists {
            let w = db.begin_write()?;
            w.open_table(TABLE)?;
            for t in IB {
                w.open_table(t)?;
            }
            w.commit()?;
        }
        Ok(Box::new(Redb {
            db,
            sync: AtomicBool::new(true),
        }))
    }
}

struct Redb {
    db: Database,
    sync: AtomicBool,
}

impl Redb {
    fn durability(&self) -> redb::Durability {
        if self.sync.load(Ordering::Relaxed) {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        }
    }
}

impl Engine for Redb {
    fn set_durability(&self, d: Durability) -> Result<()> {
        self.sync.store(d == Durability::Sync, Ordering::Relaxed);
        Ok(())
    }

    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(RedbWriter { e: self }))
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(RedbReader { e: self }))
    }

    fn sync(&self) -> Result<()> {
        let mut w = self.db.begin_write()?;
        w.set_durability(redb::Durability::Immediate)?;
        w.commit()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.sync()
    }

    fn ib_writer(&self) -> Result<Box<dyn IbWriter + '_>> {
        Ok(Box::new(RedbWriter { e: self }))
    }

    fn ib_reader(&self) -> Result<Box<dyn IbReader + '_>> {
        Ok(Box::new(RedbReader { e: self }))
    }

    fn ib_build_indexes(&self, chunk: usize, progress: &mut dyn FnMut(u64)) -> Result<u64> {
        let mut done = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let mut w = self.db.begin_write()?;
            w.set_durability(self.durability())?;
            let batch: Vec<(Vec<u8>, Vec<u8>)> = {
                let rows = w.open_table(IB[0])?;
                let mut v = Vec::with_capacity(chunk);
                let it = match &after {
                    Some(k) => rows.range::<&[u8]>((
                        std::ops::Bound::Excluded(k.as_slice()),
                        std::ops::Bound::Unbounded,
                    ))?,
                    None => rows.range::<&[u8]>(..)?,
                };
                for e in it.take(chunk) {
                    let (k, val) = e?;
                    v.push((k.value().to_vec(), val.value().to_vec()));
                }
                v
            };
            if batch.is_empty() {
                return Ok(done);
            }
            {
                let mut ix = [
                    w.open_table(IB[1])?,
                    w.open_table(IB[2])?,
                    w.open_table(IB[3])?,
                ];
                for (k, v) in &batch {
                    let id = ib::id_of(k);
                    for (j, t) in ix.iter_mut().enumerate() {
                        t.insert(&ib::index_key(v, j, id)[..], &b""[..])?;
                    }
                }
            }
            w.commit()?;
            done += batch.len() as u64;
            after = batch.last().map(|(k, _)| k.clone());
            progress(done);
        }
    }
}

impl IbWriter for RedbWriter<'_> {
    fn insert(&mut self, new: &[IbRow<'_>], indexed: bool, trim: usize) -> Result<usize> {
        let mut w = self.e.db.begin_write()?;
        w.set_durability(self.e.durability())?;
        let mut deleted = 0;
        {
            let mut rows = w.open_table(IB[0])?;
            let mut ix = if indexed {
                Some([
                    w.open_table(IB[1])?,
                    w.open_table(IB[2])?,
                    w.open_table(IB[3])?,
                ])
            } else {
                None
            };
            for r in new {
                rows.insert(&ib::row_key(r.id)[..], r.value)?;
                if let Some(ix) = &mut ix {
                    for (j, t) in ix.iter_mut().enumerate() {
                        t.insert(&ib::index_key(r.value, j, r.id)[..], &b""[..])?;
                    }
                }
            }
            while deleted < trim {
                let Some((k, v)) = rows
                    .pop_first()?
                    .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                else {
                    break;
                };
                if let Some(ix) = &mut ix {
                    let id = ib::id_of(&k);
                    for (j, t) in ix.iter_mut().enumerate() {
                        t.remove(&ib::index_key(&v, j, id)[..])?;
                    }
                }
                deleted += 1;
            }
        }
        w.commit()?;
        Ok(deleted)
    }
}

impl IbReader for RedbReader<'_> {
    fn row(&mut self, id: u64) -> Result<bool> {
        let r = self.e.db.begin_read()?;
        let t = r.open_table(IB[0])?;
        Ok(t.get(&ib::row_key(id)[..])?.is_some())
    }

    fn index_range(&mut self, index: usize, from: u64, n: usize) -> Result<(usize, usize)> {
        let r = self.e.db.begin_read()?;
        let ix = r.open_table(IB[1 + index])?;
        let rows = r.open_table(IB[0])?;
        let start = ib::index_start(from);
        let (mut entries, mut found) = (0, 0);
        for e in ix.range(&start[..]..)?.take(n) {
            let (k, _) = e?;
            entries += 1;
            if let Some(v) = rows.get(&ib::row_key(ib::id_of(k.value()))[..])? {
                std::hint::black_box(v.value());
                found += 1;
            }
        }
        Ok((entries, found))
    }
}

struct RedbWriter<'e> {
    e: &'e Redb,
}

impl Writer for RedbWriter<'_> {
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut w = self.e.db.begin_write()?;
        w.set_durability(self.e.durability())?;
        {
            let mut t = w.open_table(TABLE)?;
            for (k, v) in pairs {
                t.insert(*k, *v)?;
            }
        }
        w.commit()?;
        Ok(())
    }

    fn write_sorted(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut w = self.e.db.begin_write()?;
        w.set_durability(self.e.durability())?;
        {
            let mut t = w.open_table(TABLE)?;
            let mut c = t.upper_bound_mut(std::ops::Bound::<&[u8]>::Unbounded)?;
            for (k, v) in pairs {
                c.insert_before(*k, *v)?;
            }
            c.close()?;
        }
        w.commit()?;
        Ok(())
    }
}

struct RedbReader<'e> {
    e: &'e Redb,
}

impl Reader for RedbReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        let r = self.e.db.begin_read()?;
        let t = r.open_table(TABLE)?;
        let got = t.get(key)?;
        Ok(got.map(|g| g.value().len()))
    }

    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let r = self.e.db.begin_read()?;
        let t = r.open_table(TABLE)?;
        let mut got = 0;
        for e in t.range(start..)? {
            let (k, v) = e?;
            *bytes += (k.value().len() + v.value().len()) as u64;
            got += 1;
            if got == n {
                break;
            }
        }
        Ok(got)
    }
}
