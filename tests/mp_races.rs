//! Races between the threads of one process and another process's writer (docs/format.md,
//! "Several processes"), made deterministic: two handles opened with
//! `Db::open_with_storage_as_process` stand for two processes, and a storage hook runs the
//! other side of the race at the exact storage call where it would hurt.

use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larch::{CompactionFs, Db, Durability, FileStorage, Options, Policy, Storage, WriteMode};
use larch_testkit::scratch_dir;

type HookFn = Box<dyn FnOnce() + Send>;

/// Runs a closure once, at the next `len` or `sync` call after it is armed.
#[derive(Default)]
struct Hook {
    on_len: Mutex<Option<HookFn>>,
    on_sync: Mutex<Option<HookFn>>,
    /// Syncs to let pass before `on_sync` runs.
    skip_syncs: AtomicUsize,
    fired: AtomicBool,
}

impl Hook {
    fn arm_len(&self, f: impl FnOnce() + Send + 'static) {
        *self.on_len.lock().unwrap() = Some(Box::new(f));
    }
    fn arm_sync(&self, f: impl FnOnce() + Send + 'static) {
        *self.on_sync.lock().unwrap() = Some(Box::new(f));
    }
    fn run(&self, slot: &Mutex<Option<HookFn>>) {
        let f = slot.lock().unwrap().take();
        if let Some(f) = f {
            f();
            self.fired.store(true, Ordering::Release);
        }
    }
    fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

/// A file storage that runs the hook's closures.
struct Hooked {
    inner: FileStorage,
    hook: Arc<Hook>,
}

impl fmt::Debug for Hooked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooked").finish()
    }
}

