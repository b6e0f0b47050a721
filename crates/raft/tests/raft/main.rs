//! larch-raft's tests, in one binary: openraft instantiates its whole Raft for each store
//! type a binary uses, in each binary (a release build of the suite alone took a minute of
//! CPU here), and one binary also runs the suite's sleeps beside the cluster tests.
//!
//! - `suite`: openraft's own storage test suite, the acceptance test.
//! - `cluster`: three nodes, the leader killed mid-stream and restarted.
//! - `power_cut`: a power cut under a follower, with the power-cut simulation's images.

mod cluster;
mod power_cut;
mod suite;
