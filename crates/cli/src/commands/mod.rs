//! One module per subcommand: its arguments and what it does.

pub mod bench;
pub mod check;
pub mod compact;
pub mod copy;
pub mod demo;
pub mod dump;
pub mod info;
pub mod kv;
pub mod load;
pub mod page;
pub mod pages;
pub mod readers;
pub mod stat;
pub mod trees;

use std::io::{self, BufWriter, StdoutLock};
use std::path::{Path, PathBuf};

use crate::error::{CliError, CliResult};

/// Buffered stdout: commands print many lines, and one write per line is slow.
pub fn stdout() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(1 << 16, io::stdout().lock())
}

/// A fresh directory under the system temporary directory, removed on drop (even when the
/// command fails halfway) unless [`TempDir::keep`] was called.
pub struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    /// Create `larch-<what>-<pid>-<nanos>`; `what` also names the command in the error.
    pub fn new(what: &str) -> CliResult<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path =
            std::env::temp_dir().join(format!("larch-{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| {
            CliError::failed(format!(
                "{}: cannot create a directory for the {what}: {e}",
                path.display()
            ))
        })?;
        Ok(TempDir { path, keep: false })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leave the directory in place when dropped.
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
