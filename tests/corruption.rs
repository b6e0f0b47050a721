//! Hostile files: a real database (several trees, depth >= 2, overflow values, free pages, Sync
//! commits) is damaged in a copy, one kind of damage on one page type at a time, and opened with
//! the real engine. Every case must end in a clear `larch::Error` or an open database; an open
//! database must never panic on `check`, `stats`, a full scan of every tree (both directions) or
//! random gets, and
//!
//! - damage inside a live page must make `check()` fail, naming the page (checksum damage) or
//!   catching the structure (damage with the crc recomputed, so only the structure is wrong);
//!   or, for a page the newest commit wrote, open must fall back to the commit before and say
//!   which page it found torn;
//! - damage to a meta must make open fall back to the other meta and `check`/`stats` say so;
//! - whenever `check()` passes, the contents must equal exactly what the commit it opened at
//!   held (the universal oracle every case is held to).
//!
//! Pages are found by reading page headers (`larch::raw::PageHeader::read`) and walking the
//! trees from the newest meta, so each case targets a page that is actually live.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::Path;
use std::sync::OnceLock;

use larch::raw::{
    run_checksum, Limits, Meta, NodePage, PageHeader, PageRole, PageType, ValRef, BRANCH_CHILD,
    FLAG_OVERFLOW, LEAF_CELL, LEAF_FLAGS, LEAF_VLEN, PAGE_HEADER_SIZE, SLOT,
};
use larch::{Db, Error, Options};

const PS: usize = 4096;

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;
type Model = BTreeMap<String, Tree>;

// ---- the fixture ---------------------------------------------------------------------------

/// What kind of live page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    DataBranch,
    DataLeaf,
    Overflow,
    FreeMapLeaf,
    FreeMapBranch,
    CatalogLeaf,
    CatalogBranch,
}

#[derive(Clone, Debug)]
struct LivePage {
    id: u64,
    kind: Kind,
    /// Pages in the run (1 but for overflow runs).
    run: u64,
}

struct Fixture {
    image: Vec<u8>,
    /// Committed state by txid.
    states: BTreeMap<u64, Model>,
    newest: Meta,
    older: Meta,
    /// Slot (page id 0 or 1) holding the newest meta.
    newest_slot: u64,
    pages: Vec<LivePage>,
    /// Keys worth probing with `get`: every key the database ever held plus a few misses.
    probes: Vec<Vec<u8>>,
}

impl Fixture {
    fn first(&self, kind: Kind) -> &LivePage {
        self.pages
            .iter()
            .find(|p| p.kind == kind)
            .unwrap_or_else(|| panic!("the fixture has no live {kind:?} page"))
    }
    /// A page of `kind` from the middle of the list (a leaf that is neither first nor last).
    fn middle(&self, kind: Kind) -> &LivePage {
        let all: Vec<&LivePage> = self.pages.iter().filter(|p| p.kind == kind).collect();
        assert!(!all.is_empty(), "the fixture has no live {kind:?} page");
        all[all.len() / 2]
    }
    fn file_pages(&self) -> u64 {
        (self.image.len() / PS) as u64
    }
}

fn key(tree: &str, i: u64) -> Vec<u8> {
    format!("{tree}-key-{i:05}").into_bytes()
}

fn val(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i as usize).wrapping_mul(131).wrapping_add(j * 7) as u8)
        .collect()
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(build_fixture)
}

fn build_fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixture.larch");
    // Every commit saves its free map (a commit carries its free-map changes otherwise, up to
    // 65,536 bits), so that the newest commit has free-map pages to damage.
    let db = Db::open(
        &path,
        Options::default()
            .page_size(PS)
            .durability(larch::Durability::Sync)
            .carried_max_bits(1),
    )
    .unwrap();
    let mut states = BTreeMap::new();
    let mut model = Model::new();
    let mut probes = BTreeSet::new();
    states.insert(0u64, model.clone());
    let mut commit = |f: &mut dyn FnMut(&mut larch::WriteTx<'_>, &mut Model)| {
        let mut tx = db.begin_write().unwrap();
        let txid = tx.txid();
        f(&mut tx, &mut model);
        tx.commit().unwrap();
        states.insert(txid, model.clone());
    };
    let mut put = |tx: &mut larch::WriteTx<'_>, m: &mut Model, t: &str, k: Vec<u8>, v: Vec<u8>| {
        tx.open_tree(t).unwrap().insert(&k, &v).unwrap();
        probes.insert(k.clone());
        m.entry(t.to_string()).or_default().insert(k, v);
    };
    let del = |tx: &mut larch::WriteTx<'_>, m: &mut Model, t: &str, k: Vec<u8>| {
        tx.open_tree(t).unwrap().remove(&k).unwrap();
        m.entry(t.to_string()).or_default().remove(&k);
    };
    // 1: a deep tree (depth 2) and a one-leaf tree.
    commit(&mut |tx, m| {
        for i in 0..900 {
            put(
                tx,
                m,
                "alpha",
                key("alpha", i),
                val(i, 40 + (i as usize * 13) % 160),
            );
        }
        for i in 0..20 {
            put(tx, m, "gamma", key("gamma", i), val(i + 1000, 30));
        }
    });
    // 2: overflow values (one to eight pages each) next to small ones.
    commit(&mut |tx, m| {
        for i in 0..6 {
            put(
                tx,
                m,
                "beta",
                key("big", i),
                val(i + 2000, 5_000 + 6_000 * i as usize),
            );
        }
        for i in 0..30 {
            put(tx, m, "beta", key("beta", i), val(i + 3000, 100));
        }
    });
    // 3: deletes free pages (leaves merge, an overflow run goes).
    commit(&mut |tx, m| {
        for i in (0..900).step_by(3) {
            del(tx, m, "alpha", key("alpha", i));
        }
        del(tx, m, "beta", key("big", 1));
    });
    // 4, 5: more changes, reusing freed pages.
    commit(&mut |tx, m| {
        for i in 900..960 {
            put(tx, m, "alpha", key("alpha", i), val(i, 120));
        }
        put(tx, m, "gamma", key("gamma", 5), val(4000, 700));
    });
    commit(&mut |tx, m| {
        put(tx, m, "beta", key("big", 7), val(5000, 12_345));
        put(tx, m, "gamma", key("gamma", 99), b"last".to_vec());
    });
    db.check().unwrap();
    drop(db);
    let image = std::fs::read(&path).unwrap();

    let m0 = Meta::decode(&image[..128]).unwrap();
    let m1 = Meta::decode(&image[PS..PS + 128]).unwrap();
    let (newest, older, newest_slot) = if m0.txid > m1.txid {
        (m0, m1, 0)
    } else {
        (m1, m0, 1)
    };
    let pages = live_pages(&image, &newest);
    for p in [
        "alpha-key-",
        "beta-key-",
        "big-key-",
        "gamma-key-",
        "zzz",
        "a",
        "\u{0}",
    ] {
        probes.insert(p.as_bytes().to_vec());
    }
    let f = Fixture {
        image,
        states,
        newest,
        older,
        newest_slot,
        pages,
        probes: probes.into_iter().collect(),
    };
    // The fixture must have every page type this test damages.
    assert_eq!(f.states.len(), 6);
    for k in [
        Kind::DataBranch,
        Kind::DataLeaf,
        Kind::Overflow,
        Kind::FreeMapLeaf,
        Kind::CatalogLeaf,
    ] {
        f.first(k);
    }
    assert!(
        f.newest.unreachable_pages > 0,
        "the fixture has no free pages"
    );
    assert!(f
        .pages
        .iter()
        .any(|p| p.kind == Kind::Overflow && p.run > 1));
    f
}

