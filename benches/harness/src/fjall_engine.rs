//! fjall, the LSM (in place of RocksDB).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fjall::compaction::Leveled;
use fjall::config::PinningPolicy;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use larch_bench_core::engine::Result;
use larch_bench_core::ib::{self, TABLES};
use larch_bench_core::{
    Durability, Engine, EngineConfig, EngineFactory, IbReader, IbRow, IbWriter, Reader, Writer,
};

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

/// The memtable of each of the insert benchmark's keyspaces (rows, ix1, ix2, ix3). Cached: a
/// quarter of the one keyspace's, so the four together hold what the one does. Under a memory
/// limit: a 64th of it (at least 256 KiB). fjall's memtables take more than their size: a
/// write that fills one only asks the worker pool to rotate it, and the request waits in the
/// pool's one queue behind flushes and compactions, so while both workers (min(cores, 4)) are
/// busy the active memtable grows past its size; then each keyspace may queue 4 sealed ones
/// before writes halt. Measured, rows inserted as in ib.l.i0 with 480 KiB memtables and the
/// options below: 8-33 MiB of write buffer (`write_buffer_size`) at its peak. fjall has no
/// setting that bounds it (`max_write_buffer_size` is hidden, deprecated and unread in 3.1; 4
/// workers kept the write buffer smaller, but their compactions took more memory back and
/// were killed at 30 MiB 3 runs of 3), so the memtables are made small.
fn ib_memtable_bytes(cfg: &EngineConfig) -> u64 {
    match cfg.mem_limit {
        None => (memtable_bytes(cfg) / 4).max(1 << 20),
        Some(limit) => (limit / 64).clamp(256 << 10, MEMTABLE / 4),
    }
}

/// The table size leveled compaction aims for: fjall's default (64 MiB), or an eighth of a
/// memory limit (at least 4 MiB). Leveled compaction sizes L1 at 4 tables, so at 64 MiB every
/// L0 -> L1 compaction of a database of ~100 MB rewrites the whole keyspace; with small tables
/// compactions are short, hold fewer tables' filter hashes (8 bytes a key) and indexes, and
/// leave a worker free sooner to rotate a full memtable (above). Measured at 30 MiB (one
/// malloc arena): fjall's default table size was killed in ib.l.x 2 runs of 2, 16 MiB was not.
fn table_target_bytes(cfg: &EngineConfig) -> u64 {
    match cfg.mem_limit {
        None => 64 << 20,
        Some(limit) => (limit / 8).clamp(4 << 20, 64 << 20),
    }
}

/// Keyspace options: the memtable, and under a memory limit the table size above and no
/// pinned index or filter blocks (by default fjall pins L0's filters and L0's and L1's
/// indexes outside the block cache; unpinned, they are read through the cache, whose size
/// bounds them, as RocksDB's cache_index_and_filter_blocks).
fn keyspace_options(cfg: &EngineConfig, memtable: u64) -> KeyspaceCreateOptions {
    let o = KeyspaceCreateOptions::default().max_memtable_size(memtable);
    if cfg.mem_limit.is_none() {
        return o;
    }
    o.filter_block_pinning_policy(PinningPolicy::disabled())
        .index_block_pinning_policy(PinningPolicy::disabled())
        .compaction_strategy(Arc::new(
            Leveled::default().with_table_target_size(table_target_bytes(cfg)),
        ))
}

/// Makes fjall engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct FjallFactory;

impl EngineFactory for FjallFactory {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn supports_ib(&self) -> bool {
        true
    }

