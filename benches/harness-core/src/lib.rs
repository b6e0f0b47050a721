//! The workload harness of docs/benchmarks.md and ../shared/BENCHMARK.md: the ForestDB-style
//! step pattern (load, ows, pqw, rqw, pq, rq, owa) run against every engine in turn, each in
//! its own child process, with read/write/space amplification columns, the physical limits
//! of the same machine beside them, an aligned table, `results.json`, `results.csv` and
//! `chart.svg`.
//!
//! This crate has no peer engine in it, so its tests (and the `larch-workload` binary, which
//! runs larch alone) build fast. The `larch-bench` package adds LMDB, redb, SQLite and fjall
//! and provides `cargo bench --bench workload`.
//!
//! An engine plugs in through [`EngineFactory`] / [`Engine`]; [`main`] is the whole program.

pub mod chart;
pub mod config;
pub mod counters;
pub mod engine;
pub mod ib;
pub mod json;
pub mod keys;
pub mod larch;
pub mod limits;
pub mod machine;
pub mod memlimit;
pub mod procs;
pub mod rate;
pub mod rb;
pub mod report;
pub mod rounds;
pub mod run;
pub mod scratch;
pub mod steps;
pub mod table;

pub use config::Config;
pub use engine::{
    BoxError, Durability, Engine, EngineConfig, EngineFactory, IbReader, IbRow, IbWriter, Reader,
    Writer,
};
pub use keys::{KeyGen, Rng, Values};
pub use report::Row;
pub use run::main;
pub use steps::{Kind, Step};
