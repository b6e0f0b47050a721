//! Several processes on one file (docs/format.md, "Several processes"): real child processes
//! read and write the same database as the test.
//!
//! The children are this test binary itself, re-executed to run the ignored test `child`,
//! which does nothing unless `LARCH_MP_ROLE` names a role. Children print one word per step
//! on stdout (`held 7`, `verified`, `done`); the parent waits for those words and kills
//! children with SIGKILL where the test says so. `LARCH_MP_ROUNDS` scales the long tests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use larch::{Db, Durability, Error, Options};
use larch_testkit::{file_storage, Rng};

const ACCOUNTS: u64 = 100;
const START_BALANCE: u64 = 1_000;
const TOTAL: u64 = ACCOUNTS * START_BALANCE;

fn rounds() -> u64 {
    std::env::var("LARCH_MP_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Forks copy every descriptor until the child execs; spawning one child at a time keeps a
/// lock held by a closing handle of another test from lingering in a half-born child.
static SPAWN: Mutex<()> = Mutex::new(());

struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    role: String,
}

fn spawn(role: &str, db: &Path, env: &[(&str, String)]) -> Kid {
    let _g = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child", "--nocapture", "--include-ignored"])
        .env("LARCH_MP_ROLE", role)
        .env("LARCH_MP_DB", db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn child");
    let stdin = child.stdin.take();
    let out = BufReader::new(child.stdout.take().unwrap());
    Kid {
        child,
        stdin,
        out,
        role: role.to_string(),
    }
}

impl Kid {
    /// The next line the child prints that starts with `word`; panics if it exits first.
    fn expect(&mut self, word: &str) -> String {
        self.expect_any(&[word])
    }

    /// The next line the child prints that starts with any of `words`.
    fn expect_any(&mut self, words: &[&str]) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.out.read_line(&mut line).unwrap();
            assert!(
                n > 0,
                "child {} exited before printing a line starting with any of {words:?}: {:?}",
                self.role,
                self.child.wait()
            );
            if words.iter().any(|w| line.starts_with(w)) {
                return line.trim().to_string();
            }
        }
    }

    fn say(&mut self, line: &str) {
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{line}").unwrap();
        w.flush().unwrap();
    }

    fn kill(mut self) {
        // Child::kill sends SIGKILL on Unix.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_ok(mut self) {
        drop(self.stdin.take());
        let st = self.child.wait().unwrap();
        assert!(st.success(), "child {} failed: {st:?}", self.role);
    }
}

/// A scratch directory (removed when dropped) and a database path in it.
fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = larch_testkit::scratch_dir();
    let path = dir.path().join(format!("{name}.larch"));
    (dir, path)
}

fn account(i: u64) -> Vec<u8> {
    format!("acct-{i:04}").into_bytes()
}

fn balances(db: &Db) -> BTreeMap<Vec<u8>, u64> {
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("bank").unwrap();
    t.iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.to_vec(), u64::from_le_bytes(v.try_into().unwrap()))
        })
        .collect()
}

fn new_bank(path: &Path) -> Db {
    let db = Db::open(path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("bank").unwrap();
        for i in 0..ACCOUNTS {
            t.insert(&account(i), &START_BALANCE.to_le_bytes()).unwrap();
        }
    }
    tx.commit().unwrap();
    db
}

fn durability_of(s: &str) -> Durability {
    Durability::from_name(s).unwrap_or(Durability::Sync)
}

/// One transfer (and, every few, a large value rewritten so pages are freed and reused).
fn transfer(db: &Db, rng: &mut Rng, n: u64) {
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("bank").unwrap();
        let a = rng.below(ACCOUNTS);
        let b = rng.below(ACCOUNTS);
        let ka = account(a);
        let kb = account(b);
        let va = u64::from_le_bytes(t.get(&ka).unwrap().unwrap().try_into().unwrap());
        let amount = rng.below(va + 1);
        t.insert(&ka, &(va - amount).to_le_bytes()).unwrap();
        let vb = u64::from_le_bytes(t.get(&kb).unwrap().unwrap().try_into().unwrap());
        t.insert(&kb, &(vb + amount).to_le_bytes()).unwrap();
    }
    if n % 4 == 0 {
        let mut pad = tx.open_tree("pad").unwrap();
        pad.insert(b"big", &vec![n as u8; 9000]).unwrap();
        pad.insert(&(n % 64).to_be_bytes(), &vec![1u8; 300])
            .unwrap();
    }
    tx.commit().unwrap();
}

