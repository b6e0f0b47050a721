//! RocksDB (rust-rocksdb, the C++ library built from source), the LSM that ForestDB was
//! measured against. Behind the `rocksdb` cargo feature: the build takes many minutes.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use larch_bench_core::engine::Result;
use larch_bench_core::ib::{self, TABLES};
use larch_bench_core::{
    Durability, Engine, EngineConfig, EngineFactory, IbReader, IbRow, IbWriter, Reader, Writer,
};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType,
    DataBlockIndexType, Options, WriteBatch, WriteOptions, DB, DEFAULT_COLUMN_FAMILY_NAME,
};

/// Block cache when the run is cached: 1 GiB (redb's default cache and fjall's here, for parity).
const CACHE: u64 = 1 << 30;

/// RocksDB's default write buffer (memtable): 64 MiB.
const MEMTABLE: u64 = 64 << 20;

/// Bloom filter bits per key: RocksDB's usual advice, ~1% false positives.
const BLOOM_BITS: f64 = 10.0;

/// The memtable size: RocksDB's default, or an eighth of a memory limit (as fjall: one
/// memtable may be flushing while the next fills).
fn memtable_bytes(cfg: &EngineConfig) -> u64 {
    match cfg.mem_limit {
        None => MEMTABLE,
        Some(limit) => (limit / 8).clamp(1 << 20, MEMTABLE),
    }
}

/// The write buffer of each of the insert benchmark's column families (rows, ix1..ix3): a
/// quarter of the one column family's above, as fjall's keyspaces, so the four together hold
/// what the one does (RocksDB's arena makes small buffers cheap; at least 1 MiB).
fn ib_memtable_bytes(cfg: &EngineConfig) -> u64 {
    (memtable_bytes(cfg) / 4).max(1 << 20)
}

/// The table size compaction aims for (`target_file_size_base`): RocksDB's default (64 MiB),
/// or an eighth of a memory limit (at least 4 MiB). A table builder keeps the filter's key
/// hashes (8 bytes a key) and the index of the table it writes in memory until it is done.
fn table_target_bytes(cfg: &EngineConfig) -> u64 {
    match cfg.mem_limit {
        None => 64 << 20,
        Some(limit) => (limit / 8).clamp(4 << 20, 64 << 20),
    }
}

/// Background threads for flushes and compactions: at least two, one per .n thread.
fn background_jobs(cfg: &EngineConfig) -> i32 {
    cfg.threads.clamp(2, 64) as i32
}

/// Which RocksDB the build linked: librocksdb-sys compiles RocksDB 11.8.1 from source unless
/// `ROCKSDB_LIB_DIR` names a library to link instead (docs/benchmarks.md, "RocksDB").
fn linked_library() -> String {
    match option_env!("ROCKSDB_LIB_DIR") {
        Some(dir) => format!(
            "the librocksdb in ROCKSDB_LIB_DIR={dir} at build time (that library's version; the C API headers are 11.8.1's)"
        ),
        None => "RocksDB 11.8.1 compiled from source by librocksdb-sys".into(),
    }
}

/// Makes RocksDB engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct RocksDbFactory;

impl EngineFactory for RocksDbFactory {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn supports_ib(&self) -> bool {
        true
    }

