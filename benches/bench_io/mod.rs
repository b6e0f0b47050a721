//! What the root benchmarks (policies, threshold) share: the command line's plumbing, the
//! random number generator, the run directory, the block device's write counters,
//! /proc/self/io, the filesystem under a directory, the target directory, the table printer and
//! the CSV writer. Each benchmark uses a different part, hence the dead-code allowance.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const SECTOR: u64 = 512;

// ---- command line ------------------------------------------------------------------------

/// The arguments as given, without the `--bench` that cargo bench passes to harness = false
/// targets (it means nothing here).
pub fn raw_args() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect()
}

/// A fresh seed per run, for when none is given (BENCHMARK.md); the benches print it either way.
pub fn time_seed() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// `v` as a number, or the bench's usage (and exit 2) naming `flag`.
pub fn parse_num<T: std::str::FromStr>(flag: &str, v: &str, usage: fn() -> !) -> T {
    v.parse().unwrap_or_else(|_| {
        eprintln!("{flag} wants a number, got {v:?}");
        usage()
    })
}

/// A comma-separated list of names, or the bench's usage (and exit 2) after
/// "unknown {what} ...".
pub fn parse_names<T>(
    s: &str,
    from_name: impl Fn(&str) -> Option<T>,
    what: &str,
    usage: fn() -> !,
) -> Vec<T> {
    s.split(',')
        .map(|n| {
            from_name(n.trim()).unwrap_or_else(|| {
                eprintln!("unknown {what} {n:?}");
                usage()
            })
        })
        .collect()
}

/// The command as given (`raw`, from `raw_args`), and (when no seed was given) the one that
/// replays this run with `seed`.
pub fn command_lines(bench: &str, raw: &[String], seed: u64) -> (String, Option<String>) {
    let env = std::env::var("CARGO_TARGET_DIR")
        .map_or(String::new(), |d| format!("CARGO_TARGET_DIR={d} "));
    let cmd = |args: &[String]| {
        let sep = if args.is_empty() { "" } else { " -- " };
        format!("{env}cargo bench --bench {bench}{sep}{}", args.join(" "))
    };
    let exact = cmd(raw);
    if raw.iter().any(|x| x == "--seed") {
        return (exact, None);
    }
    let mut args = raw.to_vec();
    args.extend(["--seed".into(), seed.to_string()]);
    (exact, Some(cmd(&args)))
}

// ---- workload ----------------------------------------------------------------------------

/// splitmix64: deterministic per seed, and no dependency. (Not harness-core's `keys::Rng`,
/// which mixes the seed first and draws `below` by multiply-shift: another stream, and these
/// benches' results are kept comparable across versions by replaying the same seed.)
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Random bytes, so values are not trivially compressible by anything below us.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let r = self.next().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

/// splitmix64's finalizer: a bijection on u64.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ---- where to run ------------------------------------------------------------------------

/// Where a bench's files go, and what counts the writes to it.
pub struct RunDir {
    /// Cargo's target directory (`target_dir`).
    pub target: PathBuf,
    /// A private directory inside `--dir` (default target/BENCH), removed when dropped.
    pub tmp: tempfile::TempDir,
    /// Filesystem type of `tmp`, or "unknown".
    pub fs: String,
    /// The block device under `tmp`.
    pub device: Device,
}

impl RunDir {
    /// Create the run directory inside `dir` (default target/`bench`), warning when it is on a
    /// filesystem that reaches no device.
    pub fn create(dir: Option<PathBuf>, bench: &str) -> RunDir {
        let target = target_dir();
        let parent = dir.unwrap_or_else(|| target.join(bench));
        std::fs::create_dir_all(&parent).expect("create run dir");
        // A private directory inside, so no file of the user's is ever overwritten or removed.
        let tmp = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(&parent)
            .expect("temp dir");
        let fs = fs_type(tmp.path()).unwrap_or_else(|| "unknown".into());
        if matches!(fs.as_str(), "tmpfs" | "ramfs") {
            eprintln!(
                "warning: {} is on {fs}: nothing reaches a device; pass --dir on a disk",
                parent.display()
            );
        }
        let device = Device::for_dir(tmp.path());
        RunDir {
            target,
            tmp,
            fs,
            device,
        }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }
}

// ---- device counters ---------------------------------------------------------------------

/// The block device whose counters are read, or why there is none.
#[derive(Clone, Debug)]
pub enum Device {
    /// A block device's /sys stat file (fields 5 and 7: write I/Os and sectors written).
    Block { name: String, stat: PathBuf },
    /// No block device found (tmpfs, overlay, btrfs subvolume...): only /proc/self/io remains.
    Missing { why: String },
}

/// Counters at one instant; `None` where unreadable.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Bytes the device has written (sectors x 512), machine-wide.
    pub dev_bytes: Option<u64>,
    /// Write requests the device has completed, machine-wide.
    pub dev_ios: Option<u64>,
    /// `write_bytes` of /proc/self/io: this process only, so immune to other writers, but blind
    /// to the filesystem journal (written by jbd2) and coarse on large-folio kernels.
    pub proc_bytes: Option<u64>,
}

impl Sample {
    /// Zero in every counter that can be read, so sums over windows start from it.
    pub fn zeroed(self) -> Sample {
        let z = |a: Option<u64>| a.map(|_| 0);
        Sample {
            dev_bytes: z(self.dev_bytes),
            dev_ios: z(self.dev_ios),
            proc_bytes: z(self.proc_bytes),
        }
    }