fn page(img: &[u8], id: u64) -> &[u8] {
    &img[id as usize * PS..(id as usize + 1) * PS]
}

/// Every page reachable from `meta`, classified by walking the trees; each one's header
/// (read with `PageHeader::read`) must agree with where the walk found it.
fn live_pages(img: &[u8], meta: &Meta) -> Vec<LivePage> {
    let mut out = Vec::new();
    let mut data_roots = Vec::new();
    walk(
        img,
        meta.catalog.root,
        PageRole::Catalog,
        &mut out,
        &mut data_roots,
    );
    walk(
        img,
        meta.freemap.root,
        PageRole::FreeMap,
        &mut out,
        &mut data_roots,
    );
    for root in data_roots {
        walk(img, root, PageRole::Data, &mut out, &mut Vec::new());
    }
    for p in &out {
        let h = PageHeader::read(page(img, p.id)).expect("live page with an unknown header");
        let want = match p.kind {
            Kind::DataBranch => (PageType::Branch, PageRole::Data),
            Kind::DataLeaf => (PageType::Leaf, PageRole::Data),
            Kind::Overflow => (h.page_type, h.role),
            Kind::FreeMapLeaf => (PageType::Leaf, PageRole::FreeMap),
            Kind::FreeMapBranch => (PageType::Branch, PageRole::FreeMap),
            Kind::CatalogLeaf => (PageType::Leaf, PageRole::Catalog),
            Kind::CatalogBranch => (PageType::Branch, PageRole::Catalog),
        };
        assert_eq!((h.page_type, h.role), want, "page {} header", p.id);
        if p.kind == Kind::Overflow {
            assert_eq!(h.page_type, PageType::Overflow);
        }
    }
    out.sort_by_key(|p| p.id);
    out
}

fn walk(img: &[u8], root: u64, role: PageRole, out: &mut Vec<LivePage>, roots: &mut Vec<u64>) {
    if root == 0 {
        return;
    }
    let node = NodePage::parse(root, page(img, root), role).unwrap();
    let kind = match (role, node.leaf) {
        (PageRole::Data, false) => Kind::DataBranch,
        (PageRole::Data, true) => Kind::DataLeaf,
        (PageRole::FreeMap, false) => Kind::FreeMapBranch,
        (PageRole::FreeMap, true) => Kind::FreeMapLeaf,
        (PageRole::Catalog, false) => Kind::CatalogBranch,
        (PageRole::Catalog, true) => Kind::CatalogLeaf,
    };
    out.push(LivePage {
        id: root,
        kind,
        run: 1,
    });
    for i in 0..node.count {
        if node.leaf {
            match node.entry(i).unwrap().1 {
                ValRef::Overflow { page, len } => out.push(LivePage {
                    id: page,
                    kind: Kind::Overflow,
                    run: Limits::new(PS).overflow_pages(len),
                }),
                ValRef::Inline(v) if role == PageRole::Catalog => {
                    roots.push(u64::from_le_bytes(v[..8].try_into().unwrap()))
                }
                ValRef::Inline(_) => {}
            }
        } else {
            walk(img, node.child(i).unwrap(), role, out, roots);
        }
    }
}

// ---- byte surgery --------------------------------------------------------------------------

fn u16_at(img: &[u8], at: usize) -> usize {
    u16::from_le_bytes([img[at], img[at + 1]]) as usize
}

/// Absolute offset of cell `i` of page `id`.
fn cell(img: &[u8], id: u64, i: usize) -> usize {
    let base = id as usize * PS;
    base + u16_at(img, base + PAGE_HEADER_SIZE + SLOT * i)
}

/// Recompute the crc32 of the run of `n` pages at `id`, so only the structure is wrong.
fn fix_crc(img: &mut [u8], id: u64, n: u64) {
    let (s, e) = (id as usize * PS, (id + n) as usize * PS);
    let crc = run_checksum(&img[s..e]);
    img[s + 4..s + 8].copy_from_slice(&crc.to_le_bytes());
}

