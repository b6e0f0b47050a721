//! Runs the bodies of the fuzz targets (`larch::fuzz`) over every file of the checked-in seed
//! corpora in fuzz/corpus/, so CI exercises them on stable Rust: inputs the fuzzers found to
//! crash the engine are checked in there and stay regression cases.
//!
//! `write_seed_corpus` (ignored) regenerates the engine-made seeds:
//! `LARCH_WRITE_CORPUS=1 cargo test --test fuzz_corpus -- --ignored write_seed_corpus`.

use std::path::{Path, PathBuf};

use larch::raw::{run_checksum, Meta};
use larch::{Db, Durability, Options};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .unwrap_or_else(|e| panic!("fuzz/corpus/{target}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn run_corpus(target: &str, min: usize, f: fn(&[u8])) {
    let files = corpus(target);
    assert!(
        files.len() >= min,
        "fuzz/corpus/{target} holds {} files",
        files.len()
    );
    for path in files {
        let data = std::fs::read(&path).unwrap();
        eprintln!("{target}: {} ({} bytes)", path.display(), data.len());
        f(&data);
    }
}

#[test]
fn every_open_file_seed_opens_checks_and_scans_without_panicking() {
    run_corpus("open_file", 8, larch::fuzz::open_arbitrary_file);
}

#[test]
fn every_ops_seed_recovers_a_whole_committed_state_at_every_power_cut() {
    run_corpus("ops", 4, larch::fuzz::ops_with_power_cuts);
}

// ---- generating the seeds -------------------------------------------------------------------

/// Build a database with `fill`, then cut the file to its high-water mark (the pages past it
/// are preallocation, never read) so the seed stays small.
fn engine_db(page_size: usize, fill: impl FnOnce(&Db)) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.larch");
    let db = Db::open(
        &path,
        Options::default()
            .page_size(page_size)
            .durability(Durability::Sync),
    )
    .unwrap();
    fill(&db);
    db.check().unwrap();
    drop(db);
    let img = std::fs::read(&path).unwrap();
    let newest = newest_meta(&img, page_size);
    img[..newest.high_water as usize * page_size].to_vec()
}

fn newest_meta(img: &[u8], ps: usize) -> Meta {
    let a = Meta::decode(&img[..128]);
    let b = Meta::decode(&img[ps..ps + 128]);
    match (a, b) {
        (Ok(a), Ok(b)) if b.txid > a.txid => b,
        (Ok(a), _) => a,
        (_, Ok(b)) => b,
        _ => panic!("no meta"),
    }
}

fn put(db: &Db, tree: &str, keys: std::ops::Range<u32>, vlen: usize) {
    let mut tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree(tree).unwrap();
        for i in keys {
            let v: Vec<u8> = (0..vlen).map(|j| (i as usize * 7 + j) as u8).collect();
            t.insert(format!("{tree}{i:04}").as_bytes(), &v).unwrap();
        }
    }
    tx.commit().unwrap();
}

fn del(db: &Db, tree: &str, keys: impl Iterator<Item = u32>) {
    let mut tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree(tree).unwrap();
        for i in keys {
            t.remove(format!("{tree}{i:04}").as_bytes()).unwrap();
        }
    }
    tx.commit().unwrap();
}

