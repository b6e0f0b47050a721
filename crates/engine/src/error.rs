//! `larch_engine::Error`: one enum for everything the engine reports, with the page, txid or path
//! that failed. The pager's errors are converted into it variant by variant, so a program
//! matches what happened (already open, not a database, I/O and its kind, ...) and never needs
//! the pager crate or the message text.
//!
//! [`Problem`] lives here rather than in `check` because [`Error::CheckFailed`] carries it and
//! this module sits below everything that can fail.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use larch_pager::PagerError;

use crate::PageId;

/// Result of a larch operation: `Ok(T)` or an [`Error`] (see there for an example).
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong. Match on the variants; new ones may be added.
///
/// ```
/// use larch_engine::{Db, Error, Options};
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("example.larch");
/// let db = Db::open(&path, Options::default())?;
/// match Db::open(&path, Options::default()) {
///     Err(Error::AlreadyOpen { path }) => eprintln!("{} is in use", path.display()),
///     other => panic!("expected AlreadyOpen, got {other:?}"),
/// }
/// # drop(db);
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call on the database file failed. [`Error::io_kind`] (or `source.kind()`) says
    /// how; [`Error::is_disk_full`] recognises a full disk.
    Io {
        /// What was being done, e.g. "fdatasync".
        op: &'static str,
        /// The file (or, for a directory sync, the directory).
        path: PathBuf,
        /// The error the system returned.
        source: io::Error,
    },
    /// The file is already open in this process (every open of a file is a separate handle;
    /// clone a [`crate::Db`] to share it), through any of its names; or another process
    /// holds it exclusively (one without a lock file beside the database).
    AlreadyOpen {
        /// The file (symlinks resolved).
        path: PathBuf,
    },
    /// The lock file beside the database (`<path>-lock`, through which processes share it)
    /// cannot be used: not a lock file, another layout version, or every reader slot taken.
    LockFile {
        /// The lock file.
        path: PathBuf,
        /// Why, in words.
        reason: String,
    },
    /// Another process holds the write transaction ([`crate::Db::try_begin_write`]).
    WriterBusy {
        /// The database.
        path: PathBuf,
    },
    /// The file is not a larch database, or no meta page in it is valid. Also an empty file
    /// that the open may not initialise (read-only, or `Options::create(false)`).
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// Why, in words.
        reason: String,
    },
    /// The file is a larch database in a format version this build does not read.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version the file carries.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A page could not be read as what the tree expects.
    Corrupt {
        /// The page.
        page: PageId,
        /// Why, in words.
        reason: String,
    },
    /// An earlier sync or meta write failed on this handle, so what the file holds since the
    /// last good sync is unknown: every write fails until the database is reopened.
    Poisoned {
        /// The file.
        path: PathBuf,
    },
    /// A write on a handle opened with `Options::read_only(true)`.
    ReadOnly {
        /// The file.
        path: PathBuf,
    },
    /// `check()` found damage; the first problem is shown, all are listed.
    CheckFailed(Vec<Problem>),
    /// `ReadTx::open_tree` of a tree that does not exist.
    TreeNotFound(String),
    /// A tree name that is empty or too long.
    InvalidTreeName(String),
    /// Keys must be at least one byte.
    EmptyKey,
    /// A key longer than the page size allows.
    KeyTooLarge {
        /// Its length.
        len: usize,
        /// The largest allowed (a quarter of the page size).
        max: usize,
    },
    /// A value longer than a 32-bit length.
    ValueTooLarge {
        /// Its length.
        len: usize,
    },
    /// An option with a value that cannot work (a page size that is not a power of two in
    /// 4096..=65536, a compaction threshold outside 0..1, a compaction target that exists).
    InvalidOption(String),
    /// A background compaction did not finish (the old file stays in use).
    Compaction(String),
    /// `WriteTx::open_tree` of a tree that is already open in that transaction; or
    /// `WriteTx::commit` after a tree's `WriteTree` was leaked (`mem::forget`) instead of
    /// dropped (its edits are lost, so the commit is refused and rolled back).
    TreeAlreadyOpen(String),
    /// `WriteTx::rollback_to` a savepoint of another transaction, or one that a rollback to
    /// an earlier savepoint discarded.
    InvalidSavepoint,
    /// A `WriteCursor` change with no entry under the cursor.
    NoCurrentEntry,
    /// A panic interrupted a change to one of this transaction's trees: what it left is
    /// unknown, so the transaction can only be aborted (its commit is refused).
    Interrupted,
    /// `WriteTree::append` of a key that is not greater than the tree's last key: appends
    /// must come in strictly ascending order. Nothing was changed.
    KeyNotGreater {
        /// The key that was refused.
        key: Vec<u8>,
        /// The tree's last key (which may have been written earlier in the transaction).
        last: Vec<u8>,
    },
}

