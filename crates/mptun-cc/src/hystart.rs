//! HyStart (Ha & Rhee, "Taming the elephants"), as Linux mainline runs it
//! inside `tcp_cubic.c`: leave slow start before the first loss when either
//! the ACKs of one round form a train lasting about half the minimum RTT (the
//! pipe is full) or the minimum RTT of a round rises by a clamped eighth of
//! the base RTT (a queue is building).
//!
//! Times are the kernel's `u32` microsecond clock (`tcp_mstamp`, via
//! `bictcp_clock_us`) and compared with wrapping `s32` arithmetic, so a run
//! longer than 71 minutes behaves like the kernel's does. Sequence numbers
//! use TCP's modular `after()`.

use core::fmt;
use core::str::FromStr;

use crate::ParseError;

/// `HYSTART_ACK_TRAIN` bit of the `hystart_detect` module parameter.
pub const HYSTART_ACK_TRAIN: u32 = 0x1;
/// `HYSTART_DELAY` bit of the `hystart_detect` module parameter.
pub const HYSTART_DELAY: u32 = 0x2;
/// Delay samples taken at the start of a round before judging its RTT.
pub const HYSTART_MIN_SAMPLES: u8 = 8;
/// Lower clamp of the delay-increase threshold, microseconds.
pub const HYSTART_DELAY_MIN_US: u32 = 4_000;
/// Upper clamp of the delay-increase threshold, microseconds.
pub const HYSTART_DELAY_MAX_US: u32 = 16_000;

/// `HYSTART_DELAY_THRESH(x)`: `clamp(x, HYSTART_DELAY_MIN, HYSTART_DELAY_MAX)`.
pub fn hystart_delay_thresh(x: u32) -> u32 {
    x.clamp(HYSTART_DELAY_MIN_US, HYSTART_DELAY_MAX_US)
}

/// Which generation of HyStart's round bookkeeping to run.
///
/// Linux 5.8 (commit 4e1fddc98d25) moved the round reset inside
/// `hystart_update`, which is only called once cwnd reaches
/// `hystart_low_window`; a flow whose cwnd crosses the low window mid-round
/// therefore starts its first "round" mid-train and keeps that phase for
/// good, so the ACK train looks short and the first delay samples come from
/// an already-queued part of the flight. The 2025 fix (Arghavani, "tcp_cubic:
/// fix incorrect HyStart round start detection") resets rounds on every ACK
/// that passes `end_seq` and only gates *detection* on the low window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HystartRoundStart {
    /// Post-fix behaviour (Linux 6.14+): rounds restart regardless of cwnd.
    #[default]
    Fixed,
    /// Pre-fix behaviour (Linux 5.8 .. 6.13): no HyStart bookkeeping at all
    /// below the low window.
    Legacy,
}

impl FromStr for HystartRoundStart {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.to_ascii_lowercase().as_str() {
            "fixed" => Ok(HystartRoundStart::Fixed),
            "legacy" => Ok(HystartRoundStart::Legacy),
            _ => Err(ParseError::new("hystart round start", s, &["fixed", "legacy"])),
        }
    }
}

impl fmt::Display for HystartRoundStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HystartRoundStart::Fixed => "fixed",
            HystartRoundStart::Legacy => "legacy",
        })
    }
}

/// TCP's `after(seq1, seq2)`: `seq1` is later than `seq2` modulo 2^32.
pub(crate) fn after(seq1: u32, seq2: u32) -> bool {
    (seq2.wrapping_sub(seq1) as i32) < 0
}

/// What one `hystart_update` call detected. Both bits can fire on the same
/// ACK in Linux (each bumps its own counter), so this is not an either/or.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Detected {
    pub train: bool,
    pub delay: bool,
}

/// The tunables `hystart_update` reads (module parameters in Linux).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HystartParams {
    pub detect: u32,
    pub low_window: u32,
    pub ack_delta_us: u32,
    pub round_start: HystartRoundStart,
}

