//! Power cuts while processes take turns writing one file, and processes killed at every step
//! of the lock-file protocol (docs/format.md, "Several processes"). Handles opened with
//! `Db::open_with_storage_as_killable_process` stand for the processes: each is attached to
//! the lock file on its own (their locks exclude each other as two processes' would), and
//! their writes, syncs, resizes and compaction's directory operations go to one log in the
//! order the disk saw them (larch-testkit's `directory`). Every cut of that log, with what came
//! after the last sync landing in several ways (testkit's `every_cut`: none, all, at random,
//! and after a meta all but one earlier write), must open at a whole committed state no older
//! than the newest commit acknowledged durable, and take a new commit.
//!
//! The scripts hand the writer lock back and forth under every durability: a process that
//! follows another rebuilds its state from the file (syncing it first unless the lock file
//! says it is durable); one with Async commits keeps the lock until it syncs; readers hold
//! snapshots across handoffs. And processes die: a [`Fate`] kills one before a chosen step
//! (larch_pager's kill.rs: its locks go at once, nothing more of it reaches the lock file or
//! the data file) — between its take of the writer lock and the take's count, right after the
//! take, amid its page writes, before its meta, between its meta and the sync or the
//! publication, before it releases the lock, while opening or closing, anywhere in a
//! background compaction (the copy, the switch, between the rename and the directory fsync) —
//! or between two calls, holding the lock for Async commits, or inside a write transaction. A
//! fresh process takes the dead one's place (after every process died, it recovers the file,
//! and makes its name durable: a compaction killed after its rename leaves one that a power cut
//! could undo). Every write
//! transaction must start on the newest meta in the file (a writer killed before publishing
//! leaves one the lock file does not name) and see that commit's contents, and no step may
//! make the file's newest commit an older one (there is no power cut in the run itself). A
//! process left alone compacts in the background (a compaction threshold), and its switch must
//! copy what a dead writer left unpublished. One commit in four, and half the transactions a
//! process dies inside, rewrite the tree's tail in key order (testkit's `rewrite_tail_in_key_order`): leaves are written
//! before the commit, one or two at a time, and a process may die amid those writes; the
//! test requires such leaves in transactions that committed and in those that died.
//! `LARCH_CRASH_CASES` sets the number of random
//! scripts (default 10), `LARCH_CRASH_FIRST_SEED` the first one's seed (default 0: a long run
//! can go on past the seeds an earlier one covered); the deaths reached are counted, and from
//! 10 scripts on each kind must come up.

mod support;
use larch_testkit::directory::{self, Log, Op, RecordingFs};
use larch_testkit::processes::{
    every_cut, newest_meta, open_cut, published, rewrite_tail_in_key_order, tree_in, tree_of, Tree,
};
use support::images::Image;
use support::recording::{open_rw, IoOp};
use support::{scratch_dir, Rng};

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use larch::{
    CompactionFs, Db, Durability, Error, Killer, LockStep, Options, ReadTx, Storage, WriteMode,
};

const DB: &str = "db.larch";

/// A commit: the file it is in (by its number in the log) and its txid. Ordered as the states
/// follow each other: a compaction's file holds everything of the file it replaced.
type Pos = (usize, u64);

// ---- deaths ---------------------------------------------------------------------------------

/// What a process does that another process or the disk sees; a kill comes before one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Lock(LockStep),
    /// A write of pages other than the metas.
    Pages,
    /// A write of a meta page.
    Meta,
    Sync,
    SetLen,
    /// The rename of a compacted file over the database's name.
    Rename,
    /// Another of compaction's directory operations (link, removal, directory sync).
    Dir,
}

/// Which events a [`Rule`] counts.
#[derive(Clone, Copy, Debug)]
enum Match {
    Any,
    Is(Event),
}

impl Match {
    fn matches(self, e: Event) -> bool {
        match self {
            Match::Any => true,
            Match::Is(x) => x == e,
        }
    }
}

/// Kill before the `skip`-th (from 0) event matching `before` that follows one matching
/// `after`, counting from when the rule was armed.
#[derive(Clone, Copy, Debug)]
struct Rule {
    before: Match,
    after: Option<Match>,
    skip: usize,
}

/// A rule and how far the events it counts have come.
#[derive(Debug, Default)]
struct Armed {
    rule: Option<Rule>,
    after_seen: bool,
    skipped: usize,
    /// Events since the rule was armed.
    seen: Vec<Event>,
}

impl Armed {
    fn arm(&mut self, rule: Option<Rule>) {
        self.rule = rule;
        self.after_seen = rule.is_some_and(|r| r.after.is_none());
        self.skipped = 0;
        self.seen.clear();
    }

    /// Does the process live to do `e`? If not, the events before it.
    fn lives_to(&mut self, e: Event) -> Result<(), Vec<Event>> {
        let Some(rule) = self.rule else {
            return Ok(());
        };
        if self.after_seen && rule.before.matches(e) {
            if self.skipped == rule.skip {
                self.rule = None;
                return Err(std::mem::take(&mut self.seen));
            }
            self.skipped += 1;
        }
        if rule.after.is_some_and(|a| a.matches(e)) {
            self.after_seen = true;
        }
        self.seen.push(e);
        Ok(())
    }
}