fn put_u64(img: &mut [u8], at: usize, v: u64) {
    img[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn rewrite_meta(img: &mut [u8], slot: u64, f: impl FnOnce(&mut Meta)) {
    let at = slot as usize * PS;
    let mut m = Meta::decode(&img[at..at + 128]).unwrap();
    f(&mut m);
    img[at..at + 128].copy_from_slice(&m.encode());
}

/// Set the u64 a leaf cell `c` of page `id` holds as its value (an overflow reference, or a
/// catalog record's root) to `v`, with the crc recomputed so only the structure is wrong.
fn set_value_u64(img: &mut [u8], id: u64, c: usize, v: u64) {
    let klen = u16_at(img, c);
    put_u64(img, c + LEAF_CELL + klen, v);
    fix_crc(img, id, 1);
}

/// The first live data leaf with an overflow reference.
fn overflow_leaf(f: &Fixture) -> u64 {
    f.pages
        .iter()
        .find(|p| {
            p.kind == Kind::DataLeaf
                && (0..PageHeader::read(page(&f.image, p.id)).unwrap().count as usize)
                    .any(|i| f.image[cell(&f.image, p.id, i) + LEAF_FLAGS] & FLAG_OVERFLOW != 0)
        })
        .unwrap()
        .id
}

/// A leaf cell that holds an inline value / an overflow reference.
fn leaf_cell(img: &[u8], id: u64, overflow: bool) -> usize {
    let n = PageHeader::read(page(img, id)).unwrap().count as usize;
    (0..n)
        .map(|i| cell(img, id, i))
        .find(|&c| (img[c + LEAF_FLAGS] & FLAG_OVERFLOW != 0) == overflow)
        .unwrap_or_else(|| panic!("page {id} has no cell with overflow = {overflow}"))
}

// ---- running a case ------------------------------------------------------------------------

/// What a case must show, beyond "no panic" and the universal oracle.
#[derive(Clone, Debug)]
enum Expect {
    /// Damage inside a live page: if the file opens, `check()` fails with a problem naming one
    /// of these pages, or (a page the newest commit wrote) open fell back to the commit before
    /// it with a note naming the page.
    CheckNames(Vec<u64>),
    /// Structural damage (crc fixed): if the file opens, `check()` fails.
    CheckFails,
    /// The file opens at this txid and `check()` passes; `noted`: check's notes and
    /// `stats().meta_fallback` say open skipped a damaged meta.
    Opens { txid: u64, noted: bool },
    /// The file opens at this txid and `check()` passes (notes not examined).
    OpensAt(u64),
    /// Open fails with an error whose message contains this.
    OpenFails(&'static str),
    /// Nothing more than the universal oracle.
    Anything,
}

struct Case {
    label: String,
    image: Vec<u8>,
    expect: Expect,
}

fn case(label: impl Into<String>, image: Vec<u8>, expect: Expect) -> Case {
    Case {
        label: label.into(),
        image,
        expect,
    }
}

/// A larch error is "clear" when it is one of the engine's own kinds with a message.
fn assert_clear(e: &Error, ctx: &str) {
    let msg = e.to_string();
    assert!(!msg.is_empty(), "{ctx}: empty error message");
    assert!(
        matches!(
            e,
            Error::NotADatabase { .. }
                | Error::UnsupportedVersion { .. }
                | Error::Io { .. }
                | Error::Poisoned { .. }
                | Error::ReadOnly { .. }
                | Error::Corrupt { .. }
                | Error::CheckFailed(_)
        ),
        "{ctx}: unexpected kind of error: {e:?}"
    );
}

/// Read every tree in both directions, look every probe key up, ask for stats. Errors are fine;
/// returns the contents if everything read without an error.
fn exercise(db: &Db, probes: &[Vec<u8>], ctx: &str) -> Option<Model> {
    // A walk can never yield more entries than this file could hold.
    const CAP: usize = 10_000_000;
    let _ = db.stats();
    let rx = db.begin_read().ok()?;
    let names = rx.tree_names();
    let mut ok = true;
    let mut model = Model::new();
    for name in names.iter().flatten() {
        let Ok(t) = rx.open_tree(name) else {
            ok = false;
            continue;
        };
        let _ = t.len();
        let _ = t.first();
        let _ = t.last();
        let mut fwd = Tree::new();
        match t.iter() {
            Ok(it) => {
                for (n, e) in it.enumerate() {
                    assert!(n < CAP, "{ctx}: forward scan of {name:?} does not end");
                    match e {
                        Ok((k, v)) => {
                            fwd.insert(k.to_vec(), v.to_vec());
                        }
                        Err(_) => {
                            ok = false;
                            break;
                        }
                    }
                }
            }
            Err(_) => ok = false,
        }
        let all = (Bound::<&[u8]>::Unbounded, Bound::<&[u8]>::Unbounded);
        if let Ok(it) = t.range(all) {
            for (n, e) in it.rev().enumerate() {
                assert!(n < CAP, "{ctx}: backward scan of {name:?} does not end");
                if e.is_err() {
                    ok = false;
                    break;
                }
            }
        }
        for (i, p) in probes.iter().enumerate() {
            let _ = t.get(p);
            if i % 16 == 0 {
                if let Ok(r) = t.range(&p[..]..) {
                    let _ = r.take(3).count();
                }
                if let Ok(r) = t.range(..&p[..]) {
                    let _ = r.rev().take(3).count();
                }
            }
        }
        model.insert(name.clone(), fwd);
    }
    (names.is_ok() && ok).then_some(model)
}

fn normalize(m: &Model) -> Model {
    m.iter()
        .filter(|(_, t)| !t.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Does `msg` name page `id`, alone ("page 14 ") or inside a run ("pages 14-17")?
fn names_page(msg: &str, id: u64) -> bool {
    if msg.contains(&format!("page {id} ")) {
        return true;
    }
    msg.split("pages ").skip(1).any(|rest| {
        let range: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        match range
            .split_once('-')
            .map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>()))
        {
            Some((Ok(a), Ok(b))) => (a..=b).contains(&id),
            _ => false,
        }
    })
}

/// Run one case: write the image, open it, exercise it, apply the oracle and the expectation.
/// Returns a one-line summary.
fn run_case(f: &Fixture, c: &Case, dir: &Path, opts: Options) -> String {
    let path = dir.join("case.larch");
    std::fs::write(&path, &c.image).unwrap();
    let ctx = &c.label;
    let mut summary;
    // The writer refuses a file whose trees it cannot prove apart from the free map (a cycle,
    // a shared page): check the damage through a read-only open then.
    let opened = match Db::open(&path, opts.create(false)) {
        Err(e @ Error::Corrupt { .. }) if !matches!(c.expect, Expect::OpenFails(_)) => {
            assert_clear(&e, ctx);
            match &c.expect {
                Expect::Opens { txid, .. } | Expect::OpensAt(txid) => {
                    panic!("{ctx}: must open at txid {txid}, but open failed: {e}")
                }
                _ => {}
            }
            let ro = Db::open(&path, opts.create(false).read_only(true));
            ro.map(|db| (db, format!("read-write open: {e}; read-only: ")))
        }
        other => other.map(|db| (db, String::new())),
    };
    match opened {
        Err(e) => {
            assert_clear(&e, ctx);
            summary = format!("open: {e}");
            match &c.expect {
                Expect::Opens { txid, .. } | Expect::OpensAt(txid) => {
                    panic!("{ctx}: must open at txid {txid}, but open failed: {e}")
                }
                Expect::OpenFails(msg) => assert!(
                    e.to_string().contains(msg),
                    "{ctx}: open failed with {e}, not with {msg:?}"
                ),
                // The newest commit was durable (the fixture closed cleanly), so damage to a
                // page it wrote fails the open, naming the page or the manifest run holding it.
                Expect::CheckNames(ids) => assert!(
                    ids.iter().any(|&id| names_page(&e.to_string(), id)),
                    "{ctx}: open failed without naming page(s) {ids:?}: {e}"
                ),
                _ => {}
            }
        }
        Ok((db, prefix)) => {
            if let Expect::OpenFails(msg) = &c.expect {
                panic!("{ctx}: must fail to open ({msg}), but it opened");
            }
            let txid = db.begin_read().unwrap().txid();
            let report = db.check_report();
            let check = db.check();
            let contents = exercise(&db, &f.probes, ctx);
            let stats_fallback = db.stats().ok().map(|s| s.meta_fallback);
            let (passed, problems, notes) = match &report {
                Ok(r) => {
                    assert_eq!(
                        r.is_ok(),
                        check.is_ok(),
                        "{ctx}: check and check_report differ"
                    );
                    (r.is_ok(), r.problems.clone(), r.notes.clone())
                }
                Err(e) => {
                    assert_clear(e, ctx);
                    assert!(check.is_err(), "{ctx}: check_report failed, check passed");
                    let page = match e {
                        Error::Corrupt { page, .. } => Some(*page),
                        _ => None,
                    };
                    (
                        false,
                        vec![larch::Problem {
                            page,
                            what: e.to_string(),
                        }],
                        Vec::new(),
                    )
                }
            };
            if let Err(e) = &check {
                assert_clear(e, ctx);
            }
            // The universal oracle: a file that checks clean holds exactly one committed state.
            if passed {
                let want = f.states.get(&txid).unwrap_or_else(|| {
                    panic!("{ctx}: check passed at txid {txid}, which was never committed")
                });
                let got = contents.unwrap_or_else(|| {
                    panic!("{ctx}: check passed at txid {txid} but reading the trees failed")
                });
                assert!(
                    normalize(&got) == normalize(want),
                    "{ctx}: check passed at txid {txid} but the contents differ from that commit"
                );
            }
            summary = if passed {
                format!("opened at txid {txid}, check passed, notes {notes:?}")
            } else {
                format!(
                    "opened at txid {txid}, check: {} problems, first: {}",
                    problems.len(),
                    problems[0]
                )
            };
            summary = prefix + &summary;
            match &c.expect {
                Expect::CheckNames(ids) if passed => {
                    // Open may also see that the newest commit's pages did not all reach the
                    // disk intact and fall back to the commit before it, saying which page.
                    assert!(
                        txid < f.newest.txid
                            && notes
                                .iter()
                                .any(|n| ids.iter().any(|&id| names_page(n, id))),
                        "{ctx}: check passed on a damaged live page ({summary})"
                    );
                }
                Expect::CheckNames(ids) => {
                    assert!(
                        problems
                            .iter()
                            .any(|p| p.page.is_some_and(|q| ids.contains(&q))),
                        "{ctx}: no problem names page(s) {ids:?}: {problems:?}"
                    );
                }
                Expect::CheckFails => {
                    assert!(
                        !passed,
                        "{ctx}: check passed on a damaged live page ({summary})"
                    );
                }
                Expect::Opens { txid: want, noted } => {
                    assert_eq!(txid, *want, "{ctx}: opened at the wrong txid");
                    assert!(passed, "{ctx}: check failed: {problems:?}");
                    if *noted {
                        assert!(
                            !notes.is_empty(),
                            "{ctx}: check does not note the meta fallback"
                        );
                        assert!(
                            matches!(stats_fallback, Some(Some(_))),
                            "{ctx}: stats().meta_fallback is {stats_fallback:?}"
                        );
                    } else {
                        assert!(notes.is_empty(), "{ctx}: unexpected notes {notes:?}");
                        assert!(
                            matches!(stats_fallback, Some(None)),
                            "{ctx}: stats().meta_fallback is {stats_fallback:?}"
                        );
                    }
                }
                Expect::OpensAt(want) => {
                    assert_eq!(txid, *want, "{ctx}: opened at the wrong txid");
                    assert!(passed, "{ctx}: check failed: {problems:?}");
                }
                Expect::OpenFails(_) => unreachable!(),
                Expect::Anything => {}
            }
        }
    }
    std::fs::remove_file(&path).unwrap();
    summary
}

fn run_all(cases: &[Case]) {
    run_all_with(cases, Options::default());
}

fn run_all_with(cases: &[Case], opts: Options) {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    assert!(!cases.is_empty());
    for c in cases {
        let s = run_case(f, c, dir.path(), opts);
        eprintln!("{}: {s}", c.label);
    }
}

fn damaged(f: &Fixture, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut img = f.image.clone();
    edit(&mut img);
    img
}

/// The live node-page kinds damaged in every structural test, with one page each.
fn node_pages(f: &Fixture) -> Vec<LivePage> {
    [
        Kind::DataBranch,
        Kind::DataLeaf,
        Kind::FreeMapLeaf,
        Kind::CatalogLeaf,
    ]
    .into_iter()
    .map(|k| f.middle(k).clone())
    .collect()
}

// ---- the table: kinds of damage x page types ----------------------------------------------

#[test]
fn the_undamaged_fixture_opens_and_checks_clean() {
    let f = fixture();
    run_all(&[case(
        "undamaged",
        f.image.clone(),
        Expect::Opens {
            txid: f.newest.txid,
            noted: false,
        },
    )]);
}

#[test]
fn a_flipped_byte_anywhere_in_a_live_page_is_reported_by_check_with_that_page() {
    let f = fixture();
    let mut cases = Vec::new();
    let mut targets = node_pages(f);
    targets.push(f.first(Kind::DataLeaf).clone());
    targets.push(f.first(Kind::DataBranch).clone());
    let big = f
        .pages
        .iter()
        .filter(|p| p.kind == Kind::Overflow)
        .max_by_key(|p| p.run)
        .unwrap()
        .clone();
    targets.push(big);
    for p in &targets {
        let len = p.run as usize * PS;
        let slots_end = PAGE_HEADER_SIZE
            + SLOT * PageHeader::read(page(&f.image, p.id)).unwrap().count as usize;
        let mut offsets = vec![0, 1, 2, 3, 4, 7, 8, 15, 16, 17, slots_end - 1, slots_end];
        offsets.extend([PS / 2, PS - 9, PS - 1, len / 2, len - 1]);
        if p.run > 1 {
            offsets.extend([PS, PS + 1, len - PS / 2]);
        }
        for at in offsets {
            for mask in [0x01u8, 0x80, 0xff] {
                let at_abs = p.id as usize * PS + at;
                cases.push(case(
                    format!("{:?} page {} byte {at} ^ {mask:#04x}", p.kind, p.id),
                    damaged(f, |img| img[at_abs] ^= mask),
                    Expect::CheckNames(vec![p.id]),
                ));
            }
        }
    }
    run_all(&cases);
}

#[test]
fn a_flipped_byte_in_either_meta_makes_open_use_the_other_and_say_so() {
    let f = fixture();
    let older_slot = 1 - f.newest_slot;
    let mut cases = Vec::new();
    for (slot, other) in [(f.newest_slot, f.older.txid), (older_slot, f.newest.txid)] {
        for at in 0..128 {
            let abs = slot as usize * PS + at;
            cases.push(case(
                format!("meta slot {slot} byte {at} ^ 0x04"),
                damaged(f, |img| img[abs] ^= 0x04),
                Expect::Opens {
                    txid: other,
                    noted: true,
                },
            ));
        }
    }
    run_all(&cases);
}

#[test]
fn a_child_pointer_beyond_the_file_is_a_clear_error_not_a_crash() {
    let f = fixture();
    let hw = f.newest.high_water;
    let beyond = [
        hw,
        hw + 1,
        f.file_pages(),
        f.file_pages() + 1000,
        u64::MAX / 4096,
        u64::MAX,
    ];
    let mut cases = Vec::new();
    let branch = f.first(Kind::DataBranch).id;
    let n = PageHeader::read(page(&f.image, branch)).unwrap().count as usize;
    for bad in beyond.iter().copied().chain([0, 1]) {
        for i in [0, n / 2, n - 1] {
            cases.push(case(
                format!("branch {branch} child {i} -> {bad}"),
                damaged(f, |img| {
                    let c = cell(img, branch, i);
                    put_u64(img, c + BRANCH_CHILD, bad);
                    fix_crc(img, branch, 1);
                }),
                Expect::CheckFails,
            ));
        }
        // A leaf's overflow reference.
        let leaf = overflow_leaf(f);
        cases.push(case(
            format!("leaf {leaf} overflow reference -> {bad}"),
            damaged(f, |img| {
                let c = leaf_cell(img, leaf, true);
                set_value_u64(img, leaf, c, bad);
            }),
            Expect::CheckFails,
        ));
        // A catalog record's root page.
        let cat = f.first(Kind::CatalogLeaf).id;
        cases.push(case(
            format!("catalog {cat} first tree root -> {bad}"),
            damaged(f, |img| {
                let c = cell(img, cat, 0);
                set_value_u64(img, cat, c, bad);
            }),
            Expect::CheckFails,
        ));
        // A free-map chunk key (chunk numbers are big-endian) far beyond the file.
        let fm = f.first(Kind::FreeMapLeaf).id;
        cases.push(case(
            format!("free-map leaf {fm} chunk key -> {bad}"),
            damaged(f, |img| {
                let c = cell(img, fm, 0);
                img[c + LEAF_CELL..c + LEAF_CELL + 8].copy_from_slice(&bad.max(1).to_be_bytes());
                fix_crc(img, fm, 1);
            }),
            Expect::CheckFails,
        ));
        // The newest meta's roots (meta crc recomputed): invalid, so open takes the older one.
        for which in ["catalog", "free map"] {
            cases.push(case(
                format!("newest meta {which} root -> {bad}"),
                damaged(f, |img| {
                    rewrite_meta(img, f.newest_slot, |m| match which {
                        "catalog" => m.catalog.root = bad,
                        _ => m.freemap.root = bad,
                    })
                }),
                if bad == 0 {
                    // Root 0 is a legal "empty tree", so the meta is valid; its entry count
                    // and depth are not, and check must say so.
                    Expect::CheckFails
                } else {
                    Expect::Opens {
                        txid: f.older.txid,
                        noted: true,
                    }
                },
            ));
        }
    }
    run_all(&cases);
}

#[test]
fn a_child_pointer_to_its_own_page_is_caught_as_a_cycle() {
    let f = fixture();
    let mut cases = Vec::new();
    let branch = f.first(Kind::DataBranch).id;
    let n = PageHeader::read(page(&f.image, branch)).unwrap().count as usize;
    for i in [0, 1, n - 1] {
        cases.push(case(
            format!("branch {branch} child {i} -> itself"),
            damaged(f, |img| {
                let c = cell(img, branch, i);
                put_u64(img, c + BRANCH_CHILD, branch);
                fix_crc(img, branch, 1);
            }),
            Expect::CheckNames(vec![branch]),
        ));
    }
    // Every child of the branch points at the branch: a walk that trusted it would never end.
    cases.push(case(
        format!("branch {branch} every child -> itself"),
        damaged(f, |img| {
            for i in 0..n {
                let c = cell(img, branch, i);
                put_u64(img, c + BRANCH_CHILD, branch);
            }
            fix_crc(img, branch, 1);
        }),
        Expect::CheckNames(vec![branch]),
    ));
    // The same, with the tree's depth in the catalog raised to the maximum, so the cycle is
    // not cut short by a leaf expected at level 1.
    let cat = f.first(Kind::CatalogLeaf).id;
    for depth in [64u32, 65, u32::MAX] {
        cases.push(case(
            format!("alpha depth {depth} and branch {branch} every child -> itself"),
            damaged(f, |img| {
                for i in 0..n {
                    let c = cell(img, branch, i);
                    put_u64(img, c + BRANCH_CHILD, branch);
                }
                fix_crc(img, branch, 1);
                let c = cell(img, cat, 0); // "alpha" sorts first
                assert_eq!(&img[c + LEAF_CELL..c + LEAF_CELL + 5], b"alpha");
                let klen = u16_at(img, c);
                img[c + LEAF_CELL + klen + 16..c + LEAF_CELL + klen + 20]
                    .copy_from_slice(&depth.to_le_bytes());
                fix_crc(img, cat, 1);
            }),
            Expect::CheckFails,
        ));
    }
    // A leaf's overflow reference to the leaf itself.
    let leaf = overflow_leaf(f);
    cases.push(case(
        format!("leaf {leaf} overflow reference -> itself"),
        damaged(f, |img| {
            let c = leaf_cell(img, leaf, true);
            set_value_u64(img, leaf, c, leaf);
        }),
        Expect::CheckNames(vec![leaf]),
    ));
    // Catalog records pointing at the catalog's own page, and two trees sharing a root.
    let beta_root = {
        let c = cell(&f.image, cat, 1);
        assert_eq!(&f.image[c + LEAF_CELL..c + LEAF_CELL + 4], b"beta");
        let klen = u16_at(&f.image, c);
        u64::from_le_bytes(
            f.image[c + LEAF_CELL + klen..c + LEAF_CELL + 8 + klen]
                .try_into()
                .unwrap(),
        )
    };
    for (what, target) in [("the catalog page", cat), ("beta's root", beta_root)] {
        cases.push(case(
            format!("catalog {cat}: alpha's root -> {what}"),
            damaged(f, |img| {
                let c = cell(img, cat, 0);
                set_value_u64(img, cat, c, target);
            }),
            Expect::CheckFails,
        ));
    }
    // The newest meta with its free-map root at the catalog root (one page in two trees).
    cases.push(case(
        "newest meta free-map root -> catalog root",
        damaged(f, |img| {
            rewrite_meta(img, f.newest_slot, |m| m.freemap.root = m.catalog.root)
        }),
        Expect::Anything,
    ));
    run_all(&cases);
}

#[test]
fn absurd_entry_counts_are_reported_not_trusted() {
    let f = fixture();
    let mut cases = Vec::new();
    for p in node_pages(f) {
        let original = PageHeader::read(page(&f.image, p.id)).unwrap().count;
        for count in [
            65535u16,
            ((PS - 16) / 2) as u16,
            ((PS - 16) / 2 + 1) as u16,
            0,
            1,
        ] {
            if count == original {
                continue;
            }
            cases.push(case(
                format!("{:?} page {} count = {count}", p.kind, p.id),
                damaged(f, |img| {
                    let at = p.id as usize * PS + 2;
                    img[at..at + 2].copy_from_slice(&count.to_le_bytes());
                    fix_crc(img, p.id, 1);
                }),
                if count == 1 {
                    // A shorter but well-formed page: the tree loses entries, which check
                    // catches as a count that no longer adds up (reported at the tree's root).
                    Expect::CheckFails
                } else {
                    Expect::CheckNames(vec![p.id])
                },
            ));
        }
    }
    // An overflow page's count is unused (0): any value is harmless.
    let o = f.first(Kind::Overflow).clone();
    cases.push(case(
        format!("overflow page {} count = 65535", o.id),
        damaged(f, |img| {
            let at = o.id as usize * PS + 2;
            img[at..at + 2].copy_from_slice(&65535u16.to_le_bytes());
            fix_crc(img, o.id, o.run);
        }),
        Expect::Anything,
    ));
    run_all(&cases);
}

#[test]
fn absurd_key_and_value_lengths_are_reported_not_trusted() {
    let f = fixture();
    let mut cases = Vec::new();
    let leaf = f.middle(Kind::DataLeaf).id;
    for vlen in [u32::MAX, 1 << 20, PS as u32] {
        cases.push(case(
            format!("leaf {leaf} inline vlen = {vlen}"),
            damaged(f, |img| {
                let c = leaf_cell(img, leaf, false);
                img[c + LEAF_VLEN..c + LEAF_VLEN + 4].copy_from_slice(&vlen.to_le_bytes());
                fix_crc(img, leaf, 1);
            }),
            Expect::CheckNames(vec![leaf]),
        ));
    }
    for klen in [u16::MAX, PS as u16, 0] {
        cases.push(case(
            format!("leaf {leaf} klen = {klen}"),
            damaged(f, |img| {
                let c = leaf_cell(img, leaf, false);
                img[c..c + 2].copy_from_slice(&klen.to_le_bytes());
                fix_crc(img, leaf, 1);
            }),
            Expect::CheckNames(vec![leaf]),
        ));
    }
    // A slot (cell offset) pointing into the slots or past the page.
    for off in [0u16, 16, u16::MAX, PS as u16 - 1] {
        cases.push(case(
            format!("leaf {leaf} slot 0 = {off}"),
            damaged(f, |img| {
                let at = leaf as usize * PS + PAGE_HEADER_SIZE;
                img[at..at + 2].copy_from_slice(&off.to_le_bytes());
                fix_crc(img, leaf, 1);
            }),
            Expect::CheckNames(vec![leaf]),
        ));
    }
    let branch = f.first(Kind::DataBranch).id;
    cases.push(case(
        format!("branch {branch} separator 1 klen = 65535"),
        damaged(f, |img| {
            let c = cell(img, branch, 1);
            img[c..c + 2].copy_from_slice(&u16::MAX.to_le_bytes());
            fix_crc(img, branch, 1);
        }),
        Expect::CheckNames(vec![branch]),
    ));
    // Overflow: the length in the leaf, and the length in the run's header.
    let oleaf = overflow_leaf(f);
    for vlen in [u32::MAX, 1, 0] {
        cases.push(case(
            format!("leaf {oleaf} overflow vlen = {vlen}"),
            damaged(f, |img| {
                let c = leaf_cell(img, oleaf, true);
                img[c + LEAF_VLEN..c + LEAF_VLEN + 4].copy_from_slice(&vlen.to_le_bytes());
                fix_crc(img, oleaf, 1);
            }),
            Expect::CheckFails,
        ));
    }
    let o = f.first(Kind::Overflow).clone();
    for len in [u64::MAX, u64::MAX - 23, 1 << 40, 0] {
        cases.push(case(
            format!("overflow run {} length = {len}", o.id),
            damaged(f, |img| {
                put_u64(img, o.id as usize * PS + PAGE_HEADER_SIZE, len);
                fix_crc(img, o.id, o.run);
            }),
            Expect::CheckNames(vec![o.id]),
        ));
    }
    // Catalog: a record's value length, entry count and depth.
    let cat = f.first(Kind::CatalogLeaf).id;
    for (what, at, bytes) in [
        ("vlen = 2^32-1", LEAF_VLEN, u32::MAX.to_le_bytes().to_vec()),
        ("vlen = 3", 4, 3u32.to_le_bytes().to_vec()),
    ] {
        cases.push(case(
            format!("catalog {cat} alpha {what}"),
            damaged(f, |img| {
                let c = cell(img, cat, 0);
                img[c + at..c + at + bytes.len()].copy_from_slice(&bytes);
                fix_crc(img, cat, 1);
            }),
            Expect::CheckFails,
        ));
    }
    for (what, rel, bytes) in [
        ("entries = 2^64-1", 8usize, u64::MAX.to_le_bytes().to_vec()),
        ("depth = 2^32-1", 16, u32::MAX.to_le_bytes().to_vec()),
        ("depth = 0", 16, 0u32.to_le_bytes().to_vec()),
        ("depth = 1", 16, 1u32.to_le_bytes().to_vec()),
        ("depth = 3", 16, 3u32.to_le_bytes().to_vec()),
    ] {
        cases.push(case(
            format!("catalog {cat} alpha {what}"),
            damaged(f, |img| {
                let c = cell(img, cat, 0);
                let klen = u16_at(img, c);
                let v = c + LEAF_CELL + klen;
                img[v + rel..v + rel + bytes.len()].copy_from_slice(&bytes);
                fix_crc(img, cat, 1);
            }),
            Expect::CheckFails,
        ));
    }
    // Free map: a chunk of the wrong length.
    let fm = f.first(Kind::FreeMapLeaf).id;
    for vlen in [u32::MAX, 255, 257] {
        cases.push(case(
            format!("free-map leaf {fm} chunk vlen = {vlen}"),
            damaged(f, |img| {
                let c = cell(img, fm, 0);
                img[c + LEAF_VLEN..c + LEAF_VLEN + 4].copy_from_slice(&vlen.to_le_bytes());
                fix_crc(img, fm, 1);
            }),
            Expect::CheckNames(vec![fm, f.newest.freemap.root]),
        ));
    }
    // Meta tree records (meta crc recomputed): absurd depth and entry counts.
    for (what, edit) in [
        (
            "catalog depth = 2^32-1",
            (|m: &mut Meta| m.catalog.depth = u32::MAX) as fn(&mut Meta),
        ),
        ("catalog depth = 0", |m: &mut Meta| m.catalog.depth = 0),
        ("catalog depth = 2", |m: &mut Meta| m.catalog.depth = 2),
        ("catalog entries = 2^64-1", |m: &mut Meta| {
            m.catalog.entries = u64::MAX
        }),
        ("free-map depth = 65", |m: &mut Meta| m.freemap.depth = 65),
        ("free-map entries = 0", |m: &mut Meta| m.freemap.entries = 0),
        ("live pages = 2^64-1", |m: &mut Meta| {
            m.live_pages = u64::MAX
        }),
        ("unreachable pages = 2^64-1", |m: &mut Meta| {
            m.unreachable_pages = u64::MAX
        }),
    ] {
        cases.push(case(
            format!("newest meta {what}"),
            damaged(f, |img| rewrite_meta(img, f.newest_slot, edit)),
            Expect::CheckFails,
        ));
    }
    run_all(&cases);
}

#[test]
fn a_high_water_mark_past_the_end_of_the_file_makes_open_fall_back_or_fail() {
    let f = fixture();
    let mut cases = Vec::new();
    let fp = f.file_pages();
    for hw in [fp + 1, fp * 2, u64::MAX / PS as u64 + 1, u64::MAX] {
        cases.push(case(
            format!("newest meta high water = {hw}"),
            damaged(f, |img| {
                rewrite_meta(img, f.newest_slot, |m| m.high_water = hw)
            }),
            Expect::Opens {
                txid: f.older.txid,
                noted: true,
            },
        ));
        cases.push(case(
            format!("both metas high water = {hw}"),
            damaged(f, |img| {
                rewrite_meta(img, 0, |m| m.high_water = hw);
                rewrite_meta(img, 1, |m| m.high_water = hw);
            }),
            Expect::OpenFails("not a larch database"),
        ));
    }
    // Below the pages the trees use (but still in the file): check must catch it.
    for hw in [2, f.newest.high_water - 1] {
        cases.push(case(
            format!("newest meta high water = {hw}"),
            damaged(f, |img| {
                rewrite_meta(img, f.newest_slot, |m| m.high_water = hw)
            }),
            Expect::Anything,
        ));
    }
    run_all(&cases);
}

#[test]
fn a_wrong_page_size_in_a_meta_is_a_clear_error_or_a_fallback() {
    let f = fixture();
    let older_slot = 1 - f.newest_slot;
    let mut cases = Vec::new();
    for slot in [f.newest_slot, older_slot] {
        let other = if slot == f.newest_slot {
            f.older.txid
        } else {
            f.newest.txid
        };
        // Not a legal page size at all: the meta is invalid.
        for ps in [0u32, 1, 2048, 4097, 6144, 131072, u32::MAX] {
            cases.push(case(
                format!("meta slot {slot} page size = {ps}"),
                damaged(f, |img| rewrite_meta(img, slot, |m| m.page_size = ps)),
                Expect::Opens {
                    txid: other,
                    noted: true,
                },
            ));
        }
        // Legal but wrong: whatever open makes of it, no crash; a clean check means a real state.
        for ps in [8192u32, 16384, 65536] {
            cases.push(case(
                format!("meta slot {slot} page size = {ps}"),
                damaged(f, |img| rewrite_meta(img, slot, |m| m.page_size = ps)),
                Expect::Anything,
            ));
        }
    }
    for ps in [8192u32, 65536, 2048] {
        cases.push(case(
            format!("both metas page size = {ps}"),
            damaged(f, |img| {
                rewrite_meta(img, 0, |m| m.page_size = ps);
                rewrite_meta(img, 1, |m| m.page_size = ps);
            }),
            Expect::Anything,
        ));
    }
    run_all(&cases);
}

#[test]
fn zeroing_either_meta_opens_at_the_other_with_its_whole_state() {
    let f = fixture();
    let (n, o) = (
        f.newest_slot as usize * PS,
        (1 - f.newest_slot) as usize * PS,
    );
    run_all(&[
        case(
            "newest meta zeroed",
            damaged(f, |img| img[n..n + PS].fill(0)),
            Expect::OpensAt(f.older.txid),
        ),
        case(
            "older meta zeroed",
            damaged(f, |img| img[o..o + PS].fill(0)),
            Expect::OpensAt(f.newest.txid),
        ),
    ]);
}

#[test]
fn zeroing_the_newest_meta_falls_back_to_the_other_and_says_so() {
    let f = fixture();
    let s = f.newest_slot as usize * PS;
    run_all(&[
        case(
            "newest meta: first 128 bytes zeroed",
            damaged(f, |img| img[s..s + 128].fill(0)),
            Expect::Opens {
                txid: f.older.txid,
                noted: true,
            },
        ),
        case(
            "newest meta: whole page zeroed",
            damaged(f, |img| img[s..s + PS].fill(0)),
            Expect::Opens {
                txid: f.older.txid,
                noted: true,
            },
        ),
    ]);
}

#[test]
fn zeroing_the_older_meta_keeps_the_newest_and_says_so() {
    let f = fixture();
    let s = (1 - f.newest_slot) as usize * PS;
    run_all(&[case(
        "older meta zeroed",
        damaged(f, |img| img[s..s + PS].fill(0)),
        Expect::Opens {
            txid: f.newest.txid,
            noted: true,
        },
    )]);
}

#[test]
fn zeroing_both_metas_is_not_a_larch_database() {
    let f = fixture();
    run_all(&[
        case(
            "both metas zeroed",
            damaged(f, |img| img[..2 * PS].fill(0)),
            Expect::OpenFails("not a larch database"),
        ),
        case(
            "whole file zeroed",
            vec![0u8; f.image.len()],
            Expect::OpenFails("not a larch database"),
        ),
        case(
            "empty file",
            Vec::new(),
            Expect::OpenFails("not a larch database"),
        ),
    ]);
}

#[test]
fn truncation_at_any_offset_is_a_clear_error_or_a_whole_committed_state() {
    let f = fixture();
    let need = f.newest.high_water as usize * PS;
    let older_need = f.older.high_water as usize * PS;
    let mut lens: BTreeSet<usize> = (0..=f.image.len()).step_by(PS).collect();
    lens.extend([
        1,
        127,
        128,
        129,
        4095,
        4097,
        4096 + 127,
        4096 + 128,
        8191,
        8193,
        12345,
    ]);
    for base in [need, older_need, f.image.len()] {
        lens.extend([base - 1, base + 1, base - 513, base + 777]);
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..40 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        lens.insert((seed % f.image.len() as u64) as usize);
    }
    let cases: Vec<Case> = lens
        .into_iter()
        .filter(|&l| l <= f.image.len())
        .map(|l| {
            let expect = if l >= need {
                Expect::Opens {
                    txid: f.newest.txid,
                    noted: false,
                }
            } else if l >= older_need {
                Expect::Opens {
                    txid: f.older.txid,
                    noted: true,
                }
            } else if l < 2 * PS {
                Expect::OpenFails("not a larch database")
            } else {
                Expect::Anything
            };
            case(
                format!("truncated to {l} bytes"),
                f.image[..l].to_vec(),
                expect,
            )
        })
        .collect();
    run_all(&cases);
}

#[test]
fn garbage_appended_to_the_file_is_ignored() {
    let f = fixture();
    let mut cases = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for n in [1usize, 17, 4095, 4096, 4097, 10_000, 65_536] {
        for fill in ["random", "0xff", "a copy of a leaf"] {
            let mut img = f.image.clone();
            match fill {
                "random" => img.extend((0..n).map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })),
                "0xff" => img.extend(std::iter::repeat_n(0xffu8, n)),
                _ => {
                    let leaf = page(&f.image, f.first(Kind::DataLeaf).id).to_vec();
                    img.extend(leaf.iter().cycle().take(n));
                }
            }
            cases.push(case(
                format!("{n} bytes of {fill} appended"),
                img,
                Expect::Opens {
                    txid: f.newest.txid,
                    noted: false,
                },
            ));
        }
    }
    run_all(&cases);
}

// ---- verify_checksums --------------------------------------------------------------------

/// The tree, key and absolute offset of one byte inside the value of an entry on a live leaf
/// (inline) or inside an overflow run.
fn value_byte(f: &Fixture, overflow: bool) -> (String, Vec<u8>, usize) {
    let cat = f.first(Kind::CatalogLeaf).id;
    let ncat = PageHeader::read(page(&f.image, cat)).unwrap().count as usize;
    for p in f.pages.iter().filter(|p| p.kind == Kind::DataLeaf) {
        let node = NodePage::parse(p.id, page(&f.image, p.id), PageRole::Data).unwrap();
        for i in 0..node.count {
            let (k, v) = node.entry(i).unwrap();
            let at = match (v, overflow) {
                (ValRef::Inline(b), false) if !b.is_empty() => {
                    let base = f.image.as_ptr() as usize;
                    b.as_ptr() as usize - base + b.len() / 2
                }
                (ValRef::Overflow { page, len }, true) if len > PS as u64 => {
                    page as usize * PS + PS + 10
                }
                _ => continue,
            };
            // Which tree is this leaf in? Look the key up in each tree's committed state.
            let newest = &f.states[&f.newest.txid];
            let tree = (0..ncat)
                .map(|j| {
                    let c = cell(&f.image, cat, j);
                    let klen = u16_at(&f.image, c);
                    String::from_utf8(f.image[c + LEAF_CELL..c + LEAF_CELL + klen].to_vec())
                        .unwrap()
                })
                .find(|t| newest.get(t).is_some_and(|m| m.contains_key(k)))
                .unwrap();
            return (tree, k.to_vec(), at);
        }
    }
    panic!("no value found");
}

#[test]
fn with_verify_checksums_a_flipped_value_byte_is_an_error_not_wrong_data() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    for overflow in [false, true] {
        let (tree, k, at) = value_byte(f, overflow);
        let want = f.states[&f.newest.txid][&tree][&k].clone();
        let img = damaged(f, |img| img[at] ^= 0x20);
        let path = dir.path().join(format!("verify-{overflow}.larch"));
        std::fs::write(&path, &img).unwrap();
        let ctx = format!(
            "{tree}/{} (overflow: {overflow})",
            String::from_utf8_lossy(&k)
        );
        {
            // Without verification the damage reads as wrong data: the case is meaningful.
            let db = Db::open(&path, Options::default().create(false)).unwrap();
            let rx = db.begin_read().unwrap();
            let got = rx
                .open_tree(&tree)
                .unwrap()
                .get(&k)
                .unwrap()
                .unwrap()
                .to_vec();
            assert_ne!(got, want, "{ctx}: the flipped byte is not in the value");
        }
        let db = Db::open(
            &path,
            Options::default().create(false).verify_checksums(true),
        )
        .unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_tree(&tree).unwrap();
        match t.get(&k) {
            Err(e) => {
                assert_clear(&e, &ctx);
                assert!(e.to_string().contains("checksum"), "{ctx}: {e}");
            }
            Ok(v) => panic!(
                "{ctx}: get returned {:?} bytes instead of a checksum error",
                v.map(|v| v.len())
            ),
        }
        // A scan reaching the entry stops with an error, never yields the wrong bytes.
        let scanned: Vec<_> = t.iter().unwrap().collect();
        assert!(
            scanned.iter().any(|e| e.is_err()),
            "{ctx}: scan saw no error"
        );
        for (kk, v) in scanned.into_iter().flatten() {
            if kk == &k[..] {
                panic!("{ctx}: scan returned the damaged value");
            }
            assert_eq!(
                v,
                &f.states[&f.newest.txid][&tree][kk][..],
                "{ctx}: wrong data"
            );
        }
        drop(rx);
        let dmg = db.check_report().unwrap();
        assert!(!dmg.is_ok(), "{ctx}: check passed");
    }
    // And the same damage through the whole table runner, with verification on.
    let (_, _, at) = value_byte(f, false);
    let leaf = (at / PS) as u64;
    run_all_with(
        &[case(
            format!("leaf {leaf} value byte flipped, verify_checksums on"),
            damaged(f, |img| img[at] ^= 0x20),
            Expect::CheckNames(vec![leaf]),
        )],
        Options::default().verify_checksums(true),
    );
}

