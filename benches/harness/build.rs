//! Only for `--features rocksdb` with `ROCKSDB_LIB_DIR` (linking an installed librocksdb
//! instead of compiling RocksDB; docs/benchmarks.md, "RocksDB"). Debian 12's RocksDB 7.8.3
//! lacks `rocksdb_write_buffer_manager_destroy`, which the drop of rust-rocksdb's
//! `WriteBufferManager` references. The adapter never makes a WriteBufferManager, so nothing
//! calls it: when the library has no such symbol, it is defined at address 0 so that the
//! link succeeds (a call, which cannot happen, would fault rather than run other code).

use std::path::Path;

const MISSING: &str = "rocksdb_write_buffer_manager_destroy";

fn main() {
    println!("cargo:rerun-if-env-changed=ROCKSDB_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_ROCKSDB").is_none() {
        return;
    }
    let Some(dir) = std::env::var_os("ROCKSDB_LIB_DIR") else {
        return;
    };
    let lib = ["librocksdb.so", "librocksdb.a"]
        .iter()
        .map(|name| Path::new(&dir).join(name))
        .find(|p| p.exists());
    let Some(lib) = lib else {
        return;
    };
    println!("cargo:rerun-if-changed={}", lib.display());
    let has_symbol = std::fs::read(&lib)
        .map(|bytes| {
            bytes
                .windows(MISSING.len())
                .any(|w| w == MISSING.as_bytes())
        })
        .unwrap_or(true);
    if !has_symbol {
        println!(
            "cargo:warning={} has no {MISSING}: defined at 0 (never called)",
            lib.display()
        );
        println!("cargo:rustc-link-arg=-Wl,--defsym={MISSING}=0");
    }
}
