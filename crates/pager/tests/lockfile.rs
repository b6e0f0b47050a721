//! The lock file across real processes (issue 15): this test binary re-executes itself with
//! `LARCH_LOCKFILE_CHILD` naming a role ([`child`]), so readers, writers and attachers live in
//! processes the parent can SIGKILL.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use larch_pager::{lock_path, LockFile, LockFileError};

const ROLE: &str = "LARCH_LOCKFILE_CHILD";

/// The child side: does nothing in a normal test run; in a re-executed child, plays the role
/// `LARCH_LOCKFILE_CHILD` names, announcing itself on stdout with lines starting "LARCH:",
/// and (where it holds something) holds it until its stdin closes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let db = PathBuf::from(std::env::var("LARCH_DB").unwrap());
    let lf = LockFile::open(&db, false).unwrap();
    let wait_stdin = || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    };
    let say = |s: &str| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "LARCH:{s}").unwrap();
        out.flush().unwrap();
    };
    match role.as_str() {
        "readers" => {
            let txids: Vec<u64> = std::env::var("LARCH_TXIDS")
                .unwrap()
                .split(',')
                .map(|t| t.parse().unwrap())
                .collect();
            let slots: Vec<_> = txids
                .iter()
                .map(|&t| {
                    let s = lf.claim_slot().unwrap();
                    s.begin(t);
                    s
                })
                .collect();
            say("ready");
            wait_stdin();
            drop(slots);
        }
        "writer" => {
            let g = lf.lock_writer().unwrap();
            say("ready");
            wait_stdin();
            drop(g);
        }
        "try_writer" => {
            let got = lf.try_lock_writer().unwrap().is_some();
            say(if got { "got" } else { "busy" });
        }
        "churn" => {
            // Claim, publish, check, release, over and over, while the parent clears stale
            // slots and kills other churners: a live slot must never be cleared under us.
            let me = std::process::id() as u64;
            let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
            let mut rounds = 0u64;
            say("ready");
            while std::time::Instant::now() < until {
                let slots: Vec<_> = (0..3).map(|_| lf.claim_slot().unwrap()).collect();
                for (i, s) in slots.iter().enumerate() {
                    s.begin(me * 10 + i as u64);
                }
                for (i, s) in slots.iter().enumerate() {
                    assert_eq!(
                        s.txid(),
                        Some(me * 10 + i as u64),
                        "slot cleared under a live reader"
                    );
                }
                rounds += 1;
            }
            say(&format!("done {rounds}"));
        }
        "attach" => {
            say("ready");
            wait_stdin();
        }
        other => panic!("unknown role {other}"),
    }
}

struct Proc {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(db: &Path, role: &str, txids: &str) -> Proc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(ROLE, role)
            .env("LARCH_DB", db)
            .env("LARCH_TXIDS", txids)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Proc { child, out }
    }

    /// The child's next "LARCH:" line (the test harness prints lines of its own).
    fn line(&mut self) -> String {
        let mut l = String::new();
        loop {
            l.clear();
            let n = self.out.read_line(&mut l).unwrap();
            assert!(n > 0, "child exited before saying anything");
            if let Some(s) = l.trim_end().strip_prefix("LARCH:") {
                return s.to_string();
            }
        }
    }

    fn ready(db: &Path, role: &str, txids: &str) -> Proc {
        let mut p = Proc::spawn(db, role, txids);
        assert_eq!(p.line(), "ready");
        p
    }

    /// Close its stdin: it lets go of what it holds and exits cleanly.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }

    /// SIGKILL it and reap it (so the kernel has closed its files, and dropped its locks).
    fn kill(mut self) {
        // SAFETY: kill(2) on our own child's pid, which is not yet reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0);
        let _ = self.child.wait().unwrap();
    }
}

fn say_once(db: &Path, role: &str) -> String {
    let mut p = Proc::spawn(db, role, "");
    let s = p.line();
    assert!(p.child.wait().unwrap().success());
    s
}

fn new_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::write(&db, b"").unwrap();
    (dir, db)
}

