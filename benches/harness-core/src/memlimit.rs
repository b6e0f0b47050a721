//! Not-cached mode: cap the memory (page cache included) of each engine's process.
//!
//! Preferred: a memory cgroup made for the child, nested under this process's own cgroup
//! (so it can only lower what the machine already allows): cgroup v2 `memory.max` where
//! the memory controller is delegated, else cgroup v1 `memory.limit_in_bytes`. Page cache
//! pages a process brings in are charged to its cgroup, so the engine's file cache is
//! capped with its heap. Fallback: a helper process that mlocks an anonymous ballast of
//! all but the limit of the memory available, which squeezes the page cache of the whole
//! machine (and everyone on it).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::config::MemMechanism;

/// How the limit is imposed in this run.
#[derive(Debug)]
pub enum Limiter {
    /// cgroup v2 (`memory.max`) or v1 (`memory.limit_in_bytes`): children go under `base`.
    Cgroup {
        /// This process's cgroup directory.
        base: PathBuf,
        /// 1 or 2.
        version: u8,
        /// Children made so far (for unique names).
        made: u32,
    },
    /// An mlock'ed ballast held by a helper process while each child runs.
    Ballast,
}

/// A cgroup made for one child; removed on drop.
#[derive(Debug)]
pub struct ChildGroup {
    path: PathBuf,
}

impl ChildGroup {
    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        // The child has exited; an empty cgroup can go (its page cache charges move up).
        for _ in 0..50 {
            if fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("warning: could not remove cgroup {}", self.path.display());
    }
}

/// This process's cgroup directories: (v2 dir, v1 memory dir), where mounted.
fn own_cgroups() -> (Option<PathBuf>, Option<PathBuf>) {
    let cg = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut v2_mount = None;
    let mut v1_mount = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        if f[2] == "cgroup2" && v2_mount.is_none() {
            v2_mount = Some(PathBuf::from(f[1]));
        }
        if f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory") {
            v1_mount = Some(PathBuf::from(f[1]));
        }
    }
    let mut v2 = None;
    let mut v1 = None;
    for line in cg.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if id == "0" && ctrls.is_empty() {
            v2 = v2_mount.as_ref().map(|m| m.join(rel));
        } else if ctrls.split(',').any(|c| c == "memory") {
            v1 = v1_mount.as_ref().map(|m| m.join(rel));
        }
    }
    (v2, v1)
}

fn try_cgroup(base: &Path, version: u8, name: &str, limit: u64) -> std::io::Result<ChildGroup> {
    let path = base.join(name);
    fs::create_dir(&path)?;
    let group = ChildGroup { path };
    let file = if version == 2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    fs::write(group.path.join(file), limit.to_string())?;
    Ok(group)
}

/// Remove empty cgroups that an earlier run left behind when it was killed (their names
/// carry the pid of a harness that is no longer running).
fn remove_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("larch-bench-") else {
            continue;
        };
        let pid = rest
            .trim_start_matches("probe-")
            .split('-')
            .next()
            .unwrap_or("");
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_dir(e.path());
        }
    }
}

impl Limiter {
    /// Pick the mechanism; `Err` when the one asked for cannot work here.
    pub fn choose(mech: MemMechanism, limit: u64) -> Result<Limiter, String> {
        if mech != MemMechanism::Ballast {
            let (v2, v1) = own_cgroups();
            let probe = format!("larch-bench-probe-{}", std::process::id());
            let mut why = Vec::new();
            for (base, version) in [(v2, 2u8), (v1, 1u8)] {
                let Some(base) = base else { continue };
                if version == 2 {
                    let ctrls =
                        fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
                    if !ctrls.split_whitespace().any(|c| c == "memory") {
                        why.push(format!("v2 at {}: no memory controller", base.display()));
                        continue;
                    }
                }
                match try_cgroup(&base, version, &probe, limit) {
                    Ok(_group) => {
                        remove_stale(&base);
                        return Ok(Limiter::Cgroup {
                            base,
                            version,
                            made: 0,
                        });
                    }
                    Err(e) => why.push(format!("v{version} at {}: {e}", base.display())),
                }
            }
            if mech == MemMechanism::Cgroup {
                return Err(format!(
                    "no memory cgroup can be made here ({})",
                    if why.is_empty() {
                        "no cgroup mount".to_string()
                    } else {
                        why.join("; ")
                    }
                ));
            }
            eprintln!(
                "note: no memory cgroup ({}); falling back to an mlock'ed ballast",
                why.join("; ")
            );
        }
        Ok(Limiter::Ballast)
    }

