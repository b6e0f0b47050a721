//! The program. The parent runs each engine/setup (and each limit) in a child process, a
//! re-execution of the same binary with `--internal-child`, so that RSS, faults, CPU and
//! I/O counters are the engine's own; then it prints the tables and writes results.json,
//! results.csv and chart.svg.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::config::{ChildRole, Config, IoCounter, Readers};
use crate::counters::{self, Device, Snapshot, Who};
use crate::engine::{BoxError, Durability, Engine, EngineConfig, EngineFactory, Reader, Writer};
use crate::ib::IbState;
use crate::json::Pairs;
use crate::keys::{mix64, thread_seed, KeyGen, Rng, Values, MAX_KEY};
use crate::limits::{self, Limits};
use crate::memlimit::{self, Limiter};
use crate::rate::{RateLimiter, LIMITED_WRITES_PER_SEC};
use crate::rb::RbState;
use crate::report::{self, Row};
use crate::rounds::{self, RoundRow};
use crate::steps::{self, Family, Kind, Step, RANGE_LEN};
use crate::{chart, machine, table};

type Result<T> = std::result::Result<T, BoxError>;

/// Run the harness with these engines (the `limit` rows are added by the harness) and exit.
pub fn main(factories: &[&dyn EngineFactory]) -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let program = program_name();
    let cfg = match Config::parse(&args) {
        Ok(c) => c,
        Err(e) if e.is_empty() => {
            println!("{}", crate::config::usage(&program));
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{}", crate::config::usage(&program));
            std::process::exit(2)
        }
    };
    if let Some(bytes) = cfg.ballast {
        std::process::exit(memlimit::hold_ballast(bytes));
    }
    if let Some(role) = &cfg.reader {
        std::process::exit(crate::procs::reader_main(&cfg, role, factories));
    }
    let code = match &cfg.child {
        Some(role) => child(&cfg, role, factories),
        None => match parent(&cfg, &args, &program, factories) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e}");
                1
            }
        },
    };
    std::process::exit(code)
}

/// How this program is invoked, for the results: the cargo command when run by cargo.
fn program_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if stem.starts_with("workload-") {
        "cargo bench --bench workload".into()
    } else if stem.starts_with("larch-workload") {
        "cargo run --release -p larch-bench-core --bin larch-workload".into()
    } else {
        stem
    }
}

/// cargo's target directory: $CARGO_TARGET_DIR, else the one the running binary is in.
pub fn target_dir() -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    let exe = std::env::current_exe().ok();
    let mut dir = exe.as_deref().and_then(Path::parent).map(Path::to_path_buf);
    if dir
        .as_ref()
        .and_then(|d| d.file_name())
        .is_some_and(|n| n == "deps")
    {
        dir = dir.and_then(|d| d.parent().map(Path::to_path_buf));
    }
    // dir is now the profile directory (release, debug, bench...).
    dir.and_then(|d| d.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// What the engine of a child running `cfg.steps` is told: the documents of the ForestDB
/// pattern, or (a child of redb's write shapes) every key the rb steps insert, with their
/// sizes.
pub(crate) fn engine_config(cfg: &Config) -> EngineConfig {
    if Family::of(&cfg.steps) == Family::Rb {
        return EngineConfig {
            docs: cfg.rb.total_keys(),
            key_size: cfg.rb.key_size,
            value_size: cfg.rb.value_size,
            threads: cfg.threads,
            mem_limit: cfg.mem_limit,
        };
    }
    EngineConfig {
        docs: cfg.docs,
        key_size: cfg.key_size,
        value_size: cfg.value_size,
        threads: cfg.threads,
        mem_limit: cfg.mem_limit,
    }
}

pub(crate) fn dir_name(engine: &str, setup: &str) -> String {
    let s: String = setup
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{engine}-{s}")
}

fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    mix64(t ^ (u64::from(std::process::id()) << 32))
}

/// The steps an engine/setup runs: `--steps`, cut down to what the engine can do.
fn steps_for(cfg: &Config, f: &dyn EngineFactory, setup: &str) -> Vec<Step> {
    match f.steps(setup) {
        Some(only) => cfg
            .steps
            .iter()
            .copied()
            .filter(|s| only.contains(s))
            .collect(),
        None => cfg
            .steps
            .iter()
            .copied()
            .filter(|s| !s.is_ib() || f.supports_ib())
            .collect(),
    }
}

/// The configuration of each child an engine/setup runs in: one per step family (the
/// ForestDB steps, the insert benchmark's, redb's write shapes), each with its own database,
/// so sizes and counters are its own, in the order of [`Family::ALL`].
fn child_configs(cfg: &Config, f: &dyn EngineFactory, setup: &str) -> Vec<(Config, Family)> {
    let steps = steps_for(cfg, f, setup);
    let mut out = Vec::new();
    for family in Family::ALL {
        let part: Vec<Step> = steps
            .iter()
            .copied()
            .filter(|s| s.family() == family)
            .collect();
        if !part.is_empty() {
            let mut c = cfg.clone();
            c.steps = part;
            out.push((c, family));
        }
    }
    out
}

// ---- the child --------------------------------------------------------------------------

fn child(cfg: &Config, role: &ChildRole, factories: &[&dyn EngineFactory]) -> i32 {
    memlimit::die_with_parent();
    if let Some(cg) = &role.cgroup {
        if let Err(e) = memlimit::enter(cg) {
            eprintln!("error: cannot enter cgroup {}: {e}", cg.display());
            return 3;
        }
    }
    let factory: &dyn EngineFactory = if role.engine == limits::ENGINE {
        &Limits
    } else {
        match factories.iter().find(|f| f.name() == role.engine) {
            Some(f) => *f,
            None => {
                eprintln!("error: no engine {:?}", role.engine);
                return 2;
            }
        }
    };
    let Some(root) = &cfg.dir else {
        eprintln!("error: a child needs --dir");
        return 2;
    };
    let dir = root.join(dir_name(&role.engine, &role.setup) + Family::of(&cfg.steps).suffix());
    let _ = fs::remove_dir_all(&dir);
    if let Err(e) = fs::create_dir_all(&dir) {
        eprintln!("error: {}: {e}", dir.display());
        return 1;
    }
    let mut out = match OpenOptions::new()
        .create(true)
        .append(true)
        .open(&role.results)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {}: {e}", role.results.display());
            return 1;
        }
    };
    let mut current = "open".to_string();
    let res = run_engine(cfg, role, factory, &dir, &mut out, &mut current);
    if !cfg.keep {
        let _ = fs::remove_dir_all(&dir);
    }
    match res {
        Ok(()) => 0,
        Err(e) => {
            let mut row = Row::failed(&role.engine, &role.setup, &current, e.to_string());
            if let Some(step) = current.strip_suffix(report::PROCS_SUFFIX) {
                row.step = step.into();
                row.reader_processes = cfg.threads;
            }
            let _ = writeln!(out, "{}", row.to_line());
            eprintln!(
                "error: {} in {current}: {e}",
                report::label(&role.engine, &role.setup)
            );
            1
        }
    }
}

