//! Creating a database is atomic: the file is written and synced under a temporary name and
//! linked into place, so a process killed at any moment of `Db::open` leaves either no file at
//! the path or a valid empty database (docs/format.md, "Creating a database").
//!
//! An existing file of 0 bytes (`touch`, a temporary-file crate) is made a database in place by
//! a read-write open, under the file's lock; a crash during that leaves a file the next
//! read-write open initialises again, and nothing that ever held a commit is taken for one.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use larch::{Db, Error, Options, WriteMode};

const CHILD: &str = "LARCH_CREATE_CHILD";

/// Spawning a child process forks: until it execs, the child holds a copy of every open
/// descriptor, flock locks included, so a test that closes a database and reopens it at that
/// moment would find it locked. Tests that open files take this shared; a spawn, exclusive.
static FORK: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn no_fork() -> std::sync::RwLockReadGuard<'static, ()> {
    FORK.read().unwrap_or_else(|e| e.into_inner())
}

/// The child: create databases one after another, forever, saying which finished.
#[test]
#[ignore = "run by killed_during_creation_leaves_no_file_or_a_valid_empty_database"]
fn child_create_loop() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let page_sizes = [4096, 8192, 16384, 65536];
    for i in 0u64.. {
        let path = Path::new(&dir).join(format!("{i}.larch"));
        let db = Db::open(
            &path,
            Options::default().page_size(page_sizes[i as usize % 4]),
        )
        .unwrap();
        drop(db);
        println!("created {i}");
    }
}

#[test]
fn killed_during_creation_leaves_no_file_or_a_valid_empty_database() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut checked = 0;
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let spawning = FORK.write().unwrap_or_else(|e| e.into_inner());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_create_loop",
                "--nocapture",
                "--include-ignored",
                "--test-threads=1",
            ])
            .env(CHILD, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        drop(spawning);
        // Let it create a random number of files, then kill it wherever it is.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let want = 3 + seed % 40;
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let mut created = 0;
        let start = Instant::now();
        while created < want && start.elapsed() < Duration::from_secs(20) {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if line.starts_with("created ") {
                created += 1;
            }
        }
        // SAFETY (test-only FFI): SIGKILL the child we spawned.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
        child.wait().unwrap();
        assert!(created > 0, "round {round}: the child created nothing");
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with("-lock") {
                // A database's lock file (docs/format.md, "The lock file").
                continue;
            }
            if name.starts_with('.') {
                // A temporary the kill left behind: never at a database's name.
                assert!(name.contains(".creating."), "unexpected file {name}");
                continue;
            }
            let db = Db::open(&path, Options::default().create(false))
                .unwrap_or_else(|e| panic!("round {round}: {name} exists but does not open: {e}"));
            db.check().unwrap();
            let rx = db.begin_read().unwrap();
            assert!(rx.tree_names().unwrap().is_empty(), "{name} is not empty");
            checked += 1;
        }
    }
    assert!(checked >= 8);
}

fn put(db: &Db, k: &[u8], v: &[u8]) {
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(k, v).unwrap();
    tx.commit().unwrap();
}

fn get(db: &Db, k: &[u8]) -> Option<Vec<u8>> {
    let rx = db.begin_read().unwrap();
    let t = match rx.open_tree("t") {
        Ok(t) => t,
        Err(Error::TreeNotFound(_)) => return None,
        Err(e) => panic!("{e}"),
    };
    t.get(k).unwrap().map(|v| v.to_vec())
}

/// Opens `path` read-write, writes, reopens, reads back: a database now, in the same inode.
fn becomes_a_database(path: &Path, opts: Options, what: &str) {
    let ino = std::fs::metadata(path).unwrap().ino();
    let db = Db::open(path, opts).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(db.page_size(), opts.get_page_size(), "{what}");
    assert!(db.begin_read().unwrap().tree_names().unwrap().is_empty());
    put(&db, b"k", what.as_bytes());
    drop(db);
    assert_eq!(
        std::fs::metadata(path).unwrap().ino(),
        ino,
        "{what}: not in place"
    );
    let db = Db::open(path, Options::default().create(false)).unwrap();
    db.check().unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(what.as_bytes()));
}

/// A refused open names the reason and leaves the file as it was.
fn refused(path: &Path, opts: Options, reason: &str) {
    let before = std::fs::read(path).unwrap();
    match Db::open(path, opts) {
        Err(Error::NotADatabase { reason: r, .. }) => assert!(r.contains(reason), "{r}"),
        other => panic!(
            "expected NotADatabase ({reason}), got {:?}",
            other.map(|_| ())
        ),
    }
    assert_eq!(std::fs::read(path).unwrap(), before, "a refused open wrote");
}

#[test]
fn an_empty_file_becomes_a_new_database_on_a_read_write_open() {
    let _serial = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let touched = dir.path().join("touched.larch");
    std::fs::write(&touched, b"").unwrap();
    becomes_a_database(&touched, Options::default(), "touched");

    for (ps, mode) in [(16384, WriteMode::Pwrite), (4096, WriteMode::Mmap)] {
        let tmp = tempfile::NamedTempFile::new_in(dir.path()).unwrap();
        let opts = Options::default().page_size(ps).write_mode(mode);
        becomes_a_database(tmp.path(), opts, &format!("temp file {ps} {mode:?}"));
    }
}

