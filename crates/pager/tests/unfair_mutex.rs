//! The writer threads' lock (`UnfairMutex`, src/unfair.rs) under many threads at once: every
//! way to take it (`lock`, `try_lock`, `lock_arc` with the guard released on another thread),
//! holds that spin, sleep, or last past `STARVED_AFTER`, signals that interrupt its futex
//! waits (EINTR), and a panic while holding. A test whose threads are not all done by a
//! deadline fails (a lost wake-up or a deadlock) rather than hangs. `LARCH_UNFAIR_SECS` runs
//! each stress case for that many seconds instead of a fraction of one.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use larch_pager::{UnfairMutex, UnfairRawMutex, STARVED_AFTER};
use parking_lot::lock_api::ArcMutexGuard;

/// How long the threads of one stress case run: `default`, or `LARCH_UNFAIR_SECS` seconds.
fn run_for(default: Duration) -> Duration {
    std::env::var("LARCH_UNFAIR_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(default, Duration::from_secs_f64)
}

/// After the run, how long the threads have to finish what they are doing.
const GRACE: Duration = Duration::from_secs(10);

/// A wait for the lock longer than this fails a test: far above `STARVED_AFTER` plus a few
/// holds, so that only a waiter the bound does not protect reaches it.
const SLOWEST_ALLOWED: Duration = Duration::from_secs(2);

/// xorshift64*: each thread's own sequence of choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// What a holder does before it lets go.
#[derive(Clone, Copy)]
enum Hold {
    Spin(Duration),
    Sleep(Duration),
}

impl Hold {
    fn wait(self) {
        match self {
            Hold::Spin(d) => {
                let t = Instant::now();
                while t.elapsed() < d {
                    std::hint::spin_loop();
                }
            }
            Hold::Sleep(d) => std::thread::sleep(d),
        }
    }
}

type Guard = ArcMutexGuard<UnfairRawMutex, u64>;

/// What the threads share: the lock, guarding a count of holds that each holder reads on
/// entry and writes back one higher on exit (two holders at once lose an increment); a flag
/// each holder raises on entry, which must have been down; and what was seen.
struct Arena {
    m: Arc<UnfairMutex<u64>>,
    inside: AtomicBool,
    overlaps: AtomicU64,
    holds: AtomicU64,
    slowest_ns: AtomicU64,
}

impl Arena {
    fn new() -> Arena {
        Arena {
            m: Arc::new(UnfairMutex::new(0)),
            inside: AtomicBool::new(false),
            overlaps: AtomicU64::new(0),
            holds: AtomicU64::new(0),
            slowest_ns: AtomicU64::new(0),
        }
    }

    /// Just taken: returns the count as it was on entry.
    fn enter(&self, count: &u64) -> u64 {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.holds.fetch_add(1, Ordering::Relaxed);
        *count
    }

    /// About to let go.
    fn leave(&self, count: &mut u64, was: u64) {
        *count = was + 1;
        self.inside.store(false, Ordering::SeqCst);
    }

    fn hold(&self, count: &mut u64, how: Hold) {
        let was = self.enter(count);
        how.wait();
        self.leave(count, was);
    }

    fn lock_timed(&self) -> parking_lot::lock_api::MutexGuard<'_, UnfairRawMutex, u64> {
        let t = Instant::now();
        let g = self.m.lock();
        self.waited(t);
        g
    }

    fn waited(&self, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.slowest_ns.fetch_max(ns, Ordering::Relaxed);
    }

    fn slowest(&self) -> Duration {
        Duration::from_nanos(self.slowest_ns.load(Ordering::Relaxed))
    }
}

/// One worker's mix of ways to take the lock until `until`. With `long_holds`, now and then a
/// hold sleeps past `STARVED_AFTER`, so that waiters starve.
fn work(a: &Arena, seed: u64, until: Instant, long_holds: bool, sent: &mpsc::Sender<(Guard, u64)>) {
    let mut rng = Rng::new(seed);
    while Instant::now() < until {
        let spin = Hold::Spin(Duration::from_micros(rng.below(20)));
        match rng.below(100) {
            0..=34 => a.hold(&mut a.lock_timed(), spin),
            35..=49 => {
                let sleep = Hold::Sleep(Duration::from_micros(rng.below(300)));
                a.hold(&mut a.lock_timed(), sleep);
            }
            50..=64 => match a.m.try_lock() {
                Some(mut g) => a.hold(&mut g, spin),
                None => std::thread::yield_now(),
            },
            65..=79 => {
                // Released by the other thread, after a hold of its own.
                let t = Instant::now();
                let g = a.m.lock_arc();
                a.waited(t);
                let was = a.enter(&g);
                sent.send((g, was))
                    .expect("the releasing thread outlives the workers");
            }
            80..=94 => {
                // A run of holds taken back at once, as a thread committing in a loop does.
                for _ in 0..=rng.below(8) {
                    a.hold(&mut a.lock_timed(), Hold::Spin(Duration::from_micros(200)));
                }
            }
            _ if long_holds => {
                let sleep = Hold::Sleep(STARVED_AFTER + Duration::from_millis(rng.below(10)));
                a.hold(&mut a.lock_timed(), sleep);
            }
            _ => std::thread::sleep(Duration::from_micros(rng.below(500))),
        }
    }
}

