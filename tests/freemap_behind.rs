//! An Async commit leaves its free-map changes to the next commit that saves the free map,
//! and its meta says the free map is behind (docs/format.md, "A free map behind its meta").
//! Any meta may reach the disk (`Db::sync`, a group's sync, a fallback meta, a handoff to
//! another process), so a behind meta must be a whole commit by itself: open finds its free
//! pages by walking its trees, takes from the free map only the shape, and carries the bits
//! the map lacks into the next save. These tests follow one file through that cycle, crash
//! it (a copy of the file is what a power cut after the sync leaves), and craft metas that
//! lie about it.

use std::collections::BTreeMap;
use std::path::Path;

use larch::raw::Meta;
use larch::{Db, Durability, Error, Options};

const PS: usize = 4096;

/// The newest valid meta of the file at `path`.
fn newest(path: &Path) -> Meta {
    let img = std::fs::read(path).unwrap();
    let a = Meta::decode(&img[..128]).ok();
    let b = Meta::decode(&img[PS..PS + 128]).ok();
    match (a, b) {
        (Some(a), Some(b)) if b.txid > a.txid => b,
        (Some(a), _) => a,
        (None, Some(b)) => b,
        _ => panic!("no valid meta"),
    }
}

fn key(i: u32) -> [u8; 4] {
    (i * 7919 % 4000).to_be_bytes()
}

fn commit(db: &Db, d: Durability, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u32) {
    let mut tx = db.begin_write().unwrap();
    let v = vec![(i % 251) as u8; 40 + (i % 90) as usize];
    tx.open_tree("t").unwrap().insert(&key(i), &v).unwrap();
    model.insert(key(i).to_vec(), v);
    tx.set_durability(d);
    tx.commit().unwrap();
}

fn contents(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    t.iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A file of 4,000 keys, every commit Sync: its free map is current.
/// Options under which every commit saves its free map (it carries at most one bit): a base
/// file whose newest meta is not behind, to damage or to start from.
fn saving() -> Options {
    Options::default().page_size(PS).carried_max_bits(1)
}

/// A file of 4,000 keys and 20 one-key Sync commits, each of which saved its free map.
fn loaded(path: &Path) -> (Db, BTreeMap<Vec<u8>, Vec<u8>>) {
    let db = Db::open(path, saving()).unwrap();
    let mut model = BTreeMap::new();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..4000u32 {
            t.insert(&key(i), &[1u8; 100]).unwrap();
            model.insert(key(i).to_vec(), vec![1u8; 100]);
        }
    }
    tx.commit().unwrap();
    for i in 0..20 {
        commit(&db, Durability::Sync, &mut model, i);
    }
    (db, model)
}

#[test]
fn commits_leave_the_free_map_behind_until_one_saves_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.larch");
    let (db, mut model) = loaded(&path);
    drop(db);
    let saved = newest(&path);
    assert!(
        !saved.freemap_behind,
        "every commit of the load saved the free map"
    );
    // Under the default cap, Sync commits leave the map behind as Async ones do.
    let db = Db::open(&path, Options::default()).unwrap();
    for i in 100..300 {
        let d = if i % 3 == 0 {
            Durability::Sync
        } else {
            Durability::Async
        };
        commit(&db, d, &mut model, i);
        if d == Durability::Sync {
            let m = newest(&path);
            assert!(m.freemap_behind, "Sync commit {i}: {m:?}");
            assert_eq!(
                m.freemap, saved.freemap,
                "Sync commit {i} rewrote the free map"
            );
        }
        if i % 50 == 0 {
            // In the writing process, check compares the free map plus the bits the writer
            // carries, and the in-memory free space, with the pages no tree reaches.
            db.check().unwrap();
        }
    }
    db.sync().unwrap();
    let behind = newest(&path);
    assert!(behind.freemap_behind, "{behind:?}");
    assert_eq!(
        behind.freemap, saved.freemap,
        "no commit rewrote a free-map page"
    );
    assert_eq!(
        behind.live_pages + behind.unreachable_pages,
        behind.high_water
    );
    db.check().unwrap();

    // A power cut now leaves this file: it opens at the behind meta with every page its
    // trees do not reach free, and reuses them.
    let crashed = dir.path().join("crashed.larch");
    std::fs::copy(&path, &crashed).unwrap();
    {
        let db2 = Db::open(&crashed, Options::default()).unwrap();
        assert_eq!(contents(&db2), model);
        db2.check().unwrap();
        let mut m2 = model.clone();
        for i in 300..340 {
            commit(&db2, Durability::Sync, &mut m2, i);
        }
        let after = newest(&crashed);
        assert!(
            after.high_water <= behind.high_water + 8,
            "the reopened file reuses the pages the walk found free: high water {} -> {}",
            behind.high_water,
            after.high_water
        );
        db2.check().unwrap();
        assert_eq!(contents(&db2), m2);
    }
    let db3 = Db::open(&crashed, Options::default()).unwrap();
    db3.check().unwrap();
    drop(db3);

    // The original file, closed behind, opens whole (a commit that saves the map is
    // `a_lowered_cap_makes_commits_save_and_bounds_what_an_open_accepts`).
    drop(db);
    let db = Db::open(&path, Options::default()).unwrap();
    assert_eq!(contents(&db), model);
    db.check().unwrap();
}

