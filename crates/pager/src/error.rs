use std::fmt;
use std::io;
use std::path::PathBuf;

/// Result of a pager operation.
pub type Result<T> = std::result::Result<T, PagerError>;

/// What went wrong below the B+tree: the file, its map or its meta pages.
#[derive(Debug)]
pub enum PagerError {
    /// A system call failed.
    Io {
        /// What was being done, e.g. "fdatasync".
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error the system returned.
        source: io::Error,
    },
    /// Another handle (this process or another) holds the file's lock.
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a larch database, or no meta page in it is valid.
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// Why, in words.
        reason: String,
    },
    /// The file is a larch database of a format version this build does not read.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version its meta pages carry.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A page could not be read as what it should be.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The page.
        page: u64,
        /// Why, in words.
        reason: String,
    },
    /// An earlier sync failed: pages written since the last good sync cannot be trusted, so
    /// every call fails until the file is reopened.
    Poisoned {
        /// The file.
        path: PathBuf,
    },
    /// The file was opened read-only.
    ReadOnly {
        /// The file.
        path: PathBuf,
    },
    /// A page size that is not a power of two in 4096..=65536.
    InvalidPageSize(usize),
}

impl PagerError {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: io::Error) -> Self {
        PagerError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// True if the error is the disk being full (see [`is_disk_full`]).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, PagerError::Io { source, .. } if is_disk_full(source))
    }
}

/// True if `e` is the disk being full: ENOSPC, EFBIG (the file may grow no further) or EDQUOT.
pub fn is_disk_full(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EFBIG) | Some(libc::EDQUOT)
    )
}

impl fmt::Display for PagerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PagerError::Io { op, path, source } => {
                write!(f, "{}: {op} failed: {source}", path.display())
            }
            PagerError::Locked { path } => write!(
                f,
                "{}: the database is already open (locked by this or another process); close the other handle first",
                path.display()
            ),
            PagerError::NotADatabase { path, reason } => {
                write!(f, "{}: not a larch database: {reason}", path.display())
            }
            PagerError::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: not a larch database this build can read: format version {found}, this build reads {supported}",
                path.display()
            ),
            PagerError::Corrupt { path, page, reason } => {
                write!(f, "{}: page {page} is corrupt: {reason}", path.display())
            }
            PagerError::Poisoned { path } => write!(
                f,
                "{}: an earlier sync or meta write failed, so what the file holds since the last good sync is unknown; reopen the database",
                path.display()
            ),
            PagerError::ReadOnly { path } => {
                write!(f, "{}: the database was opened read-only", path.display())
            }
            PagerError::InvalidPageSize(s) => write!(
                f,
                "page size {s} is not a power of two between 4096 and 65536"
            ),
        }
    }
}

impl std::error::Error for PagerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PagerError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
