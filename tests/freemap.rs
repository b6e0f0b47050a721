//! The free-space state is persisted copy-on-write, and a commit pays only for the pages it
//! changed: with tens of thousands of free pages, a one-key commit writes the same handful of
//! pages as with a few hundred (bbolt's whole-freelist rewrite per commit is what this avoids).

use larch::{Db, Durability, Options, Policy};

/// Pages written by one commit that changes one key (data leaf and path, catalog, free map,
/// meta), averaged over a few commits after the free pages are released.
fn pages_per_one_key_commit(db: &Db) -> f64 {
    // Let the freed pages be released and settle into the free map first.
    for i in 0..3u32 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("small")
            .unwrap()
            .insert(&i.to_be_bytes(), b"warm")
            .unwrap();
        tx.commit().unwrap();
    }
    let before = db.io_stats();
    let commits = 20u32;
    for i in 0..commits {
        let tx = db.begin_write().unwrap();
        tx.open_tree("small")
            .unwrap()
            .insert(&(i % 7).to_be_bytes(), &[i as u8; 40])
            .unwrap();
        tx.commit().unwrap();
    }
    let after = db.io_stats();
    (after.bytes_written - before.bytes_written) as f64 / 4096.0 / commits as f64
}

/// A database whose free map holds about `free` free pages: a tree of 16 MiB values (overflow
/// runs) written and then dropped, between a small tree of 2,000 keys and a tail tree.
fn with_free_pages(dir: &std::path::Path, free: u64) -> Db {
    let db = Db::open(
        dir.join("f.larch"),
        Options::default().policy(Policy::FirstFit),
    )
    .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("small").unwrap();
        for i in 0..2000u32 {
            t.insert(&i.to_be_bytes(), &[1u8; 40]).unwrap();
        }
    }
    tx.commit().unwrap();
    let value = vec![7u8; 16 << 20];
    let runs = free.div_ceil(4097);
    for i in 0..runs {
        let mut tx = db.begin_write().unwrap();
        tx.open_tree("big")
            .unwrap()
            .insert(&i.to_be_bytes(), &value)
            .unwrap();
        tx.set_durability(Durability::Async);
        tx.commit().unwrap();
    }
    // Live pages after the big ones, so the freed region is not a tail the file gives back.
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("tail").unwrap();
        for i in 0..3000u32 {
            t.insert(&i.to_be_bytes(), &[2u8; 100]).unwrap();
        }
    }
    tx.commit().unwrap();
    db.sync().unwrap();
    let tx = db.begin_write().unwrap();
    tx.delete_tree("big").unwrap();
    tx.commit().unwrap();
    db
}

#[test]
fn a_one_key_commit_writes_a_few_free_map_pages_however_many_pages_are_free() {
    let small_dir = tempfile::tempdir().unwrap();
    let small = with_free_pages(small_dir.path(), 0);
    let few = pages_per_one_key_commit(&small);
    let small_free = small.stats().unwrap().free_pages;
    small.check().unwrap();
    drop(small);

    let big_dir = tempfile::tempdir().unwrap();
    // LARCH_FREE_PAGES=1000000 for the million (a 4 GiB file).
    let free: u64 = std::env::var("LARCH_FREE_PAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48_000);
    let big = with_free_pages(big_dir.path(), free);
    let many = pages_per_one_key_commit(&big);
    let s = big.stats().unwrap();
    big.check().unwrap();
    eprintln!(
        "one-key commit: {few:.1} pages with {small_free} free pages, {many:.1} with {}",
        s.free_pages
    );
    assert!(
        s.free_pages >= free * 9 / 10,
        "the setup should leave ~{free} free pages, has {}",
        s.free_pages
    );
    // The commit's own pages: data leaf and branch, catalog leaf, a free-map leaf or two and
    // its branch, the meta. Nothing proportional to the free pages.
    assert!(
        many <= 10.0,
        "{many:.1} pages per one-key commit with {} free pages",
        s.free_pages
    );
    assert!(
        many <= few + 2.0,
        "{many:.1} pages per commit with {} free pages vs {few:.1} with {small_free}",
        s.free_pages
    );
}