/// Small databases made by the engine, and damaged copies of them.
fn open_file_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let empty4 = engine_db(4096, |_| {});
    let empty8 = engine_db(8192, |_| {});
    let small4 = engine_db(4096, |db| {
        put(db, "a", 0..40, 20);
        put(db, "big", 0..1, 5000); // a two-page overflow run
        put(db, "b", 0..5, 3);
        del(db, "a", (0..40).step_by(3)); // free pages, a free-map leaf
    });
    let deep4 = engine_db(4096, |db| {
        put(db, "t", 0..80, 100); // three leaves under a branch, one commit
    });
    let small8 = engine_db(8192, |db| {
        let mut tx = db.begin_write().unwrap();
        {
            let mut x = tx.open_tree("x").unwrap();
            x.insert(b"big", &[7u8; 6000]).unwrap(); // a one-page overflow run
            for i in 0..30u32 {
                x.insert(format!("x{i:04}").as_bytes(), &[i as u8; 50])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
        del(db, "x", 0..5);
    });
    for (name, img, max) in [
        ("small4", &small4, 16),
        ("deep4", &deep4, 16),
        ("small8", &small8, 8),
    ] {
        let m = newest_meta(img, if name.ends_with('8') { 8192 } else { 4096 });
        eprintln!("{name}: {} pages", m.high_water);
        assert!(m.high_water <= max, "{name}: {} pages", m.high_water);
        assert!(
            m.freemap.root != 0 || name == "deep4",
            "{name} has no free map"
        );
    }
    // Damaged copies.
    let ps = 4096;
    let flip = |img: &[u8], at: usize| {
        let mut v = img.to_vec();
        v[at] ^= 0x40;
        v
    };
    let newest_slot = if newest_meta(&deep4, ps).txid % 2 == 0 {
        0
    } else {
        1
    };
    let mut zero_newest = deep4.clone();
    zero_newest[newest_slot * ps..newest_slot * ps + 128].fill(0);
    let mut loop_child = deep4.clone();
    {
        // The root branch's first child pointing at the root itself, crc fixed.
        let m = newest_meta(&deep4, ps);
        let cat = m.catalog.root as usize * ps;
        let c = cat + u16::from_le_bytes([deep4[cat + 16], deep4[cat + 17]]) as usize;
        let klen = u16::from_le_bytes([deep4[c], deep4[c + 1]]) as usize;
        let root = u64::from_le_bytes(deep4[c + 8 + klen..c + 16 + klen].try_into().unwrap());
        let r = root as usize * ps;
        assert_eq!(loop_child[r], 1, "t's root is a branch");
        let cell = r + u16::from_le_bytes([loop_child[r + 16], loop_child[r + 17]]) as usize;
        loop_child[cell + 2..cell + 10].copy_from_slice(&root.to_le_bytes());
        let crc = run_checksum(&loop_child[r..r + ps]);
        loop_child[r + 4..r + 8].copy_from_slice(&crc.to_le_bytes());
    }
    let mut garbage = deep4.clone();
    garbage.extend((0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    vec![
        ("empty-4k.larch", empty4),
        ("empty-8k.larch", empty8),
        ("small-4k.larch", small4.clone()),
        ("depth2-4k.larch", deep4.clone()),
        ("small-8k.larch", small8),
        (
            "damaged-leaf-byte-4k.larch",
            flip(&small4, small4.len() - 100),
        ),
        ("damaged-page-header-4k.larch", flip(&deep4, 3 * ps + 2)),
        (
            "damaged-truncated-4k.larch",
            deep4[..deep4.len() - 5000].to_vec(),
        ),
        ("damaged-newest-meta-zeroed-4k.larch", zero_newest),
        ("damaged-child-cycle-4k.larch", loop_child),
        ("damaged-garbage-appended-4k.larch", garbage),
    ]
}

/// Operation strings for `ops_with_power_cuts` (see its encoding in src/fuzz.rs).
fn ops_seeds() -> Vec<(&'static str, Vec<u8>)> {
    const SYNC: u8 = 10;
    const NOMETASYNC: u8 = 11;
    const ASYNC: u8 = 12;
    const ABORT: u8 = 13;
    const DBSYNC: u8 = 14;
    let ins = |tree: u8, key: u8, vlen: u8, seed: u8| vec![0, tree, key, vlen, seed];
    let big = |tree: u8, key: u8, size: u8| vec![1, tree, key, 0xe0 + size, 7, 3];
    let rm = |tree: u8, key: u8| vec![6, tree, key];
    let cut = |back: u8, how: u8, seed: u8| vec![15, back, how, 0, 0, 0, 0, 0, 0, 1, seed];
    let mut basic = vec![0u8];
    for k in 0..30 {
        basic.extend(ins(0, k, 60, k));
    }
    basic.push(SYNC);
    basic.extend(cut(0, 2, 1));
    basic.extend(cut(5, 2, 2));
    basic.extend(big(1, 3, 4));
    basic.push(NOMETASYNC);
    basic.extend(rm(0, 4));
    basic.extend(rm(0, 5));
    basic.push(ASYNC);
    basic.extend(cut(3, 3, 3));
    basic.push(DBSYNC);
    basic.extend(cut(0, 1, 4));

    let mut mixed = vec![3u8]; // 8 KiB pages, another policy
    for round in 0..12u8 {
        for k in 0..8 {
            mixed.extend(ins(round % 3, k * 5 + round, 90 + k, round));
        }
        if round % 4 == 1 {
            mixed.extend(big(2, round, round % 16));
        }
        mixed.extend(rm(round % 3, round));
        mixed.push([SYNC, ASYNC, NOMETASYNC, ASYNC][round as usize % 4]);
        mixed.extend(cut(round * 3, round, round));
    }

    let mut tree_drop = vec![4u8];
    for k in 0..20 {
        tree_drop.extend(ins(1, k, 200, 1));
    }
    tree_drop.push(SYNC);
    tree_drop.extend([9, 1]); // delete tree "b"
    tree_drop.extend(ins(0, 1, 5, 5));
    tree_drop.push(SYNC);
    tree_drop.extend(cut(2, 2, 9));
    tree_drop.extend(ins(2, 9, 9, 9));
    tree_drop.push(ABORT);
    tree_drop.push(ASYNC);
    tree_drop.push(ASYNC);
    tree_drop.extend(cut(0, 3, 10));

    let mut long_keys = vec![1u8];
    for k in 0..6u8 {
        long_keys.extend([2, 0, 0xf0, 40 + k * 20, 10, k]);
    }
    long_keys.push(SYNC);
    long_keys.extend(cut(1, 2, 11));

    vec![
        ("basic.ops", basic),
        ("mixed-durability-8k.ops", mixed),
        ("tree-drop-abort.ops", tree_drop),
        ("long-keys.ops", long_keys),
        ("empty.ops", Vec::new()),
    ]
}

#[test]
#[ignore = "writes fuzz/corpus; run with LARCH_WRITE_CORPUS=1"]
fn write_seed_corpus() {
    if std::env::var_os("LARCH_WRITE_CORPUS").is_none() {
        return;
    }
    for (target, seeds) in [("open_file", open_file_seeds()), ("ops", ops_seeds())] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in seeds {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
}