/// The child processes' body.
#[test]
#[ignore = "run by the other tests of this file as a child process"]
fn child() {
    let Ok(role) = std::env::var("LARCH_MP_ROLE") else {
        return;
    };
    let path = PathBuf::from(std::env::var("LARCH_MP_DB").unwrap());
    let env_u64 = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let dur = durability_of(&std::env::var("LARCH_MP_DUR").unwrap_or_default());
    match role.as_str() {
        "bank_writer" => {
            // Transfers until told to stop (a line on stdin), at least LARCH_MP_N of them.
            let db = Db::open(&path, Options::default().durability(dur)).unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = stop.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                s.store(true, std::sync::atomic::Ordering::Release);
            });
            let mut rng = Rng(env_u64("LARCH_MP_SEED", 1));
            let min = env_u64("LARCH_MP_N", 1000);
            let mut n = 0;
            while n < min || !stop.load(std::sync::atomic::Ordering::Acquire) {
                transfer(&db, &mut rng, n);
                if dur == Durability::Async && n % 16 == 15 {
                    db.sync().unwrap();
                }
                n += 1;
            }
            db.sync().unwrap();
            println!("done {n}");
        }
        "bank_reader" => {
            let db = Db::open(
                &path,
                Options::default().read_only(true).verify_checksums(true),
            )
            .unwrap();
            let mut txids = std::collections::BTreeSet::new();
            let mut reads = 0u64;
            println!("ready");
            loop {
                let rx = db.begin_read().unwrap();
                let t = rx.open_tree("bank").unwrap();
                let mut sum = 0;
                let mut n = 0;
                for e in t.iter().unwrap() {
                    let (_, v) = e.unwrap();
                    sum += u64::from_le_bytes(v.try_into().unwrap());
                    n += 1;
                }
                assert_eq!((n, sum), (ACCOUNTS, TOTAL), "snapshot {}", rx.txid());
                if let Ok(pad) = rx.open_tree("pad") {
                    if let Some(v) = pad.get(b"big").unwrap() {
                        assert!(v.iter().all(|&b| b == v[0]), "a torn value");
                    }
                }
                txids.insert(rx.txid());
                reads += 1;
                let stop = rx
                    .open_tree("ctl")
                    .ok()
                    .is_some_and(|c| c.get(b"stop").unwrap().is_some());
                if stop {
                    break;
                }
            }
            println!("reads {reads} snapshots {}", txids.len());
        }
        "hold" => {
            // Hold one snapshot; on "verify" check it is still round 0; on "latest" read the
            // newest commit and print what it holds. Small map reservations: the file's growth
            // by the writer makes this process map it again.
            larch::set_min_map_reservation(1 << 20);
            let db = Db::open(
                &path,
                Options::default().read_only(true).verify_checksums(true),
            )
            .unwrap();
            let rx = db.begin_read().unwrap();
            let expect: Vec<(Vec<u8>, Vec<u8>)> = rx
                .open_tree("t")
                .unwrap()
                .iter()
                .unwrap()
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            println!("held {}", rx.txid());
            let mut lines = std::io::stdin().lock().lines();
            while let Some(Ok(cmd)) = lines.next() {
                match cmd.as_str() {
                    "verify" => {
                        let t = rx.open_tree("t").unwrap();
                        let now: Vec<(Vec<u8>, Vec<u8>)> = t
                            .iter()
                            .unwrap()
                            .map(|e| {
                                let (k, v) = e.unwrap();
                                (k.to_vec(), v.to_vec())
                            })
                            .collect();
                        assert!(now == expect, "the held snapshot changed under the reader");
                        println!("verified {}", now.len());
                    }
                    "latest" => {
                        let r = db.begin_read().unwrap();
                        let t = r.open_tree("t").unwrap();
                        let mut n = 0;
                        let mut bytes = 0;
                        for e in t.iter().unwrap() {
                            let (_, v) = e.unwrap();
                            n += 1;
                            bytes += v.len();
                        }
                        println!("latest {} {n} {bytes}", r.txid());
                    }
                    _ => {}
                }
            }
        }
        "write_and_hang" => {
            let db = Db::open(&path, Options::default()).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in 0..500u32 {
                    t.insert(&i.to_be_bytes(), &vec![7u8; 5000]).unwrap();
                }
            }
            println!("inside");
            std::thread::sleep(Duration::from_secs(120));
        }
        "alternate" => {
            // LARCH_MP_CAP: at most that many free-map bits carried past a commit.
            let opts = match std::env::var("LARCH_MP_CAP") {
                Ok(bits) => Options::default().carried_max_bits(bits.parse().unwrap()),
                Err(_) => Options::default(),
            };
            let db = Db::open(&path, opts.durability(dur)).unwrap();
            let id = env_u64("LARCH_MP_ID", 0);
            println!("ready");
            for i in 0..env_u64("LARCH_MP_N", 100) {
                let tx = db.begin_write().unwrap();
                {
                    let mut t = tx.open_tree("t").unwrap();
                    let n = t
                        .get(b"counter")
                        .unwrap()
                        .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                    t.insert(b"counter", &(n + 1).to_le_bytes()).unwrap();
                    t.insert(format!("w{id}-{i:05}").as_bytes(), &vec![id as u8; 700])
                        .unwrap();
                }
                tx.commit().unwrap();
                if dur == Durability::Async && i % 10 == 9 {
                    db.sync().unwrap();
                }
            }
            db.sync().unwrap();
            println!("done");
        }
        "get" => {
            let db = Db::open(&path, Options::default().read_only(true)).unwrap();
            let rx = db.begin_read().unwrap();
            let v = rx
                .open_tree("t")
                .ok()
                .and_then(|t| t.get(b"k").unwrap().map(|v| v.to_vec()));
            match v {
                Some(v) => println!("value {}", String::from_utf8_lossy(&v)),
                None => println!("value none"),
            }
        }
        "try_write" => {
            // Open read-write; once told, try to begin a write transaction.
            match Db::open(&path, Options::default()) {
                Err(e) => println!("refused {e}"),
                Ok(db) => {
                    println!("opened");
                    let mut line = String::new();
                    let _ = std::io::stdin().read_line(&mut line);
                    match db.try_begin_write() {
                        Ok(_) => println!("writing"),
                        Err(Error::WriterBusy { .. }) => println!("busy"),
                        Err(e) => println!("refused {e}"),
                    }
                }
            }
        }
        "overwrite" => {
            // Open read-write; on "go" (or at once with LARCH_MP_NOW) overwrite every value of
            // tree "t" (keys 0..LARCH_MP_KEYS, default 200) with LARCH_MP_BYTE under
            // LARCH_MP_DUR, then wait to be killed. LARCH_MP_CAP: at most that many free-map
            // bits carried past a commit.
            let opts = match std::env::var("LARCH_MP_CAP") {
                Ok(bits) => Options::default().carried_max_bits(bits.parse().unwrap()),
                Err(_) => Options::default(),
            };
            let db = Db::open(&path, opts).unwrap();
            let byte = env_u64("LARCH_MP_BYTE", b'x' as u64) as u8;
            let keys = env_u64("LARCH_MP_KEYS", 200) as u32;
            println!("ready");
            if std::env::var("LARCH_MP_NOW").is_err() {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
            }
            let mut tx = db.begin_write().unwrap();
            tx.set_durability(dur);
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in 0..keys {
                    t.insert(&i.to_be_bytes(), &[byte; 500]).unwrap();
                }
            }
            tx.commit().unwrap();
            println!("committed");
            std::thread::sleep(Duration::from_secs(120));
        }
        "behind_writer" => {
            // Commits 1, 2, ... of `behind_commit` until told to stop (a line on stdin),
            // printing `ack <n>` after each, and every 150 compacts the file in place (its
            // rounds save the free map); with LARCH_MP_CAP carrying at most that many free-map
            // bits past a commit. Then closes and prints `closed <n>`.
            let opts = match std::env::var("LARCH_MP_CAP") {
                Ok(bits) => Options::default().carried_max_bits(bits.parse().unwrap()),
                Err(_) => Options::default(),
            };
            let db = Db::open(&path, opts).unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = stop.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                s.store(true, std::sync::atomic::Ordering::Release);
            });
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                n += 1;
                behind_commit(&db, n);
                if n % 150 == 0 {
                    db.compact().unwrap();
                }
                println!("ack {n}");
            }
            drop(db);
            println!("closed {n}");
        }
        "two_commits" => {
            // Commit k = "old"; on a line from stdin commit k = "new"; wait to be killed (no
            // clean close).
            let db = Db::open(&path, Options::default()).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_tree("t").unwrap().insert(b"k", b"old").unwrap();
            tx.commit().unwrap();
            println!("one {}", db.begin_read().unwrap().txid());
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            let tx = db.begin_write().unwrap();
            tx.open_tree("t").unwrap().insert(b"k", b"new").unwrap();
            tx.commit().unwrap();
            println!("two {}", db.begin_read().unwrap().txid());
            std::thread::sleep(Duration::from_secs(120));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn bank_transfers_stay_consistent_in_reader_processes_killed_at_random() {
    let (_dir, path) = scratch("bank");
    let db = new_bank(&path);
    let mut writer = spawn(
        "bank_writer",
        &path,
        &[
            ("LARCH_MP_N", "500".into()),
            ("LARCH_MP_DUR", "sync".into()),
        ],
    );
    let mut readers: Vec<Kid> = (0..3).map(|_| spawn("bank_reader", &path, &[])).collect();
    for r in &mut readers {
        r.expect("ready");
    }
    let mut rng = Rng(7);
    // Kill a reader now and then while the writer runs, and start another.
    for _ in 0..8 * rounds() {
        std::thread::sleep(Duration::from_millis(20 + rng.below(60)));
        let i = rng.below(readers.len() as u64) as usize;
        let victim = readers.swap_remove(i);
        victim.kill();
        let mut r = spawn("bank_reader", &path, &[]);
        r.expect("ready");
        readers.push(r);
    }
    writer.say("stop");
    let done = writer.expect("done");
    writer.wait_ok();
    let commits: u64 = done.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(commits >= 500, "{done}");
    // This process reads the same invariant.
    let b = balances(&db);
    assert_eq!(b.len() as u64, ACCOUNTS);
    assert_eq!(b.values().sum::<u64>(), TOTAL);
    // Stop the live readers; each must have seen several snapshots, all consistent.
    let tx = db.begin_write().unwrap();
    tx.open_tree("ctl").unwrap().insert(b"stop", b"1").unwrap();
    tx.commit().unwrap();
    for mut r in readers {
        let line = r.expect("reads");
        let reads: u64 = line.split(' ').nth(1).unwrap().parse().unwrap();
        assert!(reads > 0, "{line}");
        r.wait_ok();
    }
    // Killed readers left slots with old snapshots: this writer clears them and reuses the
    // pages; the file stops growing.
    let mut rng = Rng(99);
    for i in 0..300 {
        transfer(&db, &mut rng, i);
    }
    let len_before = std::fs::metadata(&path).unwrap().len();
    for i in 300..1500 {
        transfer(&db, &mut rng, i);
    }
    let len_after = std::fs::metadata(&path).unwrap().len();
    assert!(
        len_after <= len_before + (1 << 20),
        "the file kept growing after the readers died: {len_before} -> {len_after}"
    );
    assert!(
        larch::readers(&path).unwrap().iter().all(|r| r.alive),
        "dead readers' slots were not cleared"
    );
    db.check().unwrap();
    let b = balances(&db);
    assert_eq!(b.values().sum::<u64>(), TOTAL);
}

#[test]
fn a_reader_process_keeps_its_snapshot_across_overwrites_growth_and_compaction() {
    let (_dir, path) = scratch("hold");
    let db = Db::open(&path, Options::default()).unwrap();
    let value = |round: u8, i: u32| vec![round.wrapping_add(i as u8); 1000];
    let write_round = |round: u8| {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..200u32 {
                t.insert(&i.to_be_bytes(), &value(round, i)).unwrap();
            }
        }
        tx.commit().unwrap();
    };
    write_round(0);
    let mut kid = spawn("hold", &path, &[]);
    let held: u64 = kid
        .expect("held")
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(held, db.begin_read().unwrap().txid());
    for round in 1..=5 {
        write_round(round);
    }
    assert_eq!(kid.say_and("verify", "verified"), "verified 200");
    // Grow the file well past the reader's first map reservation (1 MiB there).
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 1000..5000u32 {
            t.insert(&i.to_be_bytes(), &vec![3u8; 4000]).unwrap();
        }
    }
    tx.commit().unwrap();
    let newest = db.begin_read().unwrap().txid();
    let latest = kid.say_and("latest", "latest");
    assert_eq!(
        latest,
        format!("latest {newest} 4200 {}", 200 * 1000 + 4000 * 4000)
    );
    assert_eq!(kid.say_and("verify", "verified"), "verified 200");
    // Delete most of it and compact in place while the old snapshot is held.
    let tx = db.begin_write().unwrap();
    tx.open_tree("t")
        .unwrap()
        .remove_range(&1000u32.to_be_bytes()[..]..)
        .unwrap();
    tx.commit().unwrap();
    db.compact().unwrap();
    assert_eq!(kid.say_and("verify", "verified"), "verified 200");
    let newest = db.begin_read().unwrap().txid();
    assert_eq!(
        kid.say_and("latest", "latest"),
        format!("latest {newest} 200 200000")
    );
    let len_held = std::fs::metadata(&path).unwrap().len();
    kid.kill();
    // With the reader gone (dead, its slot cleared by the writer), compaction can move
    // everything the old snapshot pinned.
    db.compact().unwrap();
    let len_free = std::fs::metadata(&path).unwrap().len();
    assert!(
        len_free < len_held,
        "compaction after the reader died freed nothing: {len_held} -> {len_free}"
    );
    db.check().unwrap();
}

