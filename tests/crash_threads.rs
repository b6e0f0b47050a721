//! Power cuts while threads of one process race its background compaction switches
//! (docs/format.md, "Several processes" and "Compaction"). tests/crash_processes.rs drives one
//! call at a time from one thread, so it cannot reach a race between threads of a process: a
//! `Db::sync` that took the old file just before a switch reset the lock file, then published
//! the old file's (higher) txid over it, and the lock file named a commit the database did not
//! hold (tests/switch_races.rs pauses the switch to hit it; this test comes upon it at random).
//!
//! One simulated process (`Db::open_with_storage_as_process_and_fs`) commits on the main
//! thread, under every durability, with a compaction threshold low enough that background
//! compactions copy and switch the file every dozen commits or so. Beside it: a thread that
//! calls `Db::sync` every few hundred microseconds; a thread that begins snapshots, checks
//! them, holds them across commits and switches and ticks the compaction timer on the file
//! they took (often one a switch has left); on odd seeds a thread of Sync commits (with the
//! main thread's, group commits). Now and then a second process opens the file, commits under
//! any durability, syncs and closes. File syncs take 60 µs and directory fsyncs up to 1.5 ms,
//! so calls pile up as on a disk, and the helpers' pauses end when a switch renames its file
//! into place: their calls land in the window between the lock file's reset and the new file
//! becoming the handle's. Every write, sync and resize of every file and every directory
//! operation goes to one ordered log (larch-testkit's `directory`). Each acknowledgement is
//! recorded with the log's length when its call returned; a `Db::sync` that returns
//! acknowledges as durable every commit of its process whose `commit()` returned before the
//! sync began.
//!
//! Half the seeds give every file syncs on another thread (`Recording::syncs_in_background`,
//! each done 1 to 16 calls after it starts) and a `max_unsynced_bytes` bound small enough that
//! Async commits make durable points in the background (docs/format.md, "Durable points in
//! the background"): the main thread makes runs of Async commits, half of them with the
//! helpers held off so that points finish, the rest racing the helpers; a second process
//! makes mostly Async commits and closes, half the time with no sync before (close makes them
//! durable: acknowledged then). So points start, finish, are overtaken by a `Db::sync`, a Sync
//! or group commit, a NoMetaSync meta or the bound, and are in flight when a switch copies
//! and renames the file or a process closes, while the flush thread's sync races a switch's
//! rename. Syncs on another thread take no faults here (see the recording's
//! `syncs_in_background`).
//!
//! Each commit writes a sequence number into its tree, so a state is known by its contents
//! whichever file and txid hold it (with threads, the txid a switch gives the copy cannot be
//! told from outside). Every write transaction must start from the newest commit; every
//! snapshot must show a commit no older than those of its process that returned before it
//! began, and the same while held. Every sixth step, with the other threads held off (a
//! background compaction may run; the check waits out a switch between its rename and its
//! lock-file reset), the lock file must name no commit newer than the database's newest meta,
//! and that never goes back. Every cut of the log (images DurableOnly, Everything and Random,
//! and after a meta one with an earlier write not durable lost, as tests/crash_processes.rs:
//! testkit's `every_cut`) must open, check clean, show a whole committed state no older than
//! the newest one acknowledged durable, and take a new commit; a cut that opens a file into
//! which a durable point wrote its meta (durable by itself) must open it at that txid or a
//! newer one.
//!
//! One commit in six rewrites the tree's tail in key order (`tail`), appended or inserted,
//! and so does half the aborted transactions: the leaves it fills are written before the
//! commit, one or two at a time, while switches, syncs, durable points and a second process
//! race them; the test requires such leaves in committed and in aborted transactions.
//!
//! A quarter of the seeds make directory fsyncs fail (`dir_faults_of`, `DirFaults`):
//! `SlowFs::sync_dir` returns an error without fsyncing, so the log records no directory sync.
//! A switch's after its rename fails (the first of the seed and about half of the rest): the
//! switch completes with its file's name not durable, and every later durable point,
//! `Db::sync`, Sync or group commit must fsync the directory again before it acknowledges
//! anything (docs/format.md, "Compaction"). Those re-tries fail once the main thread is in the
//! last third of its steps, and poison the handle. One in three of a compaction's copy's
//! (after its link) fails too, which abandons the compaction, and of a second process's
//! open's, which fails the open. A call may then fail, and only then (`Run::ok`): it
//! acknowledges nothing, a failed first process stops every thread, and a second process's
//! session that fails ends. On a seed without faults every error fails the test. On a seed
//! with faults a second process's session holds the first process's threads off: a poisoned
//! first process keeps the writer lock until it closes. The cuts check the same as on every
//! seed; the test counts the failed directory fsyncs, the switches' among them and those a
//! re-try did again in the log (a directory sync after the failure, before the next rename),
//! and requires each over the seeds with faults.
//!
//! The threads' interleaving is not replayable: a seed fixes the main thread's choices, the
//! helpers' pauses and which directory fsyncs fail by their order of each kind only.
//! `LARCH_THREAD_CUTS` sets the number of seeds (default 4: each combination of the committing
//! thread and a low free-map cap, seeds 1 and 2 syncing on another thread, seed 1 with
//! directory fsyncs failing; each eight seeds give every combination with and without syncs
//! on another thread); `LARCH_THREAD_BACKGROUND=all` makes every seed sync on another thread,
//! `LARCH_THREAD_DIR_FAULTS=all` every seed fail directory fsyncs.

mod support;
use larch_testkit::directory::{self, Log, Op, RecordingFs};
use larch_testkit::processes::{
    every_cut, newest_meta, open_cut, published, rewrite_tail_in_key_order, tree_in, tree_of, Tree,
};
use support::images::Image;
use support::recording::{open_rw, IoOp, SyncRecorded};
use support::{scratch_dir, Rng};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::ThreadId;
use std::time::Duration;

use larch::raw::{Meta, META_SIZE};
use larch::{CompactionFs, Db, Durability, Error, Options, Storage, WriteMode};

const DB: &str = "db.larch";

/// The key of tree "t" that numbers the commits: commit n writes n.
const SEQ: &[u8] = b"seq";

/// From when a cut must show an acknowledged commit (or a newer one).
#[derive(Clone, Copy, Debug)]
enum Durable {
    /// From the acknowledgement on (a Sync commit, a `Db::sync`).
    AtOnce,
    /// From the first sync of this file (by its number in the log) after it: a NoMetaSync
    /// commit, whose meta is in that file.
    AtSyncOf(usize),
}

#[derive(Clone, Copy, Debug)]
struct Ack {
    /// Operations in the log when the call returned (or later: never earlier).
    done: usize,
    /// The commit (by its sequence number) it acknowledged.
    seq: u64,
    durable: Durable,
    what: &'static str,
}