#[derive(Debug, Default)]
struct FateState {
    /// Counts the steps of the calls the test makes (on its own thread).
    calls: Armed,
    /// Counts the steps of the process's background compaction (on its thread).
    compaction: Armed,
    /// The event the process died before, and the events before it since the rule was armed.
    died: Option<(Event, Vec<Event>)>,
}

/// Decides when a simulated process dies: asked by its lock file ([`Killer`]) and by its
/// storage ([`Mortal`]) before each step. One rule counts the steps of the test's calls,
/// another those of a background compaction (which runs while the test waits for it), so a
/// script replays from its seed.
#[derive(Debug)]
struct Fate {
    state: Mutex<FateState>,
    dead: AtomicBool,
    thread: ThreadId,
}

impl Fate {
    fn new() -> Arc<Fate> {
        Arc::new(Fate {
            state: Default::default(),
            dead: AtomicBool::new(false),
            thread: std::thread::current().id(),
        })
    }

    /// Kill before `rule`'s step of the calls that follow.
    fn arm(&self, rule: Rule) {
        self.state.lock().unwrap().calls.arm(Some(rule));
    }

    fn disarm(&self) {
        self.state.lock().unwrap().calls.arm(None);
    }

    /// Kill before `rule`'s step of the background compaction that follows, if any.
    fn arm_compaction(&self, rule: Rule) {
        self.state.lock().unwrap().compaction.arm(Some(rule));
    }

    fn disarm_compaction(&self) {
        self.state.lock().unwrap().compaction.arm(None);
    }

    /// Killed between two calls (or inside a transaction).
    fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Does the process live to do `e`?
    fn lives_to(&self, e: Event) -> bool {
        if self.is_dead() {
            return false;
        }
        let mut st = self.state.lock().unwrap();
        let armed = if std::thread::current().id() == self.thread {
            &mut st.calls
        } else {
            &mut st.compaction
        };
        match armed.lives_to(e) {
            Ok(()) => true,
            Err(seen) => {
                self.dead.store(true, Ordering::SeqCst);
                st.died = Some((e, seen));
                false
            }
        }
    }

    /// What the death was, by the step it came before (for the counts).
    fn death(&self) -> String {
        let st = self.state.lock().unwrap();
        let Some((before, seen)) = &st.died else {
            return "between two calls".into();
        };
        let wrote = |e: Event| seen.contains(&e);
        let meta_unsynced = seen
            .iter()
            .rposition(|&s| s == Event::Meta)
            .is_some_and(|m| !seen[m..].contains(&Event::Sync));
        match before {
            Event::Lock(LockStep::CountTake) => "between the take and its count".into(),
            _ if seen.last() == Some(&Event::Lock(LockStep::CountTake)) => {
                format!("right after a counted take (before {before:?})")
            }
            Event::Lock(LockStep::PublishCommitted) if wrote(Event::Meta) => {
                "meta written, not published".into()
            }
            Event::Sync if meta_unsynced => "meta written, not synced".into(),
            Event::Meta if wrote(Event::Pages) => "pages written, no meta".into(),
            Event::Pages if wrote(Event::Pages) => "amid page writes".into(),
            Event::Dir if wrote(Event::Rename) => "renamed into place, directory not synced".into(),
            Event::Lock(LockStep::PublishDurable) if wrote(Event::Meta) => {
                "published, not as durable".into()
            }
            Event::Lock(LockStep::ReleaseWriter) if wrote(Event::Meta) => {
                "published, lock not released".into()
            }
            other => format!("before {other:?}"),
        }
    }
}

impl Killer for Fate {
    fn kills_before(&self, step: LockStep) -> bool {
        !self.lives_to(Event::Lock(step))
    }
    fn killed(&self) -> bool {
        self.is_dead()
    }
}

fn killed() -> io::Error {
    io::Error::other("the process was killed")
}

/// A process's storage of a file: nothing reaches the file (or the log) once it is dead.
#[derive(Debug)]
struct Mortal {
    inner: Box<dyn Storage>,
    fate: Arc<Fate>,
    /// Writes below this offset are of the meta pages.
    meta_end: u64,
}

impl Storage for Mortal {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.fate.lives_to(Event::SetLen) {
            return Err(killed());
        }
        self.inner.set_len(len)
    }
    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let e = if offset < self.meta_end {
            Event::Meta
        } else {
            Event::Pages
        };
        if !self.fate.lives_to(e) {
            return Err(killed());
        }
        self.inner.write_at(offset, bufs)
    }
    fn sync(&self) -> io::Result<()> {
        if !self.fate.lives_to(Event::Sync) {
            return Err(killed());
        }
        self.inner.sync()
    }
    fn file(&self) -> &File {
        self.inner.file()
    }
}

/// A process's compaction files and directory operations, recorded, and stopped by its death.
#[derive(Debug)]
struct MortalFs {
    inner: RecordingFs,
    fate: Arc<Fate>,
    meta_end: u64,
}

impl MortalFs {
    fn dir_op(&self, op: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        if !self.fate.lives_to(Event::Dir) {
            return Err(killed());
        }
        op()
    }
}

