//! Runs the bodies of the fuzz targets (`larch_testkit::fuzz`, crates/testkit/src/fuzz.rs) over
//! every file of the checked-in seed corpora in fuzz/corpus/, so CI exercises them on stable
//! Rust: inputs the fuzzers found to crash the engine are checked in there and stay regression
//! cases.
//!
//! The crafted-meta target also runs over a few thousand inputs from a seeded generator.
//!
//! No single allocation in this test binary may exceed `ALLOC_CAP` (the fuzzers run with
//! `-malloc_limit_mb`): one that does fails, and the process aborts naming its size.
//!
//! `write_seed_corpus` (ignored) regenerates the engine-made seeds:
//! `LARCH_WRITE_CORPUS=1 cargo test --test fuzz_corpus -- --ignored write_seed_corpus`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};

use larch::raw::{run_checksum, Meta};
use larch::{Db, Durability, Options};
use larch_testkit::fuzz::MetaOutcome;

/// Larger than anything these inputs need (the databases are a few hundred KiB): a file that
/// makes the engine ask for more is a finding (a length read from the file and trusted).
const ALLOC_CAP: usize = 256 << 20;

struct Capped;

// SAFETY: every call goes to the system allocator unchanged, or returns null (an allocation
// failure, which the caller handles by aborting) for a size over the cap.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static CAPPED: Capped = Capped;

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
    run_corpus("open_file", 8, larch_testkit::fuzz::open_arbitrary_file);
}

#[test]
fn every_ops_seed_recovers_a_whole_committed_state_at_every_power_cut() {
    run_corpus("ops", 4, larch_testkit::fuzz::ops_with_power_cuts);
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
    let tx = db.begin_write().unwrap();
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
    let tx = db.begin_write().unwrap();
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
        let tx = db.begin_write().unwrap();
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

/// Operation strings for `ops_with_power_cuts` (see its encoding in crates/testkit/src/fuzz.rs).
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

/// Inputs for `open_crafted_meta` (see the encoding in crates/testkit/src/fuzz.rs, `craft`): one
/// edit per `META_OP_BYTES` bytes, an edit code and then its arguments.
fn meta_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // Edit codes.
    const HWM_SPARSE: u8 = 1;
    const CATALOG_ROOT: u8 = 2;
    const FREEMAP_ROOT: u8 = 3;
    const CATALOG_DEPTH: u8 = 5;
    const LIVE: u8 = 8;
    const UNREACHABLE: u8 = 9;
    const CONSISTENT: u8 = 10;
    const TXID: u8 = 11;
    const MANIFEST_RUN: u8 = 12;
    const RAW_RUN_COUNT: u8 = 15;
    const MARK_FREE: u8 = 16;
    const FILL_CHUNK: u8 = 18;
    const OTHER_SLOT: u8 = 19;
    const COPY_TO_OTHER: u8 = 20;
    const ZERO_OTHER: u8 = 23;
    const STALE_CATALOG: u8 = 24;
    const STALE_FREEMAP: u8 = 25;
    // Value selectors.
    const ZERO: u8 = 0;
    const ONE: u8 = 1;
    const HWM: u8 = 4;
    const PAST_RUN_2_31: u8 = 8;
    const MAX: u8 = 10;
    const BYTE: u8 = 12;
    const POW2: u8 = 14;
    const BASE_PAGE: u8 = 15;
    // Run-length selectors.
    const LEN_2_31_MINUS_1: u8 = 2;
    const LEN_BYTE: u8 = 3;
    let op = |code: u8, args: &[u8]| {
        let mut v = vec![0u8; larch_testkit::fuzz::META_OP_BYTES];
        v[0] = code;
        v[1..1 + args.len()].copy_from_slice(args);
        v
    };
    let input = |setup: u8, ops: &[Vec<u8>]| {
        let mut v = vec![setup];
        for o in ops {
            v.extend_from_slice(o);
        }
        v
    };
    vec![
        ("untouched-4k.meta", input(0, &[])),
        ("untouched-8k.meta", input(1, &[])),
        (
            "freemap-marks-every-page-consistent-4k.meta",
            input(0, &[op(FILL_CHUNK, &[ZERO, 0xff])]),
        ),
        (
            "freemap-marks-page-5-consistent-8k.meta",
            input(1, &[op(MARK_FREE, &[BYTE, 5, 1])]),
        ),
        (
            "freemap-root-stale-consistent-4k.meta",
            input(0, &[op(STALE_FREEMAP, &[0])]),
        ),
        (
            "catalog-root-stale-4k.meta",
            input(0, &[op(STALE_CATALOG, &[0])]),
        ),
        (
            "freemap-root-at-a-live-leaf-4k.meta",
            input(0, &[op(FREEMAP_ROOT, &[BASE_PAGE, 3]), op(CONSISTENT, &[])]),
        ),
        (
            "catalog-root-1-and-0-older-meta-4k.meta",
            input(2, &[op(CATALOG_ROOT, &[ONE]), op(FREEMAP_ROOT, &[ZERO])]),
        ),
        (
            "hwm-2pow30-sparse-4TiB-consistent-4k.meta",
            input(0, &[op(HWM_SPARSE, &[POW2, 30]), op(CONSISTENT, &[])]),
        ),
        ("hwm-at-roots-4k.meta", input(0, &[op(0, &[HWM])])),
        (
            "hwm-past-16TiB-sparse-8k.meta",
            input(1, &[op(HWM_SPARSE, &[POW2, 32]), op(CONSISTENT, &[])]),
        ),
        (
            "catalog-depth-64-8k.meta",
            input(1, &[op(CATALOG_DEPTH, &[BYTE, 64])]),
        ),
        (
            "counters-max-4k.meta",
            input(0, &[op(LIVE, &[MAX]), op(UNREACHABLE, &[MAX])]),
        ),
        (
            "known-txid-2pow64-1-commits-wrap-4k.meta",
            input(0, &[op(TXID, &[3])]),
        ),
        (
            "both-metas-one-txid-4k.meta",
            input(0, &[op(COPY_TO_OTHER, &[0])]),
        ),
        ("older-meta-alone-4k.meta", input(2, &[op(ZERO_OTHER, &[])])),
        (
            "manifest-run-count-not-covered-4k.meta",
            input(0, &[op(RAW_RUN_COUNT, &[BYTE, 7])]),
        ),
        (
            "manifest-run-past-hwm-older-meta-8k.meta",
            input(
                1,
                &[
                    op(OTHER_SLOT, &[]),
                    op(MANIFEST_RUN, &[HWM, LEN_BYTE, 3, 1]),
                ],
            ),
        ),
        // Problems the target found, fixed since (each panicked or aborted the process; inputs
        // the fuzzer itself found are checked in as found-*): a 2^31-page run on a sparse
        // file, a 2^31-page node run, an empty overflow run, a run wrapping past 2^64.
        (
            "known-manifest-overflow-run-2pow31-1-pages-sparse-8TiB-4k.meta",
            input(
                0,
                &[
                    op(HWM_SPARSE, &[PAST_RUN_2_31]),
                    op(MANIFEST_RUN, &[BYTE, 2, LEN_2_31_MINUS_1, 1]),
                ],
            ),
        ),
        (
            "known-manifest-node-run-2pow31-1-pages-4k.meta",
            input(0, &[op(MANIFEST_RUN, &[BYTE, 2, LEN_2_31_MINUS_1, 0])]),
        ),
        (
            "known-manifest-overflow-run-of-0-pages-4k.meta",
            input(0, &[op(MANIFEST_RUN, &[BYTE, 2, LEN_BYTE, 0, 1])]),
        ),
        (
            "known-manifest-node-run-wraps-past-2pow64-4k.meta",
            input(0, &[op(MANIFEST_RUN, &[MAX, LEN_BYTE, 5, 0])]),
        ),
    ]
}

