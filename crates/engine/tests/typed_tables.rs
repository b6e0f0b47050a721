//! Model test of the typed layer: random batches of writes to a `Table` with tuple keys, a
//! `Table` with text keys and a `MultimapTable`, each batch committed or aborted and the file
//! sometimes reopened, checked against `BTreeMap`/`BTreeSet` models (lookups, ranges both
//! ways, prefix scans, first/last, len, and a multimap's values per key).
//!
//! Inside a batch, the write side is checked too: ranges, prefix scans and first/last that
//! see the batch's own writes, pops, `retain`, `remove_range`, a multimap's `get_all` and
//! `remove_all`, and savepoints taken and rolled back to (the model rolls back with them).
//!
//! `PROPTEST_CASES` overrides the number of cases.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use larch_engine::{
    Db, Durability, Error, MultimapTable, Options, ReadTx, Savepoint, Table, WriteTx,
};
use proptest::prelude::*;

const PAIRS: Table<(&str, i16), &[u8]> = Table::new("pairs");
const WORDS: Table<&str, u64> = Table::new("words");
const TAGS: MultimapTable<&str, (i32, &str)> = MultimapTable::new("tags");
/// The multimap's tree read as a table of pairs: every (key, value), in order.
const TAG_PAIRS: Table<(&str, (i32, &str)), ()> = Table::new("tags");

/// Texts that are prefixes of each other, hold NUL (escaped inside tuples) or are empty
/// (refused as a whole key).
const TEXTS: [&str; 7] = ["", "a", "a\0", "a\0b", "ab", "b", "é"];

type Pairs = BTreeMap<(String, i16), Vec<u8>>;
type Words = BTreeMap<String, u64>;
type Tags = BTreeSet<(String, (i32, String))>;
/// A `PAIRS` entry as a read decodes it: the text before the last element may be copied.
type PairEntry<'a> = ((std::borrow::Cow<'a, str>, i16), &'a [u8]);

#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    pairs: Pairs,
    words: Words,
    tags: Tags,
}

#[derive(Debug, Clone)]
enum Op {
    PutPair(usize, i16, Vec<u8>),
    DelPair(usize, i16),
    PutWord(usize, u64),
    DelWord(usize),
    Tag(usize, i32, usize),
    Untag(usize, i32, usize),
    /// `pop_first` (false) or `pop_last` (true) on the pairs.
    PopPair(bool),
    /// Keep the pairs whose number is at most the given one, or whose value is shorter than
    /// 100 bytes.
    RetainPairs(i16),
    /// `remove_range` on the pairs from `(text, n)` to `(text, n)`, inclusive or not at the end.
    RemovePairRange((usize, i16), (usize, i16), bool),
    /// `remove_range` on the words from a text on (true) or below it (false).
    RemoveWordRange(usize, bool),
    /// `remove_all` of a multimap key.
    UntagAll(usize),
    /// Read everything back through the write side and compare with the model.
    Check,
    /// Take a savepoint.
    Savepoint,
    /// Roll back to the n-th newest live savepoint (modulo their number), or try a dead one.
    Rollback(usize),
}

#[derive(Debug, Clone)]
struct Batch {
    ops: Vec<Op>,
    commit: bool,
    reopen: bool,
}

fn text() -> impl Strategy<Value = usize> {
    0..TEXTS.len()
}

/// Few distinct numbers, so writes collide with earlier ones.
fn small() -> impl Strategy<Value = i16> {
    prop_oneof![-2i16..3, Just(i16::MIN), Just(i16::MAX)]
}

fn op() -> impl Strategy<Value = Op> {
    // Values up to a few hundred bytes make the trees more than one page deep.
    let value = (any::<u8>(), 0usize..400).prop_map(|(b, n)| vec![b; n]);
    prop_oneof![
        3 => (text(), small(), value).prop_map(|(s, i, v)| Op::PutPair(s, i, v)),
        1 => (text(), small()).prop_map(|(s, i)| Op::DelPair(s, i)),
        2 => (text(), any::<u64>()).prop_map(|(s, n)| Op::PutWord(s, n)),
        1 => text().prop_map(Op::DelWord),
        3 => (text(), small(), text()).prop_map(|(k, i, v)| Op::Tag(k, i32::from(i), v)),
        1 => (text(), small(), text()).prop_map(|(k, i, v)| Op::Untag(k, i32::from(i), v)),
        1 => any::<bool>().prop_map(Op::PopPair),
        1 => small().prop_map(Op::RetainPairs),
        1 => ((text(), small()), (text(), small()), any::<bool>())
            .prop_map(|(a, b, inclusive)| Op::RemovePairRange(a, b, inclusive)),
        1 => (text(), any::<bool>()).prop_map(|(s, from)| Op::RemoveWordRange(s, from)),
        1 => text().prop_map(Op::UntagAll),
        1 => Just(Op::Check),
        1 => Just(Op::Savepoint),
        1 => (0usize..4).prop_map(Op::Rollback),
    ]
}

