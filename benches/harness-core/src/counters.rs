//! Counters read around each step: /proc/self/io, getrusage, the block device's sectors
//! written, peak RSS, and the size of a database directory.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A device sector, as /sys/block/*/stat counts them.
pub const SECTOR: u64 = 512;

/// The fields of /proc/self/io the harness uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcIo {
    /// Bytes this process caused to be read from storage.
    pub read_bytes: u64,
    /// Bytes this process caused to be written to storage (counted when pages are dirtied;
    /// a whole large folio when one byte of it is).
    pub write_bytes: u64,
    /// Bytes passed to read-like syscalls.
    pub rchar: u64,
    /// Bytes passed to write-like syscalls.
    pub wchar: u64,
}

/// Parse the text of /proc/PID/io.
pub fn parse_proc_io(text: &str) -> Option<ProcIo> {
    let mut io = ProcIo::default();
    let mut found = 0;
    for line in text.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let Ok(v) = value.trim().parse::<u64>() else {
            continue;
        };
        match name.trim() {
            "read_bytes" => io.read_bytes = v,
            "write_bytes" => io.write_bytes = v,
            "rchar" => io.rchar = v,
            "wchar" => io.wchar = v,
            _ => continue,
        }
        found += 1;
    }
    (found == 4).then_some(io)
}

/// /proc/self/io (every thread of this process), or `None` where it cannot be read.
pub fn proc_io() -> Option<ProcIo> {
    parse_proc_io(&fs::read_to_string("/proc/self/io").ok()?)
}

/// What getrusage reports, reduced to the harness's columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// User + system CPU time, microseconds.
    pub cpu_us: u64,
    /// Voluntary + involuntary context switches.
    pub context_switches: u64,
    /// Major page faults (a read from storage).
    pub major_faults: u64,
    /// Minor page faults.
    pub minor_faults: u64,
}

/// Whose usage: the whole process, or the calling thread only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// RUSAGE_SELF + RUSAGE_CHILDREN: every thread of this process, and the children it has
    /// waited for (the reader processes of `--readers processes`; an engine's child has no
    /// other).
    Process,
    /// RUSAGE_THREAD: the calling thread.
    Thread,
}

fn rusage(w: libc::c_int) -> Usage {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the pointer it is given.
    unsafe { libc::getrusage(w, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Usage {
        cpu_us: tv(ru.ru_utime) + tv(ru.ru_stime),
        context_switches: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
        major_faults: ru.ru_majflt as u64,
        minor_faults: ru.ru_minflt as u64,
    }
}

/// getrusage for `who`.
pub fn usage(who: Who) -> Usage {
    match who {
        Who::Process => {
            let (a, b) = (rusage(libc::RUSAGE_SELF), rusage(libc::RUSAGE_CHILDREN));
            Usage {
                cpu_us: a.cpu_us + b.cpu_us,
                context_switches: a.context_switches + b.context_switches,
                major_faults: a.major_faults + b.major_faults,
                minor_faults: a.minor_faults + b.minor_faults,
            }
        }
        Who::Thread => rusage(libc::RUSAGE_THREAD),
    }
}

/// The block device a path lives on, with its stat file in /sys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Kernel name (`vda`, `nvme0n1`).
    pub name: String,
    /// /sys/.../stat of the whole disk (a partition's parent).
    pub stat: PathBuf,
}

impl Device {
    /// The whole-disk device holding `path`, if /sys shows one (not on tmpfs or overlay).
    pub fn of(path: &Path) -> Option<Device> {
        let dev = fs::metadata(path).ok()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
        let sys = fs::canonicalize(sys).ok()?;
        let disk = if sys.join("partition").exists() {
            sys.parent()?.to_path_buf()
        } else {
            sys
        };
        let stat = disk.join("stat");
        let name = disk.file_name()?.to_string_lossy().into_owned();
        parse_sectors_written(&fs::read_to_string(&stat).ok()?)?;
        Some(Device { name, stat })
    }

    /// Sectors written so far (machine-wide: every writer to this device counts).
    pub fn sectors_written(&self) -> Option<u64> {
        parse_sectors_written(&fs::read_to_string(&self.stat).ok()?)
    }

    /// Whether the device is rotational, from /sys/block/NAME/queue/rotational.
    pub fn rotational(&self) -> Option<bool> {
        let p = self.stat.parent()?.join("queue/rotational");
        Some(fs::read_to_string(p).ok()?.trim() == "1")
    }
}

/// The sectors-written field (the 7th) of a /sys/block/*/stat line.
pub fn parse_sectors_written(text: &str) -> Option<u64> {
    text.split_whitespace().nth(6)?.parse().ok()
}

/// Start a new peak-RSS window (writes 5 to /proc/self/clear_refs, Linux >= 4.0).
pub fn reset_peak_rss() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak resident set size since the last reset (VmHWM), in bytes.
pub fn peak_rss() -> Option<u64> {
    parse_status_kib(&fs::read_to_string("/proc/self/status").ok()?, "VmHWM").map(|k| k << 10)
}

/// A `Name:   123 kB` field of /proc/*/status or /proc/meminfo, in KiB.
pub fn parse_status_kib(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        if name.trim() != field {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Bytes of every file under `path` (recursively): (allocated, apparent). Allocated is
/// st_blocks x 512, what `du` shows; apparent is the files' lengths.
pub fn dir_size(path: &Path) -> io::Result<(u64, u64)> {
    let mut alloc = 0;
    let mut apparent = 0;
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in fs::read_dir(path)? {
            let (a, b) = dir_size(&entry?.path())?;
            alloc += a;
            apparent += b;
        }
    } else if meta.is_file() {
        alloc += meta.blocks() * 512;
        apparent += meta.len();
    }
    Ok((alloc, apparent))
}

/// Everything read at a step's start and end.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    /// /proc/self/io, if readable.
    pub io: Option<ProcIo>,
    /// getrusage.
    pub usage: Usage,
    /// Sectors written to the database's device, if readable.
    pub sectors: Option<u64>,
}

impl Snapshot {
    /// Read every counter now.
    pub fn take(who: Who, device: Option<&Device>) -> Snapshot {
        Snapshot {
            io: if who == Who::Process { proc_io() } else { None },
            usage: usage(who),
            sectors: device.and_then(Device::sectors_written),
        }
    }

    /// What happened between `self` (earlier) and `later`.
    pub fn delta(&self, later: &Snapshot) -> Delta {
        let io = match (self.io, later.io) {
            (Some(a), Some(b)) => Some(ProcIo {
                read_bytes: b.read_bytes.saturating_sub(a.read_bytes),
                write_bytes: b.write_bytes.saturating_sub(a.write_bytes),
                rchar: b.rchar.saturating_sub(a.rchar),
                wchar: b.wchar.saturating_sub(a.wchar),
            }),
            _ => None,
        };
        let u = |f: fn(&Usage) -> u64| f(&later.usage).saturating_sub(f(&self.usage));
        Delta {
            io,
            usage: Usage {
                cpu_us: u(|x| x.cpu_us),
                context_switches: u(|x| x.context_switches),
                major_faults: u(|x| x.major_faults),
                minor_faults: u(|x| x.minor_faults),
            },
            device_bytes: match (self.sectors, later.sectors) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a) * SECTOR),
                _ => None,
            },
        }
    }
}