#[test]
fn a_long_run_of_async_commits_saves_the_free_map_before_it_carries_too_much() {
    // A new 4 MiB value each commit: 1,025 pages taken past the high-water mark, so the
    // writer would carry more than `CARRIED_MAX` (65,536) bits after 64 commits.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.larch");
    let db = Db::open(
        &path,
        Options::default()
            .page_size(PS)
            .durability(Durability::Async)
            .max_unsynced_bytes(None),
    )
    .unwrap();
    let value = vec![3u8; 4 << 20];
    let mut saves = Vec::new();
    for i in 0..72u32 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("big")
            .unwrap()
            .insert(&i.to_be_bytes(), &value)
            .unwrap();
        tx.commit().unwrap();
        db.sync().unwrap();
        if i > 0 && !newest(&path).freemap_behind {
            saves.push(i);
        }
        // Behind by about 52,000 bits: the file opens and checks clean.
        if i == 50 {
            let copy = dir.path().join("copy.larch");
            std::fs::copy(&path, &copy).unwrap();
            let c = Db::open(&copy, Options::default()).unwrap();
            c.check().unwrap();
            drop(c);
            std::fs::remove_file(&copy).unwrap();
        }
    }
    assert_eq!(saves.len(), 1, "saved at commits {saves:?}");
    assert!((60..=66).contains(&saves[0]), "saved at commit {saves:?}");
    db.check().unwrap();
}

/// Rewrite the newest meta of the file image with `edit` (the checksum follows).
fn edit_newest(path: &Path, edit: impl FnOnce(&mut Meta)) {
    let mut img = std::fs::read(path).unwrap();
    let m = newest(path);
    let at = (m.txid % 2) as usize * PS;
    let mut e = m;
    edit(&mut e);
    img[at..at + 128].copy_from_slice(&e.encode());
    std::fs::write(path, img).unwrap();
}