    fn describe(&self, _setup: &str, cfg: &EngineConfig) -> Vec<(String, String)> {
        let v = |k: &str, v: String| (k.to_string(), v);
        let limited = cfg.mem_limit.is_some();
        vec![
            v("crate", "rocksdb 0.25 (librocksdb-sys 0.19), LZ4 only".into()),
            v("library", linked_library()),
            v("compression", "LZ4 on every level (the codec fjall uses); leveled compaction with dynamic level bytes (the default)".into()),
            v(
                "block_cache",
                format!(
                    "LRU, {} MiB ({})",
                    cfg.own_cache_bytes(CACHE) >> 20,
                    if limited {
                        "a quarter of the memory limit, as fjall's"
                    } else {
                        "the data set fits; as fjall's and redb's"
                    }
                ),
            ),
            v("bloom_filter", format!("full filter, {BLOOM_BITS} bits per key (whole keys), for point reads")),
            v("data_block_index", "binary search + hash index (BinaryAndHash, ratio 0.75), for point reads".into()),
            v(
                "index_and_filter_blocks",
                if limited {
                    "in the block cache with high priority, L0's pinned (so the memory limit bounds them)"
                } else {
                    "held by the table readers outside the block cache (RocksDB's default; fastest when memory suffices)"
                }
                .into(),
            ),
            v(
                "write_buffer_size",
                format!(
                    "{} ({}), max_write_buffer_number 2 (the default)",
                    crate::size(memtable_bytes(cfg)),
                    if limited { "an eighth of the memory limit" } else { "RocksDB's default" }
                ),
            ),
            v(
                "db_write_buffer_size",
                match cfg.mem_limit {
                    Some(limit) => format!("{} (an eighth of the memory limit: every memtable of every column family together; RocksDB flushes the largest when they pass it)", crate::size(limit / 8)),
                    None => "0 (RocksDB's default: no limit across column families)".into(),
                },
            ),
            v(
                "target_file_size_base",
                if limited {
                    format!("{} (an eighth of the memory limit: a table builder holds the filter's key hashes and the index of the table it writes until it is done; RocksDB's default is 64 MiB)", crate::size(table_target_bytes(cfg)))
                } else {
                    "64 MiB (RocksDB's default)".into()
                },
            ),
            v(
                "malloc",
                if limited {
                    "mallopt(M_ARENA_MAX, 1) before open: one glibc malloc arena for every thread (measured without it at 30 MiB: RssAnon 32 MB with 19 MB of heap in use; the per-thread arenas held the rest)"
                } else {
                    "glibc's default (an arena per thread, up to 8 per core)"
                }
                .into(),
            ),
            v("background_jobs", format!("{} (increase_parallelism)", background_jobs(cfg))),
            v("sync", "WriteOptions::set_sync(true), WAL on: the WAL is fdatasync'ed before the write returns".into()),
            v("async", "WriteOptions::set_sync(false), WAL on: written to the OS, no sync".into()),
            v("sync_all", "DB::flush_wal(true): write and fdatasync the WAL".into()),
            v("reads", "DB::get_pinned / a raw iterator seek + 20 next (each reads the newest state; no explicit snapshot)".into()),
            v("writes", "one WriteBatch per batch; concurrent writers join RocksDB's write group".into()),
            v("insert_benchmark", format!("column families rows, ix1, ix2, ix3 beside the default one (which the key-value steps use), each with a write buffer of {} (a quarter of the default one's above, at least 1 MiB) and the options above; a commit is one WriteBatch (put_cf/delete_cf) of the rows, their index entries, and the removal of the oldest rows and their entries, written with the WriteOptions of the durability; the oldest rows are read with a raw iterator seeked to the smallest id not yet deleted, which the adapter remembers (as an iibench client does: a seek to the start of the column family would step over every tombstone not yet compacted away), under a mutex held through the commit (a plain DB has no transactions, so two writers must not pick the same oldest rows); ib.l.x reads 1,000 rows at a time (a fresh iterator each, so none pins old memtables) and writes their entries in one WriteBatch; queries read through DB::snapshot (a raw iterator on an index then get_pinned_cf of each row)", crate::size(ib_memtable_bytes(cfg)))),
        ]
    }