impl Kid {
    fn say_and(&mut self, cmd: &str, word: &str) -> String {
        self.say(cmd);
        self.expect(word)
    }
}

#[test]
fn a_writer_process_killed_inside_its_transaction_releases_the_lock_and_its_pages() {
    let (_dir, path) = scratch("killed-writer");
    let db = Db::open(&path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"before", b"1").unwrap();
    tx.commit().unwrap();
    let len0 = std::fs::metadata(&path).unwrap().len();
    for round in 0..3 {
        let mut kid = spawn("write_and_hang", &path, &[]);
        kid.expect("inside");
        // The child holds the write transaction: this process may read but not write.
        assert!(matches!(
            db.try_begin_write(),
            Err(Error::WriterBusy { .. })
        ));
        assert_eq!(
            db.begin_read()
                .unwrap()
                .open_tree("t")
                .unwrap()
                .get(b"before")
                .unwrap(),
            Some(&b"1"[..])
        );
        kid.kill();
        // The lock died with it; nothing it wrote is visible, and its pages are free again.
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            assert_eq!(t.len().unwrap(), 1 + round);
            t.insert(format!("after{round}").as_bytes(), b"2").unwrap();
        }
        tx.commit().unwrap();
    }
    db.check().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    // Each child wrote ~2.5 MB of overflow values past the end; the file may have grown for
    // the first, but the later ones reuse that space (or it is trimmed).
    assert!(
        len < len0 + (8 << 20),
        "uncommitted pages of dead writers were never reused: {len0} -> {len}"
    );
}

#[test]
fn two_writer_processes_alternate_under_every_durability() {
    two_writer_processes_alternate_with(None);
}

/// The same with commits that save the free map every commit or two: each process's rebuild
/// after the other's commits meets metas of both kinds (docs/format.md, "A free map behind
/// its meta").
#[test]
fn two_writer_processes_alternate_under_every_durability_saving_the_free_map_every_few() {
    two_writer_processes_alternate_with(Some(8));
}

/// Two processes incrementing one counter in turn; with `cap`, at most that many free-map bits
/// carried past a commit.
fn two_writer_processes_alternate_with(cap: Option<usize>) {
    let opts = cap.map_or(Options::default(), |c| {
        Options::default().carried_max_bits(c)
    });
    for dur in ["sync", "nometasync", "async"] {
        let (_dir, path) = scratch(&format!("alternate-{dur}"));
        drop(Db::open(&path, opts).unwrap());
        let n = 150 * rounds();
        let mut kids: Vec<Kid> = (0..2)
            .map(|id| {
                let mut env = vec![
                    ("LARCH_MP_ID", id.to_string()),
                    ("LARCH_MP_N", n.to_string()),
                    ("LARCH_MP_DUR", dur.to_string()),
                ];
                if let Some(bits) = cap {
                    env.push(("LARCH_MP_CAP", bits.to_string()));
                }
                spawn("alternate", &path, &env)
            })
            .collect();
        for k in &mut kids {
            k.expect("ready");
        }
        for mut k in kids {
            k.expect("done");
            k.wait_ok();
        }
        let db = Db::open(&path, opts).unwrap();
        db.check().unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_tree("t").unwrap();
        let counter = u64::from_le_bytes(t.get(b"counter").unwrap().unwrap().try_into().unwrap());
        assert_eq!(counter, 2 * n, "{dur}, cap {cap:?}: increments were lost");
        for id in 0..2 {
            for i in 0..n {
                let v = t.get(format!("w{id}-{i:05}").as_bytes()).unwrap();
                assert_eq!(
                    v,
                    Some(&vec![id as u8; 700][..]),
                    "{dur}, cap {cap:?}: w{id}-{i}"
                );
            }
        }
    }
}

