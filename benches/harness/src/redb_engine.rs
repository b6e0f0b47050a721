//! redb.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use larch_bench_core::engine::Result;
use larch_bench_core::{Durability, Engine, EngineConfig, EngineFactory, Reader, Writer};
use redb::{Database, ReadableDatabase, TableDefinition};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
/// redb's own default cache: 1 GiB.
const CACHE: u64 = 1 << 30;

/// Makes redb engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct RedbFactory;

impl EngineFactory for RedbFactory {
    fn name(&self) -> &'static str {
        "redb"
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
            v("table", "TableDefinition<&[u8], &[u8]> \"bench\"".into()),
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
