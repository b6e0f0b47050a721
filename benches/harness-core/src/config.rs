//! The command line.

use std::path::PathBuf;

use crate::engine::Durability;
use crate::steps::{self, Step};

/// Documents and seconds per timed step of `--quick`.
pub const QUICK_DOCS: u64 = 50_000;
/// Seconds per timed step of `--quick`.
pub const QUICK_SECS: f64 = 2.0;
/// The most `--rounds`: each round runs every engine/setup once more, so a run of 9 already
/// takes 9 times as long.
pub const MAX_ROUNDS: usize = 9;

/// The sizes of redb's write shapes (the `rb.*` steps): keys in each step and their length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RbSizes {
    /// `rb.load`: new random keys in one transaction.
    pub load: u64,
    /// `rb.ins1`: durable single-key commits.
    pub ins1: u64,
    /// `rb.insb`: durable commits of `batch` keys.
    pub batches: u64,
    /// Keys per commit of `rb.insb`.
    pub batch: usize,
    /// `rb.insa`: non-durable single-key commits.
    pub insa: u64,
    /// `rb.sorted`: ascending keys in one transaction.
    pub sorted: u64,
    /// Key bytes (`rb.sorted`'s keys are 8 bytes longer).
    pub key_size: usize,
    /// Value bytes.
    pub value_size: usize,
}

impl RbSizes {
    /// redb's benchmark (crates/redb-bench/src/lib.rs): 5,000,000 bulk, 1,000 individual
    /// writes, 100 batches of 1,000, 50,000 nosync writes, 1,000,000 sorted; 24-byte keys,
    /// 150-byte values.
    pub const REDB: RbSizes = RbSizes {
        load: 5_000_000,
        ins1: 1_000,
        batches: 100,
        batch: 1_000,
        insa: 50_000,
        sorted: 1_000_000,
        key_size: 24,
        value_size: 150,
    };

    /// `--quick`: the same shapes, small.
    pub const QUICK: RbSizes = RbSizes {
        load: QUICK_DOCS,
        ins1: 100,
        batches: 10,
        batch: 1_000,
        insa: 1_000,
        sorted: 10_000,
        key_size: 24,
        value_size: 150,
    };

    /// Keys in the table after every rb step has run.
    pub fn total_keys(&self) -> u64 {
        self.load + self.ins1 + self.batches * self.batch as u64 + self.insa + self.sorted
    }
}

/// How `--mem-limit` takes memory away from a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemMechanism {
    /// A cgroup if one can be made, else a ballast.
    Auto,
    /// A memory cgroup (v2 `memory.max`, or v1 `memory.limit_in_bytes` nested under this
    /// process's own memory cgroup); fail if none can be made.
    Cgroup,
    /// An mlock'ed anonymous ballast in a helper process taking all but the limit of the
    /// memory available.
    Ballast,
}

impl MemMechanism {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            MemMechanism::Auto => "auto",
            MemMechanism::Cgroup => "cgroup",
            MemMechanism::Ballast => "ballast",
        }
    }
}

/// Which counter the wKB/o column uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCounter {
    /// The block device's sectors written where readable, else /proc/self/io.
    Device,
    /// write_bytes of /proc/self/io (the process's own; overcounts with large folios).
    Proc,
}

/// How the n readers of `pq.n` and `rq.n` run (`--readers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readers {
    /// n threads of the engine's process (the default).
    Threads,
    /// n processes, each opening the database read-only beside the engine's process.
    Processes,
    /// Both, one after the other in the same child: threads, then processes (two rows).
    Both,
}

impl Readers {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Readers::Threads => "threads",
            Readers::Processes => "processes",
            Readers::Both => "both",
        }
    }

    /// Parse a name of [`Readers::name`].
    pub fn from_name(s: &str) -> Option<Readers> {
        [Readers::Threads, Readers::Processes, Readers::Both]
            .into_iter()
            .find(|r| r.name() == s)
    }

    /// Whether processes run in any step.
    pub fn processes(self) -> bool {
        self != Readers::Threads
    }

    /// The runs of a step whose readers may be processes, in order: `false` for threads,
    /// `true` for processes.
    pub fn runs(self) -> &'static [bool] {
        match self {
            Readers::Threads => &[false],
            Readers::Processes => &[true],
            Readers::Both => &[false, true],
        }
    }
}

/// Set only in a child: which engine and setup it runs, and where its rows go.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildRole {
    /// Engine name.
    pub engine: String,
    /// Setup name.
    pub setup: String,
    /// File the child appends its rows to.
    pub results: PathBuf,
    /// A cgroup (its directory) the child moves itself into before anything else.
    pub cgroup: Option<PathBuf>,
}

