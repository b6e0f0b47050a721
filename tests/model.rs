//! Model test: random operation sequences against larch and against a `BTreeMap` model of
//! the committed state plus a working copy for the open write transaction.
//!
//! Null and FirstFit run the same strategy under every write mode and page size; BestFit (which
//! also hands out runs, so the commit gathers the dirty nodes' pages: alloc.rs) and
//! AppendPreferring (which does not) under pwrite with 4 KiB pages.
//! `PROPTEST_CASES` raises the number of cases (default 64 per combination).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use larch::{
    Db, Durability, Error, Options, Policy, ReadTree, ReadTx, Savepoint, WriteMode, WriteTx,
};
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
    /// Take a savepoint in the write transaction.
    Savepoint,
    /// Roll back to the `which`-th savepoint taken (counting those a rollback discarded, which
    /// must be refused).
    RollbackTo {
        which: u8,
    },
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
        2 => (0u8..4).prop_map(|which| Op::RollbackTo { which }),
        6 => (
            tree.clone(),
            prop::sample::select(vec![0u16, 0, 0, 250, 1000]),
            prop_oneof![8 => (small_val(), 1u16..300), 1 => (val(), 1u16..12)],
            prop::option::weighted(0.3, key()),
            prop::bool::weighted(0.3),
        )
            .prop_map(|(tree, pad, (val, count), mix, refuse)| Op::Append { tree, pad, count, val, mix, refuse }),
    ]
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

#[derive(Clone, Copy, Debug)]
struct Config {
    policy: Policy,
    mode: WriteMode,
    page_size: usize,
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
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.larch");
    let opts = Options::default()
        .page_size(cfg.page_size)
        .policy(cfg.policy)
        .write_mode(cfg.mode)
        .durability(Durability::Sync);
    let max_key = cfg.page_size / 4;
    let mut committed = Model::new();
    // Per tree, the number in the next appended key.
    let mut append_next = [0u32; TREES.len()];
    let mut next = 0;
    let mut session = 0;
    loop {
        let db = Db::open(&path, opts).ck(format!("open (session {session})"))?;
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
            let db = Db::open(&path, opts).ck("final reopen")?;
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
}

/// Count what a handle's overfull leaves did, before it is dropped.
fn tally(db: &Db) {
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
/// took each of the ways to share entries before splitting (redistribute.rs): the strategy
/// reaches them under this configuration.
fn with_leaf_overflows(name: &str, cases: impl FnOnce()) {
    LEAF_OVERFLOWS.with(|c| c.set([0; 3]));
    cases();
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
        #[test]
        fn $name() {
            proptest! {
                #![proptest_config(config())]
                fn cases(ops in ops()) {
                    run(Config { policy: $policy, mode: $mode, page_size: $page_size }, &ops)?;
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