/// What a child shares with the threads of a step.
pub(crate) struct Ctx<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) engine: &'a dyn Engine,
    pub(crate) keys: KeyGen,
    pub(crate) values: &'a Values,
    pub(crate) seed: u64,
    pub(crate) dir: &'a Path,
    pub(crate) device: Option<&'a Device>,
    pub(crate) role: &'a ChildRole,
    pub(crate) limit: bool,
    /// The insert benchmark's next id.
    pub(crate) ib: &'a IbState,
    /// redb's write shapes: the next key counter and the bytes stored.
    pub(crate) rb: &'a RbState,
}

fn run_engine(
    cfg: &Config,
    role: &ChildRole,
    factory: &dyn EngineFactory,
    dir: &Path,
    out: &mut fs::File,
    current: &mut String,
) -> Result<()> {
    let ecfg = engine_config(cfg);
    let mut engine = factory.open(dir, &role.setup, &ecfg)?;
    let reopen = factory.reopen_after_load(&role.setup);
    let device = Device::of(dir);
    let seed = cfg.seed.unwrap_or(0);
    let values = Values::new(cfg.value_size, seed ^ 0x5eed);
    let keys = KeyGen::new(cfg.key_size)?;
    let ib = IbState::default();
    let rb = RbState::default();
    // A macro, not a closure: each step borrows the engine only while it runs, and the engine
    // may be closed and reopened after the load.
    macro_rules! ctx {
        ($engine:expr) => {
            Ctx {
                cfg,
                engine: $engine,
                keys,
                values: &values,
                seed,
                dir,
                device: device.as_ref(),
                role,
                limit: role.engine == limits::ENGINE,
                ib: &ib,
                rb: &rb,
            }
        };
    }
    // Close the loaded (and synced) database and open it again with the factory's other setup.
    let reopened = |engine: Box<dyn Engine>| -> Result<Box<dyn Engine>> {
        match &reopen {
            None => Ok(engine),
            Some(setup) => {
                engine.close()?;
                eprintln!("  (reopened after load as {setup})");
                factory.open(dir, setup, &ecfg)
            }
        }
    };
    let steps = steps_for(cfg, factory, &role.setup);
    let load = Step::new(Kind::Load, false);
    let rb_load = Step::new(Kind::RbLoad, false);
    let family = Family::of(&steps);
    if family == Family::Rb {
        // redb's shapes insert into the table the bulk load made.
        if !steps.contains(&rb_load) {
            *current = rb_load.name().into();
            eprintln!(
                "  ({}, not reported: the other steps need it)",
                rb_load.name()
            );
            engine.set_durability(Durability::Sync)?;
            crate::rb::run(&ctx!(&*engine), rb_load)?;
        }
    } else if family == Family::Ib && !steps.is_empty() {
        // The insert benchmark's steps need the rows (and the later ones the indexes).
        let needs_index = steps
            .iter()
            .any(|s| matches!(s.kind, Kind::IbInsert | Kind::IbQr | Kind::IbQp));
        for (kind, needed) in [(Kind::IbLoad, true), (Kind::IbIndex, needs_index)] {
            let step = Step::new(kind, false);
            if needed && !steps.contains(&step) {
                *current = step.name().into();
                eprintln!("  ({}, not reported: the other steps need it)", step.name());
                engine.ib_set_durability(cfg.ib_durability)?;
                crate::ib::run(&ctx!(&*engine), step)?;
            }
        }
    } else if factory.steps(&role.setup).is_none() && !steps.contains(&load) {
        *current = "load".into();
        eprintln!("  (load, not reported: the other steps need the data)");
        engine.set_durability(Durability::Async)?;
        run_load(&ctx!(&*engine))?;
        engine = reopened(engine)?;
    }
    for step in steps {
        // Once, or (--readers both) with threads and then with processes.
        for &procs in crate::procs::runs(cfg, step, role.engine == limits::ENGINE) {
            *current = if procs {
                format!("{}{}", step.name(), report::PROCS_SUFFIX)
            } else {
                step.name().into()
            };
            let row = measure(&ctx!(&*engine), step, procs)?;
            if step.kind == Kind::Load {
                engine = reopened(engine)?;
            }
            eprintln!(
                "  {:<28} {:<6} {:>8} ops/s  p99 {:>7} us",
                report::label(&role.engine, &role.setup),
                row.step_label(),
                table::sig3(row.ops),
                table::sig3(row.p99_us)
            );
            writeln!(out, "{}", row.to_line())?;
            out.flush()?;
        }
    }
    *current = "close".into();
    engine.close()?;
    Ok(())
}

/// What the operations of a step did.
pub(crate) struct Outcome {
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    pub(crate) hist: Histogram<u64>,
    pub(crate) writer_writes: Option<u64>,
    /// `ib.l.i1`: rows/s of each tenth of its rows.
    pub(crate) tenths: Option<Vec<f64>>,
}