/// Set only in a reader process (`--readers processes`): one of a step's readers, started by
/// the child that runs `engine`/`setup`, reading that child's database from another process.
#[derive(Clone, Debug, PartialEq)]
pub struct ReaderRole {
    /// Engine name.
    pub engine: String,
    /// Setup name.
    pub setup: String,
    /// The step whose reader this is (`pq.n` or `rq.n`).
    pub step: Step,
    /// Which of the step's readers (the thread index of the thread it stands for: its seed).
    pub index: usize,
}

/// Everything the command line says.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `--quick` was given.
    pub quick: bool,
    /// Documents loaded.
    pub docs: u64,
    /// Seconds of each timed step.
    pub secs: f64,
    /// Value size in bytes.
    pub value_size: usize,
    /// Key size in bytes.
    pub key_size: usize,
    /// The n of the .n steps.
    pub threads: usize,
    /// Inserts per commit in load.
    pub batch: usize,
    /// Engines, in the order given (None: every engine the program has).
    pub engines: Option<Vec<String>>,
    /// Steps to report, in run order.
    pub steps: Vec<Step>,
    /// larch policy/write-mode setups.
    pub larch_setups: Vec<String>,
    /// Run seed (None: a fresh one).
    pub seed: Option<u64>,
    /// Where database files go.
    pub dir: Option<PathBuf>,
    /// Where results go.
    pub out: Option<PathBuf>,
    /// Memory a child may use, bytes (not-cached mode).
    pub mem_limit: Option<u64>,
    /// How that memory limit is imposed.
    pub mem_mechanism: MemMechanism,
    /// The counter behind wKB/o.
    pub io_counter: IoCounter,
    /// Keep the database files.
    pub keep: bool,
    /// Skip the limit measurements.
    pub no_limits: bool,
    /// `--rounds`: how many times each engine/setup runs, alternating direction
    /// ([`crate::rounds`]); 1 unless given. A child always runs once.
    pub rounds: usize,
    /// Insert benchmark: rows of `ib.l.i0` (and the table's size after).
    pub ib_rows: u64,
    /// Insert benchmark: rows each `ib.l.i1` inserts (and deletes).
    pub ib_inserts: u64,
    /// Insert benchmark: bytes of a row (the 3 indexed fields included).
    pub ib_row_size: usize,
    /// Insert benchmark: rows per commit in `ib.l.i0` and `ib.l.i1`.
    pub ib_batch: usize,
    /// Insert benchmark: the writer counts `ib.l.i1` runs at, in order.
    pub ib_threads: Vec<usize>,
    /// Insert benchmark: the durability of its commits.
    pub ib_durability: Durability,
    /// redb's write shapes: the sizes of the `rb.*` steps.
    pub rb: RbSizes,
    /// `--readers`: whether `pq.n` and `rq.n` run their n readers as n threads of the
    /// engine's process, as n processes (each opening the database read-only), or both.
    pub readers: Readers,
    /// Set in a child process.
    pub child: Option<ChildRole>,
    /// Set in a reader process.
    pub reader: Option<ReaderRole>,
    /// Set in a ballast helper process: bytes to lock.
    pub ballast: Option<u64>,
}

/// The default `--larch-setups`: the engine's own default policy and write mode, taken from
/// `Options::default()` (advice, page size and compaction threshold default to it in
/// [`crate::larch::Setup::parse`]), so an unqualified run measures what a caller gets without
/// options.
pub fn default_larch_setup() -> String {
    let o = larch_engine::Options::default();
    format!("{}/{}", o.get_policy().name(), o.get_write_mode().name())
}