#[test]
fn parent_sees_the_oldest_reader_of_every_process() {
    let (_dir, db) = new_db();
    let lf = LockFile::open(&db, true).unwrap();
    let a = Proc::ready(&db, "readers", "10,12");
    let b = Proc::ready(&db, "readers", "7");
    let c = Proc::ready(&db, "readers", "20");
    assert_eq!(lf.oldest_reader(), Some(7));
    assert_eq!(lf.attached_processes().unwrap(), 4);
    let readers = lf.readers().unwrap();
    assert_eq!(readers.len(), 4);
    assert!(readers.iter().all(|r| r.alive && !r.ours));
    assert_eq!(lf.clear_stale().unwrap(), 0, "every owner is alive");

    b.finish();
    assert_eq!(lf.oldest_reader(), Some(10), "a clean exit frees its slots");
    assert_eq!(lf.attached_processes().unwrap(), 3);
    a.finish();
    assert_eq!(lf.oldest_reader(), Some(20));
    c.finish();
    assert_eq!(lf.oldest_reader(), None);
    assert_eq!(lf.attached_processes().unwrap(), 1);
}

#[test]
fn killed_readers_are_cleared_and_live_ones_kept() {
    let (_dir, db) = new_db();
    let lf = LockFile::open(&db, true).unwrap();
    let dead = Proc::ready(&db, "readers", "3,4");
    let live = Proc::ready(&db, "readers", "5");
    let dead_pid = dead.child.id();
    dead.kill();

    // Until cleared, the dead process's snapshots still pin pages (the safe side).
    assert_eq!(lf.oldest_reader(), Some(3));
    let readers = lf.readers().unwrap();
    let (gone, alive): (Vec<_>, Vec<_>) = readers.iter().partition(|r| r.pid == dead_pid);
    assert_eq!(gone.len(), 2);
    assert!(gone.iter().all(|r| !r.alive));
    assert_eq!(alive.len(), 1);
    assert!(alive[0].alive);
    assert_eq!(
        lf.attached_processes().unwrap(),
        2,
        "parent and the live reader"
    );

    assert_eq!(lf.clear_stale().unwrap(), 2);
    assert_eq!(lf.oldest_reader(), Some(5));
    assert_eq!(lf.clear_stale().unwrap(), 0);
    assert_eq!(lf.readers().unwrap().len(), 1);

    // The freed slots are claimable again; the live reader is untouched.
    let mine = lf.claim_slot().unwrap();
    mine.begin(9);
    assert_eq!(lf.oldest_reader(), Some(5));
    live.finish();
    assert_eq!(lf.oldest_reader(), Some(9));
}

#[test]
fn writer_lock_is_exclusive_across_processes_and_dies_with_its_holder() {
    let (_dir, db) = new_db();
    let lf = LockFile::open(&db, true).unwrap();
    let w = Proc::ready(&db, "writer", "");
    assert!(lf.try_lock_writer().unwrap().is_none());
    assert_eq!(say_once(&db, "try_writer"), "busy");
    w.kill();
    let g = lf
        .try_lock_writer()
        .unwrap()
        .expect("released by the holder's death");
    assert_eq!(say_once(&db, "try_writer"), "busy");
    drop(g);
    assert_eq!(say_once(&db, "try_writer"), "got");

    // A clean release too.
    let w = Proc::ready(&db, "writer", "");
    assert!(lf.try_lock_writer().unwrap().is_none());
    w.finish();
    assert!(lf.try_lock_writer().unwrap().is_some());
}

#[test]
fn clearing_races_claiming_without_freeing_live_slots() {
    let (_dir, db) = new_db();
    let lf = LockFile::open(&db, true).unwrap();
    let mut churners: Vec<Proc> = (0..3).map(|_| Proc::ready(&db, "churn", "")).collect();
    let victim = Proc::ready(&db, "readers", "1,2,3");
    let start = std::time::Instant::now();
    let mut cleared = 0;
    let mut killed = Some(victim);
    while start.elapsed() < std::time::Duration::from_millis(250) {
        cleared += lf.clear_stale().unwrap();
        if start.elapsed() > std::time::Duration::from_millis(50) {
            if let Some(v) = killed.take() {
                v.kill();
            }
        }
    }
    for mut c in churners.drain(..) {
        let line = c.line();
        assert!(line.starts_with("done "), "{line}");
        let rounds: u64 = line[5..].parse().unwrap();
        assert!(rounds > 0);
        assert!(c.child.wait().unwrap().success());
    }
    cleared += lf.clear_stale().unwrap();
    assert_eq!(cleared, 3, "exactly the killed reader's slots");
    assert_eq!(lf.oldest_reader(), None);
    assert_eq!(lf.readers().unwrap().len(), 0);
}