/// Flip one bit of the free map's chunk 0 (crc left stale, as a real bit flip would) so it marks
/// live page `victim` free; open, commit, and require that `alpha` still reads `want`: open must
/// refuse the damage or the writer must not reuse the page.
fn free_map_bit_flip(img: &[u8], victim: u64, want: &Tree, ctx: &str) {
    let meta = {
        let a = Meta::decode(&img[..128]).unwrap();
        let b = Meta::decode(&img[PS..PS + 128]).unwrap();
        if a.txid > b.txid {
            a
        } else {
            b
        }
    };
    let fm = meta.freemap.root;
    let mut img = img.to_vec();
    let c = cell(&img, fm, 0);
    assert_eq!(
        &img[c + LEAF_CELL..c + LEAF_CELL + 8],
        &0u64.to_be_bytes(),
        "chunk 0 first"
    );
    let chunk = c + LEAF_CELL + 8;
    img[chunk + victim as usize / 8] |= 1 << (victim % 8);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("freemap-bit.larch");
    std::fs::write(&path, &img).unwrap();
    let db = match Db::open(&path, Options::default().create(false)) {
        Err(e) => return assert_clear(&e, ctx),
        Ok(db) => db,
    };
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("gamma").unwrap();
        for i in 0..50 {
            t.insert(&key("new", i), &val(i, 300)).unwrap();
        }
    }
    if let Err(e) = tx.commit() {
        return assert_clear(&e, ctx);
    }
    let rx = db.begin_read().unwrap();
    let alpha = rx.open_tree("alpha").unwrap();
    let got: Result<Tree, _> = alpha
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect();
    assert!(
        got.as_ref().is_ok_and(|g| g == want),
        "{ctx}: a commit after opening with a flipped free-map bit overwrote live page \
         {victim}: alpha now reads {:?} entries (of {})",
        got.map(|g| g.len()),
        want.len()
    );
}

