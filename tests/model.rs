//! Model test: random operation sequences against larch and against a `BTreeMap` model of
//! the committed state plus a working copy for the open write transaction.
//!
//! Null and FirstFit run the same strategy under every write mode and page size; BestFit (which
//! also hands out runs, so the commit gathers the dirty nodes' pages: alloc.rs) and
//! AppendPreferring (which does not) under pwrite with 4 KiB pages.
//! `PROPTEST_CASES` raises the number of cases (default 64 per combination).
//!
//! A case with an `EditFault` op opens the file on the real storage of its write mode behind a
//! wrapper that can fail the next write or resize: an edit whose own write fails (an overflow
//! value's run, or the file's growth for it) must leave the transaction as it was, which then
//! goes on, makes the edit again, rolls back to a savepoint or aborts.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex};

use larch::{
    CacheFolios, Db, Durability, Error, FileStorage, Options, Policy, ReadTree, ReadTx, Savepoint,
    Storage, WriteMode, WriteTx,
};
use larch_testkit::recording::{open_rw, Call};
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};

/// Three tree names; "a" is a prefix of "ab", so catalog ordering is exercised too.
const TREES: [&str; 3] = ["a", "ab", "zz"];

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;
type Model = BTreeMap<String, Tree>;

// ---- operations (kept short in Debug so shrunk cases read well) ---------------------------

/// A key: short keys over a tiny alphabet (so they collide), or a long run of one byte whose
/// length is clamped to the page's maximum key size at use.
#[derive(Clone, PartialEq, Eq)]
enum Key {
    Short(Vec<u8>),
    Long { byte: u8, len: u16 },
}

impl Key {
    fn bytes(&self, max_key: usize) -> Vec<u8> {
        match self {
            Key::Short(k) => k.clone(),
            Key::Long { byte, len } => vec![*byte; (*len as usize).min(max_key)],
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Short(k) => write!(f, "\"{}\"", k.escape_ascii()),
            Key::Long { byte, len } => write!(f, "long({:?} x {len})", *byte as char),
        }
    }
}

/// A value as (seed byte, length); the bytes are generated only when used.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Val {
    byte: u8,
    len: u32,
}

impl Val {
    fn bytes(self) -> Vec<u8> {
        (0..self.len).map(|i| self.byte ^ (i % 251) as u8).collect()
    }
}

impl fmt::Debug for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "val({}, {})", self.byte, self.len)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        tree: usize,
        key: Key,
        val: Val,
    },
    Remove {
        tree: usize,
        key: Key,
    },
    Get {
        tree: usize,
        key: Key,
    },
    /// A range scan of the committed state through a read transaction.
    Range {
        tree: usize,
        lo: Bound<Key>,
        hi: Bound<Key>,
        rev: bool,
    },
    /// Insert `count` keys `<prefix><pad x '~'><start+i as 5 digits>`: grows trees past one
    /// leaf, and with long padding (few keys per branch) several levels deep.
    Fill {
        tree: usize,
        prefix: u8,
        pad: u16,
        start: u16,
        count: u16,
        val: Val,
    },
    /// Remove every `stride`-th present key in `[lo, hi]` (in the transaction's view).
    RemoveRange {
        tree: usize,
        lo: Bound<Key>,
        hi: Bound<Key>,
        stride: u8,
    },
    Commit(Durability),
    /// Drop the write transaction (explicitly with `abort()` or by dropping it).
    Abort {
        explicit: bool,
    },
    /// Drop the write transaction, any held snapshots and the `Db`, then open the file again.
    Reopen,
    /// Begin a read transaction and hold it (at most two; the oldest is dropped first). Held
    /// snapshots are compared with the state they were taken at after every commit and abort.
    Snapshot,
    /// Drop the oldest held snapshot.
    DropSnapshot,
    DeleteTree {
        tree: usize,
    },
    /// A range scan inside the write transaction (its own writes included), with `first`
    /// and `last`.
    TxRange {
        tree: usize,
        lo: Bound<Key>,
        hi: Bound<Key>,
        rev: bool,
    },
    /// `WriteTree::remove_range`.
    RemoveSpan {
        tree: usize,
        lo: Bound<Key>,
        hi: Bound<Key>,
    },
    /// `WriteTree::retain`, keeping entries whose (value length + key length) % `modulo` is
    /// not zero.
    Retain {
        tree: usize,
        modulo: u8,
    },
    /// `pop_first` or `pop_last`.
    Pop {
        tree: usize,
        last: bool,
    },
    /// Walk a cursor (forward or back) from `from`: delete every `stride`-th entry it stands
    /// on and give the others `val`.
    CursorEdit {
        tree: usize,
        from: Option<Key>,
        back: bool,
        stride: u8,
        val: Val,
    },
    /// Two trees open side by side: insert into both, read both.
    SideBySide {
        a: usize,
        b: usize,
        key: Key,
        val: Val,
    },
    /// `WriteTree::append` of `count` keys `<ff ff ff><n as 6 digits><pad x '~'>`, `n` from a
    /// per-tree counter that only grows, so they are usually above the tree's last key (a
    /// key some other op wrote may be above: then the append must be refused). With `mix`, an
    /// insert of that key and a remove of the last appended key come midway, in the same
    /// handle; with `refuse`, an append of the tree's last key ends the op (refused).
    Append {
        tree: usize,
        pad: u16,
        count: u16,
        val: Val,
        mix: Option<Key>,
        refuse: bool,
    },
    /// Open `count` more trees (`many_name`: short names, and every fourth one longer than
    /// the 256 bytes a transaction keeps a name's buffer for) and insert `key` into each; with
    /// `delete`, every third one is deleted instead. One transaction then touches more trees
    /// than the writer keeps arenas (8), name buffers (16) or a name map's room (64) for
    /// (scratch.rs), and the next ones reuse what it kept.
    ManyTrees {
        count: u8,
        key: Key,
        val: Val,
        delete: bool,
    },
    /// Take a savepoint in the write transaction.
    Savepoint,
    /// Roll back to the `which`-th savepoint taken (counting those a rollback discarded, which
    /// must be refused).
    RollbackTo {
        which: u8,
    },
    /// An edit of `tree` whose own storage call fails as `fault` says; the edit must change
    /// nothing. The transaction then does what `then` says, and commits at once if `commit`.
    /// `alone`: the open transaction commits first, so the edit is the first of its own.
    EditFault {
        alone: bool,
        tree: usize,
        edit: FaultedEdit,
        fault: FaultKind,
        then: Then,
        commit: Option<Durability>,
    },
}

/// The edit an [`Op::EditFault`] fails. Values are overflow runs (written at once); a fault
/// on the file's growth makes them 530-570 KB, past the slack a file keeps, so it must grow.
#[derive(Clone, Debug)]
enum FaultedEdit {
    /// `insert` of a `len`-byte value.
    Insert { key: Key, len: u32 },
    /// In one handle, `before` small appends, the faulted one of `len` bytes, `after` small
    /// ones (keys as [`Op::Append`]'s). With `before` 0 the faulted append is the handle's
    /// first: it copies the tree's rightmost path before the value's write fails.
    Append { before: u16, after: u16, len: u32 },
    /// Two trees open side by side, the same `len`-byte value into both; the fault in the
    /// second's insert (after the first's went through) or the first's.
    Pair {
        other: usize,
        key: Key,
        len: u32,
        second: bool,
    },
    /// A cursor's `put_current` of a `len`-byte value on the first entry at or after `from`.
    CursorPut { from: Key, len: u32 },
}

/// How the faulted edit's call fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    /// The overflow run's write (EIO).
    Write,
    /// Its first half reaches the file, then ENOSPC.
    ShortWrite,
    /// The disk is full: every resize fails, the engine's second, smaller try too (ENOSPC).
    DiskFull,
    /// One resize fails; the engine's smaller retry goes through, and so does the edit.
    OneResize,
}

impl FaultKind {
    fn call(self) -> Call {
        match self {
            FaultKind::Write | FaultKind::ShortWrite => Call::Write,
            FaultKind::DiskFull | FaultKind::OneResize => Call::SetLen,
        }
    }
}

