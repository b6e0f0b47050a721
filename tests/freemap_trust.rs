//! The writer overwrites what the free map calls free, so a read-write open must not trust a
//! free map that marks a live page free, even one that is whole (checksums right) and agrees
//! with the meta's counters: a crafted file, or a bug that lost a bit. Each case marks one live
//! page of a real database free that way; a read-write open must fail with `Error::Corrupt`
//! naming that page and leave the file byte for byte as it was, and a read-only open (which does
//! not load the free map) must still read everything.

use std::collections::BTreeMap;

use larch::raw::{run_checksum, Meta, NodePage, PageRole, ValRef, CHUNK_BYTES, CHUNK_PAGES};
use larch::{Db, Durability, Error, Options};

const PS: usize = 4096;

type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// A database with several trees (one of depth 2), overflow runs, and free pages in its free
/// map; and what it holds.
fn fixture(dir: &std::path::Path) -> (Vec<u8>, Model) {
    let path = dir.join("fixture.larch");
    // Every commit saves its free map (a commit carries its changes otherwise): the newest
    // meta's map is the one to craft.
    let db = Db::open(
        &path,
        Options::default()
            .page_size(PS)
            .durability(Durability::Sync)
            .carried_max_bits(1),
    )
    .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut a = tx.open_tree("alpha").unwrap();
        for i in 0..200u32 {
            a.insert(format!("alpha{i:05}").as_bytes(), &[i as u8; 150])
                .unwrap();
        }
        let mut b = tx.open_tree("beta").unwrap();
        for i in 0..4u32 {
            b.insert(format!("big{i}").as_bytes(), &vec![i as u8 + 1; 9000])
                .unwrap();
        }
        tx.open_tree("gamma").unwrap().insert(b"g", b"1").unwrap();
    }
    tx.commit().unwrap();
    // Free pages: rewrite part of alpha and drop a big value.
    let tx = db.begin_write().unwrap();
    {
        let mut a = tx.open_tree("alpha").unwrap();
        for i in (0..200u32).step_by(7) {
            a.remove(format!("alpha{i:05}").as_bytes()).unwrap();
        }
        tx.open_tree("beta").unwrap().remove(b"big1").unwrap();
    }
    tx.commit().unwrap();
    db.check().unwrap();
    let model = read_model(&db);
    drop(db);
    (std::fs::read(&path).unwrap(), model)
}

fn read_model(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    let mut m = Model::new();
    for name in rx.tree_names().unwrap() {
        let t = rx.open_tree(&name).unwrap();
        let tree = t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        m.insert(name, tree);
    }
    m
}

fn page(img: &[u8], id: u64) -> &[u8] {
    &img[id as usize * PS..(id as usize + 1) * PS]
}

/// The slot (0 or 1) of the newest meta, and the meta.
fn newest(img: &[u8]) -> (u64, Meta) {
    let a = Meta::decode(&img[..128]).ok();
    let b = Meta::decode(&img[PS..PS + 128]).ok();
    match (a, b) {
        (Some(a), Some(b)) if b.txid > a.txid => (1, b),
        (Some(a), _) => (0, a),
        (None, Some(b)) => (1, b),
        _ => panic!("no valid meta"),
    }
}

/// A live page: what it is, and its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    DataBranch,
    DataLeaf,
    /// A page inside an overflow run (not its first).
    OverflowTail,
    CatalogLeaf,
    FreeMapLeaf,
}

