//! The writer of the *w steps: limited to a fixed rate (1,000 writes/s).

use std::time::{Duration, Instant};

/// Writes per second of the limited writer in pqw/rqw.
pub const LIMITED_WRITES_PER_SEC: f64 = 1000.0;

/// A schedule of evenly spaced operations. An operation that falls behind by more than
/// `max_lag` restarts the schedule from now instead of bursting to catch up, so the writer
/// never exceeds its rate by more than a few operations.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    interval: Duration,
    next: Instant,
    max_lag: Duration,
}

impl RateLimiter {
    /// `per_sec` operations a second, the first due at `start`.
    pub fn new(per_sec: f64, start: Instant) -> RateLimiter {
        let interval = Duration::from_secs_f64(1.0 / per_sec);
        RateLimiter {
            interval,
            next: start,
            max_lag: interval * 10,
        }
    }

    /// When the next operation may start, given the time `now`; advances the schedule.
    pub fn next_due(&mut self, now: Instant) -> Instant {
        if now > self.next + self.max_lag {
            self.next = now;
        }
        let due = self.next;
        self.next += self.interval;
        due
    }

    /// Sleep until the next operation is due.
    pub fn wait(&mut self) {
        let now = Instant::now();
        let due = self.next_due(now);
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_operations_evenly() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(1000.0, t0);
        // Asked at t0 each time (an infinitely fast engine): each is due 1 ms after the last.
        let dues: Vec<Duration> = (0..5).map(|_| r.next_due(t0) - t0).collect();
        let ms: Vec<u128> = dues.iter().map(|d| d.as_micros()).collect();
        assert_eq!(ms, vec![0, 1000, 2000, 3000, 4000]);
    }

    #[test]
    fn a_second_of_schedule_holds_the_rate() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(1000.0, t0);
        let mut now = t0;
        let mut n = 0;
        // Each operation takes 100 us and waits for its slot.
        loop {
            let due = r.next_due(now);
            if due >= t0 + Duration::from_secs(1) {
                break;
            }
            now = now.max(due) + Duration::from_micros(100);
            n += 1;
        }
        assert_eq!(n, 1000);
    }

    #[test]
    fn a_slow_engine_does_not_earn_a_burst() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(1000.0, t0);
        r.next_due(t0);
        // One operation stalls for 50 ms: the schedule restarts rather than owing 50.
        let late = t0 + Duration::from_millis(50);
        assert_eq!(r.next_due(late), late);
        assert_eq!(r.next_due(late), late + Duration::from_millis(1));
        // A small delay (within the allowed lag) is made up.
        let mut r = RateLimiter::new(1000.0, t0);
        r.next_due(t0);
        let slightly = t0 + Duration::from_millis(3);
        assert_eq!(r.next_due(slightly), t0 + Duration::from_millis(1));
    }
}
