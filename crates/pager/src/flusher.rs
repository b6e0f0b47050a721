//! The thread that runs a pager's background flushes ([`crate::Pager::start_background_flush`]).
//! It is started by the first flush and kept until the pager is dropped: a thread started
//! per flush cost the committing writer about 50 us a flush (the spawn, on the writer's
//! thread and under its locks; docs/performance.md, "owa.n's p99").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::storage::BackgroundSync;

thread_local! {
    /// What the sync running on this flush thread asked to run once its outcome is recorded
    /// ([`after_sync_recorded`]).
    static AFTER_RECORDED: std::cell::RefCell<Vec<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Run `f` on this flush thread once the sync that calls this (a [`BackgroundSync`] job)
/// has returned and its outcome is recorded: the handle poisoned, or `synced_through`
/// raised and the thread idle again. Test storage that orders syncs on another thread in its
/// log says there that the sync is done, so that the writer it lets go on sees the flush
/// thread as a sync's end left it, not as the scheduler caught it. Called outside a flush
/// thread's job, `f` runs when that thread next ends a job, or never.
pub fn after_sync_recorded(f: Box<dyn FnOnce()>) {
    AFTER_RECORDED.with(|a| a.borrow_mut().push(f));
}

/// Run what the sync that just ended asked for ([`after_sync_recorded`]).
fn run_after_recorded() {
    let after = AFTER_RECORDED.with(|a| std::mem::take(&mut *a.borrow_mut()));
    for f in after {
        f();
    }
}

/// A running flush thread and the hand-over slot it waits on.
#[derive(Debug)]
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a job is handed over, when one ends and at exit.
    changed: Condvar,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("Shared")
            .field("busy", &st.busy)
            .field("exit", &st.exit)
            .finish()
    }
}

#[derive(Default)]
struct State {
    /// A sync handed over and not yet taken by the thread, with its number.
    job: Option<(BackgroundSync, u64)>,
    /// A sync is handed over or running: set by [`Flusher::start`], cleared by the thread
    /// once the sync has returned and its outcome is recorded.
    busy: bool,
    /// The pager is being dropped: the thread ends once idle.
    exit: bool,
    /// The thread has ended (after a failed sync, which poisons the handle): nothing is
    /// handed over again, and nothing waits for it.
    ended: bool,
}

impl Flusher {
    /// Start the thread. A failed sync sets `poisoned`; a good one raises `synced_through`
    /// to its number, before the flush counts as done ([`Flusher::wait_idle`]).
    pub(crate) fn spawn(
        poisoned: Arc<AtomicBool>,
        synced_through: Arc<AtomicU64>,
    ) -> std::io::Result<Flusher> {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("larch-flush".into())
            .spawn(move || run(&theirs, &poisoned, &synced_through))?;
        Ok(Flusher {
            shared,
            thread: Some(thread),
        })
    }

    /// A sync is handed over or running, or the thread has ended: none can be handed over.
    pub(crate) fn busy(&self) -> bool {
        let st = self.shared.state.lock();
        st.busy || st.ended
    }

    /// Hand `job`, numbered `seq`, to the thread: false (and the job dropped) if the thread
    /// has ended. The caller has seen it idle ([`Flusher::busy`]) under the pager's lock that
    /// also keeps a second hand-over out.
    pub(crate) fn start(&self, job: BackgroundSync, seq: u64) -> bool {
        let mut st = self.shared.state.lock();
        debug_assert!(!st.busy, "a flush handed over while another runs");
        if st.ended {
            return false;
        }
        st.job = Some((job, seq));
        st.busy = true;
        drop(st);
        self.shared.changed.notify_all();
        true
    }

    /// Wait until no sync is handed over or running; what the last one found is recorded by
    /// then (`poisoned` or `synced_through`).
    pub(crate) fn wait_idle(&self) {
        let mut st = self.shared.state.lock();
        while st.busy && !st.ended {
            self.shared.changed.wait(&mut st);
        }
    }
}

