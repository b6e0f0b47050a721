//! An arbitrary sequence of operations against a `BTreeMap` model, with power cuts at
//! arbitrary points. The body is `larch_testkit::fuzz::ops_with_power_cuts`, which
//! tests/fuzz_corpus.rs also runs over fuzz/corpus/ops on stable Rust.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    larch_testkit::fuzz::ops_with_power_cuts(data);
});