/// What the threads share while a seed runs.
struct Run {
    path: PathBuf,
    log: Arc<Log>,
    page_size: usize,
    /// Every committed state by sequence number; a commit's is entered before its
    /// `commit()` (a cut may open it once its meta is written).
    states: Mutex<BTreeMap<u64, Tree>>,
    acks: Mutex<Vec<Ack>>,
    /// The newest commit of the first process whose `commit()` has returned.
    returned: AtomicU64,
    stop: AtomicBool,
    /// The helper threads hold it shared around each call; the main thread exclusively while
    /// it looks at the lock file with nothing running.
    quiet: RwLock<()>,
    label: String,
    /// The second process's options: no compaction, the first's free-map cap (a process
    /// with a lower cap refuses a map left further behind, `Options::carried_max_bits`).
    second_opts: Options,
    syncs: AtomicUsize,
    /// Where a switch of the first process is.
    switches: Arc<Switches>,
    /// `Db::sync` calls begun in that window.
    syncs_in_switches: AtomicUsize,
    snapshots: AtomicUsize,
    ticks: AtomicUsize,
    helper_commits: AtomicUsize,
    /// Second-process sessions (open, commits, sync, close).
    sessions: AtomicUsize,
    /// Of them, those that closed with no sync before (Async commits waiting, a durable
    /// point maybe in flight).
    closes_unsynced: AtomicUsize,
    /// Every file's syncs run on another thread, each done this many calls after it starts
    /// (`Recording::syncs_in_background`), so `Options::max_unsynced_bytes` makes durable
    /// points in the background.
    background: Option<usize>,
    /// Every process's directory fsyncs, and which of them fail.
    dir: Arc<DirFaults>,
    /// The first process's first failed call (it stopped the run), if one failed.
    failure: Mutex<Option<String>>,
    /// Second-process opens that failed (their directory fsync did).
    opens_failed: AtomicUsize,
    /// Commits that rewrote the tree's tail in key order (`tail`; a commit may still fail),
    /// and the leaves they wrote before their commit (`IoStats::spilled_pages`).
    tails: AtomicUsize,
    spilled: AtomicUsize,
    /// The same of transactions aborted.
    aborted_tails: AtomicUsize,
    aborted_spilled: AtomicUsize,
}

/// A process: its handle and its compaction file system, which knows whether a directory
/// fsync that failed was reported to it.
struct Process {
    db: Db,
    fs: Arc<SlowFs>,
}

impl Run {
    /// What engine call `what` of `who` (in the process whose file system is `fs`) returned:
    /// `None` if it failed. A call may fail only once a directory fsync the engine reports
    /// failed in its process (the open's; a later sync's re-try after a switch's, which
    /// poisons the handle): then the error is recorded and, in the first process, stops every
    /// thread. Any other error fails the test, as every error does on a seed without faults.
    fn ok<T>(&self, fs: &SlowFs, who: &str, what: impl Display, r: larch::Result<T>) -> Option<T> {
        let e = match r {
            Ok(v) => return Some(v),
            Err(e) => e,
        };
        let msg = format!("{}, {who}: {what}: {e}", self.label);
        assert!(fs.told.load(SeqCst), "{msg}");
        if !fs.second {
            self.failure.lock().unwrap().get_or_insert(msg);
            self.stop.store(true, SeqCst);
        }
        None
    }

    /// The first process failed (a call of it returned an error).
    fn failed(&self) -> bool {
        self.failure.lock().unwrap().is_some()
    }

    fn ack(&self, done: usize, seq: u64, durable: Durable, what: &'static str) {
        self.acks.lock().unwrap().push(Ack {
            done,
            seq,
            durable,
            what,
        });
    }

    /// The file the database's name is now, by number.
    fn current(&self) -> usize {
        self.log.file_named(&self.path)
    }

    /// A process of the database (`second`: not the first): each file's writes, syncs and
    /// resizes, and compaction's files and directory operations, go to the log. Its file
    /// system, and the handle if the open succeeded.
    fn open_process(&self, opts: Options, second: bool) -> (Arc<SlowFs>, larch::Result<Db>) {
        let (log, background) = (self.log.clone(), self.background);
        // Called once the opener is attached and holds the writer lock: no switch is under way
        // (it holds the attach byte exclusively across its rename), so the name is this file.
        let storage = move |p: &Path| -> Box<dyn Storage> {
            let id = log.file_named(p);
            let r = slow(directory::recording(open_rw(p), id, &log));
            Box::new(match background {
                Some(lag) => r.syncs_in_background(lag),
                None => r,
            })
        };
        // The files compaction makes sync as the database's: a switch makes one of them the
        // database's.
        let inner = RecordingFs::new(self.log.clone()).sync_delay(SYNC_TAKES);
        let fs = Arc::new(SlowFs {
            inner: match background {
                Some(lag) => inner.syncs_in_background(lag),
                None => inner,
            },
            dir_syncs: AtomicU64::new(0),
            switches: self.switches.clone(),
            faults: self.dir.clone(),
            second,
            opened: AtomicBool::new(false),
            renamed_by: Mutex::new(None),
            linked_by: Mutex::new(None),
            told: AtomicBool::new(false),
        });
        let db = Db::open_with_storage_as_process_and_fs(&self.path, storage, opts, fs.clone());
        fs.opened.store(true, SeqCst);
        (fs, db)
    }
}

/// A file's syncs take a while, as on a disk: threads pile up behind them (group commits, a
/// `Db::sync` waiting for the durability lock), and calls overlap more.
fn slow(r: support::recording::Recording<Op>) -> support::recording::Recording<Op> {
    r.sync_delay(SYNC_TAKES, SyncRecorded::AtEnd)
}

/// How long a file's sync takes.
const SYNC_TAKES: Duration = Duration::from_micros(60);

/// Compaction's files and directory operations, recorded, with a directory fsync that takes
/// up to 1.5 ms: the one after a switch's rename comes after the lock file's reset and before
/// the new file is the handle's, the window in which a thread that took the old file must
/// not publish its commits. On a seed with faults some directory fsyncs fail
/// (`DirFaults::fails`): a failed one logs nothing.
#[derive(Debug)]
struct SlowFs {
    inner: RecordingFs,
    /// Directory fsyncs so far (their lengths vary with it).
    dir_syncs: AtomicU64,
    switches: Arc<Switches>,
    faults: Arc<DirFaults>,
    /// Of a second process.
    second: bool,
    /// The open returned: a directory fsync from then on is a switch's or a re-try.
    opened: AtomicBool,
    /// The thread that renamed a file over the database's name, until its next directory
    /// fsync (the switch's).
    renamed_by: Mutex<Option<ThreadId>>,
    /// The thread that linked a compaction's copy to its temporary name, until its next
    /// directory fsync (the copy's).
    linked_by: Mutex<Option<ThreadId>>,
    /// A directory fsync failed that the engine reports to the process's calls (its open's,
    /// or a re-try's, which poisons the handle): calls may fail from then on.
    told: AtomicBool,
}

/// Which directory fsync a call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DirSync {
    /// A read-write open's (every one fsyncs its directory).
    Open,
    /// A switch's, after its rename (the call on the thread that renamed).
    Switch,
    /// A compaction's copy's, after it links the copy to its temporary name (a failure
    /// abandons the compaction).
    Copy,
    /// Any other, of a process already open: a later sync's (a durable point, `Db::sync`, a
    /// Sync or group commit, a follower on a retired file) after a switch's failed
    /// (`Pager::sync_name`).
    Retry,
}

/// One directory fsync.
#[derive(Clone, Copy, Debug)]
struct DirEvent {
    /// Done: the index of its `Op::SyncDir` in the log. Failed: the log's length then.
    at: usize,
    kind: DirSync,
    /// Of a second process.
    second: bool,
    failed: bool,
}

/// Every process's directory fsyncs in a seed, and which fail. Decided by a count of each
/// kind: a switch's first one and about half of the others (by a hash of the seed and the
/// count); one in three of a second process's opens and of compactions' copies (by the
/// hash); every re-try once the main thread is in the last third of its steps (the first
/// poisons the handle, which ends the run; until then the run goes on past the re-tries).
/// Never the first process's open (the run needs it).
#[derive(Debug, Default)]
struct DirFaults {
    /// Faults on this seed.
    on: bool,
    seed: u64,
    opens: AtomicU64,
    switches: AtomicU64,
    copies: AtomicU64,
    /// The main thread is in the last third of its steps.
    late: AtomicBool,
    events: Mutex<Vec<DirEvent>>,
}

