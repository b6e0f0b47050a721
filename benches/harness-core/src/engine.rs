//! What an engine must provide to be measured.
//!
//! The runner opens an engine once per child process and drives every step through it. Each
//! thread of a step asks for its own [`Writer`] or [`Reader`] (SQLite needs a connection per
//! thread; the others hand out cheap views), so the handles need not be `Send`.

use std::path::Path;

/// Errors from engines, the runner and the writers: anything printable.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Result with [`BoxError`].
pub type Result<T> = std::result::Result<T, BoxError>;

/// Whether a commit must survive power loss when it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Durable when commit returns (larch `Sync`, LMDB default flags, redb `Immediate`,
    /// SQLite `synchronous=FULL`, fjall `PersistMode::SyncData`).
    Sync,
    /// In the OS page cache when commit returns; durable at the next sync.
    Async,
}

impl Durability {
    /// `sync` or `async`.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
    }
}

/// What every engine is told when it is opened (and when its configuration is described).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Documents loaded.
    pub docs: u64,
    /// Key length in bytes.
    pub key_size: usize,
    /// Value length in bytes.
    pub value_size: usize,
    /// The n of the .n steps.
    pub threads: usize,
    /// The memory the child process may use (not-cached mode), in bytes.
    pub mem_limit: Option<u64>,
}

impl EngineConfig {
    /// Logical bytes of the data set: docs x (key + value).
    pub fn logical_bytes(&self) -> u64 {
        self.docs * (self.key_size + self.value_size) as u64
    }

    /// A cache size for engines that keep their own (redb, fjall, SQLite): `cached` when the
    /// run is cached, else a quarter of the memory limit (fjall's own advice is 20-25% of
    /// the memory available), never below 4 MiB.
    pub fn own_cache_bytes(&self, cached: u64) -> u64 {
        match self.mem_limit {
            None => cached,
            Some(limit) => (limit / 4).clamp(4 << 20, cached),
        }
    }
}

/// Makes [`Engine`]s of one kind. Lives in the parent and in the child.
pub trait EngineFactory: Sync {
    /// The engine's name in results: `larch`, `lmdb`, `redb`, `sqlite`, `fjall`.
    fn name(&self) -> &'static str;
    /// The setups to run given the `--larch-setups` list: larch runs each of them, a peer
    /// runs its single configuration (named `default`).
    fn setups(&self, larch_setups: &[String]) -> Vec<String> {
        let _ = larch_setups;
        vec!["default".to_string()]
    }
    /// Check a setup name before anything runs.
    fn check_setup(&self, setup: &str) -> Result<()> {
        if setup == "default" {
            Ok(())
        } else {
            Err(format!("{} has no setup {setup:?}", self.name()).into())
        }
    }
    /// The only steps this engine/setup can run (`None`: all of them, after a load that
    /// runs even when `--steps` leaves it out). Limits use this.
    fn steps(&self, setup: &str) -> Option<Vec<crate::steps::Step>> {
        let _ = setup;
        None
    }
    /// The setup to close and reopen the database with once the load is done and synced,
    /// before the other steps (`None`, the default: it stays open). larch's `:load-advice=`
    /// loads under one madvise and reads under another this way.
    fn reopen_after_load(&self, setup: &str) -> Option<String> {
        let _ = setup;
        None
    }
    /// The configuration `open` uses, written into results.json: (setting, value) pairs.
    fn describe(&self, setup: &str, cfg: &EngineConfig) -> Vec<(String, String)>;
    /// Whether this engine runs the insert benchmark (`ib.*` steps: [`Engine::ib_writer`],
    /// [`Engine::ib_reader`], [`Engine::ib_build_indexes`]). Engines that do not are left out
    /// of those steps.
    fn supports_ib(&self) -> bool {
        false
    }
    /// Open (creating) a database in the empty directory `dir`.
    fn open(&self, dir: &Path, setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>>;
    /// Whether [`EngineFactory::open_reader`] works: `--readers processes` (or `both`) is refused for an
    /// engine that says no.
    fn supports_reader_processes(&self) -> bool {
        false
    }
    /// Open, read-only and from another process, the database in `dir` that a process which
    /// opened it with [`EngineFactory::open`] still has open (a reader process of
    /// `--readers processes`). Only [`Engine::reader`] is called on the result.
    fn open_reader(&self, dir: &Path, setup: &str, cfg: &EngineConfig) -> Result<Box<dyn Engine>> {
        let _ = (dir, setup, cfg);
        Err("this engine has no reader processes".into())
    }
}

/// One open database.
pub trait Engine: Send + Sync {
    /// Called before each writing step (never while a step runs): the durability of the
    /// commits that follow.
    fn set_durability(&self, d: Durability) -> Result<()>;
    /// A writing handle for the calling thread. Writers of different threads may commit
    /// concurrently; the engine serializes them as it does for any application.
    fn writer(&self) -> Result<Box<dyn Writer + '_>>;
    /// A reading handle for the calling thread.
    fn reader(&self) -> Result<Box<dyn Reader + '_>>;
    /// Make every commit so far durable.
    fn sync(&self) -> Result<()>;
    /// Close cleanly (consumes the handle; dropping does the same without the error).
    fn close(self: Box<Self>) -> Result<()>;

