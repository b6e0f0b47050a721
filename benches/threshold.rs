//! Threshold compaction sweep (issue 4, "Measured"): space amplification against write
//! amplification under steady overwrites, for each free-space policy and threshold.
//!
//! ```text
//! cargo bench --bench threshold -- [--keys N] [--value-size B] [--commits C] [--per-commit K]
//!     [--thresholds 0.1,0.25,0.5,off] [--policies first-fit,null] [--sync-every S]
//!     [--dir PATH] [--seed S] [--csv PATH] [--trace PATH] [--idle-secs S]
//! ```
//!
//! For each policy and threshold, on a fresh file (a directory of its own, on a real
//! filesystem: the bench warns when the directory is on tmpfs):
//!
//! 1. load: N keys (16 bytes, a bijective hash of a counter, so not in key order) with B-byte
//!    random values, in `Durability::Async` batches of 1,000, then `db.sync()`; then wait for any
//!    compaction the load started. Not measured beyond its time.
//! 2. overwrite (measured): C commits of K random overwrites of existing keys each,
//!    `Durability::Async`, with a `db.sync()` after every S-th commit (default 100): the steady
//!    async overwrites of the `owa` step. After the last commit: wait for a running compaction,
//!    sync, flush the filesystem.
//!
//! Every run has `compaction_threshold(t)` (or `None` for `off`) and `compaction_min_bytes(1 MiB)`,
//! page size 4096, everything else default. Every run replays the same seed.
//!
//! Space amplification = file bytes / logical bytes (N x (16 + B)), where file bytes is the
//! database file's length (the pager grows it with posix_fallocate, so length ~ allocation):
//! at the end (after the wait), at its peak (sampled after every commit) and time-weighted over
//! the overwrite phase. `disk peak` also counts the compaction's temporary file beside it.
//!
//! Write amplification = bytes written during the overwrite phase / logical bytes overwritten
//! (C x K x (16 + B)), counted three ways: the block device's sectors-written counter (machine
//! wide: includes the filesystem journal and any other process writing to that device), the
//! process's `write_bytes` of /proc/self/io (this process only, compaction thread included;
//! counts page-cache pages dirtied, so no journal), and the engine's own `Db::io_stats`
//! bytes handed to write (see `EngineBytes` for how compactions are counted).
//!
//! The command-line plumbing, the random number generator, the run directory, the device
//! counters and the table and CSV writers are shared with benches/policies.rs, in
//! benches/bench_io.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use larch::{Db, Durability, IoStats, Options, Policy, Stats};

mod bench_io;
use bench_io::{
    command_lines, kernel, load1, loadavg, mix, parse_names, parse_num, print_table, raw_args,
    syncfs, time_seed, write_csv, Device, Rng, RunDir, Sample,
};

const TREE: &str = "bench";
const KEY_LEN: usize = 16;
const LOAD_BATCH: u64 = 1000;
const MIN_BYTES: u64 = 1 << 20;
const STATS_EVERY: u64 = 100;

// ---- command line ------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Args {
    keys: u64,
    value_size: usize,
    commits: u64,
    per_commit: u64,
    /// `None` = off.
    thresholds: Vec<Option<f64>>,
    policies: Vec<Policy>,
    sync_every: u64,
    dir: Option<PathBuf>,
    seed: u64,
    csv: Option<PathBuf>,
    /// Per-commit samples of every run, as CSV.
    trace: Option<PathBuf>,
    idle_secs: f64,
    /// The arguments as given (without the `--bench` cargo adds), to print the command.
    raw: Vec<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: cargo bench --bench threshold -- [--keys N] [--value-size B] [--commits C] \
         [--per-commit K] [--thresholds 0.1,0.25,0.5,off] [--policies {}] [--sync-every S] \
         [--dir PATH] [--seed S] [--csv PATH] [--trace PATH] [--idle-secs S]",
        Policy::ALL.map(|p| p.name()).join(","),
    );
    std::process::exit(2)
}