impl DirFaults {
    fn fails(&self, kind: DirSync, second: bool) -> bool {
        // One in `k` by call `n` (splitmix64's finalizer: every bit depends on every bit).
        let hash = |n: u64, k: u64| {
            let mut z = self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n;
            z = (z ^ z >> 30).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ z >> 27).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ z >> 31) % k == 0
        };
        if !self.on {
            return false;
        }
        match kind {
            DirSync::Open => second && hash(self.opens.fetch_add(1, SeqCst) << 2, 3),
            DirSync::Switch => {
                let n = self.switches.fetch_add(1, SeqCst);
                n == 0 || hash(n << 2 | 1, 2)
            }
            DirSync::Copy => hash(self.copies.fetch_add(1, SeqCst) << 2 | 2, 3),
            DirSync::Retry => self.late.load(SeqCst),
        }
    }
}

/// Where a switch of the first process is, as its file-system calls show it.
#[derive(Debug, Default)]
struct Switches {
    /// Odd from just before a rename until the directory fsync after it begins: the switch
    /// resets the lock file to the new file's commits in between, and until then the lock
    /// file names the old file's while the name is the new file.
    resetting: AtomicU64,
    /// From a rename to the end of the directory fsync after it: the lock file names the new
    /// file's commits, the handle's file is still the old one.
    window: AtomicBool,
}

impl CompactionFs for SlowFs {
    fn storage(&self, path: &Path, file: File, mode: WriteMode) -> Box<dyn Storage> {
        self.inner.storage(path, file, mode)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let r = self.inner.hard_link(from, to);
        if r.is_ok() {
            *self.linked_by.lock().unwrap() = Some(std::thread::current().id());
        }
        r
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.switches.resetting.fetch_add(1, SeqCst);
        let r = self.inner.rename(from, to);
        if r.is_ok() {
            *self.renamed_by.lock().unwrap() = Some(std::thread::current().id());
            self.switches.window.store(true, SeqCst);
        } else {
            self.switches.resetting.fetch_add(1, SeqCst);
        }
        r
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        let r = &self.switches.resetting;
        // The reset is done (a switch resets the lock file before its directory fsync).
        let _ = r.fetch_update(SeqCst, SeqCst, |g| (g % 2 == 1).then_some(g + 1));
        let us = Rng(self.dir_syncs.fetch_add(1, SeqCst) * 7919 + 1).below(1500);
        std::thread::sleep(Duration::from_micros(us));
        // This thread's rename or link just before, if it is one.
        let mine = |by: &Mutex<Option<ThreadId>>| {
            let me = std::thread::current().id();
            by.lock().unwrap().take_if(|t| *t == me).is_some()
        };
        let kind = if mine(&self.renamed_by) {
            DirSync::Switch
        } else if mine(&self.linked_by) {
            DirSync::Copy
        } else if !self.opened.load(SeqCst) {
            DirSync::Open
        } else {
            DirSync::Retry
        };
        let log = &self.inner.log;
        let r = if self.faults.fails(kind, self.second) {
            // Before the error reaches the engine, which then fails calls.
            if matches!(kind, DirSync::Open | DirSync::Retry) {
                self.told.store(true, SeqCst);
            }
            self.faults.events.lock().unwrap().push(DirEvent {
                at: log.len(),
                kind,
                second: self.second,
                failed: true,
            });
            Err(io::Error::other(format!(
                "directory fsync ({kind:?}) refused by the test"
            )))
        } else {
            // As `RecordingFs::sync_dir`, knowing where its entry is.
            File::open(dir).and_then(|d| d.sync_all()).map(|()| {
                let mut ops = log.ops.lock().unwrap();
                self.faults.events.lock().unwrap().push(DirEvent {
                    at: ops.len(),
                    kind,
                    second: self.second,
                    failed: false,
                });
                ops.push(Op::SyncDir);
            })
        };
        self.switches.window.store(false, SeqCst);
        r
    }
}

/// Stops the run however a thread ends (a panic in one must fail the test, not leave the
/// others looping or waiting).
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

fn seq_of(t: &Tree) -> u64 {
    t.get(SEQ)
        .map_or(0, |v| u64::from_be_bytes(v[..].try_into().unwrap()))
}

/// A commit by process `p` of durability `d`: it must start from the newest committed state,
/// and writes the next sequence number with a few random changes (some overflow values, so
/// pages die fast). Returns its sequence number, or `None` if a call failed (`Run::ok`).
fn commit(run: &Run, p: &Process, d: Durability, rng: &mut Rng, who: &str) -> Option<u64> {
    let (db, fs) = (&p.db, &*p.fs);
    let file = run.current();
    let mut tx = run.ok(fs, who, "begin_write", db.begin_write())?;
    tx.set_durability(d);
    let txid = tx.txid();
    let seen = run.ok(fs, who, "read", tree_in(&tx, "t"))?;
    let seq = seq_of(&seen);
    let mut next = seen.clone();
    {
        let mut states = run.states.lock().unwrap();
        let (&newest, want) = states.last_key_value().unwrap();
        assert!(
            seq == newest && seen == *want,
            "{}, {who}: txid {txid} starts from commit {seq}, not from the newest, {newest} \
             (or not from its contents)",
            run.label
        );
        let mut t = run.ok(fs, who, "open_tree", tx.open_tree("t"))?;
        for _ in 0..1 + rng.below(4) {
            let k = key(rng.below(40));
            if rng.below(4) == 0 {
                run.ok(fs, who, "remove", t.remove(&k))?;
                next.remove(&k);
            } else {
                let len = if rng.below(4) == 0 { 6000 } else { 40 };
                let v = vec![rng.below(256) as u8; len];
                run.ok(fs, who, "insert", t.insert(&k, &v))?;
                next.insert(k, v);
            }
        }
        // One commit in six rewrites the tree's tail in key order (`tail`), writing full
        // leaves before the commit.
        if rng.below(6) == 0 {
            let spilled = tail(run, p, &mut t, &mut next, seq + 1, rng, who)?;
            run.tails.fetch_add(1, SeqCst);
            run.spilled.fetch_add(spilled, SeqCst);
        }
        let s = (seq + 1).to_be_bytes().to_vec();
        run.ok(fs, who, "insert", t.insert(SEQ, &s))?;
        next.insert(SEQ.to_vec(), s);
        // Before the commit: a cut may open it once its meta is written, even if the commit
        // then fails.
        states.insert(seq + 1, next);
    }
    run.ok(fs, who, format!("commit of txid {txid}"), tx.commit())?;
    let done = run.log.len();
    match d {
        Durability::Sync => run.ack(done, seq + 1, Durable::AtOnce, "Sync commit"),
        // Its meta is in the file it began on unless a switch came between.
        Durability::NoMetaSync if run.current() == file => {
            run.ack(done, seq + 1, Durable::AtSyncOf(file), "NoMetaSync commit")
        }
        _ => {}
    }
    Some(seq + 1)
}

/// Commit `seq`'s tree `t` gets its tail (the keys after [`SEQ`]) rewritten in key order
/// (testkit's `rewrite_tail_in_key_order`): with the thread's spill batch of 1 or 2
/// (`larch::set_spill_batch`), the leaves it fills are written before the commit while
/// switches, syncs, durable points and a second process race them. `next` follows. How many
/// leaves were written before the commit, or `None` if a call failed (`Run::ok`).
fn tail(
    run: &Run,
    p: &Process,
    t: &mut larch::WriteTree<'_>,
    next: &mut Tree,
    seq: u64,
    rng: &mut Rng,
    who: &str,
) -> Option<usize> {
    let before = p.db.io_stats().spilled_pages;
    let r = rewrite_tail_in_key_order(t, next, seq, rng);
    run.ok(&p.fs, who, "a tail in key order", r)?;
    // The writer lock is this transaction's: no other thread's pages.
    Some((p.db.io_stats().spilled_pages - before) as usize)
}