/// One thing wrong with the file, as `check` reports it ([`crate::CheckReport::problems`],
/// [`Error::CheckFailed`]).
///
/// ```
/// let p = larch_engine::Problem { page: Some(7), what: "bad checksum".into() };
/// assert_eq!(p.to_string(), "page 7: bad checksum");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The page concerned, if one.
    pub page: Option<PageId>,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.page {
            Some(p) => write!(f, "page {p}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl From<larch_pager::LockFileError> for Error {
    fn from(e: larch_pager::LockFileError) -> Self {
        use larch_pager::LockFileError as L;
        match e {
            L::Io { op, path, source } => Error::Io { op, path, source },
            other => {
                let path = match &other {
                    L::Missing { path }
                    | L::NotWritable { path, .. }
                    | L::Invalid { path, .. }
                    | L::UnsupportedVersion { path, .. }
                    | L::Full { path, .. } => path.clone(),
                    L::Io { path, .. } => path.clone(),
                };
                Error::LockFile {
                    path,
                    reason: other.to_string(),
                }
            }
        }
    }
}

impl From<PagerError> for Error {
    fn from(e: PagerError) -> Self {
        match e {
            PagerError::Io { op, path, source } => Error::Io { op, path, source },
            PagerError::Locked { path } => Error::AlreadyOpen { path },
            PagerError::NotADatabase { path, reason } => Error::NotADatabase { path, reason },
            PagerError::UnsupportedVersion {
                path,
                found,
                supported,
            } => Error::UnsupportedVersion {
                path,
                found,
                supported,
            },
            // One variant for damage, wherever it was found (the page says where).
            PagerError::Corrupt { page, reason, .. } => Error::Corrupt { page, reason },
            PagerError::Poisoned { path } => Error::Poisoned { path },
            PagerError::ReadOnly { path } => Error::ReadOnly { path },
            // `Options::validate` refuses it first; the pager checks again for its own callers.
            PagerError::InvalidPageSize(size) => Error::InvalidOption(format!(
                "page size {size} is not a power of two between 4096 and 65536"
            )),
        }
    }
}

impl Error {
    pub(crate) fn corrupt(page: PageId, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            page,
            reason: reason.into(),
        }
    }

    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The kind of the system error, for an [`Error::Io`].
    ///
    /// ```
    /// use larch_engine::{Db, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let err = Db::open(dir.path().join("no/such/dir/t.larch"), Options::default()).unwrap_err();
    /// assert_eq!(err.io_kind(), Some(std::io::ErrorKind::NotFound));
    /// assert!(!err.is_disk_full());
    /// ```
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }

    /// True if this is the disk being full (ENOSPC, EFBIG or EDQUOT): the commit failed and
    /// the database is still at the previous one. See [`Error::io_kind`] for an example.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::Io { source, .. } if larch_pager::is_disk_full(source))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "{}: {op} failed: {source}", path.display())
            }
            Error::AlreadyOpen { path } => write!(
                f,
                "{}: the database is already open (in this process, or exclusively by another); close the other handle first",
                path.display()
            ),
            Error::LockFile { path, reason } => {
                write!(f, "{}: {reason}", path.display())
            }
            Error::WriterBusy { path } => write!(
                f,
                "{}: another process holds the write transaction",
                path.display()
            ),
            Error::NotADatabase { path, reason } => {
                write!(f, "{}: not a larch database: {reason}", path.display())
            }
            Error::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: not a larch database this build can read: format version {found}, this build reads {supported}",
                path.display()
            ),
            Error::Corrupt { page, reason } => write!(f, "page {page} is corrupt: {reason}"),
            Error::Poisoned { path } => write!(
                f,
                "{}: an earlier sync or meta write failed, so what the file holds since the last good sync is unknown; reopen the database",
                path.display()
            ),
            Error::ReadOnly { path } => {
                write!(f, "{}: the database was opened read-only", path.display())
            }
            Error::CheckFailed(problems) => match problems.first() {
                Some(p) => write!(
                    f,
                    "integrity check failed ({} problems); first: {p}",
                    problems.len()
                ),
                None => write!(f, "integrity check failed"),
            },
            Error::TreeNotFound(name) => write!(f, "tree {name:?} does not exist"),
            Error::InvalidTreeName(why) => write!(f, "invalid tree name: {why}"),
            Error::EmptyKey => write!(f, "keys must be at least one byte long"),
            Error::KeyTooLarge { len, max } => {
                write!(
                    f,
                    "key of {len} bytes is longer than the maximum of {max} for this page size"
                )
            }
            Error::ValueTooLarge { len } => {
                write!(
                    f,
                    "value of {len} bytes is longer than the maximum of {} bytes",
                    u32::MAX
                )
            }
            Error::InvalidOption(why) => write!(f, "invalid option: {why}"),
            Error::Compaction(why) => write!(f, "background compaction failed: {why}"),
            Error::TreeAlreadyOpen(name) => {
                write!(f, "tree {name:?} is already open in this transaction")
            }
            Error::InvalidSavepoint => write!(
                f,
                "the savepoint belongs to another transaction or was discarded by a rollback to an earlier one"
            ),
            Error::NoCurrentEntry => write!(f, "the cursor does not stand on an entry"),
            Error::Interrupted => write!(
                f,
                "a panic interrupted a change in this transaction: it can only be aborted"
            ),
            Error::KeyNotGreater { key, last } => write!(
                f,
                "append of key \"{}\" refused: it is not greater than the tree's last key \"{}\"",
                key.escape_ascii(),
                last.escape_ascii()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