fn batch() -> impl Strategy<Value = Batch> {
    (
        prop::collection::vec(op(), 0..24),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(ops, commit, reopen)| Batch {
            ops,
            commit,
            reopen,
        })
}

fn open(path: &Path) -> Db {
    Db::open(path, Options::default().durability(Durability::Async)).unwrap()
}

/// Savepoints of one transaction, with the model as it was at each.
#[derive(Default)]
struct Savepoints {
    /// Oldest first; each can still be rolled back to.
    live: Vec<(Savepoint, Model)>,
    /// Made invalid by a rollback to an older one.
    dead: Vec<Savepoint>,
}

/// Apply `op` inside `tx` and to `m`, checking what the write side reports and reads back.
fn apply(
    tx: &mut WriteTx<'_>,
    m: &mut Model,
    sps: &mut Savepoints,
    op: &Op,
) -> larch_engine::Result<()> {
    match *op {
        Op::PutPair(s, i, ref v) => {
            let mut t = tx.open_table(&PAIRS)?;
            t.insert((TEXTS[s], i), v.as_slice())?;
            assert_eq!(t.get((TEXTS[s], i))?, Some(v.as_slice()));
            m.pairs.insert((TEXTS[s].to_string(), i), v.clone());
            assert_eq!(t.len()?, m.pairs.len() as u64);
        }
        Op::DelPair(s, i) => {
            let mut t = tx.open_table(&PAIRS)?;
            let was = m.pairs.remove(&(TEXTS[s].to_string(), i)).is_some();
            assert_eq!(t.remove((TEXTS[s], i))?, was);
            assert_eq!(t.get((TEXTS[s], i))?, None);
        }
        Op::PutWord(s, n) => {
            let mut t = tx.open_table(&WORDS)?;
            if TEXTS[s].is_empty() {
                // An empty whole key has no bytes; larch keys have at least one.
                assert!(matches!(t.insert(TEXTS[s], n), Err(Error::EmptyKey)));
            } else {
                t.insert(TEXTS[s], n)?;
                m.words.insert(TEXTS[s].to_string(), n);
                assert_eq!(t.get(TEXTS[s])?, Some(n));
            }
        }
        Op::DelWord(s) => {
            let mut t = tx.open_table(&WORDS)?;
            let was = m.words.remove(TEXTS[s]).is_some();
            if !TEXTS[s].is_empty() {
                assert_eq!(t.remove(TEXTS[s])?, was);
            }
        }
        Op::Tag(k, i, v) => {
            let mut t = tx.open_multimap_table(&TAGS)?;
            let new = m
                .tags
                .insert((TEXTS[k].to_string(), (i, TEXTS[v].to_string())));
            assert_eq!(t.insert(TEXTS[k], (i, TEXTS[v]))?, new);
            assert!(t.contains(TEXTS[k], (i, TEXTS[v]))?);
            assert_eq!(t.len()?, m.tags.len() as u64);
        }
        Op::Untag(k, i, v) => {
            let mut t = tx.open_multimap_table(&TAGS)?;
            let was = m
                .tags
                .remove(&(TEXTS[k].to_string(), (i, TEXTS[v].to_string())));
            assert_eq!(t.remove(TEXTS[k], (i, TEXTS[v]))?, was);
            assert!(!t.contains(TEXTS[k], (i, TEXTS[v]))?);
        }
        Op::PopPair(last) => {
            let mut t = tx.open_table(&PAIRS)?;
            let got = if last { t.pop_last()? } else { t.pop_first()? };
            let got = got.map(|e| {
                let (s, i) = e.key();
                ((s.into_owned(), i), e.value().to_vec())
            });
            let want = if last {
                m.pairs.pop_last()
            } else {
                m.pairs.pop_first()
            };
            assert_eq!(got, want, "pop (last: {last})");
            assert_eq!(t.len()?, m.pairs.len() as u64);
        }
        Op::RetainPairs(max) => {
            let mut t = tx.open_table(&PAIRS)?;
            let keep = |i: i16, v: &[u8]| i <= max || v.len() < 100;
            let before = m.pairs.len();
            m.pairs.retain(|(_, i), v| keep(*i, v));
            let removed = t.retain(|(_, i), v| keep(i, v))?;
            assert_eq!(removed, (before - m.pairs.len()) as u64, "retain {max}");
            assert_eq!(t.len()?, m.pairs.len() as u64);
        }
        Op::RemovePairRange((a, i), (b, j), inclusive) => {
            let mut t = tx.open_table(&PAIRS)?;
            let (lo, hi) = ((TEXTS[a], i), (TEXTS[b], j));
            if lo > hi {
                // An inverted range is empty, as `BTreeMap::range` would panic on it.
                return Ok(());
            }
            let (lo_m, hi_m) = ((TEXTS[a].to_string(), i), (TEXTS[b].to_string(), j));
            let doomed: Vec<_> = if inclusive {
                m.pairs.range(lo_m..=hi_m).map(|(k, _)| k.clone()).collect()
            } else {
                m.pairs.range(lo_m..hi_m).map(|(k, _)| k.clone()).collect()
            };
            for k in &doomed {
                m.pairs.remove(k);
            }
            let n = if inclusive {
                t.remove_range(lo..=hi)?
            } else {
                t.remove_range(lo..hi)?
            };
            assert_eq!(n, doomed.len() as u64, "remove_range {lo:?}..{hi:?}");
            assert_eq!(t.len()?, m.pairs.len() as u64);
        }
        Op::RemoveWordRange(s, from) => {
            let mut t = tx.open_table(&WORDS)?;
            let p = TEXTS[s];
            let before = m.words.len();
            m.words.retain(|k, _| (k.as_str() >= p) != from);
            let n = if from {
                t.remove_range(p..)?
            } else {
                t.remove_range(..p)?
            };
            assert_eq!(n, (before - m.words.len()) as u64);
            assert_eq!(t.len()?, m.words.len() as u64);
        }
        Op::UntagAll(k) => {
            let mut t = tx.open_multimap_table(&TAGS)?;
            let before = m.tags.len();
            m.tags.retain(|(key, _)| key != TEXTS[k]);
            assert_eq!(t.remove_all(TEXTS[k])?, (before - m.tags.len()) as u64);
            assert_eq!(t.get_all(TEXTS[k])?.count(), 0);
            assert_eq!(t.len()?, m.tags.len() as u64);
        }
        Op::Check => check_write(tx, m)?,
        Op::Savepoint => {
            let sp = tx.savepoint();
            sps.live.push((sp, m.clone()));
        }
        Op::Rollback(n) => {
            if n == 3 && !sps.dead.is_empty() {
                let sp = &sps.dead[sps.dead.len() / 2];
                assert!(matches!(tx.rollback_to(sp), Err(Error::InvalidSavepoint)));
            } else if !sps.live.is_empty() {
                let at = sps.live.len() - 1 - n % sps.live.len();
                tx.rollback_to(&sps.live[at].0)?;
                *m = sps.live[at].1.clone();
                // Savepoints after it are no longer valid; it stays valid.
                sps.dead.extend(sps.live.drain(at + 1..).map(|(sp, _)| sp));
                check_write(tx, m)?;
            }
        }
    }
    Ok(())
}