#[test]
fn every_meta_seed_opens_checks_reads_and_commits_without_losing_live_data() {
    let files = corpus("meta");
    assert!(
        files.len() >= 16,
        "fuzz/corpus/meta holds {} files",
        files.len()
    );
    for path in files {
        let data = std::fs::read(&path).unwrap();
        let outcome = larch_testkit::fuzz::open_crafted_meta_outcome(&data);
        eprintln!(
            "meta: {} ({} bytes): {outcome:?}",
            path.display(),
            data.len()
        );
    }
}

#[test]
#[ignore = "writes fuzz/corpus; run with LARCH_WRITE_CORPUS=1"]
fn write_seed_corpus() {
    if std::env::var_os("LARCH_WRITE_CORPUS").is_none() {
        return;
    }
    for (target, seeds) in [
        ("open_file", open_file_seeds()),
        ("ops", ops_seeds()),
        ("meta", meta_seeds()),
    ] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in seeds {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
}

// ---- the crafted-meta target ------------------------------------------------------------------

/// Generated inputs run by `crafted_metas_from_a_seeded_rng_never_panic_or_lose_live_data`
/// (`LARCH_META_INPUTS` overrides, `LARCH_META_SEED` starts elsewhere).
const META_INPUTS: u64 = 5000;

#[test]
fn crafted_metas_from_a_seeded_rng_never_panic_or_lose_live_data() {
    let n = std::env::var("LARCH_META_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(META_INPUTS);
    let first: u64 = std::env::var("LARCH_META_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let start = std::time::Instant::now();
    let mut tally = std::collections::BTreeMap::new();
    for seed in first..first + n {
        let input = larch_testkit::fuzz::crafted_meta_input(seed);
        let t = std::time::Instant::now();
        let outcome =
            std::panic::catch_unwind(|| larch_testkit::fuzz::open_crafted_meta_outcome(&input))
                .unwrap_or_else(|_| panic!("seed {seed}: input {input:02x?}"));
        *tally.entry(outcome).or_insert(0u64) += 1;
        let took = t.elapsed();
        assert!(
            took < std::time::Duration::from_secs(10),
            "seed {seed} took {took:?}"
        );
    }
    eprintln!("{n} crafted metas in {:?}: {tally:?}", start.elapsed());
    // The generator must reach the places that matter: commits on crafted files, free maps
    // that mark live pages free with everything else consistent, and trees whose recorded
    // depth disagrees with their pages.
    let share = |o| tally.get(&o).copied().unwrap_or(0) * 100 / n.max(1);
    if n >= 1000 {
        assert!(share(MetaOutcome::Committed) >= 10, "{tally:?}");
        assert!(share(MetaOutcome::LiveMarkedFree) >= 1, "{tally:?}");
        assert!(share(MetaOutcome::LevelMismatch) >= 1, "{tally:?}");
    }
}
