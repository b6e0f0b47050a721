//! The file-system operations compaction makes besides page I/O on an open file: wrapping a
//! newly created file for its writes, and the directory operations that put a compacted file
//! in place. The engine uses [`RealFs`]; the power-cut simulation (tests/crash_compaction.rs)
//! passes one that records every operation in order, so it can build the disk images a power
//! cut could leave: page writes and syncs of each file, links, renames and directory syncs.

use std::fmt::Debug;
use std::fs::File;
use std::io;
use std::path::Path;

use larch_pager::{FileStorage, Storage, WriteMode};

/// File-system operations of compaction (public with the feature `test-hooks`, for tests that
/// simulate power cuts).
pub trait CompactionFs: Send + Sync + Debug {
    /// The storage for a file compaction just created at `path` (a valid empty database,
    /// already synced and linked into its directory, which is synced too).
    fn storage(&self, path: &Path, file: File, mode: WriteMode) -> Box<dyn Storage> {
        let _ = path;
        Box::new(FileStorage::new(file, mode))
    }
    /// Link `from` at `to` (fails if `to` exists).
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }
    /// Rename `from` over `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    /// Remove the name `path`.
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    /// fsync the directory `dir`, making the links, renames and removals in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        larch_pager::sync_dir(dir)
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl CompactionFs for RealFs {}