/// `Db::sync` of the first process; acknowledges every commit of it that returned before.
/// `None` if it failed (`Run::ok`).
fn sync(run: &Run, p: &Process, who: &str) -> Option<()> {
    let covered = run.returned.load(SeqCst);
    let racing = run.switches.window.load(SeqCst);
    run.ok(&p.fs, who, "Db::sync", p.db.sync())?;
    let done = run.log.len();
    run.ack(done, covered, Durable::AtOnce, "Db::sync");
    run.syncs.fetch_add(1, SeqCst);
    if racing {
        run.syncs_in_switches.fetch_add(1, SeqCst);
    }
    Some(())
}

/// Sleep up to `max`, less if a switch renames its file into place meanwhile: the helpers'
/// pauses end there at once, so their calls often land in the switch's window (after the
/// lock file's reset, before the new file is the handle's) however fast the main thread is.
fn pause(run: &Run, max: Duration) {
    let was = run.switches.window.load(SeqCst);
    let end = std::time::Instant::now() + max;
    loop {
        let now = std::time::Instant::now();
        if now >= end || (!was && run.switches.window.load(SeqCst)) {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_micros(50)));
    }
}

/// The helper that syncs.
fn syncing(run: &Run, p: &Process, mut rng: Rng, _stop: Stop) {
    while !run.stop.load(SeqCst) {
        {
            let _q = run.quiet.read().unwrap();
            if sync(run, p, "the syncing thread").is_none() {
                return;
            }
        }
        pause(run, Duration::from_micros(100 + rng.below(800)));
    }
}

/// The helper that reads: each snapshot shows a committed state no older than the commits
/// of its process that returned before it began, and the same on every look while held
/// across commits and switches; the compaction timer ticks on the file it took.
fn reading(run: &Run, p: &Process, mut rng: Rng, _stop: Stop) {
    let db = &p.db;
    while !run.stop.load(SeqCst) {
        let _q = run.quiet.read().unwrap();
        let floor = run.returned.load(SeqCst);
        let Some(rx) = run.ok(&p.fs, "a reader", "begin_read", db.begin_read()) else {
            return;
        };
        let first = tree_of(&rx, "t");
        let seq = seq_of(&first);
        assert!(
            seq >= floor,
            "{}: a snapshot (txid {}) shows commit {seq}, older than commit {floor}, which \
             returned before it began",
            run.label,
            rx.txid()
        );
        assert!(
            run.states.lock().unwrap().get(&seq) == Some(&first),
            "{}: a snapshot (txid {}) shows commit {seq} with other contents",
            run.label,
            rx.txid()
        );
        run.snapshots.fetch_add(1, SeqCst);
        for _ in 0..rng.below(4) {
            pause(run, Duration::from_micros(200 + rng.below(1000)));
            if rng.below(2) == 0 {
                db.compaction_timer_tick_on(&rx);
                run.ticks.fetch_add(1, SeqCst);
            }
            assert!(
                tree_of(&rx, "t") == first,
                "{}: snapshot of commit {seq} (txid {}) changed while held",
                run.label,
                rx.txid()
            );
        }
        drop(rx);
        drop(_q);
        pause(run, Duration::from_micros(rng.below(300)));
    }
}

/// The helper that commits (Sync: with the main thread's Sync commits, group commits).
fn committing(run: &Run, p: &Process, mut rng: Rng, spill_batch: usize, _stop: Stop) {
    larch::set_spill_batch(spill_batch);
    while !run.stop.load(SeqCst) {
        {
            let _q = run.quiet.read().unwrap();
            let Some(seq) = commit(run, p, Durability::Sync, &mut rng, "the committing thread")
            else {
                return;
            };
            run.returned.fetch_max(seq, SeqCst);
            run.helper_commits.fetch_add(1, SeqCst);
        }
        pause(run, Duration::from_micros(300 + rng.below(1500)));
    }
}

/// A second process opens the file, commits, syncs and closes; the first process's threads go
/// on meanwhile (its compactions are refused while the second is attached). On a seed with
/// faults they are held off instead: a call that fails poisons the first process, which keeps
/// the writer lock over a commit it could not make durable until it closes, so the second
/// process would wait for that lock for ever. Its open fails when its directory fsync does.
/// `None` if the first process failed.
fn second_process(run: &Run, first: &Process, rng: &mut Rng) -> Option<()> {
    let _q = run.dir.on.then(|| run.quiet.write().unwrap());
    // The first process keeps the writer lock over its Async commits until it syncs: the open
    // would wait for the syncing thread, forever if that one died.
    sync(run, first, "the main thread")?;
    let floor = run.returned.load(SeqCst);
    let who = "the second process";
    let (fs, db) = run.open_process(run.second_opts, true);
    let Some(db) = run.ok(&fs, who, "open", db) else {
        run.opens_failed.fetch_add(1, SeqCst);
        return Some(());
    };
    let p = Process { db, fs };
    // A call that fails ends the session (`Run::ok`: only after a failure reported to it).
    let closing = session(run, &p, floor, rng);
    drop(p);
    if let Some(Some(last)) = closing {
        run.ack(
            run.log.len(),
            last,
            Durable::AtOnce,
            "second process's close",
        );
    }
    Some(())
}

/// What a second process does once open: `Some(Some(last))` when it ends with no sync, its
/// close to make its commits, `last` the newest, durable.
fn session(run: &Run, p: &Process, floor: u64, rng: &mut Rng) -> Option<Option<u64>> {
    let who = "the second process";
    // The first process's committing thread may commit meanwhile: a state no older than its
    // commits that returned before the open.
    let rx = run.ok(&p.fs, who, "begin_read", p.db.begin_read())?;
    let seen = tree_of(&rx, "t");
    let seq = seq_of(&seen);
    assert!(
        seq >= floor && run.states.lock().unwrap().get(&seq) == Some(&seen),
        "{}: the second process opened at commit {seq} (txid {}), not at one no older than \
         {floor} with its contents",
        run.label,
        rx.txid()
    );
    drop(rx);
    let mut last = 0;
    if run.background.is_none() {
        for _ in 0..1 + rng.below(3) {
            let d = [Durability::Sync, Durability::NoMetaSync, Durability::Async]
                [rng.below(3) as usize];
            last = commit(run, p, d, rng, who)?;
        }
    } else {
        // Mostly Async, which start durable points, and half the time a close with no sync
        // before it, maybe with a point in flight: close makes the commits durable.
        for _ in 0..1 + rng.below(5) {
            let d = [Durability::Sync, Durability::NoMetaSync, Durability::Async]
                [rng.below(5).min(2) as usize];
            last = commit(run, p, d, rng, who)?;
        }
        if rng.below(2) == 0 {
            run.sessions.fetch_add(1, SeqCst);
            run.closes_unsynced.fetch_add(1, SeqCst);
            return Some(Some(last));
        }
    }
    run.ok(&p.fs, who, "Db::sync", p.db.sync())?;
    run.ack(
        run.log.len(),
        last,
        Durable::AtOnce,
        "second process's sync",
    );
    run.sessions.fetch_add(1, SeqCst);
    Some(None)
}

