//! `WriteMode::Hybrid` on a real file: an Async commit's pages go through the writable map and a
//! sync writes them back; the map never stores past the end of a file that shrinks and grows.
//! (The power-cut simulation records every write the same way whatever the mode: what is
//! particular to Hybrid is the map, which only a real file shows.)

use std::path::Path;

use larch::{Db, Durability, Options, WriteMode};
use larch_testkit::Rng;

/// Is `dir` on a file system that writes pages back (not tmpfs, where pages stay dirty)?
fn writes_back(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY (test-only FFI): statfs fills the zeroed struct it is given for a valid path.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut s) };
    rc == 0 && s.f_type != libc::TMPFS_MAGIC
}

/// Dirty bytes (Shared_Dirty + Private_Dirty) of this process's writable shared mappings
/// (`rw-s`) of `path`, and whether one exists.
fn writable_map_dirty(path: &Path) -> (bool, u64) {
    let want = std::fs::canonicalize(path).unwrap();
    let want = want.to_str().unwrap();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut found = false;
    let mut dirty = 0u64;
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let perms = f.next().unwrap_or("");
            let name = line.split_whitespace().nth(5).unwrap_or("");
            inside = perms == "rw-s" && name == want;
            found |= inside;
            continue;
        }
        if inside && (first == "Shared_Dirty:" || first == "Private_Dirty:") {
            dirty += f.next().unwrap().parse::<u64>().unwrap() * 1024;
        }
    }
    (found, dirty)
}

/// Sync pages go by pwrite (no writable map), Async pages through the map, and the
/// fdatasync of `Db::sync` writes back (cleans) every page dirtied through the map.
#[test]
fn hybrid_async_pages_go_through_the_map_and_fdatasync_cleans_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.larch");
    let opts = Options::default()
        .write_mode(WriteMode::Hybrid)
        .max_unsynced_bytes(None);
    let db = Db::open(&path, opts).unwrap();
    for round in 0..3u8 {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..2000u32 {
                t.insert(&i.to_be_bytes(), &[round; 300]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let (mapped, dirty) = writable_map_dirty(&path);
    assert!(
        !mapped && dirty == 0,
        "Sync commits used the writable map: mapped {mapped}, {dirty} dirty bytes"
    );
    for round in 3..8u8 {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Async);
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..2000u32 {
                t.insert(&i.to_be_bytes(), &[round; 300]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let (mapped, dirty) = writable_map_dirty(&path);
    eprintln!("after Async commits: mapped {mapped}, {dirty} dirty bytes in the writable map");
    assert!(
        mapped && dirty > 0,
        "Async commits did not go through the map"
    );
    db.sync().unwrap();
    let (_, dirty) = writable_map_dirty(&path);
    eprintln!("after Db::sync: {dirty} dirty bytes in the writable map");
    if writes_back(dir.path()) {
        assert_eq!(
            dirty, 0,
            "fdatasync left pages dirtied through the map dirty"
        );
    }
}

/// The file shrinks (free tail given back, trim_to_durable, in-place compaction) and
/// grows again under Async commits that store through the map; overflow values are written
/// by pwrite at insert time, and some transactions abort after writing them. A store past
/// the end of the file would kill the test with SIGBUS.
#[test]
fn hybrid_survives_trims_regrowth_aborts_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.larch");
    let opts = Options::default()
        .write_mode(WriteMode::Hybrid)
        .durability(Durability::Async)
        .max_unsynced_bytes(Some(256 << 10));
    let mut rng = Rng(5);
    let mut min_len = u64::MAX;
    let mut max_len = 0;
    {
        let db = Db::open(&path, opts).unwrap();
        for cycle in 0..6u32 {
            // Grow: inline and overflow values, Async.
            for chunk in 0..10u32 {
                let tx = db.begin_write().unwrap();
                {
                    let mut t = tx.open_tree("t").unwrap();
                    for i in 0..200u32 {
                        let k = chunk * 200 + i;
                        let len = if k % 7 == 0 { 5000 } else { 400 };
                        t.insert(&k.to_be_bytes(), &vec![cycle as u8; len]).unwrap();
                    }
                }
                if rng.below(5) == 0 {
                    tx.abort();
                } else {
                    tx.commit().unwrap();
                }
            }
            max_len = max_len.max(db.stats().unwrap().file_bytes);
            // Shrink: delete nearly everything, make it durable, give the tail back.
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for k in 20..2000u32 {
                    t.remove(&k.to_be_bytes()).unwrap();
                }
            }
            tx.commit().unwrap();
            db.sync().unwrap();
            for _ in 0..3 {
                let tx = db.begin_write().unwrap();
                {
                    let mut t = tx.open_tree("t").unwrap();
                    t.insert(b"x", &[cycle as u8; 10]).unwrap();
                }
                tx.commit().unwrap();
                db.sync().unwrap();
            }
            if cycle % 2 == 1 {
                db.compact().unwrap();
            }
            min_len = min_len.min(db.stats().unwrap().file_bytes);
            db.check().unwrap();
        }
    }
    eprintln!("file between {min_len} and {max_len} bytes");
    assert!(
        min_len * 2 < max_len,
        "the file never shrank: the trim path was not exercised"
    );
    let db = Db::open(&path, Options::default()).unwrap();
    db.check().unwrap();
}
