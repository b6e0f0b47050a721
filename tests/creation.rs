//! Creating a database is atomic: the file is written and synced under a temporary name and
//! linked into place, so a process killed at any moment of `Db::open` leaves either no file at
//! the path or a valid empty database (docs/format.md, "Commit protocol").

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use larch::{Db, Options};

const CHILD: &str = "LARCH_CREATE_CHILD";

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