pub(crate) fn new_hist() -> Histogram<u64> {
    // 1 ns .. 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// Run `step` and read its counters; `procs`: its readers are processes
/// ([`crate::procs::runs`]).
fn measure(ctx: &Ctx<'_>, step: Step, procs: bool) -> Result<Row> {
    if let Some(d) = step.durability() {
        ctx.engine.set_durability(d)?;
    }
    if step.is_ib() {
        ctx.engine.ib_set_durability(ctx.cfg.ib_durability)?;
    }
    counters::reset_peak_rss();
    let before = Snapshot::take(Who::Process, ctx.device);
    let o = if step.kind == Kind::Load {
        run_load(ctx)?
    } else if step.is_ib() {
        crate::ib::run(ctx, step)?
    } else if step.is_rb() {
        crate::rb::run(ctx, step)?
    } else {
        run_timed(ctx, step, procs)?
    };
    // Async commits are made durable before the counters close (not timed), so wKB/o counts
    // what the step's commits eventually write, not what happened to be flushed by chance.
    // (ib.l.i0 and ib.l.x end with a sync counted in their time, as load does.)
    let async_ib = step.is_ib()
        && ctx.cfg.ib_durability == Durability::Async
        && !matches!(step.kind, Kind::IbLoad | Kind::IbIndex);
    if (step.kind != Kind::Load && step.durability() == Some(Durability::Async)) || async_ib {
        ctx.engine.sync()?;
    }
    let after = Snapshot::take(Who::Process, ctx.device);
    let d = before.delta(&after);
    let rss = counters::peak_rss().unwrap_or(0);
    let (alloc, apparent) = counters::dir_size(ctx.dir).unwrap_or((0, 0));
    let n = o.ops.max(1) as f64;
    let q = |p: f64| o.hist.value_at_quantile(p) as f64 / 1000.0;
    let device_bytes = match ctx.cfg.io_counter {
        IoCounter::Device => d.device_bytes,
        IoCounter::Proc => None,
    };
    let (written, source) = match (device_bytes, d.io) {
        (Some(b), _) => (
            b as f64,
            format!("device:{}", ctx.device.map_or("?", |d| d.name.as_str())),
        ),
        (None, Some(io)) => (io.write_bytes as f64, "proc:write_bytes".to_string()),
        (None, None) => (f64::NAN, "none".to_string()),
    };
    let logical = if step.is_ib() {
        ib_logical_bytes(ctx.cfg, step) as f64
    } else if step.is_rb() {
        crate::rb::logical_bytes(ctx) as f64
    } else {
        engine_config(ctx.cfg).logical_bytes() as f64
    };
    Ok(Row {
        engine: ctx.role.engine.clone(),
        setup: ctx.role.setup.clone(),
        step: step.name().into(),
        ops: o.ops as f64 / o.secs.max(1e-9),
        p50_us: q(0.5),
        p99_us: q(0.99),
        p999_us: q(0.999),
        db_bytes: alloc,
        db_apparent_bytes: apparent,
        reads_per_op: d
            .io
            .map_or(f64::NAN, |io| io.read_bytes as f64 / 4096.0 / n),
        wkb_per_op: written / 1024.0 / n,
        cs_per_op: d.usage.context_switches as f64 / n,
        cpu_us_per_op: d.usage.cpu_us as f64 / n,
        rss_bytes: rss,
        space_amp: if ctx.limit {
            f64::NAN
        } else {
            alloc as f64 / logical
        },
        ops_total: o.ops,
        secs: o.secs,
        threads: step.threads(ctx.cfg.threads),
        reader_processes: if procs {
            step.threads(ctx.cfg.threads)
        } else {
            0
        },
        major_faults_per_op: d.usage.major_faults as f64 / n,
        proc_read_bytes: d.io.map(|io| io.read_bytes),
        proc_write_bytes: d.io.map(|io| io.write_bytes),
        device_write_bytes: d.device_bytes,
        wkb_source: source,
        writer_ops: o.writer_writes.map(|w| w as f64 / o.secs.max(1e-9)),
        tenths: o.tenths,
        error: None,
    })
}

/// Logical bytes of the insert benchmark's table after `step`: rows x (8-byte id + row),
/// plus 3 x 16-byte index entries per row once the indexes exist.
fn ib_logical_bytes(cfg: &Config, step: Step) -> u64 {
    let per_row = 8 + cfg.ib_row_size as u64;
    let index = if step.kind == Kind::IbLoad {
        0
    } else {
        3 * crate::ib::INDEX_KEY as u64
    };
    cfg.ib_rows * (per_row + index)
}

/// The load's writes: documents 1..=`docs` (their keys from `keys`, cut to `klen` bytes, and
/// values picked from `values` with `rng`), `batch` a commit through `w`; `committed` gets
/// each commit's time. The load step, and the examples and benches that build the same file.
#[allow(clippy::too_many_arguments)]
pub fn write_documents(
    w: &mut dyn Writer,
    keys: &KeyGen,
    klen: usize,
    values: &Values,
    rng: &mut Rng,
    docs: u64,
    batch: usize,
    mut committed: impl FnMut(Duration),
) -> Result<()> {
    let mut bufs = vec![[0u8; MAX_KEY]; batch];
    let mut next = 1u64;
    while next <= docs {
        let n = (docs - next + 1).min(batch as u64) as usize;
        for (j, b) in bufs.iter_mut().enumerate().take(n) {
            keys.key(next + j as u64, b);
        }
        let pairs: Vec<(&[u8], &[u8])> = bufs[..n]
            .iter()
            .map(|b| (&b[..klen], values.pick(rng)))
            .collect();
        let s = Instant::now();
        w.write(&pairs)?;
        committed(s.elapsed());
        next += n as u64;
    }
    Ok(())
}

/// load: every document, `--batch` per commit, async; then one sync, counted. Latency is
/// per commit (and the final sync is one more sample).
fn run_load(ctx: &Ctx<'_>) -> Result<Outcome> {
    let batch = ctx.cfg.batch;
    let docs = ctx.cfg.docs;
    let klen = ctx.keys.len();
    let mut hist = new_hist();
    let mut rng = Rng::new(thread_seed(
        ctx.seed,
        Step::new(Kind::Load, false).index(),
        0,
    ));
    let mut w = ctx.engine.writer()?;
    let t0 = Instant::now();
    write_documents(
        &mut *w,
        &ctx.keys,
        klen,
        ctx.values,
        &mut rng,
        docs,
        batch,
        |t| hist.saturating_record(nanos(t)),
    )?;
    drop(w);
    let s = Instant::now();
    ctx.engine.sync()?;
    hist.saturating_record(nanos(s.elapsed()));
    Ok(Outcome {
        ops: docs,
        secs: t0.elapsed().as_secs_f64(),
        hist,
        writer_writes: None,
        tenths: None,
    })
}

pub(crate) enum Handle<'e> {
    R(Box<dyn Reader + 'e>),
    W(Box<dyn Writer + 'e>),
}

pub(crate) struct WorkerDone {
    pub(crate) ops: u64,
    pub(crate) hist: Histogram<u64>,
    /// When the last operation ended.
    pub(crate) end: Instant,
}

fn run_timed(ctx: &Ctx<'_>, step: Step, procs: bool) -> Result<Outcome> {
    if procs {
        return crate::procs::run(ctx, step);
    }
    let n = step.threads(ctx.cfg.threads);
    let limited = step.limited_writer();
    let barrier = Barrier::new(n + 1 + usize::from(limited));
    let stop = AtomicBool::new(false);
    let dur = Duration::from_secs_f64(ctx.cfg.secs);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..n)
            .map(|t| {
                let (barrier, stop) = (&barrier, &stop);
                s.spawn(move || worker(ctx, step, t, barrier, stop))
            })
            .collect();
        let writer = limited.then(|| {
            let (barrier, stop) = (&barrier, &stop);
            s.spawn(move || limited_writer(ctx, step, n, barrier, stop))
        });
        barrier.wait();
        let start = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let left = dur.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        stop.store(true, Ordering::Relaxed);
        let mut hist = new_hist();
        let mut ops = 0;
        let mut end = start;
        let mut first_err: Option<BoxError> = None;
        for w in workers {
            match w.join() {
                Ok(Ok(d)) => {
                    ops += d.ops;
                    hist.add(&d.hist).map_err(|e| format!("histogram: {e}"))?;
                    end = end.max(d.end);
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert("a worker thread panicked".into());
                }
            }
        }
        let writes = match writer.map(|h| h.join()) {
            None => None,
            Some(Ok(Ok(w))) => Some(w),
            Some(Ok(Err(e))) => return Err(e),
            Some(Err(_)) => return Err("the writer thread panicked".into()),
        };
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok(Outcome {
            ops,
            secs: end.duration_since(start).as_secs_f64(),
            hist,
            writer_writes: writes,
            tenths: None,
        })
    })
}

fn worker(
    ctx: &Ctx<'_>,
    step: Step,
    t: usize,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<WorkerDone> {
    let handle = if step.reads() {
        ctx.engine.reader().map(Handle::R)
    } else {
        ctx.engine.writer().map(Handle::W)
    };
    barrier.wait();
    let res = handle.and_then(|h| work(ctx, step, t, h, stop));
    if res.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    res
}

/// The loop of one reader or writer thread (or reader process), until `stop`.
pub(crate) fn work(
    ctx: &Ctx<'_>,
    step: Step,
    t: usize,
    mut h: Handle<'_>,
    stop: &AtomicBool,
) -> Result<WorkerDone> {
    let mut rng = Rng::new(thread_seed(ctx.seed, step.index(), t));
    let mut hist = new_hist();
    let mut buf = [0u8; MAX_KEY];
    let mut bytes = 0u64;
    let mut ops = 0u64;
    let docs = ctx.cfg.docs;
    let ranges = step.ranges();
    let mut t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let i = rng.doc(docs);
        let key = ctx.keys.key(i, &mut buf);
        match &mut h {
            Handle::R(r) if ranges => {
                if r.scan(key, RANGE_LEN, &mut bytes)? == 0 {
                    return Err(format!("a range from the key of document {i} is empty").into());
                }
            }
            Handle::R(r) => {
                if r.get(key)?.is_none() {
                    return Err(format!("the key of document {i} is missing").into());
                }
            }
            Handle::W(w) => {
                let v = ctx.values.pick(&mut rng);
                w.write(&[(key, v)])?;
            }
        }
        let t1 = Instant::now();
        hist.saturating_record(nanos(t1 - t0));
        t0 = t1;
        ops += 1;
    }
    std::hint::black_box(bytes);
    Ok(WorkerDone { ops, hist, end: t0 })
}