/// The usage text.
pub fn usage(program: &str) -> String {
    let default_setup = default_larch_setup();
    format!(
        "usage: {program} -- [options]

  --quick              every step, every engine, small ({QUICK_DOCS} docs, {QUICK_SECS} s per timed step)
  --docs N             documents to load (default 200000)
  --secs S             seconds per timed step (default 5)
  --value-size B       value bytes (default 256)
  --key-size K         key bytes, 16..=32 (default 16)
  --threads N          the n of the .n steps (default: number of cores)
  --batch N            inserts per commit in load (default 1000)
  --engines LIST       comma-separated: larch,lmdb,redb,sqlite,fjall, and rocksdb when built
                       with --features rocksdb (default: all built in)
  --steps LIST         comma-separated, of {}
  --larch-setups LIST  policy/write-mode pairs (default {default_setup}, the engine's); policies
                       null,first-fit,best-fit,append-run; modes pwrite,mmap,hybrid; optional
                       :advice=normal|random|sequential, :load-advice=A (advice while loading;
                       reopened with advice after), :ct=FRACTION|off (compaction threshold),
                       :page=BYTES, :group=on|off, :unsynced=BYTES|off (max_unsynced_bytes),
                       :folios=large|small (page-cache folios of written pages),
                       e.g. first-fit/pwrite:ct=0.25
  --seed S             run seed (default: a fresh one, printed)
  --dir PATH           where database files go (default OUT/db, removed afterwards)
  --out DIR            results (default <target>/workload/<timestamp>, and <target>/workload/latest)
  --mem-limit MB       not-cached mode: each engine's process may use MB of memory, page cache included
  --mem-mechanism M    auto (default), cgroup or ballast
  --io-counter C       wKB/o from the block device's sectors written (device, the default; falls
                       back to proc when unreadable) or /proc/self/io write_bytes (proc)
  --ib-rows N          insert benchmark: rows loaded by ib.l.i0, the table's size (default: --docs)
  --ib-inserts M       insert benchmark: rows inserted (and oldest deleted) by each ib.l.i1
                       (default: --ib-rows)
  --ib-row-size B      insert benchmark: row bytes, the 3 indexed 8-byte fields included
                       (default 100)
  --ib-batch N         insert benchmark: rows per commit in ib.l.i0 and ib.l.i1 (default 100)
  --ib-threads LIST    insert benchmark: writer counts ib.l.i1 runs at, e.g. 1,2,4 (default 1;
                       at most {max_ib}); 2 writers make step ib.l.i1.t2, and so on
  --ib-durability D    insert benchmark commits: async (default; SQLite synchronous=NORMAL)
                       or sync (SQLite FULL)
  --rb-load N          redb's shapes: new random keys rb.load commits in one durable
                       transaction (default {rl}; --quick {ql})
  --rb-ins1 N          redb's shapes: durable single-key commits of rb.ins1 (default {ri}; --quick {qi})
  --rb-batches N       redb's shapes: durable commits of rb.insb (default {rbs}; --quick {qbs})
  --rb-batch N         redb's shapes: new random keys per rb.insb commit (default {rb})
  --rb-insa N          redb's shapes: non-durable single-key commits of rb.insa (default {ra};
                       --quick {qa})
  --rb-sorted N        redb's shapes: ascending keys rb.sorted commits in one durable
                       transaction (default {rs}; --quick {qs})
  --rb-key-size K      redb's shapes: key bytes, 16..=32 (default {rk}; rb.sorted's are K+8)
  --rb-value-size B    redb's shapes: value bytes (default {rv})
  --readers MODE       how pq.n and rq.n run their n readers: threads (default) of the engine's
                       process; processes, each opening the database read-only beside it
                       (larch only; the limits' stay threads; rows pq.n/procs, rq.n/procs);
                       or both, threads then processes in the same child (two rows each)
  --keep               keep the database files
  --no-limits          do not measure the limits (fdatasync/s, in-memory BTreeMap, direct reads)
  --rounds N           run every engine/setup N times, 1..={max_rounds} (default 1), on the same seed:
                       odd rounds in --engines order, even rounds reversed; each step reports
                       its median round (the lower for even N), and a rounds table and
                       rounds.csv show every round; the limits run once (a noisy machine's
                       ratios, quoted from medians of one run)",
        steps::listed_names().join(","),
        max_ib = steps::MAX_IB_THREADS,
        max_rounds = MAX_ROUNDS,
        rl = RbSizes::REDB.load,
        ql = RbSizes::QUICK.load,
        ri = RbSizes::REDB.ins1,
        qi = RbSizes::QUICK.ins1,
        rbs = RbSizes::REDB.batches,
        qbs = RbSizes::QUICK.batches,
        rb = RbSizes::REDB.batch,
        ra = RbSizes::REDB.insa,
        qa = RbSizes::QUICK.insa,
        rs = RbSizes::REDB.sorted,
        qs = RbSizes::QUICK.sorted,
        rk = RbSizes::REDB.key_size,
        rv = RbSizes::REDB.value_size,
    )
}

/// The `--rb-*` options given, each over the default (or `--quick`) size.
#[derive(Default)]
struct RbSizesGiven {
    load: Option<u64>,
    ins1: Option<u64>,
    batches: Option<u64>,
    batch: Option<usize>,
    insa: Option<u64>,
    sorted: Option<u64>,
    key_size: Option<usize>,
    value_size: Option<usize>,
}

impl RbSizesGiven {
    fn over(&self, d: RbSizes) -> RbSizes {
        RbSizes {
            load: self.load.unwrap_or(d.load),
            ins1: self.ins1.unwrap_or(d.ins1),
            batches: self.batches.unwrap_or(d.batches),
            batch: self.batch.unwrap_or(d.batch),
            insa: self.insa.unwrap_or(d.insa),
            sorted: self.sorted.unwrap_or(d.sorted),
            key_size: self.key_size.unwrap_or(d.key_size),
            value_size: self.value_size.unwrap_or(d.value_size),
        }
    }
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value"))
}

