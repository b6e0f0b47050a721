//! Background (threshold) compaction while commits leave the free map behind (docs/format.md,
//! "A free map behind its meta" and "Compaction"): the copy starts from a behind meta, its
//! catch-up rounds and last round are behind Sync commits of the new file, and the switch
//! makes the new file's writer state (with the bits it carries) the handle's. Writers of every
//! durability, at the default cap (every meta of these small files is behind) and with a cap
//! low enough that commits save the map every few commits while the copy runs. A file copy
//! taken between commits (what a SIGKILL leaves) must open, check clean and hold the newest
//! commit whose meta is written; the handle itself must check clean (the free map with the
//! carried bits and the in-memory free space equal to the pages no tree reaches) and reopen
//! clean. A compaction whose new file fails a write or a sync part-way must leave the handle
//! on the old file with every commit, and a later compaction must still switch.
//! `LARCH_BEHIND_CASES` sets the seeds per durability and cap of the first test (default 3).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use larch::{CompactionFs, Db, Durability, FileStorage, Options, Policy, Storage, WriteMode};
use larch_testkit::images::{contents, reader_contents, takes_a_commit, Model};
use larch_testkit::{file_storage, scratch_dir, Rng};

/// Under Null every freed page stays dead until a compaction, so the threshold is crossed
/// every few dozen commits; the timer is off, so compactions start after commits and syncs.
fn options(cap: Option<usize>) -> Options {
    let opts = Options::default()
        .policy(Policy::Null)
        .compaction_threshold(Some(0.25))
        .compaction_min_bytes(0)
        .compaction_check_every(Duration::from_secs(3600));
    match cap {
        Some(bits) => opts.carried_max_bits(bits),
        None => opts,
    }
}

/// The options a copy is opened with: the writer's cap (a smaller one refuses a map behind
/// by more than it), no compaction of its own.
fn reopen_options(cap: Option<usize>) -> Options {
    options(cap).compaction_threshold(None)
}

/// One write transaction of `d` on tree "t": mostly a key or two (a commit that frees a few
/// pages, so a low cap is crossed every few commits), now and then thirty, and every ninth an
/// overflow value rewritten. The model follows.
fn commit(db: &Db, rng: &mut Rng, model: &mut Model, d: Durability) {
    let mut tx = db.begin_write().unwrap();
    tx.set_durability(d);
    let t = model.entry("t".to_string()).or_default();
    {
        let mut tree = tx.open_tree("t").unwrap();
        let edits = if rng.below(6) == 0 {
            30
        } else {
            1 + rng.below(2)
        };
        for _ in 0..edits {
            let k = format!("k{:04}", rng.below(600)).into_bytes();
            if rng.below(7) == 0 {
                tree.remove(&k).unwrap();
                t.remove(&k);
            } else {
                let v = vec![rng.below(256) as u8; 40 + rng.below(200) as usize];
                tree.insert(&k, &v).unwrap();
                t.insert(k, v);
            }
        }
        if rng.below(9) == 0 {
            let v = vec![rng.below(256) as u8; 9_000 + rng.below(9_000) as usize];
            tree.insert(b"big", &v).unwrap();
            t.insert(b"big".to_vec(), v);
        }
    }
    tx.commit().unwrap();
}

/// Is the newest valid meta of the file at `path` behind its free map?
fn newest_is_behind(path: &Path) -> bool {
    let img = std::fs::read(path).unwrap();
    let ps = Options::default().get_page_size();
    [0, ps]
        .iter()
        .filter_map(|&at| img.get(at..at + 128))
        .filter_map(|m| larch::raw::Meta::decode(m).ok())
        .max_by_key(|m| m.txid)
        .expect("no valid meta")
        .freemap_behind
}