impl CompactionFs for MortalFs {
    fn storage(&self, path: &Path, file: File, mode: WriteMode) -> Box<dyn Storage> {
        Box::new(Mortal {
            inner: self.inner.storage(path, file, mode),
            fate: self.fate.clone(),
            meta_end: self.meta_end,
        })
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.dir_op(|| self.inner.hard_link(from, to))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if !self.fate.lives_to(Event::Rename) {
            return Err(killed());
        }
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.dir_op(|| self.inner.remove(path))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.dir_op(|| self.inner.sync_dir(dir))
    }
}

// ---- the script -----------------------------------------------------------------------------

/// One simulated process.
struct Proc {
    db: Db,
    fate: Arc<Fate>,
    /// Its number, in the order processes were opened.
    name: usize,
    /// Its newest commit (what a sync of it makes durable).
    last: Pos,
    /// It keeps the writer lock for Async commits.
    holds: bool,
}

/// Everything a run recorded.
struct Trace {
    initial: Vec<Vec<u8>>,
    ops: Vec<Op>,
    /// Committed states. A commit whose process died before its meta was written is replaced
    /// by the next commit of that txid (it cannot be opened: no meta of it is on the disk).
    states: BTreeMap<Pos, Tree>,
    /// (ops done when the call returned, the commit, durability it made durable).
    acks: Vec<(usize, Pos, Durability)>,
    page_size: usize,
    counts: Counts,
}