/// What the transaction does after the faulted edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// Goes on without it.
    GoOn,
    /// Makes the edit again (nothing fails now).
    Retry,
    /// Rolls back to a savepoint taken before the edit.
    Rollback,
    /// Aborts (by `abort()`).
    Abort,
}

fn alpha() -> impl Strategy<Value = u8> {
    prop_oneof![10 => prop::sample::select(b"abc".to_vec()), 1 => Just(0u8), 1 => Just(0xffu8)]
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        12 => prop::collection::vec(alpha(), 1..=2).prop_map(Key::Short),
        6 => prop::collection::vec(alpha(), 3..=12).prop_map(Key::Short),
        1 => (prop::sample::select(b"abc".to_vec()), prop::sample::select(vec![300u16, 1000, 1024, 2000, 4096]))
            .prop_map(|(byte, len)| Key::Long { byte, len }),
    ]
}

fn val() -> impl Strategy<Value = Val> {
    prop_oneof![
        20 => (any::<u8>(), 0u32..600).prop_map(|(byte, len)| Val { byte, len }),
        2 => (any::<u8>(), 1_000u32..6_000).prop_map(|(byte, len)| Val { byte, len }),
        1 => (any::<u8>(), 5_000u32..40_000).prop_map(|(byte, len)| Val { byte, len }),
    ]
}

fn small_val() -> impl Strategy<Value = Val> {
    (any::<u8>(), 0u32..200).prop_map(|(byte, len)| Val { byte, len })
}

fn bound() -> impl Strategy<Value = Bound<Key>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key().prop_map(Bound::Included),
        2 => key().prop_map(Bound::Excluded),
    ]
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        2 => Just(Durability::Sync),
        1 => Just(Durability::NoMetaSync),
        3 => Just(Durability::Async),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let tree = 0..TREES.len();
    prop_oneof![
        30 => (tree.clone(), key(), val()).prop_map(|(tree, key, val)| Op::Insert { tree, key, val }),
        12 => (tree.clone(), key()).prop_map(|(tree, key)| Op::Remove { tree, key }),
        10 => (tree.clone(), key()).prop_map(|(tree, key)| Op::Get { tree, key }),
        6 => (tree.clone(), bound(), bound(), any::<bool>())
            .prop_map(|(tree, lo, hi, rev)| Op::Range { tree, lo, hi, rev }),
        3 => (
            tree.clone(),
            prop::sample::select(b"abc".to_vec()),
            prop::sample::select(vec![0u16, 0, 0, 250, 1000, 4000]),
            0u16..2000,
            1u16..300,
            small_val()
        )
            .prop_map(|(tree, prefix, pad, start, count, val)| Op::Fill { tree, prefix, pad, start, count, val }),
        3 => (tree.clone(), bound(), bound(), 1u8..=3)
            .prop_map(|(tree, lo, hi, stride)| Op::RemoveRange { tree, lo, hi, stride }),
        8 => durability().prop_map(Op::Commit),
        3 => any::<bool>().prop_map(|explicit| Op::Abort { explicit }),
        3 => Just(Op::Reopen),
        3 => Just(Op::Snapshot),
        2 => Just(Op::DropSnapshot),
        2 => tree.clone().prop_map(|tree| Op::DeleteTree { tree }),
        6 => (tree.clone(), bound(), bound(), any::<bool>())
            .prop_map(|(tree, lo, hi, rev)| Op::TxRange { tree, lo, hi, rev }),
        4 => (tree.clone(), bound(), bound())
            .prop_map(|(tree, lo, hi)| Op::RemoveSpan { tree, lo, hi }),
        2 => (tree.clone(), 2u8..5).prop_map(|(tree, modulo)| Op::Retain { tree, modulo }),
        2 => (tree.clone(), any::<bool>()).prop_map(|(tree, last)| Op::Pop { tree, last }),
        2 => (tree.clone(), prop::option::of(key()), any::<bool>(), 1u8..4, small_val())
            .prop_map(|(tree, from, back, stride, val)| Op::CursorEdit { tree, from, back, stride, val }),
        3 => (tree.clone(), tree.clone(), key(), small_val())
            .prop_map(|(a, b, key, val)| Op::SideBySide { a, b, key, val }),
        3 => Just(Op::Savepoint),
        2 => (prop_oneof![3 => 1u8..12, 1 => 12u8..72], key(), small_val(), any::<bool>())
            .prop_map(|(count, key, val, delete)| Op::ManyTrees { count, key, val, delete }),
        2 => (0u8..4).prop_map(|which| Op::RollbackTo { which }),
        6 => (
            tree.clone(),
            prop::sample::select(vec![0u16, 0, 0, 250, 1000]),
            prop_oneof![8 => (small_val(), 1u16..300), 1 => (val(), 1u16..12)],
            prop::option::weighted(0.3, key()),
            prop::bool::weighted(0.3),
        )
            .prop_map(|(tree, pad, (val, count), mix, refuse)| Op::Append { tree, pad, count, val, mix, refuse }),
        2 => edit_fault(),
    ]
}

fn overflow_len() -> impl Strategy<Value = u32> {
    6_000u32..40_000
}

fn faulted_edit() -> impl Strategy<Value = FaultedEdit> {
    prop_oneof![
        3 => (key(), overflow_len()).prop_map(|(key, len)| FaultedEdit::Insert { key, len }),
        4 => (
            prop_oneof![2 => Just(0u16), 1 => 1u16..40],
            prop_oneof![1 => Just(0u16), 1 => 1u16..20],
            overflow_len(),
        )
            .prop_map(|(before, after, len)| FaultedEdit::Append { before, after, len }),
        2 => (0..TREES.len(), key(), overflow_len(), any::<bool>())
            .prop_map(|(other, key, len, second)| FaultedEdit::Pair { other, key, len, second }),
        1 => (key(), overflow_len()).prop_map(|(from, len)| FaultedEdit::CursorPut { from, len }),
    ]
}

fn fault_kind() -> impl Strategy<Value = FaultKind> {
    prop_oneof![
        4 => Just(FaultKind::Write),
        2 => Just(FaultKind::ShortWrite),
        2 => Just(FaultKind::DiskFull),
        1 => Just(FaultKind::OneResize),
    ]
}

fn edit_fault() -> impl Strategy<Value = Op> {
    let any_edit = (
        prop::bool::weighted(0.3),
        0..TREES.len(),
        faulted_edit(),
        fault_kind(),
        prop_oneof![
            Just(Then::GoOn),
            Just(Then::Retry),
            Just(Then::Rollback),
            Just(Then::Abort),
        ],
        prop::option::of(durability()),
    )
        .prop_map(|(alone, tree, edit, fault, then, commit)| Op::EditFault {
            alone,
            tree,
            edit,
            fault,
            then,
            commit,
        });
    // The review's case: the first edit of a transaction is an append that copies the
    // committed tree's rightmost path, then fails by its value's write; nothing else
    // touches the tree, and the transaction commits.
    let first_append = (0..TREES.len(), overflow_len(), fault_kind(), durability()).prop_map(
        |(tree, len, fault, d)| Op::EditFault {
            alone: true,
            tree,
            edit: FaultedEdit::Append {
                before: 0,
                after: 0,
                len,
            },
            fault,
            then: Then::GoOn,
            commit: Some(d),
        },
    );
    prop_oneof![2 => any_edit, 1 => first_append]
}

/// The name of [`Op::ManyTrees`]'s `i`-th tree.
fn many_name(i: usize) -> String {
    if i % 4 == 3 {
        format!("m{i:02}{}", "~".repeat(250 + i))
    } else {
        format!("m{i:02}")
    }
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..120)
}

// ---- helpers ---------------------------------------------------------------------------

/// Turn an engine error into a test failure with context.
trait Ck<T> {
    fn ck(self, what: impl fmt::Display) -> Result<T, TestCaseError>;
}

impl<T> Ck<T> for larch::Result<T> {
    fn ck(self, what: impl fmt::Display) -> Result<T, TestCaseError> {
        self.map_err(|e| TestCaseError::fail(format!("{what}: engine error: {e}")))
    }
}