    fn describe(&self, _setup: &str, cfg: &EngineConfig) -> Vec<(String, String)> {
        let v = |k: &str, v: String| (k.to_string(), v);
        let limited = cfg.mem_limit.is_some();
        vec![
            v("crate", "fjall 3 (lsm-tree 3), default compression (LZ4)".into()),
            v(
                "cache_size",
                format!(
                    "{} MiB ({})",
                    cfg.own_cache_bytes(CACHE) >> 20,
                    if limited {
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
                    "{} ({})",
                    crate::size(memtable_bytes(cfg)),
                    if limited {
                        "an eighth of the memory limit"
                    } else {
                        "fjall's default"
                    }
                ),
            ),
            v(
                "compaction",
                if limited {
                    format!("leveled, table target size {} (an eighth of the memory limit, fjall's default 64 MiB: L1 is 4 tables, so smaller tables make shorter L0 -> L1 compactions that hold less and free a worker sooner to rotate a full memtable)", crate::size(table_target_bytes(cfg)))
                } else {
                    "leveled, fjall's defaults (table target size 64 MiB)".into()
                },
            ),
            v(
                "pinning",
                if limited {
                    "none: index and filter blocks are read through the block cache, which bounds them (fjall pins L0's filters and L0's and L1's indexes outside the cache by default)"
                } else {
                    "fjall's default: L0's filter blocks and L0's and L1's index blocks pinned"
                }
                .into(),
            ),
            v(
                "malloc",
                if limited {
                    "mallopt(M_ARENA_MAX, 1) before open: one glibc malloc arena for every thread (per-thread arenas held 6-15 MB above the heap in use, more than the limit leaves)"
                } else {
                    "glibc's default (an arena per thread, up to 8 per core)"
                }
                .into(),
            ),
            v("sync", "WriteBatch with durability(Some(PersistMode::SyncData)): the journal is fdatasync'ed before commit returns".into()),
            v("async", "WriteBatch without durability: the journal is written to the OS (fjall's default), no sync".into()),
            v("sync_all", "Database::persist(PersistMode::SyncData)".into()),
            v("reads", "Keyspace::get / Keyspace::range(start..).take(20) (each reads the newest state; no explicit snapshot)".into()),
            v("writes", "one WriteBatch per batch; concurrent batches serialize on the journal".into()),
            v("insert_benchmark", format!("keyspaces rows, ix1, ix2, ix3, each with the options above and a memtable of {} ({}); a commit is one WriteBatch of the rows, their index entries, and the removal of the oldest rows and their entries; the oldest rows are read with Keyspace::range from the smallest id not yet deleted, which the adapter remembers (as an iibench client does: an LSM scan from the start of the key space would step over every tombstone not yet compacted away), under a mutex held through the commit (fjall's plain Database has no transactions, so two writers must not pick the same oldest rows); ib.l.x reads 1,000 rows at a time and writes their entries in one batch; queries read through Database::snapshot (range on an index then get of each row)", crate::size(ib_memtable_bytes(cfg)), if limited { "a 64th of the memory limit: a full memtable is rotated only when a worker takes the request, behind flushes and compactions, and each keyspace may queue 4 sealed ones, so the write buffer grows to many times this (8-33 MiB measured with 480 KiB memtables)" } else { "a quarter of the one keyspace's above, so the four hold what the one does" })),
        ]
    }

    fn open(&self, dir: &Path, _setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        if cfg.mem_limit.is_some() {
            crate::one_malloc_arena();
        }
        let db = Database::builder(dir)
            .cache_size(cfg.own_cache_bytes(CACHE))
            .open()?;
        let memtable = memtable_bytes(cfg);
        let ks = db.keyspace("bench", || keyspace_options(cfg, memtable))?;
        let ib_memtable = ib_memtable_bytes(cfg);
        let mut ib = Vec::new();
        for name in TABLES {
            ib.push(db.keyspace(name, || keyspace_options(cfg, ib_memtable))?);
        }
        let ib: [Keyspace; 4] = ib.try_into().map_err(|_| "four ib keyspaces")?;
        Ok(Box::new(Fjall {
            db,
            ks,
            ib,
            oldest: Mutex::new(1),
            sync: AtomicBool::new(true),
        }))
    }
}

struct Fjall {
    db: Database,
    ks: Keyspace,
    /// The insert benchmark's rows, ix1, ix2, ix3.
    ib: [Keyspace; 4],
    /// The smallest id not yet deleted; held through an insert benchmark commit.
    oldest: Mutex<u64>,
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

    fn ib_writer(&self) -> Result<Box<dyn IbWriter + '_>> {
        Ok(Box::new(FjallWriter { e: self }))
    }

    fn ib_reader(&self) -> Result<Box<dyn IbReader + '_>> {
        Ok(Box::new(FjallReader { e: self }))
    }

    fn ib_build_indexes(&self, chunk: usize, progress: &mut dyn FnMut(u64)) -> Result<u64> {
        let mut done = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let from = match &after {
                Some(k) => Bound::Excluded(k.clone()),
                None => Bound::Unbounded,
            };
            let mut rows = Vec::with_capacity(chunk);
            for g in self.ib[0]
                .range::<Vec<u8>, _>((from, Bound::Unbounded))
                .take(chunk)
            {
                rows.push(g.into_inner()?);
            }
            let Some((last, _)) = rows.last() else {
                return Ok(done);
            };
            after = Some(last.to_vec());
            let mut b = self.db.batch();
            for (k, v) in &rows {
                let id = ib::id_of(k);
                for j in 0..3 {
                    b.insert(&self.ib[1 + j], ib::index_key(v, j, id), b"");
                }
            }
            if self.sync.load(Ordering::Relaxed) {
                b = b.durability(Some(PersistMode::SyncData));
            }
            b.commit()?;
            done += rows.len() as u64;
            progress(done);
        }
    }
}

impl IbWriter for FjallWriter<'_> {
    fn insert(&mut self, rows: &[IbRow<'_>], indexed: bool, trim: usize) -> Result<usize> {
        let e = self.e;
        let mut b = e.db.batch();
        for r in rows {
            b.insert(&e.ib[0], ib::row_key(r.id), r.value);
            if indexed {
                for j in 0..3 {
                    b.insert(&e.ib[1 + j], ib::index_key(r.value, j, r.id), b"");
                }
            }
        }
        if e.sync.load(Ordering::Relaxed) {
            b = b.durability(Some(PersistMode::SyncData));
        }
        let mut oldest = e.oldest.lock().map_err(|_| "oldest mutex poisoned")?;
        let mut deleted = 0;
        if trim > 0 {
            for g in e.ib[0].range(ib::row_key(*oldest)..).take(trim) {
                let (k, v) = g.into_inner()?;
                let id = ib::id_of(&k);
                b.remove(&e.ib[0], k);
                if indexed {
                    for j in 0..3 {
                        b.remove(&e.ib[1 + j], ib::index_key(&v, j, id));
                    }
                }
                *oldest = id + 1;
                deleted += 1;
            }
        }
        b.commit()?;
        Ok(deleted)
    }
}

impl IbReader for FjallReader<'_> {
    fn row(&mut self, id: u64) -> Result<bool> {
        Ok(self.e.ib[0].get(ib::row_key(id))?.is_some())
    }

    fn index_range(&mut self, index: usize, from: u64, n: usize) -> Result<(usize, usize)> {
        let snap = self.e.db.snapshot();
        let (mut entries, mut found) = (0, 0);
        for g in snap
            .range(&self.e.ib[1 + index], ib::index_start(from)..)
            .take(n)
        {
            let k = g.key()?;
            entries += 1;
            if let Some(v) = snap.get(&self.e.ib[0], ib::row_key(ib::id_of(&k)))? {
                std::hint::black_box(v);
                found += 1;
            }
        }
        Ok((entries, found))
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