#[test]
fn a_behind_meta_takes_its_free_pages_from_the_walk_not_from_the_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.larch");
    let (db, mut model) = loaded(&path);
    for i in 500..520 {
        commit(&db, Durability::Sync, &mut model, i);
    }
    drop(db);
    let m = newest(&path);
    assert!(!m.freemap_behind && m.unreachable_pages > 0);

    // The map says nothing is free (its root gone), the meta that it is behind: open finds
    // the free pages by the walk and reuses them.
    let lying = dir.path().join("lying.larch");
    std::fs::copy(&path, &lying).unwrap();
    assert_eq!(m.freemap.depth, 1, "one free-map page");
    edit_newest(&lying, |m| {
        // Its one page is no longer reachable: one more unreachable page.
        m.freemap = Default::default();
        m.freemap_behind = true;
        m.live_pages -= 1;
        m.unreachable_pages += 1;
    });
    {
        let db = Db::open(&lying, Options::default()).unwrap();
        db.check().unwrap();
        assert_eq!(contents(&db), model);
        let mut m2 = model.clone();
        for i in 600..640 {
            commit(&db, Durability::Sync, &mut m2, i);
        }
        assert!(newest(&lying).high_water <= m.high_water + 8);
        db.check().unwrap();
    }
    Db::open(&lying, Options::default())
        .unwrap()
        .check()
        .unwrap();

    // Counts that disagree with the walk: refused for writing, the file untouched, and
    // readable read-only.
    let miscounted = dir.path().join("miscounted.larch");
    std::fs::copy(&path, &miscounted).unwrap();
    edit_newest(&miscounted, |m| {
        m.freemap_behind = true;
        m.unreachable_pages += 1;
        m.live_pages -= 1;
    });
    let before = std::fs::read(&miscounted).unwrap();
    match Db::open(&miscounted, Options::default()) {
        Err(Error::Corrupt { reason, .. }) => {
            assert!(reason.contains("unreachable pages"), "{reason}")
        }
        other => panic!("opened: {:?}", other.map(|_| ())),
    }
    assert_eq!(std::fs::read(&miscounted).unwrap(), before);
    let ro = Db::open(&miscounted, Options::default().read_only(true)).unwrap();
    assert_eq!(contents(&ro), model);
    drop(ro);

    // A map behind by more than the writer ever carries (70,000 pages past the high-water
    // mark it never saw, the file grown sparse to hold them): not a file larch wrote.
    let far = dir.path().join("far.larch");
    std::fs::copy(&path, &far).unwrap();
    let grow = 70_000u64;
    edit_newest(&far, |m| {
        m.freemap_behind = true;
        m.high_water += grow;
        m.unreachable_pages += grow;
    });
    let f = std::fs::OpenOptions::new().write(true).open(&far).unwrap();
    f.set_len((m.high_water + grow) * PS as u64).unwrap();
    drop(f);
    match Db::open(&far, Options::default()) {
        Err(Error::Corrupt { reason, .. }) => {
            assert!(reason.contains("behind its meta by more than"), "{reason}")
        }
        other => panic!("opened: {:?}", other.map(|_| ())),
    }
    // Within the bound the same edit opens, and the pages are free.
    let near = dir.path().join("near.larch");
    std::fs::copy(&path, &near).unwrap();
    edit_newest(&near, |m| {
        m.freemap_behind = true;
        m.high_water += 1000;
        m.unreachable_pages += 1000;
    });
    let f = std::fs::OpenOptions::new().write(true).open(&near).unwrap();
    f.set_len((m.high_water + 1000) * PS as u64).unwrap();
    drop(f);
    let db = Db::open(&near, Options::default()).unwrap();
    db.check().unwrap();
    let mut m3 = model.clone();
    commit(&db, Durability::Sync, &mut m3, 700);
    db.check().unwrap();
}

/// The cap is checked before the commit gives its dirty nodes their pages
/// (`Txn::gather_hot_pages`), so the bits those pages change must count too: a bulk rewrite
/// of every leaf in one Async commit frees N pages (counted) and takes N pages the saved map
/// calls free (not counted), leaving the map behind by 2N. A close then writes that meta,
/// and a file larch wrote and closed cleanly must open for writing again.
#[test]
fn an_async_commit_rewriting_every_leaf_leaves_the_map_behind_by_no_more_than_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bulk.larch");
    let opts = Options::default().page_size(PS);
    let db = Db::open(&path, opts).unwrap();
    // About 36,000 leaves: three 1,200-byte values each.
    let n = 108_000u32;
    let fill = |db: &Db, byte: u8, d: Durability| {
        let mut tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..n {
                t.insert(&i.to_be_bytes(), &[byte; 1200]).unwrap();
            }
        }
        tx.set_durability(d);
        tx.commit().unwrap();
    };
    fill(&db, 1, Durability::Sync);
    // Every leaf copied once, Sync: the saved free map marks the old ones free (reusable
    // at the next transaction: the commit is durable and nobody reads).
    fill(&db, 2, Durability::Sync);
    // One small Async commit so the big one's meta would take the durable meta's slot and
    // `max_unsynced_bytes` does not make the big one durable by itself.
    let mut tx = db.begin_write().unwrap();
    tx.open_tree("u").unwrap().insert(b"k", b"v").unwrap();
    tx.set_durability(Durability::Async);
    tx.commit().unwrap();
    // Every leaf copied again, into the pages the saved map calls free.
    fill(&db, 3, Durability::Async);
    db.check().unwrap();
    db.sync().unwrap();
    let m = newest(&path);
    let copy = dir.path().join("copy.larch");
    std::fs::copy(&path, &copy).unwrap();
    drop(db);
    for p in [&copy, &path] {
        let db = Db::open(p, opts)
            .unwrap_or_else(|e| panic!("{}: behind {}: {e}", p.display(), m.freemap_behind));
        db.check().unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_tree("t").unwrap();
        assert_eq!(t.len().unwrap(), u64::from(n));
        assert_eq!(
            t.get(&7u32.to_be_bytes()).unwrap().unwrap(),
            &[3u8; 1200][..]
        );
    }
}

