//! LMDB through heed.

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode};
use larch_bench_core::engine::Result;
use larch_bench_core::{Durability, Engine, EngineConfig, EngineFactory, Reader, Writer};

/// Makes LMDB engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct LmdbFactory;

impl EngineFactory for LmdbFactory {
    fn name(&self) -> &'static str {
        "lmdb"
    }

    fn describe(&self, _setup: &str, cfg: &EngineConfig) -> Vec<(String, String)> {
        let v = |k: &str, v: String| (k.to_string(), v);
        vec![
            v("crate", "heed 0.23 (lmdb-master-sys, LMDB built from source)".into()),
            v("map_size", format!("{} GiB", crate::map_bytes(cfg.logical_bytes()) >> 30)),
            v("flags", "MDB_NORDAHEAD (madvise random on the map, as larch's Advice::Random); no MDB_WRITEMAP (pages written with pwrite, as larch's Pwrite)".into()),
            v("sync", "default flags: commit writes pages, fdatasync, then the meta through an O_DSYNC descriptor (two syncs, durable on return)".into()),
            v("async", "MDB_NOSYNC (mdb_env_set_flags between steps): commit writes pages and meta, no sync".into()),
            v("sync_all", "mdb_env_sync(force) (heed Env::force_sync)".into()),
            v("reads", "one read transaction (read_txn, thread-local reader slot) per get or scan; values are slices into the map".into()),
            v("writes", "one write transaction per batch (LMDB serializes writers on its mutex)".into()),
            v("database", "the unnamed database, Bytes keys and values".into()),
        ]
    }

    fn open(&self, dir: &Path, _setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let env = unsafe {
            // SAFETY: the directory is new and only this process opens it.
            EnvOpenOptions::new()
                .map_size(crate::map_bytes(cfg.logical_bytes()))
                .max_dbs(1)
                .max_readers(256)
                .flags(EnvFlags::NO_READ_AHEAD)
                .open(dir)?
        };
        let w = env.write_txn()?;
        let db = env
            .create_databases_and_commit(w, |opener, w| -> heed::Result<_> {
                let db = opener.create_database::<Bytes, Bytes>(w, None)?;
                Ok(CommitOrAbort::<_, ()>::Commit(db))
            })?
            .unwrap_commit();
        Ok(Box::new(Lmdb {
            env,
            db,
            nosync: AtomicBool::new(false),
        }))
    }
}

struct Lmdb {
    env: Env,
    db: Database<'static, Bytes, Bytes>,
    nosync: AtomicBool,
}

impl Engine for Lmdb {
    fn set_durability(&self, d: Durability) -> Result<()> {
        let want = d == Durability::Async;
        if self.nosync.load(Ordering::Relaxed) != want {
            let mode = if want {
                FlagSetMode::Enable
            } else {
                FlagSetMode::Disable
            };
            // SAFETY: called between steps, with no transaction in flight.
            unsafe { self.env.set_flags(EnvFlags::NO_SYNC, mode)? };
            self.nosync.store(want, Ordering::Relaxed);
        }
        Ok(())
    }

    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(LmdbWriter { e: self }))
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(LmdbReader { e: self }))
    }

    fn sync(&self) -> Result<()> {
        Ok(self.env.force_sync()?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.env.force_sync()?;
        Ok(())
    }
}

struct LmdbWriter<'e> {
    e: &'e Lmdb,
}

impl Writer for LmdbWriter<'_> {
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut w = self.e.env.write_txn()?;
        for (k, v) in pairs {
            self.e.db.put(&mut w, k, v)?;
        }
        w.commit()?;
        Ok(())
    }
}

struct LmdbReader<'e> {
    e: &'e Lmdb,
}

impl Reader for LmdbReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        let r = self.e.env.read_txn()?;
        Ok(self.e.db.get(&r, key)?.map(<[u8]>::len))
    }

    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let r = self.e.env.read_txn()?;
        let range = (Bound::Included(start), Bound::Unbounded);
        let mut got = 0;
        for e in self.e.db.range(&r, &range)? {
            let (k, v) = e?;
            *bytes += (k.len() + v.len()) as u64;
            got += 1;
            if got == n {
                break;
            }
        }
        Ok(got)
    }
}