fn in_bounds(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let above = match lo {
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(h) => k <= h.as_slice(),
        Bound::Excluded(h) => k < h.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

fn bound_bytes(b: &Bound<Key>, max_key: usize) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.bytes(max_key)),
        Bound::Excluded(k) => Bound::Excluded(k.bytes(max_key)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn show(k: &[u8]) -> String {
    if k.len() > 16 {
        format!("{}.. ({} bytes)", k[..16].escape_ascii(), k.len())
    } else {
        format!("{}", k.escape_ascii())
    }
}

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn collect<'a>(
    it: impl Iterator<Item = larch::Result<(&'a [u8], &'a [u8])>>,
    what: &str,
) -> Result<Entries, TestCaseError> {
    it.map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).ck(what))
        .collect()
}

/// Compare scans entry by entry and report the first difference briefly.
fn same_entries(got: &Entries, want: &Entries, what: &str) -> Result<(), TestCaseError> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.0 != w.0 {
            return Err(TestCaseError::fail(format!(
                "{what}: entry {i}: key {} but the model has {}",
                show(&g.0),
                show(&w.0)
            )));
        }
        if g.1 != w.1 {
            return Err(TestCaseError::fail(format!(
                "{what}: entry {i} (key {}): value of {} bytes differs from the model's {} bytes",
                show(&g.0),
                g.1.len(),
                w.1.len()
            )));
        }
    }
    if got.len() != want.len() {
        return Err(TestCaseError::fail(format!(
            "{what}: {} entries, the model has {}",
            got.len(),
            want.len()
        )));
    }
    Ok(())
}

fn model_entries<'a>(m: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) -> Entries {
    m.map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn tree_not_found(
    r: larch::Result<ReadTree<'_>>,
    name: &str,
    what: &str,
) -> Result<(), TestCaseError> {
    match r {
        Err(Error::TreeNotFound(n)) if n == name => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!(
            "{what}: open_tree({name:?}): expected TreeNotFound, got {e}"
        ))),
        Ok(_) => Err(TestCaseError::fail(format!(
            "{what}: open_tree({name:?}) found a tree the model does not have"
        ))),
    }
}

/// Full comparison of the committed state: names, lengths, forward and reverse scans, gets.
fn verify_all(db: &Db, model: &Model, what: &str) -> Result<(), TestCaseError> {
    verify_snapshot(&db.begin_read().ck(what)?, model, what)
}

/// Full comparison of one snapshot with the model state it was taken at.
fn verify_snapshot(rx: &ReadTx, model: &Model, what: &str) -> Result<(), TestCaseError> {
    let names = rx.tree_names().ck(what)?;
    prop_assert_eq!(
        names,
        model.keys().cloned().collect::<Vec<_>>(),
        "{}: tree_names",
        what
    );
    for (name, m) in model {
        let ctx = format!("{what}: tree {name:?}");
        let t = rx.open_tree(name).ck(&ctx)?;
        prop_assert_eq!(t.len().ck(&ctx)?, m.len() as u64, "{}: len", ctx);
        prop_assert_eq!(t.is_empty().ck(&ctx)?, m.is_empty(), "{}: is_empty", ctx);
        let want = model_entries(m.iter());
        same_entries(
            &collect(t.iter().ck(&ctx)?, &ctx)?,
            &want,
            &format!("{ctx}: forward scan"),
        )?;
        let want_rev = model_entries(m.iter().rev());
        let all = (Bound::<&[u8]>::Unbounded, Bound::<&[u8]>::Unbounded);
        same_entries(
            &collect(t.range(all).ck(&ctx)?.rev(), &ctx)?,
            &want_rev,
            &format!("{ctx}: reverse scan"),
        )?;
        let first = t.first().ck(&ctx)?.map(|(k, _)| k.to_vec());
        prop_assert_eq!(first, m.keys().next().cloned(), "{}: first", ctx);
        let last = t.last().ck(&ctx)?.map(|(k, _)| k.to_vec());
        prop_assert_eq!(last, m.keys().next_back().cloned(), "{}: last", ctx);
        for (k, v) in m {
            let got = t.get(k).ck(&ctx)?;
            prop_assert!(
                got == Some(v.as_slice()),
                "{}: get({}) disagrees with the model",
                ctx,
                show(k)
            );
        }
    }
    for name in TREES {
        if !model.contains_key(name) {
            tree_not_found(rx.open_tree(name), name, what)?;
        }
    }
    Ok(())
}

/// Append `k`/`v` to `t`, expecting what the model says: added if `k` is above the model's
/// last key, otherwise refused with `KeyNotGreater` and nothing changed.
fn append_expect(
    t: &mut larch::WriteTree<'_>,
    m: &mut Tree,
    k: &[u8],
    v: &[u8],
    at: &str,
) -> Result<(), TestCaseError> {
    let model_last = m.keys().next_back().cloned();
    let greater = model_last.as_deref().is_none_or(|l| k > l);
    match t.append(k, v) {
        Ok(()) if greater => {
            m.insert(k.to_vec(), v.to_vec());
            prop_assert!(
                t.get(k).ck(at)? == Some(v),
                "{}: append of {} not read back",
                at,
                show(k)
            );
        }
        Err(Error::KeyNotGreater { key, last }) if !greater => {
            prop_assert_eq!(key.as_slice(), k, "{}: refused key", at);
            prop_assert_eq!(Some(last), model_last, "{}: refusal's last key", at);
            prop_assert!(
                t.get(k).ck(at)? == m.get(k).map(|v| v.as_slice()),
                "{}: a refused append changed {}",
                at,
                show(k)
            );
            prop_assert_eq!(t.len().ck(at)?, m.len() as u64, "{}: len after refusal", at);
        }
        r => {
            return Err(TestCaseError::fail(format!(
                "{at}: append of {} (greater than the last key: {greater}) gave {r:?}",
                show(k)
            )))
        }
    }
    Ok(())
}

// ---- edit faults --------------------------------------------------------------------------

/// The real storage of the case's write mode, with the calls an armed [`FaultKind`] picks
/// failing before they reach it (syncs never fail).
#[derive(Debug)]
struct Faulty {
    inner: FileStorage,
    plan: Arc<Plan>,
}

/// The fault armed around one edit, and what it did.
#[derive(Debug, Default)]
struct Plan(Mutex<Option<(FaultKind, u32)>>);

impl Plan {
    /// Run `f` with `kind` armed; its result, and whether the fault fired.
    fn armed<R>(&self, kind: FaultKind, f: impl FnOnce() -> R) -> (R, bool) {
        *self.0.lock().unwrap() = Some((kind, 0));
        let r = f();
        let (_, hits) = self.0.lock().unwrap().take().expect("armed");
        count_edit_fault(if hits > 0 { kind as usize } else { MISSED });
        (r, hits > 0)
    }

    /// Whether this call fails: the armed kind's first call of its kind, and every later one
    /// when the disk is full. A short write is `Some(true)`.
    fn fails(&self, call: Call) -> Option<bool> {
        let mut p = self.0.lock().unwrap();
        let (kind, hits) = p.as_mut()?;
        if kind.call() != call || (*hits > 0 && *kind != FaultKind::DiskFull) {
            return None;
        }
        *hits += 1;
        Some(*kind == FaultKind::ShortWrite)
    }
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

impl Faulty {
    fn write(&self, offset: u64, bufs: &[&[u8]], deferred: bool) -> io::Result<()> {
        let go = |bufs: &[&[u8]]| {
            if deferred {
                self.inner.write_deferred(offset, bufs)
            } else {
                self.inner.write_at(offset, bufs)
            }
        };
        match self.plan.fails(Call::Write) {
            None => go(bufs),
            Some(false) => Err(io::Error::from_raw_os_error(libc::EIO)),
            Some(true) => {
                let data = bufs.concat();
                go(&[&data[..data.len() / 2]])?;
                Err(enospc())
            }
        }
    }
}

impl Storage for Faulty {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        match self.plan.fails(Call::SetLen) {
            Some(_) => Err(enospc()),
            None => self.inner.set_len(len),
        }
    }

    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write(offset, bufs, false)
    }

    fn write_deferred(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write(offset, bufs, true)
    }

    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }

    fn flush_handle(&self) -> Option<std::fs::File> {
        self.inner.flush_handle()
    }

    // Without it the trait's default ignores the option, and a case with edit faults would
    // run with large folios whatever its config says.
    fn set_cache_folios(&self, folios: CacheFolios) {
        self.inner.set_cache_folios(folios);
    }

    fn file(&self) -> &std::fs::File {
        self.inner.file()
    }
}