/// The lock file names no commit newer than the database's newest meta (none the database
/// does not hold), and the newest commit of the file the database's name is never goes back
/// from `high_mark`; the new high mark. Looked at between switches, or over again: a switch
/// renames its file into place before it resets the lock file to that file's commits.
fn check_lock_file(run: &Run, step: usize, high_mark: (usize, u64)) -> (usize, u64) {
    for _ in 0..20_000 {
        let g = run.switches.resetting.load(SeqCst);
        if g % 2 == 1 {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        // The lock file first: a commit after it only makes the meta newer.
        let named = published(&run.path);
        let id = run.current();
        let newest = newest_meta(&File::open(&run.path).unwrap(), run.page_size);
        if run.switches.resetting.load(SeqCst) != g {
            continue;
        }
        assert!(
            named.is_none_or(|p| p <= newest),
            "{}: after step {step} the lock file names commit {named:?}, but the database's \
             newest meta (file {id}) is {newest}",
            run.label
        );
        let now = (id, newest);
        assert!(
            now >= high_mark,
            "{}: the file's newest commit went back from {high_mark:?} to {now:?} without a \
             power cut",
            run.label
        );
        return now;
    }
    panic!(
        "{}: after step {step}, a switch renamed its file into place a second ago and has not \
         reset the lock file (no directory fsync since)",
        run.label
    )
}

/// Everything a seed recorded.
struct Trace {
    initial: Vec<Vec<u8>>,
    ops: Vec<Op>,
    states: BTreeMap<u64, Tree>,
    acks: Vec<Ack>,
    page_size: usize,
    switches: u64,
    /// Durable points finished, in log order.
    points: Vec<PointMeta>,
    /// Every directory fsync (failed ones too).
    dir: Vec<DirEvent>,
}

/// A durable point's meta, written durable by itself (`IoOp::DurableWrite`): from then on a
/// cut that opens this file opens at this txid or a newer one (docs/format.md, "Durable
/// points in the background").
#[derive(Clone, Copy, Debug)]
struct PointMeta {
    /// Its index in the log.
    at: usize,
    file: usize,
    txid: u64,
}

fn points_in(ops: &[Op]) -> Vec<PointMeta> {
    ops.iter()
        .enumerate()
        .filter_map(|(at, o)| match o {
            Op::File {
                file,
                op: IoOp::DurableWrite { data, .. },
            } => {
                let meta = Meta::decode(&data[..META_SIZE])
                    .unwrap_or_else(|e| panic!("op {at}: a durable write of no meta: {e}"));
                Some(PointMeta {
                    at,
                    file: *file,
                    txid: meta.txid,
                })
            }
            _ => None,
        })
        .collect()
}

/// What a seed's log shows of its syncs on another thread.
#[derive(Clone, Copy, Debug, Default)]
struct BackgroundStats {
    /// Syncs on another thread that ended.
    syncs: usize,
    /// Durable points finished (metas written durable by themselves).
    points: usize,
    /// Switches (renames over the database's name) with a sync on another thread of the file
    /// they replace in flight: started, not ended.
    renames_racing_a_sync: usize,
    /// Switches after a sync on another thread of the file they replace that no durable meta
    /// and no foreground sync of it followed: a durable point in flight across the switch, or
    /// a flush ahead of one (the log does not tell them apart).
    renames_after_a_pending_point: usize,
    /// Foreground syncs (a Sync commit, `Db::sync`, the bound) of a file after a sync on
    /// another thread of it that no durable meta followed: a point overtaken, or a flush.
    overtaken: usize,
}

impl BackgroundStats {
    fn of(ops: &[Op]) -> BackgroundStats {
        let mut st = BackgroundStats::default();
        let mut names: BTreeMap<&str, usize> = BTreeMap::from([(DB, 0)]);
        // Syncs on another thread in flight (number, file); files with one since which no
        // durable meta or foreground sync came.
        let mut in_flight: BTreeMap<u64, usize> = BTreeMap::new();
        let mut pending = std::collections::BTreeSet::new();
        for o in ops {
            match o {
                Op::File { file, op } => match op {
                    IoOp::SyncStart(n) => {
                        in_flight.insert(*n, *file);
                        pending.insert(*file);
                    }
                    IoOp::SyncEnd(n) => {
                        in_flight.remove(n);
                        st.syncs += 1;
                    }
                    IoOp::DurableWrite { .. } => {
                        st.points += 1;
                        pending.remove(file);
                    }
                    IoOp::Sync => st.overtaken += usize::from(pending.remove(file)),
                    _ => {}
                },
                Op::Create { file, name } => {
                    names.insert(name.as_str(), *file);
                }
                Op::Link { from, to } => {
                    names.insert(to.as_str(), names[from.as_str()]);
                }
                Op::Rename { from, to } => {
                    if to == DB {
                        let old = names[DB];
                        st.renames_racing_a_sync +=
                            usize::from(in_flight.values().any(|&f| f == old));
                        st.renames_after_a_pending_point += usize::from(pending.contains(&old));
                    }
                    let id = names.remove(from.as_str()).unwrap();
                    names.insert(to.as_str(), id);
                }
                Op::Remove { name } => {
                    names.remove(name.as_str());
                }
                Op::SyncDir => {}
            }
        }
        st
    }

    fn add(&mut self, o: &BackgroundStats) {
        self.syncs += o.syncs;
        self.points += o.points;
        self.renames_racing_a_sync += o.renames_racing_a_sync;
        self.renames_after_a_pending_point += o.renames_after_a_pending_point;
        self.overtaken += o.overtaken;
    }
}

/// What a seed's directory fsyncs and its log show of the failed ones.
#[derive(Clone, Copy, Debug, Default)]
struct DirStats {
    /// Directory fsyncs asked for, and failed.
    calls: usize,
    failed: usize,
    /// Switches' (after their rename), and failed.
    switches: usize,
    switches_failed: usize,
    /// Re-tries (`DirSync::Retry`), and failed (each poisoned its handle).
    retries: usize,
    retries_failed: usize,
    /// Second processes' opens, and failed.
    opens: usize,
    opens_failed: usize,
    /// Compactions' copies', and failed (each abandoned its compaction).
    copies: usize,
    copies_failed: usize,
    /// Switch directory fsyncs that failed and that the first process's re-try did again in
    /// the log (a directory sync after the failure, before the next rename).
    redone: usize,
    /// Of the rest, those another directory fsync did again first (a second process's open,
    /// a compaction's copy: the engine does not know, and re-tries all the same).
    redone_elsewhere: usize,
    /// Durable acknowledgements after such a re-try and before the next rename or new file
    /// (which the images count as a directory sync): without the re-try, a cut after one
    /// would open the old file, which lacks the commits made since the switch.
    acks_after_redo: usize,
}

impl DirStats {
    fn of(trace: &Trace) -> DirStats {
        let mut st = DirStats::default();
        let (mut failed_switches, mut retried) = (vec![], BTreeSet::new());
        for e in &trace.dir {
            st.calls += 1;
            st.failed += usize::from(e.failed);
            let (n, failed) = match (e.kind, e.second) {
                (DirSync::Switch, _) => (&mut st.switches, &mut st.switches_failed),
                (DirSync::Retry, _) => (&mut st.retries, &mut st.retries_failed),
                (DirSync::Open, true) => (&mut st.opens, &mut st.opens_failed),
                (DirSync::Copy, _) => (&mut st.copies, &mut st.copies_failed),
                // The first process's open: never fails.
                (DirSync::Open, false) => continue,
            };
            *n += 1;
            *failed += usize::from(e.failed);
            match (e.kind, e.failed, e.second) {
                (DirSync::Switch, true, false) => failed_switches.push(e.at),
                (DirSync::Retry, false, false) => {
                    retried.insert(e.at);
                }
                _ => {}
            }
        }
        failed_switches.sort_unstable();
        let ops = &trace.ops;
        let mut failures = failed_switches.iter().peekable();
        // A switch's failed directory fsync not done again yet; re-tries and where the
        // window each one opens ends.
        let (mut pending, mut redos) = (false, vec![]);
        for (i, o) in ops.iter().enumerate() {
            while failures.next_if(|&&at| at <= i).is_some() {
                pending = true;
            }
            match o {
                Op::Rename { to, .. } if to == DB => pending = false,
                Op::SyncDir if pending => {
                    pending = false;
                    if retried.contains(&i) {
                        st.redone += 1;
                        let end = ops[i..]
                            .iter()
                            .position(|o| matches!(o, Op::Rename { .. } | Op::Create { .. }))
                            .map_or(ops.len(), |n| i + n);
                        redos.push((i, end));
                    } else {
                        st.redone_elsewhere += 1;
                    }
                }
                _ => {}
            }
        }
        st.acks_after_redo = trace
            .acks
            .iter()
            .filter(|a| {
                matches!(a.durable, Durable::AtOnce)
                    && redos.iter().any(|&(i, end)| i < a.done && a.done <= end)
            })
            .count();
        st
    }

    fn add(&mut self, o: &DirStats) {
        self.calls += o.calls;
        self.failed += o.failed;
        self.switches += o.switches;
        self.switches_failed += o.switches_failed;
        self.retries += o.retries;
        self.retries_failed += o.retries_failed;
        self.opens += o.opens;
        self.opens_failed += o.opens_failed;
        self.redone += o.redone;
        self.redone_elsewhere += o.redone_elsewhere;
        self.copies += o.copies;
        self.copies_failed += o.copies_failed;
        self.acks_after_redo += o.acks_after_redo;
    }
}

/// Whether directory fsyncs fail on a seed (every one with `all`): a quarter of the seeds,
/// in each eight a pair whose three low bits are each other's complement (1 and 6, then 2
/// and 5, 4 and 3, 7 and 0), so that one of each pair syncs on another thread, one has the
/// committing thread and one the low free-map cap, and over 32 seeds every combination has
/// faults (the default four seeds: seed 1).
fn dir_faults_of(seed: u64, all: bool) -> bool {
    let p = [1, 2, 4, 7][(seed / 8 % 4) as usize];
    all || seed % 8 == p || seed % 8 == 7 - p
}

/// How a seed syncs on another thread, if it does.
#[derive(Clone, Copy, Debug)]
struct Background {
    /// A sync on another thread is done this many calls after it starts.
    lag: usize,
    /// `Options::max_unsynced_bytes`, of both processes.
    max_unsynced: u64,
}

/// Half the seeds (every one with `all`) sync on another thread: those whose three low bits
/// have odd parity, so that each eight seeds give each combination of the committing thread
/// and the low free-map cap with and without (the default four seeds: 1 and 2). Each sync is
/// done 1 to 16 calls after it starts (every lag over sixteen seeds), under a
/// `max_unsynced_bytes` of 8 KiB plus 2 KiB a call of lag. What counts against the bound is
/// the durable tree's pages replaced since (this small tree has few, so the first Async
/// commits reach half the bound, where a point starts) and, once a point is
/// in flight, the pages it pins that later commits replace (two or three a commit, at one or
/// two calls a commit): a point whose sync ends 16 calls later needs about 100 KiB of room.
/// With less, a commit at the bound waits for the point's sync and writes its meta, unless
/// the sync has not started (then the commit is made durable itself).
fn background_of(seed: u64, all: bool) -> Option<Background> {
    (all || (seed ^ seed >> 1 ^ seed >> 2) & 1 == 1).then(|| {
        let lag = 1 + ((seed * 13 + 3) % 16) as usize;
        Background {
            lag,
            max_unsynced: (8 + 2 * lag as u64) << 10,
        }
    })
}

/// One seed: `steps` steps of the main thread, the helpers beside it.
fn run(
    label: &str,
    seed: u64,
    steps: usize,
    dir: &Path,
    background: Option<Background>,
    faults: bool,
) -> (Trace, Run) {
    let path = dir.join(DB);
    let opts = Options::default()
        .compaction_threshold(Some(0.1))
        .compaction_min_bytes(0)
        .compaction_check_every(Duration::from_secs(3600));
    // Half the seeds carry at most 16 free-map bits: commits save the map and leave it behind
    // while compactions copy and switch.
    let (opts, second_opts) = if seed % 4 >= 2 {
        (
            opts.carried_max_bits(16),
            Options::default().carried_max_bits(16),
        )
    } else {
        (opts, Options::default())
    };
    let (opts, second_opts) = match background {
        Some(b) => (
            opts.max_unsynced_bytes(Some(b.max_unsynced)),
            second_opts.max_unsynced_bytes(Some(b.max_unsynced)),
        ),
        None => (opts, second_opts),
    };
    drop(Db::open(&path, opts).unwrap());
    let log = Log::of_file(&path);
    let mut states = BTreeMap::new();
    states.insert(0, Tree::new());
    let run = Run {
        path,
        log,
        page_size: opts.get_page_size(),
        states: Mutex::new(states),
        acks: Mutex::new(Vec::new()),
        returned: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        quiet: RwLock::new(()),
        label: label.to_string(),
        second_opts,
        syncs: AtomicUsize::new(0),
        switches: Default::default(),
        syncs_in_switches: AtomicUsize::new(0),
        snapshots: AtomicUsize::new(0),
        ticks: AtomicUsize::new(0),
        helper_commits: AtomicUsize::new(0),
        sessions: AtomicUsize::new(0),
        closes_unsynced: AtomicUsize::new(0),
        background: background.map(|b| b.lag),
        dir: Arc::new(DirFaults {
            on: faults,
            seed,
            ..Default::default()
        }),
        failure: Mutex::new(None),
        opens_failed: AtomicUsize::new(0),
        tails: AtomicUsize::new(0),
        spilled: AtomicUsize::new(0),
        aborted_tails: AtomicUsize::new(0),
        aborted_spilled: AtomicUsize::new(0),
    };
    let (fs, db) = run.open_process(opts, false);
    let first = Process {
        db: db.unwrap_or_else(|e| panic!("{label}: open: {e}")),
        fs,
    };
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut high_mark = (0, 0);
    // Full leaves of the tails (`tail`) are written 1 or 2 at a time: the built-in 64 needs
    // longer ones. The main thread's (the second process's too) and the committing thread's.
    let spill_batch = 1 + (seed / 2 % 2) as usize;
    larch::set_spill_batch(spill_batch);
    std::thread::scope(|s| {
        let (r, p) = (&run, &first);
        // A helper that ends (by a panic, or by a call that failed on a seed with faults)
        // stops the run too.
        let mut helpers = vec![
            s.spawn(move || syncing(r, p, Rng(seed * 3 + 1), Stop(&r.stop))),
            s.spawn(move || reading(r, p, Rng(seed * 5 + 3), Stop(&r.stop))),
        ];
        if seed % 2 == 1 {
            helpers.push(
                s.spawn(move || committing(r, p, Rng(seed * 7 + 5), spill_batch, Stop(&r.stop))),
            );
        }
        let stopping = Stop(&run.stop);
        for step in 0..steps {
            if step == steps * 2 / 3 {
                run.dir.late.store(true, SeqCst);
            }
            if run.stop.load(SeqCst) || main_step(&run, &first, &mut rng, background).is_none() {
                break;
            }
            if step % 6 == 5 {
                // No helper call runs; a background compaction may.
                let _q = run.quiet.write().unwrap();
                high_mark = check_lock_file(&run, step, high_mark);
            }
        }
        drop(stopping);
        for h in helpers {
            h.join().unwrap();
        }
    });
    let db = &first.db;
    match db.wait_for_compaction() {
        Ok(_) | Err(Error::Compaction(_)) => {}
        // The handle is poisoned (`Run::ok`).
        Err(_) if first.fs.told.load(SeqCst) => {}
        Err(e) => panic!("{label}: compaction: {e}"),
    }
    let switches = db.compactions();
    // Close-time writes are left out: the cuts are of the run.
    let ops = run.log.ops.lock().unwrap().clone();
    let dir_syncs = run.dir.events.lock().unwrap().clone();
    let initial = run.log.files.lock().unwrap().initial.clone();
    drop(first);
    let trace = Trace {
        initial,
        points: points_in(&ops),
        ops,
        states: std::mem::take(&mut *run.states.lock().unwrap()),
        acks: std::mem::take(&mut *run.acks.lock().unwrap()),
        page_size: run.page_size,
        switches,
        dir: dir_syncs,
    };
    (trace, run)
}

/// One step of the main thread; `None` if a call of the first process failed.
fn main_step(run: &Run, p: &Process, rng: &mut Rng, background: Option<Background>) -> Option<()> {
    let who = "the main thread";
    match rng.below(20) {
        // With syncs on another thread, half of these are runs of Async commits: one reaches
        // half the bound and starts a durable point, a later one finishes it (waiting for its
        // sync at the bound), unless a `Db::sync`, a Sync commit or a switch comes first.
        // Half of those with the other threads held off, after a `Db::sync` (a NoMetaSync
        // meta not yet synced would keep every point from starting): only a background
        // compaction races them, and the points the bound starts can finish.
        0..=13 if background.is_some() && rng.below(2) == 0 => {
            let _q = if rng.below(2) == 0 {
                let q = run.quiet.write().unwrap();
                sync(run, p, who)?;
                Some(q)
            } else {
                None
            };
            let spread = rng.below(2) == 0;
            for _ in 0..2 + rng.below(6 + background.map_or(0, |b| b.lag as u64)) {
                let seq = commit(run, p, Durability::Async, rng, who)?;
                run.returned.fetch_max(seq, SeqCst);
                // Half of the runs spread over the time a background compaction takes to copy
                // and catch up, so that its switch comes with a point in flight (the pause
                // ends at the switch's rename).
                if spread {
                    pause(run, Duration::from_micros(rng.below(400)));
                }
            }
        }
        0..=13 => {
            let d = [Durability::Sync, Durability::NoMetaSync, Durability::Async]
                [rng.below(3) as usize];
            let seq = commit(run, p, d, rng, who)?;
            run.returned.fetch_max(seq, SeqCst);
        }
        14 => {
            // An aborted transaction (its overflow value is written at insert time).
            let tx = run.ok(&p.fs, who, "begin_write", p.db.begin_write())?;
            {
                let mut t = run.ok(&p.fs, who, "open_tree", tx.open_tree("t"))?;
                let k = key(rng.below(40));
                run.ok(&p.fs, who, "insert", t.insert(&k, &[9u8; 7000]))?;
                // Half of them rewrite the tail too: the leaves written before the commit
                // go back with the rest.
                if rng.below(2) == 0 {
                    let spilled = tail(run, p, &mut t, &mut Tree::new(), 999_999, rng, who)?;
                    run.aborted_tails.fetch_add(1, SeqCst);
                    run.aborted_spilled.fetch_add(spilled, SeqCst);
                }
            }
            tx.abort();
        }
        15 | 16 => sync(run, p, who)?,
        17 | 18 => second_process(run, p, rng)?,
        _ => std::thread::sleep(Duration::from_micros(rng.below(2000))),
    }
    Some(())
}

/// The newest commit a cut after `k` ops must show at least, and the acknowledgement that
/// says so.
fn min_durable(trace: &Trace, k: usize) -> (u64, Option<Ack>) {
    let mut min = (0, None);
    for a in &trace.acks {
        if a.done > k {
            continue;
        }
        let durable = match a.durable {
            Durable::AtOnce => true,
            Durable::AtSyncOf(f) => trace.ops[a.done..k]
                .iter()
                .any(|o| matches!(o, Op::File { file, op: IoOp::Sync } if *file == f)),
        };
        if durable && a.seq > min.0 {
            min = (a.seq, Some(*a));
        }
    }
    min
}

/// Every cut of `trace`, three or four images each (`every_cut`: the fourth, after a meta, with
/// an earlier write not durable lost); how many, how many of them opened a file after a
/// durable point wrote its meta there, and how many were of the fourth kind.
fn verify(trace: &Trace, label: &str, seed: u64) -> (usize, usize, usize) {
    let dir = scratch_dir();
    let (mut after_points, mut lost) = (0, 0);
    let n = every_cut(&trace.ops, trace.page_size, seed, |k, how| {
        after_points += usize::from(verify_cut(trace, k, how, dir.path(), label));
        lost += usize::from(matches!(how, Image::AllBut(_)));
    });
    (n, after_points, lost)
}

/// Whether the file the cut opened had a durable point's meta written into it before the
/// cut.
fn verify_cut(trace: &Trace, k: usize, how: Image, dir: &Path, label: &str) -> bool {
    let (names, files) =
        directory::image_at(&trace.initial, &trace.ops, k, how, trace.page_size, DB);
    let ctx = || format!("{label}: cut after {k} of {} ops, {how:?}", trace.ops.len());
    let id = *names
        .get(DB)
        .unwrap_or_else(|| panic!("{}: the database's name is gone", ctx()));
    let cut = open_cut(dir, &files[id], id, &ctx);
    let rx = cut.db.begin_read().unwrap();
    let (txid, got) = (rx.txid(), tree_of(&rx, "t"));
    drop(rx);
    let seq = seq_of(&got);
    let point = trace
        .points
        .iter()
        .filter(|p| p.at < k && p.file == id)
        .max_by_key(|p| p.txid);
    if let Some(p) = point {
        assert!(
            txid >= p.txid,
            "{}: opened file {id} at txid {txid}, commit {seq}, but a durable point wrote the \
             meta of txid {} into it durable by itself (op {})",
            ctx(),
            p.txid,
            p.at
        );
    }
    let (min, by) = min_durable(trace, k);
    assert!(
        seq >= min,
        "{}: opened file {id} at txid {txid}, commit {seq}, but commit {min} was acknowledged \
         durable ({})",
        ctx(),
        by.map_or(String::new(), |a| format!(
            "{} that returned after {} ops, {:?}",
            a.what, a.done, a.durable
        ))
    );
    let want = trace.states.get(&seq).unwrap_or_else(|| {
        panic!(
            "{}: opened file {id} at txid {txid}, commit {seq}, never committed",
            ctx()
        )
    });
    cut.holds_then_takes_a_commit(
        want,
        &format!("of file {id} at txid {txid}, commit {seq},"),
        &ctx,
    );
    point.is_some()
}

#[test]
fn every_cut_of_threads_racing_compaction_switches_opens_at_a_durable_whole_state() {
    let seeds: u64 = std::env::var("LARCH_THREAD_CUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let all = std::env::var("LARCH_THREAD_BACKGROUND").is_ok_and(|v| v == "all");
    let all_faults = std::env::var("LARCH_THREAD_DIR_FAULTS").is_ok_and(|v| v == "all");
    let (mut switches, mut syncs, mut across, mut cuts) = (0, 0, 0, 0);
    let (mut bg, mut bg_seeds, mut closes, mut point_cuts) = (BackgroundStats::default(), 0, 0, 0);
    let (mut dirs, mut fault_seeds, mut failed_seeds) = (DirStats::default(), 0, 0);
    // Leaves written before the commit by tails committed and aborted (`tail`).
    let mut spilled = [0; 2];
    let mut lost_images = 0;
    for seed in 0..seeds {
        let label = format!("seed {seed}");
        let dir = scratch_dir();
        let background = background_of(seed, all);
        let faults = dir_faults_of(seed, all_faults);
        let t0 = std::time::Instant::now();
        // Seeds that sync on another thread make runs of Async commits: fewer steps, for as
        // many operations to cut.
        let steps = if background.is_some() { 36 } else { 60 };
        let (trace, run) = run(&label, seed, steps, dir.path(), background, faults);
        let ran = t0.elapsed();
        let (n, after_points, lost) = verify(&trace, &label, seed);
        lost_images += lost;
        let st = BackgroundStats::of(&trace.ops);
        let ds = DirStats::of(&trace);
        eprintln!(
            "{label}: {n} cuts over {} ops and {lost} after a meta with a write before it \
             lost ({ran:.0?} to run, {:.0?} to cut), {} commits, {} \
             switches, {} syncs ({} begun in a switch), {} snapshots, {} timer ticks, {} \
             commits by the committing thread, {} second-process sessions, {} tails in key \
             order ({} leaves written before the commit) and {} aborted ({} leaves)",
            trace.ops.len(),
            t0.elapsed() - ran,
            trace.states.len() - 1,
            trace.switches,
            run.syncs.load(SeqCst),
            run.syncs_in_switches.load(SeqCst),
            run.snapshots.load(SeqCst),
            run.ticks.load(SeqCst),
            run.helper_commits.load(SeqCst),
            run.sessions.load(SeqCst),
            run.tails.load(SeqCst),
            run.spilled.load(SeqCst),
            run.aborted_tails.load(SeqCst),
            run.aborted_spilled.load(SeqCst),
        );
        spilled[0] += run.spilled.load(SeqCst);
        spilled[1] += run.aborted_spilled.load(SeqCst);
        if let Some(b) = background {
            eprintln!(
                "{label}: syncs on another thread done {} calls later, max_unsynced_bytes {} \
                 KiB, {} closes with no sync before: {} syncs there ended, {} durable points \
                 finished ({after_points} cuts after one), {} switches racing one, {} after one \
                 no durable meta followed, {} overtaken by a foreground sync",
                b.lag,
                b.max_unsynced >> 10,
                run.closes_unsynced.load(SeqCst),
                st.syncs,
                st.points,
                st.renames_racing_a_sync,
                st.renames_after_a_pending_point,
                st.overtaken,
            );
            bg.add(&st);
            bg_seeds += 1;
            closes += run.closes_unsynced.load(SeqCst);
            point_cuts += after_points;
        } else {
            assert!(
                st.syncs == 0 && st.points == 0,
                "{label}: no sync on another thread, yet {st:?}"
            );
        }
        if faults {
            let failure = run.failure.lock().unwrap().clone();
            eprintln!(
                "{label}: directory fsyncs failing: {} of {} failed: {} of {} switches', {} of \
                 {} re-tries', {} of {} compaction copies', {} of {} second-process opens'; {} \
                 switches' done again by a re-try ({} durable acknowledgements after one), {} \
                 by another directory fsync; {}",
                ds.failed,
                ds.calls,
                ds.switches_failed,
                ds.switches,
                ds.retries_failed,
                ds.retries,
                ds.copies_failed,
                ds.copies,
                ds.opens_failed,
                ds.opens,
                ds.redone,
                ds.acks_after_redo,
                ds.redone_elsewhere,
                failure.map_or("the process did not fail".into(), |f| format!(
                    "the process failed: {f}"
                )),
            );
            assert_eq!(
                run.opens_failed.load(SeqCst),
                ds.opens_failed,
                "{label}: second-process opens that failed, and their failed directory fsyncs"
            );
            dirs.add(&ds);
            fault_seeds += 1;
            failed_seeds += usize::from(run.failed());
        } else {
            assert!(
                ds.failed == 0 && !run.failed(),
                "{label}: no faults, yet {ds:?}"
            );
        }
        switches += trace.switches;
        syncs += run.syncs.load(SeqCst);
        across += run.syncs_in_switches.load(SeqCst);
        cuts += n;
    }
    eprintln!(
        "{seeds} seeds: {cuts} cuts and {lost_images} with a write before a meta lost, \
         {switches} switches, {syncs} syncs, {across} begun in a switch, leaves written before \
         the commit by {} committed and {} aborted",
        spilled[0], spilled[1]
    );
    eprintln!(
        "{bg_seeds} seeds syncing on another thread: {closes} closes with no sync before, {} \
         syncs there, {} durable points finished ({point_cuts} cuts after one), {} switches \
         racing such a sync, {} after one no durable meta followed, {} overtaken by a \
         foreground sync",
        bg.syncs,
        bg.points,
        bg.renames_racing_a_sync,
        bg.renames_after_a_pending_point,
        bg.overtaken
    );
    eprintln!(
        "{fault_seeds} seeds with directory fsyncs failing: {} of {} failed: {} of {} \
         switches', {} of {} re-tries' ({failed_seeds} processes failed), {} of {} compaction \
         copies', {} of {} second-process opens'; {} switches' done again by a re-try ({} \
         durable acknowledgements after one), {} by another directory fsync",
        dirs.failed,
        dirs.calls,
        dirs.switches_failed,
        dirs.switches,
        dirs.retries_failed,
        dirs.retries,
        dirs.copies_failed,
        dirs.copies,
        dirs.opens_failed,
        dirs.opens,
        dirs.redone,
        dirs.acks_after_redo,
        dirs.redone_elsewhere,
    );
    // The faults must happen where they matter: switches whose directory fsync failed, and a
    // later sync that fsynced the directory again before acknowledging anything (each seed
    // with faults fails its first switch's, and its re-tries succeed until the last third).
    assert!(
        fault_seeds == 0 || (dirs.failed > 0 && dirs.switches_failed > 0 && dirs.redone > 0),
        "directory fsyncs failing over {fault_seeds} seeds, but {dirs:?}"
    );
    // A re-try that fails (in the last third of a seed) poisons the handle and stops the run:
    // in half the seeds with faults or more (5 of the 10 among 40 seeds syncing on another
    // thread, 27 of 40 with LARCH_THREAD_DIR_FAULTS=all), in seed 1 one run in three:
    // required from 8 seeds with faults on.
    assert!(
        fault_seeds < 8 || dirs.retries_failed > 0,
        "no re-try of a directory fsync failed over {fault_seeds} seeds with faults: {dirs:?}"
    );
    assert!(
        seeds == 0 || lost_images > 0,
        "no cut after a meta with an earlier write not durable"
    );
    // Leaves written before the commit, in transactions that commit (their writes race
    // switches, syncs and durable points) and that abort (their pages go back).
    assert!(
        seeds == 0 || spilled.iter().all(|&n| n > 0),
        "leaves written before the commit over {seeds} seeds: {} committed, {} aborted",
        spilled[0],
        spilled[1]
    );
    // The races need switches and syncs to come up: a change to the options or the pacing
    // must not quietly stop generating them.
    assert!(
        switches >= 2 * seeds,
        "{switches} switches over {seeds} seeds: too few to race"
    );
    assert!(
        syncs >= 10 * seeds as usize,
        "{syncs} syncs over {seeds} seeds"
    );
    assert!(
        seeds == 0 || across >= 1,
        "no Db::sync began between a switch's rename and its directory fsync"
    );
    // Nor durable points in the background: they must start and finish among the threads
    // (2 to 9 a seed, fewer for the longer lags; the threads' timing varies).
    assert!(
        2 * bg.points >= bg_seeds,
        "{} durable points finished in the background over {bg_seeds} seeds syncing there",
        bg.points
    );
    assert!(
        bg.points == 0 || point_cuts > 0,
        "no cut opened a file after a durable point wrote its meta there"
    );
    // Overtaken by a foreground sync: 20-26 over the default two seeds syncing there.
    assert!(
        bg_seeds == 0 || bg.overtaken > 0,
        "no sync on another thread was overtaken by a foreground sync"
    );
    // Switches racing a sync on another thread are rare (0-1 over the default seeds, 2-3
    // over 20, 10 over 40): required from 40 seeds syncing there on (LARCH_THREAD_CUTS=40
    // with LARCH_THREAD_BACKGROUND=all), where the run is for them.
    assert!(
        bg_seeds < 40 || bg.renames_racing_a_sync > 0,
        "no compaction switch renamed while a sync on another thread was in flight over \
         {bg_seeds} seeds syncing there"
    );
}
