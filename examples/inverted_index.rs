//! An inverted index over a generated corpus, checked against in-memory `BTreeMap`s.
//!
//! ```text
//! cargo run --release --example inverted_index
//! ```
//!
//! Three thousand synthetic "source files" (words from a fixed vocabulary, drawn by a seeded
//! random number generator, so every run sees the same corpus) go into four typed tables:
//!
//! * `documents`: `Table<u32, &str>`, a document's id to its text;
//! * `postings`: `MultimapTable<&str, u32>`, a word to the ids of the documents holding it;
//! * `lexicon`: `Table<&str, u32>`, a word to how many documents hold it (prefix queries);
//! * `meta`: `Table<&str, u64>`, counters.
//!
//! The program loads the corpus in batches (one write transaction each, documents and
//! postings updated side by side), rolls a chunk that fails validation half-way back to a
//! savepoint, answers prefix and AND queries, deletes documents with `remove_range`,
//! `retain` and a word with `remove_all`, while two reader threads query the snapshots the
//! writer hands them; then reopens the file and compacts it. Every step is checked against a
//! model kept in `BTreeMap`s, and any disagreement stops the program with a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use larch::{
    Db, MultimapTable, Options, OwnedReadMultimapTable, OwnedReadTable, ReadTx, Result, Table,
    WriteTx,
};

const DOCUMENTS: Table<u32, &str> = Table::new("documents");
const POSTINGS: MultimapTable<&str, u32> = MultimapTable::new("postings");
const LEXICON: Table<&str, u32> = Table::new("lexicon");
const META: Table<&str, u64> = Table::new("meta");

const DOCS: u32 = 3_000;
const BATCH: u32 = 250;
const CHUNK: u32 = 50;
/// A word no valid document may contain: the loader's validation refuses it.
const POISON: &str = "poison";
/// Documents holding this word are deleted with `retain`.
const SPAM: &str = "spam";

/// splitmix64: a small seeded generator, so the corpus is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index below `n`, small ones far more likely (roughly Zipf-like word frequencies).
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((n as f64) * u * u * u) as usize
    }
}

/// Words of two or three syllables: 1,872 of them, many sharing a prefix.
fn vocabulary() -> Vec<String> {
    const SYL: [&str; 12] = [
        "ka", "ri", "to", "mu", "sen", "tra", "lo", "vi", "da", "ne", "po", "shi",
    ];
    let mut words = Vec::new();
    for a in SYL {
        for b in SYL {
            words.push(format!("{a}{b}"));
            for c in SYL {
                words.push(format!("{a}{b}{c}"));
            }
        }
    }
    // Shuffle, so that the frequent words are not all "kaka..".
    let mut rng = Rng(7);
    for i in (1..words.len()).rev() {
        words.swap(i, rng.below(i as u64 + 1) as usize);
    }
    words
}

/// The corpus: document texts, a few holding `SPAM`, a few (the invalid ones) `POISON`.
fn corpus(vocab: &[String]) -> Vec<String> {
    let mut rng = Rng(2024);
    (0..DOCS)
        .map(|_| {
            let n = 20 + rng.below(100) as usize;
            let mut words: Vec<&str> = (0..n)
                .map(|_| vocab[rng.skewed(vocab.len())].as_str())
                .collect();
            if rng.below(40) == 0 {
                words.insert(n / 2, SPAM);
            }
            if rng.below(500) == 0 {
                words.insert(n / 3, POISON);
            }
            let mut text = String::new();
            for (i, w) in words.iter().enumerate() {
                if i > 0 {
                    text.push(if i % 12 == 0 { '\n' } else { ' ' });
                }
                text.push_str(w);
            }
            text
        })
        .collect()
}

/// A document's distinct words, in order.
fn words(text: &str) -> BTreeSet<&str> {
    text.split_whitespace().collect()
}

/// What the database should hold.
#[derive(Default, Clone)]
struct Model {
    docs: BTreeMap<u32, String>,
    postings: BTreeMap<String, BTreeSet<u32>>,
}

impl Model {
    fn add(&mut self, id: u32, text: &str) {
        for w in words(text) {
            self.postings.entry(w.to_string()).or_default().insert(id);
        }
        self.docs.insert(id, text.to_string());
    }

    fn remove(&mut self, id: u32) {
        let text = self
            .docs
            .remove(&id)
            .expect("model: removing a missing document");
        for w in words(&text) {
            let ids = self.postings.get_mut(w).unwrap();
            ids.remove(&id);
            if ids.is_empty() {
                self.postings.remove(w);
            }
        }
    }

