//! SQLite through rusqlite (bundled), WAL mode.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use larch_bench_core::engine::Result;
use larch_bench_core::ib;
use larch_bench_core::{
    Durability, Engine, EngineConfig, EngineFactory, IbReader, IbRow, IbWriter, Reader, Writer,
};
use rusqlite::{params, Connection, OpenFlags};

const FILE: &str = "bench.sqlite";
/// Page cache per connection when the run is cached (SQLite's default is 2 MiB).
const CACHE: u64 = 64 << 20;
/// mmap_size asked for (SQLite clamps it to SQLITE_MAX_MMAP_SIZE, 0x7fff0000 by default).
const MMAP: i64 = 1 << 40;

const UPSERT: &str =
    "INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v";
const GET: &str = "SELECT v FROM kv WHERE k = ?1";
const SCAN: &str = "SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2";

/// The insert benchmark's table (its rowid is the id; the indexes are made by ib.l.x).
const IB_TABLE: &str = "CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, f1 INTEGER NOT NULL, f2 INTEGER NOT NULL, f3 INTEGER NOT NULL, pad BLOB NOT NULL)";
/// ib.l.x: three real secondary indexes; an index of SQLite holds the rowid after the
/// column, so each key is field value + id.
const IB_INDEXES: [&str; 3] = [
    "CREATE INDEX ix1 ON rows (f1)",
    "CREATE INDEX ix2 ON rows (f2)",
    "CREATE INDEX ix3 ON rows (f3)",
];
const IB_INSERT: &str = "INSERT INTO rows (id, f1, f2, f3, pad) VALUES (?1, ?2, ?3, ?4, ?5)";
const IB_TRIM: &str = "DELETE FROM rows WHERE id IN (SELECT id FROM rows ORDER BY id LIMIT ?1)";
const IB_GET: &str = "SELECT pad FROM rows WHERE id = ?1";
const IB_RANGE: [&str; 3] = [
    "SELECT id, pad FROM rows INDEXED BY ix1 WHERE f1 >= ?1 ORDER BY f1, id LIMIT ?2",
    "SELECT id, pad FROM rows INDEXED BY ix2 WHERE f2 >= ?1 ORDER BY f2, id LIMIT ?2",
    "SELECT id, pad FROM rows INDEXED BY ix3 WHERE f3 >= ?1 ORDER BY f3, id LIMIT ?2",
];

/// Makes SQLite engines.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqliteFactory;

/// Page cache of the writer connection, KiB (a negative cache_size is KiB): 64 MiB, or a
/// quarter of a memory limit, as redb and fjall get.
fn writer_cache_kib(cfg: &EngineConfig) -> i64 {
    (cfg.own_cache_bytes(CACHE) >> 10) as i64
}

/// Page cache of a reading connection, KiB: 64 MiB, or SQLite's default (2,000 KiB) under a
/// memory limit (readers read through mmap; n caches of a quarter would exceed the limit).
fn reader_cache_kib(cfg: &EngineConfig) -> i64 {
    match cfg.mem_limit {
        None => (CACHE >> 10) as i64,
        Some(_) => 2000,
    }
}

fn configure(c: &Connection, cache_kib: i64) -> rusqlite::Result<()> {
    c.busy_timeout(std::time::Duration::from_secs(60))?;
    c.pragma_update(None, "cache_size", -cache_kib)?;
    let _: i64 = c.query_row(&format!("PRAGMA mmap_size = {MMAP}"), [], |r| r.get(0))?;
    Ok(())
}

impl EngineFactory for SqliteFactory {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn supports_ib(&self) -> bool {
        true
    }

    fn describe(&self, _setup: &str, cfg: &EngineConfig) -> Vec<(String, String)> {
        let v = |k: &str, v: String| (k.to_string(), v);
        vec![
            v("crate", format!("rusqlite 0.41, bundled SQLite {}", rusqlite::version())),
            v("journal_mode", "WAL (wal_autocheckpoint 1000 pages, the default)".into()),
            v("table", "CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID".into()),
            v("page_size", "4096 (the default)".into()),
            v(
                "cache_size",
                format!(
                    "{} KiB for the writer connection, {} KiB per reading connection",
                    writer_cache_kib(cfg),
                    reader_cache_kib(cfg)
                ),
            ),
            v("mmap_size", format!("{MMAP} asked (clamped to SQLITE_MAX_MMAP_SIZE, 2 GiB by default)")),
            v("sync", "PRAGMA synchronous = FULL (WAL fdatasync'ed at each commit)".into()),
            v("async", "PRAGMA synchronous = OFF".into()),
            v("sync_all", "fdatasync of the -wal file and the database file".into()),
            v("writes", format!("one writer connection behind a mutex (SQLite allows one writer); BEGIN .. COMMIT per batch with a cached prepared statement: {UPSERT}")),
            v("reads", format!("a connection per reading thread, cached prepared statements, autocommit (one read transaction per statement): {GET} / {SCAN}")),
            v("insert_benchmark", format!("{IB_TABLE}; ib.l.x: {} (one statement each, timed together); a commit: BEGIN, {IB_INSERT} per row (SQLite maintains the indexes), {IB_TRIM}, COMMIT; sync = synchronous FULL, async = synchronous NORMAL (WAL: no fdatasync at commit, only at checkpoints); queries: {} / {IB_GET}", IB_INDEXES.join("; "), IB_RANGE[0])),
        ]
    }

    fn open(&self, dir: &Path, _setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let path = dir.join(FILE);
        let c = Connection::open(&path)?;
        let mode: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if mode != "wal" {
            return Err(format!("journal_mode is {mode}, not wal").into());
        }
        configure(&c, writer_cache_kib(cfg))?;
        c.pragma_update(None, "synchronous", "FULL")?;
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
        )?;
        c.execute_batch(IB_TABLE)?;
        Ok(Box::new(Sqlite {
            path,
            cfg: cfg.clone(),
            writer: Mutex::new(c),
            sync: AtomicBool::new(true),
        }))
    }
}

