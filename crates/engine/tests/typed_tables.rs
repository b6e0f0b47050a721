//! Model test of the typed layer: random batches of writes to a `Table` with tuple keys, a
//! `Table` with text keys and a `MultimapTable`, each batch committed or aborted and the file
//! sometimes reopened, checked against `BTreeMap`/`BTreeSet` models (lookups, ranges both
//! ways, prefix scans, first/last, len, and a multimap's values per key).
//!
//! `PROPTEST_CASES` overrides the number of cases.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use larch_engine::{Db, Durability, Error, MultimapTable, Options, ReadTx, Table};
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

/// Apply `op` inside `tx` and to `m`, checking what the write side reports and reads back.
fn apply(tx: &mut larch_engine::WriteTx<'_>, m: &mut Model, op: &Op) -> larch_engine::Result<()> {
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
        for op in &b.ops {
            apply(&mut tx, &mut working, op).unwrap();
        }
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
