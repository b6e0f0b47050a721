//! fjall, the LSM (in place of RocksDB).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use larch_bench_core::engine::Result;
use larch_bench_core::{Durability, Engine, EngineConfig, EngineFactory, Reader, Writer};

/// Block cache when the run is cached: 1 GiB (redb's default cache, for parity).
const CACHE: u64 = 1 << 30;

/// fjall's default memtable: 64 MiB.
const MEMTABLE: u64 = 64 << 20;

/// The memtable size: fjall's default, or an eighth of a memory limit (a memtable is heap
/// memory, and one may be flushing while the next fills).
fn memtable_bytes(cfg: &EngineConfig) -> u64 {
    match cfg.mem_limit {
        None => MEMTABLE,
        Some(limit) => (limit / 8).clamp(1 << 20, MEMTABLE),
    }
}

/// Makes fjall engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct FjallFactory;

impl EngineFactory for FjallFactory {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn describe(&self, _setup: &str, cfg: &EngineConfig) -> Vec<(String, String)> {
        let v = |k: &str, v: String| (k.to_string(), v);
        vec![
            v("crate", "fjall 3 (lsm-tree 3), default compression (LZ4) and compaction (leveled)".into()),
            v(
                "cache_size",
                format!(
                    "{} MiB ({})",
                    cfg.own_cache_bytes(CACHE) >> 20,
                    if cfg.mem_limit.is_some() {
                        "a quarter of the memory limit, fjall's advice"
                    } else {
                        "the data set fits; fjall's default is 32 MiB"
                    }
                ),
            ),
            v("keyspace", "one Database, one keyspace \"bench\"".into()),
            v(
                "max_memtable_size",
                format!(
                    "{} MiB ({})",
                    memtable_bytes(cfg) >> 20,
                    if cfg.mem_limit.is_some() {
                        "an eighth of the memory limit"
                    } else {
                        "fjall's default"
                    }
                ),
            ),
            v("sync", "WriteBatch with durability(Some(PersistMode::SyncData)): the journal is fdatasync'ed before commit returns".into()),
            v("async", "WriteBatch without durability: the journal is written to the OS (fjall's default), no sync".into()),
            v("sync_all", "Database::persist(PersistMode::SyncData)".into()),
            v("reads", "Keyspace::get / Keyspace::range(start..).take(20) (each reads the newest state; no explicit snapshot)".into()),
            v("writes", "one WriteBatch per batch; concurrent batches serialize on the journal".into()),
        ]
    }

    fn open(&self, dir: &Path, _setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let db = Database::builder(dir)
            .cache_size(cfg.own_cache_bytes(CACHE))
            .open()?;
        let memtable = memtable_bytes(cfg);
        let ks = db.keyspace("bench", || {
            KeyspaceCreateOptions::default().max_memtable_size(memtable)
        })?;
        Ok(Box::new(Fjall {
            db,
            ks,
            sync: AtomicBool::new(true),
        }))
    }
}

struct Fjall {
    db: Database,
    ks: Keyspace,
    sync: AtomicBool,
}

impl Engine for Fjall {
    fn set_durability(&self, d: Durability) -> Result<()> {
        self.sync.store(d == Durability::Sync, Ordering::Relaxed);
        Ok(())
    }

    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(FjallWriter { e: self }))
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(FjallReader { e: self }))
    }

    fn sync(&self) -> Result<()> {
        Ok(self.db.persist(PersistMode::SyncData)?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.persist(PersistMode::SyncData)?;
        Ok(())
    }
}

struct FjallWriter<'e> {
    e: &'e Fjall,
}

impl Writer for FjallWriter<'_> {
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut b = self.e.db.batch();
        for (k, v) in pairs {
            b.insert(&self.e.ks, *k, *v);
        }
        if self.e.sync.load(Ordering::Relaxed) {
            b = b.durability(Some(PersistMode::SyncData));
        }
        b.commit()?;
        Ok(())
    }
}

struct FjallReader<'e> {
    e: &'e Fjall,
}

impl Reader for FjallReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.e.ks.get(key)?.map(|v| v.len()))
    }

    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let mut got = 0;
        let range = (Bound::Included(start), Bound::Unbounded);
        for g in self.e.ks.range::<&[u8], _>(range).take(n) {
            let (k, v) = g.into_inner()?;
            *bytes += (k.len() + v.len()) as u64;
            got += 1;
        }
        Ok(got)
    }
}
