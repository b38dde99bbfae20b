//! NewReno window growth: Linux `tcp_reno_cong_avoid` and the two helpers
//! every kernel controller builds on, `tcp_slow_start` and `tcp_cong_avoid_ai`.
//!
//! The helpers are public because CUBIC (and any future controller) must grow
//! the window through exactly the same arithmetic as the kernel does: slow
//! start may only consume the part of an ACK that fits below ssthresh, and the
//! leftover feeds additive increase with the `snd_cwnd_cnt` accumulator.

use crate::{AckSample, CaEvent, CaState, CcState, CongestionControl, Instant};

/// Linux `tcp_slow_start`: grow cwnd by `acked` packets but not past
/// `ssthresh`; returns the packets left over for congestion avoidance, so an
/// ACK that straddles ssthresh is not lost to either phase.
pub fn tcp_slow_start(state: &mut CcState, acked: u32) -> u32 {
    let cwnd = state.cwnd.saturating_add(acked).min(state.ssthresh);
    let leftover = acked - (cwnd.saturating_sub(state.cwnd)).min(acked);
    state.cwnd = cwnd.min(state.cwnd_clamp);
    leftover
}

/// Slow start's share of an ACK of `acked` packets, as every kernel
/// controller takes it first: the packets left for congestion avoidance,
/// `None` when slow start took them all (`tcp_reno_cong_avoid`).
pub(crate) fn slow_start_first(state: &mut CcState, acked: u32) -> Option<u32> {
    if !state.in_slow_start() {
        return Some(acked);
    }
    let left = tcp_slow_start(state, acked);
    (left > 0).then_some(left)
}

/// Linux `tcp_cong_avoid_ai`: one packet of growth per `w` packets acked.
///
/// Credits accumulated while `w` was larger are applied gently (one packet)
/// when `w` shrinks, instead of as a burst, exactly as the kernel does.
pub fn tcp_cong_avoid_ai(state: &mut CcState, w: u32, acked: u32) {
    let w = w.max(1);
    if state.cwnd_cnt >= w {
        state.cwnd_cnt = 0;
        state.cwnd = state.cwnd.saturating_add(1);
    }
    state.cwnd_cnt = state.cwnd_cnt.saturating_add(acked);
    if state.cwnd_cnt >= w {
        let delta = state.cwnd_cnt / w;
        state.cwnd_cnt -= delta * w;
        state.cwnd = state.cwnd.saturating_add(delta);
    }
    state.cwnd = state.cwnd.min(state.cwnd_clamp);
}

/// Linux `tcp_reno_ssthresh`: halve the window, never below 2 packets so
/// fast retransmit can still be triggered by duplicate ACKs.
pub fn tcp_reno_ssthresh(state: &CcState) -> u32 {
    (state.cwnd >> 1).max(2)
}

/// NewReno (RFC 5681 / Linux `tcp_reno_congestion_ops`): the baseline every
/// other controller is measured against, and the fallback when CUBIC is not
/// wanted. Stateless beyond [`CcState`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Reno;

impl Reno {
    /// A Reno controller; it keeps no state of its own.
    pub fn new() -> Self {
        Reno
    }
}

impl CongestionControl for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }

    fn init(&mut self, _state: &mut CcState, _now: Instant) {}

    fn pkts_acked(&mut self, _state: &mut CcState, _sample: &AckSample, _now: Instant) {}

    fn cong_avoid(&mut self, state: &mut CcState, _ack: u32, acked: u32, _now: Instant) {
        if let Some(acked) = slow_start_first(state, acked) {
            let w = state.cwnd;
            tcp_cong_avoid_ai(state, w, acked);
        }
    }

    fn ssthresh(&mut self, state: &CcState) -> u32 {
        tcp_reno_ssthresh(state)
    }

    fn set_state(&mut self, _state: &mut CcState, _new: CaState, _now: Instant) {}

    fn cwnd_event(&mut self, _state: &mut CcState, _event: CaEvent, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_stops_at_ssthresh_and_returns_leftover() {
        let mut s = CcState::new(10);
        s.ssthresh = 12;
        assert_eq!(tcp_slow_start(&mut s, 5), 3);
        assert_eq!(s.cwnd, 12);
        // Already at ssthresh: everything is left over.
        assert_eq!(tcp_slow_start(&mut s, 4), 4);
        assert_eq!(s.cwnd, 12);
    }

    #[test]
    fn slow_start_respects_clamp() {
        let mut s = CcState::new(10);
        s.cwnd_clamp = 11;
        tcp_slow_start(&mut s, 5);
        assert_eq!(s.cwnd, 11);
    }

    #[test]
    fn cong_avoid_ai_accumulates_and_applies_stale_credit_gently() {
        let mut s = CcState::new(10);
        tcp_cong_avoid_ai(&mut s, 10, 9);
        assert_eq!((s.cwnd, s.cwnd_cnt), (10, 9));
        tcp_cong_avoid_ai(&mut s, 10, 1);
        assert_eq!((s.cwnd, s.cwnd_cnt), (11, 0));
        // 25 acked at w = 10: two packets of growth, 5 carried.
        tcp_cong_avoid_ai(&mut s, 10, 25);
        assert_eq!((s.cwnd, s.cwnd_cnt), (13, 5));
        // w shrank below the accumulated credit: one packet, counter reset.
        tcp_cong_avoid_ai(&mut s, 4, 0);
        assert_eq!((s.cwnd, s.cwnd_cnt), (14, 0));
    }

    #[test]
    fn ssthresh_halves_with_floor_of_two() {
        assert_eq!(tcp_reno_ssthresh(&CcState::new(21)), 10);
        assert_eq!(tcp_reno_ssthresh(&CcState::new(3)), 2);
        assert_eq!(tcp_reno_ssthresh(&CcState::new(1)), 2);
    }
}
