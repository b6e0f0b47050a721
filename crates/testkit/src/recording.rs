//! A `Storage` that does every write, sync and resize on a real file (the engine's map reads
//! it) and records it in an ordered log, so a power-cut simulation can later rebuild the image
//! a disk could hold after any prefix of the log (see [`crate::images`]). An optional
//! [`FaultPlan`] makes chosen calls fail.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use larch::Storage;

/// One storage call that reached the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoOp {
    Write {
        off: u64,
        data: Vec<u8>,
    },
    /// A write durable when it returned, and nothing else with it (`Storage::write_durable`:
    /// `RWF_DSYNC`). A fault that cuts it short logs the part written as a plain `Write`.
    DurableWrite {
        off: u64,
        data: Vec<u8>,
    },
    Sync,
    /// A sync started on another thread (`Storage::background_sync`), numbered: no two in
    /// the process share a number, whichever `Recording` started them.
    SyncStart(u64),
    /// That sync returned Ok: what was logged before its start is durable.
    SyncEnd(u64),
    SetLen(u64),
}

/// The ordered log a [`Recording`] appends to; several `Recording`s (a file closed and
/// reopened, or several files) may share one.
pub type IoLog<T = IoOp> = Arc<Mutex<Vec<T>>>;

/// Which kind of storage call; `as usize` indexes per-kind counters (write 0, sync 1, resize 2,
/// sync on another thread 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Write,
    Sync,
    SetLen,
    /// A sync on another thread (`Storage::background_sync`), asked about when it starts and
    /// only by a [`Recording`] that takes faults there
    /// ([`Recording::faults_in_background`]): a plan that counts kinds in an array of three
    /// is never asked about it otherwise.
    BackgroundSync,
}

/// How a planned failure behaves.
#[derive(Debug)]
pub enum Fault {
    /// The call returns this error and nothing of it reaches the file or the log.
    Fail(io::Error),
    /// A write's first half reaches the file (and the log), then the call returns this error.
    /// Other calls treat it as `Fail`.
    Short(io::Error),
}

/// Decides, before each call reaches the file, whether it fails.
pub trait FaultPlan: Debug + Send + Sync {
    fn fault(&self, call: Call) -> Option<Fault>;

    /// A sync on another thread that this plan failed has returned its error and the thread
    /// that ran it has ended: the pager, which marks its handle poisoned once the sync
    /// returns, has done so (the pager's flush thread ends after a sync that failed).
    fn background_sync_failed(&self) {}
}

/// When a sync enters the log, relative to its (simulated) duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncRecorded {
    /// When it returns: the writes logged before it are the ones it made durable.
    AtEnd,
    /// When it starts: a write that lands while the sync is in flight is not taken to be
    /// covered by it (the stricter rule).
    AtStart,
}

/// Applies every call to a real file and appends it to a shared log, each entry made by
/// `entry` (so a multi-file simulation can tag which file it was). The log stays locked
/// while the call runs on the file, so the log's order is the order the file saw.
pub struct Recording<T = IoOp> {
    file: File,
    log: IoLog<T>,
    entry: Arc<dyn Fn(IoOp) -> T + Send + Sync>,
    faults: Option<Arc<dyn FaultPlan>>,
    sync_delay: Duration,
    sync_recorded: SyncRecorded,
    /// Syncs on another thread, each done after this many more calls reached the log
    /// ([`Recording::syncs_in_background`]).
    background: Option<usize>,
    /// The plan may fail those ([`Recording::faults_in_background`]).
    background_faults: bool,
    background_syncs: Arc<BackgroundSyncs>,
}

/// The syncs on other threads of a [`Recording`] not yet done: (number, log length at which
/// it is done). One that failed stays until the thread that ran it has ended ([`Failed`]).
#[derive(Debug, Default)]
struct BackgroundSyncs {
    pending: Mutex<Vec<(u64, usize)>>,
    done: std::sync::Condvar,
    /// One of them failed: the file's later syncs log nothing ([`Recording::faults_in_background`]).
    failed: AtomicBool,
}

/// A sync on another thread that failed, held by that thread until it ends: the caller that
/// ran it (the pager's flush thread) has then seen its error, and the next call of its
/// `Recording` may go on.
struct Failed {
    id: u64,
    syncs: Arc<BackgroundSyncs>,
    plan: Arc<dyn FaultPlan>,
}

impl BackgroundSyncs {
    /// Sync `id` is done: off the list, and whoever waits for it told.
    fn end(&self, id: u64) {
        self.pending.lock().unwrap().retain(|&(i, _)| i != id);
        self.done.notify_all();
    }
}