fn num<T: std::str::FromStr>(s: &str, flag: &str) -> Result<T, String> {
    s.trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{flag}: {s:?} is not a valid number"))
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

impl Config {
    /// Parse the arguments (without the program name). `Err` carries the message to print;
    /// `--help` gives `Err("")`.
    pub fn parse(args: &[String]) -> Result<Config, String> {
        let mut c = Config {
            quick: false,
            docs: 200_000,
            secs: 5.0,
            value_size: 256,
            key_size: 16,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            batch: 1000,
            engines: None,
            steps: Vec::new(),
            larch_setups: vec![default_larch_setup()],
            seed: None,
            dir: None,
            out: None,
            mem_limit: None,
            mem_mechanism: MemMechanism::Auto,
            io_counter: IoCounter::Device,
            keep: false,
            no_limits: false,
            rounds: 1,
            ib_rows: 0,
            ib_inserts: 0,
            ib_row_size: 100,
            ib_batch: 100,
            ib_threads: vec![1],
            ib_durability: Durability::Async,
            rb: RbSizes::REDB,
            readers: Readers::Threads,
            child: None,
            reader: None,
            ballast: None,
        };
        let mut docs = None;
        let mut secs = None;
        let mut steps_given: Option<Vec<Step>> = None;
        let (mut ib_rows, mut ib_inserts) = (None, None);
        // --rb-* given: they win over --quick whatever the order.
        let mut rb = RbSizesGiven::default();
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            match a {
                // cargo passes --bench to harness = false benchmarks.
                "--bench" => {}
                "-h" | "--help" => return Err(String::new()),
                "--quick" => c.quick = true,
                "--keep" => c.keep = true,
                "--no-limits" => c.no_limits = true,
                "--rounds" => c.rounds = num(value(args, &mut i, a)?, a)?,
                "--readers" => {
                    let v = value(args, &mut i, a)?;
                    c.readers = Readers::from_name(v).ok_or_else(|| {
                        format!("--readers {v:?}: use threads, processes or both")
                    })?;
                }
                "--docs" => docs = Some(num::<u64>(value(args, &mut i, a)?, a)?),
                "--secs" => secs = Some(num::<f64>(value(args, &mut i, a)?, a)?),
                "--value-size" => c.value_size = num(value(args, &mut i, a)?, a)?,
                "--key-size" => c.key_size = num(value(args, &mut i, a)?, a)?,
                "--threads" => c.threads = num(value(args, &mut i, a)?, a)?,
                "--batch" => c.batch = num(value(args, &mut i, a)?, a)?,
                "--engines" => c.engines = Some(list(value(args, &mut i, a)?)),
                "--steps" => steps_given = Some(steps::parse_list(value(args, &mut i, a)?)?),
                "--ib-rows" => ib_rows = Some(num::<u64>(value(args, &mut i, a)?, a)?),
                "--ib-inserts" => ib_inserts = Some(num::<u64>(value(args, &mut i, a)?, a)?),
                "--ib-row-size" => c.ib_row_size = num(value(args, &mut i, a)?, a)?,
                "--ib-batch" => c.ib_batch = num(value(args, &mut i, a)?, a)?,
                "--ib-threads" => {
                    c.ib_threads = list(value(args, &mut i, a)?)
                        .iter()
                        .map(|n| num::<usize>(n, a))
                        .collect::<Result<_, _>>()?;
                }
                "--ib-durability" => {
                    c.ib_durability = match value(args, &mut i, a)? {
                        "async" => Durability::Async,
                        "sync" => Durability::Sync,
                        other => {
                            return Err(format!("--ib-durability {other:?}: use async or sync"))
                        }
                    }
                }
                "--rb-load" => rb.load = Some(num(value(args, &mut i, a)?, a)?),
                "--rb-ins1" => rb.ins1 = Some(num(value(args, &mut i, a)?, a)?),
                "--rb-batches" => rb.batches = Some(num(value(args, &mut i, a)?, a)?),
                "--rb-batch" => rb.batch = Some(num(value(args, &mut i, a)?, a)?),
                "--rb-insa" => rb.insa = Some(num(value(args, &mut i, a)?, a)?),
                "--rb-sorted" => rb.sorted = Some(num(value(args, &mut i, a)?, a)?),
                "--rb-key-size" => rb.key_size = Some(num(value(args, &mut i, a)?, a)?),
                "--rb-value-size" => rb.value_size = Some(num(value(args, &mut i, a)?, a)?),
                "--larch-setups" => c.larch_setups = list(value(args, &mut i, a)?),
                "--seed" => c.seed = Some(num(value(args, &mut i, a)?, a)?),
                "--dir" => c.dir = Some(PathBuf::from(value(args, &mut i, a)?)),
                "--out" => c.out = Some(PathBuf::from(value(args, &mut i, a)?)),
                "--mem-limit" => {
                    let mb: u64 = num(value(args, &mut i, a)?, a)?;
                    c.mem_limit = Some(mb << 20);
                }
                "--mem-mechanism" => {
                    c.mem_mechanism = match value(args, &mut i, a)? {
                        "auto" => MemMechanism::Auto,
                        "cgroup" => MemMechanism::Cgroup,
                        "ballast" => MemMechanism::Ballast,
                        other => {
                            return Err(format!(
                                "--mem-mechanism {other:?}: use auto, cgroup or ballast"
                            ))
                        }
                    }
                }
                "--io-counter" => {
                    c.io_counter = match value(args, &mut i, a)? {
                        "device" => IoCounter::Device,
                        "proc" => IoCounter::Proc,
                        other => return Err(format!("--io-counter {other:?}: use device or proc")),
                    }
                }
                "--internal-child" => {
                    let engine = value(args, &mut i, a)?.to_string();
                    let setup = value(args, &mut i, a)?.to_string();
                    let results = PathBuf::from(value(args, &mut i, a)?);
                    let cgroup = c.child.take().and_then(|r| r.cgroup);
                    c.child = Some(ChildRole {
                        engine,
                        setup,
                        results,
                        cgroup,
                    });
                }
                "--internal-cgroup" => {
                    let path = PathBuf::from(value(args, &mut i, a)?);
                    match &mut c.child {
                        Some(r) => r.cgroup = Some(path),
                        None => return Err("--internal-cgroup must follow --internal-child".into()),
                    }
                }
                "--internal-reader" => {
                    let engine = value(args, &mut i, a)?.to_string();
                    let setup = value(args, &mut i, a)?.to_string();
                    let step = value(args, &mut i, a)?;
                    let step = Step::from_name(step)
                        .filter(|s| s.reader_processes_apply())
                        .ok_or_else(|| {
                            format!("{a}: {step:?} is not a step with reader processes")
                        })?;
                    let index = num(value(args, &mut i, a)?, a)?;
                    c.reader = Some(ReaderRole {
                        engine,
                        setup,
                        step,
                        index,
                    });
                }
                "--internal-ballast" => c.ballast = Some(num(value(args, &mut i, a)?, a)?),
                other => return Err(format!("unknown option {other:?}")),
            }
            i += 1;
        }
        if c.quick {
            c.docs = QUICK_DOCS;
            c.secs = QUICK_SECS;
            c.rb = RbSizes::QUICK;
        }
        c.rb = rb.over(c.rb);
        if c.rb.load == 0
            || c.rb.ins1 == 0
            || c.rb.batches == 0
            || c.rb.batch == 0
            || c.rb.insa == 0
            || c.rb.sorted == 0
        {
            return Err(
                "--rb-load, --rb-ins1, --rb-batches, --rb-batch, --rb-insa and --rb-sorted must be at least 1"
                    .into(),
            );
        }
        crate::keys::KeyGen::new(c.rb.key_size).map_err(|e| format!("--rb-key-size: {e}"))?;
        if c.rb.value_size == 0 || c.rb.value_size > 1 << 20 {
            return Err("--rb-value-size must be between 1 and 1048576".into());
        }
        if let Some(d) = docs {
            c.docs = d;
        }
        if let Some(s) = secs {
            c.secs = s;
        }
        if c.docs == 0 {
            return Err("--docs must be at least 1".into());
        }
        c.ib_rows = ib_rows.unwrap_or(c.docs);
        c.ib_inserts = ib_inserts.unwrap_or(c.ib_rows);
        if c.ib_rows == 0 || c.ib_inserts == 0 {
            return Err("--ib-rows and --ib-inserts must be at least 1".into());
        }
        if !(crate::ib::FIELDS_BYTES..=1 << 20).contains(&c.ib_row_size) {
            return Err(format!(
                "--ib-row-size must be between {} and 1048576",
                crate::ib::FIELDS_BYTES
            ));
        }
        if c.ib_batch == 0 {
            return Err("--ib-batch must be at least 1".into());
        }
        if c.ib_threads.is_empty()
            || c.ib_threads
                .iter()
                .any(|&n| n == 0 || n > steps::MAX_IB_THREADS)
        {
            return Err(format!(
                "--ib-threads takes counts from 1 to {}",
                steps::MAX_IB_THREADS
            ));
        }
        c.ib_threads.sort_unstable();
        c.ib_threads.dedup();
        c.steps = match steps_given {
            Some(s) => steps::with_ib_threads(s, &c.ib_threads),
            None => steps::default_list(&c.ib_threads),
        };
        if !(c.secs > 0.0 && c.secs.is_finite()) {
            return Err("--secs must be a positive number".into());
        }
        if c.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        if c.batch == 0 {
            return Err("--batch must be at least 1".into());
        }
        if c.value_size == 0 || c.value_size > 1 << 20 {
            return Err("--value-size must be between 1 and 1048576".into());
        }
        crate::keys::KeyGen::new(c.key_size).map_err(|e| format!("--key-size: {e}"))?;
        if c.larch_setups.is_empty() {
            return Err("--larch-setups names no setup".into());
        }
        for s in &c.larch_setups {
            crate::larch::Setup::parse(s).map_err(|e| format!("--larch-setups: {e}"))?;
        }
        if c.mem_limit == Some(0) {
            return Err("--mem-limit must be at least 1 MB".into());
        }
        if !(1..=MAX_ROUNDS).contains(&c.rounds) {
            return Err(format!(
                "--rounds must be between 1 and {MAX_ROUNDS}, not {}",
                c.rounds
            ));
        }
        Ok(c)
    }

    /// The arguments that make a child run `engine`/`setup` exactly as this run does.
    pub fn child_args(
        &self,
        engine: &str,
        setup: &str,
        seed: u64,
        dir: &std::path::Path,
        results: &std::path::Path,
        cgroup: Option<&std::path::Path>,
    ) -> Vec<String> {
        let mut a = self.common_args(seed, dir);
        a.extend([
            "--internal-child".into(),
            engine.into(),
            setup.into(),
            results.display().to_string(),
        ]);
        if let Some(cg) = cgroup {
            a.push("--internal-cgroup".into());
            a.push(cg.display().to_string());
        }
        a
    }

    /// The arguments a child or a reader process shares with this run: sizes, steps, seed,
    /// the database root `dir`, and the flags that change what a step does.
    fn common_args(&self, seed: u64, dir: &std::path::Path) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--docs".into(),
            self.docs.to_string(),
            "--secs".into(),
            self.secs.to_string(),
            "--value-size".into(),
            self.value_size.to_string(),
            "--key-size".into(),
            self.key_size.to_string(),
            "--threads".into(),
            self.threads.to_string(),
            "--batch".into(),
            self.batch.to_string(),
            "--steps".into(),
            self.steps
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(","),
            "--ib-rows".into(),
            self.ib_rows.to_string(),
            "--ib-inserts".into(),
            self.ib_inserts.to_string(),
            "--ib-row-size".into(),
            self.ib_row_size.to_string(),
            "--ib-batch".into(),
            self.ib_batch.to_string(),
            "--ib-threads".into(),
            self.ib_threads
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            "--ib-durability".into(),
            self.ib_durability.name().into(),
            "--rb-load".into(),
            self.rb.load.to_string(),
            "--rb-ins1".into(),
            self.rb.ins1.to_string(),
            "--rb-batches".into(),
            self.rb.batches.to_string(),
            "--rb-batch".into(),
            self.rb.batch.to_string(),
            "--rb-insa".into(),
            self.rb.insa.to_string(),
            "--rb-sorted".into(),
            self.rb.sorted.to_string(),
            "--rb-key-size".into(),
            self.rb.key_size.to_string(),
            "--rb-value-size".into(),
            self.rb.value_size.to_string(),
            "--seed".into(),
            seed.to_string(),
            "--dir".into(),
            dir.display().to_string(),
        ];
        if let Some(m) = self.mem_limit {
            a.push("--mem-limit".into());
            a.push((m >> 20).to_string());
        }
        if self.keep {
            a.push("--keep".into());
        }
        if self.io_counter == IoCounter::Proc {
            a.push("--io-counter".into());
            a.push("proc".into());
        }
        if self.readers != Readers::Threads {
            a.push("--readers".into());
            a.push(self.readers.name().into());
        }
        a
    }

    /// The arguments of reader process `index` of `step`, reading the database of
    /// `engine`/`setup` under the root `dir` (the child's `--dir`).
    pub fn reader_args(
        &self,
        engine: &str,
        setup: &str,
        seed: u64,
        dir: &std::path::Path,
        step: Step,
        index: usize,
    ) -> Vec<String> {
        let mut a = self.common_args(seed, dir);
        a.extend([
            "--internal-reader".into(),
            engine.into(),
            setup.into(),
            step.name().into(),
            index.to_string(),
        ]);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, String> {
        let args: Vec<String> = s.split_whitespace().map(String::from).collect();
        Config::parse(&args)
    }

    #[test]
    fn defaults_and_quick() {
        let c = parse("--bench").unwrap();
        assert_eq!(
            (c.docs, c.secs, c.value_size, c.key_size),
            (200_000, 5.0, 256, 16)
        );
        assert_eq!(c.steps.len(), 13 + 5 + steps::RB);
        assert_eq!(c.rb, RbSizes::REDB);
        assert_eq!(
            (c.ib_rows, c.ib_inserts, c.ib_row_size, c.ib_batch),
            (200_000, 200_000, 100, 100)
        );
        assert_eq!(c.ib_threads, vec![1]);
        // The engine's default (FirstFit, Pwrite); a change there shows up here.
        assert_eq!(c.larch_setups, vec!["first-fit/pwrite".to_string()]);
        let q = parse("--quick").unwrap();
        assert_eq!((q.docs, q.secs), (QUICK_DOCS, QUICK_SECS));
        // Explicit sizes win over --quick whatever the order.
        let q = parse("--docs 1000 --quick --secs 0.5").unwrap();
        assert_eq!((q.docs, q.secs), (1000, 0.5));
        assert_eq!(q.ib_rows, 1000);
        assert_eq!(q.rb, RbSizes::QUICK);
    }

    #[test]
    fn rb_options() {
        let c = parse(
            "--steps rb.insb,rb.load --rb-load 500_000 --rb-ins1 10 --rb-batches 3 --rb-batch 7 \
             --rb-insa 20 --rb-sorted 30 --rb-key-size 16 --rb-value-size 64",
        )
        .unwrap();
        let names: Vec<&str> = c.steps.iter().map(|s| s.name()).collect();
        assert_eq!(names, vec!["rb.load", "rb.insb"]);
        let want = RbSizes {
            load: 500_000,
            ins1: 10,
            batches: 3,
            batch: 7,
            insa: 20,
            sorted: 30,
            key_size: 16,
            value_size: 64,
        };
        assert_eq!(c.rb, want);
        assert_eq!(want.total_keys(), 500_000 + 10 + 21 + 20 + 30);
        // The child gets the same sizes.
        let args = c.child_args(
            "lmdb",
            "default",
            1,
            std::path::Path::new("/d"),
            std::path::Path::new("/r"),
            None,
        );
        let child = Config::parse(&args).unwrap();
        assert_eq!((child.rb, child.steps), (want, c.steps.clone()));
        // --rb-* wins over --quick whatever the order; --quick shrinks the rest.
        let q = parse("--rb-load 7 --quick").unwrap();
        assert_eq!(
            q.rb,
            RbSizes {
                load: 7,
                ..RbSizes::QUICK
            }
        );
        for bad in [
            "--rb-load 0",
            "--rb-batch 0",
            "--rb-sorted x",
            "--rb-key-size 8",
            "--rb-value-size 0",
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn ib_options() {
        let c = parse(
            "--steps ib.l.i1,ib.qr100 --ib-threads 4,1,2 --ib-rows 500 --ib-inserts 300 \
             --ib-row-size 64 --ib-batch 10 --ib-durability sync",
        )
        .unwrap();
        let names: Vec<&str> = c.steps.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            vec!["ib.l.i1", "ib.l.i1.t2", "ib.l.i1.t4", "ib.qr100"]
        );
        assert_eq!(
            (c.ib_rows, c.ib_inserts, c.ib_row_size, c.ib_batch),
            (500, 300, 64, 10)
        );
        assert_eq!(c.ib_durability, Durability::Sync);
        let args = c.child_args(
            "larch",
            "first-fit/pwrite",
            1,
            std::path::Path::new("/d"),
            std::path::Path::new("/r"),
            None,
        );
        let child = Config::parse(&args).unwrap();
        assert_eq!(child.steps, c.steps);
        assert_eq!(
            (
                child.ib_rows,
                child.ib_inserts,
                child.ib_row_size,
                child.ib_batch
            ),
            (500, 300, 64, 10)
        );
        assert_eq!(child.ib_threads, vec![1, 2, 4]);
        assert_eq!(child.ib_durability, Durability::Sync);
        for bad in [
            "--ib-threads 0",
            "--ib-threads 9",
            "--ib-row-size 8",
            "--ib-batch 0",
            "--ib-durability x",
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn every_option() {
        let c = parse(
            "--docs 1_000 --secs 2.5 --value-size 1024 --key-size 24 --threads 4 --batch 10 \
             --engines larch,lmdb --steps pq.1,load --larch-setups null/pwrite,first-fit/mmap \
             --seed 42 --dir /tmp/x --out /tmp/o --mem-limit 256 --mem-mechanism cgroup --io-counter proc --keep --no-limits",
        )
        .unwrap();
        assert_eq!(c.docs, 1000);
        assert_eq!(c.secs, 2.5);
        assert_eq!(
            (c.value_size, c.key_size, c.threads, c.batch),
            (1024, 24, 4, 10)
        );
        assert_eq!(c.engines, Some(vec!["larch".into(), "lmdb".into()]));
        assert_eq!(
            c.steps.iter().map(|s| s.name()).collect::<Vec<_>>(),
            vec!["load", "pq.1"]
        );
        assert_eq!(c.larch_setups.len(), 2);
        assert_eq!(c.seed, Some(42));
        assert_eq!(c.dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(c.out, Some(PathBuf::from("/tmp/o")));
        assert_eq!(c.mem_limit, Some(256 << 20));
        assert_eq!(c.mem_mechanism, MemMechanism::Cgroup);
        assert!(c.keep && c.no_limits);
        assert_eq!(c.io_counter, IoCounter::Proc);
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "--docs",
            "--docs x",
            "--docs 0",
            "--secs -1",
            "--threads 0",
            "--key-size 8",
            "--value-size 0",
            "--steps load,bogus",
            "--larch-setups nope/pwrite",
            "--larch-setups first-fit/nope",
            "--mem-mechanism swap",
            "--io-counter disk",
            "--frobnicate",
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
        assert_eq!(parse("--help"), Err(String::new()));
    }

    #[test]
    fn rounds_default_to_one_and_stay_in_the_parent() {
        assert_eq!(parse("--quick").unwrap().rounds, 1);
        assert_eq!(parse("--rounds 3").unwrap().rounds, 3);
        assert_eq!(parse("--rounds 9").unwrap().rounds, 9);
        for bad in ["--rounds 0", "--rounds 10", "--rounds", "--rounds x"] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
        let e = parse("--rounds 10").unwrap_err();
        assert_eq!(e, "--rounds must be between 1 and 9, not 10");
        // A child runs its steps once: the parent repeats the child, not the steps.
        let c = parse("--rounds 5 --steps load").unwrap();
        let args = c.child_args(
            "larch",
            "null/mmap",
            7,
            std::path::Path::new("/d"),
            std::path::Path::new("/r"),
            None,
        );
        assert!(!args.iter().any(|a| a == "--rounds"), "{args:?}");
        assert_eq!(Config::parse(&args).unwrap().rounds, 1);
    }

    #[test]
    fn reader_processes() {
        assert_eq!(parse("--quick").unwrap().readers, Readers::Threads);
        assert_eq!(parse("--readers both").unwrap().readers, Readers::Both);
        assert_eq!(parse("--readers threads").unwrap().readers.runs(), &[false]);
        assert_eq!(Readers::Both.runs(), &[false, true]);
        assert!(parse("--readers").is_err() && parse("--readers forks").is_err());
        let c = parse("--steps pq.n,rq.n --threads 4 --readers both --docs 900 --seed 3").unwrap();
        assert_eq!(c.readers, Readers::Both);
        assert!(c.reader.is_none());
        // The engine's child runs its read steps the same way.
        let args = c.child_args(
            "larch",
            "first-fit/pwrite",
            3,
            std::path::Path::new("/d"),
            std::path::Path::new("/r"),
            None,
        );
        assert_eq!(Config::parse(&args).unwrap().readers, Readers::Both);
        // A reader process: the run's sizes and seed, its step and index.
        let step = Step::from_name("rq.n").unwrap();
        let args = c.reader_args("larch", "null/mmap", 3, std::path::Path::new("/d"), step, 2);
        let r = Config::parse(&args).unwrap();
        assert_eq!((r.docs, r.threads, r.seed), (900, 4, Some(3)));
        assert_eq!(r.dir, Some(PathBuf::from("/d")));
        assert_eq!(r.child, None);
        assert_eq!(
            r.reader,
            Some(ReaderRole {
                engine: "larch".into(),
                setup: "null/mmap".into(),
                step,
                index: 2,
            })
        );
        // Only pq.n and rq.n have reader processes.
        for bad in [
            "--internal-reader larch first-fit/pwrite pq.1 0",
            "--internal-reader larch first-fit/pwrite pqw.n 0",
            "--internal-reader larch first-fit/pwrite pq.n x",
            "--internal-reader larch first-fit/pwrite pq.n",
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn child_args_round_trip() {
        let c = parse(
            "--docs 500 --secs 0.1 --steps load,pq.n --mem-limit 64 --threads 3 --io-counter proc",
        )
        .unwrap();
        let args = c.child_args(
            "larch",
            "null/mmap",
            7,
            std::path::Path::new("/d"),
            std::path::Path::new("/r"),
            Some(std::path::Path::new("/cg")),
        );
        let child = Config::parse(&args).unwrap();
        assert_eq!(child.docs, 500);
        assert_eq!(child.secs, 0.1);
        assert_eq!(child.threads, 3);
        assert_eq!(child.seed, Some(7));
        assert_eq!(child.mem_limit, Some(64 << 20));
        assert_eq!(child.steps, c.steps);
        assert_eq!(child.io_counter, IoCounter::Proc);
        assert_eq!(
            child.child,
            Some(ChildRole {
                engine: "larch".into(),
                setup: "null/mmap".into(),
                results: PathBuf::from("/r"),
                cgroup: Some(PathBuf::from("/cg")),
            })
        );
    }
}