/// What `hystart_update` needs to know about the socket at this ACK.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HystartInput {
    pub now_us: u32,
    pub delay_us: u32,
    pub delay_min_us: u32,
    pub cwnd: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    /// `hystart_ack_delay(sk)`: TSO/GRO cushion derived from the pacing rate.
    pub ack_delay_us: u32,
    /// `sk->sk_pacing_status != SK_PACING_NONE`.
    pub paced: bool,
}

/// HyStart's per-connection round state (the tail of Linux `struct bictcp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hystart {
    /// Beginning of the current round, us.
    pub round_start: u32,
    /// Last time an ACK arrived close (≤ `ack_delta_us`) to its predecessor, us.
    pub last_ack: u32,
    /// Minimum RTT seen in the current round, us (`~0` at round start).
    pub curr_rtt: u32,
    /// Delay samples taken this round, saturating at `HYSTART_MIN_SAMPLES`.
    pub sample_cnt: u8,
    /// `snd_nxt` when the round started; the round ends when `snd_una` passes
    /// it. `None` until the first reset that knew `snd_nxt` (Linux takes it at
    /// `init` time, when `snd_una == snd_nxt`, so the first ACK always starts
    /// a fresh round; `None` reproduces exactly that).
    pub end_seq: Option<u32>,
}

impl Hystart {
    pub(crate) fn new() -> Self {
        Hystart { round_start: 0, last_ack: 0, curr_rtt: u32::MAX, sample_cnt: 0, end_seq: None }
    }

    /// `bictcp_hystart_reset`.
    pub(crate) fn reset(&mut self, now_us: u32, snd_nxt: Option<u32>) {
        self.round_start = now_us;
        self.last_ack = now_us;
        self.end_seq = snd_nxt;
        self.curr_rtt = u32::MAX;
        self.sample_cnt = 0;
    }