#[test]
fn a_flipped_free_map_bit_in_the_newest_commit_is_not_trusted_by_the_writer() {
    let f = fixture();
    let victim = f.first(Kind::DataBranch).id; // alpha's root
    free_map_bit_flip(
        &f.image,
        victim,
        &f.states[&f.newest.txid]["alpha"],
        "newest commit's free map",
    );
}

#[test]
fn a_flipped_free_map_bit_in_an_older_free_map_page_is_not_trusted_by_the_writer() {
    // Two commits that leave the free map alone, so its page is not among the pages the newest
    // commits wrote (which open verifies).
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quiet.larch");
    std::fs::write(&path, &f.image).unwrap();
    {
        let db = Db::open(&path, Options::default().create(false)).unwrap();
        for _ in 0..2 {
            db.begin_write().unwrap().commit().unwrap();
        }
        db.check().unwrap();
    }
    let img = std::fs::read(&path).unwrap();
    let newest = Meta::decode(&img[..128])
        .into_iter()
        .chain(Meta::decode(&img[PS..PS + 128]))
        .max_by_key(|m| m.txid)
        .unwrap();
    assert_eq!(
        newest.freemap.root, f.newest.freemap.root,
        "the empty commits moved the free map"
    );
    let victim = f.first(Kind::DataBranch).id;
    free_map_bit_flip(
        &img,
        victim,
        &f.states[&f.newest.txid]["alpha"],
        "older free-map page",
    );
}