fn parse_threshold(s: &str) -> Option<f64> {
    let s = s.trim();
    if s == "off" || s == "none" {
        return None;
    }
    let t: f64 = parse_num("--thresholds", s.trim_end_matches('%'), usage);
    let t = if s.ends_with('%') { t / 100.0 } else { t };
    if !(t > 0.0 && t < 1.0) {
        eprintln!("a threshold is a fraction in (0, 1) or `off`, got {s:?}");
        usage()
    }
    Some(t)
}

fn parse_args() -> Args {
    let raw = raw_args();
    let mut a = Args {
        keys: 100_000,
        value_size: 256,
        commits: 5_000,
        per_commit: 100,
        thresholds: vec![Some(0.10), Some(0.25), Some(0.50), None],
        policies: vec![Policy::FirstFit, Policy::Null],
        sync_every: 100,
        dir: None,
        seed: time_seed(),
        csv: None,
        trace: None,
        idle_secs: 3.0,
        raw: raw.clone(),
    };
    let mut it = raw.into_iter();
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            usage();
        }
        let v = it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--keys" => a.keys = parse_num(&flag, &v, usage),
            "--value-size" => a.value_size = parse_num(&flag, &v, usage),
            "--commits" => a.commits = parse_num(&flag, &v, usage),
            "--per-commit" => a.per_commit = parse_num(&flag, &v, usage),
            "--sync-every" => a.sync_every = parse_num(&flag, &v, usage),
            "--seed" => a.seed = parse_num(&flag, &v, usage),
            "--thresholds" => a.thresholds = v.split(',').map(parse_threshold).collect(),
            "--policies" => a.policies = parse_names(&v, Policy::from_name, "policy", usage),
            "--dir" => a.dir = Some(PathBuf::from(v)),
            "--csv" => a.csv = Some(PathBuf::from(v)),
            "--trace" => a.trace = Some(PathBuf::from(v)),
            "--idle-secs" => a.idle_secs = parse_num(&flag, &v, usage),
            _ => usage(),
        }
    }
    if a.keys == 0
        || a.commits == 0
        || a.per_commit == 0
        || a.sync_every == 0
        || a.policies.is_empty()
        || a.thresholds.is_empty()
    {
        usage();
    }
    a
}

fn threshold_name(t: Option<f64>) -> String {
    t.map_or("off".into(), |t| format!("{:.0}%", t * 100.0))
}

// ---- workload --------------------------------------------------------------------------------

/// Key `i`: a hash of the counter as 16 hex digits, so distinct keys and no key order.
fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k.copy_from_slice(format!("{:016x}", mix(i.wrapping_add(0x5eed))).as_bytes());
    k
}

// ---- the machine -------------------------------------------------------------------------

fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let kb: u64 = s
                .lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB RAM", kb as f64 / (1 << 20) as f64))
        })
        .unwrap_or_else(|| "? RAM".into());
    let kernel = kernel().unwrap_or_else(|| "unknown kernel".into());
    format!("{nproc} x {cpu}; {mem}; {kernel}; load {}", loadavg())
}

// ---- sampling during a run ---------------------------------------------------------------

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Bytes of every file in `dir` (each inode once): the database plus a compaction's temporary
/// copy while one runs. (A replaced file still open by a reader is no longer in the directory
/// and is not counted.)
fn dir_len(dir: &Path) -> u64 {
    let mut seen = Vec::new();
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(m) = e.metadata() {
                if m.is_file() && !seen.contains(&m.ino()) {
                    seen.push(m.ino());
                    total += m.len();
                }
            }
        }
    }
    total
}

/// The engine's bytes handed to write, over a run in which compactions replace the file.
///
/// `Db::io_stats` reads the counters of the handle's *current* file; a compaction switches
/// the handle to a new file whose counters start over (they then hold the catch-up commits
/// applied to it). A switch shows as the commit count (the new file starts at txid 1) or the
/// byte count going down, or as `Db::compactions` going up. At a switch this adds the new
/// file's counter, plus the copy itself, which `copy_snapshot` writes through a pager of its own
/// that no counter reports: estimated as the new file's high-water mark at the first sample
/// after the switch (an upper bound: catch-up commits add to it). The old file's writes between
/// the last sample and the switch (at most one commit) are lost.
struct EngineBytes {
    prev: IoStats,
    total: u64,
    /// Estimated bytes written by compaction copies (already in `total`).
    copies: u64,
    /// File switches seen, load included.
    switches: u64,
}

