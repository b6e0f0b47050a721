//! Free-space policies against the `null` control, on the real engine (issue 4, "Measured").
//!
//! ```text
//! cargo bench --bench policies -- [--txns N] [--values V] [--keys K] [--value-size B]
//!     [--policies null,first-fit,best-fit,append-run] [--write-modes pwrite,mmap]
//!     [--dir PATH] [--seed S] [--csv PATH] [--idle-secs S] [--rounds R] [--interleave]
//! ```
//!
//! For each policy and write mode: a fresh file, then N write transactions of V random keys
//! each (drawn from a space of K 16-byte keys, so early commits insert and later ones mostly
//! overwrite), B-byte random values, `Durability::Sync`, everything else at its default
//! (threshold compaction off). Every policy replays the same seed, so all of them see the same
//! keys and values; the seed changes between invocations unless `--seed` is given.
//!
//! Policies run one after another (`--rounds R` repeats that, each round starting at the next
//! policy), or with `--interleave` in lockstep, one transaction each in turn, so that other
//! work on a shared machine slows all of them alike.
//!
//! Device bytes come from the block device's sectors-written counter, read just before and
//! after every transaction (each Sync commit's fdatasyncs put its writes on the device before
//! it returns), so they include the filesystem journal and metadata the commit caused. The
//! counter is machine-wide: anything else writing to the same device in those windows is
//! counted too, and the bench measures that background rate while idle before and after.
//! When the counter cannot be read it says so, and `proc KiB/c` (`write_bytes` of
//! /proc/self/io) is the fallback.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use larch::{Db, Durability, IoStats, Options, Policy, Stats, WriteMode};

mod bench_io;
use bench_io::{
    command_lines, kernel, load1, loadavg, parse_names, parse_num, print_table, raw_args, syncfs,
    time_seed, write_csv, Device, Rng, RunDir, Sample,
};

const TREE: &str = "bench";
const KEY_LEN: usize = 16;

// ---- command line ------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Args {
    txns: u64,
    values: u64,
    keys: u64,
    value_size: usize,
    policies: Vec<Policy>,
    write_modes: Vec<WriteMode>,
    dir: Option<PathBuf>,
    seed: u64,
    csv: Option<PathBuf>,
    /// Times to run every policy; round r starts at the r-th policy, so that no policy always
    /// runs first (or last) while the machine's other load changes.
    rounds: usize,
    /// Run all policies in lockstep instead of one after another.
    interleave: bool,
    /// Seconds to watch the device idle before and after the runs (other writers' rate).
    idle_secs: f64,
    /// The arguments as given (without the `--bench` cargo adds), to print the command.
    raw: Vec<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: cargo bench --bench policies -- [--txns N] [--values V] [--keys K] \
         [--value-size B] [--policies {}] [--write-modes {}] [--dir PATH] [--seed S] [--csv PATH] [--idle-secs S] [--rounds R] [--interleave]",
        Policy::ALL.map(|p| p.name()).join(","),
        WriteMode::ALL.map(|m| m.name()).join(","),
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let raw = raw_args();
    let mut a = Args {
        txns: 10_000,
        values: 100,
        keys: 100_000,
        value_size: 256,
        policies: Policy::ALL.to_vec(),
        write_modes: vec![WriteMode::Pwrite],
        dir: None,
        seed: time_seed(),
        csv: None,
        idle_secs: 5.0,
        rounds: 1,
        interleave: false,
        raw: raw.clone(),
    };
    let mut it = raw.into_iter();
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            usage();
        }
        if flag == "--interleave" {
            a.interleave = true;
            continue;
        }
        let v = it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--txns" => a.txns = parse_num(&flag, &v, usage),
            "--values" => a.values = parse_num(&flag, &v, usage),
            "--keys" => a.keys = parse_num(&flag, &v, usage),
            "--value-size" => a.value_size = parse_num(&flag, &v, usage),
            "--seed" => a.seed = parse_num(&flag, &v, usage),
            "--policies" => a.policies = parse_names(&v, Policy::from_name, "name", usage),
            "--write-modes" => a.write_modes = parse_names(&v, WriteMode::from_name, "name", usage),
            "--dir" => a.dir = Some(PathBuf::from(v)),
            "--csv" => a.csv = Some(PathBuf::from(v)),
            "--idle-secs" => a.idle_secs = parse_num(&flag, &v, usage),
            "--rounds" => a.rounds = parse_num(&flag, &v, usage),
            _ => usage(),
        }
    }
    if a.txns == 0 || a.keys == 0 || a.rounds == 0 || a.policies.is_empty() {
        usage();
    }
    a
}