impl Drop for Failed {
    fn drop(&mut self) {
        self.plan.background_sync_failed();
        self.syncs.end(self.id);
    }
}

/// Lets a test driver idle between its steps while the syncs on other threads of one
/// [`Recording`] end ([`Recording::idle`]): the writer of a real file makes no call while
/// it waits for the next request, and a flush thread's sync ends (or fails) meanwhile.
#[derive(Clone, Debug)]
pub struct Idle {
    syncs: Arc<BackgroundSyncs>,
}

impl Idle {
    /// Every sync on another thread running now ends, as when the pager waits for it
    /// (`flush_awaited`), and this returns once each has and its thread has recorded it (or,
    /// one that failed, once its thread has ended).
    pub fn let_syncs_end(&self) {
        let bg = &self.syncs;
        let mut pending = bg.pending.lock().unwrap();
        for p in pending.iter_mut() {
            p.1 = 0;
        }
        let deadline = std::time::Instant::now() + DUE_SYNC_MAX_WAIT;
        while !pending.is_empty() {
            let now = std::time::Instant::now();
            if now >= deadline {
                return;
            }
            pending = bg.done.wait_timeout(pending, deadline - now).unwrap().0;
        }
    }
}

/// A sync on another thread whose job has not run to its end: dropped with the job when the
/// pager drops it unrun (it found no thread to hand it to) or the job panics, it takes the
/// sync off the pending list, so that nothing waits for a sync no thread will run.
struct Unfinished {
    id: u64,
    syncs: Arc<BackgroundSyncs>,
    /// The job reached its end, which takes it off the list itself.
    finished: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.finished {
            self.syncs.end(self.id);
        }
    }
}

thread_local! {
    /// The failed syncs this thread ran, dropped when it ends.
    static FAILED_HERE: std::cell::RefCell<Vec<Failed>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The number of the next sync on another thread, of any [`Recording`]: two handles of one
/// file (two processes of a simulation) each have their own `Recording` logging into one log
/// at the same time, and [`crate::images::durable_prefix`] pairs a `SyncEnd` with the
/// `SyncStart` of its number: one numbering per `Recording` would pair the end of one
/// handle's sync with the start of the other's.
static NEXT_BACKGROUND_SYNC: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long a sync on another thread waits for its calls before it is done anyway. A writer
/// that waits for it says so (`flush_awaited`: a wait for the flush, a pager dropped; a
/// foreground sync), which makes it due at once, so only a handle left idle while its sync
/// runs takes this long. A wait of tens of milliseconds would let the scheduler place the
/// sync's end: on a loaded machine a writer is descheduled for longer than that.
const BACKGROUND_SYNC_MAX_WAIT: Duration = Duration::from_secs(2);

/// How long the next call waits for a sync on another thread that is due to end (and for the
/// thread of one that failed to end, [`Recording::faults_in_background`]): only a stuck
/// thread takes this long.
const DUE_SYNC_MAX_WAIT: Duration = Duration::from_secs(10);

impl<T> Debug for Recording<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("file", &self.file)
            .field("faults", &self.faults)
            .field("sync_delay", &self.sync_delay)
            .field("sync_recorded", &self.sync_recorded)
            .finish_non_exhaustive()
    }
}

/// Open an existing file read-write, as a `Recording` needs it.
pub fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

impl Recording<IoOp> {
    /// Records `file`'s calls into `log` as they are.
    pub fn new(file: File, log: &IoLog) -> Recording {
        Recording::tagged(file, log, |op| op)
    }
}

impl<T> Recording<T> {
    /// Records `file`'s calls into `log`, each as `entry(op)`.
    pub fn tagged(
        file: File,
        log: &IoLog<T>,
        entry: impl Fn(IoOp) -> T + Send + Sync + 'static,
    ) -> Recording<T> {
        Recording {
            file,
            log: log.clone(),
            entry: Arc::new(entry),
            faults: None,
            sync_delay: Duration::ZERO,
            sync_recorded: SyncRecorded::AtEnd,
            background: None,
            background_faults: false,
            background_syncs: Arc::default(),
        }
    }

    /// Offer syncs on another thread (`Storage::background_sync`): logged as
    /// [`IoOp::SyncStart`] when asked for and [`IoOp::SyncEnd`] when done, so a cut between
    /// them has only what came before the last completed sync on the disk. Each is done once
    /// `lag` more calls reached the log: the call that makes it due waits for it, and for
    /// its thread to record it, before it returns, so where it ends in the log, and what
    /// the writer finds of it after that call, do not depend on how threads are scheduled
    /// (a writer that waits for it makes it due at once: `flush_awaited`). They take no
    /// faults from the plan unless [`Recording::faults_in_background`] says so. Without this,
    /// a pager syncs in the foreground where it would have flushed on another thread.
    pub fn syncs_in_background(mut self, lag: usize) -> Self {
        self.background = Some(lag);
        self
    }

