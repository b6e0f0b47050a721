//! larch: a single-file, copy-on-write B+tree storage engine that reads through mmap.
//!
//! One writer and any number of readers; readers see snapshots and never block. A commit
//! writes new pages, then one of two meta pages (docs/format.md has the format and the crash
//! argument).
//!
//! ```
//! use larch::{Db, Durability, Options, Policy, WriteMode, Advice};
//! use std::ops::Bound;
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("example.larch");
//! let opts = Options::default()
//!     .page_size(4096)
//!     .durability(Durability::Sync)
//!     .policy(Policy::FirstFit)
//!     .write_mode(WriteMode::Pwrite)
//!     .advice(Advice::Random);
//! let db = Db::open(&path, opts)?;
//!
//! let mut tx = db.begin_write()?;
//! {
//!     let mut users = tx.open_tree("users")?;
//!     users.insert(b"alice", b"1")?;
//!     users.insert(b"bob", b"2")?;
//!     let existed: bool = users.remove(b"bob")?;
//!     assert!(existed);
//!     let mine: Option<&[u8]> = users.get(b"alice")?;
//!     assert_eq!(mine, Some(&b"1"[..]));
//! }
//! tx.set_durability(Durability::Async);
//! tx.commit()?;
//!
//! let rx = db.begin_read()?;
//! let users = rx.open_tree("users")?;
//! let v: Option<&[u8]> = users.get(b"alice")?;
//! assert_eq!(v, Some(&b"1"[..]));
//! let all: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Unbounded, Bound::Unbounded);
//! for entry in users.range(all)? {
//!     let (k, v): (&[u8], &[u8]) = entry?;
//!     assert_eq!((k, v), (&b"alice"[..], &b"1"[..]));
//! }
//! let n: u64 = users.len()?;
//! assert_eq!(n, 1);
//! let names: Vec<String> = rx.tree_names()?;
//! assert_eq!(names, vec!["users".to_string()]);
//! drop(rx);
//! db.sync()?;
//! db.check()?;
//! let stats = db.stats()?;
//! assert_eq!(stats.trees[0].entries, 1);
//! # Ok::<(), larch::Error>(())
//! ```

#![forbid(unsafe_code)]

pub use larch_engine::*;

/// The README's example, compiled and run (`cargo test --doc -p larch`), so that the front
/// door cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