/// What a run reached.
#[derive(Default)]
struct Counts {
    handoffs: usize,
    /// Deaths by where they came ("commit: meta written, not published").
    deaths: BTreeMap<String, usize>,
    opened: usize,
    /// Closes that the kill rule did not reach.
    closes: usize,
    /// Opens with no other process attached (recovery), after the first.
    recoveries: usize,
    switches: usize,
    /// Switches by a process whose lock file named an older commit than the file's newest
    /// meta (a dead writer's) when the call that compacted began.
    switches_after_unpublished: usize,
    /// Closes by a process left alone by a writer killed before publishing its meta (the
    /// close is its first take since).
    closes_after_unpublished: usize,
    /// Leaves written before the commit (`rewrite_tail_in_key_order`) in transactions that committed, and in
    /// those whose process died first.
    spilled: [usize; 2],
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.handoffs += o.handoffs;
        for (k, v) in &o.deaths {
            *self.deaths.entry(k.clone()).or_default() += v;
        }
        self.opened += o.opened;
        self.closes += o.closes;
        self.recoveries += o.recoveries;
        self.switches += o.switches;
        self.switches_after_unpublished += o.switches_after_unpublished;
        self.closes_after_unpublished += o.closes_after_unpublished;
        self.spilled[0] += o.spilled[0];
        self.spilled[1] += o.spilled[1];
    }

    /// Deaths whose description contains `what`.
    fn deaths(&self, what: &str) -> usize {
        self.deaths
            .iter()
            .filter(|(k, _)| k.contains(what))
            .map(|(_, v)| v)
            .sum()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

/// Where to kill a process inside a commit or a sync.
fn pick_rule(rng: &mut Rng) -> Rule {
    use Event::*;
    use Match::*;
    let after_meta = |before| Rule {
        before: Is(before),
        after: Some(Is(Meta)),
        skip: 0,
    };
    match rng.below(16) {
        0..=3 => after_meta(Lock(LockStep::PublishCommitted)),
        4 | 5 => Rule {
            before: Is(Lock(LockStep::CountTake)),
            after: None,
            skip: 0,
        },
        6 | 7 => Rule {
            before: Any,
            after: Some(Is(Lock(LockStep::CountTake))),
            skip: 0,
        },
        8 | 9 => Rule {
            before: Is(Pages),
            after: Some(Is(Pages)),
            skip: rng.below(2) as usize,
        },
        10 => Rule {
            before: Is(Meta),
            after: Some(Is(Pages)),
            skip: 0,
        },
        11 => after_meta(Sync),
        12 => after_meta(Lock(LockStep::PublishDurable)),
        13 => after_meta(Lock(LockStep::ReleaseWriter)),
        _ => Rule {
            before: Any,
            after: None,
            skip: rng.below(16) as usize,
        },
    }
}

struct Sim {
    path: PathBuf,
    log: Arc<Log>,
    opts: Options,
    page_size: usize,
    procs: [Option<Proc>; 2],
    states: BTreeMap<Pos, Tree>,
    acks: Vec<(usize, Pos, Durability)>,
    /// Readers held across steps: (slot of their process, the commit they read).
    held: Vec<(usize, Pos, ReadTx)>,
    counts: Counts,
    writer_was: usize,
    rng: Rng,
    /// "seed N", for messages.
    label: String,
    /// A writer just died between its meta and the publication, leaving one process: let that
    /// one sync next (its sync may start a compaction whose switch is its first take since) or
    /// close (its first take since is the close's).
    after_unpublished: bool,
    /// The newest commit in the file so far: no step may make an older one the newest (there
    /// is no power cut in the run itself; a meta written is never unwritten).
    high_mark: Pos,
    /// Kill a process left alone at a random step of some of its compactions.
    kill_compactions: bool,
}

impl Sim {
    fn ops_len(&self) -> usize {
        self.log.len()
    }

    /// The file the database's name is now, by number.
    fn current(&self) -> usize {
        self.log.file_named(&self.path)
    }

    fn newest_meta_now(&self) -> u64 {
        newest_meta(&File::open(&self.path).unwrap(), self.page_size)
    }

    fn live(&self) -> Vec<usize> {
        (0..2).filter(|&i| self.procs[i].is_some()).collect()
    }

    fn peer_alive(&self, who: usize) -> bool {
        self.procs[1 - who].is_some()
    }

    /// If the other process than the one in `slot` keeps the writer lock for Async commits,
    /// its sync (alone, it may compact: [`Sim::settle`]).
    fn release_peer(&mut self, slot: usize) {
        if self.procs[1 - slot].as_ref().is_some_and(|o| o.holds) {
            self.compacting(1 - slot, |s| s.sync(1 - slot, None));
        }
    }

    fn record_death(&mut self, what: &str, fate: &Fate) {
        let why = format!("{what}: {}", fate.death());
        *self.counts.deaths.entry(why).or_default() += 1;
    }

    /// Check and end the snapshots process `slot` holds: each still reads the state it began
    /// on.
    fn end_snapshots_of(&mut self, slot: usize) {
        let (theirs, ours): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(s, _, _)| *s == slot);
        self.held = ours;
        for (_, pos, rx) in theirs {
            check_snapshot(&rx, pos, &self.states, &self.label);
        }
    }

    /// The process in `slot` is dead: drop its readers and its handle (nothing of it reaches
    /// the disk or the lock file any more).
    fn bury(&mut self, slot: usize) {
        let p = self.procs[slot].take().unwrap();
        p.fate.kill();
        // Its snapshots were whole up to its death (nothing ran since).
        self.end_snapshots_of(slot);
        drop(p);
    }

    /// Open a new process in the empty `slot`, killed before `rule`'s step if it reaches it.
    fn open(&mut self, slot: usize, rule: Option<Rule>) {
        if self.peer_alive(slot) {
            // The open takes the writer lock, waiting: the other process must not hold it.
            self.release_peer(slot);
        } else if self.counts.opened > 0 {
            self.counts.recoveries += 1;
        }
        let fate = Fate::new();
        if let Some(r) = rule {
            fate.arm(r);
        }
        let id = self.current();
        let meta_end = 2 * self.page_size as u64;
        let storage = |p: &Path| -> Box<dyn Storage> {
            Box::new(Mortal {
                inner: Box::new(directory::recording(open_rw(p), id, &self.log)),
                fate: fate.clone(),
                meta_end,
            })
        };
        let fs = Arc::new(MortalFs {
            inner: RecordingFs::new(self.log.clone()),
            fate: fate.clone(),
            meta_end,
        });
        let r = Db::open_with_storage_as_killable_process(
            &self.path,
            storage,
            self.opts,
            fs,
            fate.clone(),
        );
        self.counts.opened += 1;
        let name = self.counts.opened;
        if fate.is_dead() {
            self.record_death("open", &fate);
            drop(r);
            return;
        }
        let db = r.unwrap_or_else(|e| panic!("{}, process {name}: open: {e}", self.label));
        fate.disarm();
        let txid = db.begin_read().unwrap().txid();
        self.procs[slot] = Some(Proc {
            db,
            fate,
            name,
            last: (id, txid),
            holds: false,
        });
    }

    /// A commit by the process in `slot`, killed before `rule`'s step if it reaches it.
    fn commit(&mut self, slot: usize, d: Durability, rule: Option<Rule>) {
        // The other keeps the lock for its Async commits until it syncs.
        self.release_peer(slot);
        let file = self.current();
        let newest = self.newest_meta_now();
        let fate = self.procs[slot].as_ref().unwrap().fate.clone();
        if let Some(r) = rule {
            fate.arm(r);
        }
        let p = self.procs[slot].as_ref().unwrap();
        let name = p.name;
        let mut next = Tree::new();
        let (mut txid, mut spilled) = (0, 0);
        let r = (|| -> larch::Result<()> {
            let mut tx = p.db.try_begin_write()?;
            txid = tx.txid();
            tx.set_durability(d);
            let seen = tree_in(&tx, "t")?;
            if fate.is_dead() {
                // Killed while it caught up with the file: what it sees no longer matters.
                return Ok(());
            }
            // It builds on the newest commit in the file, or a newer one of its own.
            assert!(
                txid > newest,
                "{}, process {name} began txid {txid}, but the file holds a meta of txid \
                 {newest}: it built on an older state and reuses pages that meta reaches",
                self.label
            );
            let base = (file, txid - 1);
            let want = self.states.get(&base).unwrap_or_else(|| {
                panic!(
                    "{}, process {name} built on {base:?}, never committed",
                    self.label
                )
            });
            assert!(
                seen == *want,
                "{}, process {name}: txid {txid} does not start from the contents of {base:?}",
                self.label
            );
            next = seen;
            let mut t = tx.open_tree("t")?;
            // A commit that may die writes more, and more overflow values (each written at
            // its insert, before the commit's pages): more steps to die between.
            let (n, big) = if rule.is_some() {
                (2 + self.rng.below(6), 2)
            } else {
                (1 + self.rng.below(4), 5)
            };
            for _ in 0..n {
                let k = key(self.rng.below(40));
                if self.rng.below(4) == 0 {
                    t.remove(&k)?;
                    next.remove(&k);
                } else {
                    let len = if self.rng.below(big) == 0 { 6000 } else { 40 };
                    let v = vec![self.rng.below(256) as u8; len];
                    t.insert(&k, &v)?;
                    next.insert(k, v);
                }
            }
            // One commit in four rewrites the tree's tail in key order, writing leaves before
            // the commit (a process may die amid those writes).
            if self.rng.below(4) == 0 {
                let before = p.db.io_stats().spilled_pages;
                let r = rewrite_tail_in_key_order(&mut t, &mut next, txid, &mut self.rng);
                spilled = (p.db.io_stats().spilled_pages - before) as usize;
                r?;
            }
            drop(t);
            // Recorded before the commit: a process killed after its meta was written leaves
            // a commit that a cut, and the next writer, may open.
            self.states.insert((file, txid), next.clone());
            tx.commit()
        })();
        if fate.is_dead() {
            self.counts.spilled[1] += spilled;
            self.record_death("commit", &fate);
            self.bury(slot);
            return;
        }
        fate.disarm();
        if let Err(e) = r {
            panic!("{}, process {name}: commit of txid {txid}: {e}", self.label);
        }
        self.counts.spilled[0] += spilled;
        if self.writer_was != name {
            self.counts.handoffs += 1;
            self.writer_was = name;
        }
        let p = self.procs[slot].as_mut().unwrap();
        p.last = (file, txid);
        p.holds = d == Durability::Async;
        self.acks.push((self.ops_len(), (file, txid), d));
    }

    /// `Db::sync` of the process in `slot`, killed before `rule`'s step if it reaches it.
    fn sync(&mut self, slot: usize, rule: Option<Rule>) {
        let fate = self.procs[slot].as_ref().unwrap().fate.clone();
        if let Some(r) = rule {
            fate.arm(r);
        }
        let r = self.procs[slot].as_ref().unwrap().db.sync();
        if fate.is_dead() {
            self.record_death("sync", &fate);
            self.bury(slot);
            return;
        }
        fate.disarm();
        r.unwrap();
        let p = self.procs[slot].as_mut().unwrap();
        p.holds = false;
        let last = p.last;
        self.acks.push((self.ops_len(), last, Durability::Sync));
    }

    /// An aborted transaction (its overflow value is written at insert time).
    fn abort(&mut self, slot: usize) {
        let p = self.procs[slot].as_ref().unwrap();
        if let Ok(tx) = p.db.try_begin_write() {
            tx.open_tree("t")
                .unwrap()
                .insert(&key(self.rng.below(40)), &vec![9u8; 7000])
                .unwrap();
            tx.abort();
        }
    }

    /// Killed inside a write transaction, its overflow values written, and half the time
    /// leaves written before the commit (`rewrite_tail_in_key_order`).
    fn die_in_transaction(&mut self, slot: usize) {
        let p = self.procs[slot].as_ref().unwrap();
        if let Ok(tx) = p.db.try_begin_write() {
            let mut t = tx.open_tree("t").unwrap();
            for _ in 0..1 + self.rng.below(3) {
                t.insert(&key(self.rng.below(40)), &vec![7u8; 7000])
                    .unwrap();
            }
            if self.rng.below(2) == 0 {
                let before = p.db.io_stats().spilled_pages;
                rewrite_tail_in_key_order(&mut t, &mut Tree::new(), u64::MAX, &mut self.rng)
                    .unwrap();
                self.counts.spilled[1] += (p.db.io_stats().spilled_pages - before) as usize;
            }
            drop(t);
            p.fate.kill();
            drop(tx);
            *self
                .counts
                .deaths
                .entry("inside a write transaction".into())
                .or_default() += 1;
            self.bury(slot);
        }
    }

    /// Killed between two calls.
    fn die_between_calls(&mut self, slot: usize) {
        let holds = self.procs[slot].as_ref().unwrap().holds;
        let what = if holds {
            "between calls, holding the lock for Async commits"
        } else {
            "between calls"
        };
        *self.counts.deaths.entry(what.into()).or_default() += 1;
        self.bury(slot);
    }

    /// Closed, killed before `rule`'s step of the close if it reaches it.
    fn close(&mut self, slot: usize, rule: Rule) {
        let fate = self.procs[slot].as_ref().unwrap().fate.clone();
        self.end_snapshots_of(slot);
        let p = self.procs[slot].take().unwrap();
        fate.arm(rule);
        drop(p);
        if fate.is_dead() {
            self.record_death("close", &fate);
        } else {
            self.counts.closes += 1;
        }
    }

    /// Take or drop a reader: snapshots held across handoffs pin pages.
    fn reader(&mut self, slot: usize) {
        if self.held.len() < 3 && self.rng.below(2) == 0 {
            let file = self.current();
            let rx = self.procs[slot].as_ref().unwrap().db.begin_read().unwrap();
            self.held.push((slot, (file, rx.txid()), rx));
        } else if !self.held.is_empty() {
            let i = self.rng.below(self.held.len() as u64) as usize;
            let (_, pos, rx) = self.held.swap_remove(i);
            check_snapshot(&rx, pos, &self.states, &self.label);
        }
    }

    /// After a commit or a sync by the process in `slot`: let a background compaction it
    /// started finish, and if it switched the file, check that the new file holds the old
    /// one's newest commit (`old` is the old file, opened before the call; `unpublished`: the
    /// lock file named an older commit than that file's newest meta then).
    fn settle(&mut self, slot: usize, file: usize, old: &File, unpublished: bool) {
        let Some(p) = self.procs[slot].as_mut() else {
            return;
        };
        let r = p.db.wait_for_compaction();
        p.fate.disarm_compaction();
        let dead = p.fate.is_dead();
        match r {
            Ok(_) | Err(Error::Compaction(_)) => {}
            Err(_) if dead => {}
            Err(e) => panic!("{}, process {}: compaction: {e}", self.label, p.name),
        }
        let now = self.log.file_named(&self.path);
        // Every commit in the old file, and this process's own (Async ones too).
        let newest = newest_meta(old, self.page_size);
        let from = if p.last.0 == file {
            (file, newest.max(p.last.1))
        } else {
            (file, newest)
        };
        if dead {
            // Killed in its compaction: after the rename, the new file holds what the last
            // round copied, synced before the rename.
            if now != file {
                let pos = (
                    now,
                    newest_meta(&File::open(&self.path).unwrap(), self.page_size),
                );
                let got = self.states[&from].clone();
                self.states.insert(pos, got);
                self.counts.switches += 1;
            }
            let fate = p.fate.clone();
            self.record_death("compaction", &fate);
            self.bury(slot);
            return;
        }
        if now == file {
            return;
        }
        let rx = p.db.begin_read().unwrap();
        let got = tree_of(&rx, "t");
        assert!(
            self.states.get(&from) == Some(&got),
            "{}, process {}: the compacted file (txid {}) does not hold commit {from:?}, the \
             old file's newest{}",
            self.label,
            p.name,
            rx.txid(),
            if unpublished {
                " (left by a writer killed before publishing it)"
            } else {
                ""
            }
        );
        let pos = (now, rx.txid());
        drop(rx);
        p.last = pos;
        self.states.insert(pos, got);
        self.counts.switches += 1;
        if unpublished {
            self.counts.switches_after_unpublished += 1;
        }
    }

    /// One step of the script.
    fn step(&mut self) {
        let live = self.live();
        if std::mem::take(&mut self.after_unpublished) && live.len() == 1 {
            let who = live[0];
            if self.rng.below(3) == 0 {
                let rule = Rule {
                    before: Match::Any,
                    after: None,
                    skip: usize::MAX,
                };
                self.close(who, rule);
                self.counts.closes_after_unpublished += 1;
            } else {
                self.compacting(who, |s| s.sync(who, None));
            }
            return;
        }
        if live.is_empty() || (live.len() == 1 && self.rng.below(4) == 0) {
            let slot = usize::from(self.procs[0].is_some());
            let rule = (self.rng.below(3) == 0).then(|| Rule {
                before: Match::Any,
                after: None,
                skip: self.rng.below(10) as usize,
            });
            self.open(slot, rule);
            return;
        }
        let who = live[self.rng.below(live.len() as u64) as usize];
        let durability = |rng: &mut Rng| {
            [Durability::Sync, Durability::NoMetaSync, Durability::Async][rng.below(3) as usize]
        };
        // Deaths inside a call only while another process is attached: then no compaction
        // of the dying one runs on (whether it got far could not replay from the seed).
        let may_die = self.peer_alive(who);
        match self.rng.below(26) {
            15..=19 if may_die => {
                let d = durability(&mut self.rng);
                let rule = pick_rule(&mut self.rng);
                self.commit(who, d, Some(rule));
                self.after_death(who);
            }
            0..=9 | 15..=19 => {
                let d = durability(&mut self.rng);
                self.compacting(who, |s| s.commit(who, d, None));
            }
            20 | 24 | 25 if may_die => {
                // A sync with something to write: its meta, the publication, the release.
                if !self.procs[who].as_ref().unwrap().holds {
                    self.commit(who, Durability::Async, None);
                }
                let rule = pick_rule(&mut self.rng);
                self.sync(who, Some(rule));
                self.after_death(who);
            }
            10 | 20 | 24 | 25 => self.compacting(who, |s| s.sync(who, None)),
            11 => self.abort(who),
            12..=14 => self.reader(who),
            21 if self.rng.below(2) == 0 => {
                // Most often holding the writer lock for an Async commit: it is lost with it.
                if may_die && !self.procs[who].as_ref().unwrap().holds && self.rng.below(2) == 0 {
                    self.commit(who, Durability::Async, None);
                }
                self.die_between_calls(who)
            }
            21 => self.die_in_transaction(who),
            22 => {
                let rule = Rule {
                    before: Match::Any,
                    after: None,
                    skip: self.rng.below(10) as usize,
                };
                self.close(who, rule);
            }
            _ if live.len() == 2 => self.reader(who),
            _ => {
                let rule = (self.rng.below(2) == 0).then(|| Rule {
                    before: Match::Any,
                    after: None,
                    skip: self.rng.below(10) as usize,
                });
                self.open(1 - who, rule);
            }
        }
    }

    /// After a death step of the process in `slot`: if it died with its meta unpublished and
    /// left one process, that one syncs next.
    fn after_death(&mut self, slot: usize) {
        if self.procs[slot].is_none() && self.procs[1 - slot].is_some() {
            let unpublished = published(&self.path).is_some_and(|p| p < self.newest_meta_now());
            self.after_unpublished = unpublished;
        }
    }

    /// Run `call` (a commit or a sync of the process in `slot`), then [`Sim::settle`].
    fn compacting(&mut self, slot: usize, call: impl FnOnce(&mut Sim)) {
        if self.kill_compactions && !self.peer_alive(slot) && self.rng.below(4) == 0 {
            // Alone, it may compact: then killed somewhere in the copy or the switch.
            let rule = Rule {
                before: Match::Any,
                after: None,
                skip: self.rng.below(40) as usize,
            };
            self.procs[slot].as_ref().unwrap().fate.arm_compaction(rule);
        }
        let file = self.current();
        let old = File::open(&self.path).unwrap();
        let unpublished =
            published(&self.path).is_some_and(|p| p < newest_meta(&old, self.page_size));
        call(self);
        self.settle(slot, file, &old, unpublished);
    }
}