fn live_pages(img: &[u8], meta: &Meta) -> Vec<(Kind, u64)> {
    fn walk(img: &[u8], id: u64, role: PageRole, out: &mut Vec<(Kind, u64)>, roots: &mut Vec<u64>) {
        let node = NodePage::parse(id, page(img, id), role).unwrap();
        let kind = match (role, node.leaf) {
            (PageRole::Data, false) => Kind::DataBranch,
            (PageRole::Data, true) => Kind::DataLeaf,
            (PageRole::Catalog, true) => Kind::CatalogLeaf,
            (PageRole::FreeMap, true) => Kind::FreeMapLeaf,
            (r, _) => panic!("the fixture has a {r:?} branch"),
        };
        out.push((kind, id));
        for i in 0..node.count {
            if !node.leaf {
                walk(img, node.child(i).unwrap(), role, out, roots);
                continue;
            }
            match node.entry(i).unwrap().1 {
                ValRef::Overflow { page, len } => {
                    let n = (24 + len).div_ceil(PS as u64);
                    out.extend((page + 1..page + n).map(|p| (Kind::OverflowTail, p)));
                }
                ValRef::Inline(v) if role == PageRole::Catalog => {
                    roots.push(u64::from_le_bytes(v[..8].try_into().unwrap()))
                }
                ValRef::Inline(_) => {}
            }
        }
    }
    let mut out = Vec::new();
    let mut roots = Vec::new();
    walk(
        img,
        meta.catalog.root,
        PageRole::Catalog,
        &mut out,
        &mut roots,
    );
    walk(
        img,
        meta.freemap.root,
        PageRole::FreeMap,
        &mut out,
        &mut roots,
    );
    for r in roots {
        walk(img, r, PageRole::Data, &mut out, &mut Vec::new());
    }
    out
}

/// `img` with live page `victim` marked free in the newest meta's free map: the bit set in its
/// chunk, the free-map leaf's checksum recomputed, and the meta's live and unreachable counters
/// moved by one so they agree with the free map. The meta's manifest is kept, its run
/// checksums recomputed.
fn mark_free(img: &[u8], victim: u64) -> Vec<u8> {
    let mut img = img.to_vec();
    let (slot, mut meta) = newest(&img);
    let fm = meta.freemap.root;
    let leaf = NodePage::parse(fm, page(&img, fm), PageRole::FreeMap).unwrap();
    assert!(leaf.leaf, "the fixture's free map is one leaf");
    let want = (victim / CHUNK_PAGES).to_be_bytes();
    let i = (0..leaf.count)
        .find(|&i| leaf.key(i).unwrap() == want)
        .expect("the free map has the victim's chunk");
    let ValRef::Inline(chunk) = leaf.entry(i).unwrap().1 else {
        panic!("an overflow free-map chunk")
    };
    assert_eq!(chunk.len(), CHUNK_BYTES);
    let at = chunk.as_ptr() as usize - img.as_ptr() as usize;
    let bit = (victim % CHUNK_PAGES) as usize;
    assert_eq!(
        img[at + bit / 8] & (1 << (bit % 8)),
        0,
        "the victim is live"
    );
    img[at + bit / 8] |= 1 << (bit % 8);
    let base = fm as usize * PS;
    let crc = run_checksum(&img[base..base + PS]);
    img[base + 4..base + 8].copy_from_slice(&crc.to_le_bytes());
    let at = slot as usize * PS;
    // The manifest keeps its runs, with checksums of what the pages now hold: a crafted file
    // can be consistent in every checksum it carries.
    let mut manifest = meta.manifest(&img[at..at + PS]).unwrap();
    for r in &mut manifest {
        let first = r.start as usize * PS;
        r.checksum =
            if r.overflow {
                larch::raw::stored_checksum(&img[first..first + PS])
            } else {
                larch::raw::node_run_checksum((0..r.pages as usize).map(|i| {
                    larch::raw::stored_checksum(&img[first + i * PS..first + (i + 1) * PS])
                }))
            };
    }
    meta.live_pages -= 1;
    meta.unreachable_pages += 1;
    img[at..at + PS].copy_from_slice(&meta.encode_page(&manifest, PS));
    img
}

/// Write `crafted` to `path`: a read-write open must fail with `Corrupt` (saying the file is
/// for read-only use) and leave the file byte for byte as it was, and a read-only open must
/// succeed. The error's page and reason, and the read-only handle.
fn refused_for_writing(path: &std::path::Path, crafted: &[u8], ctx: &str) -> (u64, String, Db) {
    std::fs::write(path, crafted).unwrap();
    let (page, reason) = match Db::open(path, Options::default().create(false)) {
        Ok(_) => panic!("{ctx}: a read-write open trusted the free map"),
        Err(Error::Corrupt { page, reason }) => (page, reason),
        Err(e) => panic!("{ctx}: not a Corrupt error: {e}"),
    };
    assert!(reason.contains("read-only"), "{ctx}: {reason}");
    assert!(
        std::fs::read(path).unwrap() == crafted,
        "{ctx}: the failed open changed the file"
    );
    let db = Db::open(path, Options::default().create(false).read_only(true))
        .unwrap_or_else(|e| panic!("{ctx}: read-only open: {e}"));
    (page, reason, db)
}

