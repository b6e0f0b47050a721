//! The database's identity is its inode, not the name it was opened by (docs/format.md,
//! "Locking" and "Compaction"). Background compaction puts a new file in place by renaming it
//! over a name; these tests open databases through symlinks and hard links, let that switch
//! happen (or be refused), and check that every name still reaches one complete database and
//! that the lock still keeps a second writer out through each of them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use larch::{CompactionFs, Db, FileStorage, Options, Policy, Storage, WriteMode};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Options under which a few rounds of overwrites start a background compaction.
fn compacting() -> Options {
    Options::default()
        .policy(Policy::Null)
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
}

fn contents(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    t.iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

/// One commit overwriting every key of tree "t" (Null policy: the old pages all go dead),
/// then wait for a compaction it started. The wait's result.
fn overwrite_all(db: &Db, model: &mut Model, round: u32) -> larch::Result<()> {
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..600u32 {
            let v = format!("round {round} key {i} {}", "x".repeat(100)).into_bytes();
            t.insert(&i.to_be_bytes(), &v).unwrap();
            model.insert(i.to_be_bytes().to_vec(), v);
        }
    }
    tx.commit().unwrap();
    db.wait_for_compaction().map(|_| ())
}

/// Overwrite until a background compaction has switched files; then a few more commits, so
/// the new file holds commits the old one never saw.
fn churn_until_switch(db: &Db, model: &mut Model) {
    let mut round = 0;
    while db.compactions() == 0 {
        assert!(round < 100, "no background compaction after {round} rounds");
        overwrite_all(db, model, round).unwrap();
        round += 1;
    }
    for r in 0..3 {
        let tx = db.begin_write().unwrap();
        let k = format!("after switch {r}").into_bytes();
        tx.open_tree("t").unwrap().insert(&k, b"new").unwrap();
        model.insert(k, b"new".to_vec());
        tx.commit().unwrap();
    }
}

/// Rounds that start a compaction on a file with a single name (the control for hard links).
fn rounds_to_switch() -> u32 {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("control.larch"), compacting()).unwrap();
    let mut model = Model::new();
    let mut round = 0;
    while db.compactions() == 0 {
        assert!(round < 100, "the control never compacted");
        overwrite_all(&db, &mut model, round).unwrap();
        round += 1;
    }
    round
}

/// A second read-write open through `path` must fail because the database is locked.
fn assert_locked(path: &Path) {
    match Db::open(path, Options::default()) {
        Ok(_) => panic!(
            "a second read-write open through {} succeeded while the first handle is open",
            path.display()
        ),
        Err(e) => assert!(
            matches!(e, larch::Error::AlreadyOpen { .. }),
            "{}: expected Error::AlreadyOpen, got: {e:?}",
            path.display()
        ),
    }
}

fn ino(path: &Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap();
    (m.dev(), m.ino())
}

/// A database at dir/data/real.larch and dir/link.larch -> data/real.larch (a relative link
/// into another directory, so the link's directory is not the file's).
fn symlinked(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir(dir.join("data")).unwrap();
    let real = dir.join("data").join("real.larch");
    drop(Db::open(&real, Options::default()).unwrap());
    let link = dir.join("link.larch");
    std::os::unix::fs::symlink("data/real.larch", &link).unwrap();
    (real, link)
}