// ---- workload --------------------------------------------------------------------------------

/// Key `i` of the key space, exactly 16 bytes.
fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k.copy_from_slice(format!("{i:016}").as_bytes());
    k
}

/// One write transaction of `values` random puts; returns how long its commit took.
fn one_txn(db: &Db, a: &Args, rng: &mut Rng, value: &mut [u8]) -> larch::Result<Duration> {
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_tree(TREE)?;
        for _ in 0..a.values {
            let k = key(rng.below(a.keys));
            rng.fill(value);
            t.insert(&k, value)?;
        }
    }
    let t0 = Instant::now();
    tx.commit()?;
    Ok(t0.elapsed())
}

// ---- runs ------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Row {
    policy: Policy,
    mode: WriteMode,
    round: usize,
    /// Time spent inside this run's transactions.
    secs: f64,
    commits: u64,
    values: u64,
    io: IoStats,
    dev: Sample,
    stats: Stats,
    p50: Duration,
    p99: Duration,
    /// 1-minute load average at the end of the run: other work competing for the CPUs.
    load: String,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1]
}

/// One policy in one write mode: its fresh database and what it has cost so far.
struct Runner {
    policy: Policy,
    mode: WriteMode,
    round: usize,
    path: PathBuf,
    db: Db,
    rng: Rng,
    value: Vec<u8>,
    io0: IoStats,
    busy: Duration,
    dev: Sample,
    lat: Vec<Duration>,
}

impl Runner {
    fn open(
        a: &Args,
        (policy, mode, round): (Policy, WriteMode, usize),
        dir: &Path,
        device: &Device,
    ) -> Runner {
        let path = dir.join(format!("{}-{}.larch", policy.name(), mode.name()));
        let opts = Options::default()
            .durability(Durability::Sync)
            .policy(policy)
            .write_mode(mode);
        let db = Db::open(&path, opts).expect("open");
        Runner {
            policy,
            mode,
            round,
            path,
            io0: db.io_stats(),
            db,
            // The same seed for every policy: each replays exactly the same keys and values.
            rng: Rng(a.seed),
            value: vec![0u8; a.value_size],
            busy: Duration::ZERO,
            dev: device.sample().zeroed(),
            lat: Vec::with_capacity(a.txns as usize),
        }
    }

    /// One transaction, with the device counters read just around it: a Sync commit's
    /// fdatasyncs put its writes on the device before it returns, so the difference is this
    /// transaction's (plus whatever else the machine wrote in those milliseconds), even when
    /// several runners take turns.
    fn step(&mut self, a: &Args, device: &Device) {
        let before = device.sample();
        let t0 = Instant::now();
        let commit = one_txn(&self.db, a, &mut self.rng, &mut self.value).expect("transaction");
        self.busy += t0.elapsed();
        let d = device.sample().minus(before);
        self.dev = self.dev.plus(d);
        self.lat.push(commit);
    }

    /// Stats of the final state; then close and delete the file (a null-policy file is GBs).
    fn finish(mut self, a: &Args) -> Row {
        let io = self.db.io_stats().since(&self.io0);
        let stats = self.db.stats().expect("stats");
        drop(self.db);
        let _ = std::fs::remove_file(&self.path);
        self.lat.sort_unstable();
        Row {
            policy: self.policy,
            mode: self.mode,
            round: self.round,
            secs: self.busy.as_secs_f64(),
            commits: io.commits,
            values: a.txns * a.values,
            io,
            dev: self.dev,
            stats,
            p50: percentile(&self.lat, 0.50),
            p99: percentile(&self.lat, 0.99),
            load: load1(),
        }
    }
}

/// The policies of one round, starting at the `round`-th so none is always first.
fn round_order(a: &Args, round: usize) -> Vec<Policy> {
    let n = a.policies.len();
    a.policies
        .iter()
        .cycle()
        .skip(round % n)
        .take(n)
        .copied()
        .collect()
}

