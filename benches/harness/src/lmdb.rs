//! LMDB through heed.

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode, PutFlags};
use larch_bench_core::engine::Result;
use larch_bench_core::ib::{self, TABLES};
use larch_bench_core::{
    Durability, Engine, EngineConfig, EngineFactory, IbReader, IbRow, IbWriter, Reader, Writer,
};

type Db = Database<'static, Bytes, Bytes>;

/// Makes LMDB engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct LmdbFactory;

impl EngineFactory for LmdbFactory {
    fn name(&self) -> &'static str {
        "lmdb"
    }

    fn supports_ib(&self) -> bool {
        true
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
            v("sorted_writes", "rb.sorted: put_with_flags(PutFlags::APPEND) (MDB_APPEND: no search, the key must be greater than the last), as redb's benchmark".into()),
            v("database", "the unnamed database, Bytes keys and values".into()),
            v("insert_benchmark", "named databases rows, ix1, ix2, ix3 in the same environment, written in one write transaction per commit; the oldest row is Database::first then delete on rows plus a delete of each index entry; ib.l.x reads 1,000 rows a transaction with range and puts their entries; a range query is range on an index then get of each row in one read transaction".into()),
        ]
    }

    fn open(&self, dir: &Path, _setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let env = unsafe {
            // SAFETY: the directory is new and only this process opens it.
            EnvOpenOptions::new()
                .map_size(crate::map_bytes(cfg.logical_bytes()))
                .max_dbs(1 + TABLES.len() as u32)
                .max_readers(256)
                .flags(EnvFlags::NO_READ_AHEAD)
                .open(dir)?
        };
        let w = env.write_txn()?;
        let (db, ib) = env
            .create_databases_and_commit(w, |opener, w| -> heed::Result<_> {
                let db = opener.create_database::<Bytes, Bytes>(w, None)?;
                let ib = [
                    opener.create_database::<Bytes, Bytes>(w, Some(TABLES[0]))?,
                    opener.create_database::<Bytes, Bytes>(w, Some(TABLES[1]))?,
                    opener.create_database::<Bytes, Bytes>(w, Some(TABLES[2]))?,
                    opener.create_database::<Bytes, Bytes>(w, Some(TABLES[3]))?,
                ];
                Ok(CommitOrAbort::<_, ()>::Commit((db, ib)))
            })?
            .unwrap_commit();
        Ok(Box::new(Lmdb {
            env,
            db,
            ib,
            nosync: AtomicBool::new(false),
        }))
    }
}

struct Lmdb {
    env: Env,
    db: Database<'static, Bytes, Bytes>,
    /// The insert benchmark's rows, ix1, ix2, ix3.
    ib: [Db; 4],
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

    fn ib_writer(&self) -> Result<Box<dyn IbWriter + '_>> {
        Ok(Box::new(LmdbWriter { e: self }))
    }

    fn ib_reader(&self) -> Result<Box<dyn IbReader + '_>> {
        Ok(Box::new(LmdbReader { e: self }))
    }

    fn ib_build_indexes(&self, chunk: usize, progress: &mut dyn FnMut(u64)) -> Result<u64> {
        let mut done = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let mut w = self.env.write_txn()?;
            let batch: Vec<(Vec<u8>, Vec<u8>)> = {
                let from = match &after {
                    Some(k) => Bound::Excluded(k.as_slice()),
                    None => Bound::Unbounded,
                };
                let mut v = Vec::with_capacity(chunk);
                for e in self.ib[0].range(&w, &(from, Bound::Unbounded))?.take(chunk) {
                    let (k, val) = e?;
                    v.push((k.to_vec(), val.to_vec()));
                }
                v
            };
            if batch.is_empty() {
                return Ok(done);
            }
            for (k, v) in &batch {
                let id = ib::id_of(k);
                for j in 0..3 {
                    self.ib[1 + j].put(&mut w, &ib::index_key(v, j, id), b"")?;
                }
            }
            w.commit()?;
            done += batch.len() as u64;
            after = batch.last().map(|(k, _)| k.clone());
            progress(done);
        }
    }
}

impl IbWriter for LmdbWriter<'_> {
    fn insert(&mut self, rows: &[IbRow<'_>], indexed: bool, trim: usize) -> Result<usize> {
        let ibs = &self.e.ib;
        let mut w = self.e.env.write_txn()?;
        for r in rows {
            ibs[0].put(&mut w, &ib::row_key(r.id), r.value)?;
            if indexed {
                for j in 0..3 {
                    ibs[1 + j].put(&mut w, &ib::index_key(r.value, j, r.id), b"")?;
                }
            }
        }
        let mut deleted = 0;
        while deleted < trim {
            let Some((k, v)) = ibs[0].first(&w)?.map(|(k, v)| (k.to_vec(), v.to_vec())) else {
                break;
            };
            ibs[0].delete(&mut w, &k)?;
            if indexed {
                let id = ib::id_of(&k);
                for j in 0..3 {
                    ibs[1 + j].delete(&mut w, &ib::index_key(&v, j, id))?;
                }
            }
            deleted += 1;
        }
        w.commit()?;
        Ok(deleted)
    }
}

impl IbReader for LmdbReader<'_> {
    fn row(&mut self, id: u64) -> Result<bool> {
        let r = self.e.env.read_txn()?;
        Ok(self.e.ib[0].get(&r, &ib::row_key(id))?.is_some())
    }

    fn index_range(&mut self, index: usize, from: u64, n: usize) -> Result<(usize, usize)> {
        let r = self.e.env.read_txn()?;
        let start = ib::index_start(from);
        let range = (Bound::Included(&start[..]), Bound::Unbounded);
        let (mut entries, mut found) = (0, 0);
        for e in self.e.ib[1 + index].range(&r, &range)?.take(n) {
            let (k, _) = e?;
            entries += 1;
            if let Some(v) = self.e.ib[0].get(&r, &ib::row_key(ib::id_of(k)))? {
                std::hint::black_box(v);
                found += 1;
            }
        }
        Ok((entries, found))
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

    fn write_sorted(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut w = self.e.env.write_txn()?;
        for (k, v) in pairs {
            self.e.db.put_with_flags(&mut w, PutFlags::APPEND, k, v)?;
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
