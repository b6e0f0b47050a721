//! How a database is opened: page size, durability, free-space policy, write mode, advice.

pub use larch_freelist::PolicyKind as Policy;
pub use larch_pager::{Advice, CacheFolios, WriteMode};

/// When a commit becomes durable (survives power loss). Per database, overridable per
/// transaction with [`crate::WriteTx::set_durability`]. The README's "Choosing durability"
/// says what each risks on power loss and what it costs.
///
/// ```
/// use larch_engine::{Db, Durability, Options};
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path().join("t.larch"), Options::default().durability(Durability::Async))?;
/// let mut tx = db.begin_write()?;
/// tx.open_tree("t")?.insert(b"k", b"v")?;
/// tx.set_durability(Durability::Sync); // this one commit is durable when commit returns
/// tx.commit()?;
/// assert_eq!(db.stats()?.durable_txid, 1);
/// # Ok::<(), larch_engine::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// Durable when commit returns: pages and a meta listing them, one fdatasync (the
    /// one-fsync commit; LMDB's pages, fdatasync, meta, fdatasync with
    /// [`Options::one_fsync_commit`]`(false)`).
    #[default]
    Sync,
    /// As `Sync`, but the meta is made durable by the next commit's first sync: atomic, may
    /// lose this last transaction on power loss.
    NoMetaSync,
    /// No sync and no meta write: visible to readers at once, durable at the next `Sync`
    /// commit, [`crate::Db::sync`] or close. After a crash the file opens at exactly the last
    /// durable commit.
    Async,
}

impl Durability {
    /// Every durability. See [`Durability::name`] for an example.
    pub const ALL: [Durability; 3] = [Durability::Sync, Durability::NoMetaSync, Durability::Async];

    /// Lowercase name used on the command line.
    ///
    /// ```
    /// use larch_engine::Durability;
    /// for d in Durability::ALL {
    ///     assert_eq!(Durability::from_name(d.name()), Some(d));
    /// }
    /// assert_eq!(Durability::NoMetaSync.name(), "nometasync");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::NoMetaSync => "nometasync",
            Durability::Async => "async",
        }
    }
    /// Inverse of [`Durability::name`]; see there for an example.
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sync" => Some(Durability::Sync),
            "nometasync" => Some(Durability::NoMetaSync),
            "async" => Some(Durability::Async),
            _ => None,
        }
    }
}

/// Options for [`crate::Db::open`]. Every setter takes `self` and returns it.
///
/// ```
/// use larch_engine::{Options, Durability, Policy, WriteMode, Advice};
/// let opts = Options::default()
///     .page_size(16384)
///     .durability(Durability::NoMetaSync)
///     .policy(Policy::FirstFit)
///     .write_mode(WriteMode::Mmap)
///     .advice(Advice::Random);
/// assert_eq!(opts.get_page_size(), 16384);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub(crate) page_size: usize,
    pub(crate) durability: Durability,
    pub(crate) policy: Policy,
    pub(crate) write_mode: WriteMode,
    pub(crate) advice: Advice,
    pub(crate) cache_folios: CacheFolios,
    pub(crate) verify_checksums: bool,
    pub(crate) read_only: bool,
    pub(crate) create: bool,
    pub(crate) compaction_threshold: Option<f64>,
    pub(crate) compaction_min_bytes: u64,
    pub(crate) compaction_check: std::time::Duration,
    pub(crate) one_fsync: bool,
    pub(crate) group_commit: bool,
    pub(crate) fall_back_on_damage: bool,
    pub(crate) max_unsynced: Unsynced,
    /// [`Options::max_unsynced_age`].
    pub(crate) max_unsynced_age: Option<std::time::Duration>,
    /// Whether a handle with a `max_unsynced_age` runs its timer (off only in tests:
    /// [`Options::unsynced_age_timer`]).
    pub(crate) unsynced_age_timer: bool,
    /// [`CARRIED_MAX`] unless a test lowers it ([`Options::carried_max_bits`]).
    pub(crate) carried_max: usize,
}

/// [`Options::max_unsynced_bytes`]: how many bytes of replaced pages may wait for a durable
/// commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unsynced {
    /// An eighth of the live data, at least 2 MiB and at most 16 MiB.
    Auto,
    Bytes(u64),
    Off,
}

