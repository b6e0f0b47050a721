//! larch maps at most 16 TiB of a file (`larch::raw::MAX_FILE_BYTES`), so it must never use a
//! page past that: a meta whose pages reach past it is not valid (open takes the other meta),
//! and a commit that would put a page there fails instead of being acknowledged and then
//! unreadable. (Found by the crafted-meta fuzz target on a tmpfs, which takes sparse files far
//! past 16 TiB; ext4 stops just short of it, so these tests need /dev/shm and skip without it.)

use std::path::{Path, PathBuf};

use larch::raw::{Meta, MAX_FILE_BYTES};
use larch::{Db, Durability, Options};

const PS: usize = 4096;

/// A scratch directory on a tmpfs, or None.
fn sparse_dir() -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    shm.is_dir()
        .then(|| tempfile::tempdir_in(shm).ok())
        .flatten()
}

/// A small database at `path`, committed twice; returns the newest meta's slot and txid.
fn small_db(path: &PathBuf) -> (usize, u64) {
    // Every commit saves its free map: the crafted meta below is not behind, so an open
    // trusts its counters against the map rather than walking 16 TiB of pages it calls used.
    let db = Db::open(
        path,
        Options::default()
            .page_size(PS)
            .durability(Durability::Sync)
            .carried_max_bits(1),
    )
    .unwrap();
    for i in 0..2u32 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("t")
            .unwrap()
            .insert(&i.to_be_bytes(), b"value")
            .unwrap();
        tx.commit().unwrap();
    }
    drop(db);
    let img = std::fs::read(path).unwrap();
    let a = Meta::decode(&img[..PS]).unwrap();
    let b = Meta::decode(&img[PS..2 * PS]).unwrap();
    if a.txid > b.txid {
        (0, a.txid)
    } else {
        (1, b.txid)
    }
}

/// Rewrite the meta in `slot` with `f` (checksums and manifest kept right), and make the file
/// `len` bytes (sparse). False if the file system refuses the length.
fn craft(path: &PathBuf, slot: usize, len: u64, f: impl FnOnce(&mut Meta)) -> bool {
    let mut img = std::fs::read(path).unwrap();
    let page = &img[slot * PS..(slot + 1) * PS];
    let mut m = Meta::decode(page).unwrap();
    let manifest = m.manifest(page).unwrap();
    f(&mut m);
    img[slot * PS..(slot + 1) * PS].copy_from_slice(&m.encode_page(&manifest, PS));
    std::fs::write(path, &img).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(len).is_ok()
}

#[test]
fn a_meta_whose_pages_reach_past_16_tib_is_not_used() {
    let Some(dir) = sparse_dir() else {
        return eprintln!("no /dev/shm: skipped");
    };
    let path = dir.path().join("past.larch");
    let (slot, txid) = small_db(&path);
    let pages = MAX_FILE_BYTES / PS as u64 + 1;
    if !craft(&path, slot, pages * PS as u64, |m| m.high_water = pages) {
        return eprintln!("the file system refuses a file past 16 TiB: skipped");
    }
    let db = Db::open(&path, Options::default().create(false)).unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.txid(), txid - 1, "open used the meta past 16 TiB");
    drop(rx);
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"new", b"1").unwrap();
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_tree("t").unwrap().get(b"new").unwrap(),
        Some(&b"1"[..])
    );
}

#[test]
fn a_commit_that_would_write_past_16_tib_fails_instead_of_being_unreadable() {
    let Some(dir) = sparse_dir() else {
        return eprintln!("no /dev/shm: skipped");
    };
    let path = dir.path().join("at.larch");
    let (slot, txid) = small_db(&path);
    // Every page up to 16 TiB in use, the file (sparse) longer still: the next page the writer
    // takes would lie past what it can map.
    let pages = MAX_FILE_BYTES / PS as u64;
    let ok = craft(&path, slot, MAX_FILE_BYTES * 2, |m| {
        m.live_pages += pages - m.high_water;
        m.high_water = pages;
    });
    if !ok {
        return eprintln!("the file system refuses a file past 16 TiB: skipped");
    }
    let db = Db::open(&path, Options::default().create(false)).unwrap();
    assert_eq!(db.begin_read().unwrap().txid(), txid);
    let tx = db.begin_write().unwrap();
    // Some fifty leaves' worth of new entries: more pages than the small database has free,
    // so the commit needs pages past the high-water mark whatever order the allocator takes
    // them in (one small entry fits the free pages once a commit's pages are gathered at
    // commit, alloc.rs `gather_hot_pages`).
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..2_000u32 {
            t.insert(format!("new{i}").as_bytes(), &[7u8; 100]).unwrap();
        }
    }
    let err = tx
        .commit()
        .expect_err("a commit past 16 TiB was acknowledged");
    assert!(err.to_string().contains("the most larch maps"), "{err}");
    let rx = db.begin_read().unwrap();
    assert_eq!(rx.txid(), txid);
    assert_eq!(rx.open_tree("t").unwrap().get(b"new0").unwrap(), None);
    assert_eq!(
        rx.open_tree("t").unwrap().get(&1u32.to_be_bytes()).unwrap(),
        Some(&b"value"[..])
    );
}
