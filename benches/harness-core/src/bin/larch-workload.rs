//! The workload harness with larch alone (no peer engine is compiled):
//! `cargo run --release -p larch-bench-core --bin larch-workload -- [options]`, the same
//! options as `cargo bench --bench workload`. The smoke test runs it.

fn main() {
    larch_bench_core::main(&[&larch_bench_core::larch::LarchFactory]);
}
