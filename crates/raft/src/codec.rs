//! How values are stored (JSON, big-endian index keys) and how failures become openraft's
//! `StorageError`s.

use std::ops::{Bound, RangeBounds};

use openraft::{AnyError, ErrorSubject, ErrorVerb, NodeId, StorageError, StorageIOError};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The key of log index `i`: 8 big-endian bytes, so keys sort as indexes do.
pub(crate) fn index_key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// The index a log key holds.
pub(crate) fn key_index(k: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(k.try_into().ok()?))
}

/// `range` of indexes as bounds of index keys (owned; borrow them with [`borrow_bounds`]).
pub(crate) fn key_bounds(range: &impl RangeBounds<u64>) -> (Bound<[u8; 8]>, Bound<[u8; 8]>) {
    let map = |b: Bound<&u64>| match b {
        Bound::Included(&i) => Bound::Included(index_key(i)),
        Bound::Excluded(&i) => Bound::Excluded(index_key(i)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (map(range.start_bound()), map(range.end_bound()))
}

/// The byte-slice bounds larch's `range` takes.
pub(crate) fn borrow_bounds(b: &(Bound<[u8; 8]>, Bound<[u8; 8]>)) -> (Bound<&[u8]>, Bound<&[u8]>) {
    fn map(b: &Bound<[u8; 8]>) -> Bound<&[u8]> {
        match b {
            Bound::Included(k) => Bound::Included(&k[..]),
            Bound::Excluded(k) => Bound::Excluded(&k[..]),
            Bound::Unbounded => Bound::Unbounded,
        }
    }
    (map(&b.0), map(&b.1))
}

/// A failure inside a store operation: larch's or the decoding's.
#[derive(Debug)]
pub(crate) enum Failure {
    Larch(larch::Error),
    Decode(serde_json::Error),
    /// A snapshot whose bytes do not parse.
    BadSnapshot(&'static str),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Larch(e) => write!(f, "larch: {e}"),
            Failure::Decode(e) => write!(f, "decoding a stored value: {e}"),
            Failure::BadSnapshot(why) => write!(f, "malformed snapshot: {why}"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Failure::Larch(e) => Some(e),
            Failure::Decode(e) => Some(e),
            Failure::BadSnapshot(_) => None,
        }
    }
}

impl From<larch::Error> for Failure {
    fn from(e: larch::Error) -> Self {
        Failure::Larch(e)
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Decode(e)
    }
}

/// Run `f`, which blocks on the disk (a sync, or a commit waiting for one), on tokio's
/// blocking threads, so it does not hold up a runtime worker that Raft's tasks need (with as
/// many workers as cores, a few such waits stall every node of a process). Outside a tokio
/// runtime, run it here.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) => match h.spawn_blocking(f).await {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        },
        Err(_) => f(),
    }
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing openraft's types and ours to JSON cannot fail: no maps with non-string keys
    // (BTreeMap<u64, _> keys are written as strings), no failing Serialize impls.
    serde_json::to_vec(v).expect("JSON encoding of a Raft value")
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// A failure of `verb` on `subject`, with `source` as the cause.
pub(crate) fn err<NID: NodeId>(
    subject: ErrorSubject<NID>,
    verb: ErrorVerb,
    source: &(impl std::error::Error + 'static),
) -> StorageError<NID> {
    StorageIOError::new(subject, verb, AnyError::new(source)).into()
}

/// Shorthands for the subjects and verbs this crate's errors use.
pub(crate) fn read_logs<NID: NodeId>(e: &(impl std::error::Error + 'static)) -> StorageError<NID> {
    err(ErrorSubject::Logs, ErrorVerb::Read, e)
}
pub(crate) fn write_logs<NID: NodeId>(e: &(impl std::error::Error + 'static)) -> StorageError<NID> {
    err(ErrorSubject::Logs, ErrorVerb::Write, e)
}
pub(crate) fn read_vote<NID: NodeId>(e: &(impl std::error::Error + 'static)) -> StorageError<NID> {
    err(ErrorSubject::Vote, ErrorVerb::Read, e)
}
pub(crate) fn write_vote<NID: NodeId>(e: &(impl std::error::Error + 'static)) -> StorageError<NID> {
    err(ErrorSubject::Vote, ErrorVerb::Write, e)
}
pub(crate) fn read_sm<NID: NodeId>(e: &(impl std::error::Error + 'static)) -> StorageError<NID> {
    err(ErrorSubject::StateMachine, ErrorVerb::Read, e)
}
pub(crate) fn write_sm<NID: NodeId>(e: &(impl std::error::Error + 'static)) -> StorageError<NID> {
    err(ErrorSubject::StateMachine, ErrorVerb::Write, e)
}
pub(crate) fn read_snapshot<NID: NodeId>(
    e: &(impl std::error::Error + 'static),
) -> StorageError<NID> {
    err(ErrorSubject::Snapshot(None), ErrorVerb::Read, e)
}
pub(crate) fn write_snapshot<NID: NodeId>(
    e: &(impl std::error::Error + 'static),
) -> StorageError<NID> {
    err(ErrorSubject::Snapshot(None), ErrorVerb::Write, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_sort_as_indexes_and_round_trip() {
        let idx = [0u64, 1, 255, 256, 1 << 40, u64::MAX];
        let keys: Vec<[u8; 8]> = idx.iter().map(|&i| index_key(i)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        for (&i, k) in idx.iter().zip(&keys) {
            assert_eq!(key_index(k), Some(i));
        }
        assert_eq!(key_index(b"short"), None);
    }

    #[test]
    fn a_one_key_entry_round_trips_in_about_150_bytes_of_json() {
        use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
        let entry: Entry<crate::TypeConfig> = Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 12_345),
            payload: EntryPayload::Normal(crate::Request::set(
                "key00012345",
                format!("{:032}", 12_345),
            )),
        };
        let bytes = encode(&entry);
        let back: Entry<crate::TypeConfig> = decode(&bytes).unwrap();
        assert_eq!(format!("{back:?}"), format!("{entry:?}"));
        assert!((100..200).contains(&bytes.len()), "{} bytes", bytes.len());
    }

    #[test]
    fn index_ranges_become_key_ranges() {
        let b = key_bounds(&(3..=7u64));
        assert_eq!(
            b,
            (Bound::Included(index_key(3)), Bound::Included(index_key(7)))
        );
        let b = key_bounds(&(..7u64));
        assert_eq!(b, (Bound::Unbounded, Bound::Excluded(index_key(7))));
    }
}