/// The writer beside the readers of pqw/rqw: one key per async commit, 1,000 a second.
fn limited_writer(
    ctx: &Ctx<'_>,
    step: Step,
    t: usize,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<u64> {
    let w = ctx.engine.writer();
    barrier.wait();
    let res = (|| {
        let mut w = w?;
        let mut rng = Rng::new(thread_seed(ctx.seed, step.index(), 1000 + t));
        let mut rate = RateLimiter::new(LIMITED_WRITES_PER_SEC, Instant::now());
        let mut buf = [0u8; MAX_KEY];
        let mut writes = 0;
        loop {
            rate.wait();
            if stop.load(Ordering::Relaxed) {
                return Ok(writes);
            }
            let key = ctx.keys.key(rng.doc(ctx.cfg.docs), &mut buf);
            let v = ctx.values.pick(&mut rng);
            w.write(&[(key, v)])?;
            writes += 1;
        }
    })();
    if res.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    res
}

// ---- the parent -------------------------------------------------------------------------

fn update_latest(workload: &Path, stamp: &str) {
    let latest = workload.join("latest");
    let _ = fs::remove_file(&latest);
    if let Err(e) = std::os::unix::fs::symlink(stamp, &latest) {
        eprintln!("warning: cannot point {} at {stamp}: {e}", latest.display());
    }
}

/// The `config` object of results.json: the run's settings, how it measures, and each
/// engine/setup's own description (label -> setting -> value).
#[derive(Serialize)]
struct RunConfig<'a> {
    command: &'a str,
    quick: bool,
    docs: u64,
    secs: f64,
    key_size: usize,
    value_size: usize,
    threads: usize,
    load_batch: usize,
    steps: Vec<&'static str>,
    larch_setups: &'a [String],
    ib_rows: u64,
    ib_inserts: u64,
    ib_row_size: usize,
    ib_batch: usize,
    ib_threads: &'a [usize],
    ib_durability: &'static str,
    /// redb's write shapes: the keys of each rb step and their sizes.
    rb: crate::config::RbSizes,
    readers: &'static str,
    /// `--rounds`; left out when 1, so a run without rounds writes what it always wrote.
    #[serde(skip_serializing_if = "is_one")]
    rounds: usize,
    /// A string, as results.json always had it: a u64 seed above 2^53 loses digits in many
    /// JSON readers.
    seed: String,
    dir: String,
    out: String,
    mem_limit_bytes: Option<u64>,
    mode: &'a str,
    wkb_source: &'a str,
    method: Pairs<&'static str, String>,
    source_revision: Option<String>,
    loadavg_at_end: Option<String>,
    engines: Described,
    elapsed_secs: f64,
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// Each engine/setup's own description, by label: setting -> value.
type Described = Pairs<String, Pairs<String, String>>;

/// An engine (or the limits) and one of its setups: what one child process runs.
type Job<'f> = (&'f dyn EngineFactory, String);

/// What runs, in order: the limits first, on a machine no engine has dirtied yet, then the
/// engine/setups (`--rounds` times, [`rounds::order`]), then the fdatasync limit once more
/// (other work on the machine drifts).
struct Plan<'f> {
    limits: Vec<Job<'f>>,
    engines: Vec<Job<'f>>,
    after: Vec<Job<'f>>,
}

impl<'f> Plan<'f> {
    /// Every job in run order, each with its round (from 1), or `None` for a limit, which
    /// runs once (and is shown last).
    fn jobs(&self, rounds: usize) -> Vec<(Option<usize>, &Job<'f>)> {
        let engines = rounds::order(self.engines.len(), rounds)
            .into_iter()
            .map(|(round, i)| (Some(round), &self.engines[i]));
        self.limits
            .iter()
            .map(|p| (None, p))
            .chain(engines)
            .chain(self.after.iter().map(|p| (None, p)))
            .collect()
    }
}

/// The plan of `--engines` (default: every engine of this program) with their setups, each
/// checked, and of the limits that have a step to run.
fn plan_runs<'f>(
    cfg: &Config,
    factories: &[&'f dyn EngineFactory],
) -> std::result::Result<Plan<'f>, String> {
    let names: Vec<String> = cfg
        .engines
        .clone()
        .unwrap_or_else(|| factories.iter().map(|f| f.name().to_string()).collect());
    let mut engines: Vec<Job<'f>> = Vec::new();
    for name in &names {
        let f = factories.iter().find(|f| f.name() == name).ok_or_else(|| {
            format!(
                "unknown engine {name:?}; this program has {}",
                factories
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(",")
            )
        })?;
        if cfg.readers.processes()
            && cfg.steps.iter().any(|s| s.reader_processes_apply())
            && !f.supports_reader_processes()
        {
            return Err(format!(
                "--readers {}: engine {name} has no reader processes (larch has)",
                cfg.readers.name()
            ));
        }
        for setup in f.setups(&cfg.larch_setups) {
            f.check_setup(&setup).map_err(|e| e.to_string())?;
            engines.push((*f, setup));
        }
    }
    let ecfg = engine_config(cfg);
    let mut limits: Vec<Job<'f>> = Vec::new();
    if !cfg.no_limits {
        for s in limits::setups_for(&ecfg) {
            if !steps_for(cfg, &Limits, s).is_empty() {
                limits.push((&Limits, s.to_string()));
            }
        }
    }
    let after: Vec<Job<'f>> = limits
        .iter()
        .filter(|(_, s)| s == limits::FDATASYNC)
        .map(|_| {
            (
                &Limits as &dyn EngineFactory,
                limits::FDATASYNC_AFTER.to_string(),
            )
        })
        .collect();
    Ok(Plan {
        limits,
        engines,
        after,
    })
}

/// Everything settled before the first child runs: the seed, the directories, the device and
/// memory limiter, and how the run describes itself.
struct RunSetup {
    seed: u64,
    /// The results directory (results.json, results.csv, chart.svg).
    out: PathBuf,
    /// Where the databases go: removed at the end when the harness chose it (no `--dir`),
    /// unless `--keep`.
    db_root: PathBuf,
    own_db_root: bool,
    /// Where each child writes its rows.
    raw: PathBuf,
    device: Option<Device>,
    machine: machine::Machine,
    limiter: Option<Limiter>,
    /// "cached", or how memory is limited.
    mode: String,
    /// What the wKB/o column counts.
    wkb_source: String,
    /// The command as given (without cargo's `--bench`).
    command: String,
    revision: Option<String>,
}