impl Storage for Hooked {
    fn len(&self) -> std::io::Result<u64> {
        self.hook.run(&self.hook.on_len);
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> std::io::Result<()> {
        self.inner.write_at(offset, bufs)
    }
    fn sync(&self) -> std::io::Result<()> {
        let skip = &self.hook.skip_syncs;
        if skip
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_err()
        {
            self.hook.run(&self.hook.on_sync);
        }
        self.inner.sync()
    }
    fn file(&self) -> &File {
        self.inner.file()
    }
}

fn open_rw(path: &Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// A handle standing for another process, and one whose storage calls run `hook`.
fn two_processes(path: &Path, opts: Options) -> (Db, Db, Arc<Hook>) {
    drop(Db::open(path, opts).unwrap());
    let plain = Db::open_with_storage_as_process(
        path,
        |_| Box::new(FileStorage::new(open_rw(path), WriteMode::Pwrite)),
        opts,
    )
    .unwrap();
    let hook = Arc::new(Hook::default());
    let hooked = Db::open_with_storage_as_process(
        path,
        |_| {
            Box::new(Hooked {
                inner: FileStorage::new(open_rw(path), WriteMode::Pwrite),
                hook: hook.clone(),
            })
        },
        opts,
    )
    .unwrap();
    (plain, hooked, hook)
}

fn put(db: &Db, k: &[u8], v: &[u8], d: Durability) {
    let mut tx = db.begin_write().unwrap();
    tx.set_durability(d);
    tx.open_tree("t").unwrap().insert(k, v).unwrap();
    tx.commit().unwrap();
}

fn get(db: &Db, k: &[u8]) -> Option<Vec<u8>> {
    let rx = db.begin_read().unwrap();
    let t = rx.open_tree("t").ok()?;
    let v = t.get(k).unwrap().map(|v| v.to_vec());
    v
}

/// A reader that catches up with another process's commit `T1` reads its meta; if a writer
/// thread of its own process commits `T2` meanwhile (here Async, which other processes do not
/// see), the reader must not then make `T1` the snapshot new readers and the next write
/// transaction start from: `T2` would vanish from this process's reads, and the next commit
/// would reuse txid `T2` on top of `T1`, losing it.
#[test]
fn a_reader_catching_up_never_hides_a_newer_commit_of_its_own_process() {
    for opts in both_free_map_caps() {
        reader_catching_up_with(opts);
    }
}

/// The default options, where every meta of these small files leaves its free map behind,
/// and options whose commits save it every commit or two (at most 8 bits carried past one):
/// the other process's meta a catch-up or a writer's rebuild reads is then one of each kind
/// (docs/format.md, "A free map behind its meta").
fn both_free_map_caps() -> [Options; 2] {
    [with_cap(false), with_cap(true)]
}

/// `Options::default()`, or with `saving` at most 8 free-map bits carried past a commit.
fn with_cap(saving: bool) -> Options {
    if saving {
        Options::default().carried_max_bits(8)
    } else {
        Options::default()
    }
}

fn reader_catching_up_with(opts: Options) {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    let (other, db, hook) = two_processes(&path, opts);
    // The other process commits T1 and grows the file, so this process's catch-up reads the
    // file's length (the hook) between reading T1's txid and publishing T1's meta.
    put(&other, b"big", &vec![1u8; 4 << 20], Durability::Sync);
    let w = db.clone();
    hook.arm_len(move || {
        std::thread::spawn(move || put(&w, b"w", b"1", Durability::Async))
            .join()
            .unwrap();
    });
    drop(db.begin_read().unwrap());
    assert!(hook.fired());
    // The Async commit returned before this read began: it must see it.
    assert_eq!(
        get(&db, b"w").as_deref(),
        Some(&b"1"[..]),
        "a committed write vanished"
    );
    put(&db, b"after", b"2", Durability::Sync);
    assert_eq!(
        get(&db, b"w").as_deref(),
        Some(&b"1"[..]),
        "the next commit lost it"
    );
    drop(other);
    let txid = db.begin_read().unwrap().txid();
    drop(db);
    let db = Db::open(&path, opts).unwrap();
    db.check().unwrap();
    assert_eq!(db.begin_read().unwrap().txid(), txid);
    assert_eq!(get(&db, b"w").as_deref(), Some(&b"1"[..]));
}

/// `Db::sync` in a process that does not hold the writer lock syncs the file and then marks
/// this process's commits durable. A writer thread of the same process that was waiting for
/// the lock may meanwhile take it and make a NoMetaSync commit (meta written, not synced):
/// the sync must not count that one as durable. (If it does, the next one-fsync commit
/// overwrites the meta slot of the last commit that really is durable while the newest meta
/// is not synced: a power cut then leaves no valid fallback.)
#[test]
fn a_sync_without_the_writer_lock_marks_durable_only_what_it_synced() {
    for opts in both_free_map_caps() {
        sync_without_the_writer_lock_with(opts);
    }
}

fn sync_without_the_writer_lock_with(opts: Options) {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    let (other, db, hook) = two_processes(&path, opts);
    put(&db, b"a", b"1", Durability::Sync);
    // The other process holds the writer lock until told to commit.
    let (go, go_rx) = mpsc::channel::<()>();
    let (held, held_rx) = mpsc::channel::<()>();
    let other_writer = std::thread::spawn(move || {
        let tx = other.begin_write().unwrap();
        tx.open_tree("t").unwrap().insert(b"o", b"1").unwrap();
        held.send(()).unwrap();
        go_rx.recv().unwrap();
        tx.commit().unwrap();
        other
    });
    held_rx.recv().unwrap();
    // A writer thread of this process waits for the lock (holding the in-process one).
    let (done, done_rx) = mpsc::channel::<()>();
    let y = db.clone();
    let writer = std::thread::spawn(move || {
        let mut tx = y.begin_write().unwrap();
        tx.set_durability(Durability::NoMetaSync);
        let txid = tx.txid();
        tx.open_tree("t").unwrap().insert(b"y", b"1").unwrap();
        tx.commit().unwrap();
        let _ = done.send(());
        txid
    });
    std::thread::sleep(Duration::from_millis(200));
    // While this thread's sync is in its fdatasync, the other process commits and this
    // process's writer commits NoMetaSync (its meta lands after the sync).
    hook.arm_sync(move || {
        go.send(()).unwrap();
        // (Once fixed, the writer waits for the sync: do not wait for it forever.)
        let _ = done_rx.recv_timeout(Duration::from_millis(500));
    });
    db.sync().unwrap();
    assert!(hook.fired());
    let y_txid = writer.join().unwrap();
    let other = other_writer.join().unwrap();
    let durable = db.stats().unwrap().durable_txid;
    assert!(
        durable < y_txid,
        "durable txid {durable} counts NoMetaSync commit {y_txid}, whose meta was written after the sync"
    );
    drop(other);
}

/// The file compaction opens `which`-th (0: the copy's, 1: the switch's, then again for the
/// next compaction) gets a storage that runs `hook`.
struct HookedCompaction {
    hook: Arc<Hook>,
    which: usize,
    opened: AtomicUsize,
}

impl fmt::Debug for HookedCompaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookedCompaction").finish()
    }
}