/// Group commit: a follower's Sync commit is written like an Async one (no save, a behind
/// meta) and made durable by a later sync, its own (`Db::sync`'s path) or the group's; Async
/// writers and `Db::sync` calls from other threads write behind metas in between. Every copy
/// taken after a sync opens read-write and checks clean, and so does the file.
#[test]
fn group_commit_followers_and_async_writers_leave_whole_behind_metas() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("group.larch");
    let opts = Options::default().page_size(PS);
    let db = Db::open(&path, opts).unwrap();
    let threads: Vec<_> = (0..5u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..150u32 {
                    let mut tx = db.begin_write().unwrap();
                    {
                        let mut tree = tx.open_tree("t").unwrap();
                        let k = format!("{t}-{i:04}");
                        tree.insert(k.as_bytes(), &vec![t as u8; 30 + (i % 7) as usize * 300])
                            .unwrap();
                        if i % 5 == 4 {
                            tree.remove(format!("{t}-{:04}", i - 2).as_bytes()).unwrap();
                        }
                    }
                    tx.set_durability(if t == 4 {
                        Durability::Async
                    } else {
                        Durability::Sync
                    });
                    tx.commit().unwrap();
                    if t == 4 && i % 10 == 0 {
                        db.sync().unwrap();
                    }
                }
            })
        })
        .collect();
    let mut copies = 0;
    let mut behind = 0;
    while threads.iter().any(|t| !t.is_finished()) {
        db.sync().unwrap();
        // No transaction writes a page while this one is open (a follower's sync may still
        // write a meta, as before a power cut), so the copy is an image a disk can hold.
        let hold = db.begin_write().unwrap();
        let copy = dir.path().join(format!("copy{copies}.larch"));
        std::fs::copy(&path, &copy).unwrap();
        hold.abort();
        behind += usize::from(newest(&copy).freemap_behind);
        let c = Db::open(&copy, opts).unwrap();
        c.check().unwrap();
        let mut m = BTreeMap::new();
        commit(&c, Durability::Sync, &mut m, copies);
        c.check().unwrap();
        drop(c);
        std::fs::remove_file(&copy).unwrap();
        copies += 1;
        db.check().unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    db.check().unwrap();
    let want = contents(&db);
    drop(db);
    let db = Db::open(&path, opts).unwrap();
    db.check().unwrap();
    assert_eq!(contents(&db), want);
    eprintln!("{copies} copies, {behind} behind");
}