#[test]
fn other_processes_see_sync_commits_at_once_and_async_ones_from_the_next_sync() {
    let (_dir, path) = scratch("visibility");
    let db = Db::open(&path, Options::default().durability(Durability::Async)).unwrap();
    let put = |v: &str, d: Durability| {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(d);
        tx.open_tree("t")
            .unwrap()
            .insert(b"k", v.as_bytes())
            .unwrap();
        tx.commit().unwrap();
    };
    let get = || {
        let mut k = spawn("get", &path, &[]);
        let v = k.expect("value");
        k.wait_ok();
        v
    };
    put("one", Durability::Sync);
    assert_eq!(get(), "value one");
    put("two", Durability::Async);
    // Async commits write no meta: another process cannot see them yet.
    assert_eq!(get(), "value one");
    db.sync().unwrap();
    assert_eq!(get(), "value two");
    put("three", Durability::NoMetaSync);
    assert_eq!(get(), "value three");
}

#[test]
fn a_read_only_process_changes_nothing_in_the_data_file() {
    let (_dir, path) = scratch("read-only");
    {
        let db = Db::open(&path, Options::default()).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"k", b"v").unwrap();
        tx.commit().unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let mut k = spawn("get", &path, &[]);
    assert_eq!(k.expect("value"), "value v");
    k.wait_ok();
    assert!(std::fs::read(&path).unwrap() == before);
}

#[test]
fn a_stale_or_garbage_lock_file_is_rebuilt_and_never_needed_for_the_data() {
    let (_dir, path) = scratch("stale-lock");
    {
        let db = Db::open(&path, Options::default()).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"k", b"v").unwrap();
        tx.commit().unwrap();
    }
    let lock = PathBuf::from(format!("{}-lock", path.display()));
    // A lock file left by a session that names a commit far ahead, and one of garbage.
    let mut stale = std::fs::read(&lock).unwrap();
    stale[40..48].copy_from_slice(&1000u64.to_ne_bytes());
    for contents in [stale, vec![0xAB; 300], Vec::new()] {
        std::fs::write(&lock, &contents).unwrap();
        let db = Db::open(&path, Options::default()).unwrap();
        let rx = db.begin_read().unwrap();
        assert_eq!(
            rx.open_tree("t").unwrap().get(b"k").unwrap(),
            Some(&b"v"[..])
        );
        drop(rx);
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"k2", b"w").unwrap();
        tx.commit().unwrap();
        drop(db);
        let mut k = spawn("get", &path, &[]);
        assert_eq!(k.expect("value"), "value v");
        k.wait_ok();
    }
    std::fs::remove_file(&lock).unwrap();
    let db = Db::open(&path, Options::default().read_only(true)).unwrap();
    db.check().unwrap();
}

#[test]
fn a_second_open_in_one_process_is_refused_through_any_name() {
    let (_dir, path) = scratch("second-open");
    let db = Db::open(&path, Options::default()).unwrap();
    let link = path.with_extension("hard");
    std::fs::hard_link(&path, &link).unwrap();
    for p in [&path, &link] {
        for ro in [false, true] {
            assert!(
                matches!(
                    Db::open(p, Options::default().read_only(ro)),
                    Err(Error::AlreadyOpen { .. })
                ),
                "{} read_only={ro}",
                p.display()
            );
        }
    }
    drop(db);
    drop(Db::open(&link, Options::default()).unwrap());
}

#[test]
fn readers_lists_other_processes_and_their_snapshots() {
    let (_dir, path) = scratch("readers");
    let db = Db::open(&path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"a", b"1").unwrap();
    tx.commit().unwrap();
    let mut kid = spawn("hold", &path, &[]);
    let held: u64 = kid
        .expect("held")
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    for _ in 0..3 {
        let tx = db.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"a", b"2").unwrap();
        tx.commit().unwrap();
    }
    let pid = kid.child.id();
    let slots = larch::readers(&path).unwrap();
    let theirs: Vec<_> = slots.iter().filter(|s| s.pid == pid).collect();
    assert_eq!(theirs.len(), 1, "{slots:?}");
    assert_eq!(theirs[0].txid, Some(held));
    assert_eq!(theirs[0].age, Some(3));
    assert!(theirs[0].alive);
    kid.kill();
    let slots = larch::readers(&path).unwrap();
    assert!(slots.iter().any(|s| s.pid == pid && !s.alive), "{slots:?}");
    assert_eq!(larch::clear_stale_readers(&path).unwrap(), 1);
    assert!(larch::readers(&path).unwrap().iter().all(|s| s.pid != pid));
}

#[test]
fn background_compaction_waits_until_no_other_process_has_the_file_open() {
    let (_dir, path) = scratch("background");
    let opts = Options::default()
        .policy(larch::Policy::Null)
        .compaction_threshold(Some(0.5))
        .compaction_min_bytes(0);
    let db = Db::open(&path, opts).unwrap();
    let rewrite = |round: u8| {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..3000u32 {
                t.insert(&i.to_be_bytes(), &[b'a' + round; 5]).unwrap();
            }
        }
        tx.commit().unwrap();
    };
    rewrite(0);
    // Another process attached: the switch would strand it on the old file, so none starts.
    let mut kid = spawn("hold", &path, &[]);
    kid.expect("held");
    for round in 1..8 {
        rewrite(round);
    }
    // The refusal is reported as the last compaction's outcome.
    match db.wait_for_compaction() {
        Err(Error::Compaction(why)) => assert!(why.contains("other processes"), "{why}"),
        other => panic!("expected a refused compaction, got {other:?}"),
    }
    assert_eq!(
        db.compactions(),
        0,
        "a file switch ran with another process attached"
    );
    assert!(db.compactions_refused() > 0);
    // Its snapshot is intact, and it follows this process's commits on the same file.
    assert_eq!(kid.say_and("verify", "verified"), "verified 3000");
    let newest = db.begin_read().unwrap().txid();
    assert_eq!(
        kid.say_and("latest", "latest"),
        format!("latest {newest} 3000 15000")
    );
    kid.kill();
    // Alone again: the next commits over the threshold switch files.
    for round in 8..12 {
        rewrite(round);
    }
    db.wait_for_compaction().unwrap();
    assert!(db.compactions() >= 1, "no compaction ran once alone");
    db.check().unwrap();
    // A process opening now opens the compacted file and sees the newest commit.
    rewrite(12);
    let newest = db.begin_read().unwrap().txid();
    let mut kid = spawn("hold", &path, &[]);
    assert_eq!(kid.expect("held"), format!("held {newest}"));
    assert_eq!(
        kid.say_and("latest", "latest"),
        format!("latest {newest} 3000 15000")
    );
    kid.kill();
}

#[test]
fn readers_of_something_that_is_not_a_database_is_an_error_and_leaves_no_lock_file() {
    let (dir, path) = scratch("not-a-db");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"hello, this is not a database").unwrap();
    for p in [&path, &text] {
        assert!(larch::readers(p).is_err(), "{}", p.display());
        assert!(larch::clear_stale_readers(p).is_err(), "{}", p.display());
        let lock = PathBuf::from(format!("{}-lock", p.display()));
        assert!(!lock.exists(), "{} was created", lock.display());
    }
}