    fn open(&self, dir: &Path, _setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let limited = cfg.mem_limit.is_some();
        let cache = Cache::new_lru_cache(cfg.own_cache_bytes(CACHE) as usize);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(BLOOM_BITS, false);
        table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
        table.set_data_block_hash_ratio(0.75);
        if limited {
            table.set_cache_index_and_filter_blocks(true);
            table.set_cache_index_and_filter_blocks_with_high_priority(true);
            table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        }
        if limited {
            crate::one_malloc_arena();
        }
        let mut opts = Options::default();
        if let Some(limit) = cfg.mem_limit {
            // Every memtable of every column family together (RocksDB's write buffer manager
            // flushes the largest when they pass it); each column family's own size is below.
            opts.set_db_write_buffer_size((limit / 8) as usize);
            opts.set_target_file_size_base(table_target_bytes(cfg));
        }
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.increase_parallelism(background_jobs(cfg));
        opts.set_max_background_jobs(background_jobs(cfg));
        opts.set_compression_type(DBCompressionType::Lz4);
        opts.set_write_buffer_size(memtable_bytes(cfg) as usize);
        opts.set_block_based_table_factory(&table);
        // The key-value steps use the default column family; the insert benchmark its four.
        let mut ib_opts = opts.clone();
        ib_opts.set_write_buffer_size(ib_memtable_bytes(cfg) as usize);
        let cfs = std::iter::once(ColumnFamilyDescriptor::new(
            DEFAULT_COLUMN_FAMILY_NAME,
            opts.clone(),
        ))
        .chain(
            TABLES
                .iter()
                .map(|name| ColumnFamilyDescriptor::new(*name, ib_opts.clone())),
        );
        let db = DB::open_cf_descriptors(&opts, dir, cfs)?;
        Ok(Box::new(RocksDb {
            db,
            oldest: Mutex::new(1),
            sync: AtomicBool::new(true),
            _cache: cache,
        }))
    }
}

struct RocksDb {
    db: DB,
    /// The smallest id not yet deleted; held through an insert benchmark commit.
    oldest: Mutex<u64>,
    sync: AtomicBool,
    /// The block cache outlives the database that uses it.
    _cache: Cache,
}

impl RocksDb {
    /// The insert benchmark's column family `i` of [`TABLES`] (rows, ix1, ix2, ix3).
    fn cf(&self, i: usize) -> Result<&ColumnFamily> {
        Ok(self
            .db
            .cf_handle(TABLES[i])
            .ok_or_else(|| format!("no column family {}", TABLES[i]))?)
    }

    fn write_options(&self) -> WriteOptions {
        let mut wo = WriteOptions::default();
        wo.set_sync(self.sync.load(Ordering::Relaxed));
        wo
    }
}

impl Engine for RocksDb {
    fn set_durability(&self, d: Durability) -> Result<()> {
        self.sync.store(d == Durability::Sync, Ordering::Relaxed);
        Ok(())
    }

    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(RocksDbWriter { e: self }))
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(RocksDbReader { e: self }))
    }

    fn sync(&self) -> Result<()> {
        Ok(self.db.flush_wal(true)?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.flush_wal(true)?;
        Ok(())
    }

    fn ib_writer(&self) -> Result<Box<dyn IbWriter + '_>> {
        Ok(Box::new(RocksDbWriter { e: self }))
    }

    fn ib_reader(&self) -> Result<Box<dyn IbReader + '_>> {
        Ok(Box::new(RocksDbReader { e: self }))
    }

    fn ib_build_indexes(&self, chunk: usize, progress: &mut dyn FnMut(u64)) -> Result<u64> {
        let rows_cf = self.cf(0)?;
        let ix = [self.cf(1)?, self.cf(2)?, self.cf(3)?];
        let mut done = 0u64;
        let mut from = 0u64;
        loop {
            // A fresh iterator per chunk: one kept through the build would pin the memtables
            // and files of the moment it was made.
            let mut it = self.db.raw_iterator_cf(rows_cf);
            it.seek(ib::row_key(from));
            let mut b = WriteBatch::default();
            let mut n = 0;
            while n < chunk {
                let (Some(k), Some(v)) = (it.key(), it.value()) else {
                    break;
                };
                let id = ib::id_of(k);
                for (j, cf) in ix.iter().enumerate() {
                    b.put_cf(*cf, ib::index_key(v, j, id), b"");
                }
                from = id + 1;
                n += 1;
                it.next();
            }
            it.status()?;
            drop(it);
            if n == 0 {
                return Ok(done);
            }
            self.db.write_opt(b, &self.write_options())?;
            done += n as u64;
            progress(done);
        }
    }
}