impl RunSetup {
    /// The device whose sectors the wKB/o column counts; `None` for /proc/self/io.
    fn wkb_device(&self, cfg: &Config) -> Option<&Device> {
        match cfg.io_counter {
            IoCounter::Device => self.device.as_ref(),
            IoCounter::Proc => None,
        }
    }
}

/// Pick the seed, create the results directory (a fresh stamp under target/workload, pointed at
/// by `latest`, unless `--out`), the database and raw directories, and the memory limiter.
fn set_up(cfg: &Config, args: &[String], program: &str) -> std::result::Result<RunSetup, String> {
    let seed = cfg.seed.unwrap_or_else(fresh_seed);
    let stamp = machine::stamp_now();
    let out = match &cfg.out {
        Some(o) => o.clone(),
        None => {
            let w = target_dir().join("workload");
            let mut o = w.join(&stamp);
            let mut k = 1;
            while o.exists() {
                k += 1;
                o = w.join(format!("{stamp}-{k}"));
            }
            o
        }
    };
    fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let out = fs::canonicalize(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if cfg.out.is_none() {
        if let (Some(parent), Some(name)) = (out.parent(), out.file_name()) {
            update_latest(parent, &name.to_string_lossy());
        }
    }
    let own_db_root = cfg.dir.is_none();
    let db_root = cfg.dir.clone().unwrap_or_else(|| out.join("db"));
    fs::create_dir_all(&db_root).map_err(|e| format!("{}: {e}", db_root.display()))?;
    let db_root = fs::canonicalize(&db_root).map_err(|e| format!("{}: {e}", db_root.display()))?;
    let raw = out.join("raw");
    fs::create_dir_all(&raw).map_err(|e| format!("{}: {e}", raw.display()))?;
    let device = Device::of(&db_root);
    let machine = machine::describe(&db_root, device.as_ref());

    let limiter = match cfg.mem_limit {
        Some(l) => Some(Limiter::choose(cfg.mem_mechanism, l)?),
        None => None,
    };
    let mode = match (&limiter, cfg.mem_limit) {
        (Some(l), Some(bytes)) => format!("not cached: {}", l.describe(bytes)),
        _ => "cached (no memory limit)".to_string(),
    };
    let mut s = RunSetup {
        seed,
        out,
        db_root,
        own_db_root,
        raw,
        device,
        machine,
        limiter,
        mode,
        wkb_source: String::new(),
        command: String::new(),
        revision: None,
    };
    s.wkb_source = match s.wkb_device(cfg) {
        Some(d) => format!(
            "device {} sectors written (/sys/block/{}/stat; machine-wide: other writers to the device count too)",
            d.name, d.name
        ),
        None => "write_bytes of /proc/self/io (counted when pages are dirtied; overcounts with large folios)".to_string(),
    };
    let shown_args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--bench")
        .collect();
    let command = format!("{program} -- {}", shown_args.join(" "));
    s.command = command.trim_end_matches(" -- ").trim_end().to_string();
    Ok(s)
}

/// The lines that say what this run is, before the first child runs. Reads the source
/// revision (printed among them) into `s`.
fn print_header(cfg: &Config, s: &mut RunSetup) {
    println!("larch workload harness, {}", machine::iso_now());
    println!("command: {}", s.command);
    println!(
        "machine: {} cores, {:.1} GiB RAM, kernel {}, {} on {} ({})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        machine::mem_total().unwrap_or(0) as f64 / (1u64 << 30) as f64,
        fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
        s.db_root.display(),
        machine::mount_of(&s.db_root).map_or("?".into(), |m| m.1),
        s.device
            .as_ref()
            .map_or("no block device", |d| d.name.as_str()),
    );
    if Family::of(&cfg.steps) == Family::Rb {
        // Only redb's shapes: the documents, seconds and threads do not apply.
        println!("run: redb's write shapes only, seed {}", s.seed);
    } else {
        println!(
            "run: {} docs, {} B keys, {} B values, {} s per timed step, {} threads for .n, load batches of {}, seed {}",
            cfg.docs, cfg.key_size, cfg.value_size, cfg.secs, cfg.threads, cfg.batch, s.seed
        );
    }
    if cfg.steps.iter().any(|s| s.is_rb()) {
        let rb = cfg.rb;
        println!(
            "rb: {} B keys, {} B values; rb.load {} keys in one commit, rb.ins1 {} commits, rb.insb {} commits of {}, rb.insa {} commits, rb.sorted {} keys in one commit",
            rb.key_size, rb.value_size, rb.load, rb.ins1, rb.batches, rb.batch, rb.insa, rb.sorted
        );
    }
    println!("mode: {}", s.mode);
    if cfg.rounds > 1 {
        println!(
            "rounds: {} rounds of every engine/setup, odd rounds in --engines order, even rounds reversed, each on seed {}; the tables report each step's median round",
            cfg.rounds, s.seed
        );
    }
    match cfg.readers {
        Readers::Threads => {}
        Readers::Processes => println!(
            "readers: pq.n and rq.n run {} reader processes (rows pq.n/procs, rq.n/procs), each opening the database read-only beside the engine's process",
            cfg.threads
        ),
        Readers::Both => println!(
            "readers: pq.n and rq.n run twice, with {0} reader threads (rows pq.n, rq.n) and then {0} reader processes (rows pq.n/procs, rq.n/procs), each opening the database read-only beside the engine's process",
            cfg.threads
        ),
    }
    println!(
        "load average at start: {} (other work on the machine shares the cores and the device)",
        machine::loadavg().unwrap_or_default()
    );
    s.revision = machine::source_revision();
    if let Some(r) = &s.revision {
        println!("source: {r}");
    }
    println!("wKB/o: {}", s.wkb_source);
    println!();
}

/// What the children of a run reported.
struct Ran {
    /// The rows reported: the engines' (each step's median round, [`rounds::median_rows`]),
    /// then the limits'.
    rows: Vec<Row>,
    /// Every engine row of every round, in run order.
    rounds: Vec<RoundRow>,
    /// Each job's own description (label -> setting -> value), for results.json.
    described: Described,
}

/// Every job of the plan, each in its child process.
fn run_plan(
    cfg: &Config,
    plan: &Plan<'_>,
    s: &mut RunSetup,
    exe: &Path,
) -> std::result::Result<Ran, String> {
    let ecfg = engine_config(cfg);
    let mut round_rows: Vec<RoundRow> = Vec::new();
    let mut limit_rows: Vec<Row> = Vec::new();
    let mut described = Pairs::default();
    for (round, (f, setup)) in plan.jobs(cfg.rounds) {
        let label = report::label(f.name(), setup);
        if matches!(round, None | Some(1)) {
            described
                .0
                .push((label.clone(), Pairs(f.describe(setup, &ecfg))));
        }
        // With rounds, each round's child has its own rows file (raw/NAME.r2.rows).
        let (shown, raw_tag) = match round {
            Some(r) if cfg.rounds > 1 => (format!(" (round {r}/{})", cfg.rounds), format!(".r{r}")),
            _ => (String::new(), String::new()),
        };
        for (sub, family) in child_configs(cfg, *f, setup) {
            eprintln!("== {label}{}{shown}", family.title());
            let raw_name = format!("{}{}{raw_tag}", dir_name(f.name(), setup), family.suffix());
            let got = run_child(&sub, *f, setup, family.suffix(), &raw_name, &label, s, exe)?;
            match round {
                None => limit_rows.extend(got),
                Some(round) => {
                    round_rows.extend(got.into_iter().map(|row| RoundRow { round, row }))
                }
            }
        }
    }
    if s.own_db_root && !cfg.keep {
        let _ = fs::remove_dir_all(&s.db_root);
    }
    let mut rows = rounds::median_rows(&round_rows);
    rows.extend(limit_rows);
    Ok(Ran {
        rows,
        rounds: round_rows,
        described,
    })
}

/// One engine/setup in its own child process (in its memory-limit group, beside its ballast),
/// writing its rows to raw/`raw_name`.rows: its rows, with a failure row for every step it did
/// not report.
#[allow(clippy::too_many_arguments)]
fn run_child(
    cfg: &Config,
    f: &dyn EngineFactory,
    setup: &str,
    suffix: &str,
    raw_name: &str,
    label: &str,
    s: &mut RunSetup,
    exe: &Path,
) -> std::result::Result<Vec<Row>, String> {
    let results = s.raw.join(format!("{raw_name}.rows"));
    let _ = fs::remove_file(&results);
    let group = match (&mut s.limiter, cfg.mem_limit) {
        (Some(l), Some(bytes)) => l.child_group(bytes)?,
        _ => None,
    };
    let ballast = match (&s.limiter, cfg.mem_limit) {
        (Some(l), Some(bytes)) => l.ballast(exe, bytes)?,
        _ => None,
    };
    let child_args = cfg.child_args(
        f.name(),
        setup,
        s.seed,
        &s.db_root,
        &results,
        group.as_ref().map(|g| g.path()),
    );
    let t = Instant::now();
    let status = Command::new(exe).args(&child_args).status();
    drop(ballast);
    drop(group);
    if !cfg.keep {
        // A child killed (by the memory limit, say) leaves its directory behind.
        let _ = fs::remove_dir_all(s.db_root.join(dir_name(f.name(), setup) + suffix));
    }
    let status_text = match &status {
        Ok(s) => s.to_string(),
        Err(e) => format!("could not start: {e}"),
    };
    let got = child_rows(cfg, f, setup, &results, &status_text);
    eprintln!(
        "   {label}: {} in {:.1} s",
        status_text,
        t.elapsed().as_secs_f64()
    );
    Ok(got)
}

/// The rows a child wrote to `results`, in step order, plus a failure row for each step it
/// should have run but did not report (it ended with `status_text`).
fn child_rows(
    cfg: &Config,
    f: &dyn EngineFactory,
    setup: &str,
    results: &Path,
    status_text: &str,
) -> Vec<Row> {
    let mut got: Vec<Row> = fs::read_to_string(results)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| match Row::from_line(l) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("warning: {e}");
                None
            }
        })
        .collect();
    for step in steps_for(cfg, f, setup) {
        for &procs in crate::procs::runs(cfg, step, f.name() == limits::ENGINE) {
            let procs = if procs { step.threads(cfg.threads) } else { 0 };
            if !got
                .iter()
                .any(|r| r.step == step.name() && r.reader_processes == procs)
            {
                let mut row = Row::failed(
                    f.name(),
                    setup,
                    step.name(),
                    format!("not run: the engine's process ended ({status_text})"),
                );
                row.reader_processes = procs;
                got.push(row);
            }
        }
    }
    // Keep run order (threads before processes), with a failure row for the step that
    // failed in place.
    got.sort_by_key(|r| {
        (
            Step::from_name(&r.step).map_or(usize::MAX, |s| s.index()),
            r.reader_processes,
        )
    });
    got.dedup_by(|b, a| a.step == b.step && a.reader_processes == b.reader_processes);
    got
}