/// Storage of a compaction's new file whose syncs let another "process" commit to the old
/// file (see the test below).
#[derive(Debug)]
struct CommitOnSync {
    inner: larch::FileStorage,
    hook: std::sync::Arc<ForeignCommitFs>,
}

impl larch::Storage for CommitOnSync {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
        self.inner.write_at(offset, bufs)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()?;
        self.hook.foreign_commit();
        Ok(())
    }
    fn file(&self) -> &std::fs::File {
        self.inner.file()
    }
}

/// A compaction file system whose new files commit from another process at each sync.
#[derive(Debug)]
struct ForeignCommitFs {
    path: PathBuf,
    me: std::sync::OnceLock<std::sync::Weak<ForeignCommitFs>>,
    /// Commits started, and the keys committed, by the other process.
    started: Mutex<u32>,
    committed: Mutex<Vec<u32>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl ForeignCommitFs {
    /// Another process opens the database, commits one key and closes it. It runs on its own
    /// thread, as another process would: while the switch holds the lock file's attach byte
    /// it waits in its open (and then commits to the new file); the sync waits for it a
    /// little, so that most commits land between the compaction's rounds.
    fn foreign_commit(&self) {
        let k = {
            let mut started = self.started.lock().unwrap();
            if *started >= 40 {
                return;
            }
            *started += 1;
            1_000_000 + *started
        };
        let path = self.path.clone();
        let me = self.me.get().unwrap().upgrade().unwrap();
        let t = std::thread::spawn(move || {
            let db =
                Db::open_with_storage_as_process(&path, file_storage, Options::default()).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_tree("t")
                .unwrap()
                .insert(&k.to_be_bytes(), b"foreign")
                .unwrap();
            tx.commit().unwrap();
            drop(db);
            me.committed.lock().unwrap().push(k);
        });
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        while !t.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.threads.lock().unwrap().push(t);
    }
}

impl larch::CompactionFs for ForeignCommitFs {
    fn storage(
        &self,
        _path: &Path,
        file: std::fs::File,
        mode: larch::WriteMode,
    ) -> Box<dyn larch::Storage> {
        Box::new(CommitOnSync {
            inner: larch::FileStorage::new(file, mode),
            hook: self.me.get().unwrap().upgrade().unwrap(),
        })
    }
}

/// A process that attaches, commits and detaches while a background compaction finishes
/// must not lose its commit: the switch holds the writer lock from its last snapshot to the
/// rename (the other process waits, attached, and the switch is abandoned), and under the
/// exclusive hold it takes one more round if the old file moved on anyway.
#[test]
fn a_commit_by_another_process_during_the_file_switch_is_not_lost() {
    let (_dir, path) = scratch("switch-race");
    drop(Db::open(&path, Options::default()).unwrap());
    let fs = std::sync::Arc::new(ForeignCommitFs {
        path: path.clone(),
        me: Default::default(),
        started: Mutex::new(0),
        committed: Mutex::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
    });
    fs.me.set(std::sync::Arc::downgrade(&fs)).unwrap();
    let opts = Options::default()
        .policy(larch::Policy::Null)
        .compaction_threshold(Some(0.5))
        .compaction_min_bytes(0);
    let db =
        Db::open_with_storage_as_process_and_fs(&path, file_storage, opts, fs.clone()).unwrap();
    for round in 0..8u8 {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..3000u32 {
                t.insert(&i.to_be_bytes(), &[b'a' + round; 5]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    // A switch that finds the other process attached (waiting for the writer lock the switch
    // holds from its last snapshot) is abandoned, the old file kept; later ones go through
    // once the other process has made its 40 commits.
    let mut round = 8u8;
    while db.compactions() == 0 && round < 60 {
        match db.wait_for_compaction() {
            Ok(_) => {}
            // Abandoned, or failed otherwise (the old file is kept either way): in the full
            // test binary another test's fork can briefly hold the copy's flock (the fork
            // caveat in docs/format.md, "Locking") and the switch fails as already open. What
            // this test asserts is that no commit of the other process is lost.
            Err(Error::Compaction(why)) => eprintln!("switch attempt: {why}"),
            Err(e) => panic!("{e}"),
        }
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..3000u32 {
                t.insert(&i.to_be_bytes(), &[b'a' + round % 20; 5]).unwrap();
            }
        }
        tx.commit().unwrap();
        round += 1;
        // The writer lock is not fair: retaken at once, it starves the other process's writer
        // (woken by the release, it is not scheduled before the retake on a loaded machine),
        // which then stays attached and every switch is refused until the rounds run out.
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = db.wait_for_compaction();
    let (started, done) = (
        *fs.started.lock().unwrap(),
        fs.committed.lock().unwrap().len(),
    );
    assert!(
        db.compactions() >= 1,
        "no background compaction ran in {round} rounds ({} refused; {started} of the other \
         process's commits started, {done} done)",
        db.compactions_refused()
    );
    for t in std::mem::take(&mut *fs.threads.lock().unwrap()) {
        t.join().unwrap();
    }
    let foreign = fs.committed.lock().unwrap().clone();
    assert!(!foreign.is_empty(), "no commit came during the compaction");
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    for k in &foreign {
        assert_eq!(
            t.get(&k.to_be_bytes()).unwrap(),
            Some(&b"foreign"[..]),
            "key {k}, committed by another process during the switch, is lost"
        );
    }
    drop(rx);
    db.check().unwrap();
}

/// A power cut during a one-fsync commit can leave its meta whole and some of its pages not:
/// the next open falls back to the commit before. That torn meta must not be what a process
/// opening the file *live* (another process attached, no manifest check) then takes.
#[test]
fn a_torn_commit_that_recovery_fell_back_from_is_never_opened_by_a_later_process() {
    let (_dir, path) = scratch("torn");
    let mut w = spawn("two_commits", &path, &[]);
    let one: u64 = w.expect("one").split(' ').nth(1).unwrap().parse().unwrap();
    let before = std::fs::read(&path).unwrap();
    w.say("go");
    w.expect("two");
    w.kill();
    // What a power cut could leave: the second commit's meta landed, none of its pages did.
    let mut after = std::fs::read(&path).unwrap();
    let ps = 4096;
    for (i, page) in after.chunks_mut(ps).enumerate().skip(2) {
        match before.get(i * ps..(i + 1) * ps) {
            Some(old) => page.copy_from_slice(old),
            None => page.fill(0),
        }
    }
    std::fs::write(&path, &after).unwrap();
    // Recovery (the first process to attach) falls back to the first commit.
    let db = Db::open(&path, Options::default()).unwrap();
    assert_eq!(db.begin_read().unwrap().txid(), one);
    let mut k = spawn("get", &path, &[]);
    assert_eq!(k.expect("value"), "value old");
    k.wait_ok();
    drop(db);
}

/// The lock file's header names `txid` as the newest commit, and as durable: what it says
/// when the writer that wrote a newer meta was killed between writing it and publishing it.
fn rewind_lock_file(path: &Path, txid: u64) {
    use std::os::unix::fs::FileExt;
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("{}-lock", path.display()))
        .unwrap();
    lock.write_all_at(&(txid + 1).to_ne_bytes(), 40).unwrap();
    lock.write_all_at(&(txid + 1).to_ne_bytes(), 48).unwrap();
}

/// A writer process that overwrites keys `0..keys` of tree "t" with `byte` in one NoMetaSync
/// commit (a meta, no manifest) and is killed before publishing it: the lock file is rewound
/// to name `published`, the commit before, as a kill between the meta write and the
/// publication leaves it.
fn writer_killed_before_publishing(path: &Path, byte: u8, keys: u32, published: u64) {
    writer_with_cap_killed_before_publishing(path, byte, keys, published, None);
}

/// [`writer_killed_before_publishing`], the writer carrying at most `cap` free-map bits past a
/// commit.
fn writer_with_cap_killed_before_publishing(
    path: &Path,
    byte: u8,
    keys: u32,
    published: u64,
    cap: Option<usize>,
) {
    let mut env = vec![
        ("LARCH_MP_BYTE", (byte as u64).to_string()),
        ("LARCH_MP_DUR", "nometasync".into()),
        ("LARCH_MP_NOW", "1".into()),
        ("LARCH_MP_KEYS", keys.to_string()),
    ];
    if let Some(bits) = cap {
        env.push(("LARCH_MP_CAP", bits.to_string()));
    }
    let mut b = spawn("overwrite", path, &env);
    b.expect("committed");
    b.kill();
    rewind_lock_file(path, published);
}

/// A writer process killed after writing its meta but before publishing it leaves the lock
/// file naming the commit before. The next writer must build on the newest meta in the file,
/// not on its own older state: pages that meta reaches are not free.
#[test]
fn a_writer_after_one_killed_before_publishing_builds_on_the_file_s_newest_meta() {
    let (_dir, path) = scratch("unpublished");
    let t0 = {
        let db = Db::open(&path, Options::default()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..200u32 {
                t.insert(&i.to_be_bytes(), &[b'a'; 500]).unwrap();
            }
        }
        tx.commit().unwrap();
        db.begin_read().unwrap().txid()
    };
    // A: attached at t0, writes later.
    let mut a = spawn(
        "overwrite",
        &path,
        &[
            ("LARCH_MP_BYTE", (b'c' as u64).to_string()),
            ("LARCH_MP_DUR", "async".into()),
        ],
    );
    a.expect("ready");
    // B: commits t0 + 1 (NoMetaSync: no manifest) and dies before publishing it.
    writer_killed_before_publishing(&path, b'b', 200, t0);
    // A writes (Async: pages only) and dies too.
    assert_eq!(a.say_and("go", "committed"), "committed");
    a.kill();
    // Recovery opens B's commit or the one before it, whole; never A's lost pages.
    let db = Db::open(&path, Options::default()).unwrap();
    let check = db.check();
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").unwrap();
    let bytes: std::collections::BTreeSet<u8> =
        t.iter().unwrap().map(|e| e.unwrap().1[0]).collect();
    assert!(
        check.is_ok() && (bytes == [b'a'].into() || bytes == [b'b'].into()),
        "opened commit {} holds values {bytes:?} (check: {check:?})",
        rx.txid()
    );
}

/// A process that writes alone releases and retakes the writer lock around every commit that
/// reaches the disk, and skips re-reading the file's metas when nobody else took the lock in
/// between (the lock file counts takes). After another process took it, committed and died
/// before publishing, the retake must still find that commit: on the next write transaction
/// (`write`; fails if the retake trusts its own state), and at close (`close`: the other
/// process grew the file by megabytes; close skips its writes on finding the newer meta, and
/// behind that check its trim uses the length this process knows and its closed mark only
/// an older slot, so this variant guards the outcome rather than the check).
#[test]
fn a_writer_retaking_the_lock_rereads_the_file_only_after_another_process_wrote() {
    for then in ["write", "close"] {
        let b_keys: u32 = if then == "close" { 20_000 } else { 200 };
        let (_dir, path) = scratch("retake");
        let db = Db::open(&path, Options::default()).unwrap();
        let fill = |db: &Db, byte: u8| {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in 0..200u32 {
                    t.insert(&i.to_be_bytes(), &[byte; 500]).unwrap();
                }
            }
            tx.commit().unwrap();
        };
        // Sync commits: each one releases the lock and the next retakes it.
        for _ in 0..3 {
            fill(&db, b'a');
        }
        let ta = db.begin_read().unwrap().txid();
        // Another process commits ta + 1 (NoMetaSync: no manifest) and dies before publishing.
        writer_killed_before_publishing(&path, b'b', b_keys, ta);
        if then == "write" {
            let tx = db.begin_write().unwrap();
            let t = tx.open_tree("t").unwrap();
            let seen = t.get(&0u32.to_be_bytes()).unwrap().map(|v| v[0]);
            drop(t);
            assert_eq!(
                seen,
                Some(b'b'),
                "the write transaction after the dead writer's commit built on this \
                 process's own older state (txid {}, own newest {ta})",
                tx.txid()
            );
            assert!(tx.txid() > ta + 1, "txid {} reused", tx.txid());
            drop(tx);
            fill(&db, b'c');
        }
        drop(db);
        let want = if then == "write" { b'c' } else { b'b' };
        let db = Db::open(&path, Options::default()).unwrap();
        let check = db.check();
        let rx = db.begin_read().unwrap();
        let t = rx.open_tree("t").unwrap();
        let values: Vec<u8> = t.iter().unwrap().map(|e| e.unwrap().1[0]).collect();
        let bytes: std::collections::BTreeSet<u8> = values.iter().copied().collect();
        assert!(
            check.is_ok() && bytes == [want].into() && values.len() == b_keys as usize,
            "{then}: reopened at commit {} (own newest {ta}) holding {} values {bytes:?} \
             (check: {check:?})",
            rx.txid(),
            values.len()
        );
    }
}

/// Compaction's new files and directory operations, but its rename (the switch) fails while
/// `fail` is set: a background compaction then gives up at its switch, after it took the
/// writer lock. Counts the renames tried.
#[derive(Debug)]
struct SwitchFails {
    fail: std::sync::atomic::AtomicBool,
    renames: std::sync::atomic::AtomicUsize,
}

impl larch::CompactionFs for SwitchFails {
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        self.renames.fetch_add(1, SeqCst);
        if self.fail.load(SeqCst) {
            return Err(std::io::Error::other("rename refused by the test"));
        }
        std::fs::rename(from, to)
    }
}

/// Background compaction takes the writer lock for its switch, so it too may be the first
/// take after another process committed and died before publishing. Whatever the switch then
/// does, that commit must not be lost: not by a switch abandoned after the take (`abandoned`:
/// the take must not count as this process having checked the file, or the next writer
/// builds on its own older state), nor by one that goes through (`switched`: the compacted
/// file is built from what the switch read, so it must read the dead writer's commit too).
#[test]
fn a_background_compaction_taking_the_lock_after_a_dead_writer_keeps_its_commit() {
    use std::sync::atomic::Ordering::SeqCst;
    for then in ["abandoned", "switched"] {
        let (_dir, path) = scratch("switch-after-dead-writer");
        drop(Db::open(&path, Options::default()).unwrap());
        let fs = std::sync::Arc::new(SwitchFails {
            fail: true.into(),
            renames: 0.into(),
        });
        let opts = Options::default()
            .compaction_threshold(Some(0.3))
            .compaction_min_bytes(0)
            .compaction_check_every(Duration::from_secs(3600));
        let db =
            Db::open_with_storage_as_process_and_fs(&path, file_storage, opts, fs.clone()).unwrap();
        // Overwrites leave free pages: compaction would pay (every switch fails for now).
        for round in 0..6u8 {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in 0..200u32 {
                    t.insert(&i.to_be_bytes(), &[b'a' + round % 2; 500])
                        .unwrap();
                }
            }
            tx.commit().unwrap();
            let _ = db.wait_for_compaction();
        }
        let ta = db.begin_read().unwrap().txid();
        // Another process commits ta + 1 and dies before publishing it.
        writer_killed_before_publishing(&path, b'z', 200, ta);
        fs.fail.store(then == "abandoned", SeqCst);
        // A sync looks at the threshold: a compaction runs to its switch.
        let before = fs.renames.load(SeqCst);
        for _ in 0..20 {
            if fs.renames.load(SeqCst) > before {
                break;
            }
            db.sync().unwrap();
            let _ = db.wait_for_compaction();
        }
        assert!(
            fs.renames.load(SeqCst) > before,
            "{then}: no compaction reached its switch"
        );
        assert_eq!(db.compactions(), u64::from(then == "switched"), "{then}");
        let tx = db.begin_write().unwrap();
        let seen = tx
            .open_tree("t")
            .unwrap()
            .get(&0u32.to_be_bytes())
            .unwrap()
            .map(|v| v[0]);
        assert_eq!(
            seen,
            Some(b'z'),
            "{then}: the write transaction after the dead writer's commit (txid {}) built on \
             this process's own older state (txid {ta})",
            ta + 1
        );
        // (A switched file numbers its commits afresh.)
        if then == "abandoned" {
            assert!(tx.txid() > ta + 1, "{then}: txid {} reused", tx.txid());
        }
        drop(tx);
        drop(db);
        let db = Db::open(&path, Options::default()).unwrap();
        db.check().unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_tree("t").unwrap();
        assert!(
            t.iter().unwrap().all(|e| e.unwrap().1[0] == b'z'),
            "{then}: reopened without the dead writer's commit"
        );
    }
}