impl EngineBytes {
    fn new(db: &Db) -> EngineBytes {
        EngineBytes {
            prev: db.io_stats(),
            total: 0,
            copies: 0,
            switches: db.compactions(),
        }
    }

    fn sample(&mut self, db: &Db) {
        // Count first: a compaction switches the file before it counts itself, so a count
        // read before the counters never runs ahead of them.
        let done = db.compactions();
        let io = db.io_stats();
        let switched = io.commits < self.prev.commits
            || io.bytes_written < self.prev.bytes_written
            || done > self.switches;
        if switched {
            // Count each switch once, whichever sign shows it first.
            self.switches = (self.switches + 1).max(done);
            let s = db.stats().expect("stats");
            let copy = s.high_water * s.page_size as u64;
            self.total += io.bytes_written + copy;
            self.copies += copy;
        } else {
            self.total += io.bytes_written - self.prev.bytes_written;
        }
        self.prev = io;
    }
}

// ---- one run -----------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Row {
    policy: Policy,
    threshold: Option<f64>,
    load_secs: f64,
    load_compactions: u64,
    /// Time inside the overwrite phase's transactions and syncs.
    secs: f64,
    /// Wall time of the overwrite phase, sampling included.
    wall_secs: f64,
    settle_secs: f64,
    logical: u64,
    /// Overwrite operations (commits x per commit).
    ops: u64,
    overwritten: u64,
    end_bytes: u64,
    peak_bytes: u64,
    avg_bytes: f64,
    disk_peak_bytes: u64,
    /// Largest file length / live bytes, live from the latest `Db::stats` (every 100 commits).
    peak_file_over_live: f64,
    /// Largest dead ratio seen at every 100th commit.
    max_dead: f64,
    /// Largest high-water mark / live pages seen at every 100th commit (what the threshold bounds).
    max_hw_over_live: f64,
    dev: Sample,
    engine: u64,
    engine_copies: u64,
    /// File switches the engine-bytes sampling saw (should equal compactions).
    engine_switches: u64,
    compactions: u64,
    compaction_error: Option<String>,
    stats: Stats,
    load: String,
}