/// Open `copy` as a recovered file: it must open, check clean, hold one of `states`, take a
/// commit and check clean after it. Returns what it held.
fn open_copy(copy: &Path, cap: Option<usize>, states: &[Model], ctx: &str) -> Model {
    let db = Db::open(copy, reopen_options(cap))
        .unwrap_or_else(|e| panic!("{ctx}: the copy does not open: {e}"));
    db.check()
        .unwrap_or_else(|e| panic!("{ctx}: check of the copy: {e}"));
    let got = contents(&db);
    assert!(
        states.contains(&got),
        "{ctx}: the copy holds none of the {} states from the last durable commit on",
        states.len()
    );
    takes_a_commit(&db).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    drop(db);
    std::fs::remove_file(copy).unwrap();
    got
}

/// Commits of `d` for as long as it takes background compactions to switch files a few times,
/// a snapshot held across the first switches, now and then an in-place compaction racing the
/// background copy; copies of the file between commits. Returns the
/// compactions that switched, and the copies whose newest meta was behind and was not.
fn compact_while_committing(d: Durability, cap: Option<usize>, seed: u64) -> (u64, [usize; 2]) {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    let copy = dir.path().join("copy.larch");
    let db = Db::open(&path, options(cap)).unwrap();
    let mut rng = Rng(seed);
    let mut model = Model::new();
    // Every committed state, and the index of the last durable one in it (a copy of the file
    // holds one from there on; under Sync and NoMetaSync commits, whose metas are written,
    // exactly the newest).
    let mut states = vec![Model::new()];
    let mut durable = 0;
    let mut held: Option<(larch::ReadTx, Model)> = None;
    let mut behind = [0usize; 2];
    let ctx = |i: usize| format!("{d:?}, cap {cap:?}, seed {seed}, commit {i}");
    // Another thread calls `Db::sync` every few hundred microseconds, so syncs meet switches
    // at every step (one that took the old file just before a switch made the new one
    // current published the old file's txids over the lock file's reset).
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || -> larch::Result<u64> {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                db.sync()?;
                n += 1;
                std::thread::sleep(Duration::from_micros(100 + n % 7 * 150));
            }
            Ok(n)
        })
    };
    for i in 0..400 {
        commit(&db, &mut rng, &mut model, d);
        states.push(model.clone());
        if d != Durability::Async {
            durable = states.len() - 1;
        } else if i % 4 == 3 {
            db.sync().unwrap();
            durable = states.len() - 1;
        }
        if i == 30 {
            held = Some((db.begin_read().unwrap(), model.clone()));
        }
        if i % 45 == 44 {
            // In place, racing the background copy: its rounds save the free map.
            db.compact().unwrap();
            states.push(model.clone());
            durable = states.len() - 1;
        }
        if i == 250 {
            held = None;
        }
        if let Some((rx, seen)) = &held {
            assert!(
                reader_contents(rx) == *seen,
                "{}: the held snapshot changed",
                ctx(i)
            );
        }
        if i % 9 == 4 {
            std::fs::copy(&path, &copy).unwrap();
            behind[usize::from(newest_is_behind(&copy))] += 1;
            open_copy(&copy, cap, &states[durable..], &ctx(i));
        }
        if i % 50 == 49 {
            db.check()
                .unwrap_or_else(|e| panic!("{}: check of the handle: {e}", ctx(i)));
        }
        if db.compactions() >= 4 && i >= 260 {
            break;
        }
    }
    stop.store(true, Ordering::SeqCst);
    let syncs = syncer
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{d:?}, cap {cap:?}: a sync of the other thread: {e}"));
    assert!(
        syncs > 0,
        "{d:?}, cap {cap:?}: the other thread never synced"
    );
    db.wait_for_compaction()
        .unwrap_or_else(|e| panic!("{d:?}, cap {cap:?}: the last compaction failed: {e}"));
    let switched = db.compactions();
    db.check()
        .unwrap_or_else(|e| panic!("{d:?}, cap {cap:?}: check at the end: {e}"));
    assert!(
        contents(&db) == model,
        "{d:?}, cap {cap:?}: the handle lost a commit"
    );
    drop(db);
    let db = Db::open(&path, reopen_options(cap)).unwrap();
    db.check()
        .unwrap_or_else(|e| panic!("{d:?}, cap {cap:?}: check after reopen: {e}"));
    assert!(
        contents(&db) == model,
        "{d:?}, cap {cap:?}: a commit acknowledged before close is gone after reopen"
    );
    (switched, behind)
}