    /// Let the fault plan fail syncs on another thread too: it is asked about each
    /// ([`Call::BackgroundSync`]) when it starts, so which one fails follows the log, not the
    /// scheduler. One that fails logs its [`IoOp::SyncStart`] and never its
    /// [`IoOp::SyncEnd`], so a cut keeps nothing its start would have made durable, and
    /// returns the error once done (as one that succeeds, `lag` calls later). The next call
    /// then waits for the thread that ran it to end, so the handle the pager
    /// poisons once the sync returns is poisoned before the log goes on: where the failure
    /// lands in the log does not depend on how threads are scheduled either; the plan hears
    /// of it then ([`FaultPlan::background_sync_failed`]). From then on the file's syncs
    /// still return Ok, as the kernel's do once it has reported a write-back error (to the
    /// failed sync, on the same open file), but log nothing: what that write-back lost is
    /// not made durable by a later sync, and a new `Recording` (a reopen) starts afresh.
    /// Without this the plan is never asked about them (the pager's poisoning comes from
    /// the scheduler, not the log: why they used to take no faults).
    pub fn faults_in_background(mut self) -> Self {
        self.background_faults = true;
        self
    }

    /// A write as the storage's write calls make it, logged as `op` makes it. A fault that
    /// cuts it short leaves its first half in the page cache, logged as a plain write (a
    /// durable write cut short is not durable).
    fn write_logged(
        &self,
        offset: u64,
        bufs: &[&[u8]],
        op: fn(u64, Vec<u8>) -> IoOp,
    ) -> io::Result<()> {
        self.await_due_syncs();
        let r = self.write_logged_now(offset, bufs, op);
        self.await_due_syncs();
        r
    }

    fn write_logged_now(
        &self,
        offset: u64,
        bufs: &[&[u8]],
        op: fn(u64, Vec<u8>) -> IoOp,
    ) -> io::Result<()> {
        let data = bufs.concat();
        let fault = self.fault(Call::Write);
        let mut log = self.log.lock().unwrap();
        match fault {
            None => {
                self.file.write_all_at(&data, offset)?;
                self.push(&mut log, op(offset, data));
                Ok(())
            }
            Some(Fault::Fail(e)) => Err(e),
            Some(Fault::Short(e)) => {
                let half = data[..data.len() / 2].to_vec();
                self.file.write_all_at(&half, offset)?;
                self.push(
                    &mut log,
                    IoOp::Write {
                        off: offset,
                        data: half,
                    },
                );
                Err(e)
            }
        }
    }

    /// Before and after a call reaches the log: wait until the syncs on other threads that
    /// are due have ended and their thread has recorded them, so that between two calls the
    /// writer finds every due sync done as its end left the pager.
    fn await_due_syncs(&self) {
        if self.background.is_none() {
            return;
        }
        let bg = &self.background_syncs;
        let mut pending = bg.pending.lock().unwrap();
        let start = std::time::Instant::now();
        loop {
            let len = self.log.lock().unwrap().len();
            let now = std::time::Instant::now();
            // A due sync waits for no more calls: it ends as soon as its thread runs, and a
            // failed one (due at once) when that thread has ended. Wait for it as long as the
            // scheduler takes (on a loaded machine, tens of milliseconds: a shorter wait
            // lets the log go on before a sync whose thread has not run yet, and where it
            // ends, or where its failure lands, follows the scheduler).
            let deadline = start + DUE_SYNC_MAX_WAIT;
            if !pending.iter().any(|&(_, due)| due <= len) || now >= deadline {
                return;
            }
            pending = bg.done.wait_timeout(pending, deadline - now).unwrap().0;
        }
    }

    /// What lets a driver idle while this storage's syncs on other threads end ([`Idle`]).
    pub fn idle(&self) -> Idle {
        Idle {
            syncs: self.background_syncs.clone(),
        }
    }

    /// Fail calls as `plan` says.
    pub fn faults(mut self, plan: Arc<dyn FaultPlan>) -> Self {
        self.faults = Some(plan);
        self
    }

    /// Make each sync take `delay` (so concurrent writers pile up as on a disk), entering the
    /// log at its start or its end.
    pub fn sync_delay(mut self, delay: Duration, recorded: SyncRecorded) -> Self {
        self.sync_delay = delay;
        self.sync_recorded = recorded;
        self
    }

    fn fault(&self, call: Call) -> Option<Fault> {
        self.faults.as_ref().and_then(|p| p.fault(call))
    }

