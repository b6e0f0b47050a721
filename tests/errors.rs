//! `larch::Error` is matched, not read: each way an open or a call can fail has its own
//! variant with the path or page in it, and an I/O failure keeps the system's error as its
//! `source()`. Locking across processes is in crates/cli/tests/cli.rs (the CLI runs as another
//! process); disk full in tests/faults.rs.

use std::error::Error as _;
use std::io;
use std::path::Path;

use larch::{Db, Error, Options};

const PS: usize = 4096;

fn fresh(path: &Path) -> Db {
    let db = Db::open(path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"k", b"v").unwrap();
    tx.commit().unwrap();
    db
}

#[test]
fn the_error_can_cross_threads_and_box_into_dyn_error() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<Error>();
    let _boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(Error::EmptyKey);
}

#[test]
fn a_second_open_in_the_same_process_is_already_open_with_the_resolved_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.larch");
    let db = fresh(&path);
    for opts in [Options::default(), Options::default().read_only(true)] {
        match Db::open(&path, opts) {
            Err(Error::AlreadyOpen { path: p }) => assert_eq!(p, db.path()),
            other => panic!("expected AlreadyOpen, got {:?}", other.map(|_| ())),
        }
    }
    drop(db);
    let ro = Db::open(&path, Options::default().read_only(true)).unwrap();
    match Db::open(&path, Options::default()) {
        Err(e @ Error::AlreadyOpen { .. }) => {
            assert!(e.to_string().contains("already open"), "{e}");
            assert!(e.source().is_none());
        }
        other => panic!("a writer beside a reader: {:?}", other.map(|_| ())),
    }
    drop(ro);
}

#[test]
fn a_write_on_a_read_only_handle_is_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.larch");
    drop(fresh(&path));
    let db = Db::open(&path, Options::default().read_only(true)).unwrap();
    assert!(matches!(db.begin_write(), Err(Error::ReadOnly { .. })));
}

#[test]
fn a_missing_directory_is_io_with_kind_not_found_and_the_io_error_as_source() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("a.larch");
    let e = Db::open(&path, Options::default()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert_eq!(e.io_kind(), Some(io::ErrorKind::NotFound));
    let source = e.source().expect("an I/O error has a source");
    let io = source
        .downcast_ref::<io::Error>()
        .expect("the source is the io::Error");
    assert_eq!(io.kind(), io::ErrorKind::NotFound);
    assert!(!e.is_disk_full());
    assert!(e.to_string().contains("no-such-dir"), "{e}");
}

#[test]
fn a_missing_file_with_create_off_is_io_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.larch");
    for opts in [
        Options::default().create(false),
        Options::default().read_only(true),
    ] {
        let e = Db::open(&path, opts).unwrap_err();
        assert_eq!(e.io_kind(), Some(io::ErrorKind::NotFound), "{e:?}");
    }
}

#[test]
fn a_file_that_is_not_a_database_is_not_a_database_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("text.larch");
    std::fs::write(&path, "not a database\n".repeat(1000)).unwrap();
    match Db::open(&path, Options::default()) {
        Err(Error::NotADatabase { path: p, reason }) => {
            assert_eq!(p, path.canonicalize().unwrap());
            assert!(reason.contains("no valid meta"), "{reason}");
        }
        other => panic!("expected NotADatabase, got {:?}", other.map(|_| ())),
    }
}

/// crc32 (IEEE), as the meta's checksum uses it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[test]
fn a_file_of_another_format_version_is_unsupported_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.larch");
    {
        // Two commits: both meta slots hold a meta.
        let db = fresh(&path);
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"k2", b"v").unwrap();
        tx.commit().unwrap();
    }
    let mut img = std::fs::read(&path).unwrap();
    // What a later larch would write: version 3 in both metas, checksums that match.
    for slot in 0..2 {
        let m = &mut img[slot * PS..slot * PS + 128];
        m[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32(&m[..124]);
        m[124..128].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(&path, &img).unwrap();
    for opts in [Options::default(), Options::default().read_only(true)] {
        match Db::open(&path, opts) {
            Err(e @ Error::UnsupportedVersion { .. }) => {
                let Error::UnsupportedVersion {
                    found, supported, ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!((found, supported), (3, 2));
                assert!(e.to_string().contains("format version 3"), "{e}");
            }
            other => panic!("expected UnsupportedVersion, got {:?}", other.map(|_| ())),
        }
    }
    assert_eq!(std::fs::read(&path).unwrap(), img, "a refused open wrote");
}

#[test]
fn a_page_size_that_cannot_be_is_an_invalid_option_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ps.larch");
    match Db::open(&path, Options::default().page_size(3000)) {
        Err(Error::InvalidOption(why)) => assert!(why.contains("3000"), "{why}"),
        other => panic!("expected InvalidOption, got {:?}", other.map(|_| ())),
    }
    assert!(!path.exists(), "a refused open created the file");
}

#[test]
fn tree_and_key_errors_are_their_own_variants() {
    let dir = tempfile::tempdir().unwrap();
    let db = fresh(&dir.path().join("k.larch"));
    let rx = db.begin_read().unwrap();
    assert!(matches!(rx.open_tree("nope"), Err(Error::TreeNotFound(n)) if n == "nope"));
    drop(rx);
    let tx = db.begin_write().unwrap();
    let mut t = tx.open_tree("t").unwrap();
    assert!(matches!(t.insert(b"", b"v"), Err(Error::EmptyKey)));
    let long = vec![b'k'; PS];
    assert!(matches!(
        t.insert(&long, b"v"),
        Err(Error::KeyTooLarge { len, max }) if len == PS && max < PS
    ));
}