impl CompactionFs for HookedCompaction {
    fn storage(&self, _path: &Path, file: File, mode: WriteMode) -> Box<dyn Storage> {
        if self.opened.fetch_add(1, Ordering::AcqRel) % 2 != self.which {
            return Box::new(FileStorage::new(file, mode));
        }
        Box::new(Hooked {
            inner: FileStorage::new(file, mode),
            hook: self.hook.clone(),
        })
    }
}

/// A new database at `path` opened as a process (through the lock file) under Null with a
/// compaction threshold of 0.3, its compactions' files hooked (`HookedCompaction`, `which`);
/// `saving`: the low free-map cap (`with_cap`).
fn hooked_compactor(path: &Path, saving: bool, which: usize) -> (Db, Arc<Hook>) {
    drop(Db::open(path, Options::default()).unwrap());
    let hook = Arc::new(Hook::default());
    let opts = with_cap(saving)
        .policy(Policy::Null)
        .compaction_threshold(Some(0.3))
        .compaction_min_bytes(0);
    let db = Db::open_with_storage_as_process_and_fs(
        path,
        |_| Box::new(FileStorage::new(open_rw(path), WriteMode::Pwrite)),
        opts,
        Arc::new(HookedCompaction {
            hook: hook.clone(),
            which,
            opened: AtomicUsize::new(0),
        }),
    )
    .unwrap();
    (db, hook)
}

/// The background file switch copies the old file's commits up to a last snapshot, then
/// renames the copy over the path once no other process is attached. Another process that
/// attaches, commits and detaches between that last snapshot and the rename must not have its
/// (acknowledged, durable) commit dropped with the old file.
#[test]
fn a_background_switch_never_drops_a_commit_another_process_made_during_its_last_round() {
    for saving in [false, true] {
        switch_never_drops_a_commit_another_process_made_during_its_last_round_with(saving);
    }
}

fn switch_never_drops_a_commit_another_process_made_during_its_last_round_with(saving: bool) {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    let (db, hook) = hooked_compactor(&path, saving, 1);
    // The switch's file syncs first when it is opened; the next sync is in the switch's last
    // round (no commits come meanwhile), after its last snapshot of the old file.
    hook.skip_syncs.store(1, Ordering::Release);
    let other_done = Arc::new(Mutex::new(None));
    let slot = other_done.clone();
    let p = path.clone();
    hook.arm_sync(move || {
        let (done, done_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let other = Db::open(&p, Options::default()).unwrap();
            put(&other, b"z", b"another process", Durability::Sync);
            drop(other);
            let _ = done.send(());
        });
        // (Once fixed, the other process waits for the switch: do not wait forever.)
        let _ = done_rx.recv_timeout(Duration::from_millis(500));
        *slot.lock().unwrap() = Some(t);
    });
    let mut round = 0u32;
    while !hook.fired() {
        assert!(
            round < 100,
            "no background compaction reached its last round"
        );
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..600u32 {
                let v = format!("round {round} key {i} {}", "x".repeat(100));
                t.insert(&i.to_be_bytes(), v.as_bytes()).unwrap();
            }
        }
        tx.commit().unwrap();
        let _ = db.wait_for_compaction();
        round += 1;
    }
    // Fixed, the switch is abandoned: the other process was attached by then.
    let _ = db.wait_for_compaction();
    let t = other_done.lock().unwrap().take().unwrap();
    t.join().unwrap();
    assert_eq!(
        get(&db, b"z").as_deref(),
        Some(&b"another process"[..]),
        "the switch dropped another process's commit (compactions: {})",
        db.compactions()
    );
    drop(db);
    let db = Db::open(&path, Options::default()).unwrap();
    db.check().unwrap();
    assert_eq!(get(&db, b"z").as_deref(), Some(&b"another process"[..]));
}

/// A process whose Async commits keep the writer lock lets go of it once a background switch
/// has made every commit durable in the new file: other processes may write then.
#[test]
fn a_background_switch_releases_the_writer_lock_async_commits_kept() {
    for saving in [false, true] {
        switch_releases_the_writer_lock_async_commits_kept_with(saving);
    }
}