/// The ops table, with `--rounds` the rounds table, then the latency and per-step
/// amplification tables, and their legend.
fn print_tables(cfg: &Config, s: &RunSetup, ran: &Ran, order: &[&str]) {
    let rows = &ran.rows;
    println!("{}", table::ops_table(rows, order));
    if cfg.rounds > 1 {
        println!("{}", rounds::rounds_table(&ran.rounds, order));
        println!("{}", rounds::legend(cfg.rounds));
        println!();
    }
    println!("{}", table::latency_table(rows, order));
    for step in table::step_names(rows, order) {
        println!("{}", table::amp_table(rows, &step));
    }
    let tenths = table::tenths_table(rows);
    if !tenths.is_empty() {
        println!("{tenths}");
    }
    if rows
        .iter()
        .any(|r| Step::from_name(&r.step).is_some_and(Step::is_rb))
    {
        println!("rb.*: ops = keys/s (rb.ins1 and rb.insa commit one key: commits/s too); latency per commit; per-op columns per key; s-amp: allocated file bytes / (keys so far x (key+value)).");
    }
    println!(
        "r/o: read_bytes of /proc/self/io / 4 KiB per op; mf/o: major faults per op; wKB/o: KiB written per op ({}); cs/o: context switches per op; cpu/o: user+sys CPU us per op; rss: peak resident MB during the step; s-amp: allocated file bytes / (docs x (key+value)); db.mb: allocated/apparent MB.",
        s.wkb_device(cfg).map_or("/proc/self/io write_bytes".to_string(), |d| format!("device {} sectors", d.name))
    );
}

/// The `config` object of results.json, `started` being when the first child started.
fn run_config<'a>(
    cfg: &'a Config,
    s: &'a RunSetup,
    described: Described,
    started: Instant,
) -> RunConfig<'a> {
    RunConfig {
        command: &s.command,
        quick: cfg.quick,
        docs: cfg.docs,
        secs: cfg.secs,
        key_size: cfg.key_size,
        value_size: cfg.value_size,
        threads: cfg.threads,
        load_batch: cfg.batch,
        steps: cfg.steps.iter().map(|s| s.name()).collect(),
        larch_setups: &cfg.larch_setups,
        ib_rows: cfg.ib_rows,
        ib_inserts: cfg.ib_inserts,
        ib_row_size: cfg.ib_row_size,
        ib_batch: cfg.ib_batch,
        ib_threads: &cfg.ib_threads,
        ib_durability: cfg.ib_durability.name(),
        rb: cfg.rb,
        readers: cfg.readers.name(),
        rounds: cfg.rounds,
        seed: s.seed.to_string(),
        dir: s.db_root.display().to_string(),
        out: s.out.display().to_string(),
        mem_limit_bytes: cfg.mem_limit,
        mode: &s.mode,
        wkb_source: &s.wkb_source,
        method: method(cfg),
        source_revision: s.revision.clone(),
        loadavg_at_end: machine::loadavg(),
        engines: described,
        elapsed_secs: started.elapsed().as_secs_f64(),
    }
}

