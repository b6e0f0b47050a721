//! A real database whose metas (and free map) the input rewrites with hostile values, checksums
//! kept right: open read-only and read-write, check, read every tree, commit twice, and require
//! that no tree that read whole before the commits reads differently after them. The body is
//! `larch_testkit::fuzz::open_crafted_meta`, which tests/fuzz_corpus.rs also runs over fuzz/corpus/meta
//! and over generated inputs on stable Rust.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    larch_testkit::fuzz::open_crafted_meta(data);
});