    pub fn plus(self, other: Sample) -> Sample {
        let s = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a + b);
        Sample {
            dev_bytes: s(self.dev_bytes, other.dev_bytes),
            dev_ios: s(self.dev_ios, other.dev_ios),
            proc_bytes: s(self.proc_bytes, other.proc_bytes),
        }
    }

    pub fn minus(self, before: Sample) -> Sample {
        let d = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.saturating_sub(b));
        Sample {
            dev_bytes: d(self.dev_bytes, before.dev_bytes),
            dev_ios: d(self.dev_ios, before.dev_ios),
            proc_bytes: d(self.proc_bytes, before.proc_bytes),
        }
    }
}

/// Linux's dev_t encoding (glibc `major`/`minor`), so no extra dependency.
pub fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

pub fn proc_write_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    let line = s.lines().find(|l| l.starts_with("write_bytes:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Device {
    /// The block device holding `dir` (a partition has its own stat file, so it works too).
    pub fn for_dir(dir: &Path) -> Device {
        let dev = match std::fs::metadata(dir) {
            Ok(m) => m.dev(),
            Err(e) => {
                return Device::Missing {
                    why: format!("stat {}: {e}", dir.display()),
                }
            }
        };
        let (maj, min) = major_minor(dev);
        let sys = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
        let stat = sys.join("stat");
        let d = Device::Block {
            name: std::fs::canonicalize(&sys)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| format!("{maj}:{min}")),
            stat: stat.clone(),
        };
        match d.sample().dev_bytes {
            Some(_) => d,
            None => Device::Missing {
                why: format!(
                    "{} unreadable: {maj}:{min} is not a block device",
                    stat.display()
                ),
            },
        }
    }

    pub fn sample(&self) -> Sample {
        let (dev_bytes, dev_ios) = match self {
            Device::Block { stat, .. } => {
                let f: Vec<u64> = std::fs::read_to_string(stat)
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                (f.get(6).map(|s| s * SECTOR), f.get(4).copied())
            }
            Device::Missing { .. } => (None, None),
        };
        Sample {
            dev_bytes,
            dev_ios,
            proc_bytes: proc_write_bytes(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Device::Block { name, .. } => name,
            Device::Missing { .. } => "none",
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Device::Block { name, stat } => format!("{name} ({}, field 7 x 512 B)", stat.display()),
            Device::Missing { why } => format!(
                "UNAVAILABLE ({why}): the device columns are empty; use the /proc/self/io \
                 (write_bytes) column instead"
            ),
        }
    }

    /// What the device writes while this process does nothing: other processes' writes land in
    /// the same counter, and this says how much to distrust it.
    pub fn background(&self, secs: f64) -> (String, Option<f64>) {
        if secs <= 0.0 || matches!(self, Device::Missing { .. }) {
            return ("not measured".into(), None);
        }
        let before = self.sample();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let d = self.sample().minus(before);
        let rate = d.dev_bytes.unwrap_or(0) as f64 / secs;
        let message = format!(
            "{:.0} KiB/s, {:.0} write IOs/s over {secs} s idle",
            rate / 1024.0,
            d.dev_ios.unwrap_or(0) as f64 / secs
        );
        (message, Some(rate))
    }
}

// ---- the machine -------------------------------------------------------------------------

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The 1-minute load average: other work competing for the CPUs.
pub fn load1() -> String {
    loadavg().split(' ').next().unwrap_or("?").to_string()
}

/// The first three words of /proc/version ("Linux version X").
pub fn kernel() -> Option<String> {
    std::fs::read_to_string("/proc/version")
        .ok()
        .map(|v| v.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// Flush the filesystem so dirty data from before a run is not counted in it, and writeback
/// the run caused (journal commits included) is.
pub fn syncfs(dir: &Path) {
    if let Ok(f) = File::open(dir) {
        // SAFETY: syncfs only reads the descriptor, which `f` keeps open for the call.
        unsafe { libc::syncfs(f.as_raw_fd()) };
    }
}

/// Cargo's target directory: the ancestor of this executable holding CACHEDIR.TAG
/// (target/release/deps/policies-HASH), so it follows CARGO_TARGET_DIR.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").exists())
        .or_else(|| exe.ancestors().nth(3))
        .expect("target dir")
        .to_path_buf()
}

/// Filesystem type of the mount holding `path` (longest mount-point prefix in /proc/mounts).
pub fn fs_type(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mnt, ty) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(mnt).then(|| (mnt.len(), ty.to_string()))
        })
        // On ties the last entry wins, as a later mount on the same point hides the earlier.
        .max_by_key(|(len, _)| *len)
        .map(|(_, ty)| ty)
}

// ---- output ------------------------------------------------------------------------------

pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &[&str]| {
        let parts: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            // Names left-aligned, numbers right-aligned.
            .map(|(i, (s, w))| {
                if i < 2 {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header);
    for r in rows {
        line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

/// The table as CSV, preceded by the run's description as `#` comment lines.
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>], about: &[(&str, String)]) {
    let mut out: String = about.iter().map(|(k, v)| format!("# {k}: {v}\n")).collect();
    out += &(header.join(",") + "\n");
    for r in rows {
        out += &(r.join(",") + "\n");
    }
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(path, out) {
        Ok(()) => println!("csv: {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}