impl Sim {
    /// A script over a new database `DB` in `dir`, its random choices from `seed`.
    fn new(dir: &Path, label: &str, seed: u64) -> Sim {
        let path = dir.join(DB);
        // A process left alone compacts once a tenth of its file is free (the check on every
        // commit and sync; the timer out of the way, so a script replays from its seed).
        let opts = Options::default()
            .compaction_threshold(Some(0.1))
            .compaction_min_bytes(0)
            .compaction_check_every(Duration::from_secs(3600));
        // Review of exp-sync-behind: a third of the seeds carry at most 16 free-map bits, so
        // processes taking turns cross the cap after each other's behind Sync commits.
        let opts = if seed % 3 == 1 {
            opts.carried_max_bits(16)
        } else {
            opts
        };
        drop(Db::open(&path, opts).unwrap());
        let log = Log::of_file(&path);
        let mut states = BTreeMap::new();
        states.insert((0, 0), Tree::new());
        Sim {
            path,
            log,
            opts,
            page_size: opts.get_page_size(),
            procs: [None, None],
            states,
            acks: Vec::new(),
            held: Vec::new(),
            counts: Counts::default(),
            writer_was: 0,
            rng: Rng(seed),
            after_unpublished: false,
            high_mark: (0, 0),
            kill_compactions: true,
            label: label.to_string(),
        }
    }

