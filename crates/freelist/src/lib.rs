#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! Which page ids a larch writer may reuse.
//!
//! This crate knows nothing of files or B-trees: only page ids and transaction ids.
//!
//! # The reuse rule
//!
//! A page `p` freed by transaction `T` may be handed out only after
//! [`FreeSpace::release`]`(safe)` with `safe >= T`. The engine picks
//! `safe = min(oldest open reader's snapshot txid, last durable txid)`, because until
//! then either a reader or the crash-fallback meta page may still reach `p`.
//!
//! Consequently:
//! - nothing that is pending is ever handed out;
//! - nothing is handed out twice;
//! - after release, everything freed becomes reusable.
//!
//! Freed pages wait in [`Pending`]; released pages live in a [`FreeSpacePolicy`], which
//! decides how runs of them are handed out ([`PolicyKind`] selects one per open).

pub mod append_run;
pub mod best_fit;
pub mod extents;
pub mod first_fit;
pub mod free_space;
pub mod kind;
pub mod null;
pub mod pending;
pub mod policy;

pub use append_run::AppendPreferringPolicy;
pub use best_fit::BestFitPolicy;
pub use extents::{bulk_batches, set_bulk_batch_min, ExtentSet};
pub use first_fit::FirstFitPolicy;
pub use free_space::FreeSpace;
pub use kind::PolicyKind;
pub use null::NullPolicy;
pub use pending::Pending;
pub use policy::FreeSpacePolicy;

/// Index of a page in the database file.
pub type PageId = u64;

/// Transaction id; increases with every committed write transaction.
pub type TxId = u64;