fn write_lock_file(db: &Path, bytes: &[u8]) {
    std::fs::write(lock_path(db), bytes).unwrap();
}

/// `LockFile::open` of a lock file no process has attached. A child that another test of this
/// binary spawns holds this process's open file descriptions, and with them their attach
/// locks, from its fork until its exec (the fork caveat, docs/format.md "Locking"): just
/// after this test drops a `LockFile`, the file may look attached for that moment. So an open
/// that finds it attached is tried again, for up to 2 s; a lock that stays longer is a failure.
fn open_detached(db: &Path, create: bool) -> Result<LockFile, LockFileError> {
    let start = std::time::Instant::now();
    loop {
        let r = LockFile::open(db, create);
        let attached = matches!(r, Err(LockFileError::Invalid { attached: true, .. }));
        if !attached || start.elapsed() > std::time::Duration::from_secs(2) {
            return r;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn invalid(r: Result<LockFile, LockFileError>, attached: bool) {
    match r {
        Err(LockFileError::Invalid { attached: a, .. }) => assert_eq!(a, attached),
        other => panic!("expected Invalid (attached {attached}), got {other:?}"),
    }
}

#[test]
fn bad_lock_files_give_errors_not_crashes() {
    let (_dir, db) = new_db();

    // Short, empty, garbage: an error without create, a fresh table with it.
    for bytes in [&b"larch"[..], &[][..], &[0xa5u8; 4096][..]] {
        write_lock_file(&db, bytes);
        invalid(open_detached(&db, false), false);
        let lf = open_detached(&db, true).unwrap();
        assert!(lf.initialised());
        drop(lf);
    }

    // A valid file, then its version changed.
    drop(LockFile::open(&db, true).unwrap());
    let path = lock_path(&db);
    let good = std::fs::read(&path).unwrap();
    let mut v = good.clone();
    v[8..12].copy_from_slice(&99u32.to_ne_bytes());
    write_lock_file(&db, &v);
    match LockFile::open(&db, false) {
        Err(LockFileError::UnsupportedVersion { found: 99, .. }) => {}
        other => panic!("{other:?}"),
    }

    // Cut short or extended: the header no longer describes the file (no SIGBUS either way).
    write_lock_file(&db, &good[..good.len() - 64]);
    invalid(open_detached(&db, false), false);
    write_lock_file(&db, &good[..200]);
    invalid(open_detached(&db, false), false);
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 4096]);
    write_lock_file(&db, &longer);
    invalid(open_detached(&db, false), false);

    // A header promising a huge table over a short file.
    let mut huge = good[..128].to_vec();
    huge[16..20].copy_from_slice(&60000u32.to_ne_bytes());
    let size = 128u64 + (60000 + 126) * 64;
    huge[24..32].copy_from_slice(&size.to_ne_bytes());
    write_lock_file(&db, &huge);
    invalid(open_detached(&db, false), false);

    // Garbage while another process is attached: left alone even with create.
    write_lock_file(&db, &good);
    let holder = Proc::ready(&db, "attach", "");
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"garbage!", 0).unwrap();
    invalid(LockFile::open(&db, true), true);
    holder.kill();
    // Nobody attached now: re-initialised.
    assert!(open_detached(&db, true).unwrap().initialised());
}

#[test]
fn deleting_the_lock_file_while_detached_loses_nothing() {
    let (_dir, db) = new_db();
    drop(LockFile::open(&db, true).unwrap());
    std::fs::remove_file(lock_path(&db)).unwrap();
    invalid_or_missing(LockFile::open(&db, false));
    let lf = LockFile::open(&db, true).unwrap();
    assert!(lf.initialised());
    assert_eq!(
        lf.committed_txid(),
        None,
        "the engine republishes from the data file"
    );
}

fn invalid_or_missing(r: Result<LockFile, LockFileError>) {
    assert!(matches!(r, Err(LockFileError::Missing { .. })), "{r:?}");
}

#[test]
fn a_lock_file_this_process_cannot_write_is_a_clear_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipped: root may write any file");
        return;
    }
    let (_dir, db) = new_db();
    drop(LockFile::open(&db, true).unwrap());
    let path = lock_path(&db);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o444)).unwrap();
    match LockFile::open(&db, false) {
        Err(LockFileError::NotWritable { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_lock_file_takes_the_database_permissions() {
    let (_dir, db) = new_db();
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    drop(LockFile::open(&db, true).unwrap());
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(lock_path(&db)).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o640);
}