/// Counter differences over a step.
#[derive(Clone, Copy, Debug, Default)]
pub struct Delta {
    /// /proc/self/io differences.
    pub io: Option<ProcIo>,
    /// getrusage differences.
    pub usage: Usage,
    /// Bytes written to the device (sectors x 512).
    pub device_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io() {
        let text = "rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 0\nread_bytes: 4096\n\
                    write_bytes: 8192\ncancelled_write_bytes: 0\n";
        let io = parse_proc_io(text).unwrap();
        assert_eq!(
            io,
            ProcIo {
                read_bytes: 4096,
                write_bytes: 8192,
                rchar: 6976,
                wchar: 12
            }
        );
        assert_eq!(parse_proc_io("rchar: 1\n"), None);
        assert_eq!(parse_proc_io("garbage"), None);
    }

    #[test]
    fn parses_block_stat() {
        let line = "  243402    11768 15659282   421470  4208756    47755 111997640  1861020        0   140284  2358052   397429       57 89878232    35972   825773    39590\n";
        assert_eq!(parse_sectors_written(line), Some(111_997_640));
        assert_eq!(parse_sectors_written("1 2 3"), None);
    }

    #[test]
    fn parses_status_fields() {
        let text = "Name:\tx\nVmPeak:\t  10 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(parse_status_kib(text, "VmHWM"), Some(2048));
        assert_eq!(parse_status_kib(text, "VmRSS"), Some(1024));
        assert_eq!(parse_status_kib(text, "VmSwap"), None);
        let meminfo = "MemTotal:       24684000 kB\nMemAvailable:   23400000 kB\n";
        assert_eq!(parse_status_kib(meminfo, "MemAvailable"), Some(23_400_000));
    }

    #[test]
    fn reads_live_counters() {
        // Whatever the values, the reads must work on Linux.
        let a = Snapshot::take(Who::Process, None);
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = Snapshot::take(Who::Process, None);
        let d = a.delta(&b);
        assert!(d.device_bytes.is_none());
        assert!(proc_io().is_some());
        assert!(peak_rss().unwrap() > 0);
        let t = usage(Who::Thread);
        assert!(t.cpu_us <= usage(Who::Process).cpu_us);
    }

    #[test]
    fn sizes_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), vec![1u8; 10_000]).unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("sub/b"), vec![1u8; 5]).unwrap();
        let (alloc, apparent) = dir_size(dir.path()).unwrap();
        assert_eq!(apparent, 10_005);
        assert!(alloc >= 10_005 || alloc == 0, "{alloc}");
    }
}