/// The `method` pairs of results.json: how each thing is measured.
fn method(cfg: &Config) -> Pairs<&'static str, String> {
    let mut m = Pairs(vec![
        ("process", "each engine/setup and each limit runs in its own child process (a re-execution of this binary); counters are that process's own".into()),
        ("keys", format!("key of document i (1..=docs) = big-endian splitmix64(i) then more hash bytes, {} bytes: distinct, not in insertion order", cfg.key_size)),
        ("values", "random bytes (incompressible), a window of a 1 MiB pool".into()),
        ("seeds", "each thread of each step has its own seed derived from the run seed, the same for every engine".into()),
        ("load", "documents 1..=docs in key-hash order, batches of load_batch per commit, async, then one sync counted in the time; latency is per commit".into()),
        ("ows", "random existing keys overwritten, one key per commit, sync".into()),
        ("owa", "random existing keys overwritten, one key per commit, async; a sync after the step (untimed) before the counters close".into()),
        ("pqw/rqw", "readers plus one writer thread limited to 1000 async single-key commits/s; ops counts reads; a sync after the step (untimed)".into()),
        ("pq/rq", "point reads of one random existing key / range reads of 20 entries from one, each its own read transaction".into()),
        ("readers", "config.readers (--readers): with processes, pq.n and rq.n of each engine that has them run their n readers as n processes (re-executions of this binary opening the database read-only while the engine's process keeps it open) instead of n threads; with both, each of those steps runs with threads and then with processes in the same child; such a row's details say how many processes (reader_processes) and the tables label it pq.n/procs, rq.n/procs; cpu/o, cs/o and mf/o include the reader processes (reaped children), rss does not".into()),
        ("ib", format!("insert benchmark, in a child process of its own per engine/setup: a table of ib_rows rows (8-byte big-endian auto-increment id -> {} B row: 3 indexed 8-byte fields, each a hash of the id below {:?}, then random padding) and 3 secondary indexes (key = field value + id, value empty); commits {}", cfg.ib_row_size, crate::ib::CARDINALITY, cfg.ib_durability.name())),
        ("ib.l.i0", "ib_rows rows in id order, ib_batch per commit, no index, then one sync counted in the time; ops = rows/s".into()),
        ("ib.l.x", format!("the engine builds the 3 indexes from the rows (SQLite CREATE INDEX; key-value engines read the rows and insert the entries, {} rows per commit), then one sync counted; ops = rows/s", crate::ib::BUILD_CHUNK)),
        ("ib.l.i1", "ib_inserts more rows, ib_batch per commit, each commit inserting the rows with their 3 index entries and deleting as many of the oldest rows with theirs (the table stays at ib_rows); .tN: N writer threads taking ids from one counter; ops = rows/s; tenths = rows/s of each tenth of the rows".into()),
        ("ib.qr100/ib.qp100", format!("one query thread: {} entries of a random index from a random field value then a point read of each row they name, in one read transaction / one row by a random live id; beside one writer inserting {} rows/s (one per commit, indexed, the oldest deleted); ops = queries/s", crate::ib::QUERY_LEN, crate::ib::QUERY_WRITER_ROWS_PER_SEC)),
        ("rb", format!("redb's write shapes (the write phases of redb's comparison benchmark), in a child process of its own per engine/setup on an empty database: new random keys of rb.key_size ({} B) bytes (key-hash counters going on from step to step: distinct, none already in the table), values of rb.value_size ({} B) random bytes; keys and values made before the clock starts; ops = keys/s; latency per commit; space-amp divides by the keys inserted so far x (key + value)", cfg.rb.key_size, cfg.rb.value_size)),
        ("rb.load", "rb.load new random keys in one transaction, committed durably (sync): the commit is the step".into()),
        ("rb.ins1", "rb.ins1 new random keys, one sync commit each: keys/s = commits/s".into()),
        ("rb.insb", "rb.batches sync commits of rb.batch new random keys each: ops = keys/s".into()),
        ("rb.insa", "rb.insa new random keys, one async commit each: keys/s = commits/s; a sync after the step (untimed) before the counters close".into()),
        ("rb.sorted", "rb.sorted keys (rb.key_size bytes of 0xFF then a big-endian u64 counter from 0: ascending, past every key in the table) in one sync transaction through Writer::write_sorted: larch WriteTree::append, LMDB MDB_APPEND, redb's appending cursor (upper_bound_mut + insert_before), ordinary inserts for the others, as redb's benchmark".into()),
        ("latency", "hdrhistogram of each operation's time (one clock read per operation)".into()),
        ("rss", "VmHWM after resetting it (clear_refs 5) at the step's start: includes mapped file pages".into()),
    ]);
    if cfg.rounds > 1 {
        m.0.push(("rounds", rounds::method()));
    }
    m
}

/// results.json, results.csv and chart.svg in the results directory, then where they are.
fn write_results(
    cfg: &Config,
    s: &RunSetup,
    config: &RunConfig<'_>,
    ran: &Ran,
    order: &[&str],
    started: Instant,
) -> std::result::Result<(), String> {
    let rows = &ran.rows;
    let json_path = s.out.join("results.json");
    let csv_path = s.out.join("results.csv");
    let rounds_path = s.out.join("rounds.csv");
    let svg_path = s.out.join("chart.svg");
    let ib_path = s.out.join("ib-tenths.svg");
    let every_round = (cfg.rounds > 1).then(|| rounds::rounds_json(&ran.rounds));
    fs::write(
        &json_path,
        report::results_json_with(&s.machine, config, rows, every_round.as_ref()),
    )
    .map_err(|e| format!("{}: {e}", json_path.display()))?;
    fs::write(&csv_path, report::results_csv(rows))
        .map_err(|e| format!("{}: {e}", csv_path.display()))?;
    if cfg.rounds > 1 {
        fs::write(&rounds_path, rounds::rounds_csv(&ran.rounds))
            .map_err(|e| format!("{}: {e}", rounds_path.display()))?;
    }
    let cached = if cfg.mem_limit.is_some() {
        format!("not cached ({} MiB)", cfg.mem_limit.unwrap_or(0) >> 20)
    } else {
        "cached".into()
    };
    let title = if Family::of(&cfg.steps) == Family::Rb {
        format!(
            "keys/s per step: redb's write shapes, {} keys loaded, {} B keys, {} B values, {cached}",
            cfg.rb.load, cfg.rb.key_size, cfg.rb.value_size
        )
    } else {
        format!(
            "ops/s per step: {} docs, {} B values, {} s/step, {cached}",
            cfg.docs, cfg.value_size, cfg.secs
        )
    };
    if let Err(e) = chart::write_chart(&svg_path, &title, rows, order) {
        eprintln!("warning: {e}");
    }
    let ib_title = format!(
        "ib.l.i1 rows/s per tenth: {} rows of {} B, {} inserted, 3 indexes, {cached}",
        cfg.ib_rows, cfg.ib_row_size, cfg.ib_inserts,
    );
    let ib_chart = match chart::write_tenths_chart(&ib_path, &ib_title, rows) {
        Ok(wrote) => wrote,
        Err(e) => {
            eprintln!("warning: {e}");
            false
        }
    };
    println!();
    println!("results: {}", s.out.display());
    println!("  {}", json_path.display());
    println!("  {}", csv_path.display());
    if cfg.rounds > 1 {
        println!("  {}", rounds_path.display());
    }
    println!("  {}", svg_path.display());
    if ib_chart {
        println!("  {}", ib_path.display());
    }
    println!(
        "elapsed: {:.1} s; load average at end: {}",
        started.elapsed().as_secs_f64(),
        machine::loadavg().unwrap_or_default()
    );
    Ok(())
}