/// Runs `threads` workers for `run`, with one more thread releasing the guards they send it;
/// `alive` is called with the workers' join handles while they run, and its thread is joined
/// before they exit. Fails if a worker panics or does not finish within `GRACE` after the run,
/// if two threads held the lock at once, or if any wait took longer than `SLOWEST_ALLOWED`.
fn stress<F>(threads: usize, run: Duration, long_holds: bool, alive: F)
where
    F: FnOnce(&[std::thread::JoinHandle<()>], &AtomicBool) + Send,
{
    let a = Arc::new(Arena::new());
    let until = Instant::now() + run;
    let (sent, received) = mpsc::channel::<(Guard, u64)>();
    let releaser = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut rng = Rng::new(u64::MAX);
            for (mut g, was) in received {
                if rng.below(4) == 0 {
                    std::thread::sleep(Duration::from_micros(rng.below(200)));
                }
                a.leave(&mut g, was);
            }
        })
    };
    let (done, finished) = mpsc::channel::<bool>();
    // Workers stay alive after their run until `may_exit`, so that `alive` never signals a
    // thread that has exited.
    let may_exit = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (a, sent, done, may_exit) =
                (a.clone(), sent.clone(), done.clone(), may_exit.clone());
            std::thread::spawn(move || {
                let ok = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    work(&a, t as u64 + 1, until, long_holds, &sent)
                }))
                .is_ok();
                let _ = done.send(ok);
                while !may_exit.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    drop((sent, done));
    let stop = AtomicBool::new(false);
    let outcome = std::thread::scope(|s| {
        let signaller = s.spawn(|| alive(&workers, &stop));
        let deadline = until + GRACE;
        let mut outcome = Ok(());
        for n in 0..threads {
            let left = deadline.saturating_duration_since(Instant::now());
            match finished.recv_timeout(left) {
                Ok(true) => {}
                Ok(false) => {
                    outcome = Err(format!("{threads} threads: a worker panicked"));
                    break;
                }
                Err(_) => {
                    outcome = Err(format!(
                        "{threads} threads: {n} finished, the others still wait {GRACE:?} after \
                         the run (lock held: {}): a lost wake-up or a deadlock",
                        a.m.is_locked()
                    ));
                    break;
                }
            }
        }
        stop.store(true, Ordering::Release);
        signaller.join().expect("the signalling thread");
        outcome
    });
    if let Err(e) = outcome {
        // Threads stuck in `lock` stay so; the test binary ends without them.
        panic!("{e}");
    }
    may_exit.store(true, Ordering::Release);
    for w in workers {
        w.join().expect("a worker");
    }
    releaser.join().expect("the releasing thread");
    assert_eq!(
        a.overlaps.load(Ordering::SeqCst),
        0,
        "{threads} threads: two held it at once"
    );
    let holds = a.holds.load(Ordering::Relaxed);
    assert_eq!(
        *a.m.lock(),
        holds,
        "{threads} threads: an increment under the lock was lost"
    );
    assert!(holds > 0, "{threads} threads: nobody held the lock");
    let slowest = a.slowest();
    assert!(
        slowest < SLOWEST_ALLOWED,
        "{threads} threads: a wait of {slowest:?}"
    );
}

/// `lock`, `try_lock`, and `lock_arc` guards released on another thread, from 2 to 16 threads
/// (on any machine, more than its cores): one holder at a time, and every thread finishes.
#[test]
fn threads_mixing_lock_try_lock_and_guards_released_elsewhere_hold_it_one_at_a_time() {
    for threads in [2, 3, 4, 8, 16] {
        stress(
            threads,
            run_for(Duration::from_millis(120)),
            false,
            |_, _| {},
        );
    }
}