/// A branch made to point at itself while the file is open (another program writing into it,
/// or a bug that reused a reachable page): the open's walk cannot see it, and an insert, an
/// append, a remove or a range removal that descends through it must fail with `Corrupt`, not
/// recurse until the stack overflows.
#[test]
fn a_cycle_made_while_the_file_is_open_fails_the_edit_not_the_process() {
    use std::os::unix::fs::FileExt;
    let f = fixture();
    let branch = f.first(Kind::DataBranch).id;
    let n = PageHeader::read(page(&f.image, branch)).unwrap().count as usize;
    let looped = damaged(f, |img| {
        for i in 0..n {
            let c = cell(img, branch, i);
            put_u64(img, c + BRANCH_CHILD, branch);
        }
        fix_crc(img, branch, 1);
    });
    for mode in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("open.larch");
        std::fs::write(&path, &f.image).unwrap();
        let db = Db::open(&path, Options::default()).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let at = branch as usize * PS;
        file.write_all_at(&looped[at..at + PS], at as u64).unwrap();
        drop(file);
        let mut corrupt = 0;
        for name in f.states[&f.newest.txid].keys() {
            let tx = db.begin_write().unwrap();
            let mut t = tx.open_tree(name).unwrap();
            let r = match mode {
                0 => t.insert(b"alpha00450", b"v"),
                1 => t.append(&[0xff; 40], b"v"),
                2 => t.remove(b"alpha00450").map(|_| ()),
                _ => t
                    .remove_range(&b"alpha00100"[..]..&b"alpha00700"[..])
                    .map(|_| ()),
            };
            if let Err(e) = r {
                assert!(matches!(e, Error::Corrupt { .. }), "{name}: {e}");
                corrupt += 1;
            }
        }
        assert!(corrupt > 0, "no edit went through the looped branch");
    }
}