    fn pairs(&self) -> u64 {
        self.postings.values().map(|s| s.len() as u64).sum()
    }

    fn and(&self, a: &str, b: &str) -> Vec<u32> {
        match (self.postings.get(a), self.postings.get(b)) {
            (Some(x), Some(y)) => x.intersection(y).copied().collect(),
            _ => Vec::new(),
        }
    }

    fn prefix(&self, p: &str) -> Vec<(String, u32)> {
        self.postings
            .range(p.to_string()..)
            .take_while(|(w, _)| w.starts_with(p))
            .map(|(w, ids)| (w.clone(), ids.len() as u32))
            .collect()
    }
}

/// Add a document: its text, a posting per distinct word, the lexicon's counts.
fn add_doc(tx: &WriteTx<'_>, id: u32, text: &str) -> Result<()> {
    let mut docs = tx.open_table(&DOCUMENTS)?;
    let mut postings = tx.open_multimap_table(&POSTINGS)?;
    let mut lexicon = tx.open_table(&LEXICON)?;
    docs.insert(id, text)?;
    for w in words(text) {
        if postings.insert(w, id)? {
            let df = lexicon.get(w)?.unwrap_or(0);
            lexicon.insert(w, df + 1)?;
        }
    }
    Ok(())
}

/// Remove the postings of a document's words (its text is removed by the caller).
fn remove_postings(tx: &WriteTx<'_>, id: u32, text: &str) -> Result<()> {
    let mut postings = tx.open_multimap_table(&POSTINGS)?;
    let mut lexicon = tx.open_table(&LEXICON)?;
    for w in words(text) {
        assert!(postings.remove(w, id)?, "posting ({w}, {id}) missing");
        match lexicon.get(w)? {
            Some(1) => assert!(lexicon.remove(w)?),
            Some(n) => lexicon.insert(w, n - 1)?,
            None => panic!("lexicon lacks {w}"),
        }
    }
    Ok(())
}

fn bump(tx: &WriteTx<'_>, counter: &str, by: i64) -> Result<()> {
    let mut meta = tx.open_table(&META)?;
    let n = meta.get(counter)?.unwrap_or(0);
    meta.insert(counter, n.checked_add_signed(by).unwrap())
}

/// AND query: the documents holding both words, by merging two sorted posting lists.
fn and_query(
    postings: &larch::ReadMultimapTable<'_, &str, u32>,
    a: &str,
    b: &str,
) -> Result<Vec<u32>> {
    let mut x = postings.get_all(a)?;
    let mut y = postings.get_all(b)?;
    let mut out = Vec::new();
    let (mut p, mut q) = (x.next().transpose()?, y.next().transpose()?);
    while let (Some(i), Some(j)) = (p, q) {
        if i <= j {
            p = x.next().transpose()?;
        }
        if j <= i {
            q = y.next().transpose()?;
        }
        if i == j {
            out.push(i);
        }
    }
    Ok(out)
}

/// Prefix query: every word starting with `p`, with how many documents hold it.
fn prefix_query(lexicon: &larch::ReadTable<'_, &str, u32>, p: &str) -> Result<Vec<(String, u32)>> {
    lexicon
        .range_prefix(p)?
        .map(|e| e.map(|(w, n)| (w.to_string(), n)))
        .collect()
}

/// Queries a reader runs against a snapshot, with the answers the writer's model gives.
struct Expected {
    docs: u64,
    pairs: u64,
    and: Vec<(String, String, Vec<u32>)>,
    prefix: Vec<(String, Vec<(String, u32)>)>,
}

fn expected(m: &Model, vocab: &[String]) -> Arc<Expected> {
    let common = |i: usize| vocab[i].clone();
    let and = [(0, 1), (2, 3), (0, 5), (4, 9), (1, 40)]
        .iter()
        .map(|&(a, b)| {
            let (a, b) = (common(a), common(b));
            let want = m.and(&a, &b);
            (a, b, want)
        })
        .collect();
    let prefix = ["tra", "kam", "shi", "nene", "vi"]
        .iter()
        .map(|p| (p.to_string(), m.prefix(p)))
        .collect();
    Arc::new(Expected {
        docs: m.docs.len() as u64,
        pairs: m.pairs(),
        and,
        prefix,
    })
}