impl IbWriter for RocksDbWriter<'_> {
    fn insert(&mut self, rows: &[IbRow<'_>], indexed: bool, trim: usize) -> Result<usize> {
        let e = self.e;
        let rows_cf = e.cf(0)?;
        let ix = [e.cf(1)?, e.cf(2)?, e.cf(3)?];
        let mut b = WriteBatch::default();
        for r in rows {
            b.put_cf(rows_cf, ib::row_key(r.id), r.value);
            if indexed {
                for (j, cf) in ix.iter().enumerate() {
                    b.put_cf(*cf, ib::index_key(r.value, j, r.id), b"");
                }
            }
        }
        let mut oldest = e.oldest.lock().map_err(|_| "oldest mutex poisoned")?;
        let mut deleted = 0;
        if trim > 0 {
            // From the smallest id not yet deleted: a seek to the start of the column family
            // would step over every tombstone not yet compacted away.
            let mut it = e.db.raw_iterator_cf(rows_cf);
            it.seek(ib::row_key(*oldest));
            while deleted < trim {
                let (Some(k), Some(v)) = (it.key(), it.value()) else {
                    break;
                };
                let id = ib::id_of(k);
                b.delete_cf(rows_cf, k);
                if indexed {
                    for (j, cf) in ix.iter().enumerate() {
                        b.delete_cf(*cf, ib::index_key(v, j, id));
                    }
                }
                *oldest = id + 1;
                deleted += 1;
                it.next();
            }
            it.status()?;
        }
        e.db.write_opt(b, &e.write_options())?;
        Ok(deleted)
    }
}

impl IbReader for RocksDbReader<'_> {
    fn row(&mut self, id: u64) -> Result<bool> {
        Ok(self
            .e
            .db
            .get_pinned_cf(self.e.cf(0)?, ib::row_key(id))?
            .is_some())
    }

    fn index_range(&mut self, index: usize, from: u64, n: usize) -> Result<(usize, usize)> {
        let e = self.e;
        let (rows_cf, ix) = (e.cf(0)?, e.cf(1 + index)?);
        let snap = e.db.snapshot();
        let mut it = snap.raw_iterator_cf(ix);
        it.seek(ib::index_start(from));
        let (mut entries, mut found) = (0, 0);
        while entries < n {
            let Some(k) = it.key() else {
                break;
            };
            entries += 1;
            if let Some(v) = snap.get_pinned_cf(rows_cf, ib::row_key(ib::id_of(k)))? {
                std::hint::black_box(&*v);
                found += 1;
            }
            it.next();
        }
        it.status()?;
        Ok((entries, found))
    }
}

struct RocksDbWriter<'e> {
    e: &'e RocksDb,
}

impl Writer for RocksDbWriter<'_> {
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut b = WriteBatch::default();
        for (k, v) in pairs {
            b.put(k, v);
        }
        self.e.db.write_opt(b, &self.e.write_options())?;
        Ok(())
    }
}

struct RocksDbReader<'e> {
    e: &'e RocksDb,
}

impl Reader for RocksDbReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.e.db.get_pinned(key)?.map(|v| v.len()))
    }

    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let mut it = self.e.db.raw_iterator();
        it.seek(start);
        let mut got = 0;
        while got < n {
            match (it.key(), it.value()) {
                (Some(k), Some(v)) => *bytes += (k.len() + v.len()) as u64,
                _ => break,
            }
            got += 1;
            it.next();
        }
        it.status()?;
        Ok(got)
    }
}