    fn push(&self, log: &mut Vec<T>, op: IoOp) {
        log.push((self.entry)(op));
    }
}

impl<T: Send + 'static> Storage for Recording<T> {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.await_due_syncs();
        if let Some(Fault::Fail(e) | Fault::Short(e)) = self.fault(Call::SetLen) {
            return Err(e);
        }
        let mut log = self.log.lock().unwrap();
        self.file.set_len(len)?;
        self.push(&mut log, IoOp::SetLen(len));
        drop(log);
        self.await_due_syncs();
        Ok(())
    }

    fn write_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write_logged(offset, bufs, |off, data| IoOp::Write { off, data })
    }

    fn write_durable(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.write_logged(offset, bufs, |off, data| IoOp::DurableWrite { off, data })
    }

    fn syncs_in_background(&self) -> bool {
        self.background.is_some()
    }

    fn background_sync(&self) -> Option<larch::BackgroundSync> {
        let lag = self.background?;
        self.await_due_syncs();
        // Asked before it starts, on the caller's thread: the n-th one to start fails.
        let failure = match self.faults.as_ref().filter(|_| self.background_faults) {
            Some(plan) => match plan.fault(Call::BackgroundSync) {
                Some(Fault::Fail(e) | Fault::Short(e)) => Some((e, plan.clone())),
                None => None,
            },
            None => None,
        };
        let bg = self.background_syncs.clone();
        let id = NEXT_BACKGROUND_SYNC.fetch_add(1, Ordering::Relaxed);
        let due = {
            let mut log = self.log.lock().unwrap();
            self.push(&mut log, IoOp::SyncStart(id));
            log.len() + lag
        };
        bg.pending.lock().unwrap().push((id, due));
        let (log, entry) = (self.log.clone(), self.entry.clone());
        let unfinished = Unfinished {
            id,
            syncs: bg.clone(),
            finished: false,
        };
        Some(Box::new(move || {
            // The whole guard, moved in (a closure would capture only the field it sets).
            let mut unfinished = unfinished;
            let deadline = std::time::Instant::now() + BACKGROUND_SYNC_MAX_WAIT;
            // Read each time: a foreground sync makes it due at once (`sync`).
            let due = || {
                let pending = bg.pending.lock().unwrap();
                pending.iter().find(|p| p.0 == id).map_or(0, |p| p.1)
            };
            // One lock at a time: `await_due_syncs` takes the log's under `pending`'s.
            loop {
                let len = log.lock().unwrap().len();
                if len >= due() || std::time::Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_micros(20));
            }
            if let Some((e, plan)) = failure {
                // No `SyncEnd`; due now, and pending until this thread ends (`Failed`), by
                // when the pager has marked its handle poisoned.
                bg.failed.store(true, Ordering::SeqCst);
                if let Some(p) = bg.pending.lock().unwrap().iter_mut().find(|p| p.0 == id) {
                    p.1 = 0;
                }
                unfinished.finished = true;
                let failed = Failed {
                    id,
                    syncs: bg,
                    plan,
                };
                FAILED_HERE.with(|f| f.borrow_mut().push(failed));
                return Err(e);
            }
            log.lock().unwrap().push(entry(IoOp::SyncEnd(id)));
            unfinished.finished = true;
            // Done for the writer once the flush thread has recorded it (its handle's
            // `synced_through` raised, idle again): a writer let go before that could find
            // the thread busy or the sync not counted, as the scheduler caught it.
            larch::after_sync_recorded(Box::new(move || bg.end(id)));
            Ok(())
        }))
    }

    fn flush_awaited(&self) {
        // The writer waits for the sync on another thread and makes no call meanwhile: due
        // now, so it ends where the log stands.
        for p in self.background_syncs.pending.lock().unwrap().iter_mut() {
            p.1 = 0;
        }
    }

    fn sync(&self) -> io::Result<()> {
        // A sync in the foreground waits for the ones on other threads (the pager's does).
        for p in self.background_syncs.pending.lock().unwrap().iter_mut() {
            p.1 = 0;
        }
        self.await_due_syncs();
        if self.sync_recorded == SyncRecorded::AtEnd {
            std::thread::sleep(self.sync_delay);
        }
        if let Some(Fault::Fail(e) | Fault::Short(e)) = self.fault(Call::Sync) {
            return Err(e);
        }
        // After a failed sync on another thread: Ok, durable nothing (`faults_in_background`).
        if self.background_syncs.failed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.push(&mut self.log.lock().unwrap(), IoOp::Sync);
        if self.sync_recorded == SyncRecorded::AtStart {
            std::thread::sleep(self.sync_delay);
        }
        Ok(())
    }

    fn file(&self) -> &File {
        &self.file
    }
}