/// Run the expected queries on a snapshot's tables; returns how many ran.
fn run_queries(
    docs: &larch::ReadTable<'_, u32, &str>,
    postings: &larch::ReadMultimapTable<'_, &str, u32>,
    lexicon: &larch::ReadTable<'_, &str, u32>,
    meta: &larch::ReadTable<'_, &str, u64>,
    want: &Expected,
) -> Result<u64> {
    assert_eq!(docs.len()?, want.docs, "reader: documents");
    assert_eq!(
        meta.get("documents")?.unwrap_or(0),
        want.docs,
        "reader: meta"
    );
    assert_eq!(postings.len()?, want.pairs, "reader: postings");
    for (a, b, ids) in &want.and {
        assert_eq!(&and_query(postings, a, b)?, ids, "reader: {a} AND {b}");
    }
    for (p, words) in &want.prefix {
        assert_eq!(&prefix_query(lexicon, p)?, words, "reader: prefix {p}");
    }
    Ok((want.and.len() + want.prefix.len()) as u64)
}

/// What a reader thread is handed: a snapshot as a transaction (reader 1) or as owned
/// tables (reader 2), and the answers it must find there.
enum Snapshot {
    Tx(ReadTx),
    Tables {
        docs: OwnedReadTable<u32, &'static str>,
        postings: OwnedReadMultimapTable<&'static str, u32>,
        lexicon: OwnedReadTable<&'static str, u32>,
        meta: OwnedReadTable<&'static str, u64>,
    },
}

impl Snapshot {
    fn check(&self, want: &Expected) -> Result<u64> {
        match self {
            Snapshot::Tx(rx) => run_queries(
                &rx.open_table(&DOCUMENTS)?,
                &rx.open_multimap_table(&POSTINGS)?,
                &rx.open_table(&LEXICON)?,
                &rx.open_table(&META)?,
                want,
            ),
            Snapshot::Tables {
                docs,
                postings,
                lexicon,
                meta,
            } => run_queries(
                &docs.table(),
                &postings.table(),
                &lexicon.table(),
                &meta.table(),
                want,
            ),
        }
    }
}

/// A reader thread: checks every snapshot it is sent while the writer goes on, and at the
/// end checks the first one again (a snapshot does not change under later commits).
fn reader(rx: mpsc::Receiver<(Snapshot, Arc<Expected>)>) -> thread::JoinHandle<(u64, u64)> {
    thread::spawn(move || {
        let (mut snapshots, mut queries) = (0, 0);
        let mut first = None;
        for (snap, want) in rx {
            queries += snap.check(&want).expect("reader query");
            snapshots += 1;
            if first.is_none() && want.docs > 0 {
                first = Some((snap, want));
            }
        }
        if let Some((snap, want)) = first {
            queries += snap.check(&want).expect("reader query on an old snapshot");
        }
        (snapshots, queries)
    })
}

/// Hand both readers the latest commit.
fn publish(
    db: &Db,
    readers: &[mpsc::Sender<(Snapshot, Arc<Expected>)>; 2],
    m: &Model,
    vocab: &[String],
) -> Result<()> {
    let want = expected(m, vocab);
    let rx = db.begin_read()?;
    let tables = Snapshot::Tables {
        docs: rx.open_table_owned(&DOCUMENTS)?,
        postings: rx.open_multimap_table_owned(&POSTINGS)?,
        lexicon: rx.open_table_owned(&LEXICON)?,
        meta: rx.open_table_owned(&META)?,
    };
    readers[0].send((Snapshot::Tx(rx), want.clone())).unwrap();
    readers[1].send((tables, want)).unwrap();
    Ok(())
}