impl Unsynced {
    /// The limit for a database holding `live_bytes`.
    pub(crate) fn limit(self, live_bytes: u64) -> Option<u64> {
        match self {
            Unsynced::Auto => Some((live_bytes / 8).clamp(2 << 20, DEFAULT_MAX_UNSYNCED_BYTES)),
            Unsynced::Bytes(b) => Some(b),
            Unsynced::Off => None,
        }
    }
}

/// The most free-map bits the writer carries past Async commits before one of them saves
/// the free map anyway (`Txn::commit`): what a behind free map can lack, so also the most a
/// read-write open takes from the walk on top of it (`load`).
pub(crate) const CARRIED_MAX: usize = 1 << 16;

/// The most the default of [`Options::max_unsynced_bytes`] allows: 16 MiB.
pub const DEFAULT_MAX_UNSYNCED_BYTES: u64 = 16 << 20;

impl Default for Options {
    fn default() -> Self {
        Options {
            page_size: 4096,
            durability: Durability::Sync,
            policy: Policy::FirstFit,
            write_mode: WriteMode::Pwrite,
            advice: Advice::Random,
            cache_folios: CacheFolios::Small,
            verify_checksums: false,
            read_only: false,
            create: true,
            compaction_threshold: None,
            compaction_min_bytes: 4 << 20,
            compaction_check: std::time::Duration::from_secs(1),
            one_fsync: true,
            group_commit: true,
            fall_back_on_damage: false,
            max_unsynced: Unsynced::Auto,
            max_unsynced_age: None,
            unsynced_age_timer: true,
            carried_max: CARRIED_MAX,
        }
    }
}

impl Options {
    /// Check the options every open path relies on: a legal page size, a compaction
    /// threshold strictly between 0 and 1. [`crate::Db::open`] calls it.
    ///
    /// ```
    /// use larch_engine::{Error, Options};
    /// assert!(Options::default().validate().is_ok());
    /// assert!(matches!(Options::default().page_size(5000).validate(), Err(Error::InvalidOption(_))));
    /// assert!(Options::default().compaction_threshold(Some(1.5)).validate().is_err());
    /// ```
    pub fn validate(&self) -> crate::Result<()> {
        if !larch_pager::valid_page_size(self.page_size) {
            return Err(crate::Error::InvalidOption(format!(
                "page size {} is not a power of two between 4096 and 65536",
                self.page_size
            )));
        }
        if self.max_unsynced == Unsynced::Bytes(0) {
            return Err(crate::Error::InvalidOption(
                "max_unsynced_bytes of 0: use Durability::Sync to make every commit durable".into(),
            ));
        }
        if self.max_unsynced_age == Some(std::time::Duration::ZERO) {
            return Err(crate::Error::InvalidOption(
                "max_unsynced_age of 0: use Durability::Sync to make every commit durable".into(),
            ));
        }
        if let Some(t) = self.compaction_threshold {
            if !(t > 0.0 && t < 1.0) {
                return Err(crate::Error::InvalidOption(format!(
                    "compaction threshold {t} is not a fraction between 0 and 1"
                )));
            }
        }
        Ok(())
    }

