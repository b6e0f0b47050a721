//! What the machine is: cores, memory, kernel, CPU, the device and filesystem of the
//! database directory, and the date.

use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::counters::{parse_status_kib, Device};

/// (year, month, day, hour, minute, second) in UTC of a Unix time.
pub fn civil(unix: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        (secs / 60 % 60) as u32,
        (secs % 60) as u32,
    )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `2026-11-22T11:19:05Z`.
pub fn iso_now() -> String {
    let (y, mo, d, h, mi, s) = civil(unix_now());
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `20261122-111905` (UTC), for directory names.
pub fn stamp_now() -> String {
    let (y, mo, d, h, mi, s) = civil(unix_now());
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// The mount holding `path`: (mount point, filesystem type, source), from /proc/self/mounts.
pub fn mount_of(path: &Path) -> Option<(String, String, String)> {
    let path = fs::canonicalize(path).ok()?;
    let text = fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(String, String, String)> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let mp = f[1].replace("\\040", " ");
        if path.starts_with(&mp) && best.as_ref().is_none_or(|b| mp.len() >= b.0.len()) {
            best = Some((mp, f[2].to_string(), f[0].to_string()));
        }
    }
    best
}

fn first_line_field(text: &str, field: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == field).then(|| v.trim().to_string())
    })
}

/// The 1, 5 and 15 minute load averages (/proc/loadavg): other work on the machine.
pub fn loadavg() -> Option<String> {
    let text = fs::read_to_string("/proc/loadavg").ok()?;
    let parts: Vec<&str> = text.split_whitespace().take(3).collect();
    (parts.len() == 3).then(|| parts.join(" "))
}

/// The source the harness was run from: `git rev-parse --short HEAD`, plus `-dirty` when
/// the work tree has changes (the engine measured may differ from the commit).
pub fn source_revision() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// The `machine` object of results.json. `None` is what could not be read.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// When the run started, [`iso_now`].
    pub date: String,
    /// Cores this process may use.
    pub nproc: usize,
    /// The CPU's model name.
    pub cpu: Option<String>,
    /// MemTotal.
    pub mem_total_bytes: Option<u64>,
    /// MemAvailable at the start.
    pub mem_available_bytes: Option<u64>,
    /// The kernel release.
    pub kernel: Option<String>,
    /// [`loadavg`] at the start.
    pub loadavg_at_start: Option<String>,
    /// The transparent hugepage setting.
    pub transparent_hugepage: Option<String>,
    /// The order of the free blocks the kernel reports to the hypervisor as unused
    /// (`/sys/module/page_reporting/parameters/page_reporting_order`; absent where the kernel
    /// has no free page reporting). With a balloon device that reports, free memory goes back
    /// to the host a few seconds after it is freed and is slow to touch again, so a step whose
    /// page cache outgrows the memory the guest touched lately runs slower
    /// (docs/benchmarks.md, "Memory the host took back").
    pub free_page_reporting_order: Option<u32>,
    /// Where the databases are.
    pub db_dir: String,
    /// The filesystem type of the mount holding `db_dir`.
    pub filesystem: Option<String>,
    /// That mount's mount point.
    pub mount_point: Option<String>,
    /// That mount's source.
    pub mount_source: Option<String>,
    /// The block device of `db_dir`.
    pub device: Option<String>,
    /// Whether the kernel calls that device rotational.
    pub device_rotational: Option<bool>,
}

/// The `machine` object of results.json.
pub fn describe(dir: &Path, device: Option<&Device>) -> Machine {
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .ok();
    let mount = mount_of(dir);
    let thp = fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| s.trim().to_string())
        .ok();
    Machine {
        date: iso_now(),
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu: first_line_field(&cpuinfo, "model name"),
        mem_total_bytes: parse_status_kib(&meminfo, "MemTotal").map(|k| k << 10),
        mem_available_bytes: parse_status_kib(&meminfo, "MemAvailable").map(|k| k << 10),
        kernel,
        loadavg_at_start: loadavg(),
        transparent_hugepage: thp,
        free_page_reporting_order: fs::read_to_string(
            "/sys/module/page_reporting/parameters/page_reporting_order",
        )
        .ok()
        .and_then(|s| s.trim().parse().ok()),
        db_dir: dir.display().to_string(),
        filesystem: mount.as_ref().map(|m| m.1.clone()),
        mount_point: mount.as_ref().map(|m| m.0.clone()),
        mount_source: mount.as_ref().map(|m| m.2.clone()),
        device: device.map(|d| d.name.clone()),
        device_rotational: device.and_then(Device::rotational),
    }
}

/// Total memory in bytes.
pub fn mem_total() -> Option<u64> {
    parse_status_kib(&fs::read_to_string("/proc/meminfo").ok()?, "MemTotal").map(|k| k << 10)
}

/// Memory available (MemAvailable) in bytes.
pub fn mem_available() -> Option<u64> {
    parse_status_kib(&fs::read_to_string("/proc/meminfo").ok()?, "MemAvailable").map(|k| k << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(civil(1_700_000_000), (2023, 11, 14, 22, 13, 20));
        assert_eq!(civil(4_102_444_799), (2099, 12, 31, 23, 59, 59));
    }

    #[test]
    fn describes_this_machine() {
        let m = crate::json::pretty(&describe(Path::new("/"), None));
        assert!(m.contains("\"nproc\": "));
        assert!(m.contains("\"kernel\": \""));
        assert!(mount_of(Path::new("/")).is_some());
        assert!(stamp_now().len() == 15);
    }
}