    /// After each step: the file's newest commit never goes back.
    fn check_high_mark(&mut self) {
        let now = (self.current(), self.newest_meta_now());
        assert!(
            now >= self.high_mark,
            "{}: the file's newest commit went back from {:?} to {now:?} without a power cut",
            self.label,
            self.high_mark
        );
        self.high_mark = now;
    }

    /// What the script recorded (the processes still open are dropped: their close-time
    /// writes are left out, they are not what is checked here).
    fn finish(mut self) -> Trace {
        for (_, pos, rx) in std::mem::take(&mut self.held) {
            check_snapshot(&rx, pos, &self.states, &self.label);
        }
        let ops = self.log.ops.lock().unwrap().clone();
        let initial = self.log.files.lock().unwrap().initial.clone();
        drop(std::mem::take(&mut self.procs));
        Trace {
            initial,
            ops,
            states: self.states,
            acks: self.acks,
            page_size: self.page_size,
            counts: self.counts,
        }
    }
}

/// A random script of `steps` steps, two processes to begin with.
fn run(label: &str, seed: u64, steps: usize) -> Trace {
    // Leaves of the tails (`rewrite_tail_in_key_order`) are written 1 or 2 at a time: the built-in 64 needs longer
    // ones. Every process of the script is this thread.
    larch::set_spill_batch(1 + (seed / 2 % 2) as usize);
    let dir = scratch_dir();
    let mut sim = Sim::new(dir.path(), label, seed);
    sim.open(0, None);
    sim.open(1, None);
    for _ in 0..steps {
        sim.step();
        sim.check_high_mark();
    }
    sim.finish()
}