/// One policy after another, each on its own fresh file.
fn run_sequential(
    a: &Args,
    mode: WriteMode,
    round: usize,
    dir: &Path,
    device: &Device,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for policy in round_order(a, round) {
        eprintln!(
            "round {}/{}: {} / {} ...",
            round + 1,
            a.rounds,
            policy.name(),
            mode.name()
        );
        // Flush what is dirty now, so its writeback does not land in this run's windows.
        syncfs(dir);
        let mut r = Runner::open(a, (policy, mode, round), dir, device);
        for _ in 0..a.txns {
            r.step(a, device);
        }
        eprintln!("  {:.1} s", r.busy.as_secs_f64());
        rows.push(r.finish(a));
    }
    rows
}

/// All policies in lockstep, one transaction each in turn (the order rotating every
/// transaction): whatever else the machine does meanwhile slows every policy alike.
fn run_interleaved(
    a: &Args,
    mode: WriteMode,
    round: usize,
    dir: &Path,
    device: &Device,
) -> Vec<Row> {
    eprintln!(
        "round {}/{}: all policies interleaved / {} ...",
        round + 1,
        a.rounds,
        mode.name()
    );
    syncfs(dir);
    let mut runners: Vec<Runner> = round_order(a, round)
        .into_iter()
        .map(|p| Runner::open(a, (p, mode, round), dir, device))
        .collect();
    let n = runners.len();
    for i in 0..a.txns as usize {
        for k in 0..n {
            runners[(i + k) % n].step(a, device);
        }
    }
    runners.into_iter().map(|r| r.finish(a)).collect()
}

// ---- output ----------------------------------------------------------------------------------

const HEADER: [&str; 19] = [
    "policy",
    "mode",
    "round",
    "ops/s",
    "commits/s",
    "p50 ms",
    "p99 ms",
    "dev KiB/c",
    "dev IOs/c",
    "proc KiB/c",
    "writes/c",
    "runs/c",
    "wr KiB/c",
    "syncs/c",
    "file MiB",
    "hwm pg",
    "live pg",
    "dead %",
    "load",
];

const LEGEND: &str = "/c = per commit. dev KiB/c, dev IOs/c: the block device's sectors-written \
and write-requests counters (machine-wide: include the filesystem journal, and anything else \
writing to the device). proc KiB/c: write_bytes of /proc/self/io (this process only; no \
journal; counts whole folios dirtied, so it overcounts scattered 4 KiB writes on large-folio \
kernels). writes/c: write calls (Db::io_stats), one per contiguous run of pages, meta included. \
runs/c: writes/c minus the one meta write of each sync commit = separate runs of data pages \
(seeks). wr KiB/c: bytes handed to write. file MiB, hwm pg, live pg, dead %: Db::stats after \
the last commit. load: 1-min load average at the end of the run. ops/s and commits/s: per \
second spent inside this policy's transactions. p50/p99: latency of commit() alone.";

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// `n` per commit of `r`, divided by `div`; "-" when the counter was unreadable.
fn per_commit(r: &Row, n: Option<u64>, div: f64) -> String {
    n.map_or("-".into(), |n| {
        format!("{:.1}", n as f64 / div / r.commits.max(1) as f64)
    })
}

/// One table row per run; the text table and the CSV share it.
fn cells(r: &Row) -> Vec<String> {
    vec![
        r.policy.name().to_string(),
        r.mode.name().to_string(),
        (r.round + 1).to_string(),
        format!("{:.0}", r.values as f64 / r.secs),
        format!("{:.1}", r.commits as f64 / r.secs),
        ms(r.p50),
        ms(r.p99),
        per_commit(r, r.dev.dev_bytes, 1024.0),
        per_commit(r, r.dev.dev_ios, 1.0),
        per_commit(r, r.dev.proc_bytes, 1024.0),
        per_commit(r, Some(r.io.write_calls), 1.0),
        // Every Sync commit writes exactly one meta page, as a write call of its own.
        per_commit(r, Some(r.io.write_calls.saturating_sub(r.commits)), 1.0),
        per_commit(r, Some(r.io.bytes_written), 1024.0),
        per_commit(r, Some(r.io.syncs), 1.0),
        format!("{:.1}", r.stats.file_bytes as f64 / (1u64 << 20) as f64),
        r.stats.high_water.to_string(),
        r.stats.live_pages.to_string(),
        format!("{:.1}", r.stats.dead_ratio * 100.0),
        r.load.clone(),
    ]
}