#[test]
fn a_read_only_open_of_an_empty_file_says_there_is_nothing_to_read_and_writes_nothing() {
    let _serial = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.larch");
    std::fs::write(&path, b"").unwrap();
    refused(&path, Options::default().read_only(true), "empty (0 bytes)");
    refused(&path, Options::default().read_only(true), "nothing to read");
    // `create(false)` asks for an existing database: an empty file is none.
    refused(&path, Options::default().create(false), "empty (0 bytes)");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

#[test]
fn a_short_file_that_is_not_empty_stays_not_a_database() {
    let _serial = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.larch");
    for bytes in [vec![0u8], vec![0x5a; 100], vec![0u8; 4096], vec![0u8; 8191]] {
        std::fs::write(&path, &bytes).unwrap();
        refused(&path, Options::default(), "shorter than");
    }
    // Two pages of anything but zeros and the empty meta are not an interrupted start either.
    let mut img = vec![0u8; 8192];
    img[5000] = 1;
    std::fs::write(&path, &img).unwrap();
    refused(&path, Options::default(), "no valid meta");
}

#[test]
fn an_empty_file_reached_through_a_symlink_is_initialised_at_its_target() {
    let _serial = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.larch");
    let link = dir.path().join("link.larch");
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let db = Db::open(&link, Options::default()).unwrap();
    assert_eq!(db.path(), target.canonicalize().unwrap());
    put(&db, b"k", b"v");
    drop(db);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let db = Db::open(&target, Options::default()).unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"v"[..]));
}

/// Several threads open one empty file at once. The lock is taken before the file is judged
/// empty, so exactly the lock holder initialises it: every other open fails as already open or
/// (after the holder closed) opens the database the holder made, and no commit is lost to a
/// second initialisation.
#[test]
fn opens_racing_on_an_empty_file_initialise_it_once_and_lose_no_commit() {
    let _serial = no_fork();
    const THREADS: usize = 6;
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("race.larch");
        std::fs::write(&path, b"").unwrap();
        let start = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    match Db::open(&path, Options::default()) {
                        Ok(db) => {
                            put(&db, &[i as u8], b"v");
                            true
                        }
                        Err(Error::AlreadyOpen { .. }) => false,
                        Err(e) => panic!("round {round} thread {i}: {e}"),
                    }
                })
            })
            .collect();
        let wrote: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(wrote.iter().any(|&w| w), "round {round}: nobody opened it");
        let db = Db::open(&path, Options::default()).unwrap();
        db.check().unwrap();
        for (i, &w) in wrote.iter().enumerate() {
            assert_eq!(
                get(&db, &[i as u8]).is_some(),
                w,
                "round {round} thread {i}"
            );
        }
    }
}

/// What a crash part-way through initialising an empty file can leave (docs/format.md,
/// "Creating a database"): two pages of zeros, then any of the empty meta's bytes written.
/// Each is initialised again by a read-write open and refused, unchanged, by a read-only one.
#[test]
fn an_interrupted_initialisation_is_initialised_again() {
    let _serial = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.larch");
    for ps in [4096usize, 65536] {
        let meta = larch::raw::Meta::empty(ps as u32).encode();
        for written in [0, 1, 8, 12, 16, 64, 124, 127] {
            let mut img = vec![0u8; 2 * ps];
            img[..written].copy_from_slice(&meta[..written]);
            for opts in [Options::default().page_size(ps), Options::default()] {
                std::fs::write(&path, &img).unwrap();
                refused(&path, opts.read_only(true), "interrupted initialisation");
                becomes_a_database(&path, opts, &format!("{ps}-byte pages, {written} bytes"));
            }
        }
        // The whole meta but no more than two pages is simply a new, empty database.
        let mut img = vec![0u8; 2 * ps];
        img[..meta.len()].copy_from_slice(&meta);
        std::fs::write(&path, &img).unwrap();
        let db = Db::open(&path, Options::default().read_only(true)).unwrap();
        assert_eq!(db.page_size(), ps);
    }
}

/// A database that committed has a meta in page 1 or a txid in page 0, so cut to two pages it
/// is refused, not re-initialised over what it held.
#[test]
fn a_database_cut_to_two_pages_is_not_taken_for_an_interrupted_initialisation() {
    let _serial = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.larch");
    let db = Db::open(&path, Options::default()).unwrap();
    for i in 0..3u8 {
        put(&db, &[i], &[i; 100]);
    }
    drop(db);
    let img = std::fs::read(&path).unwrap();
    std::fs::write(&path, &img[..8192]).unwrap();
    refused(&path, Options::default(), "no valid meta");
    // And its first page alone, whatever follows it, is not an empty meta's either.
    let mut one = img[..4096].to_vec();
    one.resize(8192, 0);
    std::fs::write(&path, &one).unwrap();
    refused(&path, Options::default(), "no valid meta");
}