/// Everything the write side reads agrees with `m`: the transaction's own writes included.
fn check_write(tx: &WriteTx<'_>, m: &Model) -> larch_engine::Result<()> {
    let pairs = tx.open_table(&PAIRS)?;
    let want: Vec<_> = m
        .pairs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let all: Vec<_> = pairs.iter()?.map(owned_pair).collect();
    assert_eq!(all, want, "write-side iter");
    let back: Vec<_> = pairs.iter()?.rev().map(owned_pair).collect();
    assert_eq!(back, want.iter().rev().cloned().collect::<Vec<_>>());
    assert_eq!(pairs.len()?, m.pairs.len() as u64);
    assert_eq!(pairs.is_empty()?, m.pairs.is_empty());
    let own = |e: Option<PairEntry<'_>>| e.map(|((s, i), v)| ((s.into_owned(), i), v.to_vec()));
    assert_eq!(own(pairs.first()?), want.first().cloned());
    assert_eq!(own(pairs.last()?), want.last().cloned());
    for (si, s) in TEXTS.iter().enumerate() {
        let got: Vec<_> = pairs.range_prefix(*s)?.map(owned_pair).collect();
        let want: Vec<_> = m
            .pairs
            .iter()
            .filter(|((t, _), _)| t == s)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "write-side prefix {s:?}");
        let hi = TEXTS[(si + 2) % TEXTS.len()];
        let (lo_k, hi_k) = ((*s, 0i16), (hi, 0i16));
        if lo_k <= hi_k {
            let got: Vec<_> = pairs.range(lo_k..hi_k)?.rev().map(owned_pair).collect();
            let want: Vec<_> = m
                .pairs
                .range((s.to_string(), 0)..(hi.to_string(), 0))
                .rev()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "write-side range {lo_k:?}..{hi_k:?} reversed");
        }
    }
    drop(pairs);

    let words = tx.open_table(&WORDS)?;
    let all: Vec<(String, u64)> = words
        .iter()?
        .map(|e| e.map(|(k, v)| (k.to_string(), v)))
        .collect::<Result<_, _>>()?;
    let want: Vec<(String, u64)> = m.words.iter().map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(all, want);
    for p in TEXTS {
        let got: Vec<&str> = words
            .range_prefix(p)?
            .map(|e| e.map(|(k, _)| k))
            .collect::<Result<_, _>>()?;
        let want: Vec<&str> = m
            .words
            .keys()
            .filter(|k| k.starts_with(p))
            .map(String::as_str)
            .collect();
        assert_eq!(got, want, "write-side text prefix {p:?}");
        let got: Vec<&str> = words
            .range(..=p)?
            .rev()
            .map(|e| e.map(|(k, _)| k))
            .collect::<Result<_, _>>()?;
        let want: Vec<&str> = m
            .words
            .range(..=p.to_string())
            .rev()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(got, want, "write-side range ..={p:?} reversed");
    }
    assert_eq!(
        words.first()?.map(|(k, v)| (k.to_string(), v)),
        m.words.first_key_value().map(|(k, v)| (k.clone(), *v))
    );
    assert_eq!(
        words.last()?.map(|(k, v)| (k.to_string(), v)),
        m.words.last_key_value().map(|(k, v)| (k.clone(), *v))
    );
    drop(words);

    let tags = tx.open_multimap_table(&TAGS)?;
    assert_eq!(tags.len()?, m.tags.len() as u64);
    for k in TEXTS {
        let got: Vec<(i32, String)> = tags
            .get_all(k)?
            .map(|e| e.map(|(i, v)| (i, v.to_string())))
            .collect::<Result<_, _>>()?;
        let want: Vec<(i32, String)> = m
            .tags
            .iter()
            .filter(|(t, _)| t == k)
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(got, want, "write-side get_all {k:?}");
        let back: Vec<(i32, String)> = tags
            .get_all(k)?
            .rev()
            .map(|e| e.map(|(i, v)| (i, v.to_string())))
            .collect::<Result<_, _>>()?;
        assert_eq!(back, want.into_iter().rev().collect::<Vec<_>>());
    }
    Ok(())
}

