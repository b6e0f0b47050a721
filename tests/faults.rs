//! Fault injection: EIO on write, EIO on fdatasync, ENOSPC on write and on growing the file,
//! short writes. The failing commit returns an error, nothing committed before it is lost, a
//! failed sync poisons the handle, and the file reopens at a whole committed state.
//!
//! Each case sweeps the fault over every operation of the failing commit (the k-th write, the
//! k-th sync, the k-th resize) until the commit no longer reaches k. The calls that do not
//! fail reach the real storage of the case's write mode (pwritev, the writable map, or
//! Hybrid's map for Async pages), so a sweep under a mode runs that mode's own writes, growth
//! and syncs around the fault.
//! A real disk-full test (RLIMIT_FSIZE in a child process) closes the file.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use larch::{Db, Durability, FileStorage, Options, Storage, WriteMode};
use larch_testkit::recording::{self, open_rw, Call, FaultPlan};

#[derive(Clone, Copy, Debug)]
struct Fault {
    kind: Call,
    /// Fail the k-th operation of `kind` after arming (0-based).
    at: usize,
    errno: i32,
    /// For writes: write the first half before failing.
    short: bool,
    /// Keep failing from the k-th on (a full disk stays full).
    sticky: bool,
}

#[derive(Debug, Default)]
struct Plan {
    fault: Option<Fault>,
    seen: [usize; 3],
    fired: bool,
    /// (offset, bytes) of every write that reached the file whole.
    written: Vec<(u64, u64)>,
}

/// The plan a test arms, shared with the storage that follows it.
#[derive(Debug, Default)]
struct Planned(Mutex<Plan>);

impl std::ops::Deref for Planned {
    type Target = Mutex<Plan>;
    fn deref(&self) -> &Mutex<Plan> {
        &self.0
    }
}

impl FaultPlan for Planned {
    fn fault(&self, kind: Call) -> Option<recording::Fault> {
        let mut p = self.lock().unwrap();
        let i = kind as usize;
        let n = p.seen[i];
        p.seen[i] += 1;
        match p.fault {
            Some(f)
                if f.kind == kind
                    && (f.at == n || f.sticky && n > f.at)
                    && (f.sticky || !p.fired) =>
            {
                p.fired = true;
                let e = io::Error::from_raw_os_error(f.errno);
                // A short write puts its first half on the file before failing.
                Some(if f.short {
                    recording::Fault::Short(e)
                } else {
                    recording::Fault::Fail(e)
                })
            }
            _ => None,
        }
    }
}

/// The real storage of a write mode, with the calls a plan picks failing before they reach
/// it. A store through the map cannot fail with an error (an I/O error under it raises
/// SIGBUS), so a fault on a deferred write stands for the errors that path can return: the
/// fstat of its end-of-file guard, or an mmap that fails.
#[derive(Debug)]
struct Faulty {
    inner: FileStorage,
    plan: Arc<Planned>,
}

impl Faulty {
    fn write(&self, offset: u64, bufs: &[&[u8]], deferred: bool) -> io::Result<()> {
        let go = |bufs: &[&[u8]]| {
            if deferred {
                self.inner.write_deferred(offset, bufs)
            } else {
                self.inner.write_at(offset, bufs)
            }
        };
        match self.plan.fault(Call::Write) {
            None => {
                go(bufs)?;
                let len = bufs.iter().map(|b| b.len() as u64).sum();
                self.plan.lock().unwrap().written.push((offset, len));
                Ok(())
            }
            Some(recording::Fault::Fail(e)) => Err(e),
            Some(recording::Fault::Short(e)) => {
                let data = bufs.concat();
                go(&[&data[..data.len() / 2]])?;
                Err(e)
            }
        }
    }

    fn fail(&self, call: Call) -> io::Result<()> {
        match self.plan.fault(call) {
            Some(recording::Fault::Fail(e) | recording::Fault::Short(e)) => Err(e),
            None => Ok(()),
        }
    }
}

impl Storage for Faulty {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.fail(Call::SetLen)?;
        self.inner.set_len(len)
    }

    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write(offset, bufs, false)
    }

    fn write_deferred(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write(offset, bufs, true)
    }

    /// Nothing here cuts power, so a sync that does not fail does nothing: a real fdatasync
    /// per commit made the sweeps fifty times slower and checked nothing more.
    fn sync(&self) -> io::Result<()> {
        self.fail(Call::Sync)
    }

    fn file(&self) -> &std::fs::File {
        self.inner.file()
    }
}

