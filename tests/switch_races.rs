//! Races with a background compaction's switch: nothing of the old file (an `OpenFile` some
//! thread took before the switch made the new one current) may write to the lock file or
//! change this process's hold of the cross-process writer lock once the switch has reset the
//! lock file to the new file's commits, and the lock file never names a commit the current
//! file lacks (docs/format.md, "Compaction" and "The lock file").

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use larch::{Db, Durability, Options};
use larch_testkit::images::{contents, reader_contents};

/// A file whose background compaction has much to give back: 20,000 entries, nine in ten
/// then removed in one commit, then `extra` commits of one entry each (with forty, the old
/// file's txids run well past the compacted file's; with none, the compacted file gets the
/// old one's txid).
fn mostly_free(path: &Path, extra: u32) {
    let db = Db::open(path, Options::default()).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in 0..20_000u32 {
            t.insert(&i.to_be_bytes(), &[7u8; 200]).unwrap();
        }
    }
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        for i in (0..20_000u32).filter(|i| i % 10 != 0) {
            t.remove(&i.to_be_bytes()).unwrap();
        }
    }
    tx.commit().unwrap();
    for i in 0..extra {
        let tx = db.begin_write().unwrap();
        tx.open_tree("t")
            .unwrap()
            .insert(&(i * 10).to_be_bytes(), b"new")
            .unwrap();
        tx.commit().unwrap();
    }
}

/// The file at `path`, opened again after every handle closed, checks clean and holds `want`.
fn reopened_holds(path: &Path, want: &larch_testkit::images::Model, ctx: &str) {
    let db = Db::open(path, Options::default()).unwrap();
    db.check()
        .unwrap_or_else(|e| panic!("{ctx}: check after reopen: {e}"));
    assert!(
        contents(&db) == *want,
        "{ctx}: a commit is gone after reopen"
    );
}

/// Options that compact `mostly_free`'s file at the first look (`Db::sync` looks), with the
/// handle's own timer out of the way.
fn compacting() -> Options {
    Options::default()
        .durability(Durability::Sync)
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0)
        .compaction_check_every(Duration::from_secs(3600))
}

/// `db.sync()` (which looks at the threshold) until a background switch completed.
fn switch_once(db: &Db, ctx: &str) {
    for _ in 0..50 {
        db.sync().unwrap();
        db.wait_for_compaction()
            .unwrap_or_else(|e| panic!("{ctx}: the switch: {e}"));
        if db.compactions() > 0 {
            break;
        }
    }
    assert_eq!(db.compactions(), 1, "{ctx}: no switch");
}

fn insert(db: &Db, k: &[u8], v: &[u8]) {
    let tx = db.begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(k, v).unwrap();
    tx.commit().unwrap();
}

/// The handle's timer takes the current file, then `try_lock`s its writer lock: a switch
/// that completes between the two leaves the timer with the old file and its writer lock
/// free. The timer then looked at the threshold on the old file; when the lock file named a
/// newer commit than the old file's own (the compacted file had committed past it), it took
/// the cross-process writer lock through the old file, failed to rebuild its state from the
/// old inode, and could not let go again (`release_writer_if_on_disk` does nothing for a
/// superseded file): this process held the writer lock with every commit on disk, and other
/// processes could not write until it wrote or synced again.
#[test]
fn a_timer_tick_on_the_old_file_takes_no_writer_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timer.larch");
    // A young file: the compacted file starts at the old one's txid.
    mostly_free(&path, 0);
    let db =
        Db::open_with_storage_as_process(&path, larch_testkit::file_storage, compacting()).unwrap();
    let old = db.begin_read().unwrap();
    switch_once(&db, "young file");
    // Commits on the new file take its txids past the old file's (each releases the writer
    // lock: Sync commits are on disk at once).
    for i in 0..3u32 {
        insert(&db, &i.to_be_bytes(), b"after");
    }
    let newest = db.begin_read().unwrap().txid();
    assert!(
        newest > old.txid(),
        "the new file's txid {newest} is not past the old file's {}: nothing was tested",
        old.txid()
    );
    let other =
        Db::open_with_storage_as_process(&path, larch_testkit::file_storage, Options::default())
            .unwrap();
    // The timer, with the file it took before the switch.
    db.compaction_timer_tick_on(&old);
    let tx = other.try_begin_write().unwrap_or_else(|e| {
        panic!("another process cannot write after a timer tick on the old file: {e}")
    });
    tx.open_tree("t").unwrap().insert(b"other", b"1").unwrap();
    tx.commit().unwrap();
    drop(old);
    // This process follows the other's commit, and writes after it.
    assert_eq!(
        db.begin_read()
            .unwrap()
            .open_tree("t")
            .unwrap()
            .get(b"other")
            .unwrap(),
        Some(&b"1"[..])
    );
    insert(&db, b"mine", b"2");
    db.check().unwrap();
    other.check().unwrap();
    let after = contents(&db);
    drop((db, other));
    let db = Db::open(&path, Options::default()).unwrap();
    db.check().unwrap();
    assert!(contents(&db) == after, "a commit is gone after reopen");
}

