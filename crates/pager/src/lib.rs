//! The bottom layer of larch: one file, its memory map, page I/O, the two meta pages,
//! checksums, madvise/msync and the file lock.
//!
//! It knows the page header every page carries (type, role, txid, checksum) and the meta
//! pages, but not what a branch or a leaf holds: the B+trees are the engine's. It hands out
//! byte slices of pages from a read-only shared mapping, writes pages through a narrow
//! [`Storage`] trait (so tests can record and cut every write), and reads and writes the two
//! meta pages. The on-disk format is drawn in `docs/format.md`.
//!
//! All of larch's `unsafe` lives in this crate: the mapping in [`map`] (every block says why
//! the slice it makes cannot outlive its mapping or alias a write; and the prefetch hint), three system calls in
//! `storage.rs` (pwritev, posix_fallocate, lseek), glibc's `malloc_trim` in `heap.rs`, the lock file's shared mapping and fcntl
//! byte locks in [`lockfile`] (issue 15: several processes on one file), and the futex(2)
//! calls of the writer threads' lock in `unfair.rs`. The map calls
//! mmap through libc rather than memmap2: it reserves address space far past the end of the
//! file (MAP_NORESERVE) and advises and msyncs ranges of that reservation, and the slices it
//! hands out need their own `unsafe` either way.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod error;
mod flusher;
mod heap;
mod kill;
mod lock;
pub mod lockfile;
pub mod map;
mod meta;
mod page;
mod pager;
mod storage;
mod unfair;

pub use error::{is_disk_full, PagerError, Result};
pub use flusher::after_sync_recorded;
pub use heap::release_free_heap;
#[doc(hidden)]
pub use kill::{Killer, LockStep};
pub use lockfile::{
    lock_path, LockFile, LockFileError, LockFileOptions, LockResult, ReaderInfo, SlotHandle,
    WriterGuard,
};
pub use map::{Advice, Map};
pub use meta::{
    manifest_batch_capacity, manifest_capacity, node_run_checksum, ManifestRun, Meta, MetaSlot,
    TreeRoot, FORMAT_VERSION, MAGIC, MANIFEST_BATCH_RUN_SIZE, MANIFEST_RUN_SIZE, MAX_TXID,
    META_SIZE,
};
pub use page::{
    page_checksum, raw_page_type, run_checksum, set_page_checksum, set_run_checksum,
    stored_checksum, PageHeader, PageRole, PageType, PAGE_HEADER_SIZE,
};
pub use pager::{
    growth_step, probe_database, resolve_path, set_min_map_reservation, sync_dir, FileLock,
    IoCounters, OpenedMetas, Pager, PagerOptions, SyncName,
};
pub use storage::{BackgroundSync, CacheFolios, FileStorage, Storage, WriteMode};
pub use unfair::{UnfairMutex, UnfairRawMutex, STARVED_AFTER};

/// A page number: byte offset / page size. Pages 0 and 1 are the meta pages.
pub type PageId = u64;
/// A transaction id; commit T writes meta slot T % 2.
pub type TxId = u64;

/// Smallest page size a file may have.
pub const MIN_PAGE_SIZE: usize = 4096;
/// Largest page size a file may have.
pub const MAX_PAGE_SIZE: usize = 65536;

/// The most of a file larch maps, and so can read: 16 TiB of address space. A meta whose pages
/// reach past it cannot be used, and a file is never grown past it.
pub const MAX_FILE_BYTES: u64 = 1 << 44;

/// Is `size` a page size a file may be created with?
pub fn valid_page_size(size: usize) -> bool {
    size.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&size)
}