/// Open `path` on the real storage of `opts`' write mode, failing calls as the returned plan
/// says.
fn open_faulty(path: &Path, opts: Options) -> (Db, Arc<Planned>) {
    let plan = Arc::new(Planned::default());
    let storage = Faulty {
        inner: FileStorage::new(open_rw(path), opts.get_write_mode()),
        plan: plan.clone(),
    };
    let db = Db::open_with_storage(path, Box::new(storage), opts).unwrap();
    (db, plan)
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Commit `i` (`commit`), its `fail.1`-th write failing with EIO when `fail.0` is `i`. None
/// when that fault was armed and did not fire (the commit made fewer writes).
fn commit_failing<T>(
    plan: &Planned,
    fail: Option<(usize, usize)>,
    i: usize,
    commit: impl FnOnce() -> larch::Result<T>,
) -> Option<larch::Result<T>> {
    let armed = fail.filter(|f| f.0 == i);
    if let Some((_, at)) = armed {
        let mut p = plan.lock().unwrap();
        p.seen = [0; 3];
        p.fault = Some(Fault {
            kind: Call::Write,
            at,
            errno: libc::EIO,
            short: false,
            sticky: false,
        });
    }
    let r = commit();
    let fired = std::mem::take(&mut plan.lock().unwrap().fired);
    if armed.is_some() {
        plan.lock().unwrap().fault = None;
        if !fired {
            return None;
        }
    }
    Some(r)
}

/// Spawning a child process forks: until it execs, the child holds a copy of every open
/// descriptor, flock locks included, so a test thread that closes a database and reopens it
/// at that moment would find it locked. Tests take this shared; the spawning test exclusive.
static FORK: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn no_fork() -> std::sync::RwLockReadGuard<'static, ()> {
    FORK.read().unwrap_or_else(|e| e.into_inner())
}

fn contents(db: &Db) -> Model {
    let rx = db.begin_read().unwrap();
    match rx.open_tree("t") {
        Ok(t) => t
            .iter()
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap(),
        Err(larch::Error::TreeNotFound(_)) => Model::new(),
        Err(e) => panic!("{e}"),
    }
}

/// One commit's worth of changes: enough to split pages, grow the file and write an overflow run.
fn batch(round: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<(Vec<u8>, Vec<u8>)> = (0..150u64)
        .map(|i| {
            let k = format!("k{:05}", (i * 7 + round * 13) % 900).into_bytes();
            (k, vec![(round + i) as u8; 200 + (i as usize % 300)])
        })
        .collect();
    // The commit the faults hit (round 3) stores a value longer than the file's smallest
    // growth step (256 KiB), so it grows the file however full the leaves before it are.
    let big = if round == 3 { 300_000 } else { 20_000 };
    v.push((format!("big{round}").into_bytes(), vec![round as u8; big]));
    v
}

fn apply(db: &Db, changes: &[(Vec<u8>, Vec<u8>)], d: Durability) -> larch::Result<()> {
    let mut tx = db.begin_write()?;
    {
        let mut t = tx.open_tree("t")?;
        for (k, v) in changes {
            t.insert(k, v)?;
        }
    }
    tx.set_durability(d);
    tx.commit()
}

/// How the commits before the faulted one are made: Sync, or (`lead`) as the faulted one, so
/// that under Async in the map modes their pages too are stores through the map, unsynced
/// when the fault hits.
#[derive(Clone, Copy, Debug)]
struct Lead(Durability);

/// Commit a few rounds (with `lead`'s durability), then make round 3 fail at the armed fault;
/// check what the engine says and what the file holds after reopening. Returns false once the
/// fault no longer fires (the sweep is past the last operation of that kind in the commit),
/// after checking that the commit went through whole.
fn one_case(
    dir: &Path,
    fault: Fault,
    d: Durability,
    mode: WriteMode,
    one_fsync: bool,
    lead: Lead,
) -> bool {
    let path = dir.join(format!(
        "f-{:?}-{}-{}-{}-{one_fsync}-{lead:?}.larch",
        fault.kind, fault.at, fault.errno, fault.short
    ));
    let _ = std::fs::remove_file(&path);
    let opts = Options::default()
        .write_mode(mode)
        .one_fsync_commit(one_fsync);
    drop(Db::open(&path, opts).unwrap());
    let (db, plan) = open_faulty(&path, opts);
    let mut model = Model::new();
    for round in 0..3 {
        let b = batch(round);
        apply(&db, &b, lead.0).unwrap();
        model.extend(b);
    }
    let before = model.clone();
    {
        let mut p = plan.lock().unwrap();
        p.seen = [0; 3];
        p.fault = Some(fault);
    }
    let b = batch(3);
    let result = apply(&db, &b, d);
    let fired = plan.lock().unwrap().fired;
    let mut after = before.clone();
    after.extend(b.clone());
    if !fired {
        result.unwrap();
        assert_eq!(
            contents(&db),
            after,
            "{fault:?}: the commit that did not fail"
        );
        db.check()
            .unwrap_or_else(|e| panic!("{fault:?}: check after the commit: {e}"));
        // Disarmed: the close's own writes are past the commit's.
        plan.lock().unwrap().fault = None;
        drop(db);
        let db = Db::open(&path, opts).unwrap();
        db.check()
            .unwrap_or_else(|e| panic!("{fault:?}: check after a clean close: {e}"));
        assert_eq!(
            contents(&db),
            after,
            "{fault:?}: reopened after a clean close"
        );
        return false;
    }
    let err = result.expect_err("a commit whose I/O failed must report it");
    // The system's error, matchable without reading the message, and disk full recognised.
    match &err {
        larch::Error::Io { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(fault.errno), "{fault:?}: {err}")
        }
        other => panic!("{fault:?}: expected Error::Io, got {other:?}"),
    }
    assert_eq!(err.is_disk_full(), fault.errno == libc::ENOSPC, "{err}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "{err}: no source"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(path.to_str().unwrap()),
        "error names the file: {msg}"
    );
    plan.lock().unwrap().fault = None;
    // A failed sync, or a failed meta write (the meta may be on disk whole, torn or not at
    // all, so the writer cannot tell which pages a fallback reaches), poisons the handle.
    let poisoned = fault.kind == Call::Sync || msg.contains("write meta");
    if poisoned {
        // Poisoned: every later call fails with a clear error until reopen.
        let again =
            apply(&db, &batch(4), Durability::Sync).expect_err("poisoned handle accepted a commit");
        assert!(
            matches!(again, larch::Error::Poisoned { .. }) && again.to_string().contains("reopen"),
            "poison error says to reopen: {again:?}"
        );
        assert!(db.sync().is_err());
        assert!(db.begin_read().is_err(), "poisoned handle still reads");
    } else {
        // A failed page write or resize leaves the handle usable, at the previous commit.
        assert_eq!(contents(&db), before, "failed commit changed visible state");
        db.check()
            .unwrap_or_else(|e| panic!("{fault:?}: check after failed commit: {e}"));
        let b4 = batch(4);
        apply(&db, &b4, Durability::Sync).unwrap();
        let mut m = before.clone();
        m.extend(b4);
        assert_eq!(contents(&db), m);
        db.check().unwrap();
        drop(db);
        let db = Db::open(&path, opts).unwrap();
        db.check().unwrap();
        assert_eq!(contents(&db), m, "{fault:?}: reopened state differs");
        return true;
    }
    drop(db);
    let db = Db::open(&path, opts).unwrap_or_else(|e| panic!("{fault:?}: reopen failed: {e}"));
    db.check()
        .unwrap_or_else(|e| panic!("{fault:?}: check after reopen: {e}"));
    let got = contents(&db);
    // The failed commit either never reached a durable meta (state before) or, when only the
    // final sync failed, its meta and all its pages had been written (state after): whole.
    assert!(
        got == before || got == after,
        "{fault:?}: reopened at a mix of states"
    );
    true
}

