//! A mutex that lets the thread that unlocks it take it again before a woken waiter runs
//! (glibc's default mutex, which LMDB's writer lock is, and `std::sync::Mutex` on Linux, do
//! so), until a waiter has waited [`STARVED_AFTER`]: then the next unlock leaves it to that
//! waiter. `parking_lot::Mutex` hands the lock to any waiter that has waited 0.5 ms (its
//! "eventual fairness"); with more writer threads than cores that turns a writer's run of
//! commits into a handover, and a context switch, every few commits, and puts a wait of
//! several turns into 1 in 20 commits (docs/performance.md, "owa.n's p99: the writer lock's
//! fairness"). A bound of 20 ms keeps the handovers to one per 20 ms of contention (one
//! commit in several hundred), while no waiter waits much longer than it.
//!
//! Two 32-bit words, each a futex(2) address: `state` is 0 unlocked, 1 locked, 2 locked with
//! threads asleep on it; `starving` counts waiters past the bound, which alone may take the
//! lock while it is nonzero (the others sleep on it until it is zero again).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The raw lock of [`UnfairMutex`]-guarded state.
#[derive(Debug)]
pub struct UnfairRawMutex {
    state: AtomicU32,
    starving: AtomicU32,
}

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// Spins before a waiter sleeps: about what a short critical section takes on another core.
const SPINS: u32 = 100;

/// How long a waiter may wait before the lock is left to it.
pub const STARVED_AFTER: Duration = Duration::from_millis(20);

impl UnfairRawMutex {
    #[cold]
    fn lock_contended(&self) {
        let began = Instant::now();
        let mut starved = false;
        // Once this thread has slept, it takes the lock marked contended: an unlock wakes one
        // sleeper, and the one it woke carries the mark for the others still asleep.
        let mut slept = false;
        loop {
            let starving = self.starving.load(Ordering::Acquire);
            if starving != 0 && !starved {
                // Another waiter's turn: sleep until it has the lock.
                futex_wait(&self.starving, starving);
                slept = true;
                continue;
            }
            let state = self.spin();
            if !slept
                && state == UNLOCKED
                && self
                    .state
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return self.took(starved);
            }
            // Mark the lock contended before sleeping, so that its unlock wakes someone
            // (AcqRel: the unlock that reads the mark also sees this thread's count in
            // `starving`, and so wakes every sleeper when this thread has starved).
            if self.state.swap(CONTENDED, Ordering::AcqRel) == UNLOCKED {
                return self.took(starved);
            }
            futex_wait(&self.state, CONTENDED);
            slept = true;
            if !starved && began.elapsed() >= STARVED_AFTER {
                starved = true;
                self.starving.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// The lock is this thread's: if it had starved, let the others take it again.
    fn took(&self, starved: bool) {
        if starved && self.starving.fetch_sub(1, Ordering::AcqRel) == 1 {
            futex_wake(&self.starving, i32::MAX);
        }
    }

    /// Waiters past the bound now (tests).
    #[cfg(test)]
    fn starving_now(&self) -> u32 {
        self.starving.load(Ordering::Relaxed)
    }

    /// Spin while the lock is held by a thread that nobody sleeps behind.
    fn spin(&self) -> u32 {
        let mut spins = SPINS;
        loop {
            let state = self.state.load(Ordering::Relaxed);
            if state != LOCKED || spins == 0 {
                return state;
            }
            std::hint::spin_loop();
            spins -= 1;
        }
    }
}

// SAFETY: `lock` and `try_lock` return only after this thread changed the word from UNLOCKED
// (by compare-exchange or swap, with Acquire), so at most one thread holds the lock at a time;
// `unlock` (a swap with Release) is called only by the holder (lock_api's contract), after which the next
// taker sees every write made under the lock. The guard may be sent to another thread: the
// word does not record which thread holds it.
unsafe impl parking_lot::lock_api::RawMutex for UnfairRawMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: UnfairRawMutex = UnfairRawMutex {
        state: AtomicU32::new(UNLOCKED),
        starving: AtomicU32::new(0),
    };
    type GuardMarker = parking_lot::lock_api::GuardSend;

    fn lock(&self) {
        if self.starving.load(Ordering::Relaxed) != 0
            || self
                .state
                .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            self.lock_contended();
        }
    }