#[test]
fn two_processes_opening_one_file_through_two_hard_links_never_write_at_once() {
    let (_dir, path) = scratch("links");
    let db = Db::open(&path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"k", b"v").unwrap();
    tx.commit().unwrap();
    let link = path.with_extension("link");
    std::fs::hard_link(&path, &link).unwrap();
    let mut kid = spawn("try_write", &link, &[]);
    let line = kid.expect_any(&["opened", "refused"]);
    if line == "opened" {
        let tx = db.begin_write().unwrap();
        kid.say("go");
        let got = kid.expect_any(&["writing", "busy", "refused"]);
        assert!(
            got.starts_with("busy") || got.starts_with("refused"),
            "another process began a write transaction through a hard link while this one \
             had one open: {got}"
        );
        drop(tx);
    } else {
        assert!(line.starts_with("refused"), "{line}");
    }
    kid.kill();
}

/// The durability of commit `n` of `behind_commit`: Sync, NoMetaSync and Async in turn.
fn behind_durability(n: u64) -> Durability {
    [Durability::Sync, Durability::NoMetaSync, Durability::Async][(n % 3) as usize]
}

/// What commit `n` of `behind_commit` writes into tree "t" besides `last`: key `n`, a hot key
/// overwritten every 40 commits (its old leaves freed), and every third commit the removal of
/// key `n / 2`.
fn behind_edits(n: u64) -> (Vec<u8>, Vec<u8>, Vec<u8>, Option<Vec<u8>>) {
    let v = vec![n as u8; 30 + (n as usize * 37) % 250];
    let hot = format!("hot{:02}", n % 40).into_bytes();
    let gone = (n % 3 == 0 && n > 4).then(|| format!("n{:06}", n / 2).into_bytes());
    (format!("n{n:06}").into_bytes(), v, hot, gone)
}