    /// The most free-map bits the writer carries past Async commits before one saves them
    /// (docs/format.md, "A free map behind its meta"; 65,536 by default), which is also the
    /// most a read-write open accepts a behind free map to lack. Lowered by the power-cut
    /// simulation so that small files reach both limits; a file written with a larger value
    /// may be refused by an open with a smaller one. For tests only.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn carried_max_bits(mut self, bits: usize) -> Self {
        self.carried_max = bits.max(1);
        self
    }

    /// Page size for a new file: a power of two in 4096..=65536. An existing file keeps the
    /// page size it was created with. The page size sets the largest key (a quarter of it)
    /// and which values stay in their leaf (the README's "Limits").
    ///
    /// ```
    /// use larch_engine::{Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path().join("t.larch"), Options::default().page_size(65536))?;
    /// assert_eq!(db.page_size(), 65536);
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(&[7; 16384], b"a key of page_size / 4 bytes")?;
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn page_size(mut self, size: usize) -> Self {
        self.page_size = size;
        self
    }
    /// Default durability of write transactions. See [`Durability`] for an example.
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }
    /// Free-space policy: which freed pages are reused, and in what order. The default,
    /// `FirstFit`, reuses the lowest free pages first and keeps the file near the live data.
    /// `AppendPreferring` ("append-run") reuses only runs of 8+ free pages, so a commit's
    /// pages land together (9x fewer write runs per commit in docs/policies.md), but it
    /// barely reuses anything under Async overwrites: 15x the logical data in the workload
    /// harness, against 1.8-3.3x for `FirstFit`, with slower reads over the larger file.
    ///
    /// ```
    /// use larch_engine::{Advice, Durability, Options, Policy, WriteMode};
    /// let opts = Options::default().policy(Policy::AppendPreferring);
    /// assert_eq!(opts.get_policy(), Policy::AppendPreferring);
    /// assert_eq!(Policy::from_name("first-fit"), Some(Policy::FirstFit));
    /// ```
    pub fn policy(mut self, p: Policy) -> Self {
        self.policy = p;
        self
    }
    /// How a commit's pages reach the file: `Pwrite` (the default: pwritev from private
    /// buffers), `Mmap` (stores through a writable map, msync of the ranges written) or
    /// `Hybrid` (an Async commit's pages through the writable map, everything else by pwrite,
    /// fdatasync). The map modes store into pages the page cache may first have to read from
    /// the disk, and a file system that needs new blocks to overwrite (copy-on-write ones,
    /// such as btrfs) can fail such a store on a full disk with SIGBUS, as a read error on
    /// that first read does: `posix_fallocate` covers the growth of the file, not that. docs/performance.md, "Write modes", has the
    /// measurements behind the default.
    ///
    /// ```
    /// use larch_engine::{Advice, Durability, Options, Policy, WriteMode};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = larch_engine::Db::open(dir.path().join("t.larch"), Options::default().write_mode(WriteMode::Mmap))?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// assert_eq!(db.options().get_write_mode(), WriteMode::Mmap);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn write_mode(mut self, m: WriteMode) -> Self {
        self.write_mode = m;
        self
    }
    /// madvise applied to the read map: `Random` (the default: no readahead, best for point
    /// reads on files larger than memory), `Normal` or `Sequential`.
    ///
    /// ```
    /// use larch_engine::{Advice, Durability, Options, Policy, WriteMode};
    /// assert_eq!(Options::default().get_advice(), Advice::Random);
    /// assert_eq!(Options::default().advice(Advice::Sequential).get_advice(), Advice::Sequential);
    /// ```
    pub fn advice(mut self, a: Advice) -> Self {
        self.advice = a;
        self
    }
    /// How large the kernel's page-cache folios are for pages this handle writes into parts
    /// of the file it had not written (Linux with large folios): `Small` (the default, one
    /// page each: every later one-page rewrite, which each commit makes, costs the kernel a
    /// page; but pages filled in key order, by `WriteTree::append` or by inserts of ascending
    /// keys, go into large folios, since later commits seldom rewrite them) or `Large` (up to
    /// 64 KiB: point reads through the map are up to 5% faster over them at 500,000
    /// documents). What it buys and costs on this project's machine is in
    /// docs/performance.md, "Page-cache folios": with `Small` loads run 1.18-1.23x and async
    /// overwrites 1.09-1.24x faster, one-key commits after a bulk load of random keys in one
    /// transaction 1.2x, point reads 0.95x at 500,000 documents and 1.05x at 10,000,000.
    /// Pwrite writes (and Hybrid's); nothing in the file changes.
    ///
    /// ```
    /// use larch_engine::{CacheFolios, Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// assert_eq!(Options::default().get_cache_folios(), CacheFolios::Small);
    /// let db = Db::open(dir.path().join("t.larch"), Options::default().cache_folios(CacheFolios::Large))?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn cache_folios(mut self, f: CacheFolios) -> Self {
        self.cache_folios = f;
        self
    }
    /// Verify each page's crc32 on every read (off by default for speed; `check()` always
    /// verifies).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let opts = larch_engine::Options::default().verify_checksums(true);
    /// let db = larch_engine::Db::open(dir.path().join("t.larch"), opts)?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// assert_eq!(db.begin_read()?.open_tree("t")?.get(b"k")?, Some(&b"v"[..])); // checked
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn verify_checksums(mut self, on: bool) -> Self {
        self.verify_checksums = on;
        self
    }
    /// Open without write access, under a shared lock: any number of read-only handles, no
    /// writer. The file is never modified.
    ///
    /// ```
    /// use larch_engine::{Db, Error, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("t.larch");
    /// drop(Db::open(&path, Options::default())?);
    /// let a = Db::open(&path, Options::default().read_only(true))?;
    /// let b = Db::open(&path, Options::default().read_only(true))?; // shared
    /// assert!(matches!(a.begin_write(), Err(Error::ReadOnly { .. })));
    /// assert!(matches!(Db::open(&path, Options::default()), Err(Error::AlreadyOpen { .. })));
    /// # drop(b);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }
    /// Create the file if it is missing (default true).
    ///
    /// ```
    /// use larch_engine::{Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("missing.larch");
    /// assert!(Db::open(&path, Options::default().create(false)).is_err());
    /// assert!(!path.exists());
    /// ```
    pub fn create(mut self, on: bool) -> Self {
        self.create = on;
        self
    }
    /// Compact in the background when more than this fraction of the file's pages has stayed
    /// free (or held only by readers) through the last two sync windows (ForestDB's default
    /// threshold is 0.30), once the file is over [`Options::compaction_min_bytes`]. Pages the
    /// policy keeps reusing, and pages waiting for the next sync, do not count: compaction
    /// could not give them back. While a compaction runs, `begin_write` waits for it once the
    /// file has grown by this fraction since it started, so a fast writer cannot outrun the
    /// copy. `None` (the default) never compacts on its own (docs/format.md, "By threshold").
    ///
    /// The windows are a handle's history of the file. A handle just opened, or one that
    /// another process's commits made rebuild its writer state, counts the free pages less
    /// twice [`Options::max_unsynced_bytes`] (the working space a writer of Async commits
    /// leaves) until it has seen two windows, and looks at open; a handle left open without
    /// writing looks again on its timer and [`crate::Db::sync`] once other processes have
    /// committed. Closing the last handle lets a running compaction finish. So a file that
    /// short-lived processes write, or several processes in turn, is compacted too, but
    /// never while another process has it open (docs/format.md, "Across opens and
    /// processes"). See [`crate::Db::wait_for_compaction`] for an example.
    pub fn compaction_threshold(mut self, t: Option<f64>) -> Self {
        self.compaction_threshold = t;
        self
    }
    /// Make a `Sync` commit durable with one fdatasync (the default): the meta lists the pages
    /// its commit wrote, and recovery verifies them and falls back to the previous commit if
    /// any is missing or torn. `false` keeps LMDB's protocol: pages, fdatasync, meta,
    /// fdatasync. A commit whose page list does not fit the meta page, or that follows a
    /// commit not yet durable, uses the two-sync protocol either way.
    ///
    /// ```
    /// use larch_engine::{Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path().join("t.larch"), Options::default().one_fsync_commit(false))?;
    /// let syncs = db.io_stats().syncs;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// assert_eq!(db.io_stats().syncs - syncs, 2); // pages, fdatasync, meta, fdatasync
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn one_fsync_commit(mut self, on: bool) -> Self {
        self.one_fsync = on;
        self
    }
    /// Group commit (the default): a `Sync` commit made while other writers wait for the
    /// writer lock does not sync on its own; it is written like an `Async` one, and returns
    /// once a later commit's (or its own, if none comes) fdatasync has made it durable. One
    /// fdatasync then covers the whole group (docs/format.md, "Group commit"). `false`: every
    /// `Sync` commit syncs before it releases the writer lock.
    ///
    /// ```
    /// use larch_engine::{Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path().join("t.larch"), Options::default())?;
    /// assert!(db.options().get_group_commit());
    /// std::thread::scope(|s| {
    ///     for i in 0..4u8 {
    ///         let db = &db;
    ///         s.spawn(move || -> larch_engine::Result<()> {
    ///             let tx = db.begin_write()?;
    ///             tx.open_tree("t")?.insert(&[i], b"v")?;
    ///             tx.commit() // returns once durable, perhaps by another thread's sync
    ///         });
    ///     }
    /// });
    /// assert_eq!(db.stats()?.durable_txid, 4);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn group_commit(mut self, on: bool) -> Self {
        self.group_commit = on;
        self
    }
    /// Recovery: when the newest commit is known to have been durable (the file was closed
    /// cleanly after it) but the pages its meta lists no longer verify, open at the commit
    /// before it instead of failing with [`crate::Error::Corrupt`]. That discards the damaged
    /// commit; [`crate::Db::check_report`] and `stats().discarded` say which and why. Off by
    /// default: a torn commit (a crash before it was durable) falls back on its own, damage
    /// to a durable one is reported, never silently absorbed (docs/format.md, "Torn or
    /// damaged"). `larch check --fall-back` uses it read-only.
    ///
    /// ```
    /// let opts = larch_engine::Options::default().read_only(true).fall_back_on_damage(true);
    /// # let _ = opts;
    /// ```
    pub fn fall_back_on_damage(mut self, on: bool) -> Self {
        self.fall_back_on_damage = on;
        self
    }
    /// Bound the space that commits not yet durable (`Async`, `NoMetaSync`) keep: pages such a
    /// commit replaces cannot be reused until a later commit is durable (a crash must find the
    /// durable one whole), so a long run of them keeps a second copy of everything it
    /// rewrote. When the pages waiting for a durable commit reach `bytes`, the commit that
    /// reaches it is made durable (as `Sync`), and the next transactions reuse them. The cost
    /// is one durable commit per `bytes` of rewritten data; `None` never forces one (the file
    /// then grows until `Db::sync`, a `Sync` commit or close). Default: an eighth of the
    /// live data, at least 2 MiB and at most 16 MiB ([`DEFAULT_MAX_UNSYNCED_BYTES`]): the
    /// file stays within about 1.125 times what crash safety keeps, for one extra durable
    /// commit per eighth of a database (at most 16 MiB) of rewritten pages. On the way to it,
    /// each half of the bound starts a background fdatasync, so the writer waits little
    /// at the durable point (at the bound, an Async commit waits for that fdatasync rather
    /// than syncing everything since); the cost is device writes: pages written back early
    /// and then rewritten are written again (docs/performance.md, "space after async
    /// overwrites").
    ///
    /// ```
    /// use larch_engine::{Db, Durability, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let opts = Options::default()
    ///     .durability(Durability::Async)
    ///     .max_unsynced_bytes(Some(1 << 20));
    /// let db = Db::open(dir.path().join("t.larch"), opts)?;
    /// for round in 0..50u8 {
    ///     let tx = db.begin_write()?;
    ///     {
    ///         let mut t = tx.open_tree("t")?;
    ///         for i in 0..100u32 {
    ///             t.insert(&i.to_be_bytes(), &[round; 1000])?;
    ///         }
    ///     }
    ///     tx.commit()?;
    /// }
    /// // 50 rounds rewrote ~5 MB; the pages they freed were reused after each durable point.
    /// assert!(db.stats()?.file_bytes < 4 << 20);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn max_unsynced_bytes(mut self, bytes: Option<u64>) -> Self {
        self.max_unsynced = match bytes {
            Some(b) => Unsynced::Bytes(b),
            None => Unsynced::Off,
        };
        self
    }

    /// Bound how long a commit that is not durable (`Async`, `NoMetaSync`) stays so: a
    /// commit that finds one older than `age` not yet durable is made durable itself (as
    /// `Sync`, or the next commit when its meta would take the durable meta's slot; a
    /// NoMetaSync commit right after another needs nothing, its data sync making every
    /// commit before it durable), and while a handle is open a timer looks every quarter of
    /// `age` (not more often than once a millisecond) and, when no commit came to do it,
    /// makes the newest commit durable as
    /// [`Db::sync`](crate::Db::sync) does. A power cut then loses at most about `age` and a
    /// quarter of acknowledged commits, plus the time one sync takes. `None` (the default,
    /// as in LMDB and libmdbx) bounds only the space they keep
    /// ([`Options::max_unsynced_bytes`]); libmdbx's `MDBX_opt_sync_period` is the same
    /// bound. The cost is one durable commit per `age` while commits come.
    ///
    /// ```
    /// use std::time::Duration;
    /// use larch_engine::{Db, Durability, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let opts = Options::default()
    ///     .durability(Durability::Async)
    ///     .max_unsynced_age(Some(Duration::from_millis(20)));
    /// let db = Db::open(dir.path().join("t.larch"), opts)?;
    /// let tx = db.begin_write()?;
    /// tx.open_tree("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// let before = db.io_stats().syncs;
    /// // No more commits: the handle's timer makes this one durable.
    /// let mut waited = 0;
    /// while db.io_stats().syncs == before && waited < 2000 {
    ///     std::thread::sleep(Duration::from_millis(5));
    ///     waited += 1;
    /// }
    /// assert!(db.io_stats().syncs > before);
    /// # Ok::<(), larch_engine::Error>(())
    /// ```
    pub fn max_unsynced_age(mut self, age: Option<std::time::Duration>) -> Self {
        self.max_unsynced_age = age;
        self
    }

    /// Whether a handle with a [`Options::max_unsynced_age`] runs the timer that makes a
    /// quiet handle's last commits durable (on by default). Turned off by the power-cut
    /// simulation, which makes every sync at a call it chooses; commits still look at the
    /// age. For tests only.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn unsynced_age_timer(mut self, on: bool) -> Self {
        self.unsynced_age_timer = on;
        self
    }

    /// Smallest file that threshold compaction considers (default 4 MiB).
    ///
    /// ```
    /// use larch_engine::Options;
    /// let opts = Options::default().compaction_threshold(Some(0.3)).compaction_min_bytes(64 << 20);
    /// assert!(opts.validate().is_ok());
    /// ```
    pub fn compaction_min_bytes(mut self, bytes: u64) -> Self {
        self.compaction_min_bytes = bytes;
        self
    }

    /// With a [`compaction_threshold`](Options::compaction_threshold): how often a handle
    /// that is not committing looks at the threshold (default 1 s). Commits and `Db::sync`
    /// look at it each time; this covers a file that goes quiet with dead space in it: each
    /// interval without a commit counts as a window that its free pages stayed free through,
    /// so two quiet intervals after a large delete start a compaction.
    ///
    /// ```
    /// use larch_engine::Options;
    /// let opts = Options::default()
    ///     .compaction_threshold(Some(0.3))
    ///     .compaction_check_every(std::time::Duration::from_millis(200));
    /// assert!(opts.validate().is_ok());
    /// ```
    pub fn compaction_check_every(mut self, every: std::time::Duration) -> Self {
        self.compaction_check = every;
        self
    }
    /// The page size that a new file would get.
    ///
    /// ```
    /// assert_eq!(larch_engine::Options::default().get_page_size(), 4096);
    /// ```
    pub fn get_page_size(&self) -> usize {
        self.page_size
    }
    /// The default durability.
    ///
    /// ```
    /// use larch_engine::{Durability, Options};
    /// assert_eq!(Options::default().get_durability(), Durability::Sync);
    /// ```
    pub fn get_durability(&self) -> Durability {
        self.durability
    }
    /// The free-space policy.
    ///
    /// ```
    /// use larch_engine::{Options, Policy};
    /// assert_eq!(Options::default().get_policy(), Policy::FirstFit);
    /// ```
    pub fn get_policy(&self) -> Policy {
        self.policy
    }
    /// The write mode.
    ///
    /// ```
    /// use larch_engine::{Options, WriteMode};
    /// assert_eq!(Options::default().get_write_mode(), WriteMode::Pwrite);
    /// ```
    pub fn get_write_mode(&self) -> WriteMode {
        self.write_mode
    }
    /// The access-pattern advice for the read map. See [`Options::advice`] for an example.
    pub fn get_advice(&self) -> Advice {
        self.advice
    }
    /// The page-cache folios of written pages. See [`Options::cache_folios`].
    pub fn get_cache_folios(&self) -> CacheFolios {
        self.cache_folios
    }
    /// Whether group commit is on.
    ///
    /// ```
    /// assert!(!larch_engine::Options::default().group_commit(false).get_group_commit());
    /// ```
    pub fn get_group_commit(&self) -> bool {
        self.group_commit
    }
}