/// Holds that sleep past `STARVED_AFTER` make waiters starve, which puts the others to sleep
/// on the second futex word and has unlocks wake every sleeper: still one holder at a time,
/// and every thread finishes.
#[test]
fn threads_starving_behind_holds_that_sleep_past_the_bound_all_finish() {
    for threads in [2, 5, 16] {
        stress(
            threads,
            run_for(Duration::from_millis(250)),
            true,
            |_, _| {},
        );
    }
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// Signals (without SA_RESTART) interrupt the waits on both futex words, which then return
/// EINTR: a waiter must look at its word again, neither taking a lock that is held nor
/// sleeping through the wake meant for it.
#[test]
fn futex_waits_interrupted_by_signals_keep_exclusion_and_lose_no_wake() {
    // SAFETY: the handler does nothing (async-signal-safe); the sigaction struct is zeroed
    // and then filled in before the call, which copies it. Only this test binary's threads
    // started below are sent SIGUSR1.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    for threads in [3, 16] {
        stress(
            threads,
            run_for(Duration::from_millis(250)),
            true,
            |workers, stop| {
                use std::os::unix::thread::JoinHandleExt;
                let mut rng = Rng::new(7);
                while !stop.load(Ordering::Acquire) {
                    let w = &workers[rng.below(workers.len() as u64) as usize];
                    // SAFETY: the worker has not exited (`stress` keeps it alive until this
                    // closure returns), so its pthread_t names a live thread.
                    unsafe { libc::pthread_kill(w.as_pthread_t(), libc::SIGUSR1) };
                    std::thread::sleep(Duration::from_micros(50));
                }
            },
        );
    }
}

/// A holder that panics releases the lock as its guard is dropped during unwinding, and the
/// threads asleep on it (one of them past the bound by then) all get it.
#[test]
fn a_panic_while_holding_lets_the_sleeping_waiters_have_it() {
    let m = Arc::new(UnfairMutex::new(0u32));
    let (took, holds) = mpsc::channel();
    let holder = {
        let m = m.clone();
        std::thread::spawn(move || {
            let _g = m.lock();
            took.send(()).unwrap();
            std::thread::sleep(STARVED_AFTER + Duration::from_millis(10));
            panic!("a panic while holding the lock (expected by the test)");
        })
    };
    holds.recv().unwrap();
    let (done, finished) = mpsc::channel();
    for _ in 0..4 {
        let (m, done) = (m.clone(), done.clone());
        std::thread::spawn(move || {
            *m.lock() += 1;
            done.send(()).unwrap();
        });
    }
    assert!(holder.join().is_err());
    for n in 0..4 {
        if finished.recv_timeout(GRACE).is_err() {
            panic!("{n} of 4 waiters got the lock after its holder panicked");
        }
    }
    assert_eq!(*m.lock(), 4);
}

/// Keeps this thread on the `n`th CPU it may run on, if it may run on that many. Two threads
/// on one CPU do not race: the wake of one preempts the other.
fn pin_to_cpu(n: usize) {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: both sets are plain bit arrays, zeroed and then filled in by the calls, which
    // read or write `size` bytes of them; pid 0 is the calling thread.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return;
        }
        let cpus = libc::CPU_SETSIZE as usize;
        if let Some(cpu) = (0..cpus).filter(|&c| libc::CPU_ISSET(c, &allowed)).nth(n) {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            libc::sched_setaffinity(0, size, &one);
        }
    }
}

/// A thread that polls `try_lock` and holds for a while each time it succeeds does not keep
/// the lock from a waiter past the bound: `try_lock` leaves it to that waiter as `lock` does.
/// Otherwise the poller takes it back each time it is let go, before the woken waiter runs,
/// for as long as it polls (`Db::try_begin_write` in a loop beside a blocking writer). The two
/// run on different CPUs where there are two, as that needs.
#[test]
fn a_waiter_gets_the_lock_from_a_thread_that_polls_try_lock() {
    let m = Arc::new(UnfairMutex::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (m, stop) = (m.clone(), stop.clone());
        std::thread::spawn(move || {
            pin_to_cpu(0);
            // At most 3 s, so that a waiter the poller starves fails the test, not hangs it.
            let began = Instant::now();
            while !stop.load(Ordering::Relaxed) && began.elapsed() < Duration::from_secs(3) {
                if let Some(mut g) = m.try_lock() {
                    Hold::Spin(Duration::from_millis(1)).wait();
                    *g += 1;
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    let waiter = {
        let m = m.clone();
        std::thread::spawn(move || {
            pin_to_cpu(1);
            let mut slowest = Duration::ZERO;
            // Enough turns that one finds the poller holding (which the poller's own timing
            // does not always let happen at once).
            for _ in 0..20 {
                let t = Instant::now();
                let g = m.lock();
                slowest = slowest.max(t.elapsed());
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
            }
            slowest
        })
    };
    let slowest = waiter.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    poller.join().unwrap();
    assert!(
        slowest < Duration::from_secs(1),
        "the waiter waited {slowest:?}"
    );
}