/// A commit's writes that reached the file: (offset, bytes) of each.
type Writes = Vec<(u64, u64)>;

/// One-key commits after a load, the `fail.0`-th of them failing at its `fail.1`-th write
/// and then retried; the writes of each commit (offset, bytes), the retry's for the failed
/// one. None once that commit has fewer writes than `fail.1`; Some(None) when the failed
/// write was a meta's (the handle is poisoned until reopened, and nothing is retried).
fn retried_commits(
    dir: &Path,
    opts: Options,
    d: Durability,
    fail: Option<(usize, usize)>,
) -> Option<Option<Vec<Writes>>> {
    const COMMITS: usize = 10;
    let path = dir.join(format!("retry-{d:?}-{fail:?}.larch"));
    let _ = std::fs::remove_file(&path);
    let value = |i: u32| vec![i as u8; 40];
    {
        // A load, then a commit that copies about every other leaf: the free set holds
        // single pages and one run of four (pages 2-5, which the first commit after the
        // reopen takes), so the second commit places its hot run past the high-water mark
        // (once per open file).
        let db = Db::open(&path, opts).unwrap();
        for step in [1, 150] {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in (0..3000u32).step_by(step) {
                    t.insert(&i.to_be_bytes(), &value(i + step as u32)).unwrap();
                }
            }
            tx.commit().unwrap();
        }
    }
    let (db, plan) = open_faulty(&path, opts);
    let commit = |i: usize| {
        // Spread over the leaves, the same length: no split.
        let key = (i as u32 * 7919) % 3000;
        let mut tx = db.begin_write()?;
        tx.open_tree("t")?
            .insert(&key.to_be_bytes(), &value(i as u32 + 1))?;
        tx.set_durability(d);
        tx.commit()
    };
    let mut writes = Vec::new();
    for i in 0..COMMITS {
        // None: the fault was armed and the commit made fewer writes.
        let r = commit_failing(&plan, fail, i, || commit(i))?;
        if fail.map(|f| f.0) == Some(i) {
            r.expect_err("the faulted commit failed");
            plan.lock().unwrap().written.clear();
            match commit(i) {
                Ok(()) => {}
                // The meta's write (a Sync commit's last) failed: poisoned until reopen.
                Err(larch::Error::Poisoned { .. }) => return Some(None),
                Err(e) => panic!("the retry of commit {i}: {e}"),
            }
        } else {
            r.unwrap();
        }
        writes.push(std::mem::take(&mut plan.lock().unwrap().written));
    }
    db.sync().unwrap();
    db.check().unwrap();
    Some(Some(writes))
}

/// A commit whose page write failed, retried, writes what and where the same commit writes
/// when nothing failed, and so do the commits after it: a failed commit leaves nothing behind
/// in the writer's allocation state (the free set, the high-water mark, where the hot run
/// goes and the once-per-file growth that places it past the high-water mark).
#[test]
fn a_failed_commit_retried_writes_where_it_would_have_had_nothing_failed() {
    let _g = no_fork();
    let dir = tempfile::tempdir().unwrap();
    use larch::Policy;
    for policy in [Policy::FirstFit, Policy::BestFit, Policy::Null] {
        for d in [Durability::Sync, Durability::NoMetaSync, Durability::Async] {
            let opts = Options::default().policy(policy);
            let clean = retried_commits(dir.path(), opts, d, None)
                .flatten()
                .unwrap();
            each_write_failed_retried(&clean, &format!("{policy:?} {d:?}"), |j, k| {
                retried_commits(dir.path(), opts, d, Some((j, k)))
            });
        }
    }
}

