//! Arbitrary bytes as a database file: open, check, scan every tree both ways, gets, and on a
//! file that checks clean, a commit. The body is `larch_testkit::fuzz::open_arbitrary_file`, which
//! tests/fuzz_corpus.rs also runs over fuzz/corpus/open_file on stable Rust.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    larch_testkit::fuzz::open_arbitrary_file(data);
});