fn owned_pair(e: larch_engine::Result<PairEntry<'_>>) -> ((String, i16), Vec<u8>) {
    let ((s, i), v) = e.unwrap();
    ((s.into_owned(), i), v.to_vec())
}

/// Every read of the committed state agrees with `m`.
fn check(rx: &ReadTx, m: &Model) -> larch_engine::Result<()> {
    let pairs = rx.open_table(&PAIRS)?;
    let all: Vec<_> = pairs.iter()?.map(owned_pair).collect();
    let want: Vec<_> = m
        .pairs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(all, want);
    let back: Vec<_> = pairs.iter()?.rev().map(owned_pair).collect();
    assert_eq!(back, want.iter().rev().cloned().collect::<Vec<_>>());
    assert_eq!(pairs.len()?, m.pairs.len() as u64);
    assert_eq!(
        pairs
            .first()?
            .map(|((s, i), v)| ((s.into_owned(), i), v.to_vec())),
        want.first().cloned()
    );
    assert_eq!(
        pairs
            .last()?
            .map(|((s, i), v)| ((s.into_owned(), i), v.to_vec())),
        want.last().cloned()
    );
    for (si, s) in TEXTS.iter().enumerate() {
        // Keys whose first element is `s`: not those of a longer text that starts with it.
        let got: Vec<_> = pairs.range_prefix(*s)?.map(owned_pair).collect();
        let want: Vec<_> = m
            .pairs
            .iter()
            .filter(|((t, _), _)| t == s)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "prefix {s:?}");
        // A bounded range between two tuple keys, both ways round.
        let hi = TEXTS[(si + 3) % TEXTS.len()];
        let (lo_k, hi_k) = ((*s, -1i16), (hi, 1i16));
        if lo_k <= hi_k {
            let got: Vec<_> = pairs.range(lo_k..=hi_k)?.map(owned_pair).collect();
            let want: Vec<_> = m
                .pairs
                .range((s.to_string(), -1)..=(hi.to_string(), 1))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "range {lo_k:?}..={hi_k:?}");
            let got: Vec<_> = pairs.range(lo_k..hi_k)?.rev().map(owned_pair).collect();
            let want: Vec<_> = m
                .pairs
                .range((s.to_string(), -1)..(hi.to_string(), 1))
                .rev()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "range {lo_k:?}..{hi_k:?} reversed");
        }
    }

    let words = rx.open_table(&WORDS)?;
    let all: Vec<(String, u64)> = words
        .iter()?
        .map(|e| e.map(|(k, v)| (k.to_string(), v)))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        all,
        m.words
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect::<Vec<_>>()
    );
    for p in TEXTS {
        let got: Vec<&str> = words
            .range_prefix(p)?
            .map(|e| e.map(|(k, _)| k))
            .collect::<Result<_, _>>()?;
        let want: Vec<&str> = m
            .words
            .keys()
            .filter(|k| k.starts_with(p))
            .map(String::as_str)
            .collect();
        assert_eq!(got, want, "text prefix {p:?}");
    }
    for (i, p) in TEXTS.iter().enumerate() {
        let got: Vec<&str> = words
            .range(*p..)?
            .map(|e| e.map(|(k, _)| k))
            .collect::<Result<_, _>>()?;
        let want: Vec<&str> = m
            .words
            .range(p.to_string()..)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(got, want, "range {p:?}..");
        assert_eq!(words.get(*p)?, m.words.get(*p).copied(), "get {i}");
    }

    let tags = rx.open_multimap_table(&TAGS)?;
    assert_eq!(tags.len()?, m.tags.len() as u64);
    for k in TEXTS {
        let got: Vec<(i32, String)> = tags
            .get_all(k)?
            .map(|e| e.map(|(i, v)| (i, v.to_string())))
            .collect::<Result<_, _>>()?;
        let want: Vec<(i32, String)> = m
            .tags
            .iter()
            .filter(|(t, _)| t == k)
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(got, want, "get_all {k:?}");
        let back: Vec<(i32, String)> = tags
            .get_all(k)?
            .rev()
            .map(|e| e.map(|(i, v)| (i, v.to_string())))
            .collect::<Result<_, _>>()?;
        assert_eq!(back, want.into_iter().rev().collect::<Vec<_>>());
    }
    let walked: Tags = rx
        .open_table(&TAG_PAIRS)?
        .iter()?
        .map(|e| e.map(|((k, (i, v)), ())| (k.into_owned(), (i, v.to_string()))))
        .collect::<Result<_, _>>()?;
    assert_eq!(walked, m.tags);
    Ok(())
}