/// Each commit `j` of `clean`'s run failing at each of its writes `k` in turn and retried
/// (`run(j, k)`: None once the commit has no write `k`, Some(None) when the fault poisoned the
/// handle): from commit `j` on, the run writes what and where `clean` wrote. At least one
/// faulted run per commit.
fn each_write_failed_retried(
    clean: &[Writes],
    what: &str,
    mut run: impl FnMut(usize, usize) -> Option<Option<Vec<Writes>>>,
) {
    let mut cases = 0;
    for j in 0..clean.len() {
        for k in 0.. {
            let Some(got) = run(j, k) else {
                break;
            };
            let Some(got) = got else {
                continue;
            };
            cases += 1;
            assert_eq!(
                got[j..],
                clean[j..],
                "{what}: commit {j} failed at its write {k}, retried"
            );
        }
    }
    assert!(cases >= clean.len(), "{what}: {cases} faulted commits");
}

fn sweep(kind: Call, errno: i32, short: bool, d: Durability, mode: WriteMode) -> usize {
    sweep_with(kind, errno, short, d, mode, true, Lead(Durability::Sync))
}

/// `sweep`, choosing the Sync commit protocol (one fdatasync, or LMDB's two) and how the
/// commits before the faulted one are made.
fn sweep_with(
    kind: Call,
    errno: i32,
    short: bool,
    d: Durability,
    mode: WriteMode,
    one_fsync: bool,
    lead: Lead,
) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let mut cases = 0;
    let sticky = errno == libc::ENOSPC;
    for at in 0.. {
        if !one_case(
            dir.path(),
            Fault {
                kind,
                at,
                errno,
                short,
                sticky,
            },
            d,
            mode,
            one_fsync,
            lead,
        ) {
            break;
        }
        cases += 1;
    }
    eprintln!(
        "{kind:?} errno {errno} short {short} {d:?} {mode:?} one-fsync {one_fsync} {lead:?}: {cases} fault positions"
    );
    cases
}

#[test]
fn eio_on_any_write_fails_the_commit_and_keeps_the_previous_state() {
    let _serial = no_fork();
    for d in [Durability::Sync, Durability::NoMetaSync, Durability::Async] {
        let n = sweep(Call::Write, libc::EIO, false, d, WriteMode::Pwrite);
        assert!(
            n >= 2,
            "{d:?}: the commit should make several writes, saw {n}"
        );
    }
    let n = sweep_with(
        Call::Write,
        libc::EIO,
        false,
        Durability::Sync,
        WriteMode::Pwrite,
        false,
        Lead(Durability::Sync),
    );
    assert!(n >= 2, "two-sync commit: saw {n} writes");
    // The map modes: every page of an Mmap commit, and an Async commit's pages under Hybrid
    // (`write_deferred`), are stores through the writable map; the commits before the failed
    // one are made the same way, so their stores are unsynced when it fails.
    for mode in [WriteMode::Mmap, WriteMode::Hybrid] {
        for d in [Durability::Sync, Durability::Async] {
            let n = sweep_with(Call::Write, libc::EIO, false, d, mode, true, Lead(d));
            assert!(n >= 2, "{mode:?} {d:?}: saw {n} writes");
        }
    }
}

#[test]
fn short_write_then_enospc_fails_the_commit_and_keeps_the_previous_state() {
    let _serial = no_fork();
    let n = sweep(
        Call::Write,
        libc::ENOSPC,
        true,
        Durability::Sync,
        WriteMode::Pwrite,
    );
    assert!(n >= 2);
}

#[test]
fn enospc_growing_the_file_fails_the_commit_and_keeps_the_previous_state() {
    let _serial = no_fork();
    for mode in WriteMode::ALL {
        let n = sweep(Call::SetLen, libc::ENOSPC, false, Durability::Sync, mode);
        assert!(n >= 1, "{mode:?}: growing the file never failed");
    }
}

#[test]
fn eio_on_fdatasync_poisons_the_handle_and_reopen_finds_a_whole_state() {
    let _serial = no_fork();
    for d in [Durability::Sync, Durability::NoMetaSync] {
        let n = sweep(Call::Sync, libc::EIO, false, d, WriteMode::Pwrite);
        assert!(n >= 1, "{d:?}: no sync to fail");
    }
    // The two-sync protocol (pages, fdatasync, meta, fdatasync): a failure at either sync.
    let n = sweep_with(
        Call::Sync,
        libc::EIO,
        false,
        Durability::Sync,
        WriteMode::Pwrite,
        false,
        Lead(Durability::Sync),
    );
    assert!(n >= 2, "the two-sync commit failed at {n} syncs, not both");
}