fn run(a: &Args, policy: Policy, threshold: Option<f64>, parent: &Path, device: &Device) -> Row {
    let dir = parent.join(format!(
        "{}-{}",
        policy.name(),
        threshold_name(threshold).trim_end_matches('%')
    ));
    std::fs::create_dir_all(&dir).expect("create run dir");
    let path = dir.join("db.larch");
    let opts = Options::default()
        .policy(policy)
        .durability(Durability::Async)
        .compaction_threshold(threshold)
        .compaction_min_bytes(MIN_BYTES);
    let db = Db::open(&path, opts).expect("open");
    let mut rng = Rng(a.seed);
    let mut value = vec![0u8; a.value_size];
    let page = db.page_size() as u64;

    // Load.
    let t0 = Instant::now();
    let mut i = 0;
    while i < a.keys {
        let end = (i + LOAD_BATCH).min(a.keys);
        let tx = db.begin_write().expect("begin");
        {
            let mut t = tx.open_tree(TREE).expect("tree");
            for k in i..end {
                rng.fill(&mut value);
                t.insert(&key(k), &value).expect("insert");
            }
        }
        tx.commit().expect("commit");
        i = end;
    }
    db.sync().expect("sync");
    let load_secs = t0.elapsed().as_secs_f64();
    if let Err(e) = db.wait_for_compaction() {
        eprintln!("  compaction during load failed: {e}");
    }
    let load_compactions = db.compactions();
    let logical = a.keys * (KEY_LEN + a.value_size) as u64;
    let mut live = db.stats().expect("stats").live_pages * page;

    // Overwrite.
    syncfs(&dir);
    let dev0 = device.sample();
    let mut engine = EngineBytes::new(&db);
    let mut busy = Duration::ZERO;
    let start = Instant::now();
    let mut last_t = start;
    let mut last_len = file_len(&path);
    let mut area = 0.0f64;
    let mut peak = last_len;
    let mut disk_peak = dir_len(&dir);
    let mut peak_over_live = last_len as f64 / live as f64;
    let mut max_dead = 0.0f64;
    let mut max_hw = 0.0f64;
    let mut trace = a.trace.as_ref().map(|_| String::new());
    for c in 0..a.commits {
        let t0 = Instant::now();
        let tx = db.begin_write().expect("begin");
        {
            let mut t = tx.open_tree(TREE).expect("tree");
            for _ in 0..a.per_commit {
                let k = key(rng.below(a.keys));
                rng.fill(&mut value);
                t.insert(&k, &value).expect("overwrite");
            }
        }
        tx.commit().expect("commit");
        let synced = (c + 1) % a.sync_every == 0 || c + 1 == a.commits;
        if synced {
            db.sync().expect("sync");
        }
        busy += t0.elapsed();

        // Samples, outside the timed part.
        let len = file_len(&path);
        let now = Instant::now();
        area += last_len as f64 * (now - last_t).as_secs_f64();
        last_t = now;
        last_len = len;
        peak = peak.max(len);
        disk_peak = disk_peak.max(dir_len(&dir));
        engine.sample(&db);
        // Db::stats walks the tree: every 100 commits, so it does not slow the writer much.
        if (c + 1) % STATS_EVERY == 0 || c + 1 == a.commits {
            let s = db.stats().expect("stats");
            live = s.live_pages * page;
            max_dead = max_dead.max(s.dead_ratio);
            max_hw = max_hw.max(s.high_water as f64 / s.live_pages.max(1) as f64);
        }
        peak_over_live = peak_over_live.max(len as f64 / live as f64);
        if let Some(out) = trace.as_mut() {
            use std::fmt::Write;
            let _ = writeln!(
                out,
                "{},{},{},{:.4},{},{},{},{}",
                policy.name(),
                threshold_name(threshold),
                c + 1,
                (now - start).as_secs_f64(),
                len,
                dir_len(&dir),
                live,
                db.compactions() - load_compactions
            );
        }
    }
    let wall = start.elapsed();

    // Settle: let a running compaction finish, make everything durable, flush the filesystem.
    let t1 = Instant::now();
    let compaction_error = db.wait_for_compaction().err().map(|e| e.to_string());
    db.sync().expect("sync");
    let settle_secs = t1.elapsed().as_secs_f64();
    let end_len = file_len(&path);
    engine.sample(&db);
    syncfs(&dir);
    let dev = device.sample().minus(dev0);
    let stats = db.stats().expect("stats");
    let compactions = db.compactions() - load_compactions;
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    if let (Some(path), Some(out)) = (&a.trace, trace) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .expect("open trace");
        f.write_all(out.as_bytes()).expect("write trace");
    }

    Row {
        policy,
        threshold,
        load_secs,
        load_compactions,
        secs: busy.as_secs_f64(),
        wall_secs: wall.as_secs_f64(),
        settle_secs,
        logical,
        ops: a.commits * a.per_commit,
        overwritten: a.commits * a.per_commit * (KEY_LEN + a.value_size) as u64,
        end_bytes: end_len,
        peak_bytes: peak,
        avg_bytes: area / wall.as_secs_f64(),
        disk_peak_bytes: disk_peak,
        peak_file_over_live: peak_over_live,
        max_dead,
        max_hw_over_live: max_hw,
        dev,
        engine: engine.total,
        engine_copies: engine.copies,
        engine_switches: engine.switches - load_compactions,
        compactions,
        compaction_error,
        stats,
        load: load1(),
    }
}

// ---- output ----------------------------------------------------------------------------------

const HEADER: [&str; 19] = [
    "policy",
    "threshold",
    "ops/s",
    "amp end",
    "amp avg",
    "amp peak",
    "disk peak",
    "live amp",
    "f/l peak",
    "hw/l max",
    "1/(1-t)",
    "dead% end",
    "dead% max",
    "wamp dev",
    "wamp proc",
    "wamp eng",
    "copy share",
    "compactions",
    "load",
];