/// The parent: plan the runs, set up, run each in a child, report.
fn parent(
    cfg: &Config,
    args: &[String],
    program: &str,
    factories: &[&dyn EngineFactory],
) -> std::result::Result<(), String> {
    let plan = plan_runs(cfg, factories)?;
    let mut s = set_up(cfg, args, program)?;
    print_header(cfg, &mut s);

    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let started = Instant::now();
    let mut ran = run_plan(cfg, &plan, &mut s, &exe)?;

    let order: Vec<&str> = steps::ALL.iter().map(|s| s.name()).collect();
    print_tables(cfg, &s, &ran, &order);
    let described = std::mem::take(&mut ran.described);
    let config = run_config(cfg, &s, described, started);
    write_results(cfg, &s, &config, &ran, &order, started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_are_plain() {
        assert_eq!(
            dir_name("larch", "first-fit/pwrite"),
            "larch-first-fit_pwrite"
        );
        assert_eq!(
            dir_name("larch", "null/mmap:ct=0.25"),
            "larch-null_mmap_ct_0_25"
        );
    }

    #[test]
    fn reader_processes_need_an_engine_that_has_them() {
        let cfg = |s: &str| Config::parse(&s.split(' ').map(String::from).collect::<Vec<_>>());
        // A peer engine: no reader processes (the default).
        struct Peer;
        impl EngineFactory for Peer {
            fn name(&self) -> &'static str {
                "peer"
            }
            fn describe(&self, _: &str, _: &EngineConfig) -> Vec<(String, String)> {
                vec![]
            }
            fn open(&self, _: &Path, _: &str, _: &EngineConfig) -> Result<Box<dyn Engine>> {
                Err("not in this test".into())
            }
        }
        let larch: &dyn EngineFactory = &crate::larch::LarchFactory;
        let other: &dyn EngineFactory = &Peer;
        let procs = cfg("--readers both --steps pq.n").unwrap();
        assert!(plan_runs(&procs, &[larch]).is_ok());
        let err = plan_runs(&procs, &[larch, other]).err().unwrap();
        assert!(err.contains("engine peer has no reader processes"), "{err}");
        // Without a step that has reader processes, or without the option, nothing to refuse.
        assert!(plan_runs(&cfg("--readers processes --steps pq.1").unwrap(), &[other]).is_ok());
        assert!(plan_runs(&cfg("--steps pq.n").unwrap(), &[other]).is_ok());
    }

    #[test]
    fn each_step_family_runs_in_a_child_of_its_own() {
        let cfg = Config::parse(
            &"--steps rb.insb,pq.1,ib.l.i0,rb.load --rb-load 10 --rb-batches 2 --rb-batch 3 --rb-ins1 1 --rb-insa 1 --rb-sorted 1 --rb-key-size 20 --rb-value-size 40"
                .split(' ')
                .map(String::from)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let larch = &crate::larch::LarchFactory;
        let children = child_configs(&cfg, larch, "first-fit/pwrite");
        let got: Vec<(Family, Vec<&str>)> = children
            .iter()
            .map(|(c, f)| (*f, c.steps.iter().map(|s| s.name()).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Family::ForestDb, vec!["pq.1"]),
                (Family::Ib, vec!["ib.l.i0"]),
                (Family::Rb, vec!["rb.load", "rb.insb"]),
            ]
        );
        // The rb child's engine is told the rb keys (all of them, every rb step counted) and
        // sizes; the others the documents.
        let rb = engine_config(&children[2].0);
        assert_eq!(
            (rb.docs, rb.key_size, rb.value_size),
            (10 + 1 + 6 + 1 + 1, 20, 40)
        );
        let fdb = engine_config(&children[0].0);
        assert_eq!((fdb.docs, fdb.key_size), (cfg.docs, cfg.key_size));
        // The limits run none of redb's shapes.
        let only_rb = Config::parse(&["--steps".into(), "rb.ins1".into()]).unwrap();
        assert!(steps_for(&only_rb, &Limits, limits::FDATASYNC).is_empty());
    }

    #[test]
    fn rounds_alternate_between_the_limits() {
        let cfg = Config::parse(
            &"--rounds 3 --steps ows.1 --larch-setups null/pwrite,first-fit/mmap,best-fit/pwrite"
                .split(' ')
                .map(String::from)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let plan = plan_runs(&cfg, &[&crate::larch::LarchFactory]).unwrap();
        let got: Vec<(Option<usize>, String)> = plan
            .jobs(cfg.rounds)
            .into_iter()
            .map(|(round, (f, setup))| (round, report::label(f.name(), setup)))
            .collect();
        let (a, b, c) = (
            "larch null/pwrite",
            "larch first-fit/mmap",
            "larch best-fit/pwrite",
        );
        let want: Vec<(Option<usize>, String)> = [
            (None, "limit fdatasync-4k"),
            (Some(1), a),
            (Some(1), b),
            (Some(1), c),
            (Some(2), c),
            (Some(2), b),
            (Some(2), a),
            (Some(3), a),
            (Some(3), b),
            (Some(3), c),
            (None, "limit fdatasync-4k-after"),
        ]
        .into_iter()
        .map(|(r, l)| (r, l.to_string()))
        .collect();
        assert_eq!(got, want);
        // One round: the plan as it always ran.
        let once: Vec<Option<usize>> = plan.jobs(1).into_iter().map(|(r, _)| r).collect();
        assert_eq!(once, vec![None, Some(1), Some(1), Some(1), None]);
    }

    #[test]
    fn results_json_config_says_rounds_only_when_there_are_some() {
        let config_json = |extra: &str| {
            let out = tempfile::tempdir().unwrap();
            let args: Vec<String> = format!("--steps load --out {} {extra}", out.path().display())
                .split_whitespace()
                .map(String::from)
                .collect();
            let cfg = Config::parse(&args).unwrap();
            let s = set_up(&cfg, &args, "workload").unwrap();
            let c = run_config(&cfg, &s, Pairs::default(), Instant::now());
            serde_json::to_value(&c).unwrap()
        };
        for one in [config_json(""), config_json("--rounds 1")] {
            assert!(one.get("rounds").is_none(), "{one}");
            assert!(one["method"].get("rounds").is_none(), "{one}");
        }
        let three = config_json("--rounds 3");
        assert_eq!(three["rounds"], 3);
        let method = three["method"]["rounds"].as_str().unwrap();
        assert!(
            method.contains("even rounds reversed") && method.contains("lower median"),
            "{method}"
        );
    }

    #[test]
    fn limits_run_only_their_steps() {
        let cfg = Config::parse(&["--steps".into(), "load,ows.1,pq.n".into()]).unwrap();
        let names = |v: Vec<Step>| v.iter().map(|s| s.name()).collect::<Vec<_>>();
        assert_eq!(
            names(steps_for(&cfg, &Limits, limits::FDATASYNC)),
            vec!["ows.1"]
        );
        assert_eq!(
            names(steps_for(&cfg, &Limits, limits::BTREEMAP)),
            vec!["pq.n"]
        );
        assert_eq!(
            names(steps_for(
                &cfg,
                &crate::larch::LarchFactory,
                "first-fit/pwrite"
            )),
            vec!["load", "ows.1", "pq.n"]
        );
    }
}
