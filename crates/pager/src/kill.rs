//! A test hook: a process killed at a chosen step of the lock-file protocol.
//!
//! The power-cut simulation of several processes (tests/crash_processes.rs) runs each
//! "process" as a handle of the one test process, each attached to the lock file on its own.
//! To kill one between two steps it gives that handle's [`LockFile`](crate::LockFile) a
//! [`Killer`], asked before every step that changes what other processes see. The data file's
//! writes go through the test's own `Storage`, which it stops itself; a kill there (or between
//! two calls) the attachment learns from [`Killer::killed`] before it next touches the map.
//!
//! From the kill on, the attachment is what SIGKILL leaves of a process:
//! - every OFD lock of it (the writer byte, the attach byte, its slots' bytes) is released at
//!   once, as the kernel does when the dead process's descriptors close;
//! - nothing more of it reaches the shared map: the header keeps what it last wrote (a
//!   committed txid not yet published stays unpublished, a take not yet counted uncounted),
//!   and its process and reader slots keep their owner and snapshot, dead slots that the next
//!   writer clears (docs/format.md, "Reader slots and dead processes").
//!
//! The rest of the killed handle may run on until the test drops it, but only against a dead
//! attachment: its steps do nothing.

use std::fmt::Debug;

/// A step of the lock-file protocol at which a process may be killed: the kill comes before
/// the step takes effect.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockStep {
    /// Taking the writer byte's OFD lock.
    TakeWriter,
    /// Adding one to the writer-take count, the writer byte already taken.
    CountTake,
    /// Releasing the writer byte.
    ReleaseWriter,
    /// Publishing a committed txid in the header.
    PublishCommitted,
    /// Publishing a durable txid in the header.
    PublishDurable,
    /// A compaction switch naming the new file's newest txid (`set_committed`).
    SetCommitted,
    /// Bumping the generation (a compaction switch).
    BumpGeneration,
    /// Holding the attach byte exclusively (a compaction switch, before its rename).
    AttachExclusive,
    /// Going back to a shared hold of the attach byte.
    AttachShared,
    /// Claiming a reader slot.
    ClaimSlot,
    /// Clearing the slots of dead processes.
    ClearStale,
}

/// Decides when the process an attachment stands for is killed (tests only).
#[doc(hidden)]
pub trait Killer: Send + Sync + Debug {
    /// Called before `step`: true kills the process there. Once killed, it is not asked again.
    fn kills_before(&self, step: LockStep) -> bool;
    /// Was the process killed elsewhere (at a write of its storage, or between two calls)?
    /// Asked before anything reaches the map, reader begins and ends included.
    fn killed(&self) -> bool;
}