fn one_case(img: &[u8], want: &Model, kind: Kind, victim: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("marked.larch");
    let crafted = mark_free(img, victim);
    let ctx = format!("live {kind:?} page {victim} marked free");
    let (page, reason, db) = refused_for_writing(&path, &crafted, &ctx);
    assert_eq!(
        page, victim,
        "{ctx}: the error names another page: {reason}"
    );
    assert!(reason.contains("marks page"), "{ctx}: {reason}");
    assert!(read_model(&db) == *want, "{ctx}: read-only contents differ");
    // check, which compares the free map with what it reaches, names the page too.
    match db.check() {
        Err(Error::CheckFailed(problems)) => assert!(
            problems.iter().any(|p| p.page == Some(victim)),
            "{ctx}: check does not name the page: {problems:?}"
        ),
        other => panic!("{ctx}: check: {other:?}"),
    }
}

#[test]
fn a_free_map_that_marks_a_live_page_free_fails_a_read_write_open_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (img, want) = fixture(dir.path());
    let (_, meta) = newest(&img);
    let live = live_pages(&img, &meta);
    // The undamaged file opens read-write.
    let path = dir.path().join("fixture.larch");
    drop(Db::open(&path, Options::default().create(false)).unwrap());
    for kind in [
        Kind::DataLeaf,
        Kind::DataBranch,
        Kind::OverflowTail,
        Kind::CatalogLeaf,
        Kind::FreeMapLeaf,
    ] {
        let all: Vec<u64> = live
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|&(_, p)| p)
            .collect();
        assert!(!all.is_empty(), "the fixture has no live {kind:?} page");
        one_case(&img, &want, kind, all[all.len() / 2]);
    }
}

#[test]
fn a_free_map_that_marks_every_page_of_a_tree_free_is_caught_at_its_first() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = fixture(dir.path());
    let (_, meta) = newest(&img);
    let mut crafted = img.clone();
    let mut victims: Vec<u64> = live_pages(&img, &meta)
        .into_iter()
        .filter(|(k, _)| *k == Kind::DataLeaf)
        .map(|(_, p)| p)
        .collect();
    victims.sort();
    for &v in &victims {
        crafted = mark_free(&crafted, v);
    }
    let path = dir.path().join("many.larch");
    std::fs::write(&path, &crafted).unwrap();
    match Db::open(&path, Options::default().create(false)) {
        Err(Error::Corrupt { page, .. }) => assert_eq!(page, victims[0]),
        other => panic!("{other:?}"),
    }
}

