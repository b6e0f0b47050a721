//! Several processes on one file: the engine's side of the lock file (`<db>-lock`,
//! larch_pager::lockfile; docs/format.md, "The lock file" and "Several processes").
//!
//! - Every handle opened by path attaches to the lock file. Reading threads register their
//!   snapshot in a reader slot of the lock file (one per shard of the in-process reader
//!   table, readers.rs), so a writer in any process sees every reader without a system call.
//! - One write transaction at a time across processes: the writer lock of the lock file,
//!   taken by `Txn::begin`. A process keeps it after its transaction while any of its commits
//!   has no meta on disk (Async commits write none): another process's writer can only
//!   build on what is on disk. It is released by the first transaction end, `Db::sync` or
//!   close that finds every commit on disk.
//! - A writer that takes the lock after another process committed reloads the state from
//!   the file (`OpenFile::reload_from_disk`), treating every free page as freed by the newest
//!   commit while any reader holds an older snapshot.
//! - Readers of a process that is not writing follow other processes' commits through the
//!   lock file's published txid (`OpenFile::catch_up`).
//!
//! Within one process a file is open at most once (by inode, whatever the path): the
//! registry below, since the lock file cannot tell two handles of one process apart.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use larch_pager::LockFile;

use crate::error::{Error, Result};

/// This process's attachment to a database's lock file, shared by the open files of one
/// handle (background compaction hands it to the compacted file).
#[derive(Debug)]
pub(crate) struct ProcessLock {
    pub file: LockFile,
    /// This process holds the cross-process writer lock. Changed only by a thread that holds
    /// the in-process writer lock of the current file (so no transaction of this process runs
    /// without it).
    held: AtomicBool,
    /// Another attachment may have written the data file since this process last compared
    /// its state with the file's newest meta: set by a take of the writer lock that the lock
    /// file says followed another attachment's take (and from the start), cleared only by
    /// that comparison (`OpenFile::reload_if_changed`). A take that does not compare (the
    /// open's, a compaction switch given up) must not make the next one skip it.
    unchecked: AtomicBool,
    /// Serialises catching up with other processes' commits.
    pub catch_up: Mutex<()>,
}

impl ProcessLock {
    pub(crate) fn new(file: LockFile) -> ProcessLock {
        ProcessLock {
            file,
            held: AtomicBool::new(false),
            unchecked: AtomicBool::new(true),
            catch_up: Mutex::new(()),
        }
    }

    /// Take the cross-process writer lock unless this process holds it. `wait == false`:
    /// `Ok(false)` if another process holds it. Caller holds the in-process writer lock.
    pub(crate) fn acquire(&self, wait: bool) -> Result<bool> {
        if self.held.load(Ordering::Acquire) {
            return Ok(true);
        }
        if !self.file.acquire_writer(wait)? {
            return Ok(false);
        }
        if self.file.writer_taken_elsewhere() {
            self.unchecked.store(true, Ordering::Release);
        }
        self.held.store(true, Ordering::Release);
        Ok(true)
    }

    /// Caller holds the writer lock: may another process have written the data file since
    /// this one last compared its state with the file? Without that, this process's state is
    /// the file's and nothing needs reading.
    pub(crate) fn taken_elsewhere(&self) -> bool {
        self.unchecked.load(Ordering::Acquire)
    }

    /// Caller holds the writer lock and has just made this process's state the file's newest.
    pub(crate) fn checked(&self) {
        self.unchecked.store(false, Ordering::Release);
    }

    /// Does this process hold the writer lock?
    pub(crate) fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Let other processes write. Caller holds the in-process writer lock and has every
    /// commit on disk.
    pub(crate) fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            let _ = self.file.release_writer();
        }
    }
}

/// Files open in this process, by (device, inode): how many read-only handles, or -1 for
/// one read-write handle.
fn registry() -> &'static Mutex<HashMap<(u64, u64), isize>> {
    static OPEN: OnceLock<Mutex<HashMap<(u64, u64), isize>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

/// This process has the file with this identity open; dropped with the open file. Any number
/// of read-only handles may share a file, as before the lock file; a read-write handle has it
/// alone (clone the `Db` to share it).
#[derive(Debug)]
pub(crate) struct InodeClaim {
    id: (u64, u64),
    write: bool,
}