#[test]
fn compaction_through_a_symlink_replaces_the_target_and_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let (real, link) = symlinked(dir.path());
    let before = ino(&real);
    let db = Db::open(&link, compacting()).unwrap();
    let mut model = Model::new();
    churn_until_switch(&db, &mut model);

    let l = std::fs::symlink_metadata(&link).unwrap();
    assert!(
        l.file_type().is_symlink(),
        "the switch replaced the symlink with a regular file"
    );
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("data/real.larch")
    );
    assert_ne!(
        ino(&real),
        before,
        "the real file is still the pre-compaction one"
    );
    assert_eq!(
        db.stats().unwrap().file_bytes,
        std::fs::metadata(&real).unwrap().len(),
        "the handle must be on the file at the real path"
    );
    drop(db);
    for name in [&link, &real] {
        let db = Db::open(name, Options::default()).unwrap();
        db.check().unwrap();
        assert_eq!(contents(&db), model, "through {}", name.display());
    }
    // Nothing but the database in its directory, nothing but the link in the link's.
    let names = |d: &Path| -> Vec<_> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    };
    // The lock file sits beside the file, not the link.
    let mut data = names(&dir.path().join("data"));
    data.sort();
    assert_eq!(data, vec!["real.larch", "real.larch-lock"]);
    let mut top = names(dir.path());
    top.sort();
    assert_eq!(top, vec!["data", "link.larch"]);
}

#[test]
fn after_a_switch_through_a_symlink_a_second_writer_is_refused_through_every_name() {
    let dir = tempfile::tempdir().unwrap();
    let (real, link) = symlinked(dir.path());
    let db = Db::open(&link, compacting()).unwrap();
    let mut model = Model::new();
    churn_until_switch(&db, &mut model);
    assert_locked(&link);
    assert_locked(&real);
    // A third name made after the switch: a hard link to the file now in place.
    let other = dir.path().join("other.larch");
    std::fs::hard_link(&real, &other).unwrap();
    assert_locked(&other);
    drop(db);
    let db = Db::open(&other, Options::default()).unwrap();
    assert_eq!(contents(&db), model);
}

#[test]
fn db_path_is_the_resolved_path() {
    let dir = tempfile::tempdir().unwrap();
    let (real, link) = symlinked(dir.path());
    let canon_dir = std::fs::canonicalize(dir.path()).unwrap();
    let db = Db::open(&link, Options::default()).unwrap();
    assert_eq!(db.path(), canon_dir.join("data").join("real.larch"));
    assert_eq!(db.path(), std::fs::canonicalize(&real).unwrap());
    drop(db);
    // A new file under a symlinked directory: the directory is resolved, the name joined.
    std::os::unix::fs::symlink("data", dir.path().join("datalink")).unwrap();
    let db = Db::open(
        dir.path().join("datalink").join("new.larch"),
        Options::default(),
    )
    .unwrap();
    assert_eq!(db.path(), canon_dir.join("data").join("new.larch"));
    assert!(dir.path().join("data").join("new.larch").is_file());
}

#[test]
fn opening_a_dangling_symlink_is_refused_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("link.larch");
    std::os::unix::fs::symlink("missing.larch", &link).unwrap();
    let e = Db::open(&link, Options::default()).unwrap_err();
    assert!(e.to_string().contains("dangling symlink"), "{e}");
    assert!(e.to_string().contains("missing.larch"), "{e}");
    assert!(!dir.path().join("missing.larch").exists());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec!["link.larch"]);
}

#[test]
fn compaction_of_a_hard_linked_file_is_refused_and_both_names_keep_one_inode() {
    let rounds = rounds_to_switch();
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.larch");
    let b = dir.path().join("b.larch");
    drop(Db::open(&a, Options::default()).unwrap());
    std::fs::hard_link(&a, &b).unwrap();
    let db = Db::open(&a, compacting()).unwrap();
    let mut model = Model::new();
    let mut refusals = Vec::new();
    // Twice the rounds that compact a file with one name.
    for round in 0..2 * rounds {
        if let Err(e) = overwrite_all(&db, &mut model, round) {
            refusals.push(e.to_string());
        }
    }
    assert_eq!(db.compactions(), 0, "a hard-linked file was switched");
    assert!(
        !refusals.is_empty() && refusals.iter().all(|r| r.contains("hard links")),
        "the refusal must be reported with its reason: {refusals:?}"
    );
    assert!(db.compactions_refused() > 0);
    assert_eq!(ino(&a), ino(&b), "the two names split into two files");
    assert_eq!(std::fs::metadata(&a).unwrap().nlink(), 2);
    assert_locked(&b);
    assert_locked(&a);
    drop(db);
    for name in [&a, &b] {
        let db = Db::open(name, Options::default()).unwrap();
        db.check().unwrap();
        assert_eq!(contents(&db), model, "through {}", name.display());
    }
}