/// Commit `n` (in `behind_durability(n)`) on top of commit `n - 1`.
fn behind_commit(db: &Db, n: u64) {
    let mut tx = db.begin_write().unwrap();
    tx.set_durability(behind_durability(n));
    behind_write(&tx, n);
    tx.commit().unwrap();
}

/// Commit `n + 1` on top of commit `n`, the newest the file holds; returns `n + 1`.
fn behind_commit_next(db: &Db) -> u64 {
    let mut tx = db.begin_write().unwrap();
    let n = tx
        .open_tree("t")
        .unwrap()
        .get(b"last")
        .unwrap()
        .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
        + 1;
    tx.set_durability(behind_durability(n));
    behind_write(&tx, n);
    tx.commit().unwrap();
    n
}

fn behind_write(tx: &larch::WriteTx, n: u64) {
    let mut t = tx.open_tree("t").unwrap();
    let (k, v, hot, gone) = behind_edits(n);
    t.insert(&k, &v).unwrap();
    t.insert(&hot, &[n as u8; 400]).unwrap();
    if let Some(g) = gone {
        t.remove(&g).unwrap();
    }
    t.insert(b"last", &n.to_le_bytes()).unwrap();
}

/// Tree "t" after commits 1..=n of `behind_commit`.
fn behind_state(n: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut t = BTreeMap::new();
    for i in 1..=n {
        let (k, v, hot, gone) = behind_edits(i);
        t.insert(k, v);
        t.insert(hot, vec![i as u8; 400]);
        if let Some(g) = gone {
            t.remove(&g);
        }
        t.insert(b"last".to_vec(), i.to_le_bytes().to_vec());
    }
    t
}

/// Tree "t" of a snapshot, scanned whole.
fn scan_t(rx: &larch::ReadTx, ctx: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let t = match rx.open_tree("t") {
        Ok(t) => t,
        Err(Error::TreeNotFound(_)) => return BTreeMap::new(),
        Err(e) => panic!("{ctx}: {e}"),
    };
    t.iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{ctx}: scan of snapshot {}: {e}", rx.txid()))
}

/// The commit a snapshot holds, after checking that tree "t" is exactly the state after it.
fn behind_snapshot(rx: &larch::ReadTx, ctx: &str) -> u64 {
    let got = scan_t(rx, ctx);
    let last = got
        .get(&b"last"[..])
        .map_or(0, |v| u64::from_le_bytes(v[..].try_into().unwrap()));
    assert!(
        got == behind_state(last),
        "{ctx}: snapshot {} is not the state after commit {last}",
        rx.txid()
    );
    last
}

impl Kid {
    /// The next `ack <n>` the child prints; None once it exited.
    fn next_ack(&mut self) -> Option<u64> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.out.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Some(n) = line.trim().strip_prefix("ack ") {
                return Some(n.parse().unwrap());
            }
        }
    }
}