    fn try_lock(&self) -> bool {
        // Like `lock`, leave the lock to a waiter past the bound: a thread polling `try_lock`
        // would otherwise take it back each time it is let go, before the woken waiter runs,
        // for as long as it polls.
        self.starving.load(Ordering::Relaxed) == 0
            && self
                .state
                .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    unsafe fn unlock(&self) {
        if self.state.swap(UNLOCKED, Ordering::AcqRel) == CONTENDED {
            // With a waiter past the bound, wake every sleeper, so that it is among them (the
            // others go to sleep on `starving`).
            let n = if self.starving.load(Ordering::Acquire) != 0 {
                i32::MAX
            } else {
                1
            };
            futex_wake(&self.state, n);
        }
    }

    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }
}

/// State guarded by an [`UnfairRawMutex`].
pub type UnfairMutex<T> = parking_lot::lock_api::Mutex<UnfairRawMutex, T>;

/// Sleep while `word` holds `expected` (or until a wake, or spuriously).
fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT reads the 32-bit word at the address of a live AtomicU32 (borrowed
    // for the call) and compares it with `expected`; no timeout pointer is passed. It writes
    // no memory. EINTR, EAGAIN (the word changed) and spurious wakes all return to the
    // caller's loop, which looks at the word again.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wake up to `n` threads asleep in [`futex_wait`] on `word`.
fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key to find sleepers; it reads and
    // writes no memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Many threads adding under the lock lose no increment, with a guard held across a sleep
    /// now and then (so that waiters go to sleep on the word, not only spin).
    #[test]
    fn threads_adding_under_the_lock_lose_no_increment() {
        let m = Arc::new(UnfairMutex::new(0u64));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let mut g = m.lock();
                        let v = *g;
                        if (i + t) % 4_000 == 0 {
                            std::thread::sleep(std::time::Duration::from_micros(200));
                        }
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 6 * 20_000);
    }

    /// A thread that holds the lock for milliseconds at a time and takes it back as soon as
    /// it lets it go does not keep it from a waiter for long: a woken waiter runs only after
    /// the other thread has taken the lock again, so without the bound it would wait as long
    /// as the other thread goes on (10 s here, then the test fails); past the bound the lock
    /// is the waiter's at the next unlock. The limit asserted is 1 s, far above the bound
    /// and two holds, so a loaded machine does not fail it.
    #[test]
    fn a_waiter_gets_the_lock_from_a_thread_that_takes_it_back_at_once() {
        let m = Arc::new(UnfairMutex::new(0u64));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hog = {
            let (m, stop) = (m.clone(), stop.clone());
            std::thread::spawn(move || {
                // At most 10 s, so that a lock without the bound fails the test, not hangs it.
                let began = Instant::now();
                while !stop.load(Ordering::Relaxed) && began.elapsed() < Duration::from_secs(10) {
                    let mut g = m.lock();
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_millis(2) {
                        std::hint::spin_loop();
                    }
                    *g += 1;
                }
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let mut slowest = Duration::ZERO;
                    for _ in 0..5 {
                        let t = Instant::now();
                        let g = m.lock();
                        slowest = slowest.max(t.elapsed());
                        drop(g);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    slowest
                })
            })
            .collect();
        let slowest: Vec<Duration> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        hog.join().unwrap();
        for s in slowest {
            assert!(s < Duration::from_secs(1), "a waiter waited {s:?}");
        }
        // SAFETY: the raw lock is only read (its counter), never locked or unlocked here.
        assert_eq!(unsafe { m.raw() }.starving_now(), 0);
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after() {
        let m = UnfairMutex::new(());
        let g = m.lock();
        assert!(m.try_lock().is_none());
        assert!(m.is_locked());
        drop(g);
        assert!(!m.is_locked());
        assert!(m.try_lock().is_some());
    }

    /// A guard taken by `lock_arc` on one thread may be released on another (a write
    /// transaction may be sent), and a thread asleep on the lock then gets it.
    #[test]
    fn an_arc_guard_released_on_another_thread_wakes_a_sleeping_waiter() {
        let m = Arc::new(UnfairMutex::new(0u32));
        let g = m.lock_arc();
        let waiter = {
            let m = m.clone();
            std::thread::spawn(move || {
                *m.lock() += 1;
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::thread::spawn(move || drop(g)).join().unwrap();
        waiter.join().unwrap();
        assert_eq!(*m.lock(), 1);
    }
}