/// Open the case's file: by `Db::open`, or, for a case with edit faults (`plan`), on the real
/// storage of its write mode behind [`Faulty`] (attached to the lock file as `Db::open` is).
fn open(path: &Path, opts: Options, plan: Option<&Arc<Plan>>) -> larch::Result<Db> {
    let Some(plan) = plan else {
        return Db::open(path, opts);
    };
    if !path.exists() {
        drop(Db::open(path, opts)?);
    }
    let plan = plan.clone();
    Db::open_with_storage_as_process(
        path,
        move |p| {
            Box::new(Faulty {
                inner: FileStorage::new(open_rw(p), opts.get_write_mode()),
                plan,
            })
        },
        opts,
    )
}

/// Counters of [`EDIT_FAULTS`]: fired by [`FaultKind`] (0-3), armed and not fired, failed
/// edits by what followed ([`Then`], 6-9), failed first appends into a tree the transaction
/// had not changed, the transaction then committed at once.
const MISSED: usize = 4;
const THEN: usize = 5;
const LONE: usize = 9;

thread_local! {
    /// What the edit faults of this thread's cases did (see [`MISSED`]).
    static EDIT_FAULTS: std::cell::Cell<[u64; 10]> = const { std::cell::Cell::new([0; 10]) };
}

fn count_edit_fault(i: usize) {
    EDIT_FAULTS.with(|c| {
        let mut v = c.get();
        v[i] += 1;
        c.set(v);
    });
}

/// After an edit failed by its fault: the error is the system's, and the tree is as the model
/// has it.
fn failed_edit_changed_nothing(
    e: &Error,
    kind: FaultKind,
    t: &larch::WriteTree<'_>,
    m: &Tree,
    at: &str,
) -> Result<(), TestCaseError> {
    let disk_full = kind != FaultKind::Write;
    prop_assert!(
        matches!(e, Error::Io { .. }) && e.is_disk_full() == disk_full,
        "{}: the edit failed by {:?} with {}",
        at,
        kind,
        e
    );
    prop_assert_eq!(
        t.len().ck(at)?,
        m.len() as u64,
        "{}: len after a failed edit",
        at
    );
    same_entries(
        &collect(t.iter().ck(at)?, at)?,
        &model_entries(m.iter()),
        &format!("{at}: after a failed edit"),
    )
}