#[test]
fn eio_on_db_sync_after_async_commits_poisons_the_handle() {
    let _serial = no_fork();
    // Under Hybrid the Async commit's pages went through the map: the failed fdatasync is
    // the one that would have written them back.
    for (mode, one_fsync) in WriteMode::ALL
        .into_iter()
        .flat_map(|m| [(m, true), (m, false)])
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.larch");
        let opts = Options::default()
            .one_fsync_commit(one_fsync)
            .write_mode(mode);
        drop(Db::open(&path, opts).unwrap());
        let (db, plan) = open_faulty(&path, opts);
        apply(&db, &batch(0), Durability::Sync).unwrap();
        apply(&db, &batch(1), Durability::Async).unwrap();
        plan.lock().unwrap().seen = [0; 3];
        plan.lock().unwrap().fault = Some(Fault {
            kind: Call::Sync,
            at: 0,
            errno: libc::EIO,
            short: false,
            sticky: false,
        });
        let e = db.sync().expect_err("failed fdatasync must be reported");
        assert!(e.to_string().contains("fdatasync"), "{e}");
        assert!(db.begin_write().is_err());
        drop(db);
        let db = Db::open(&path, opts).unwrap();
        db.check().unwrap();
        let mut before = Model::new();
        before.extend(batch(0));
        let mut after = before.clone();
        after.extend(batch(1));
        let got = contents(&db);
        if one_fsync {
            // The meta listing the Async commit's pages went out before the failed sync: the
            // file holds it whole (its pages verified) or not at all.
            assert!(
                got == before || got == after,
                "{mode:?} one-fsync: reopened at a mix of states"
            );
        } else {
            // Pages are synced before any meta is written: the failed sync wrote no meta.
            assert!(
                got == before,
                "{mode:?}: an Async commit whose sync failed must not survive as durable"
            );
        }
    }
}

/// A failed edit leaves the transaction usable: a disk-full error from the first append of a
/// handle (whose value goes to an overflow run) comes after the append copied the tree's
/// rightmost path, freeing the pages it copied. Committing the transaction must then record
/// the tree's new root too, or the catalog keeps the old one while its pages go back to the
/// free set, to be overwritten by later commits.
#[test]
fn a_failed_append_then_a_commit_keeps_the_tree_whole() {
    let _serial = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("append.larch");
    let opts = Options::default();
    drop(Db::open(&path, opts).unwrap());
    let (db, plan) = open_faulty(&path, opts);
    let value = [7u8; 100];
    apply(
        &db,
        &(0..5_000u32)
            .map(|i| (i.to_be_bytes().to_vec(), value.to_vec()))
            .collect::<Vec<_>>(),
        Durability::Sync,
    )
    .unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_tree("t").unwrap();
        // The disk is full: the 300 KB value needs the file to grow.
        plan.lock().unwrap().fault = Some(Fault {
            kind: Call::SetLen,
            at: 0,
            errno: libc::ENOSPC,
            short: false,
            sticky: true,
        });
        let r = t.append(&u32::MAX.to_be_bytes(), &vec![9u8; 300_000]);
        plan.lock().unwrap().fault = None;
        assert!(r.as_ref().is_err_and(|e| e.is_disk_full()), "{r:?}");
        assert_eq!(t.len().unwrap(), 5_000);
    }
    tx.open_tree("u").unwrap().insert(b"k", b"v").unwrap();
    tx.commit().unwrap();
    db.check().unwrap();
    // Later commits reuse what the first one freed.
    for c in 0..50u32 {
        apply(
            &db,
            &(0..200u32)
                .map(|i| {
                    (
                        (1_000_000 + c * 1_000 + i).to_be_bytes().to_vec(),
                        value.to_vec(),
                    )
                })
                .collect::<Vec<_>>(),
            Durability::Sync,
        )
        .unwrap();
    }
    db.check().unwrap();
    let got = contents(&db);
    assert_eq!(got.len(), 5_000 + 50 * 200);
    for i in 0..5_000u32 {
        assert_eq!(
            got.get(&i.to_be_bytes()[..]),
            Some(&value.to_vec()),
            "key {i}"
        );
    }
}