impl InodeClaim {
    /// Claim the file at `path` (which exists), or fail with `AlreadyOpen`.
    pub(crate) fn claim_path(path: &Path, write: bool) -> Result<InodeClaim> {
        let m = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
        Self::claim((m.dev(), m.ino()), write, path)
    }

    /// Claim the open file `file` (named `path` in errors).
    pub(crate) fn claim_file(file: &std::fs::File, write: bool, path: &Path) -> Result<InodeClaim> {
        let m = file.metadata().map_err(|e| Error::io("fstat", path, e))?;
        Self::claim((m.dev(), m.ino()), write, path)
    }

    fn claim(id: (u64, u64), write: bool, path: &Path) -> Result<InodeClaim> {
        let mut reg = registry().lock();
        let n = reg.entry(id).or_insert(0);
        match (*n, write) {
            (0, true) => *n = -1,
            (r, false) if r >= 0 => *n += 1,
            _ => {
                if *n == 0 {
                    reg.remove(&id);
                }
                return Err(Error::AlreadyOpen {
                    path: path.to_path_buf(),
                });
            }
        }
        Ok(InodeClaim { id, write })
    }

    /// Is this the claim of `file`'s inode?
    pub(crate) fn is_of(&self, file: &std::fs::File) -> bool {
        file.metadata()
            .map(|m| (m.dev(), m.ino()) == self.id)
            .unwrap_or(false)
    }
}

impl Drop for InodeClaim {
    fn drop(&mut self) {
        let mut reg = registry().lock();
        if let Some(n) = reg.get_mut(&self.id) {
            if self.write || *n <= 1 {
                reg.remove(&self.id);
            } else {
                *n -= 1;
            }
        }
    }
}

/// One reader slot of a database's lock file, as [`readers`] lists it (like `mdb_stat -r`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderSlot {
    /// The slot's index in the table.
    pub slot: u32,
    /// The owning process.
    pub pid: u32,
    /// The snapshot held, or `None` while the slot is idle (its thread reads nothing now).
    pub txid: Option<crate::TxId>,
    /// The newest commit other processes can see, minus `txid`: how many commits behind.
    pub age: Option<u64>,
    /// Whether the owner is alive (a dead one's slot is cleared by the next writer, or by
    /// [`clear_stale_readers`]).
    pub alive: bool,
}

/// The reader table of the database at `path` (its lock file `<path>-lock`): every claimed
/// slot, in any process. Attaches to the lock file briefly (creating it if missing).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("t.larch");
/// let db = larch_engine::Db::open(&path, Default::default())?;
/// let rx = db.begin_read()?;
/// let slots = larch_engine::readers(&path)?;
/// assert!(slots.iter().any(|s| s.pid == std::process::id() && s.txid == Some(rx.txid())));
/// # Ok::<(), larch_engine::Error>(())
/// ```
pub fn readers(path: impl AsRef<Path>) -> Result<Vec<ReaderSlot>> {
    let path = database_path(path.as_ref())?;
    let lf = LockFile::open(&path, true)?;
    let newest = lf.committed_txid();
    Ok(lf
        .readers()?
        .into_iter()
        .filter(|r| !r.ours)
        .map(|r| ReaderSlot {
            slot: r.slot,
            pid: r.pid,
            txid: r.txid,
            age: r.txid.zip(newest).map(|(t, n)| n.saturating_sub(t)),
            alive: r.alive,
        })
        .collect())
}

/// Free the reader slots of dead processes in the lock file of the database at `path`;
/// returns how many were freed. A writer does this by itself when a dead slot holds it back.
pub fn clear_stale_readers(path: impl AsRef<Path>) -> Result<usize> {
    let path = database_path(path.as_ref())?;
    let lf = LockFile::open(&path, true)?;
    Ok(lf.clear_stale()?)
}

/// `path` resolved, if it names a larch database (a valid meta page); else the error an open
/// would give. Looking at the reader table of anything else would leave a lock file beside it.
fn database_path(path: &Path) -> Result<std::path::PathBuf> {
    let path = larch_pager::resolve_path(path)?;
    larch_pager::probe_database(&path)?;
    Ok(path)
}