/// The same timer tick on the old file when its writer state is current (no lock file, or
/// the lock file naming an older commit than the old file's): it looked at the threshold on
/// the old file, whose free pages the switch gave back but whose writer state still counts
/// them, and recorded a refused compaction ("no longer names this database's file") as the
/// handle's last result: `wait_for_compaction` then failed after a switch that succeeded.
#[test]
fn a_timer_tick_on_the_old_file_starts_and_refuses_nothing() {
    for (lock_file, extra) in [(false, 0u32), (false, 40), (true, 40)] {
        let ctx = format!("lock file {lock_file}, {extra} more commits");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("refused.larch");
        mostly_free(&path, extra);
        let db = if lock_file {
            Db::open(&path, compacting())
        } else {
            Db::open_with_storage(&path, larch_testkit::file_storage(&path), compacting())
        }
        .unwrap();
        let old = db.begin_read().unwrap();
        switch_once(&db, &ctx);
        db.compaction_timer_tick_on(&old);
        let last = db.wait_for_compaction();
        assert!(
            matches!(last, Ok(None)),
            "{ctx}: after a timer tick on the old file, the last compaction: {last:?}"
        );
        assert_eq!(db.compactions_refused(), 0, "{ctx}");
        assert_eq!(db.compactions(), 1, "{ctx}");
        drop(old);
        insert(&db, b"after", b"1");
        db.check()
            .unwrap_or_else(|e| panic!("{ctx}: check after the switch: {e}"));
    }
}

/// Compaction's file-system operations, but the switch's directory fsync (after its rename,
/// before the new file is the handle's) waits until `go` is set.
#[derive(Debug, Default)]
struct DirSyncWaits {
    renamed: AtomicBool,
    paused: AtomicBool,
    go: AtomicBool,
}

impl larch::CompactionFs for DirSyncWaits {
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)?;
        self.renamed.store(true, SeqCst);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        if self.renamed.load(SeqCst) {
            self.paused.store(true, SeqCst);
            while !self.go.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::fs::File::open(dir)?.sync_all()
    }
}

/// A handle as its own process with `fs` and commits of `d`, whose background switch is paused in its
/// directory fsync (the rename done, the lock file reset, the old file still current).
fn paused_switch(path: &Path, fs: &Arc<DirSyncWaits>, d: Durability, ctx: &str) -> Db {
    let db = Db::open_with_storage_as_process_and_fs(
        path,
        larch_testkit::file_storage,
        compacting().durability(d),
        fs.clone(),
    )
    .unwrap();
    'started: for _ in 0..200 {
        db.sync().unwrap();
        for _ in 0..200 {
            if fs.paused.load(SeqCst) {
                break 'started;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert!(
        fs.paused.load(SeqCst),
        "{ctx}: no switch reached its rename"
    );
    db
}

/// [`paused_switch`] of a new [`mostly_free`] file `NAME.larch` with `extra` commits in a new
/// directory (returned: it goes with the file).
fn paused_switch_of(
    name: &str,
    extra: u32,
    d: Durability,
    ctx: &str,
) -> (tempfile::TempDir, std::path::PathBuf, Arc<DirSyncWaits>, Db) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.larch"));
    mostly_free(&path, extra);
    let fs = Arc::new(DirSyncWaits::default());
    let db = paused_switch(&path, &fs, d, ctx);
    (dir, path, fs, db)
}