/// A long append writes its full leaves before the commit, a batch at a time
/// (`IoStats::spilled_pages`; docs/format.md, "Pages written before the commit"). Each of
/// those writes failing (EIO, a short write), and the file's growth for them failing (the disk
/// full), fails the append that made it and changes nothing: the tree has the entries it had
/// before that append. The append made again goes through, reads in the transaction see
/// every entry (some in leaves written already, some dirty), and the commit holds them all,
/// checks clean and reopens with them. Swept over the first writes and resizes the appends
/// make, on a file with committed data and on a new one (the appends start a tree there).
#[test]
fn a_failed_write_of_an_appended_leaf_before_the_commit_changes_nothing() {
    let _serial = no_fork();
    larch::set_spill_batch(2);
    let faults = [
        (Call::Write, libc::EIO, false, false),
        (Call::Write, libc::EIO, true, false),
        (Call::SetLen, libc::ENOSPC, false, true),
    ];
    let mut fired = [0usize; 3];
    for (f, &(kind, errno, short, sticky)) in faults.iter().enumerate() {
        for at in 0..8 {
            for existing in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("spill.larch");
                let opts = Options::default();
                drop(Db::open(&path, opts).unwrap());
                let (db, plan) = open_faulty(&path, opts);
                let mut expect = Model::new();
                if existing {
                    let seed: Vec<_> = (0..3_000u32)
                        .map(|i| (format!("a{i:08}").into_bytes(), vec![3u8; 100]))
                        .collect();
                    apply(&db, &seed, Durability::Sync).unwrap();
                    expect.extend(seed);
                }
                let spilled_before = db.io_stats().spilled_pages;
                let tx = db.begin_write().unwrap();
                let mut failed = None;
                {
                    let mut t = tx.open_tree("t").unwrap();
                    {
                        let mut p = plan.lock().unwrap();
                        p.seen = [0; 3];
                        p.fired = false;
                        p.fault = Some(Fault {
                            kind,
                            at,
                            errno,
                            short,
                            sticky,
                        });
                    }
                    for i in 0..3_000u32 {
                        let k = format!("k{i:08}").into_bytes();
                        let v = vec![(i % 251) as u8; 150 + (i % 7) as usize * 20];
                        let len = t.len().unwrap();
                        let last = t.last().unwrap().map(|(k, _)| k.to_vec());
                        if let Err(e) = t.append(&k, &v) {
                            assert!(failed.is_none(), "{kind:?} {at}: a second failure: {e}");
                            failed = Some(i);
                            plan.lock().unwrap().fault = None;
                            assert_eq!(t.len().unwrap(), len, "{kind:?} {at}: append {i}");
                            assert_eq!(
                                t.last().unwrap().map(|(k, _)| k.to_vec()),
                                last,
                                "{kind:?} {at}: append {i}"
                            );
                            t.append(&k, &v).unwrap();
                        }
                        expect.insert(k, v);
                    }
                    plan.lock().unwrap().fault = None;
                    for (k, v) in &expect {
                        assert_eq!(t.get(k).unwrap(), Some(&v[..]), "{kind:?} {at}");
                    }
                    let seen: Model = t
                        .iter()
                        .unwrap()
                        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
                        .collect::<Result<_, _>>()
                        .unwrap();
                    assert_eq!(seen, expect, "{kind:?} {at}: read in the transaction");
                }
                if failed.is_some() {
                    fired[f] += 1;
                }
                tx.commit().unwrap();
                assert!(db.io_stats().spilled_pages > spilled_before);
                db.check().unwrap();
                let got = contents(&db);
                assert_eq!(got, expect, "{kind:?} {at} existing {existing}");
                drop(db);
                let db = Db::open(&path, opts).unwrap();
                db.check().unwrap();
                let again = contents(&db);
                assert_eq!(again, expect, "{kind:?} {at} existing {existing}, reopened");
            }
        }
    }
    larch::set_spill_batch(0);
    // Every write of the first eight fails an append (each is a spill's); resizes come
    // seldom (the file grows in steps), so the sticky full disk fails at least the first.
    assert_eq!(fired[0], 16, "{fired:?}");
    assert_eq!(fired[1], 16, "{fired:?}");
    assert!(fired[2] >= 2, "{fired:?}");
}

/// Real disk full: a child process with RLIMIT_FSIZE (SIGXFSZ ignored) commits until the
/// file cannot grow; the parent reopens and checks everything the child acknowledged.
#[test]
fn real_file_size_limit_fails_commits_cleanly_and_keeps_acknowledged_data() {
    if let Ok(path) = std::env::var("LARCH_FSIZE_CHILD") {
        return fsize_child(Path::new(&path));
    }
    let _serial = FORK.write().unwrap_or_else(|e| e.into_inner());
    // Hybrid: three commits in four are Async, their pages stored through the writable map
    // into space the growth allocated; the failing growth must be an error, not a SIGBUS.
    for mode in ["pwrite", "mmap", "hybrid"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.larch");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "real_file_size_limit_fails_commits_cleanly_and_keeps_acknowledged_data",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LARCH_FSIZE_CHILD", &path)
            .env("LARCH_FSIZE_MODE", mode)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let acked: u64 = stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("acked "))
            .and_then(|n| n.trim().parse().ok())
            .expect("child acked nothing");
        assert!(
            stdout.contains("full: "),
            "the child never hit the limit: {stdout}"
        );
        let db = Db::open(&path, Options::default()).unwrap();
        db.check().unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_tree("t").unwrap();
        for i in 0..acked {
            assert_eq!(
                t.get(&i.to_be_bytes()).unwrap(),
                Some(&[i as u8; 3000][..]),
                "{mode}: acked key {i} lost"
            );
        }
    }
}

fn fsize_child(path: &Path) {
    let mode = match std::env::var("LARCH_FSIZE_MODE").as_deref() {
        Ok("mmap") => WriteMode::Mmap,
        Ok("hybrid") => WriteMode::Hybrid,
        _ => WriteMode::Pwrite,
    };
    // SAFETY (test-only FFI): ignore SIGXFSZ so exceeding the limit is an EFBIG error, and cap
    // the file size of this child process at 2 MiB.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let lim = libc::rlimit {
            rlim_cur: 2 << 20,
            rlim_max: 2 << 20,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
    let db = Db::open(path, Options::default().write_mode(mode)).unwrap();
    let mut n = 0u64;
    loop {
        let r = (|| {
            let mut tx = db.begin_write()?;
            {
                let mut t = tx.open_tree("t")?;
                for i in n..n + 20 {
                    t.insert(&i.to_be_bytes(), &[i as u8; 3000])?;
                }
            }
            if mode == WriteMode::Hybrid && n % 80 != 60 {
                tx.set_durability(Durability::Async);
            }
            tx.commit()
        })();
        match r {
            Ok(()) => {
                n += 20;
                println!("acked {n}");
            }
            Err(e) => {
                assert!(e.is_disk_full(), "expected a disk-full error, got: {e}");
                assert!(matches!(e, larch::Error::Io { .. }), "{e:?}");
                println!("full: {e}");
                break;
            }
        }
        assert!(n < 100_000, "the size limit never bit");
    }
    // Still usable for reads, and a smaller commit may still fit in preallocated space or not:
    // either way no corruption.
    db.check().unwrap();
    // The acknowledged Async commits (hybrid) become durable without growing the file.
    db.sync().unwrap();
}