const LEGEND: &str = "ops/s: overwrites per second inside the overwrite phase's transactions and \
syncs. amp end/avg/peak: file length / logical key+value bytes, after the run settled (wait for \
compaction, sync) / time-weighted over the overwrite phase / largest after any commit. disk \
peak: the same for every file in the run's directory (the compaction's temporary copy \
included). live amp: live pages x page size / logical bytes at the end (the floor: B+tree \
fill). f/l peak: largest file length / live bytes (live from Db::stats every 100 commits), to set \
against 1/(1-t), the bound a threshold t promises. hw/l max: largest high-water mark / live \
pages at any 100th commit (the quantity the threshold bounds; the file runs up to 1/8 past the mark, as \
the pager grows it in chunks). dead% end/max: Db::stats dead_ratio at the \
end / largest at any 100th commit. wamp: bytes written during the overwrite phase (compactions and the \
final settle included) / logical bytes overwritten; dev = the block device's sectors-written \
counter (machine-wide: filesystem journal and other processes included), proc = write_bytes of \
/proc/self/io (this process, page-cache pages dirtied), eng = Db::io_stats bytes_written summed \
over the files the handle used, plus compaction copies estimated as the new file's high-water mark. copy \
share: that copy estimate / eng. compactions: background compactions completed during the \
overwrite phase. load: 1-min load average at the end of the run.";

fn ratio(n: f64, d: u64) -> String {
    format!("{:.2}", n / d as f64)
}

fn cells(r: &Row) -> Vec<String> {
    let page = r.stats.page_size as u64;
    let opt = |n: Option<u64>| n.map_or("-".into(), |n| ratio(n as f64, r.overwritten));
    vec![
        r.policy.name().to_string(),
        threshold_name(r.threshold),
        format!("{:.0}", r.ops as f64 / r.secs),
        ratio(r.end_bytes as f64, r.logical),
        ratio(r.avg_bytes, r.logical),
        ratio(r.peak_bytes as f64, r.logical),
        ratio(r.disk_peak_bytes as f64, r.logical),
        ratio((r.stats.live_pages * page) as f64, r.logical),
        format!("{:.2}", r.peak_file_over_live),
        format!("{:.2}", r.max_hw_over_live),
        r.threshold
            .map_or("-".into(), |t| format!("{:.2}", 1.0 / (1.0 - t))),
        format!("{:.1}", r.stats.dead_ratio * 100.0),
        format!("{:.1}", r.max_dead * 100.0),
        opt(r.dev.dev_bytes),
        opt(r.dev.proc_bytes),
        ratio(r.engine as f64, r.overwritten),
        format!("{:.2}", r.engine_copies as f64 / r.engine.max(1) as f64),
        r.compactions.to_string(),
        r.load.clone(),
    ]
}

/// Extra columns for the CSV only.
const CSV_EXTRA: [&str; 17] = [
    "load_secs",
    "load_compactions",
    "overwrite_secs",
    "overwrite_wall_secs",
    "settle_secs",
    "logical_bytes",
    "overwritten_bytes",
    "end_bytes",
    "peak_bytes",
    "avg_bytes",
    "disk_peak_bytes",
    "live_pages",
    "dev_bytes",
    "proc_bytes",
    "engine_bytes",
    "engine_copy_bytes",
    "engine_switches_seen",
];

fn csv_extra(r: &Row) -> Vec<String> {
    let o = |n: Option<u64>| n.map_or(String::new(), |n| n.to_string());
    vec![
        format!("{:.3}", r.load_secs),
        r.load_compactions.to_string(),
        format!("{:.3}", r.secs),
        format!("{:.3}", r.wall_secs),
        format!("{:.3}", r.settle_secs),
        r.logical.to_string(),
        r.overwritten.to_string(),
        r.end_bytes.to_string(),
        r.peak_bytes.to_string(),
        format!("{:.0}", r.avg_bytes),
        r.disk_peak_bytes.to_string(),
        r.stats.live_pages.to_string(),
        o(r.dev.dev_bytes),
        o(r.dev.proc_bytes),
        r.engine.to_string(),
        r.engine_copies.to_string(),
        r.engine_switches.to_string(),
    ]
}

