//! How a database is opened: page size, durability, free-space policy, write mode, advice.

pub use larch_freelist::PolicyKind as Policy;
pub use larch_pager::{Advice, WriteMode};

/// When a commit becomes durable (survives power loss). Per database, overridable per
/// transaction with [`crate::WriteTx::set_durability`].
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
    /// Every durability.
    pub const ALL: [Durability; 3] = [Durability::Sync, Durability::NoMetaSync, Durability::Async];

    /// Lowercase name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::NoMetaSync => "nometasync",
            Durability::Async => "async",
        }
    }
    /// Inverse of [`Durability::name`].
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
    pub(crate) verify_checksums: bool,
    pub(crate) read_only: bool,
    pub(crate) create: bool,
    pub(crate) compaction_threshold: Option<f64>,
    pub(crate) compaction_min_bytes: u64,
    pub(crate) one_fsync: bool,
    pub(crate) group_commit: bool,
    pub(crate) fall_back_on_damage: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_size: 4096,
            durability: Durability::Sync,
            policy: Policy::FirstFit,
            write_mode: WriteMode::Pwrite,
            advice: Advice::Random,
            verify_checksums: false,
            read_only: false,
            create: true,
            compaction_threshold: None,
            compaction_min_bytes: 4 << 20,
            one_fsync: true,
            group_commit: true,
            fall_back_on_damage: false,
        }
    }
}

impl Options {
    /// Check the options every open path relies on: a legal page size, a compaction
    /// threshold strictly between 0 and 1.
    pub fn validate(&self) -> crate::Result<()> {
        if !larch_pager::valid_page_size(self.page_size) {
            return Err(crate::Error::InvalidOption(format!(
                "page size {} is not a power of two between 4096 and 65536",
                self.page_size
            )));
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

    /// Page size for a new file: a power of two in 4096..=65536. An existing file keeps the
    /// page size it was created with.
    pub fn page_size(mut self, size: usize) -> Self {
        self.page_size = size;
        self
    }
    /// Default durability of write transactions.
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
    pub fn policy(mut self, p: Policy) -> Self {
        self.policy = p;
        self
    }
    /// How dirty pages reach the file.
    pub fn write_mode(mut self, m: WriteMode) -> Self {
        self.write_mode = m;
        self
    }
    /// madvise applied to the read map.
    pub fn advice(mut self, a: Advice) -> Self {
        self.advice = a;
        self
    }
    /// Verify each page's crc32 on every read (off by default for speed; `check()` always
    /// verifies).
    pub fn verify_checksums(mut self, on: bool) -> Self {
        self.verify_checksums = on;
        self
    }
    /// Open without write access, under a shared lock: any number of read-only handles, no
    /// writer. The file is never modified.
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }
    /// Create the file if it is missing (default true).
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
    pub fn compaction_threshold(mut self, t: Option<f64>) -> Self {
        self.compaction_threshold = t;
        self
    }
    /// Make a `Sync` commit durable with one fdatasync (the default): the meta lists the pages
    /// its commit wrote, and recovery verifies them and falls back to the previous commit if
    /// any is missing or torn. `false` keeps LMDB's protocol: pages, fdatasync, meta,
    /// fdatasync. A commit whose page list does not fit the meta page, or that follows a
    /// commit not yet durable, uses the two-sync protocol either way.
    pub fn one_fsync_commit(mut self, on: bool) -> Self {
        self.one_fsync = on;
        self
    }
    /// Group commit (the default): a `Sync` commit made while other writers wait for the
    /// writer lock does not sync on its own; it is written like an `Async` one, and returns
    /// once a later commit's (or its own, if none comes) fdatasync has made it durable. One
    /// fdatasync then covers the whole group (docs/format.md, "Group commit"). `false`: every
    /// `Sync` commit syncs before it releases the writer lock.
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
    pub fn fall_back_on_damage(mut self, on: bool) -> Self {
        self.fall_back_on_damage = on;
        self
    }
    /// Smallest file that threshold compaction considers (default 4 MiB).
    pub fn compaction_min_bytes(mut self, bytes: u64) -> Self {
        self.compaction_min_bytes = bytes;
        self
    }
    /// The page size that a new file would get.
    pub fn get_page_size(&self) -> usize {
        self.page_size
    }
    /// The default durability.
    pub fn get_durability(&self) -> Durability {
        self.durability
    }
    /// The policy.
    pub fn get_policy(&self) -> Policy {
        self.policy
    }
    /// The write mode.
    pub fn get_write_mode(&self) -> WriteMode {
        self.write_mode
    }
    /// The access-pattern advice for the read map.
    pub fn get_advice(&self) -> Advice {
        self.advice
    }
    /// Whether group commit is on.
    pub fn get_group_commit(&self) -> bool {
        self.group_commit
    }
}