#[test]
fn compact_and_compact_to_still_work_on_a_hard_linked_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.larch");
    let b = dir.path().join("b.larch");
    drop(Db::open(&a, Options::default()).unwrap());
    std::fs::hard_link(&a, &b).unwrap();
    let db = Db::open(&b, Options::default().policy(Policy::Null)).unwrap();
    let mut model = Model::new();
    for round in 0..6 {
        overwrite_all(&db, &mut model, round).unwrap();
    }
    let r = db.compact().unwrap();
    assert!(r.after_bytes < r.before_bytes, "{r:?}");
    let copy = dir.path().join("copy.larch");
    db.compact_to(&copy).unwrap();
    assert_eq!(ino(&a), ino(&b));
    drop(db);
    for name in [&a, &b, &copy] {
        let db = Db::open(name, Options::default()).unwrap();
        db.check().unwrap();
        assert_eq!(contents(&db), model, "through {}", name.display());
    }
}

/// Compaction's file-system operations, except that when compaction opens its new file (after
/// the copy, before the switch) another file is renamed over the database's path.
#[derive(Debug)]
struct ReplaceDuringCopy {
    path: PathBuf,
    intruder: Vec<u8>,
    opened: AtomicUsize,
}

impl CompactionFs for ReplaceDuringCopy {
    fn storage(&self, path: &Path, file: File, mode: WriteMode) -> Box<dyn Storage> {
        if self.opened.fetch_add(1, Ordering::SeqCst) == 0 {
            let other = self.path.with_file_name("intruder");
            std::fs::write(&other, &self.intruder).unwrap();
            std::fs::rename(&other, &self.path).unwrap();
        }
        let _ = path;
        Box::new(FileStorage::new(file, mode))
    }
}

#[test]
fn a_switch_is_abandoned_when_the_path_was_replaced_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.larch");
    drop(Db::open(&path, Options::default()).unwrap());
    let intruder = b"someone else's file".to_vec();
    let fs = Arc::new(ReplaceDuringCopy {
        path: path.clone(),
        intruder: intruder.clone(),
        opened: AtomicUsize::new(0),
    });
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let storage = Box::new(FileStorage::new(file, WriteMode::Pwrite));
    let db = Db::open_with_storage_and_fs(&path, storage, compacting(), fs.clone()).unwrap();
    let mut model = Model::new();
    let mut errors = Vec::new();
    let mut round = 0;
    while fs.opened.load(Ordering::SeqCst) == 0 {
        assert!(round < 100, "no background compaction started");
        if let Err(e) = overwrite_all(&db, &mut model, round) {
            errors.push(e.to_string());
        }
        round += 1;
    }
    // The compaction that saw the replacement has ended; later commits must not retry it.
    let _ = db
        .wait_for_compaction()
        .map_err(|e| errors.push(e.to_string()));
    let opened = fs.opened.load(Ordering::SeqCst);
    for r in round..round + 5 {
        let _ = overwrite_all(&db, &mut model, r).map_err(|e| errors.push(e.to_string()));
    }
    assert_eq!(db.compactions(), 0, "the switch went ahead: {errors:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        intruder,
        "the file that replaced the database's path was renamed over"
    );
    assert!(
        errors.iter().any(|e| e.contains("no longer names")),
        "the abandoned switch must say why: {errors:?}"
    );
    assert_eq!(
        fs.opened.load(Ordering::SeqCst),
        opened,
        "a compaction was started again for a path that names another file"
    );
    // The temporary is gone; only the intruder is left under the directory.
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec!["db.larch", "db.larch-lock"]);
    // The handle carries on with its own (now unnamed) file.
    assert_eq!(contents(&db), model);
    db.check().unwrap();
}