/// Another process opens while the switch is paused after its rename (it attaches once the
/// switch shares the attach byte again, and waits for the writer lock the switch holds),
/// while this process syncs, reads and commits on threads that took the old file. The other
/// process opens the new file and commits to it as soon as the switch lets go of the writer
/// lock: nothing of this process's old file may publish over that, and this process then
/// reads and writes after the other's commit.
#[test]
fn another_process_opening_during_a_paused_switch_sees_only_the_new_file() {
    for extra in [0u32, 40] {
        let ctx = format!("{extra} more commits");
        let (_dir, path, fs, db) = paused_switch_of("attach", extra, Durability::Sync, &ctx);
        let before = contents(&db);
        let other = std::thread::scope(|s| {
            let opening = s.spawn(|| {
                let other = Db::open_with_storage_as_process(
                    &path,
                    larch_testkit::file_storage,
                    Options::default().durability(Durability::NoMetaSync),
                )?;
                let tx = other.begin_write()?;
                tx.open_tree("t")?.insert(b"other", b"1")?;
                tx.commit()?;
                Ok::<_, larch::Error>(other)
            });
            let syncing = s.spawn(|| db.sync());
            let reading = s.spawn(|| db.begin_read().map(|rx| reader_contents(&rx)));
            let writing = s.spawn(|| -> larch::Result<()> {
                let tx = db.begin_write()?;
                tx.open_tree("t")?.insert(b"mine", b"1")?;
                tx.commit()
            });
            std::thread::sleep(Duration::from_millis(100));
            fs.go.store(true, SeqCst);
            syncing
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: the racing sync: {e}"));
            let read = reading
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: a reader during the switch: {e}"));
            assert!(read == before, "{ctx}: a reader during the switch");
            writing
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: a writer waiting for the switch: {e}"));
            opening
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: the other process: {e}"))
        });
        db.wait_for_compaction()
            .unwrap_or_else(|e| panic!("{ctx}: the switch: {e}"));
        assert_eq!(db.compactions(), 1, "{ctx}");
        for (who, h) in [("this process", &db), ("the other process", &other)] {
            let t = h.begin_read().unwrap().open_tree_owned("t").unwrap();
            assert_eq!(t.get(b"other").unwrap(), Some(&b"1"[..]), "{ctx}: {who}");
            assert_eq!(t.get(b"mine").unwrap(), Some(&b"1"[..]), "{ctx}: {who}");
            h.check()
                .unwrap_or_else(|e| panic!("{ctx}: check in {who}: {e}"));
        }
        insert(&db, b"mine", b"2");
        insert(&other, b"other", b"2");
        db.sync().unwrap();
        other.sync().unwrap();
        let after = contents(&db);
        assert!(contents(&other) == after, "{ctx}: the two processes differ");
        drop((db, other));
        reopened_holds(&path, &after, &ctx);
    }
}

