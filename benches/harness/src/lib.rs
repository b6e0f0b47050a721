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
#[cfg(feature = "rocksdb")]
pub(crate) fn size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// Bytes of address space for a map that must hold the data set many times over.
pub(crate) fn map_bytes(logical: u64) -> usize {
    let want = (logical.saturating_mul(8)).max(64 << 30);
    // A multiple of 1 GiB (so of the page size too).
    (want.div_ceil(1 << 30) << 30) as usize
}