fn run(batches: &[Batch]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typed.larch");
    let mut db = open(&path);
    {
        let tx = db.begin_write().unwrap();
        tx.open_table(&PAIRS).unwrap();
        tx.open_table(&WORDS).unwrap();
        tx.open_multimap_table(&TAGS).unwrap();
        tx.commit().unwrap();
    }
    let mut committed = Model::default();
    for b in batches {
        let mut working = committed.clone();
        let mut tx = db.begin_write().unwrap();
        let mut sps = Savepoints::default();
        for op in &b.ops {
            apply(&mut tx, &mut working, &mut sps, op).unwrap();
        }
        check_write(&tx, &working).unwrap();
        if b.commit {
            tx.commit().unwrap();
            committed = working;
        } else {
            tx.abort();
        }
        if b.reopen {
            drop(db);
            db = open(&path);
        }
        check(&db.begin_read().unwrap(), &committed).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn typed_tables_match_btree_models_through_commit_abort_and_reopen(
        batches in prop::collection::vec(batch(), 1..6)
    ) {
        run(&batches);
    }
}

#[test]
fn a_tree_read_as_the_wrong_type_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("t.larch"));
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("raw").unwrap();
        t.insert(b"abc", b"\xff\xfe").unwrap();
    }
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    const AS_NUMBERS: Table<u32, u64> = Table::new("raw");
    const AS_TEXT: Table<&str, &str> = Table::new("raw");
    let numbers = rx.open_table(&AS_NUMBERS).unwrap();
    let err = numbers.iter().unwrap().next().unwrap().unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { page: 0, reason } if reason.contains("\"raw\"") && reason.contains("u32")),
        "{err}"
    );
    let text = rx.open_table(&AS_TEXT).unwrap();
    assert!(
        matches!(text.get("abc"), Err(Error::Corrupt { .. })),
        "value is not UTF-8"
    );
    assert!(text.first().is_err());
    const AS_TAGS: MultimapTable<u64, u8> = MultimapTable::new("raw");
    assert_eq!(
        rx.open_multimap_table(&AS_TAGS)
            .unwrap()
            .get_all(7)
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn a_missing_table_is_tree_not_found_to_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("t.larch"));
    let rx = db.begin_read().unwrap();
    assert!(matches!(rx.open_table(&WORDS), Err(Error::TreeNotFound(n)) if n == "words"));
}