/// Everything tree "t" holds in `rx`'s snapshot.
fn snapshot_contents(rx: &larch::ReadTx) -> Model {
    rx.open_tree("t")
        .unwrap()
        .iter()
        .unwrap()
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The file at `path` as it is now (every write so far, as after a process crash), opened at
/// each meta on it that is `durable` or newer (the newest, and the other slot's while it is
/// still the crash fallback: the newest then made to look torn): each must open at exactly
/// that commit, check clean and hold what that commit held. A page such a meta reaches that a
/// later write (a failed commit's, a retry's, one after it) overwrote fails one of these.
fn check_metas_on_file(
    path: &Path,
    opts: Options,
    durable: u64,
    states: &BTreeMap<u64, Model>,
    what: &str,
) {
    use larch::raw::{Meta, META_SIZE};
    let img = std::fs::read(path).unwrap();
    let ps = opts.get_page_size();
    let metas: Vec<(usize, Meta)> = (0..2)
        .filter_map(|slot| {
            Meta::decode(&img[slot * ps..slot * ps + META_SIZE])
                .ok()
                .map(|m| (slot, m))
        })
        .collect();
    let newest = metas.iter().map(|m| m.1.txid).max().unwrap();
    assert!(
        newest >= durable,
        "{what}: no meta on the file at {durable} or newer"
    );
    let copy = path.with_extension("image");
    for &(slot, m) in &metas {
        if m.txid < durable {
            continue;
        }
        let mut cut = img.clone();
        if m.txid != newest {
            let other = 1 - slot;
            cut[other * ps..(other + 1) * ps].fill(0);
        }
        std::fs::write(&copy, &cut).unwrap();
        let db = Db::open(&copy, opts)
            .unwrap_or_else(|e| panic!("{what}: the file at meta {}: {e}", m.txid));
        db.check()
            .unwrap_or_else(|e| panic!("{what}: the file at meta {}: {e}", m.txid));
        let txid = db.begin_read().unwrap().txid();
        assert_eq!(
            txid, m.txid,
            "{what}: the file opened at another commit than its meta {}",
            m.txid
        );
        let want = states
            .get(&txid)
            .unwrap_or_else(|| panic!("{what}: meta {txid} on the file was never committed"));
        assert!(
            contents(&db) == *want,
            "{what}: the file at meta {txid} holds other data than that commit"
        );
        drop(db);
        std::fs::remove_file(&copy).unwrap();
    }
}

/// [`retried_commits`] with readers held across the failure and the retry: one from before
/// the first commit after the reopen to the third (the second places its hot run past the
/// high-water mark, once per open file), one from after that commit to the sixth, and one
/// from the seventh to the end. The `fail.0`-th commit fails at its `fail.1`-th write and is
/// retried. After the failure, after the retry and at the end the metas on the file that can
/// still be fallen back to open at their commit whole (`check_metas_on_file`); after every
/// commit every held reader still reads exactly the state it began with. None once that commit
/// has fewer writes than `fail.1`; Some(None) when the failed write was a meta's (poisoned).
fn retried_commits_with_readers(
    dir: &Path,
    opts: Options,
    d: Durability,
    fail: Option<(usize, usize)>,
) -> Option<Option<(Vec<Writes>, Vec<u64>)>> {
    const COMMITS: usize = 10;
    let path = dir.join(format!("readers-{d:?}-{fail:?}.larch"));
    let _ = std::fs::remove_file(&path);
    let value = |i: u32| vec![i as u8; 40];
    let mut states: BTreeMap<u64, Model> = BTreeMap::new();
    {
        // As in `retried_commits`: the free set holds single pages and the run the first
        // commit after the reopen takes, so the second takes the growth.
        let db = Db::open(&path, opts).unwrap();
        for step in [1, 150] {
            let tx = db.begin_write().unwrap();
            let txid = tx.txid();
            {
                let mut t = tx.open_tree("t").unwrap();
                for i in (0..3000u32).step_by(step) {
                    t.insert(&i.to_be_bytes(), &value(i + step as u32)).unwrap();
                }
            }
            tx.commit().unwrap();
            states.insert(txid, contents(&db));
        }
    }
    let (db, plan) = open_faulty(&path, opts);
    // The high-water mark each commit began with.
    let mut marks = Vec::new();
    let commit = |i: usize| {
        let key = (i as u32 * 7919) % 3000;
        let mut tx = db.begin_write()?;
        let txid = tx.txid();
        tx.open_tree("t")?
            .insert(&key.to_be_bytes(), &value(i as u32 + 1))?;
        tx.set_durability(d);
        tx.commit().map(|()| txid)
    };
    let label = |what: &str| format!("{:?} {d:?} fail {fail:?}: {what}", opts.get_policy());
    let mut readers: Vec<(usize, larch::ReadTx, Model)> = Vec::new();
    let check_readers = |readers: &[(usize, larch::ReadTx, Model)], what: &str| {
        for (from, rx, want) in readers {
            assert!(
                snapshot_contents(rx) == *want,
                "{}: the reader from before commit {from} (txid {}) reads another state",
                label(what),
                rx.txid()
            );
        }
    };
    let durable = |db: &Db| db.stats().unwrap().durable_txid;
    let mut writes = Vec::new();
    for i in 0..COMMITS {
        // Readers: (taken before commit i, ended before commit i).
        for (take, end) in [(0, 3), (1, 6), (7, COMMITS)] {
            if i == end {
                readers.retain(|r| r.0 != take);
            }
            if i == take {
                let rx = db.begin_read().unwrap();
                let m = snapshot_contents(&rx);
                readers.push((take, rx, m));
            }
        }
        marks.push(db.stats().unwrap().high_water);
        let durable_before = durable(&db);
        // None: the fault was armed and the commit made fewer writes.
        let r = commit_failing(&plan, fail, i, || commit(i))?;
        if fail.map(|f| f.0) == Some(i) {
            r.expect_err("the faulted commit failed");
            if let Err(larch::Error::Poisoned { .. }) = db.stats() {
                // The meta's write failed: poisoned until reopened, nothing is retried. The
                // file still opens at each meta that may be fallen back to.
                let what = label(&format!("commit {i} failed at its meta"));
                check_metas_on_file(&path, opts, durable_before, &states, &what);
                return Some(None);
            }
            assert_eq!(
                db.stats().unwrap().high_water,
                marks[i],
                "{}",
                label(&format!("commit {i} failed: the high-water mark"))
            );
            let what = label(&format!("commit {i} failed"));
            check_readers(&readers, &what);
            check_metas_on_file(&path, opts, durable(&db), &states, &what);
            plan.lock().unwrap().written.clear();
            match commit(i) {
                Ok(txid) => {
                    states.insert(txid, contents(&db));
                }
                Err(larch::Error::Poisoned { .. }) => return Some(None),
                Err(e) => panic!("the retry of commit {i}: {e}"),
            }
            let what = label(&format!("commit {i} retried"));
            check_readers(&readers, &what);
            check_metas_on_file(&path, opts, durable(&db), &states, &what);
        } else {
            let txid = r.unwrap();
            states.insert(txid, contents(&db));
            check_readers(&readers, &label(&format!("commit {i}")));
        }
        writes.push(std::mem::take(&mut plan.lock().unwrap().written));
    }
    check_metas_on_file(
        &path,
        opts,
        durable(&db),
        &states,
        &label("the last commit"),
    );
    check_readers(&readers, &label("the end"));
    drop(readers);
    db.sync().unwrap();
    db.check().unwrap();
    check_metas_on_file(&path, opts, durable(&db), &states, &label("after a sync"));
    drop(db);
    Some(Some((writes, marks)))
}

/// A commit that places its hot run past the high-water mark (the once-per-file growth) and
/// fails, retried, with readers held from before it and after it, and every later commit
/// failing and retried in turn (a failure after the growth landed): the retry and the commits
/// after it write where they would had nothing failed (so the retry takes the growth back),
/// and no write of the failed commit, its retry or a later one lands on a page a held reader,
/// the newest meta on the file or the crash fallback reaches.
#[test]
fn a_failed_growing_commit_retried_with_readers_held_overwrites_nothing_they_or_the_file_reach() {
    let _g = no_fork();
    let dir = tempfile::tempdir().unwrap();
    use larch::Policy;
    for policy in [Policy::FirstFit, Policy::BestFit] {
        for d in [Durability::Sync, Durability::NoMetaSync, Durability::Async] {
            // Every commit saves its free map, so the hot runs hold its slots and one outgrows
            // the free runs (a commit carries its free-map changes otherwise).
            let opts = Options::default().policy(policy).carried_max_bits(1);
            let (clean, marks) = retried_commits_with_readers(dir.path(), opts, d, None)
                .flatten()
                .unwrap();
            // The scenario does what it is for: a commit writes past the high-water mark it
            // began with (its hot run, in the file's room: the once-per-file growth).
            let ps = opts.get_page_size() as u64;
            let grew: Vec<usize> = (0..clean.len())
                .filter(|&i| clean[i].iter().any(|&(off, _)| off >= marks[i] * ps))
                .collect();
            assert!(
                !grew.is_empty(),
                "{policy:?} {d:?}: no commit wrote past its high-water mark: {clean:?} {marks:?}"
            );
            each_write_failed_retried(&clean, &format!("{policy:?} {d:?}"), |j, k| {
                retried_commits_with_readers(dir.path(), opts, d, Some((j, k)))
                    .map(|got| got.map(|(writes, _)| writes))
            });
        }
    }
}
