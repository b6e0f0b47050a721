//! RocksDB (rust-rocksdb, the C++ library built from source), the LSM that ForestDB was
//! measured against. Behind the `rocksdb` cargo feature: the build takes many minutes.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use larch_bench_core::engine::Result;
use larch_bench_core::{Durability, Engine, EngineConfig, EngineFactory, Reader, Writer};
use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, DataBlockIndexType, Options, WriteBatch,
    WriteOptions, DB,
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
                    "{} MiB ({})",
                    memtable_bytes(cfg) >> 20,
                    if limited { "an eighth of the memory limit" } else { "RocksDB's default" }
                ),
            ),
            v("background_jobs", format!("{} (increase_parallelism)", background_jobs(cfg))),
            v("sync", "WriteOptions::set_sync(true), WAL on: the WAL is fdatasync'ed before the write returns".into()),
            v("async", "WriteOptions::set_sync(false), WAL on: written to the OS, no sync".into()),
            v("sync_all", "DB::flush_wal(true): write and fdatasync the WAL".into()),
            v("reads", "DB::get_pinned / a raw iterator seek + 20 next (each reads the newest state; no explicit snapshot)".into()),
            v("writes", "one WriteBatch per batch; concurrent writers join RocksDB's write group".into()),
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
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.increase_parallelism(background_jobs(cfg));
        opts.set_max_background_jobs(background_jobs(cfg));
        opts.set_compression_type(DBCompressionType::Lz4);
        opts.set_write_buffer_size(memtable_bytes(cfg) as usize);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, dir)?;
        Ok(Box::new(RocksDb {
            db,
            sync: AtomicBool::new(true),
            _cache: cache,
        }))
    }
}

struct RocksDb {
    db: DB,
    sync: AtomicBool,
    /// The block cache outlives the database that uses it.
    _cache: Cache,
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
        Ok(Box::new(RocksDbReader { db: &self.db }))
    }

    fn sync(&self) -> Result<()> {
        Ok(self.db.flush_wal(true)?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.flush_wal(true)?;
        Ok(())
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
        let mut wo = WriteOptions::default();
        wo.set_sync(self.e.sync.load(Ordering::Relaxed));
        self.e.db.write_opt(b, &wo)?;
        Ok(())
    }
}

struct RocksDbReader<'e> {
    db: &'e DB,
}

impl Reader for RocksDbReader<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get_pinned(key)?.map(|v| v.len()))
    }

    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let mut it = self.db.raw_iterator();
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