/// Every cut of `trace`, three or four images each (`every_cut`); how many.
fn verify(trace: &Trace, label: &str, seed: u64) -> usize {
    let dir = scratch_dir();
    every_cut(&trace.ops, trace.page_size, seed, |k, how| {
        verify_cut(trace, k, how, dir.path(), label)
    })
}

/// A snapshot held across other processes' commits still shows its commit: no page it
/// reaches was reused (a writer that follows another process keeps every page free in the
/// file's newest commit until older readers are gone; a dead process's slots pin theirs until
/// cleared).
fn check_snapshot(rx: &ReadTx, pos: Pos, states: &BTreeMap<Pos, Tree>, label: &str) {
    assert!(
        states.get(&pos) == Some(&tree_of(rx, "t")),
        "{label}: snapshot {pos:?} changed under its reader"
    );
}

/// The newest commit a cut after `k` ops must show at least: a Sync commit once acknowledged,
/// a NoMetaSync one once a later sync of its file completed; Async ones never on their own.
fn min_durable(trace: &Trace, k: usize) -> Pos {
    let mut min = (0, 0);
    for &(done, pos, d) in &trace.acks {
        if done > k {
            continue;
        }
        let durable = match d {
            Durability::Sync => true,
            Durability::NoMetaSync => trace.ops[done..k]
                .iter()
                .any(|o| matches!(o, Op::File { file, op: IoOp::Sync } if *file == pos.0)),
            Durability::Async => false,
        };
        if durable {
            min = min.max(pos);
        }
    }
    min
}

