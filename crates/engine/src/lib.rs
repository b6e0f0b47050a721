//! larch: a single-file, copy-on-write B+tree storage engine that reads through mmap.
//!
//! One writer and any number of readers; readers see snapshots and never block. A commit
//! writes new pages, then one of two meta pages (docs/format.md has the format and the crash
//! argument).
//!
//! Users depend on the `larch` facade crate, which re-exports this API; its crate
//! documentation holds the example (one place, run as a doc test there).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod alloc;
mod append;
mod autocompact;
mod check;
mod compact;
mod compaction_state;
mod cursor;
mod db;
mod durability;
mod error;
mod file;
mod freemap;
mod fs;
mod mutate;
mod node;
mod node_page;
mod options;
mod process;
mod read;
mod readers;
mod redistribute;
mod relocate;
mod remove_range;
mod scratch;
mod stats;
mod typed;
mod unpinned;
mod view;
mod walk;
mod write;
mod write_tree;

#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use append::set_spill_batch;
pub use check::CheckReport;
pub use compaction_state::CompactReport;
pub use cursor::Range;
pub use db::{Db, IoStats};
pub use error::{Error, Problem, Result};
#[cfg(feature = "test-hooks")]
pub use fs::{CompactionFs, RealFs};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use larch_freelist::{bulk_batches, set_bulk_batch_min};
#[cfg(feature = "test-hooks")]
pub use larch_pager::{
    after_sync_recorded, set_min_map_reservation, BackgroundSync, FileStorage, Storage,
};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use larch_pager::{Killer, LockStep};
pub use options::{
    Advice, CacheFolios, Durability, Options, Policy, WriteMode, DEFAULT_MAX_UNSYNCED_BYTES,
};
pub use process::{clear_stale_readers, readers, ReaderSlot};
pub use read::{OwnedReadTree, ReadTree, ReadTx};
pub use redistribute::LeafOverflows;
pub use stats::{Stats, TreeStats};
pub use typed::{
    DecodeError, Key, MultimapTable, MultimapValues, OwnedEntry, OwnedReadMultimapTable,
    OwnedReadTable, PrefixKey, ReadMultimapTable, ReadTable, Table, TableRange, Value,
    WriteMultimapTable, WriteTable,
};
pub use write::{Savepoint, WriteTx};
pub use write_tree::{WriteCursor, WriteRange, WriteTree};

/// A page number.
pub type PageId = u64;
/// A transaction id.
pub type TxId = u64;

/// Lower-level pieces for tools (the CLI's `pages`/`page`, tests, fuzzers): the page format
/// as it is on disk, with the feature `raw` (or `test-hooks`) on.
#[cfg(feature = "raw")]
pub mod raw {
    pub use crate::freemap::{unreachable_runs, CHUNK_BYTES, CHUNK_PAGES};
    pub use crate::node_page::{
        Limits, NodePage, ValRef, BRANCH_CELL, BRANCH_CHILD, FLAG_OVERFLOW, LEAF_CELL, LEAF_FLAGS,
        LEAF_VLEN, OVERFLOW_HEADER, SLOT,
    };
    pub use crate::view::View;
    pub use larch_pager::{
        node_run_checksum, run_checksum, stored_checksum, ManifestRun, Meta, PageHeader, PageRole,
        PageType, TreeRoot, MAGIC, MAX_FILE_BYTES, MAX_TXID, META_SIZE, PAGE_HEADER_SIZE,
    };
}

/// The unit tests' random numbers: `next(n)` is in `0..n`, the same sequence for the same seed
/// (xorshift64).
#[cfg(test)]
pub(crate) fn test_rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