/// Process A writes the file (Sync, NoMetaSync and Async commits, whose metas leave the free
/// map behind, or under a low cap save it every commit or two, and now and then an in-place
/// compaction, whose rounds save it) while process B, opened
/// read-write on the live file, takes snapshots as A goes and holds up to four of them. A
/// closes or is SIGKILLed; B then writes on from what A left, its snapshots still held. Every
/// snapshot B takes is a whole commit no older than A's last acknowledged commit with a meta
/// (published before its ack), every held one reads the same throughout (a page A or B reused
/// under it would show), B's check of the commit it reads passes while A writes, and the
/// reopened file checks clean with every commit A made durable
/// (a kill loses only Async ones) and all of B's.
#[test]
fn a_process_holding_snapshots_of_a_behind_file_outlives_its_writer_closing_or_killed() {
    for cap in [None, Some(8)] {
        for end in ["close", "kill"] {
            let ctx = format!("cap {cap:?}, writer's {end}");
            let (_dir, path) = scratch("behind-live");
            let opts = cap.map_or(Options::default(), |c| {
                Options::default().carried_max_bits(c)
            });
            drop(Db::open(&path, opts).unwrap());
            let env: Vec<(&str, String)> = cap
                .map(|c| ("LARCH_MP_CAP", c.to_string()))
                .into_iter()
                .collect();
            let mut a = spawn("behind_writer", &path, &env);
            let mut acked = 0;
            while acked < 20 {
                acked = a.next_ack().expect("the writer exited");
            }
            let b = Db::open(&path, opts).unwrap();
            let mut rng = Rng(acked | 1);
            // Snapshots held, each with the commit it holds and what it read then.
            type Held = (larch::ReadTx, u64, BTreeMap<Vec<u8>, Vec<u8>>);
            let mut held: Vec<Held> = Vec::new();
            let still = |held: &[Held], ctx: &str| {
                for (rx, at, seen) in held {
                    assert!(
                        scan_t(rx, ctx) == *seen,
                        "{ctx}: the snapshot of commit {at} changed under its reader"
                    );
                }
            };
            // The last acknowledged commit that wrote its meta: published, and kept by a kill.
            let visible = |acked: u64| (1..=acked).rev().find(|&n| n % 3 != 2).unwrap_or(0);
            for round in 0..60 {
                for _ in 0..1 + rng.below(12) {
                    acked = a.next_ack().expect("the writer exited");
                }
                let rx = b.begin_read().unwrap();
                let at = behind_snapshot(&rx, &format!("{ctx}, round {round}"));
                assert!(
                    at >= visible(acked),
                    "{ctx}, round {round}: a snapshot of commit {at} after commit {} was \
                     acknowledged",
                    visible(acked)
                );
                if held.len() == 4 {
                    held.remove(rng.below(4) as usize);
                }
                let seen = scan_t(&rx, &ctx);
                held.push((rx, at, seen));
                still(&held, &format!("{ctx}, round {round}"));
                if round % 10 == 9 {
                    // Checked by the process that does not write, on the commit it reads.
                    b.check().unwrap_or_else(|e| {
                        panic!("{ctx}, round {round}: check while the writer commits: {e}")
                    });
                }
            }
            let durable = if end == "close" {
                a.say("stop");
                let closed = a.expect("closed");
                let n: u64 = closed.split(' ').nth(1).unwrap().parse().unwrap();
                a.wait_ok();
                acked = n;
                n
            } else {
                let _ = a.child.kill();
                while let Some(n) = a.next_ack() {
                    acked = n;
                }
                let _ = a.child.wait();
                visible(acked)
            };
            still(&held, &format!("{ctx}, after the writer's end"));
            // B writes on from the newest commit the file holds (a killed writer may have
            // written a meta it did not publish), in every durability.
            let first = behind_commit_next(&b);
            let held_by_file = first - 1;
            if end == "close" {
                assert_eq!(held_by_file, durable, "{ctx}: not the writer's last commit");
            } else {
                assert!(
                    (durable..=acked + 1).contains(&held_by_file),
                    "{ctx}: the file held commit {held_by_file}, the writer made {durable} \
                     durable (against a kill) and acknowledged {acked}"
                );
            }
            let mut last = first;
            for i in 0..60 {
                last = behind_commit_next(&b);
                if i % 20 == 19 {
                    held.remove(0);
                }
                still(&held, &format!("{ctx}, B's commit {last}"));
            }
            eprintln!(
                "{ctx}: the writer acknowledged {acked} commits ({durable} durable), the \
                 second process wrote {first}..={last}"
            );
            b.check()
                .unwrap_or_else(|e| panic!("{ctx}: check of the second process: {e}"));
            drop(held);
            drop(b);
            let db = Db::open(&path, opts).unwrap();
            db.check()
                .unwrap_or_else(|e| panic!("{ctx}: check after reopen: {e}"));
            let rx = db.begin_read().unwrap();
            assert_eq!(
                behind_snapshot(&rx, &format!("{ctx}, reopened")),
                last,
                "{ctx}: the second process's commits did not survive its close"
            );
        }
    }
}

/// A process holds a snapshot while a writer process overwrites every key it reads (one
/// NoMetaSync commit whose meta leaves the free map behind, or under a low cap saves it) and
/// is killed before publishing it. The holder's next write transaction builds on that meta
/// (docs/format.md, "Several processes"): the walk finds the snapshot's pages free, and they
/// must wait for the snapshot, through the holder's own commits that free more of them.
#[test]
fn a_snapshot_held_across_a_writer_killed_before_publishing_a_behind_meta_stays_whole() {
    for cap in [None, Some(8)] {
        let (_dir, path) = scratch("held-unpublished");
        let opts = cap.map_or(Options::default(), |c| {
            Options::default().carried_max_bits(c)
        });
        let db = Db::open(&path, opts).unwrap();
        for round in 0..4u8 {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in 0..200u32 {
                    t.insert(&i.to_be_bytes(), &[b'a' + round; 500]).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        let held = db.begin_read().unwrap();
        let read = |rx: &larch::ReadTx| -> Vec<Vec<u8>> {
            let t = rx.open_tree("t").unwrap();
            t.iter().unwrap().map(|e| e.unwrap().1.to_vec()).collect()
        };
        let seen = read(&held);
        let t0 = held.txid();
        writer_with_cap_killed_before_publishing(&path, b'z', 200, t0, cap);
        let mut model: Vec<Vec<u8>> = vec![vec![b'z'; 500]; 200];
        for round in 0..12u32 {
            let mut tx = db.begin_write().unwrap();
            tx.set_durability(
                [Durability::Sync, Durability::NoMetaSync, Durability::Async][round as usize % 3],
            );
            {
                let mut t = tx.open_tree("t").unwrap();
                if round == 0 {
                    assert_eq!(
                        t.get(&7u32.to_be_bytes()).unwrap(),
                        Some(&[b'z'; 500][..]),
                        "cap {cap:?}: the writer after the dead one built on its own state"
                    );
                }
                for i in (round % 4..200).step_by(4) {
                    let v = vec![b'0' + round as u8; 300 + round as usize];
                    t.insert(&i.to_be_bytes(), &v).unwrap();
                    model[i as usize] = v;
                }
            }
            tx.commit().unwrap();
            assert!(
                read(&held) == seen,
                "cap {cap:?}: the snapshot of commit {t0} changed after commit {round}"
            );
        }
        db.check()
            .unwrap_or_else(|e| panic!("cap {cap:?}: check: {e}"));
        drop(held);
        drop(db);
        let db = Db::open(&path, opts).unwrap();
        db.check()
            .unwrap_or_else(|e| panic!("cap {cap:?}: check after reopen: {e}"));
        let rx = db.begin_read().unwrap();
        assert!(read(&rx) == model, "cap {cap:?}: contents after reopen");
    }
}