/// The whole database against the model: every document, posting, lexicon entry, counter.
fn verify(db: &Db, m: &Model) -> Result<()> {
    let rx = db.begin_read()?;
    let docs = rx.open_table(&DOCUMENTS)?;
    assert_eq!(docs.len()?, m.docs.len() as u64);
    let mut want = m.docs.iter();
    for e in docs.iter()? {
        let (id, text) = e?;
        assert_eq!(Some((&id, text)), want.next().map(|(i, t)| (i, t.as_str())));
    }
    // The multimap's tree, read as a table of (word, id) pairs: every posting in order.
    const PAIRS: Table<(&str, u32), ()> = Table::new("postings");
    let mut want = m
        .postings
        .iter()
        .flat_map(|(w, ids)| ids.iter().map(move |id| (w.as_str(), *id)));
    for e in rx.open_table(&PAIRS)?.iter()? {
        let ((w, id), ()) = e?;
        assert_eq!(Some((&*w, id)), want.next());
    }
    assert_eq!(want.next(), None);
    let lexicon: Vec<(String, u32)> = rx
        .open_table(&LEXICON)?
        .iter()?
        .map(|e| e.map(|(w, n)| (w.to_string(), n)))
        .collect::<Result<_>>()?;
    let want: Vec<(String, u32)> = m
        .postings
        .iter()
        .map(|(w, ids)| (w.clone(), ids.len() as u32))
        .collect();
    assert_eq!(lexicon, want);
    let meta = rx.open_table(&META)?;
    assert_eq!(meta.get("documents")?, Some(m.docs.len() as u64));
    Ok(())
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("larch-inverted-index-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("index.larch");
    let _ = std::fs::remove_file(&path);
    let vocab = vocabulary();
    let texts = corpus(&vocab);
    let mut db = Db::open(&path, Options::default())?;
    let mut m = Model::default();

    // Two readers, each fed snapshots through a channel as the writer commits.
    let (tx0, rx0) = mpsc::channel();
    let (tx1, rx1) = mpsc::channel();
    let readers = [tx0, tx1];
    let handles = [reader(rx0), reader(rx1)];

    // Load in batches: one write transaction per batch, a savepoint before every chunk. A
    // chunk with an invalid document is rolled back when the loader reaches it, half-way,
    // and loaded again without it.
    let mut rolled_back = 0;
    let mut refused = Vec::new();
    let mut batches = 0;
    for batch in (0..DOCS).step_by(BATCH as usize) {
        let mut tx = db.begin_write()?;
        for chunk in (batch..batch + BATCH).step_by(CHUNK as usize) {
            let sp = tx.savepoint();
            let mut bad = None;
            for id in chunk..chunk + CHUNK {
                let text = &texts[id as usize];
                if words(text).contains(POISON) {
                    bad = Some(id);
                    break;
                }
                add_doc(&tx, id, text)?;
            }
            let Some(bad) = bad else {
                (chunk..chunk + CHUNK).for_each(|id| m.add(id, &texts[id as usize]));
                continue;
            };
            tx.rollback_to(&sp)?;
            rolled_back += 1;
            refused.push(bad);
            {
                // Nothing of the chunk is left, not even the documents before the bad one.
                let docs = tx.open_table(&DOCUMENTS)?;
                assert_eq!(docs.range(chunk..chunk + CHUNK)?.count(), 0);
                assert_eq!(docs.len()?, m.docs.len() as u64);
            }
            for id in chunk..chunk + CHUNK {
                let text = &texts[id as usize];
                if !words(text).contains(POISON) {
                    add_doc(&tx, id, text)?;
                    m.add(id, text);
                }
            }
        }
        let loaded = m.docs.len() as u64;
        tx.open_table(&META)?.insert("documents", loaded)?;
        bump(&tx, "batches", 1)?;
        tx.commit()?;
        batches += 1;
        publish(&db, &readers, &m, &vocab)?;
    }
    let load_time = t0.elapsed();
    assert!(rolled_back > 0, "the corpus has invalid documents");
    verify(&db, &m)?;
    let loaded = m.docs.len();
    let pairs = m.pairs();

    // Queries on the committed state, against the model.
    let t1 = Instant::now();
    let rx = db.begin_read()?;
    let postings = rx.open_multimap_table(&POSTINGS)?;
    let lexicon = rx.open_table(&LEXICON)?;
    let mut and_hits = 0;
    for i in 0..200 {
        let (a, b) = (&vocab[i % 20], &vocab[(i * 7 + 3) % 300]);
        let got = and_query(&postings, a, b)?;
        assert_eq!(got, m.and(a, b), "{a} AND {b}");
        and_hits += got.len();
    }
    let mut prefix_words = 0;
    for p in ["ka", "tra", "shi", "sen", "mu", "po", "vida", "neto"] {
        let got = prefix_query(&lexicon, p)?;
        assert_eq!(got, m.prefix(p), "prefix {p}");
        prefix_words += got.len();
    }
    let sample = format!("{} AND {}", vocab[0], vocab[1]);
    let sample_hits = and_query(&postings, &vocab[0], &vocab[1])?.len();
    let tra = prefix_query(&lexicon, "tra")?;
    drop(rx);
    let query_time = t1.elapsed();

    // Deletes, one write transaction.
    let tx = db.begin_write()?;
    // 1. The oldest 300 documents, by id range: their postings first, through a range that
    //    sees this transaction's writes, then the texts with one `remove_range`.
    let old: Vec<(u32, String)> = tx
        .open_table(&DOCUMENTS)?
        .range(..300)?
        .map(|e| e.map(|(id, text)| (id, text.to_string())))
        .collect::<Result<_>>()?;
    for (id, text) in &old {
        remove_postings(&tx, *id, text)?;
    }
    let by_range = tx.open_table(&DOCUMENTS)?.remove_range(..300)?;
    assert_eq!(by_range, old.len() as u64);
    old.iter().for_each(|(id, _)| m.remove(*id));
    // 2. Every document holding the spam word, with `retain`; it hands over the texts of
    //    the ones it drops, whose postings go next.
    let mut spam = Vec::new();
    let by_retain = tx.open_table(&DOCUMENTS)?.retain(|id, text| {
        let keep = !words(text).contains(SPAM);
        if !keep {
            spam.push((id, text.to_string()));
        }
        keep
    })?;
    assert_eq!(by_retain, spam.len() as u64);
    assert!(by_retain > 0, "the corpus has spam");
    for (id, text) in &spam {
        remove_postings(&tx, *id, text)?;
        m.remove(*id);
    }
    assert!(tx
        .open_multimap_table(&POSTINGS)?
        .get_all(SPAM)?
        .next()
        .is_none());
    // 3. The most common word, as a stop word: all its postings with `remove_all`.
    let stop = m
        .postings
        .iter()
        .max_by_key(|(_, ids)| ids.len())
        .unwrap()
        .0
        .clone();
    let stop_postings = {
        let mut postings = tx.open_multimap_table(&POSTINGS)?;
        let n = postings.remove_all(stop.as_str())?;
        assert_eq!(postings.get_all(stop.as_str())?.count(), 0);
        n
    };
    assert_eq!(
        stop_postings,
        m.postings.remove(&stop).unwrap().len() as u64
    );
    assert!(tx.open_table(&LEXICON)?.remove(stop.as_str())?);
    tx.open_table(&META)?
        .insert("documents", m.docs.len() as u64)?;
    // The same checks, inside the transaction, before it commits.
    {
        let docs = tx.open_table(&DOCUMENTS)?;
        assert_eq!(docs.len()?, m.docs.len() as u64);
        assert_eq!(
            docs.first()?.map(|(id, _)| id),
            m.docs.keys().next().copied()
        );
        assert_eq!(
            docs.last()?.map(|(id, _)| id),
            m.docs.keys().next_back().copied()
        );
        let postings = tx.open_multimap_table(&POSTINGS)?;
        assert_eq!(postings.len()?, m.pairs());
    }
    tx.commit()?;
    publish(&db, &readers, &m, &vocab)?;
    verify(&db, &m)?;

    // Readers are done when the writer stops sending.
    drop(readers);
    let mut read_stats = Vec::new();
    for h in handles {
        read_stats.push(h.join().expect("reader thread"));
    }

    // Reopen, and compact.
    drop(db);
    db = Db::open(&path, Options::default())?;
    verify(&db, &m)?;
    let report = db.compact()?;
    verify(&db, &m)?;
    drop(db);
    let db = Db::open(&path, Options::default())?;
    verify(&db, &m)?;
    drop(db);
    std::fs::remove_dir_all(&dir)?;

    println!(
        "inverted index over {DOCS} generated documents ({} words in the vocabulary)",
        vocab.len()
    );
    println!(
        "  loaded {loaded} documents, {pairs} postings in {batches} batches ({load_time:.2?}); \
         {rolled_back} chunks rolled back to a savepoint for invalid documents {refused:?}"
    );
    println!(
        "  queries ({query_time:.2?}): 200 AND queries ({and_hits} hits; {sample}: {sample_hits}), \
         8 prefix queries ({prefix_words} words; \"tra\": {})",
        tra.len()
    );
    println!(
        "  deleted {by_range} documents by id range, {by_retain} spam documents with retain, \
         {stop_postings} postings of the stop word {stop:?} with remove_all"
    );
    for (i, (snaps, queries)) in read_stats.iter().enumerate() {
        println!(
            "  reader {}: {snaps} snapshots, {queries} queries, all as committed",
            i + 1
        );
    }
    println!(
        "  reopened and compacted: {} KiB -> {} KiB",
        report.before_bytes / 1024,
        report.after_bytes / 1024
    );
    println!(
        "  {} documents left; every check against the BTreeMap model passed ({:.2?})",
        m.docs.len(),
        t0.elapsed()
    );
    Ok(())
}
