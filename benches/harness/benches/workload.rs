//! `cargo bench --bench workload -- [options]`: larch against LMDB, redb, SQLite and fjall (and
//! RocksDB with `--features rocksdb`) on the ForestDB-style step pattern (docs/benchmarks.md;
//! `-- --help` lists the options).

fn main() {
    larch_bench_core::main(&larch_bench::engines());
}