/// Readers descend a tree by each page's own type, while the open's walk follows the recorded
/// depth and stops where a page's level disagrees with it: a catalog record saying depth 1
/// for tree alpha (depth 2; the catalog leaf's checksum recomputed) hid alpha's leaves from
/// the walk, so a current free map could mark one of them free, counters agreeing, and the
/// file opened for writing, whose next commits would overwrite a leaf readers read. Also a
/// record saying depth 3 (the walk takes the leaves for branches) and depth 0.
#[test]
fn a_tree_whose_recorded_depth_disagrees_with_its_pages_is_refused_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let (img, want) = fixture(dir.path());
    let (_, meta) = newest(&img);
    let cat = meta.catalog.root;
    let leaf = NodePage::parse(cat, page(&img, cat), PageRole::Catalog).unwrap();
    let i = (0..leaf.count)
        .find(|&i| leaf.key(i).unwrap() == b"alpha")
        .expect("alpha's record");
    let ValRef::Inline(record) = leaf.entry(i).unwrap().1 else {
        panic!("alpha's record overflows")
    };
    let at = record.as_ptr() as usize - img.as_ptr() as usize;
    let root = larch::raw::TreeRoot::decode(record).unwrap();
    assert_eq!(root.depth, 2, "the fixture's alpha is a branch over leaves");
    let alpha_leaf = NodePage::parse(root.root, page(&img, root.root), PageRole::Data)
        .unwrap()
        .child(1)
        .unwrap();
    for depth in [1u32, 3, 0] {
        let ctx = format!("alpha recorded at depth {depth}");
        let mut crafted = img.clone();
        crafted[at + 16..at + 20].copy_from_slice(&depth.to_le_bytes());
        let base = cat as usize * PS;
        let crc = run_checksum(&crafted[base..base + PS]);
        crafted[base + 4..base + 8].copy_from_slice(&crc.to_le_bytes());
        // The leaf the walk no longer reaches, marked free with the counters agreeing (at
        // depth 1 the walk cannot see it is live; at 3 and 0 it stops at the root).
        let crafted = mark_free(&crafted, alpha_leaf);
        let path = dir.path().join(format!("depth{depth}.larch"));
        let (_, reason, db) = refused_for_writing(&path, &crafted, &ctx);
        assert!(reason.contains("alpha"), "{ctx}: {reason}");
        // Read-only, a reader reads alpha whole where it follows the pages' types.
        if depth == 1 {
            assert!(read_model(&db) == want, "{ctx}: read-only contents differ");
        }
        assert!(db.check().is_err(), "{ctx}: check found nothing");
    }
}

/// What the trust check costs a read-write open: a database of `LARCH_TRUST_KEYS` (500,000)
/// keys with 256-byte values (kept at `LARCH_TRUST_DB` if set, to compare builds on one file),
/// opened read-write and read-only a few times each (warm page cache, or with `LARCH_TRUST_COLD`
/// set, as root, a cold one).
/// `cargo test --release --test freemap_trust -- --ignored --nocapture cost`
#[test]
#[ignore = "a measurement: builds a ~180 MB database"]
fn cost_of_checking_the_free_map_at_open() {
    let keys: u32 = std::env::var("LARCH_TRUST_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var_os("LARCH_TRUST_DB")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("cost.larch"));
    if !path.exists() {
        let db = Db::open(&path, Options::default()).unwrap();
        let value = [0x5au8; 256];
        for batch in 0..keys.div_ceil(10_000) {
            let mut tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in batch * 10_000..((batch + 1) * 10_000).min(keys) {
                    // Spread keys so leaves split all over, as random inserts do.
                    let k = (i.wrapping_mul(2_654_435_761)).to_be_bytes();
                    t.insert(&k, &value).unwrap();
                }
            }
            tx.set_durability(Durability::Async);
            tx.commit().unwrap();
        }
        // Free pages: drop every tenth key.
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in (0..keys).step_by(10) {
                t.remove(&(i.wrapping_mul(2_654_435_761)).to_be_bytes())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
        db.sync().unwrap();
    }
    // LARCH_TRUST_COLD=1 (as root): drop the page cache before each open.
    let cold = std::env::var_os("LARCH_TRUST_COLD").is_some();
    let time = |opts: Options| {
        let mut all: Vec<std::time::Duration> = (0..if cold { 3 } else { 7 })
            .map(|_| {
                if cold {
                    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
                }
                let t = std::time::Instant::now();
                let db = Db::open(&path, opts.create(false)).unwrap();
                let took = t.elapsed();
                drop(db);
                took
            })
            .collect();
        all.sort();
        all[all.len() / 2]
    };
    let rw = time(Options::default());
    let ro = time(Options::default().read_only(true));
    let db = Db::open(&path, Options::default().read_only(true)).unwrap();
    let s = db.stats().unwrap();
    eprintln!(
        "{} keys, {} MB, {} pages ({} live, {} free){}: read-write open {rw:?}, read-only open {ro:?}",
        s.trees.iter().map(|t| t.entries).sum::<u64>(),
        s.file_bytes >> 20,
        s.high_water,
        s.live_pages,
        s.dead_pages,
        if cold { ", cold cache" } else { "" }
    );
}