    /// The durability of the insert benchmark's commits (called before each `ib.*` step that
    /// writes). SQLite maps async to `synchronous=NORMAL` here (the setting) rather
    /// than the `OFF` of the other steps.
    fn ib_set_durability(&self, d: Durability) -> Result<()> {
        self.set_durability(d)
    }
    /// A writer of the insert benchmark's tables (rows by id, three secondary indexes).
    fn ib_writer(&self) -> Result<Box<dyn IbWriter + '_>> {
        Err("this engine does not run the insert benchmark".into())
    }
    /// A reader of the insert benchmark's tables.
    fn ib_reader(&self) -> Result<Box<dyn IbReader + '_>> {
        Err("this engine does not run the insert benchmark".into())
    }
    /// `ib.l.x`: build the three secondary indexes from the rows already inserted (async
    /// commits; a KV engine commits every `chunk` rows). `progress` is called after each
    /// commit with the rows indexed so far (for the latency histogram). Returns the rows.
    fn ib_build_indexes(&self, chunk: usize, progress: &mut dyn FnMut(u64)) -> Result<u64> {
        let _ = (chunk, progress);
        Err("this engine does not run the insert benchmark".into())
    }
}

/// One row of the insert benchmark: `id` (the primary key, 8 bytes big-endian in KV engines)
/// and its value, whose first [`crate::ib::FIELDS_BYTES`] bytes are the three indexed fields
/// (see [`crate::ib::field`]).
#[derive(Clone, Copy, Debug)]
pub struct IbRow<'a> {
    /// The auto-increment id.
    pub id: u64,
    /// The row: three 8-byte big-endian fields then padding.
    pub value: &'a [u8],
}

/// Writes of the insert benchmark for one thread.
pub trait IbWriter {
    /// In one transaction, with the durability last set: insert `rows` (and, when `indexed`,
    /// their three index entries: field value + id -> empty), then delete the `trim` rows with
    /// the smallest ids (and their index entries, when `indexed`). Returns the rows deleted.
    fn insert(&mut self, rows: &[IbRow<'_>], indexed: bool, trim: usize) -> Result<usize>;
}

/// Reads of the insert benchmark for one thread; each call is one read transaction.
pub trait IbReader {
    /// Point query on the primary key: whether row `id` exists.
    fn row(&mut self, id: u64) -> Result<bool>;
    /// Range query: up to `n` entries of index `index` (0..3) from field value `from`, then a
    /// point read of each row they name. Returns (entries, rows found).
    fn index_range(&mut self, index: usize, from: u64, n: usize) -> Result<(usize, usize)>;
}

/// Writes for one thread.
pub trait Writer {
    /// Insert or overwrite every pair, in one transaction, with the durability last set.
    fn write(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()>;

    /// Insert every pair, in one transaction, with the durability last set, where the keys
    /// of `pairs` ascend strictly and are all greater than every key already in the table
    /// (`rb.sorted`). An engine with an append path that relies on that takes it, as redb's
    /// benchmark does (larch `WriteTree::append`, LMDB `MDB_APPEND`, redb's appending
    /// cursor); the default is [`Writer::write`].
    fn write_sorted(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        self.write(pairs)
    }
}

/// Reads for one thread. Every call is its own read transaction (snapshot), as a request
/// served by an application would be.
pub trait Reader {
    /// The length of the value of `key`, if present.
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>>;
    /// Read up to `n` entries with keys >= `start`, in key order; returns how many were read
    /// (each key and value is touched: their lengths are summed into `bytes`).
    fn scan(&mut self, start: &[u8], n: usize, bytes: &mut u64) -> Result<usize>;
}