#[test]
fn byte_tables_read_the_same_bytes_as_the_byte_api() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("t.larch"));
    const BYTES: Table<&[u8], &[u8]> = Table::new("b");
    let tx = db.begin_write().unwrap();
    tx.open_table(&BYTES)
        .unwrap()
        .insert(&b"k\0"[..], &b"v"[..])
        .unwrap();
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    let raw = rx.open_tree("b").unwrap();
    let typed = rx.open_table(&BYTES).unwrap();
    assert_eq!(raw.get(b"k\0").unwrap(), Some(&b"v"[..]));
    // Same slice of the same page: no copy on either path.
    assert_eq!(
        typed.get(&b"k\0"[..]).unwrap().map(<[u8]>::as_ptr),
        raw.get(b"k\0").unwrap().map(<[u8]>::as_ptr)
    );
}

#[test]
fn write_side_reads_of_the_wrong_type_are_errors_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("t.larch"));
    const AS_NUMBERS: Table<u32, u32> = Table::new("raw");
    const AS_TAGS: MultimapTable<u32, u32> = MultimapTable::new("raw");
    let mut tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("raw").unwrap();
        t.insert(&1u32.to_be_bytes(), &10u32.to_be_bytes()).unwrap();
        t.insert(b"not a u32", b"x").unwrap();
        t.insert(&[0xff; 4], b"bad value").unwrap();
    }
    let sp = tx.savepoint();
    {
        let mut t = tx.open_table(&AS_NUMBERS).unwrap();
        // The first entry decodes; the second does not, and stops the scan with an error.
        let mut it = t.iter().unwrap();
        assert_eq!(it.next().unwrap().unwrap(), (1, 10));
        assert!(matches!(
            it.next(),
            Some(Err(Error::Corrupt { page: 0, .. }))
        ));
        drop(it);
        // `retain` removes what it visited before the bad entry, then reports it.
        assert!(matches!(t.retain(|_, _| false), Err(Error::Corrupt { .. })));
        assert_eq!(t.len().unwrap(), 2);
        // A pop of an entry that does not decode is an error, and the entry stays.
        assert!(matches!(t.pop_last(), Err(Error::Corrupt { .. })));
        assert!(matches!(t.pop_first(), Err(Error::Corrupt { .. })));
        assert_eq!(t.len().unwrap(), 2);
        assert!(t.last().is_err());
        // remove_range needs no decoding.
        assert_eq!(t.remove_range(0xffff_ffff..=0xffff_ffff).unwrap(), 1);
        assert!(matches!(
            tx.open_multimap_table(&AS_TAGS),
            Err(Error::TreeAlreadyOpen(_))
        ));
    }
    tx.rollback_to(&sp).unwrap();
    assert_eq!(tx.open_table(&AS_NUMBERS).unwrap().len().unwrap(), 3);
    tx.commit().unwrap();
}
