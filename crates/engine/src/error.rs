//! `larch_engine::Error`: one enum for everything the engine reports, with the page, txid or path
//! that failed.

use std::fmt;

use larch_pager::PagerError;

use crate::PageId;

/// Result of a larch operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The file, its map, its lock or its meta pages (carries the path).
    Pager(PagerError),
    /// A page could not be read as what the tree expects.
    Corrupt {
        /// The page.
        page: PageId,
        /// Why, in words.
        reason: String,
    },
    /// `check()` found damage; the first problem is shown, all are listed.
    CheckFailed(Vec<crate::check::Problem>),
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
    /// An option with a value that cannot work.
    InvalidOption(String),
    /// A background compaction did not finish (the old file stays in use).
    Compaction(String),
    /// `WriteTx::open_tree` of a tree that is already open in that transaction.
    TreeAlreadyOpen(String),
    /// `WriteTx::rollback_to` a savepoint of another transaction, or one that a rollback to
    /// an earlier savepoint discarded.
    InvalidSavepoint,
    /// A `WriteCursor` change with no entry under the cursor.
    NoCurrentEntry,
}

impl From<PagerError> for Error {
    fn from(e: PagerError) -> Self {
        match e {
            // One variant for damage, wherever it was found.
            PagerError::Corrupt { page, reason, .. } => Error::Corrupt { page, reason },
            e => Error::Pager(e),
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

    /// True if this is the disk being full.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::Pager(p) if p.is_disk_full())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Pager(e) => e.fmt(f),
            Error::Corrupt { page, reason } => write!(f, "page {page} is corrupt: {reason}"),
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
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Pager(e) => Some(e),
            _ => None,
        }
    }
}