/// The page `id` of the image with its checksum recomputed.
fn fix_crc(img: &mut [u8], id: u64) {
    let at = id as usize * PS;
    let crc = larch::raw::run_checksum(&img[at..at + PS]);
    img[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A file of tree "t" (300 keys, depth 2) and some free pages, closed with a current free
/// map; `edit` changes its image (given the newest meta) so that the walk no longer reaches
/// tree t's pages while a reader still reads it; then the newest meta is set behind with
/// the unreachable counter the walk wants (a fuzzer finds it by comparison feedback). The
/// file must not open for writing, or the writer must keep tree t's pages.
fn crafted_behind_keeps_what_readers_reach(edit: impl FnOnce(&mut Vec<u8>, &Meta)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.larch");
    let db = Db::open(&path, saving()).unwrap();
    let mut model = BTreeMap::new();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..300u32 {
            let v = vec![(i % 251) as u8; 100];
            t.insert(&i.to_be_bytes(), &v).unwrap();
            model.insert(i.to_be_bytes().to_vec(), v);
        }
        // Freed by the next commit: free pages for an edit to use.
        t.insert(b"zz", &[9u8; 3 * PS]).unwrap();
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().remove(b"zz").unwrap();
    tx.commit().unwrap();
    drop(db);
    let m = newest(&path);
    assert!(!m.freemap_behind && m.unreachable_pages >= 3);
    let mut img = std::fs::read(&path).unwrap();
    edit(&mut img, &m);
    let crafted = dir.path().join("crafted.larch");
    let write_meta = |img: &mut Vec<u8>, unreachable: u64| {
        let mut e = m;
        e.freemap_behind = true;
        e.unreachable_pages = unreachable;
        e.live_pages = e.high_water - unreachable;
        // No manifest: pages it lists may have other checksums now.
        e.manifest_runs = 0;
        e.manifest_crc = 0;
        let at = (m.txid % 2) as usize * PS;
        img[at..at + 128].copy_from_slice(&e.encode());
        std::fs::write(&crafted, &*img).unwrap();
    };
    // The counter the walk wants, as the refusal names it.
    write_meta(&mut img, m.unreachable_pages);
    let want = match Db::open(&crafted, Options::default()) {
        Err(Error::Corrupt { reason, .. }) if reason.contains("its trees leave") => reason
            .split("its trees leave ")
            .nth(1)
            .and_then(|s| s.split(';').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap(),
        // Refused for writing before the counter is looked at: nothing is overwritten.
        Err(Error::Corrupt { reason, .. }) => {
            assert!(!reason.contains("unreachable pages"), "{reason}");
            let ro = Db::open(&crafted, Options::default().read_only(true)).unwrap();
            assert_eq!(contents(&ro), model, "a reader reads the tree whole");
            return;
        }
        other => panic!("{:?}", other.map(|_| ())),
    };
    write_meta(&mut img, want);
    {
        let ro = Db::open(&crafted, Options::default().read_only(true)).unwrap();
        assert_eq!(contents(&ro), model, "a reader reads the tree whole");
    }
    let db = match Db::open(&crafted, Options::default()) {
        // Refused for writing: nothing is overwritten.
        Err(Error::Corrupt { .. }) => return,
        Err(e) => panic!("{e}"),
        Ok(db) => db,
    };
    assert_eq!(contents(&db), model);
    for i in 0..10u32 {
        let tx = db.begin_write().unwrap();
        {
            let mut u = tx.open_tree("u").unwrap();
            for j in 0..40u32 {
                u.insert(&(i * 100 + j).to_be_bytes(), &[7u8; 300]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    let got: Result<BTreeMap<Vec<u8>, Vec<u8>>, _> = t
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect();
    assert!(
        got.as_ref().is_ok_and(|g| *g == model),
        "tree t read whole before the commits and not after: a live page was overwritten ({:?})",
        got.map(|g| g.len())
    );
}

/// Where tree t's record lies in the catalog leaf of `m` (the offset of its 24 bytes).
fn record_of_t(img: &[u8], m: &Meta) -> usize {
    assert_eq!(m.catalog.depth, 1);
    let leaf = m.catalog.root as usize * PS;
    let page = &img[leaf..leaf + PS];
    leaf + (0..=PS - 24)
        .find(|&i| {
            let r = larch::raw::TreeRoot::decode(&page[i..i + 24]);
            r.is_some_and(|r| r.entries == 300 && r.depth == 2 && r.root > 1)
        })
        .expect("tree t's record in the catalog leaf")
}

/// A behind meta makes every page the walk does not reach free, so the walk must reach all
/// a reader can. Readers iterate a tree by the pages' own leaf and branch types, while the
/// walk stops where a page's level disagrees with the tree's recorded depth: a catalog
/// record saying depth 1 for a tree of depth 2 (its leaf's checksum recomputed) left every
/// leaf of the tree free while the tree read whole, and the next commits overwrote it.
#[test]
fn a_crafted_behind_meta_never_frees_pages_a_reader_reaches() {
    crafted_behind_keeps_what_readers_reach(|img, m| {
        let at = record_of_t(img, m);
        img[at + 16..at + 20].copy_from_slice(&1u32.to_le_bytes());
        fix_crc(img, m.catalog.root);
    });
}

/// The same with tree t's record moved to an overflow page (a free one, its checksum
/// right): `open_tree` reads a catalog value wherever it is, but the walk took only inline
/// records as trees, so it walked none of tree t.
#[test]
fn a_crafted_behind_meta_walks_a_tree_whose_catalog_record_overflows() {
    crafted_behind_keeps_what_readers_reach(|img, m| {
        let at = record_of_t(img, m);
        let record: [u8; 24] = img[at..at + 24].try_into().unwrap();
        // A page free in `m`: the first of value zz's overflow run (tree t has no other).
        let free = (2..m.high_water as usize)
            .find(|&p| img[p * PS] == 3)
            .unwrap();
        let page = &mut img[free * PS..(free + 1) * PS];
        page.fill(0);
        page[0] = 3; // overflow
        page[1] = 1; // catalog
        page[8..16].copy_from_slice(&m.txid.to_le_bytes());
        page[16..24].copy_from_slice(&24u64.to_le_bytes());
        page[24..48].copy_from_slice(&record);
        fix_crc(img, free as u64);
        // The cell: klen u16 | flags u8 | 0 | vlen u32 | key | value; now flags 1 and the
        // value's first 8 bytes the overflow page.
        let cell = at - 1 - 8;
        assert_eq!(&img[cell + 8..cell + 9], b"t");
        img[cell + 2] = 1;
        img[at..at + 8].copy_from_slice(&(free as u64).to_le_bytes());
        fix_crc(img, m.catalog.root);
    });
}

/// With the carried-bits cap lowered (as the power-cut simulation lowers it for a third of
/// its seeds), one-key Async commits save the free map every few commits, every file a sync
/// leaves opens under the same cap, and an open under a smaller cap than the writer's refuses
/// a map behind by more than it.
#[test]
fn a_lowered_cap_makes_commits_save_and_bounds_what_an_open_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.larch");
    let (db, mut model) = loaded(&path);
    drop(db);
    let small = Options::default().carried_max_bits(40);
    let db = Db::open(&path, small).unwrap();
    let mut saved = 0;
    // Sync commits that saved the map and that left it behind.
    let (mut sync_saved, mut sync_behind) = (0, 0);
    for i in 1000..1100 {
        let d = if i % 2 == 0 {
            Durability::Sync
        } else {
            Durability::Async
        };
        commit(&db, d, &mut model, i);
        if d == Durability::Async {
            db.sync().unwrap();
        }
        let behind = newest(&path).freemap_behind;
        if !behind {
            saved += 1;
        }
        if d == Durability::Sync {
            if behind {
                sync_behind += 1;
            } else {
                sync_saved += 1;
            }
        }
        if i % 10 == 0 {
            let copy = dir.path().join("copy.larch");
            std::fs::copy(&path, &copy).unwrap();
            let c = Db::open(&copy, small).unwrap();
            c.check().unwrap();
            assert_eq!(contents(&c), model);
        }
    }
    // The hot runs take turns over the same pages, so the carried bits grow by the few new
    // leaves and branches of each commit: a save now and then, not every commit.
    assert!(
        (2..=60).contains(&saved),
        "{saved} of 100 commits saved the map"
    );
    assert!(
        sync_saved >= 1 && sync_behind >= 1,
        "Sync commits: {sync_saved} saved the map, {sync_behind} left it behind"
    );
    drop(db);
    // Written under the default cap, behind by more than 40 bits: refused under 40.
    let db = Db::open(&path, Options::default()).unwrap();
    for i in 2000..2150 {
        commit(&db, Durability::Async, &mut model, i);
    }
    db.sync().unwrap();
    let behind = dir.path().join("behind.larch");
    std::fs::copy(&path, &behind).unwrap();
    assert!(newest(&behind).freemap_behind);
    match Db::open(&behind, small) {
        Err(Error::Corrupt { reason, .. }) => {
            assert!(
                reason.contains("behind its meta by more than 40"),
                "{reason}"
            )
        }
        other => panic!("opened: {:?}", other.map(|_| ())),
    }
    let ok = Db::open(&behind, Options::default()).unwrap();
    ok.check().unwrap();
    assert_eq!(contents(&ok), model);
}