/// An edit of `t` (model `m`) run with `kind` armed: true if it took effect; false if it
/// failed by the fault (having changed nothing). An error for any other outcome.
fn faulted(
    plan: &Plan,
    kind: FaultKind,
    t: &mut larch::WriteTree<'_>,
    m: &Tree,
    at: &str,
    op: impl FnOnce(&mut larch::WriteTree<'_>) -> larch::Result<()>,
) -> Result<bool, TestCaseError> {
    let (r, fired) = plan.armed(kind, || op(t));
    match r {
        Ok(()) => Ok(true),
        Err(e) if fired => {
            failed_edit_changed_nothing(&e, kind, t, m, at)?;
            Ok(false)
        }
        Err(e) => Err(TestCaseError::fail(format!(
            "{at}: the edit failed without the fault firing: {e}"
        ))),
    }
}

/// Run an [`Op::EditFault`]'s edit in `tx` (the model's working state `work`); whether an
/// edit failed by the fault (made again if `retry`), and whether that was a handle's first
/// append, not made again.
fn run_faulted_edit(
    tx: &WriteTx<'_>,
    work: &mut Model,
    plan: &Plan,
    (tree, edit, kind, retry): (usize, &FaultedEdit, FaultKind, bool),
    max_key: usize,
    append_next: &mut u32,
    at: &str,
) -> Result<(bool, bool), TestCaseError> {
    let name = TREES[tree];
    // A fault on the file's growth comes with a value longer than the slack a file keeps.
    let long = |len: u32| match kind {
        FaultKind::DiskFull | FaultKind::OneResize => 530_000 + len % 40_000,
        _ => len,
    };
    let value = |len: u32| {
        Val {
            byte: len as u8,
            len: long(len),
        }
        .bytes()
    };
    match edit {
        FaultedEdit::Insert { key, len } => {
            let (k, v) = (key.bytes(max_key), value(*len));
            let m = work.entry(name.to_string()).or_default();
            let mut t = tx.open_tree(name).ck(at)?;
            let ok = faulted(plan, kind, &mut t, m, at, |t| t.insert(&k, &v))?;
            if ok || retry {
                if !ok {
                    t.insert(&k, &v).ck(at)?;
                }
                m.insert(k.clone(), v.clone());
                prop_assert!(
                    t.get(&k).ck(at)? == Some(&v[..]),
                    "{}: insert read back",
                    at
                );
            }
            Ok((!ok, false))
        }
        FaultedEdit::Append { before, after, len } => {
            let m = work.entry(name.to_string()).or_default();
            let mut t = tx.open_tree(name).ck(at)?;
            let mut next_key = || {
                let mut k = vec![0xff; 3];
                k.extend_from_slice(format!("{:06}", *append_next).as_bytes());
                *append_next += 1;
                k
            };
            for j in 0..*before {
                append_expect(&mut t, m, &next_key(), &[j as u8; 40], at)?;
            }
            let (k, v) = (next_key(), value(*len));
            let mut failed = false;
            if m.keys().next_back().is_none_or(|l| k > *l) {
                let ok = faulted(plan, kind, &mut t, m, at, |t| t.append(&k, &v))?;
                if !ok && retry {
                    t.append(&k, &v).ck(at)?;
                }
                if ok || retry {
                    m.insert(k.clone(), v.clone());
                }
                failed = !ok;
            } else {
                // Refused before anything is written: nothing to fail.
                append_expect(&mut t, m, &k, &v, at)?;
            }
            for j in 0..*after {
                append_expect(&mut t, m, &next_key(), &[j as u8; 40], at)?;
            }
            prop_assert_eq!(t.len().ck(at)?, m.len() as u64, "{}: len", at);
            let last = t.last().ck(at)?.map(|(k, _)| k.to_vec());
            prop_assert_eq!(last, m.keys().next_back().cloned(), "{}: last", at);
            Ok((failed, failed && !retry && *before == 0))
        }
        FaultedEdit::Pair {
            other,
            key,
            len,
            second,
        } => {
            let (k, v) = (key.bytes(max_key), value(*len));
            let (a, b) = (TREES[tree], TREES[*other]);
            if a == b {
                let insert = FaultedEdit::Insert {
                    key: key.clone(),
                    len: *len,
                };
                return run_faulted_edit(
                    tx,
                    work,
                    plan,
                    (tree, &insert, kind, retry),
                    max_key,
                    append_next,
                    at,
                );
            }
            let mut ta = tx.open_tree(a).ck(at)?;
            let mut tb = tx.open_tree(b).ck(at)?;
            let mut failed = false;
            for (name, t, faulty) in [(a, &mut ta, !second), (b, &mut tb, *second)] {
                let m = work.entry(name.to_string()).or_default();
                if faulty {
                    let ok = faulted(plan, kind, t, m, at, |t| t.insert(&k, &v))?;
                    if !ok && retry {
                        t.insert(&k, &v).ck(at)?;
                    }
                    failed = !ok;
                    if failed && !retry {
                        continue;
                    }
                } else {
                    t.insert(&k, &v).ck(at)?;
                }
                m.insert(k.clone(), v.clone());
            }
            let (ga, gb) = (ta.get(&k).ck(at)?, tb.get(&k).ck(at)?);
            let (ma, mb) = (&work[a], &work[b]);
            prop_assert!(
                ga == ma.get(&k).map(|v| &v[..]) && gb == mb.get(&k).map(|v| &v[..]),
                "{}: side by side reads",
                at
            );
            Ok((failed, false))
        }
        FaultedEdit::CursorPut { from, len } => {
            let (from, v) = (from.bytes(max_key), value(*len));
            let m = work.entry(name.to_string()).or_default();
            let mut t = tx.open_tree(name).ck(at)?;
            let Some((target, old)) = m
                .range(from.clone()..)
                .next()
                .map(|(k, v)| (k.clone(), v.clone()))
            else {
                return Ok((false, false));
            };
            let mut c = t.cursor();
            let got = c.seek(&from).ck(at)?.map(|(k, _)| k.to_vec());
            prop_assert_eq!(got.as_ref(), Some(&target), "{}: seek", at);
            let (r, fired) = plan.armed(kind, || c.put_current(&v));
            let ok = match r {
                Ok(()) => true,
                Err(e) if fired => {
                    let now = c.current().ck(at)?.map(|(k, v)| (k.to_vec(), v.to_vec()));
                    prop_assert!(
                        now == Some((target.clone(), old.clone())),
                        "{}: the cursor's entry after a failed put",
                        at
                    );
                    drop(c);
                    failed_edit_changed_nothing(&e, kind, &t, m, at)?;
                    c = t.cursor();
                    c.seek(&from).ck(at)?;
                    false
                }
                Err(e) => {
                    return Err(TestCaseError::fail(format!(
                        "{at}: put_current failed without the fault firing: {e}"
                    )))
                }
            };
            if !ok && retry {
                c.put_current(&v).ck(at)?;
            }
            if ok || retry {
                m.insert(target.clone(), v.clone());
                let now = c.current().ck(at)?.map(|(_, v)| v.to_vec());
                prop_assert!(now == Some(v), "{}: current after put", at);
            }
            Ok((!ok, false))
        }
    }
}

/// Commit `t` with `d`: the model's working state becomes the committed one, which the file
/// (checked), a read transaction and every held snapshot must agree with.
fn commit_and_verify(
    db: &Db,
    mut t: WriteTx<'_>,
    d: Durability,
    work: &Model,
    committed: &mut Model,
    snapshots: &[(ReadTx, Model)],
    at: &str,
) -> Result<(), TestCaseError> {
    t.set_durability(d);
    t.commit().ck(at)?;
    *committed = work.clone();
    db.check().ck(at)?;
    verify_all(db, committed, at)?;
    for (j, (rx, m)) in snapshots.iter().enumerate() {
        verify_snapshot(rx, m, &format!("{at}: held snapshot {j}"))?;
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
struct Config {
    policy: Policy,
    mode: WriteMode,
    page_size: usize,
    folios: CacheFolios,
}

fn ensure_tx<'a, 'db>(
    db: &'db Db,
    tx: &'a mut Option<WriteTx<'db>>,
    work: &mut Model,
    committed: &Model,
) -> Result<&'a mut WriteTx<'db>, TestCaseError> {
    if tx.is_none() {
        *tx = Some(db.begin_write().ck("begin_write")?);
        *work = committed.clone();
    }
    Ok(tx.as_mut().expect("just set"))
}

fn run(cfg: Config, ops: &[Op]) -> Result<(), TestCaseError> {
    // Half the cases take the free set's batch paths for every batch of pages a commit
    // frees or takes (`ExtentSet::insert_sorted`, `take_lowest`), which this model's small
    // trees would not reach at their real thresholds (32 runs and 1/8 of the set).
    larch::set_bulk_batch_min(if ops.len() % 2 == 0 { 1 } else { 0 });
    // Two cases in three write the full leaves of their appends before the commit in
    // batches of 1 or 2 (`larch::set_spill_batch`), where the built-in 64 would need
    // longer appends than these make; the third keeps the built-in batch.
    larch::set_spill_batch([1, 2, 0][(ops.len() / 2) % 3]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.larch");
    let opts = Options::default()
        .page_size(cfg.page_size)
        .policy(cfg.policy)
        .write_mode(cfg.mode)
        .cache_folios(cfg.folios)
        .durability(Durability::Sync);
    let max_key = cfg.page_size / 4;
    let mut committed = Model::new();
    // Per tree, the number in the next appended key.
    let mut append_next = [0u32; TREES.len()];
    let mut next = 0;
    let mut session = 0;
    let plan =
        (ops.iter().any(|o| matches!(o, Op::EditFault { .. }))).then(|| Arc::new(Plan::default()));
    loop {
        let db = open(&path, opts, plan.as_ref()).ck(format!("open (session {session})"))?;
        let ctx = format!("after reopen {session}");
        db.check().ck(&ctx)?;
        verify_all(&db, &committed, &ctx)?;
        let mut snapshots: Vec<(ReadTx, Model)> = Vec::new();
        let mut tx: Option<WriteTx<'_>> = None;
        let mut work = committed.clone();
        // Savepoints of the open transaction, in the order taken, with the model state at
        // each and whether a rollback discarded it.
        let mut savepoints: Vec<(Savepoint, Model, bool)> = Vec::new();
        let mut reopen = false;
        while next < ops.len() {
            let i = next;
            next += 1;
            if tx.is_none() {
                savepoints.clear();
            }
            let at = format!("op {i} ({:?})", ops[i]);
            match &ops[i] {
                Op::Insert { tree, key, val } => {
                    let (name, k, v) = (TREES[*tree], key.bytes(max_key), val.bytes());
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    t.insert(&k, &v).ck(&at)?;
                    m.insert(k.clone(), v.clone());
                    prop_assert!(
                        t.get(&k).ck(&at)? == Some(v.as_slice()),
                        "{}: insert not read back",
                        at
                    );
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                }
                Op::Remove { tree, key } => {
                    let (name, k) = (TREES[*tree], key.bytes(max_key));
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    let existed = t.remove(&k).ck(&at)?;
                    prop_assert_eq!(existed, m.remove(&k).is_some(), "{}: remove's return", at);
                    prop_assert_eq!(
                        t.get(&k).ck(&at)?,
                        None,
                        "{}: removed key still readable",
                        at
                    );
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                }
                Op::Get { tree, key } => {
                    let (name, k) = (TREES[*tree], key.bytes(max_key));
                    if let Some(tx) = tx.as_mut() {
                        // open_tree creates a missing tree, in the model too.
                        let m = work.entry(name.to_string()).or_default();
                        let t = tx.open_tree(name).ck(&at)?;
                        let got = t.get(&k).ck(&at)?;
                        prop_assert!(
                            got == m.get(&k).map(|v| v.as_slice()),
                            "{}: write tx get: engine has {:?} bytes, model {:?} bytes",
                            at,
                            got.map(|v| v.len()),
                            m.get(&k).map(|v| v.len())
                        );
                    }
                    // A reader sees only committed state, whether or not a writer is active.
                    let rx = db.begin_read().ck(&at)?;
                    match committed.get(name) {
                        Some(m) => {
                            let t = rx.open_tree(name).ck(&at)?;
                            let got = t.get(&k).ck(&at)?;
                            prop_assert!(
                                got == m.get(&k).map(|v| v.as_slice()),
                                "{}: read tx get disagrees",
                                at
                            );
                        }
                        None => tree_not_found(rx.open_tree(name), name, &at)?,
                    }
                }
                Op::Range { tree, lo, hi, rev } => {
                    let name = TREES[*tree];
                    let (lo, hi) = (bound_bytes(lo, max_key), bound_bytes(hi, max_key));
                    let rx = db.begin_read().ck(&at)?;
                    match committed.get(name) {
                        Some(m) => {
                            let t = rx.open_tree(name).ck(&at)?;
                            let it = t.range((as_slice(&lo), as_slice(&hi))).ck(&at)?;
                            let matching = m.iter().filter(|(k, _)| in_bounds(k, &lo, &hi));
                            let (got, want) = if *rev {
                                (collect(it.rev(), &at)?, model_entries(matching.rev()))
                            } else {
                                (collect(it, &at)?, model_entries(matching))
                            };
                            same_entries(&got, &want, &at)?;
                        }
                        None => tree_not_found(rx.open_tree(name), name, &at)?,
                    }
                }
                Op::Fill {
                    tree,
                    prefix,
                    pad,
                    start,
                    count,
                    val,
                } => {
                    let name = TREES[*tree];
                    let pad = (*pad as usize).min(max_key - 6);
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    for j in 0..*count as u32 {
                        let mut k = vec![*prefix];
                        k.resize(1 + pad, b'~');
                        k.extend_from_slice(format!("{:05}", *start as u32 + j).as_bytes());
                        let v = Val {
                            byte: val.byte.wrapping_add(j as u8),
                            len: val.len,
                        }
                        .bytes();
                        t.insert(&k, &v).ck(&at)?;
                        m.insert(k, v);
                    }
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                }
                Op::RemoveRange {
                    tree,
                    lo,
                    hi,
                    stride,
                } => {
                    let name = TREES[*tree];
                    let (lo, hi) = (bound_bytes(lo, max_key), bound_bytes(hi, max_key));
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    let victims: Vec<Vec<u8>> = m
                        .keys()
                        .filter(|k| in_bounds(k, &lo, &hi))
                        .step_by(*stride as usize)
                        .cloned()
                        .collect();
                    for k in victims {
                        prop_assert!(
                            t.remove(&k).ck(&at)?,
                            "{}: remove({}) of a present key returned false",
                            at,
                            show(&k)
                        );
                        m.remove(&k);
                    }
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                }
                Op::DeleteTree { tree } => {
                    let name = TREES[*tree];
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let existed = tx.delete_tree(name).ck(&at)?;
                    prop_assert_eq!(
                        existed,
                        work.remove(name).is_some(),
                        "{}: delete_tree's return",
                        at
                    );
                    let names = tx.tree_names().ck(&at)?;
                    prop_assert_eq!(
                        names,
                        work.keys().cloned().collect::<Vec<_>>(),
                        "{}: tree_names in the write tx",
                        at
                    );
                }
                Op::TxRange { tree, lo, hi, rev } => {
                    let name = TREES[*tree];
                    let (lo, hi) = (bound_bytes(lo, max_key), bound_bytes(hi, max_key));
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let t = tx.open_tree(name).ck(&at)?;
                    let it = t.range((as_slice(&lo), as_slice(&hi))).ck(&at)?;
                    let matching = m.iter().filter(|(k, _)| in_bounds(k, &lo, &hi));
                    let (got, want) = if *rev {
                        (collect(it.rev(), &at)?, model_entries(matching.rev()))
                    } else {
                        (collect(it, &at)?, model_entries(matching))
                    };
                    same_entries(&got, &want, &at)?;
                    // Both ends of one range meet in the middle without repeating an entry.
                    let mut it = t.range((as_slice(&lo), as_slice(&hi))).ck(&at)?;
                    let mut ends = Vec::new();
                    loop {
                        let (f, b) = (it.next(), it.next_back());
                        if f.is_none() && b.is_none() {
                            break;
                        }
                        ends.extend(
                            f.into_iter()
                                .chain(b)
                                .map(|e| e.ck(&at).map(|(k, _)| k.to_vec())),
                        );
                    }
                    let mut ends = ends.into_iter().collect::<Result<Vec<_>, _>>()?;
                    ends.sort();
                    let keys: Vec<Vec<u8>> = want.iter().map(|(k, _)| k.clone()).collect();
                    let mut keys_sorted = keys.clone();
                    keys_sorted.sort();
                    prop_assert_eq!(ends, keys_sorted, "{}: front and back meeting", at);
                    let first = t.first().ck(&at)?.map(|(k, v)| (k.to_vec(), v.to_vec()));
                    prop_assert_eq!(
                        first,
                        m.iter().next().map(|(k, v)| (k.clone(), v.clone())),
                        "{}: first",
                        at
                    );
                    let last = t.last().ck(&at)?.map(|(k, v)| (k.to_vec(), v.to_vec()));
                    prop_assert_eq!(
                        last,
                        m.iter().next_back().map(|(k, v)| (k.clone(), v.clone())),
                        "{}: last",
                        at
                    );
                }
                Op::RemoveSpan { tree, lo, hi } => {
                    let name = TREES[*tree];
                    let (lo, hi) = (bound_bytes(lo, max_key), bound_bytes(hi, max_key));
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    let before = m.len();
                    m.retain(|k, _| !in_bounds(k, &lo, &hi));
                    let n = t.remove_range((as_slice(&lo), as_slice(&hi))).ck(&at)?;
                    prop_assert_eq!(n, (before - m.len()) as u64, "{}: remove_range's count", at);
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                    same_entries(
                        &collect(t.iter().ck(&at)?, &at)?,
                        &model_entries(m.iter()),
                        &at,
                    )?;
                }
                Op::Retain { tree, modulo } => {
                    let name = TREES[*tree];
                    let keep = |k: &[u8], v: &[u8]| (k.len() + v.len()) % *modulo as usize != 0;
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    let before = m.len();
                    m.retain(|k, v| keep(k, v));
                    let n = t.retain(keep).ck(&at)?;
                    prop_assert_eq!(n, (before - m.len()) as u64, "{}: retain's count", at);
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                }
                Op::Pop { tree, last } => {
                    let name = TREES[*tree];
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    let (got, want) = if *last {
                        (t.pop_last().ck(&at)?, m.pop_last())
                    } else {
                        (t.pop_first().ck(&at)?, m.pop_first())
                    };
                    prop_assert_eq!(got, want, "{}: popped entry", at);
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                }
                Op::CursorEdit {
                    tree,
                    from,
                    back,
                    stride,
                    val,
                } => {
                    let name = TREES[*tree];
                    let v = val.bytes();
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    let from = from.as_ref().map(|k| k.bytes(max_key));
                    // The entries the walk visits, in its order.
                    let visit: Vec<Vec<u8>> = match (&from, *back) {
                        (None, false) => m.keys().cloned().collect(),
                        (None, true) => m.keys().rev().cloned().collect(),
                        (Some(f), false) => m.range(f.clone()..).map(|(k, _)| k.clone()).collect(),
                        (Some(f), true) => m
                            .range(f.clone()..)
                            .map(|(k, _)| k.clone())
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect(),
                    };
                    let mut c = t.cursor();
                    let mut step = 0usize;
                    let mut seen = Vec::new();
                    let mut cur = match (&from, *back) {
                        (None, false) => c.next().ck(&at)?.map(|(k, _)| k.to_vec()),
                        (None, true) => c.prev().ck(&at)?.map(|(k, _)| k.to_vec()),
                        (Some(f), false) => c.seek(f).ck(&at)?.map(|(k, _)| k.to_vec()),
                        (Some(_), true) => c.last().ck(&at)?.map(|(k, _)| k.to_vec()),
                    };
                    while let Some(k) = cur {
                        if let Some(f) = &from {
                            if *back && k < *f {
                                break;
                            }
                        }
                        seen.push(k.clone());
                        if step % *stride as usize == 0 {
                            prop_assert!(c.delete_current().ck(&at)?, "{}: delete_current", at);
                            prop_assert_eq!(
                                c.current().ck(&at)?,
                                None,
                                "{}: current after delete",
                                at
                            );
                            m.remove(&k);
                        } else {
                            c.put_current(&v).ck(&at)?;
                            let now = c.current().ck(&at)?.map(|(k, v)| (k.to_vec(), v.to_vec()));
                            prop_assert_eq!(
                                now,
                                Some((k.clone(), v.clone())),
                                "{}: current after put",
                                at
                            );
                            m.insert(k.clone(), v.clone());
                        }
                        step += 1;
                        cur = if *back { c.prev() } else { c.next() }
                            .ck(&at)?
                            .map(|(k, _)| k.to_vec());
                    }
                    prop_assert_eq!(seen, visit, "{}: entries the cursor visited", at);
                    drop(c);
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                }
                Op::SideBySide { a, b, key, val } => {
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let (k, v) = (key.bytes(max_key), val.bytes());
                    let ta = tx.open_tree(TREES[*a]);
                    if a == b {
                        // A tree is open once at a time.
                        let mut ta = ta.ck(&at)?;
                        match tx.open_tree(TREES[*b]) {
                            Err(Error::TreeAlreadyOpen(n)) if n == TREES[*b] => {}
                            other => prop_assert!(
                                false,
                                "{}: second open gave {:?}",
                                at,
                                other.map(|_| ())
                            ),
                        }
                        ta.insert(&k, &v).ck(&at)?;
                        work.entry(TREES[*a].to_string())
                            .or_default()
                            .insert(k.clone(), v.clone());
                    } else {
                        let mut ta = ta.ck(&at)?;
                        let mut tb = tx.open_tree(TREES[*b]).ck(&at)?;
                        let v2: Vec<u8> = v.iter().rev().copied().collect();
                        ta.insert(&k, &v).ck(&at)?;
                        tb.insert(&k, &v2).ck(&at)?;
                        let (ga, gb) = (ta.get(&k).ck(&at)?, tb.get(&k).ck(&at)?);
                        prop_assert!(
                            ga == Some(&v[..]) && gb == Some(&v2[..]),
                            "{}: side by side reads",
                            at
                        );
                        work.entry(TREES[*a].to_string())
                            .or_default()
                            .insert(k.clone(), v);
                        work.entry(TREES[*b].to_string()).or_default().insert(k, v2);
                    }
                }
                Op::Append {
                    tree,
                    pad,
                    count,
                    val,
                    mix,
                    refuse,
                } => {
                    let name = TREES[*tree];
                    let pad = (*pad as usize).min(max_key - 9);
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    let m = work.entry(name.to_string()).or_default();
                    let mut t = tx.open_tree(name).ck(&at)?;
                    let mut last_appended: Option<Vec<u8>> = None;
                    for j in 0..*count as u32 {
                        if j == *count as u32 / 2 {
                            if let Some(key) = mix {
                                let k = key.bytes(max_key);
                                t.insert(&k, b"mixed").ck(&at)?;
                                m.insert(k, b"mixed".to_vec());
                                if let Some(k) = last_appended.take() {
                                    prop_assert!(t.remove(&k).ck(&at)?, "{}: remove", at);
                                    m.remove(&k);
                                }
                            }
                        }
                        let mut k = vec![0xff; 3];
                        k.extend_from_slice(format!("{:06}", append_next[*tree]).as_bytes());
                        k.resize(k.len() + pad, b'~');
                        append_next[*tree] += 1;
                        let v = Val {
                            byte: val.byte.wrapping_add(j as u8),
                            len: val.len,
                        }
                        .bytes();
                        append_expect(&mut t, m, &k, &v, &at)?;
                        if m.contains_key(&k) {
                            last_appended = Some(k);
                        }
                    }
                    if *refuse {
                        if let Some(last) = m.keys().next_back().cloned() {
                            append_expect(&mut t, m, &last, b"refused", &at)?;
                        }
                    }
                    prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                    let last = t.last().ck(&at)?.map(|(k, _)| k.to_vec());
                    prop_assert_eq!(last, m.keys().next_back().cloned(), "{}: last", at);
                }
                Op::ManyTrees {
                    count,
                    key,
                    val,
                    delete,
                } => {
                    let (k, v) = (key.bytes(max_key), val.bytes());
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    for i in 0..*count as usize {
                        let name = many_name(i);
                        if *delete && i % 3 == 0 {
                            let existed = tx.delete_tree(&name).ck(&at)?;
                            prop_assert_eq!(
                                existed,
                                work.remove(&name).is_some(),
                                "{}: delete_tree({})'s return",
                                at,
                                i
                            );
                        } else {
                            let m = work.entry(name.clone()).or_default();
                            let mut t = tx.open_tree(&name).ck(&at)?;
                            t.insert(&k, &v).ck(&at)?;
                            m.insert(k.clone(), v.clone());
                            prop_assert_eq!(t.len().ck(&at)?, m.len() as u64, "{}: len", at);
                        }
                    }
                    let names = tx.tree_names().ck(&at)?;
                    prop_assert_eq!(
                        names,
                        work.keys().cloned().collect::<Vec<_>>(),
                        "{}: tree_names in the write tx",
                        at
                    );
                }
                Op::Savepoint => {
                    let tx = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    savepoints.push((tx.savepoint(), work.clone(), false));
                }
                Op::RollbackTo { which } => {
                    let Some(tx) = tx.as_mut() else { continue };
                    if savepoints.is_empty() {
                        continue;
                    }
                    let j = *which as usize % savepoints.len();
                    let r = tx.rollback_to(&savepoints[j].0);
                    if savepoints[j].2 {
                        prop_assert!(
                            matches!(r, Err(Error::InvalidSavepoint)),
                            "{}: a discarded savepoint was accepted",
                            at
                        );
                    } else {
                        r.ck(&at)?;
                        work = savepoints[j].1.clone();
                        for later in &mut savepoints[j + 1..] {
                            later.2 = true;
                        }
                        let names = tx.tree_names().ck(&at)?;
                        prop_assert_eq!(
                            names,
                            work.keys().cloned().collect::<Vec<_>>(),
                            "{}: tree_names after rollback",
                            at
                        );
                        for (name, m) in &work {
                            let t = tx.open_tree(name).ck(&at)?;
                            same_entries(
                                &collect(t.iter().ck(&at)?, &at)?,
                                &model_entries(m.iter()),
                                &format!("{at}: tree {name:?} after rollback"),
                            )?;
                        }
                    }
                }
                Op::Commit(d) => {
                    let mut t = match tx.take() {
                        Some(t) => t,
                        None => {
                            work = committed.clone();
                            db.begin_write().ck(&at)?
                        }
                    };
                    let names = t.tree_names().ck(&at)?;
                    prop_assert_eq!(
                        names,
                        work.keys().cloned().collect::<Vec<_>>(),
                        "{}: tree_names before commit",
                        at
                    );
                    t.set_durability(*d);
                    t.commit().ck(&at)?;
                    committed = work.clone();
                    db.check().ck(&at)?;
                    verify_all(&db, &committed, &at)?;
                    for (j, (rx, m)) in snapshots.iter().enumerate() {
                        verify_snapshot(rx, m, &format!("{at}: held snapshot {j}"))?;
                    }
                }
                Op::Abort { explicit } => {
                    if let Some(t) = tx.take() {
                        if *explicit {
                            t.abort();
                        } else {
                            drop(t);
                        }
                    }
                    work = committed.clone();
                    db.check().ck(&at)?;
                    verify_all(&db, &committed, &at)?;
                    for (j, (rx, m)) in snapshots.iter().enumerate() {
                        verify_snapshot(rx, m, &format!("{at}: held snapshot {j}"))?;
                    }
                }
                Op::EditFault {
                    alone,
                    tree,
                    edit,
                    fault,
                    then,
                    commit,
                } => {
                    let plan = plan.as_deref().expect("a case with edit faults has a plan");
                    let name = TREES[*tree];
                    if let (true, Some(mut t)) = (alone, tx.take()) {
                        // Async, and checked with the commit after it: no more fdatasyncs and
                        // checks than the case had.
                        t.set_durability(Durability::Async);
                        t.commit().ck(format!("{at}: the transaction before"))?;
                        committed = work.clone();
                    }
                    // Nothing in this transaction changed the tree, which holds entries: a
                    // failed first append copies its committed path and leaves it so.
                    let untouched = committed.get(name).is_some_and(|m| !m.is_empty())
                        && work.get(name) == committed.get(name);
                    let t = ensure_tx(&db, &mut tx, &mut work, &committed)?;
                    if *then == Then::Rollback {
                        savepoints.push((t.savepoint(), work.clone(), false));
                    }
                    let (failed, first_append) = run_faulted_edit(
                        t,
                        &mut work,
                        plan,
                        (*tree, edit, *fault, *then == Then::Retry),
                        max_key,
                        &mut append_next[*tree],
                        &at,
                    )?;
                    if failed {
                        count_edit_fault(THEN + *then as usize);
                    }
                    match then {
                        Then::GoOn | Then::Retry => {}
                        Then::Rollback => {
                            let (sp, state, _) = savepoints.last().expect("just taken");
                            t.rollback_to(sp).ck(&at)?;
                            work = state.clone();
                            for (name, m) in &work {
                                let wt = t.open_tree(name).ck(&at)?;
                                same_entries(
                                    &collect(wt.iter().ck(&at)?, &at)?,
                                    &model_entries(m.iter()),
                                    &format!("{at}: tree {name:?} after rollback"),
                                )?;
                            }
                        }
                        Then::Abort => {
                            tx.take().expect("open").abort();
                            work = committed.clone();
                            db.check().ck(&at)?;
                            verify_all(&db, &committed, &at)?;
                        }
                    }
                    if let (Some(d), Some(t)) = (commit, tx.take()) {
                        commit_and_verify(&db, t, *d, &work, &mut committed, &snapshots, &at)?;
                        if first_append && untouched && *then == Then::GoOn {
                            count_edit_fault(LONE);
                        }
                    }
                }
                Op::Reopen => {
                    reopen = true;
                    break;
                }
                Op::Snapshot => {
                    if snapshots.len() == 2 {
                        snapshots.remove(0);
                    }
                    snapshots.push((db.begin_read().ck(&at)?, committed.clone()));
                }
                Op::DropSnapshot => {
                    if !snapshots.is_empty() {
                        snapshots.remove(0);
                    }
                }
            }
        }
        drop(tx);
        for (j, (rx, m)) in snapshots.iter().enumerate() {
            verify_snapshot(
                rx,
                m,
                &format!("held snapshot {j} at the end of session {session}"),
            )?;
        }
        drop(snapshots);
        if !reopen {
            // Every case ends with a check, then one more reopen.
            db.check().ck("at the end")?;
            verify_all(&db, &committed, "at the end")?;
            tally(&db);
            drop(db);
            let db = open(&path, opts, plan.as_ref()).ck("final reopen")?;
            db.check().ck("after the final reopen")?;
            verify_all(&db, &committed, "after the final reopen")?;
            return Ok(());
        }
        tally(&db);
        drop(db);
        session += 1;
    }
}

thread_local! {
    /// How overfull leaves made room in this thread's cases so far (`Db::leaf_overflows`):
    /// shared with a dirty sibling, with a clean one, three from two. A model test's cases
    /// run on its own thread.
    static LEAF_OVERFLOWS: std::cell::Cell<[u64; 3]> = const { std::cell::Cell::new([0; 3]) };
    /// Leaves appends wrote before their commit (`IoStats::spilled_pages`).
    static SPILLED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Count what a handle's overfull leaves did, before it is dropped.
fn tally(db: &Db) {
    SPILLED.with(|c| c.set(c.get() + db.io_stats().spilled_pages));
    let o = db.leaf_overflows();
    LEAF_OVERFLOWS.with(|c| {
        let [a, b, t] = c.get();
        c.set([
            a + o.shared_with_dirty,
            b + o.shared_with_clean,
            t + o.three_from_two,
        ]);
    });
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}

/// Run `cases` (a proptest body) and require that, over the cases that ran, overfull leaves
/// took each of the ways to share entries before splitting (redistribute.rs), and edits
/// failed by each kind of fault and went on each way: the strategy reaches them under this
/// configuration.
fn with_leaf_overflows(name: &str, cases: impl FnOnce()) {
    LEAF_OVERFLOWS.with(|c| c.set([0; 3]));
    EDIT_FAULTS.with(|c| c.set([0; 10]));
    SPILLED.with(|c| c.set(0));
    let bulk_before = larch::bulk_batches();
    cases();
    // `run` sends half the cases down the free set's batch paths: they must be reached (the
    // batch take only where the policy hands out pages in batches: FirstFit).
    let bulk = larch::bulk_batches();
    let (inserts, takes) = (bulk[0] - bulk_before[0], bulk[1] - bulk_before[1]);
    eprintln!("{name}: free-set batch inserts {inserts}, batch takes {takes}");
    if self::cases() >= 32 {
        assert!(
            inserts > 0 && (takes > 0 || !name.starts_with("first_fit")),
            "{name}: the cases no longer reach the free set's batch paths: inserts {inserts}, \
             takes {takes}"
        );
    }
    // `run` makes most cases write full leaves of their appends before the commit in
    // batches of 1 or 2 (`larch::set_spill_batch`): those runs must be reached wherever the
    // policy gives dirty nodes their pages at commit (FirstFit and BestFit; Null and
    // AppendPreferring give each its page when it becomes dirty, and the commit writes it).
    let spilled = SPILLED.with(|c| c.get());
    eprintln!("{name}: leaves appends wrote before their commit {spilled}");
    if self::cases() >= 32 && (name.starts_with("first_fit") || name.starts_with("best_fit")) {
        assert!(
            spilled > 0,
            "{name}: the cases no longer write appended leaves before their commit"
        );
    }
    let e = EDIT_FAULTS.with(|c| c.get());
    eprintln!(
        "{name}: edit faults fired {} (write {}, short write {}, disk full {}, one resize {}), \
         armed and not reached {}; failed edits then went on {}, were made again {}, rolled \
         back {}, aborted {}; failed first appends committed alone in their tree {}",
        e[..4].iter().sum::<u64>(),
        e[0],
        e[1],
        e[2],
        e[3],
        e[MISSED],
        e[THEN],
        e[THEN + 1],
        e[THEN + 2],
        e[THEN + 3],
        e[LONE],
    );
    if self::cases() >= 32 {
        assert!(
            // Each a sum that 64 cases make 15 or more of: none is 0 by chance.
            e[0] + e[1] > 0
                && e[2] + e[3] > 0
                && e[THEN] > 0
                && e[THEN + 1] + e[THEN + 2] + e[THEN + 3] > 0
                && e[LONE] > 0,
            "{name}: the strategy no longer fails edits every way and goes on every way: {e:?}"
        );
    }
    let [dirty, clean, three] = LEAF_OVERFLOWS.with(|c| c.get());
    eprintln!("{name}: leaf shares with a dirty sibling {dirty}, a clean one {clean}, three from two {three}");
    if self::cases() >= 32 {
        assert!(
            dirty > 0 && clean > 0 && three > 0,
            "{name}: the strategy no longer reaches every way an overfull leaf shares: \
             with a dirty sibling {dirty}, a clean one {clean}, three from two {three}"
        );
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/model.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

macro_rules! model_test {
    ($name:ident, $policy:expr, $mode:expr, $page_size:expr) => {
        model_test!($name, $policy, $mode, $page_size, CacheFolios::Small);
    };
    ($name:ident, $policy:expr, $mode:expr, $page_size:expr, $folios:expr) => {
        #[test]
        fn $name() {
            proptest! {
                #![proptest_config(config())]
                fn cases(ops in ops()) {
                    let cfg = Config {
                        policy: $policy,
                        mode: $mode,
                        page_size: $page_size,
                        folios: $folios,
                    };
                    run(cfg, &ops)?;
                }
            }
            with_leaf_overflows(stringify!($name), cases);
        }
    };
}

model_test!(
    null_pwrite_4k_matches_model,
    Policy::Null,
    WriteMode::Pwrite,
    4096
);
model_test!(
    null_pwrite_16k_matches_model,
    Policy::Null,
    WriteMode::Pwrite,
    16384
);
model_test!(
    null_mmap_4k_matches_model,
    Policy::Null,
    WriteMode::Mmap,
    4096
);
model_test!(
    null_mmap_16k_matches_model,
    Policy::Null,
    WriteMode::Mmap,
    16384
);
model_test!(
    first_fit_pwrite_4k_matches_model,
    Policy::FirstFit,
    WriteMode::Pwrite,
    4096
);
// Large folios (single-page ones are the default) change only how the kernel caches the
// pages written: the same model.
model_test!(
    first_fit_pwrite_4k_large_folios_matches_model,
    Policy::FirstFit,
    WriteMode::Pwrite,
    4096,
    CacheFolios::Large
);
model_test!(
    first_fit_pwrite_16k_matches_model,
    Policy::FirstFit,
    WriteMode::Pwrite,
    16384
);
model_test!(
    first_fit_mmap_4k_matches_model,
    Policy::FirstFit,
    WriteMode::Mmap,
    4096
);
model_test!(
    first_fit_mmap_16k_matches_model,
    Policy::FirstFit,
    WriteMode::Mmap,
    16384
);
model_test!(
    first_fit_hybrid_4k_matches_model,
    Policy::FirstFit,
    WriteMode::Hybrid,
    4096
);
model_test!(
    null_hybrid_16k_matches_model,
    Policy::Null,
    WriteMode::Hybrid,
    16384
);
model_test!(
    best_fit_pwrite_4k_matches_model,
    Policy::BestFit,
    WriteMode::Pwrite,
    4096
);
model_test!(
    append_preferring_pwrite_4k_matches_model,
    Policy::AppendPreferring,
    WriteMode::Pwrite,
    4096
);