    /// One line for the results: what ran.
    pub fn describe(&self, limit: u64) -> String {
        match self {
            Limiter::Cgroup { base, version: 2, .. } => format!(
                "cgroup v2: each engine's process in its own cgroup under {} with memory.max = {} MiB (anonymous memory and page cache)",
                base.display(),
                limit >> 20
            ),
            Limiter::Cgroup { base, .. } => format!(
                "cgroup v1: each engine's process in its own memory cgroup under {} with memory.limit_in_bytes = {} MiB (anonymous memory and page cache)",
                base.display(),
                limit >> 20
            ),
            Limiter::Ballast => format!(
                "mlock'ed ballast: a helper process locks all but {} MiB of MemAvailable while each engine runs (the limit applies to the whole machine's page cache)",
                limit >> 20
            ),
        }
    }

    /// Make the cgroup for the next child (cgroup mode).
    pub fn child_group(&mut self, limit: u64) -> Result<Option<ChildGroup>, String> {
        match self {
            Limiter::Cgroup {
                base,
                version,
                made,
            } => {
                *made += 1;
                let name = format!("larch-bench-{}-{}", std::process::id(), made);
                try_cgroup(base, *version, &name, limit)
                    .map(Some)
                    .map_err(|e| format!("cgroup {name}: {e}"))
            }
            Limiter::Ballast => Ok(None),
        }
    }

    /// Start the ballast for the next child (ballast mode): it holds its memory until the
    /// returned handle is dropped.
    pub fn ballast(&self, program: &Path, limit: u64) -> Result<Option<Ballast>, String> {
        if !matches!(self, Limiter::Ballast) {
            return Ok(None);
        }
        let avail = crate::machine::mem_available().ok_or("cannot read MemAvailable")?;
        let bytes = avail.saturating_sub(limit);
        if bytes == 0 {
            return Ok(None);
        }
        let mut child = Command::new(program)
            .arg("--internal-ballast")
            .arg(bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("ballast: {e}"))?;
        let mut line = String::new();
        let out = child.stdout.take().ok_or("ballast: no stdout")?;
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| format!("ballast: {e}"))?;
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("ballast of {} MiB failed: {line:?}", bytes >> 20));
        }
        Ok(Some(Ballast { child, bytes }))
    }
}

/// A running ballast helper.
#[derive(Debug)]
pub struct Ballast {
    child: Child,
    /// Bytes it locks.
    pub bytes: u64,
}

impl Drop for Ballast {
    fn drop(&mut self) {
        // Closing its stdin ends it.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Ask the kernel to kill this process when its parent dies (children and helpers).
pub fn die_with_parent() {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and nothing else.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    }
}

/// The ballast helper's whole life: lock `bytes` of anonymous memory, say `ready`, wait for
/// stdin to close.
pub fn hold_ballast(bytes: u64) -> i32 {
    die_with_parent();
    let len = bytes as usize;
    // SAFETY: an anonymous private mapping; the pointer is checked and only unmapped by
    // process exit.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        println!("mmap failed: {}", std::io::Error::last_os_error());
        return 1;
    }
    // SAFETY: p..p+len is the mapping made above.
    if unsafe { libc::mlock(p, len) } != 0 {
        println!("mlock failed: {}", std::io::Error::last_os_error());
        return 1;
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    0
}

/// In a child: move this process into `cgroup` (before it touches any file).
pub fn enter(cgroup: &Path) -> std::io::Result<()> {
    fs::write(cgroup.join("cgroup.procs"), std::process::id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_own_cgroups_without_panicking() {
        let (v2, v1) = own_cgroups();
        // Whatever this machine has, the paths (if any) are absolute.
        for p in [v2, v1].into_iter().flatten() {
            assert!(p.is_absolute());
        }
    }
}