fn switch_releases_the_writer_lock_async_commits_kept_with(saving: bool) {
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    let (db, hook) = hooked_compactor(&path, saving, 0);
    // While the compaction copies, this process makes an Async commit (and keeps the lock).
    let (copying, copying_rx) = mpsc::channel::<()>();
    let (go, go_rx) = mpsc::channel::<()>();
    hook.arm_sync(move || {
        copying.send(()).unwrap();
        go_rx.recv().unwrap();
    });
    let mut round = 0u32;
    loop {
        assert!(round < 100, "no background compaction");
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_tree("t").unwrap();
            for i in 0..600u32 {
                let v = format!("round {round} key {i} {}", "x".repeat(100));
                t.insert(&i.to_be_bytes(), v.as_bytes()).unwrap();
            }
        }
        tx.commit().unwrap();
        round += 1;
        if copying_rx.recv_timeout(Duration::from_millis(50)).is_ok() {
            break;
        }
    }
    put(&db, b"async", b"1", Durability::Async);
    go.send(()).unwrap();
    db.wait_for_compaction().unwrap();
    assert_eq!(db.compactions(), 1);
    // Another process opens (a read-write open takes the writer lock for a moment) and
    // writes at once.
    let (opened, opened_rx) = mpsc::channel();
    let p = path.clone();
    std::thread::spawn(move || {
        let other = Db::open_with_storage_as_process(
            &p,
            |_| Box::new(FileStorage::new(open_rw(&p), WriteMode::Pwrite)),
            Options::default(),
        );
        let _ = opened.send(other);
    });
    let other = opened_rx
        .recv_timeout(Duration::from_secs(2))
        .expect("the switch kept the writer lock with every commit durable")
        .unwrap();
    let tx = other.try_begin_write().unwrap();
    tx.open_tree("t").unwrap().insert(b"o", b"1").unwrap();
    tx.commit().unwrap();
    assert_eq!(get(&other, b"async").as_deref(), Some(&b"1"[..]));
    assert_eq!(get(&db, b"o").as_deref(), Some(&b"1"[..]));
}

/// Close makes every commit durable, NoMetaSync ones included (README, "Durability"), also
/// when another process holds the writer lock at that moment: it cannot write a meta then,
/// but its commits all have theirs on disk, and an fdatasync makes them durable. At the
/// default cap and with commits that save the free map every commit or two; the file then
/// reopens clean with every commit.
#[test]
fn close_syncs_nometasync_commits_while_another_process_holds_the_writer_lock() {
    for opts in both_free_map_caps() {
        close_syncs_nometasync_commits_with(opts);
    }
}

fn close_syncs_nometasync_commits_with(opts: Options) {
    use larch_testkit::recording::{IoLog, IoOp, Recording};
    let dir = scratch_dir();
    let path = dir.path().join("db.larch");
    drop(Db::open(&path, opts).unwrap());
    let log: IoLog = Default::default();
    let db = Db::open_with_storage_as_process(
        &path,
        |_| Box::new(Recording::new(open_rw(&path), &log)),
        opts,
    )
    .unwrap();
    let other = Db::open_with_storage_as_process(
        &path,
        |_| Box::new(FileStorage::new(open_rw(&path), WriteMode::Pwrite)),
        opts,
    )
    .unwrap();
    // A few commits first: under the low cap some of them save the free map.
    for i in 0..6u8 {
        put(&db, &[b'a', i], &[i; 300], Durability::NoMetaSync);
    }
    put(&db, b"k", b"v", Durability::NoMetaSync);
    assert!(matches!(
        log.lock().unwrap().last(),
        Some(IoOp::Write { .. })
    ));
    let tx = other.begin_write().unwrap();
    drop(db);
    assert!(
        matches!(log.lock().unwrap().last(), Some(IoOp::Sync)),
        "close returned with a NoMetaSync commit's meta not synced"
    );
    drop(tx);
    drop(other);
    let db = Db::open(&path, opts).unwrap();
    db.check().unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"v"[..]));
    for i in 0..6u8 {
        assert_eq!(get(&db, &[b'a', i]), Some(vec![i; 300]));
    }
}
