//! What the power-cut simulations (tests/crash.rs, tests/crash_compaction.rs, tests/adversary.rs)
//! share, all from larch-testkit: a scratch directory, a repeatable RNG, and how a write lands
//! in a disk image, whole or torn.

pub use larch_testkit::{apply, apply_some, scratch_dir, Rng};