fn verify_cut(trace: &Trace, k: usize, how: Image, dir: &Path, label: &str) {
    let (names, files) =
        directory::image_at(&trace.initial, &trace.ops, k, how, trace.page_size, DB);
    let ctx = || format!("{label}: cut after {k} of {} ops, {how:?}", trace.ops.len());
    let id = *names
        .get(DB)
        .unwrap_or_else(|| panic!("{}: the database's name is gone", ctx()));
    let cut = open_cut(dir, &files[id], id, &ctx);
    let pos = (id, cut.db.begin_read().unwrap().txid());
    let min = min_durable(trace, k);
    assert!(
        pos >= min,
        "{}: opened commit {pos:?}, but {min:?} was acknowledged durable",
        ctx()
    );
    let want = trace
        .states
        .get(&pos)
        .unwrap_or_else(|| panic!("{}: opened commit {pos:?}, never committed", ctx()));
    cut.holds_then_takes_a_commit(want, &format!("at {pos:?}"), &ctx);
}

#[test]
fn every_cut_of_processes_taking_turns_and_dying_opens_at_a_durable_whole_state() {
    let cases: u64 = std::env::var("LARCH_CRASH_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    // LARCH_CRASH_FIRST_SEED: start past the seeds earlier runs covered.
    let first: u64 = std::env::var("LARCH_CRASH_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut total = Counts::default();
    for seed in first..first + cases {
        let label = format!("seed {seed}");
        let trace = run(&label, seed * 7 + 1, 60);
        let cuts = verify(&trace, &label, seed);
        let c = &trace.counts;
        eprintln!(
            "{label}: {cuts} cuts over {} ops, {} handoffs, {} processes, {} deaths, {} \
             switches, leaves written before the commit: {} committed, {} died",
            trace.ops.len(),
            c.handoffs,
            c.opened,
            c.deaths.values().sum::<usize>(),
            c.switches,
            c.spilled[0],
            c.spilled[1],
        );
        total.add(c);
    }
    eprintln!(
        "deaths over {cases} scripts ({} processes, {} closed whole, {} recoveries, {} \
         handoffs, {} switches, {} after an unpublished meta, {} closes after one):",
        total.opened,
        total.closes,
        total.recoveries,
        total.handoffs,
        total.switches,
        total.switches_after_unpublished,
        total.closes_after_unpublished
    );
    for (what, n) in &total.deaths {
        eprintln!("  {n:4}  {what}");
    }
    // Each kind of death must come up, so that a change to the scripts cannot quietly stop
    // generating one (a bug of each kind was found only by a hand-written test before).
    if cases < 10 {
        return;
    }
    for (what, min) in [
        // Its meta in the file, the lock file naming the commit before.
        ("meta written, not published", 8),
        ("between the take and its count", 4),
        ("right after a counted take", 4),
        ("amid page writes", 1),
        ("pages written, no meta", 1),
        ("published, not as durable", 1),
        ("published, lock not released", 1),
        ("sync: ", 2),
        ("open: ", 4),
        ("close: ", 2),
        ("holding the lock for Async commits", 1),
        ("inside a write transaction", 1),
        ("compaction: ", 2),
    ] {
        assert!(
            total.deaths(what) >= min,
            "{cases} scripts reached {} deaths \"{what}\", fewer than {min}",
            total.deaths(what)
        );
    }
    assert!(
        total.handoffs >= 4 * cases as usize,
        "{} handoffs",
        total.handoffs
    );
    assert!(total.recoveries >= 4, "{} recoveries", total.recoveries);
    assert!(
        total.spilled.iter().all(|&n| n > 0),
        "leaves written before the commit: {} committed, {} in processes that died",
        total.spilled[0],
        total.spilled[1]
    );
    assert!(
        total.switches_after_unpublished >= 2,
        "{} background switches after a writer killed before publishing",
        total.switches_after_unpublished
    );
    assert!(
        total.closes_after_unpublished >= 2,
        "{} closes after a writer killed before publishing",
        total.closes_after_unpublished
    );
}

/// A process killed between its background switch's rename and the directory fsync leaves a
/// name that a power cut could undo. The next process to open the file (alone: it recovers
/// it) must make that name durable before it acknowledges a commit in the file the name
/// reaches, or a power cut takes the commit away with the rename.
#[test]
fn a_commit_after_a_switch_killed_before_its_directory_sync_survives_a_power_cut() {
    let dir = scratch_dir();
    let label = "killed between the rename and the directory sync";
    let mut sim = Sim::new(dir.path(), label, 3);
    sim.kill_compactions = false;
    sim.open(0, None);
    for _ in 0..400 {
        let Some(p) = sim.procs[0].as_ref() else {
            break;
        };
        p.fate.arm_compaction(Rule {
            before: Match::Is(Event::Dir),
            after: Some(Match::Is(Event::Rename)),
            skip: 0,
        });
        sim.compacting(0, |s| s.commit(0, Durability::Sync, None));
        sim.check_high_mark();
    }
    assert_eq!(
        sim.counts
            .deaths("compaction: renamed into place, directory not synced"),
        1,
        "no compaction reached its rename: {:?}",
        sim.counts.deaths
    );
    sim.open(0, None);
    sim.commit(0, Durability::Sync, None);
    sim.check_high_mark();
    let trace = sim.finish();
    verify(&trace, label, 0);
}