const SUMMARY_HEADER: [&str; 9] = [
    "policy",
    "mode",
    "rounds",
    "ops/s med",
    "ops/s min..max",
    "p50 ms med",
    "p99 ms med",
    "dev KiB/c med",
    "dev IOs/c med",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Medians over rounds, one row per policy and mode. Only the timings and the machine-wide
/// device counters vary between rounds; the engine's own counts are deterministic per seed.
fn summary(rows: &[Row]) -> Vec<Vec<String>> {
    let mut keys: Vec<(Policy, WriteMode)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.policy, r.mode)) {
            keys.push((r.policy, r.mode));
        }
    }
    keys.into_iter()
        .map(|(policy, mode)| {
            let runs: Vec<&Row> = rows
                .iter()
                .filter(|r| (r.policy, r.mode) == (policy, mode))
                .collect();
            let col = |f: &dyn Fn(&Row) -> f64| runs.iter().map(|r| f(r)).collect::<Vec<_>>();
            let ops = col(&|r| r.values as f64 / r.secs);
            let dev = |n: &dyn Fn(&Row) -> Option<u64>, div: f64| {
                if runs.iter().any(|r| n(r).is_none()) {
                    return "-".to_string();
                }
                let v = col(&|r| n(r).unwrap_or(0) as f64 / div / r.commits.max(1) as f64);
                format!("{:.1}", median(v))
            };
            vec![
                policy.name().to_string(),
                mode.name().to_string(),
                runs.len().to_string(),
                format!("{:.0}", median(ops.clone())),
                format!(
                    "{:.0}..{:.0}",
                    ops.iter().copied().fold(f64::INFINITY, f64::min),
                    ops.iter().copied().fold(0.0, f64::max)
                ),
                format!("{:.2}", median(col(&|r| r.p50.as_secs_f64() * 1e3))),
                format!("{:.2}", median(col(&|r| r.p99.as_secs_f64() * 1e3))),
                dev(&|r| r.dev.dev_bytes, 1024.0),
                dev(&|r| r.dev.dev_ios, 1.0),
            ]
        })
        .collect()
}

fn main() {
    let a = parse_args();
    let run_dir = RunDir::create(a.dir.clone(), "policies");
    let (tmp, fs, device) = (run_dir.path(), &run_dir.fs, &run_dir.device);
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());

    let (exact, replay) = command_lines("policies", &a.raw, a.seed);
    let mut about = vec![("command", exact)];
    about.extend(replay.map(|r| ("replay with", r)));
    about.extend([
        (
            "machine",
            format!(
                "nproc={nproc}; {}; load {}",
                kernel().unwrap_or_else(|| "unknown".into()),
                loadavg()
            ),
        ),
        ("device", device.describe()),
        ("dir", format!("{} ({fs})", tmp.display())),
        (
            "workload",
            format!(
                "{} txns x {} random puts, {} keys of {KEY_LEN} B, {} B values, Durability::Sync, \
                 page 4096, seed {}",
                a.txns, a.values, a.keys, a.value_size, a.seed
            ),
        ),
    ]);
    for (k, v) in &about {
        println!("{k}: {v}");
    }
    let (bg, _) = device.background(a.idle_secs);
    println!("{} background before: {bg}", device.name());
    about.push(("background before", bg));

    let mut runs = Vec::new();
    for &mode in &a.write_modes {
        for round in 0..a.rounds {
            runs.extend(if a.interleave {
                run_interleaved(&a, mode, round, tmp, device)
            } else {
                run_sequential(&a, mode, round, tmp, device)
            });
        }
    }
    let (bg, _) = device.background(a.idle_secs);
    println!("{} background after: {bg}", device.name());
    about.push(("background after", bg));

    let rows: Vec<Vec<String>> = runs.iter().map(cells).collect();
    println!();
    print_table(&HEADER, &rows);
    if a.rounds > 1 {
        println!("\nmedians over {} rounds:", a.rounds);
        print_table(&SUMMARY_HEADER, &summary(&runs));
    }
    println!("\n{LEGEND}");
    let csv = a
        .csv
        .clone()
        .unwrap_or_else(|| run_dir.target.join("policies").join("latest.csv"));
    write_csv(&csv, &HEADER, &rows, &about);
}
