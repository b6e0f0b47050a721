//! A durable commit whose pages are damaged afterwards (a bit flip, a lost block) is reported,
//! never silently replaced by the commit before it; a commit cut short by a crash still falls
//! back on its own (docs/format.md, "Torn or damaged").

use std::os::unix::fs::FileExt;
use std::path::Path;

use larch::raw::{PageHeader, PageType};
use larch::{Db, Durability, Error, Options};

const RECORDS: u64 = 4000;
const BATCH: u64 = 400;

fn key(i: u64) -> Vec<u8> {
    format!("key{:06}", (i * 7919) % 100_000).into_bytes()
}

/// Load `RECORDS` records in one-fsync Sync commits of `BATCH` (as `larch load --batch 400`
/// does); returns the last txid. The handle is left to the caller to close (or not).
fn load(path: &Path) -> (Db, u64) {
    let db = Db::open(path, Options::default()).unwrap();
    for b in 0..RECORDS / BATCH {
        let mut tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("main").unwrap();
            for i in b * BATCH..(b + 1) * BATCH {
                t.insert(&key(i), format!("value-{i}").as_bytes()).unwrap();
            }
        }
        tx.set_durability(Durability::Sync);
        tx.commit().unwrap();
    }
    let txid = db.begin_read().unwrap().txid();
    (db, txid)
}

/// A leaf page that commit `txid` wrote.
fn leaf_written_by(path: &Path, txid: u64) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    (2..bytes.len() as u64 / 4096)
        .find(|&p| {
            let page = &bytes[(p * 4096) as usize..][..4096];
            matches!(PageHeader::read(page), Some(h) if h.txid == txid && h.page_type == PageType::Leaf)
        })
        .expect("the last commit wrote a leaf")
}

fn flip_bit(path: &Path, page: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let at = page * 4096 + 3000;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x04], at).unwrap();
}

fn count(db: &Db) -> u64 {
    db.begin_read()
        .unwrap()
        .open_tree("main")
        .unwrap()
        .len()
        .unwrap()
}

#[test]
fn a_bit_flip_in_the_newest_commit_after_a_clean_close_fails_the_open_naming_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.larch");
    let (db, last) = load(&path);
    drop(db);
    let page = leaf_written_by(&path, last);
    flip_bit(&path, page);
    for opts in [Options::default(), Options::default().read_only(true)] {
        match Db::open(&path, opts) {
            Err(Error::Corrupt { page: p, .. }) => assert_eq!(p, page),
            Err(e) => panic!("open failed, but not as corruption: {e}"),
            Ok(db) => panic!(
                "opened at txid {} with {} records: the damaged durable commit {last} was dropped",
                db.begin_read().unwrap().txid(),
                count(&db)
            ),
        }
    }
}

#[test]
fn falling_back_over_damage_only_on_request_and_check_reports_what_it_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.larch");
    let (db, last) = load(&path);
    drop(db);
    flip_bit(&path, leaf_written_by(&path, last));
    let opts = Options::default().read_only(true).fall_back_on_damage(true);
    let db = Db::open(&path, opts).unwrap();
    assert_eq!(db.begin_read().unwrap().txid(), last - 1);
    assert_eq!(count(&db), RECORDS - BATCH);
    let report = db.check_report().unwrap();
    assert!(
        !report.is_ok(),
        "check passed over a discarded durable commit"
    );
    assert!(
        report.problems[0]
            .what
            .contains(&format!("commit {last} was durable")),
        "{:?}",
        report.problems
    );
    assert!(db.stats().unwrap().meta_fallback.is_some());
    drop(db);
    // Read-only: nothing changed, the damage is still reported without the option.
    assert!(matches!(
        Db::open(&path, Options::default()),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn a_read_write_fall_back_discards_the_damaged_commit_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.larch");
    let (db, last) = load(&path);
    drop(db);
    flip_bit(&path, leaf_written_by(&path, last));
    let db = Db::open(&path, Options::default().fall_back_on_damage(true)).unwrap();
    assert_eq!(db.begin_read().unwrap().txid(), last - 1);
    drop(db);
    // Closed without a commit: the next plain open still opens at the older commit.
    let db = Db::open(&path, Options::default()).unwrap();
    assert_eq!(db.begin_read().unwrap().txid(), last - 1);
    assert_eq!(count(&db), RECORDS - BATCH);
    db.check().unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("main")
        .unwrap()
        .insert(b"after", b"repair")
        .unwrap();
    tx.commit().unwrap();
    drop(db);
    let db = Db::open(&path, Options::default()).unwrap();
    assert_eq!(count(&db), RECORDS - BATCH + 1);
    db.check().unwrap();
}

#[test]
fn without_a_clean_close_a_mismatch_is_a_torn_commit_and_opens_one_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.larch");
    let (db, last) = load(&path);
    // A crash: the handle never closes, so nothing records that `last` was durable. (Its
    // lock goes with the copy of the file taken here, as it would with the process.)
    let crashed = dir.path().join("crashed.larch");
    std::fs::copy(&path, &crashed).unwrap();
    drop(db);
    let path = crashed;
    flip_bit(&path, leaf_written_by(&path, last));
    let db = Db::open(&path, Options::default().read_only(true)).unwrap();
    assert_eq!(db.begin_read().unwrap().txid(), last - 1);
    let report = db.check_report().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("did not fully reach the disk")),
        "{:?}",
        report.notes
    );
}

/// A meta with valid checksums whose manifest lists an overflow run of 2^31-1 pages, on a
/// sparse file long enough for it: open must not allocate the run (8 TiB: the process
/// aborted) nor read it; the run was never written, so the commit is torn.
#[test]
fn a_crafted_manifest_run_of_two_billion_pages_is_refused_without_reading_or_allocating_it() {
    use larch::raw::{ManifestRun, Meta};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.larch");
    let (db, last) = load(&path);
    drop(db);
    let slot = (last % 2) * 4096;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut page = vec![0u8; 4096];
    f.read_exact_at(&mut page, slot).unwrap();
    let mut meta = Meta::decode(&page).unwrap();
    let pages = (1u32 << 31) - 1;
    meta.high_water = 2 + pages as u64 + 16;
    let run = ManifestRun {
        start: 2,
        pages,
        overflow: true,
        txid: 0,
        checksum: 0,
    };
    f.write_all_at(&meta.encode_page(&[run], 4096), slot)
        .unwrap();
    // Sparse: the file claims 8 TiB; only its first pages hold data.
    if f.set_len(meta.high_water * 4096).is_err() {
        eprintln!("this file system cannot hold an 8 TiB sparse file; skipped");
        return;
    }
    drop(f);
    for opts in [Options::default().read_only(true), Options::default()] {
        match Db::open(&path, opts) {
            Ok(db) => assert_eq!(db.begin_read().unwrap().txid(), last - 1),
            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "{e}"),
        }
    }
}