/// The CSV: the table's columns, then the raw numbers.
fn write_runs_csv(path: &Path, runs: &[Row], about: &[(&str, String)]) {
    let header: Vec<&str> = HEADER.iter().chain(CSV_EXTRA.iter()).copied().collect();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let mut c = cells(r);
            c.extend(csv_extra(r));
            c
        })
        .collect();
    write_csv(path, &header, &rows, about);
}

fn main() {
    let a = parse_args();
    let run_dir = RunDir::create(a.dir.clone(), "threshold");
    let (tmp, fs, device) = (run_dir.path(), &run_dir.fs, &run_dir.device);

    let (exact, replay) = command_lines("threshold", &a.raw, a.seed);
    let mut about = vec![("command", exact)];
    about.extend(replay.map(|r| ("replay with", r)));
    about.extend([
        ("machine", machine()),
        ("device", device.describe()),
        ("dir", format!("{} ({fs})", tmp.display())),
        (
            "workload",
            format!(
                "load {} keys of {KEY_LEN} B + {} B random values (Async batches of {LOAD_BATCH}, \
                 sync); then {} commits x {} random overwrites, Durability::Async, db.sync() every \
                 {} commits; compaction_min_bytes {MIN_BYTES}; page 4096; seed {}",
                a.keys, a.value_size, a.commits, a.per_commit, a.sync_every, a.seed
            ),
        ),
    ]);
    for (k, v) in &about {
        println!("{k}: {v}");
    }
    let (bg, bg_before) = device.background(a.idle_secs);
    println!("device background before: {bg}");
    about.push(("device background before", bg));

    if let Some(path) = &a.trace {
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(
            path,
            "policy,threshold,commit,secs,file_bytes,dir_bytes,live_bytes,compactions\n",
        )
        .expect("create trace");
    }
    let mut runs = Vec::new();
    for &policy in &a.policies {
        for &t in &a.thresholds {
            eprintln!("{} / {} ...", policy.name(), threshold_name(t));
            let r = run(&a, policy, t, tmp, device);
            eprintln!(
                "  load {:.1} s, overwrite {:.1} s ({:.1} s wall), settle {:.1} s, {} compactions",
                r.load_secs, r.secs, r.wall_secs, r.settle_secs, r.compactions
            );
            if let Some(e) = &r.compaction_error {
                eprintln!("  last compaction failed: {e}");
            }
            runs.push(r);
        }
    }
    let (bg, bg_after) = device.background(a.idle_secs);
    println!("device background after: {bg}");
    about.push(("device background after", bg));
    if let (Some(b), Some(f)) = (bg_before, bg_after) {
        // What the other writers alone would add to one run's dev column, at the idle rate.
        let per_run: Vec<String> = runs
            .iter()
            .map(|r| {
                format!(
                    "{}/{} {:.2}",
                    r.policy.name(),
                    threshold_name(r.threshold),
                    (b + f) / 2.0 * (r.wall_secs + r.settle_secs) / r.overwritten as f64
                )
            })
            .collect();
        let s = per_run.join(", ");
        println!("idle-rate share of wamp dev: {s}");
        about.push(("idle-rate share of wamp dev", s));
    }
    for r in &runs {
        if let Some(e) = &r.compaction_error {
            about.push((
                "compaction error",
                format!("{}/{}: {e}", r.policy.name(), threshold_name(r.threshold)),
            ));
        }
    }

    let rows: Vec<Vec<String>> = runs.iter().map(cells).collect();
    println!();
    print_table(&HEADER, &rows);
    println!("\n{LEGEND}");
    let csv = a
        .csv
        .clone()
        .unwrap_or_else(|| run_dir.target.join("threshold").join("latest.csv"));
    write_runs_csv(&csv, &runs, &about);
}
