//! What the power-cut simulations (tests/crash.rs, tests/crash_compaction.rs, tests/adversary.rs,
//! tests/crash_processes.rs) share, all from larch-testkit: a scratch directory, a repeatable
//! RNG, a recording storage and the power-cut images built from what it recorded (those of a
//! whole directory are `larch_testkit::directory`).

pub use larch_testkit::{images, recording, scratch_dir, Rng};