    /// `hystart_update`: returns what was detected. The caller sets
    /// `found`, ssthresh and the counters (they belong to the controller, not
    /// to the round).
    pub(crate) fn update(&mut self, p: &HystartParams, i: &HystartInput) -> Detected {
        let mut detected = Detected::default();
        let round_over = match self.end_seq {
            Some(end_seq) => after(i.snd_una, end_seq),
            None => true,
        };
        if round_over {
            self.reset(i.now_us, Some(i.snd_nxt));
        }

        // The 2025 fix: the low-window gate moved here, after the reset.
        // (Legacy callers never get here below the low window.)
        if p.round_start == HystartRoundStart::Fixed && i.cwnd < p.low_window {
            return detected;
        }

        if p.detect & HYSTART_ACK_TRAIN != 0 && (i.now_us.wrapping_sub(self.last_ack) as i32) <= p.ack_delta_us as i32 {
            self.last_ack = i.now_us;
            let mut threshold = i.delay_min_us.wrapping_add(i.ack_delay_us);
            // Pacing may have spread the flight over up to RTT/2 in slow
            // start, so only unpaced flows use the delay_min/2 train length.
            if !i.paced {
                threshold >>= 1;
            }
            if i.now_us.wrapping_sub(self.round_start) as i32 > threshold as i32 {
                detected.train = true;
            }
        }

        if p.detect & HYSTART_DELAY != 0 {
            // The minimum delay over the round's samples, judged once at
            // least HYSTART_MIN_SAMPLES were seen.
            if self.curr_rtt > i.delay_us {
                self.curr_rtt = i.delay_us;
            }
            if self.sample_cnt < HYSTART_MIN_SAMPLES {
                self.sample_cnt += 1;
            } else if self.curr_rtt > i.delay_min_us.saturating_add(hystart_delay_thresh(i.delay_min_us >> 3)) {
                detected.delay = true;
            }
        }
        detected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: HystartParams =
        HystartParams { detect: 3, low_window: 16, ack_delta_us: 2000, round_start: HystartRoundStart::Fixed };

    fn input(now_us: u32, delay_us: u32, cwnd: u32, snd_una: u32, snd_nxt: u32) -> HystartInput {
        HystartInput { now_us, delay_us, delay_min_us: 10_000, cwnd, snd_una, snd_nxt, ack_delay_us: 0, paced: false }
    }

    #[test]
    fn after_is_modular() {
        assert!(after(1, 0));
        assert!(!after(0, 0));
        assert!(!after(0, 1));
        assert!(after(5, u32::MAX - 5));
        assert!(!after(u32::MAX - 5, 5));
    }

    #[test]
    fn delay_threshold_is_clamped() {
        assert_eq!(hystart_delay_thresh(1_000), 4_000);
        assert_eq!(hystart_delay_thresh(10_000), 10_000);
        assert_eq!(hystart_delay_thresh(100_000), 16_000);
    }

    #[test]
    fn first_sample_starts_a_round_at_snd_nxt() {
        let mut h = Hystart::new();
        h.update(&P, &input(500, 10_000, 10, 1, 10));
        assert_eq!((h.round_start, h.last_ack, h.end_seq), (500, 500, Some(10)));
        assert_eq!(h.sample_cnt, 0, "below the low window no sample is counted");
        // snd_una == end_seq is not "after": same round.
        h.update(&P, &input(700, 10_000, 10, 10, 12));
        assert_eq!(h.round_start, 500);
        h.update(&P, &input(900, 10_000, 10, 11, 14));
        assert_eq!((h.round_start, h.end_seq), (900, Some(14)));
    }

    #[test]
    fn train_needs_close_acks_spanning_half_delay_min() {
        let mut h = Hystart::new();
        // Round starts at t = 0 us; ACKs every 1 ms up to 5 ms: 5000 > 10000/2 is false.
        let mut t = 0;
        for seq in 1..=5u32 {
            assert!(!h.update(&P, &input(t, 10_000, 20, seq, 100)).train);
            t += 1000;
        }
        assert!(!h.update(&P, &input(5_000, 10_000, 20, 6, 100)).train);
        assert!(h.update(&P, &input(5_001, 10_000, 20, 7, 100)).train);
    }

    #[test]
    fn a_gap_in_the_train_stops_it() {
        let mut h = Hystart::new();
        h.update(&P, &input(0, 10_000, 20, 1, 100));
        // 2001 us gap: not part of the train, last_ack not refreshed.
        assert!(!h.update(&P, &input(2_001, 10_000, 20, 2, 100)).train);
        assert_eq!(h.last_ack, 0);
        assert!(!h.update(&P, &input(6_000, 10_000, 20, 3, 100)).train);
    }

    #[test]
    fn pacing_doubles_the_train_threshold_and_adds_the_cushion() {
        let mut h = Hystart::new();
        let paced = |now| HystartInput { paced: true, ack_delay_us: 1_000, ..input(now, 10_000, 20, 1, 100) };
        h.update(&P, &paced(0));
        let mut t = 0;
        while t < 11_000 {
            t += 1_000;
            let d = h.update(&P, &paced(t));
            assert_eq!(d.train, t > 11_000, "t = {t}");
        }
        assert!(h.update(&P, &paced(11_001)).train);
    }

    #[test]
    fn delay_fires_after_min_samples_when_round_min_exceeds_threshold() {
        let mut h = Hystart::new();
        let p = HystartParams { detect: HYSTART_DELAY, ..P };
        // delay_min 10 ms -> threshold clamp(1.25 ms) = 4 ms -> > 14 ms needed.
        for k in 0..8u32 {
            assert!(!h.update(&p, &input(k * 3000, 14_001, 20, 1, 100)).delay);
        }
        assert_eq!(h.sample_cnt, 8);
        assert!(h.update(&p, &input(30_000, 20_000, 20, 1, 100)).delay);
        // Exactly at the threshold is not enough.
        let mut h = Hystart::new();
        for k in 0..9u32 {
            assert!(!h.update(&p, &input(k * 3000, 14_000, 20, 1, 100)).delay);
        }
    }
}