impl Drop for Flusher {
    /// Let the thread finish the sync it runs (it holds a duplicate of the file's descriptor,
    /// and with it the file's flock), then end it.
    fn drop(&mut self) {
        self.shared.state.lock().exit = true;
        self.shared.changed.notify_all();
        if let Some(h) = self.thread.take() {
            // Dropped on the flush thread itself (a sync's closure held the last handle of
            // what owns the pager): the thread ends when this returns.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

fn run(shared: &Shared, poisoned: &AtomicBool, synced_through: &AtomicU64) {
    loop {
        let (job, seq) = {
            let mut st = shared.state.lock();
            loop {
                if let Some(j) = st.job.take() {
                    break j;
                }
                if st.exit {
                    return;
                }
                shared.changed.wait(&mut st);
            }
        };
        // Outside the lock: `busy` stays set, so no other sync is handed over meanwhile. A
        // sync that panics (storage code) counts as failed: nothing it was to make durable
        // can be trusted, and the waiters must not wait for it forever.
        let failed = !matches!(
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)),
            Ok(Ok(()))
        );
        if failed {
            poisoned.store(true, Ordering::Release);
        } else {
            synced_through.fetch_max(seq, Ordering::SeqCst);
        }
        let mut st = shared.state.lock();
        st.busy = false;
        // The handle is poisoned: no flush starts again. The thread ends now, so that what
        // waits for the end of the thread that ran a failed sync (test storage does, to
        // order the failure in its log) finds the handle poisoned by then.
        st.ended = failed;
        drop(st);
        shared.changed.notify_all();
        run_after_recorded();
        if failed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn flusher() -> (Flusher, Arc<AtomicBool>, Arc<AtomicU64>) {
        let poisoned = Arc::new(AtomicBool::new(false));
        let through = Arc::new(AtomicU64::new(0));
        let f = Flusher::spawn(poisoned.clone(), through.clone()).unwrap();
        (f, poisoned, through)
    }

    /// A sync that takes `ms` and then sets `done`.
    fn sleeping(ms: u64, done: &Arc<AtomicBool>) -> BackgroundSync {
        let done = done.clone();
        Box::new(move || {
            std::thread::sleep(Duration::from_millis(ms));
            done.store(true, Ordering::SeqCst);
            Ok(())
        })
    }

    #[test]
    fn syncs_run_one_at_a_time_and_record_their_numbers() {
        let (f, poisoned, through) = flusher();
        for seq in 1..=5 {
            assert!(!f.busy());
            let ran = Arc::new(AtomicBool::new(false));
            assert!(f.start(sleeping(2, &ran), seq));
            assert!(f.busy());
            f.wait_idle();
            assert!(ran.load(Ordering::SeqCst) && !f.busy());
            assert_eq!(through.load(Ordering::SeqCst), seq);
        }
        assert!(!poisoned.load(Ordering::SeqCst));
    }

    #[test]
    fn a_failed_or_panicking_sync_poisons_and_ends_the_thread_and_nothing_waits_for_it() {
        for panics in [false, true] {
            let (f, poisoned, through) = flusher();
            assert!(f.start(
                Box::new(move || {
                    if panics {
                        panic!("a sync that panics");
                    }
                    Err(std::io::Error::other("a sync that fails"))
                }),
                1
            ));
            f.wait_idle();
            assert!(poisoned.load(Ordering::SeqCst));
            assert_eq!(through.load(Ordering::SeqCst), 0);
            // Ended: no sync is handed over again, and waiting returns at once.
            assert!(f.busy());
            assert!(!f.start(Box::new(|| Ok(())), 2));
            f.wait_idle();
            drop(f);
        }
    }

    #[test]
    fn what_a_sync_asks_to_run_after_it_runs_once_its_outcome_is_recorded() {
        // What the hook saw: the thread idle (a sync could be handed over), the number the
        // sync raised `synced_through` to, and whether the handle was poisoned.
        type Seen = Arc<std::sync::Mutex<Vec<(bool, u64, bool)>>>;
        let (f, poisoned, through) = flusher();
        let f = Arc::new(f);
        let seen: Seen = Arc::default();
        let job = |fails: bool| -> BackgroundSync {
            let (f, seen) = (Arc::downgrade(&f), seen.clone());
            let (poisoned, through) = (poisoned.clone(), through.clone());
            Box::new(move || {
                after_sync_recorded(Box::new(move || {
                    let idle = !f.upgrade().unwrap().shared.state.lock().busy;
                    seen.lock().unwrap().push((
                        idle,
                        through.load(Ordering::SeqCst),
                        poisoned.load(Ordering::SeqCst),
                    ));
                }));
                if fails {
                    Err(std::io::Error::other("a sync that fails"))
                } else {
                    Ok(())
                }
            })
        };
        for seq in 1..=3 {
            assert!(f.start(job(false), seq));
            f.wait_idle();
            // The hook runs after the thread went idle, maybe after this wait returned.
            while seen.lock().unwrap().len() < seq as usize {
                std::thread::yield_now();
            }
        }
        assert!(f.start(job(true), 4));
        f.wait_idle();
        while seen.lock().unwrap().len() < 4 {
            std::thread::yield_now();
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [
                (true, 1, false),
                (true, 2, false),
                (true, 3, false),
                (true, 3, true)
            ]
        );
    }

    #[test]
    fn dropping_waits_for_the_sync_that_runs() {
        let (f, _, through) = flusher();
        let done = Arc::new(AtomicBool::new(false));
        assert!(f.start(sleeping(30, &done), 7));
        drop(f);
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(through.load(Ordering::SeqCst), 7);
    }
}