struct Sqlite {
    path: PathBuf,
    cfg: EngineConfig,
    writer: Mutex<Connection>,
    sync: AtomicBool,
}

impl Engine for Sqlite {
    fn set_durability(&self, d: Durability) -> Result<()> {
        let sync = d == Durability::Sync;
        let c = self.writer.lock().map_err(|_| "writer mutex poisoned")?;
        c.pragma_update(None, "synchronous", if sync { "FULL" } else { "OFF" })?;
        self.sync.store(sync, Ordering::Relaxed);
        Ok(())
    }

    fn writer(&self) -> Result<Box<dyn Writer + '_>> {
        Ok(Box::new(SqliteWriter { e: self }))
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(self.connect_reader()?))
    }

    fn sync(&self) -> Result<()> {
        let _c = self.writer.lock().map_err(|_| "writer mutex poisoned")?;
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        if let Ok(f) = File::open(PathBuf::from(wal)) {
            f.sync_data()?;
        }
        File::open(&self.path)?.sync_data()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.sync()?;
        let c = self
            .writer
            .into_inner()
            .map_err(|_| "writer mutex poisoned")?;
        c.close().map_err(|(_, e)| e)?;
        Ok(())
    }

    fn ib_set_durability(&self, d: Durability) -> Result<()> {
        let sync = d == Durability::Sync;
        let c = self.writer.lock().map_err(|_| "writer mutex poisoned")?;
        c.pragma_update(None, "synchronous", if sync { "FULL" } else { "NORMAL" })?;
        self.sync.store(sync, Ordering::Relaxed);
        Ok(())
    }

    fn ib_writer(&self) -> Result<Box<dyn IbWriter + '_>> {
        Ok(Box::new(SqliteWriter { e: self }))
    }

    fn ib_reader(&self) -> Result<Box<dyn IbReader + '_>> {
        Ok(Box::new(self.connect_reader()?))
    }

    fn ib_build_indexes(&self, _chunk: usize, progress: &mut dyn FnMut(u64)) -> Result<u64> {
        let c = self.writer.lock().map_err(|_| "writer mutex poisoned")?;
        let rows: i64 = c.query_row("SELECT count(*) FROM rows", [], |r| r.get(0))?;
        for (j, sql) in IB_INDEXES.iter().enumerate() {
            c.execute_batch(sql)?;
            progress(rows as u64 * (j as u64 + 1) / 3);
        }
        Ok(rows as u64)
    }
}

impl Sqlite {
    fn connect_reader(&self) -> Result<SqliteReader> {
        let c = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        configure(&c, reader_cache_kib(&self.cfg))?;
        Ok(SqliteReader { c })
    }
}

impl IbWriter for SqliteWriter<'_> {
    fn insert(&mut self, rows: &[IbRow<'_>], _indexed: bool, trim: usize) -> Result<usize> {
        let mut c = self.e.writer.lock().map_err(|_| "writer mutex poisoned")?;
        let tx = c.transaction()?;
        let deleted;
        {
            let mut st = tx.prepare_cached(IB_INSERT)?;
            for r in rows {
                let f = |k| ib::field_of(r.value, k) as i64;
                st.execute(params![
                    r.id as i64,
                    f(0),
                    f(1),
                    f(2),
                    &r.value[ib::FIELDS_BYTES..]
                ])?;
            }
            deleted = if trim > 0 {
                tx.prepare_cached(IB_TRIM)?.execute([trim as i64])?
            } else {
                0
            };
        }
        tx.commit()?;
        Ok(deleted)
    }
}

impl IbReader for SqliteReader {
    fn row(&mut self, id: u64) -> Result<bool> {
        let mut st = self.c.prepare_cached(IB_GET)?;
        let mut rows = st.query([id as i64])?;
        Ok(rows.next()?.is_some())
    }

    fn index_range(&mut self, index: usize, from: u64, n: usize) -> Result<(usize, usize)> {
        // One statement: the index's entries from `from`, each row fetched by its rowid.
        let mut st = self.c.prepare_cached(IB_RANGE[index])?;
        let mut rows = st.query(params![from as i64, n as i64])?;
        let mut got = 0;
        while let Some(row) = rows.next()? {
            std::hint::black_box(row.get_ref(1)?.as_blob()?.len());
            got += 1;
        }
        Ok((got, got))
    }
}

struct SqliteWriter<'e> {
    e: &'e Sqlite,
}

impl Writer for SqliteWriter<'_> {
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut c = self.e.writer.lock().map_err(|_| "writer mutex poisoned")?;
        let tx = c.transaction()?;
        {
            let mut st = tx.prepare_cached(UPSERT)?;
            for (k, v) in pairs {
                st.execute(params![k, v])?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

struct SqliteReader {
    c: Connection,
}

impl Reader for SqliteReader {
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>> {
        let mut st = self.c.prepare_cached(GET)?;
        let mut rows = st.query([key])?;
        match rows.next()? {
            Some(row) => Ok(Some(row.get_ref(0)?.as_blob()?.len())),
            None => Ok(None),
        }
    }

    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize> {
        let mut st = self.c.prepare_cached(SCAN)?;
        let mut rows = st.query(params![start, n as i64])?;
        let mut got = 0;
        while let Some(row) = rows.next()? {
            let k = row.get_ref(0)?.as_blob()?.len();
            let v = row.get_ref(1)?.as_blob()?.len();
            *bytes += (k + v) as u64;
            got += 1;
        }
        Ok(got)
    }
}
