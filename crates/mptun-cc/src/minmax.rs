//! A windowed minimum over time and a windowed maximum over rounds
//! (Kathleen Nichols' algorithm, Linux `lib/minmax.c`).
//!
//! TCP's min RTT must forget old values — a route change can raise the real
//! propagation delay for good — yet must not be fooled by a single lucky
//! sample ageing out: the filter keeps the best, second-best and third-best
//! samples from successive sub-windows so that, when the minimum expires, a
//! recent near-minimum takes its place in O(1) time and memory.

use crate::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    t: Instant,
    v: Duration,
}

/// Running minimum of a value over a sliding time window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowedMin {
    window: Duration,
    s: Option<[Sample; 3]>,
}

impl WindowedMin {
    /// An empty filter remembering samples for `window`.
    pub fn new(window: Duration) -> Self {
        WindowedMin { window, s: None }
    }

    /// The current minimum, `None` before the first sample.
    pub fn get(&self) -> Option<Duration> {
        self.s.map(|s| s[0].v)
    }

    /// Forget everything and start over from one sample (`minmax_reset`).
    pub fn reset(&mut self, now: Instant, v: Duration) -> Duration {
        let val = Sample { t: now, v };
        self.s = Some([val; 3]);
        v
    }

    /// Add a sample taken at `now` and return the new minimum
    /// (`minmax_running_min`).
    pub fn update(&mut self, now: Instant, v: Duration) -> Duration {
        let val = Sample { t: now, v };
        let win = self.window;
        let Some(s) = self.s.as_mut() else { return self.reset(now, v) };
        if val.v <= s[0].v || now - s[2].t > win {
            return self.reset(now, v);
        }
        if val.v <= s[1].v {
            s[1] = val;
            s[2] = val;
        } else if val.v <= s[2].v {
            s[2] = val;
        }

        // minmax_subwin_update
        let dt = now - s[0].t;
        if dt > win {
            // The best sample aged out: promote the runners-up (possibly twice,
            // the second choice may be stale too; the third was checked above).
            s[0] = s[1];
            s[1] = s[2];
            s[2] = val;
            if now - s[0].t > win {
                s[0] = s[1];
                s[1] = s[2];
                s[2] = val;
            }
        } else if s[1].t == s[0].t && dt > win / 4 {
            // A quarter window without a new second choice: take one from
            // the second quarter.
            s[1] = val;
            s[2] = val;
        } else if s[2].t == s[1].t && dt > win / 2 {
            // Half a window without a third choice: take one from the last half.
            s[2] = val;
        }
        s[0].v
    }
}

/// Running maximum of a value over a window of `win` rounds (Linux
/// `minmax_running_max` with packet-timed rounds as its clock): BBR's
/// bottleneck-bandwidth filter, which must forget a path's old capacity
/// within ten round trips yet keep a recent near-maximum when the best
/// sample ages out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundMax {
    s: [(u32, u64); 3],
}

impl RoundMax {
    /// The current maximum (0 before the first sample).
    pub fn get(&self) -> u64 {
        self.s[0].1
    }

    /// Forget everything but this sample (`minmax_reset`).
    pub fn reset(&mut self, round: u32, v: u64) -> u64 {
        self.s = [(round, v); 3];
        v
    }

    /// Add a sample taken in `round` and return the new maximum.
    pub fn update(&mut self, win: u32, round: u32, v: u64) -> u64 {
        let val = (round, v);
        let s = &mut self.s;
        if v >= s[0].1 || round.wrapping_sub(s[2].0) > win {
            return self.reset(round, v);
        }
        if v >= s[1].1 {
            s[1] = val;
            s[2] = val;
        } else if v >= s[2].1 {
            s[2] = val;
        }
        let dt = round.wrapping_sub(s[0].0);
        if dt > win {
            s[0] = s[1];
            s[1] = s[2];
            s[2] = val;
            if round.wrapping_sub(s[0].0) > win {
                s[0] = s[1];
                s[1] = s[2];
                s[2] = val;
            }
        } else if s[1].0 == s[0].0 && dt > win / 4 {
            s[1] = val;
            s[2] = val;
        } else if s[2].0 == s[1].0 && dt > win / 2 {
            s[2] = val;
        }
        s[0].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
    fn at(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }

    #[test]
    fn tracks_minimum_within_window() {
        let mut m = WindowedMin::new(Duration::from_secs(10));
        assert_eq!(m.get(), None);
        assert_eq!(m.update(at(0), ms(50)), ms(50));
        assert_eq!(m.update(at(1), ms(60)), ms(50));
        assert_eq!(m.update(at(2), ms(40)), ms(40));
        assert_eq!(m.update(at(9), ms(70)), ms(40));
    }

    #[test]
    fn old_minimum_expires_to_a_recent_runner_up() {
        let mut m = WindowedMin::new(Duration::from_secs(10));
        m.update(at(0), ms(10));
        // Quarter window later: 30 becomes the second choice.
        m.update(at(3), ms(30));
        // Half window later: 40 becomes the third choice.
        m.update(at(6), ms(40));
        m.update(at(8), ms(50));
        // 10 ms sample is 11 s old: 30 takes over, not 50 or 60.
        assert_eq!(m.update(at(11), ms(60)), ms(30));
        // 30 is 11 s old at t = 14: 40 then.
        assert_eq!(m.update(at(14), ms(60)), ms(40));
    }

    #[test]
    fn everything_expired_resets() {
        let mut m = WindowedMin::new(Duration::from_secs(10));
        m.update(at(0), ms(10));
        assert_eq!(m.update(at(30), ms(90)), ms(90));
    }

    #[test]
    fn round_max_keeps_the_best_of_the_last_rounds() {
        let mut m = RoundMax::default();
        assert_eq!(m.update(10, 0, 100), 100);
        assert_eq!(m.update(10, 1, 50), 100);
        assert_eq!(m.update(10, 3, 80), 100);
        assert_eq!(m.update(10, 6, 70), 100);
        // Round 11: the 100 of round 0 is older than 10 rounds; the
        // runner-up from the second quarter takes over.
        assert_eq!(m.update(10, 11, 60), 80);
        assert_eq!(m.update(10, 12, 120), 120);
        // Nothing in the window any more: the new sample alone.
        assert_eq!(m.update(10, 40, 10), 10);
    }
}
