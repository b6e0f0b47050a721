//! The peer engines of the workload harness and the criterion suite: LMDB (through heed),
//! redb, SQLite (rusqlite, bundled), fjall and, with the `rocksdb` feature, RocksDB, each
//! behind `larch_bench_core::Engine`, each configured at its honest best for the workload and
//! described in results.json.
//!
//! Nothing in this package is a test target: `cargo test --workspace` does not build it.

mod fjall_engine;
mod lmdb;
mod redb_engine;
#[cfg(feature = "rocksdb")]
mod rocksdb_engine;
mod sqlite;

pub use fjall_engine::FjallFactory;
pub use larch_bench_core::larch::LarchFactory;
pub use lmdb::LmdbFactory;
pub use redb_engine::RedbFactory;
#[cfg(feature = "rocksdb")]
pub use rocksdb_engine::RocksDbFactory;
pub use sqlite::SqliteFactory;

use larch_bench_core::EngineFactory;

/// Every engine, in the order of the results: larch, lmdb, redb, sqlite, fjall, then rocksdb
/// when the `rocksdb` feature is on.
pub fn engines() -> Vec<&'static dyn EngineFactory> {
    vec![
        &LarchFactory,
        &LmdbFactory,
        &RedbFactory,
        &SqliteFactory,
        &FjallFactory,
        #[cfg(feature = "rocksdb")]
        &RocksDbFactory,
    ]
}

/// A size for `describe`: whole MiB as "64 MiB", else KiB as "480 KiB".
pub(crate) fn size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// Under a memory limit, the LSM adapters (fjall, RocksDB) call this before they open the
/// database: glibc's malloc then keeps one arena for every thread instead of one per thread
/// (up to 8 per core), so memory freed by one thread (a flushed memtable, a compaction's
/// buffers) is reused by the others. Measured on the insert benchmark at 30 MiB, the per-thread
/// arenas held 6-15 MB more than the heap in use (fjall: RssAnon 32-36 MB with 20-26 MB
/// allocated, `mallinfo2`), more than the limit leaves. It is glibc's documented knob for
/// this (mallopt(3), `MALLOC_ARENA_MAX`), the one a user has without changing the allocator.
/// The child process runs one engine, so it touches no other.
pub(crate) fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a malloc parameter; M_ARENA_MAX takes effect for arenas
    // made after the call.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Bytes of address space for a map that must hold the data set many times over.
pub(crate) fn map_bytes(logical: u64) -> usize {
    let want = (logical.saturating_mul(8)).max(64 << 30);
    // A multiple of 1 GiB (so of the page size too).
    (want.div_ceil(1 << 30) << 30) as usize
}