fn seeds() -> u64 {
    std::env::var("LARCH_BEHIND_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

#[test]
fn a_compaction_switching_while_the_free_map_is_behind_keeps_every_durable_commit() {
    for d in [Durability::Sync, Durability::NoMetaSync, Durability::Async] {
        for (cap, seed) in [None, Some(24)]
            .into_iter()
            .flat_map(|c| (1..=seeds()).map(move |s| (c, s)))
        {
            let (switched, behind) = compact_while_committing(d, cap, seed * 0x5eed);
            eprintln!(
                "{d:?}, cap {cap:?}, seed {seed}: {switched} switches, copies saved/behind \
                 {behind:?}"
            );
            assert!(
                switched >= 2,
                "{d:?}, cap {cap:?}: {switched} compactions switched: nothing was tested"
            );
            // Under the default cap these files never save the map but at a switch's fresh
            // file; under the low cap both kinds of newest meta must be copied.
            assert!(behind[1] > 0, "{d:?}, cap {cap:?}: no copy was behind");
            if cap.is_some() {
                assert!(
                    behind[0] > 0,
                    "{d:?}, cap {cap:?}: no copy had saved the map"
                );
            }
        }
    }
}

/// Compaction's file system, except that the storage of each file it creates counts its
/// writes, resizes and syncs with every other such file's, and fails call number `fail_at`
/// (from 1); with `sticky`, every later call of the same file fails too (a disk that went
/// away under the temporary file). Only until the next rename: a file renamed into place is
/// the database, and its failures are tests/faults.rs's.
#[derive(Debug)]
struct FailingNewFile {
    calls: Arc<AtomicUsize>,
    renames: Arc<AtomicUsize>,
    fail_at: usize,
    sticky: bool,
    failed: Arc<AtomicBool>,
}

impl CompactionFs for FailingNewFile {
    fn storage(&self, _path: &Path, file: File, mode: WriteMode) -> Box<dyn Storage> {
        Box::new(Failing {
            inner: FileStorage::new(file, mode),
            calls: self.calls.clone(),
            renames: self.renames.clone(),
            born: self.renames.load(Ordering::SeqCst),
            fail_at: self.fail_at,
            sticky: self.sticky,
            failed: self.failed.clone(),
            broken: AtomicBool::new(false),
        })
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)?;
        self.renames.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[derive(Debug)]
struct Failing {
    inner: FileStorage,
    calls: Arc<AtomicUsize>,
    renames: Arc<AtomicUsize>,
    /// Renames done when the file was created: once another is done, it is in place.
    born: usize,
    fail_at: usize,
    sticky: bool,
    failed: Arc<AtomicBool>,
    broken: AtomicBool,
}

impl Failing {
    fn turn(&self, what: &str) -> std::io::Result<()> {
        if self.renames.load(Ordering::SeqCst) != self.born {
            return Ok(());
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail_at || (self.sticky && self.broken.load(Ordering::SeqCst)) {
            self.broken.store(true, Ordering::SeqCst);
            self.failed.store(true, Ordering::SeqCst);
            return Err(std::io::Error::other(format!(
                "{what} of compaction's new file refused by the test"
            )));
        }
        Ok(())
    }
}

impl Storage for Failing {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.turn("set_len")?;
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
        self.turn("write")?;
        self.inner.write_at(offset, bufs)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.turn("sync")?;
        self.inner.sync()
    }
    fn file(&self) -> &File {
        self.inner.file()
    }
}

/// Commits of `d` while compactions whose new file fails its `fail_at`-th call copy, catch up
/// and switch; every acknowledged commit is in the handle and, after the last compaction and
/// a reopen, in the file. Returns whether a call failed and the compactions that switched
/// after it did.
fn compact_with_a_failing_new_file(
    d: Durability,
    cap: Option<usize>,
    fail_at: usize,
    sticky: bool,
) -> (bool, u64) {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    drop(Db::open(&path, options(cap)).unwrap());
    let fs = Arc::new(FailingNewFile {
        calls: Arc::default(),
        renames: Arc::default(),
        fail_at,
        sticky,
        failed: Arc::default(),
    });
    let db =
        Db::open_with_storage_and_fs(&path, file_storage(&path), options(cap), fs.clone()).unwrap();
    let ctx = format!("{d:?}, cap {cap:?}, call {fail_at} failing, sticky {sticky}");
    let mut rng = Rng(fail_at as u64 * 7919 + 1);
    let mut model = Model::new();
    // Commits since a call failed, and the compactions that had switched by then.
    let mut after_failure = 0;
    let mut switched_before = None;
    for i in 0..400 {
        commit(&db, &mut rng, &mut model, d);
        if d == Durability::Async && i % 4 == 3 {
            db.sync()
                .unwrap_or_else(|e| panic!("{ctx}: sync after commit {i}: {e}"));
        }
        if i % 40 == 39 {
            db.check()
                .unwrap_or_else(|e| panic!("{ctx}: check after commit {i}: {e}"));
            assert!(contents(&db) == model, "{ctx}: contents after commit {i}");
        }
        if fs.failed.load(Ordering::SeqCst) {
            let before = *switched_before.get_or_insert(db.compactions());
            after_failure += 1;
            if after_failure > 100 && db.compactions() > before + 1 {
                break;
            }
        } else if i >= 200 {
            break;
        }
    }
    // The last compaction may be one that fails (sticky): the handle keeps its file.
    let _ = db.wait_for_compaction();
    let failed = fs.failed.load(Ordering::SeqCst);
    let switched = db.compactions() - switched_before.unwrap_or(0);
    db.check()
        .unwrap_or_else(|e| panic!("{ctx}: check at the end: {e}"));
    assert!(contents(&db) == model, "{ctx}: the handle lost a commit");
    drop(db);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("autocompact"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "{ctx}: temporary files left: {leftovers:?}"
    );
    let db = Db::open(&path, reopen_options(cap)).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    db.check()
        .unwrap_or_else(|e| panic!("{ctx}: check after reopen: {e}"));
    assert!(
        contents(&db) == model,
        "{ctx}: an acknowledged commit is gone after reopen"
    );
    (failed, switched)
}

#[test]
fn a_compaction_whose_new_file_fails_part_way_while_the_free_map_is_behind_keeps_every_commit() {
    // A compaction makes about 14 calls to its new files before the rename (the copy's
    // resize, bulk write and sync; the open's sync; each catch-up round's pages, meta and
    // sync; the last round's): every call of the first one fails in turn, and some of the
    // second's. Each run makes more than ten compactions.
    for d in [Durability::Sync, Durability::NoMetaSync, Durability::Async] {
        for cap in [None, Some(24)] {
            for fail_at in (1..=16).chain([20, 24, 28]) {
                for sticky in [false, true] {
                    let (failed, switched) =
                        compact_with_a_failing_new_file(d, cap, fail_at, sticky);
                    let ctx = format!("{d:?}, cap {cap:?}, call {fail_at}, sticky {sticky}");
                    assert!(failed, "{ctx}: no call failed: nothing was tested");
                    assert!(
                        switched >= 1,
                        "{ctx}: no compaction switched after the failed one"
                    );
                }
            }
        }
    }
}

/// A process (a handle opened with `Db::open_with_storage_as_process`) compacts in the
/// background while alone; a second process then opens the file the switch put in place, whose
/// newest meta (the switch's last round, or a later commit) leaves the free map behind, and the
/// two write in turn, in every durability, the first holding a snapshot of its own from before
/// the second came; the first compacts again once the second has gone. Each check, the held
/// snapshot, and the file after both closed hold every commit.
#[test]
fn a_process_opening_the_file_a_behind_compaction_switched_to_writes_on_it_with_every_commit() {
    for cap in [None, Some(24)] {
        let ctx = |what: &str| format!("cap {cap:?}: {what}");
        let dir = scratch_dir();
        let path = dir.path().join("db.larch");
        drop(Db::open(&path, options(cap)).unwrap());
        let first = Db::open_with_storage_as_process(&path, file_storage, options(cap)).unwrap();
        let mut rng = Rng(17 + cap.unwrap_or(0) as u64);
        let mut model = Model::new();
        while first.compactions() < 2 {
            commit(&first, &mut rng, &mut model, Durability::Sync);
            let _ = first.wait_for_compaction();
        }
        for _ in 0..3 {
            commit(&first, &mut rng, &mut model, Durability::Sync);
        }
        first.wait_for_compaction().unwrap();
        if cap.is_none() {
            assert!(
                newest_is_behind(&path),
                "{}",
                ctx("the switched file saved its map")
            );
        }
        let held = first.begin_read().unwrap();
        let seen = model.clone();
        let second = Db::open_with_storage_as_process(&path, file_storage, reopen_options(cap))
            .unwrap_or_else(|e| panic!("{}", ctx(&format!("the second open: {e}"))));
        assert!(
            contents(&second) == model,
            "{}",
            ctx("the second process's view")
        );
        let both = [&first, &second];
        let mut writer = 0;
        for i in 0..300 {
            let who = rng.below(2) as usize;
            if who != writer {
                // The writer keeps the lock while its Async commits have no meta.
                both[writer].sync().unwrap();
                writer = who;
            }
            let d = [Durability::Sync, Durability::NoMetaSync, Durability::Async][i % 3];
            commit(both[who], &mut rng, &mut model, d);
            assert!(
                reader_contents(&held) == seen,
                "{}",
                ctx(&format!("the held snapshot after commit {i}"))
            );
            if i % 30 == 29 {
                both[who]
                    .check()
                    .unwrap_or_else(|e| panic!("{}", ctx(&format!("check after {i}: {e}"))));
                assert!(contents(both[who]) == model, "{}", ctx("contents"));
            }
        }
        both[writer].sync().unwrap();
        let switched = first.compactions();
        assert!(
            first.compactions_refused() > 0,
            "{}",
            ctx("no compaction was called for while both were attached: the turns were idle")
        );
        drop(second);
        // Alone again: the first compacts what the two left.
        for _ in 0..200 {
            if first.compactions() > switched {
                break;
            }
            commit(&first, &mut rng, &mut model, Durability::Sync);
            let _ = first.wait_for_compaction();
        }
        assert!(
            first.compactions() > switched,
            "{}",
            ctx("no compaction once the second process had gone")
        );
        assert!(
            reader_contents(&held) == seen,
            "{}",
            ctx("the held snapshot at the end")
        );
        first
            .check()
            .unwrap_or_else(|e| panic!("{}", ctx(&format!("check at the end: {e}"))));
        assert!(contents(&first) == model, "{}", ctx("contents at the end"));
        drop(held);
        drop(first);
        let db = Db::open(&path, reopen_options(cap)).unwrap();
        db.check()
            .unwrap_or_else(|e| panic!("{}", ctx(&format!("check after reopen: {e}"))));
        assert!(contents(&db) == model, "{}", ctx("contents after reopen"));
    }
}

/// Several threads commit at once (Sync commits gather into group commits whose last writer
/// syncs for all, with a thread of Async ones and `Db::sync` among them) while background
/// compactions copy, catch up and switch, and a reader thread checks every snapshot it takes:
/// each writer's keys are exactly those its counter says it committed. At the default cap and
/// with commits that save the free map every few. After the threads, the handle and the
/// reopened file check clean and hold every commit each thread had acknowledged.
#[test]
fn group_commits_of_several_threads_across_behind_compaction_switches_keep_every_commit() {
    const WRITERS: u64 = 4;
    const COMMITS: u64 = 500;
    for cap in [None, Some(24)] {
        let dir = scratch_dir();
        let path = dir.path().join("db.larch");
        let db = Db::open(&path, options(cap)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut snapshots = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let rx = db.begin_read().unwrap();
                    whole_writers(
                        &rx,
                        WRITERS,
                        &format!("cap {cap:?}, snapshot {}", rx.txid()),
                    );
                    snapshots += 1;
                }
                snapshots
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for n in 1..=COMMITS {
                        let mut tx = db.begin_write().unwrap();
                        // Writer 0 commits Async and syncs every fifth; the others Sync.
                        tx.set_durability(if w == 0 {
                            Durability::Async
                        } else {
                            Durability::Sync
                        });
                        {
                            let mut t = tx.open_tree("w").unwrap();
                            t.insert(format!("{w}-{n:05}").as_bytes(), &[w as u8; 150])
                                .unwrap();
                            t.insert(format!("{w}-last").as_bytes(), &n.to_le_bytes())
                                .unwrap();
                            // A hot key per writer, rewritten: pages freed every commit.
                            t.insert(format!("hot{w}").as_bytes(), &[n as u8; 700])
                                .unwrap();
                        }
                        tx.commit().unwrap();
                        if w == 0 && n % 5 == 0 {
                            db.sync().unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Release);
        let snapshots = reader.join().unwrap();
        db.sync().unwrap();
        db.wait_for_compaction().unwrap();
        let switched = db.compactions();
        eprintln!("cap {cap:?}: {switched} switches, {snapshots} snapshots read");
        assert!(switched >= 1, "cap {cap:?}: no compaction switched");
        db.check()
            .unwrap_or_else(|e| panic!("cap {cap:?}: check of the handle: {e}"));
        let rx = db.begin_read().unwrap();
        assert_eq!(
            whole_writers(&rx, WRITERS, &format!("cap {cap:?}, the end")),
            vec![COMMITS; WRITERS as usize]
        );
        drop(rx);
        drop(db);
        let db = Db::open(&path, reopen_options(cap)).unwrap();
        db.check()
            .unwrap_or_else(|e| panic!("cap {cap:?}: check after reopen: {e}"));
        let rx = db.begin_read().unwrap();
        assert_eq!(
            whole_writers(&rx, WRITERS, &format!("cap {cap:?}, reopened")),
            vec![COMMITS; WRITERS as usize],
            "cap {cap:?}: a commit acknowledged before close is gone after reopen"
        );
    }
}

/// Each writer's last commit in a snapshot of the tree "w", after checking that the writer's
/// keys are exactly those of its commits 1..=last and its hot key is its last commit's.
fn whole_writers(rx: &larch::ReadTx, writers: u64, ctx: &str) -> Vec<u64> {
    let t = match rx.open_tree("w") {
        Ok(t) => t,
        Err(larch::Error::TreeNotFound(_)) => return vec![0; writers as usize],
        Err(e) => panic!("{ctx}: {e}"),
    };
    (0..writers)
        .map(|w| {
            let last = t
                .get(format!("{w}-last").as_bytes())
                .unwrap()
                .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
            let lo = format!("{w}-0").into_bytes();
            let hi = format!("{w}-9").into_bytes();
            let keys: Vec<Vec<u8>> = t
                .range(&lo[..]..&hi[..])
                .unwrap()
                .map(|e| e.map(|(k, _)| k.to_vec()))
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("{ctx}: scan: {e}"));
            let want: Vec<Vec<u8>> = (1..=last)
                .map(|n| format!("{w}-{n:05}").into_bytes())
                .collect();
            assert!(
                keys == want,
                "{ctx}: writer {w} has {} keys, its counter {last}",
                keys.len()
            );
            if last > 0 {
                assert_eq!(
                    t.get(format!("hot{w}").as_bytes()).unwrap(),
                    Some(&[last as u8; 700][..]),
                    "{ctx}: writer {w}'s hot key"
                );
            }
            last
        })
        .collect()
}