/// While the switch is paused after its rename: an in-place `Db::compact`, Sync writers (with
/// company, so group commit makes followers of them), a `Db::sync` and a reader that holds
/// the old file across the switch, all of this process. The writers and the compaction wait
/// for the old file's writer lock and start over on the new file; the reader's end and its
/// file's close (it holds the last reference) touch no lock-file state. Afterwards another
/// process writes at once and sees every commit, and this process follows it.
#[test]
fn writers_compact_and_a_held_reader_racing_a_paused_switch() {
    for extra in [0u32, 40] {
        let ctx = format!("{extra} more commits");
        let (_dir, path, fs, db) = paused_switch_of("writers", extra, Durability::Sync, &ctx);
        let held = db.begin_read().unwrap();
        let before = reader_contents(&held);
        std::thread::scope(|s| {
            let compacting = s.spawn(|| db.compact().map(|_| ()));
            let writers: Vec<_> = (0..4u32)
                .map(|w| {
                    let db = &db;
                    s.spawn(move || -> larch::Result<()> {
                        for i in 0..5u32 {
                            let tx = db.begin_write()?;
                            tx.open_tree("t")?
                                .insert(format!("w{w}-{i}").as_bytes(), b"1")?;
                            tx.commit()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            let syncing = s.spawn(|| db.sync());
            std::thread::sleep(Duration::from_millis(100));
            fs.go.store(true, SeqCst);
            compacting
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: Db::compact: {e}"));
            for w in writers {
                w.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{ctx}: a writer: {e}"));
            }
            syncing
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: the racing sync: {e}"));
        });
        db.wait_for_compaction()
            .unwrap_or_else(|e| panic!("{ctx}: the switch: {e}"));
        assert_eq!(db.compactions(), 1, "{ctx}");
        // The reader still reads the old file, as it began.
        assert!(reader_contents(&held) == before, "{ctx}: the held reader");
        insert(&db, b"late", b"1");
        // The old file closes here (its last reference).
        drop(held);
        let other = Db::open_with_storage_as_process(
            &path,
            larch_testkit::file_storage,
            Options::default(),
        )
        .unwrap();
        let tx = other
            .try_begin_write()
            .unwrap_or_else(|e| panic!("{ctx}: the other process cannot write: {e}"));
        {
            let t = tx.open_tree("t").unwrap();
            for w in 0..4u32 {
                for i in 0..5u32 {
                    assert_eq!(
                        t.get(format!("w{w}-{i}").as_bytes()).unwrap(),
                        Some(&b"1"[..]),
                        "{ctx}: w{w}-{i}"
                    );
                }
            }
            assert_eq!(t.get(b"late").unwrap(), Some(&b"1"[..]), "{ctx}");
        }
        tx.open_tree("t").unwrap().insert(b"other", b"1").unwrap();
        tx.commit().unwrap();
        assert_eq!(
            db.begin_read()
                .unwrap()
                .open_tree("t")
                .unwrap()
                .get(b"other")
                .unwrap(),
            Some(&b"1"[..]),
            "{ctx}: this process does not see the other's commit"
        );
        insert(&db, b"mine", b"2");
        db.check().unwrap_or_else(|e| panic!("{ctx}: check: {e}"));
        other
            .check()
            .unwrap_or_else(|e| panic!("{ctx}: check in the other process: {e}"));
        let after = contents(&db);
        drop((db, other));
        reopened_holds(&path, &after, &ctx);
    }
}

/// A `Db::sync` that takes the old file just before a background switch makes the new one
/// current: the switch has renamed the new file into place and reset the lock file to the
/// new file's commits, whose txids start again lower. The sync published the old file's
/// newest txid over that reset, so the lock file named a commit the database did not hold:
/// readers and `check` failed, and the next write transaction rebuilt its writer state from
/// an older meta than its own, whose free-page count its trees then contradicted (the file
/// refused writes). Commits of every durability after it. A reader that begins meanwhile
/// reads the old file's newest snapshot, registered in no lock-file slot (the old inode is
/// never written again); also on a young file (`extra` 0), whose new file has the old one's
/// txid.
#[test]
fn a_db_sync_racing_a_switch_does_not_publish_the_old_files_commits() {
    for (d, extra) in [
        (Durability::Sync, 40),
        (Durability::NoMetaSync, 40),
        (Durability::Async, 40),
        (Durability::Sync, 0),
        (Durability::Async, 0),
    ] {
        let ctx = format!("{d:?}, {extra} more commits");
        let (_dir, path, fs, db) = paused_switch_of("race", extra, d, &ctx);
        // Still the old file's (the switch waits in its directory fsync).
        let old_txid = db.begin_read().unwrap().txid();
        let before = contents(&db);
        std::thread::scope(|s| {
            let racing = s.spawn(|| db.sync());
            let reading = s.spawn(|| db.begin_read().map(|rx| (rx.txid(), contents(&db))));
            std::thread::sleep(Duration::from_millis(100));
            fs.go.store(true, SeqCst);
            racing
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: the racing sync: {e}"));
            let (txid, read) = reading
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: a reader during the switch: {e}"));
            assert!(
                read == before,
                "{ctx}: a reader during the switch (txid {txid})"
            );
        });
        db.wait_for_compaction()
            .unwrap_or_else(|e| panic!("{ctx}: the switch: {e}"));
        assert_eq!(db.compactions(), 1, "{ctx}");
        let new_txid = db.begin_read().unwrap().txid();
        assert!(
            extra == 0 || new_txid < old_txid,
            "{ctx}: the new file's txid is {new_txid}, the old file's was {old_txid}: \
             nothing was tested"
        );
        db.check()
            .unwrap_or_else(|e| panic!("{ctx}: check after the switch: {e}"));
        assert!(contents(&db) == before, "{ctx}: the switch lost data");
        for i in 0..5u32 {
            let tx = db
                .begin_write()
                .unwrap_or_else(|e| panic!("{ctx}: write transaction {i} after the switch: {e}"));
            tx.open_tree("t")
                .unwrap()
                .insert(&(i * 10 + 1).to_be_bytes(), b"after")
                .unwrap();
            tx.commit().unwrap();
        }
        db.check()
            .unwrap_or_else(|e| panic!("{ctx}: check after commits on the new file: {e}"));
        let after = contents(&db);
        drop(db);
        reopened_holds(&path, &after, &ctx);
    }
}

/// The switch races at random, not only at the pause above: one thread commits (of every
/// durability, under Null, so the threshold is crossed every few dozen commits) and now and
/// then has a second process open the file, commit and close; beside it, threads that sync,
/// hold snapshots across switches (each must read the same on every look), and tick the
/// compaction timer on the file a held snapshot took, which is often one a switch has left.
/// Every check, the handle's contents, the second process's view and the file after both
/// closed hold every commit. `LARCH_SWITCH_RACES` sets the seeds (default 2).
#[test]
fn threads_and_a_second_process_across_many_switches_keep_every_commit() {
    let seeds: u64 = std::env::var("LARCH_SWITCH_RACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for seed in 1..=seeds {
        let ctx = format!("seed {seed}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("random.larch");
        drop(Db::open(&path, Options::default()).unwrap());
        let opts = compacting()
            .policy(larch::Policy::Null)
            .compaction_threshold(Some(0.25));
        let db =
            Db::open_with_storage_as_process(&path, larch_testkit::file_storage, opts).unwrap();
        let mut model = larch_testkit::images::Model::new();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let syncing = s.spawn(|| -> larch::Result<u64> {
                let mut n = 0;
                while !stop.load(SeqCst) {
                    db.sync()?;
                    n += 1;
                    std::thread::sleep(Duration::from_micros(200 + n % 5 * 200));
                }
                Ok(n)
            });
            let watching = s.spawn(|| -> larch::Result<u64> {
                let mut looks = 0;
                while !stop.load(SeqCst) {
                    let rx = db.begin_read()?;
                    let first = reader_contents(&rx);
                    for _ in 0..4 {
                        std::thread::sleep(Duration::from_millis(2));
                        // The timer, with the file this snapshot took.
                        db.compaction_timer_tick_on(&rx);
                        assert!(reader_contents(&rx) == first, "a held snapshot changed");
                        looks += 1;
                    }
                }
                Ok(looks)
            });
            // Stops the other threads however this one ends (a panic here must fail the
            // test, not leave them looping).
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, SeqCst);
                }
            }
            let stopping = Stop(&stop);
            let mut rng = larch_testkit::Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            for i in 0..400u64 {
                let d = [Durability::Sync, Durability::NoMetaSync, Durability::Async]
                    [rng.below(3) as usize];
                let mut tx = db.begin_write().unwrap();
                tx.set_durability(d);
                let t = model.entry("t".to_string()).or_default();
                {
                    let mut tree = tx.open_tree("t").unwrap();
                    for _ in 0..1 + rng.below(20) {
                        let k = format!("k{:04}", rng.below(500)).into_bytes();
                        let v = vec![rng.below(256) as u8; 50 + rng.below(300) as usize];
                        tree.insert(&k, &v).unwrap();
                        t.insert(k, v);
                    }
                }
                tx.commit()
                    .unwrap_or_else(|e| panic!("{ctx}: commit {i}: {e}"));
                if i % 60 == 59 {
                    // A second process: it waits for the writer lock this one keeps over
                    // unsynced commits until the syncing thread makes them durable.
                    let other = Db::open_with_storage_as_process(
                        &path,
                        larch_testkit::file_storage,
                        Options::default(),
                    )
                    .unwrap_or_else(|e| panic!("{ctx}: the second process's open at {i}: {e}"));
                    assert!(
                        contents(&other) == model,
                        "{ctx}: the second process sees another state at {i}"
                    );
                    let tx = other.begin_write().unwrap();
                    let v = i.to_be_bytes().to_vec();
                    tx.open_tree("t").unwrap().insert(b"other", &v).unwrap();
                    tx.commit().unwrap();
                    model
                        .entry("t".to_string())
                        .or_default()
                        .insert(b"other".to_vec(), v);
                    other
                        .check()
                        .unwrap_or_else(|e| panic!("{ctx}: check in the second process: {e}"));
                }
                if i % 50 == 49 {
                    db.check()
                        .unwrap_or_else(|e| panic!("{ctx}: check after commit {i}: {e}"));
                    assert!(contents(&db) == model, "{ctx}: contents after commit {i}");
                }
            }
            drop(stopping);
            let syncs = syncing
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: sync: {e}"));
            let looks = watching
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{ctx}: a reader: {e}"));
            assert!(
                syncs > 0 && looks > 0,
                "{ctx}: {syncs} syncs, {looks} looks"
            );
        });
        db.wait_for_compaction()
            .unwrap_or_else(|e| panic!("{ctx}: the last compaction: {e}"));
        let switched = db.compactions();
        assert!(switched >= 3, "{ctx}: {switched} switches: too few to race");
        db.check()
            .unwrap_or_else(|e| panic!("{ctx}: check at the end: {e}"));
        assert!(contents(&db) == model, "{ctx}: the handle lost a commit");
        drop(db);
        reopened_holds(&path, &model, &ctx);
        eprintln!("{ctx}: {switched} switches");
    }
}
