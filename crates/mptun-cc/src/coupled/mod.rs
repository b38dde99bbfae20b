//! Coupled congestion control: the controllers of one multipath
//! connection's subflows grow their windows together, so that the
//! connection takes no more of a shared bottleneck than one TCP flow would
//! and moves its traffic off congested paths (RFC 6356's three goals:
//! improve throughput, do no harm, balance congestion).
//!
//! A subflow's controller cannot see its siblings by itself, so the
//! connection hands each coupled controller a [`Coupling`] (every subflow's
//! window, RTT, in-flight, MSS and loss interval) before the subflow
//! processes input or a timeout; [`CongestionControl::set_coupling`] is the
//! whole interface, and a controller written outside this crate uses it the
//! same way. The three shipped ones follow the out-of-tree multipath-tcp.org
//! kernel (v0.96, `net/mptcp/mptcp_{coupled,olia,balia}.c`):
//!
//! * [`Lia`], RFC 6356's linked increases;
//! * [`Olia`], draft-khalili-mptcp-congestion-control-05;
//! * [`Balia`], draft-walid-mptcp-congestion-control-04 (Peng et al.,
//!   IEEE/ACM ToN 2016).
//!
//! Each behaves as NewReno while its connection has a single subflow that
//! can send, and in slow start; loss recovery, HyStart-free slow start and
//! pacing stay the subflow's own.
//!
//! [`CongestionControl::set_coupling`]: crate::CongestionControl::set_coupling

mod balia;
mod lia;
mod olia;

pub use balia::{balia_decrease, balia_increase, Balia, BaliaRule};
pub use lia::{lia_alpha, lia_increase, Lia, LiaRule};
pub use olia::{olia_alpha, olia_increase, Olia, OliaRule};

use crate::reno::{slow_start_first, tcp_cong_avoid_ai, tcp_reno_ssthresh};
use crate::{AckSample, CaEvent, CaState, CcState, CongestionControl, Duration, Instant};
use core::marker::PhantomData;

/// One subflow of a multipath connection, as its siblings' controllers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubflowCc {
    /// `snd_cwnd`, packets.
    pub cwnd: u32,
    /// `snd_ssthresh`, packets.
    pub ssthresh: u32,
    /// Smoothed RTT; `None` before the first sample (such a subflow does
    /// not count, as Linux skips subflows without `srtt`).
    pub srtt: Option<Duration>,
    /// Packets in flight.
    pub in_flight: u32,
    /// The subflow's MSS, bytes.
    pub mss: u32,
    /// Loss-recovery state.
    pub ca_state: CaState,
    /// Bytes acknowledged between the last two losses, or since the last
    /// one if that is more (OLIA's `l_r`).
    pub loss_interval: u64,
    /// The subflow can carry data now (established, joined, not stale).
    pub usable: bool,
}

impl SubflowCc {
    /// Whether it takes part in a coupled decision: usable, with an RTT.
    pub fn can_send(&self) -> bool {
        self.usable && self.srtt.is_some_and(|r| !r.is_zero())
    }

    /// The window a coupled decision counts: ssthresh while in fast
    /// recovery (the window inflated by RFC 5681's recovery is not what
    /// the path carries; `mptcp_get_crt_cwnd`), cwnd otherwise.
    pub fn window(&self) -> u32 {
        if self.ca_state == CaState::Recovery {
            self.ssthresh
        } else {
            self.cwnd
        }
    }

    /// Smoothed RTT in seconds (0 when there is none).
    fn rtt_s(&self) -> f64 {
        self.srtt.map_or(0.0, |r| r.as_secs_f64())
    }
}

/// The connection's subflows for one subflow's controller: `me` is its own
/// index in `subflows` (`None` when it is not listed, e.g. not yet usable).
#[derive(Clone, Copy, Debug)]
pub struct Coupling<'a> {
    /// Every subflow of the connection.
    pub subflows: &'a [SubflowCc],
    /// The controller's own subflow.
    pub me: Option<usize>,
}

/// What a coupled controller keeps of the last [`Coupling`].
#[derive(Clone, Debug, Default)]
struct Siblings {
    subflows: Vec<SubflowCc>,
    me: Option<usize>,
}

impl Siblings {
    fn update(&mut self, c: &Coupling<'_>) {
        self.subflows.clear();
        self.subflows.extend_from_slice(c.subflows);
        self.me = c.me.filter(|&i| i < self.subflows.len());
    }

    /// The subflows with the controller's own taken at `cwnd` (its live
    /// window, which the ACK being processed may already have moved), or
    /// `None` when the decision is not coupled: fewer than two subflows can
    /// send, or this one cannot.
    fn coupled_with(&self, cwnd: u32) -> Option<(Vec<SubflowCc>, usize)> {
        let me = self.me?;
        let mut v = self.subflows.clone();
        v[me].cwnd = cwnd;
        if !v[me].can_send() || v.iter().filter(|s| s.can_send()).count() < 2 {
            return None;
        }
        Some((v, me))
    }
}

/// Growth credit of a coupled controller, in packets: whole packets go on
/// cwnd, the fraction waits (RFC 6356 asks that no increase be lost to
/// rounding: byte counting with the remainder kept).
#[derive(Clone, Copy, Debug, Default)]
struct Credit(f64);

impl Credit {
    /// Adds `packets` (may be negative) and moves cwnd by the whole packets
    /// it makes, within `[1, clamp]`.
    fn apply(&mut self, cwnd: &mut u32, clamp: u32, packets: f64) {
        self.0 += packets;
        while self.0 >= 1.0 {
            self.0 -= 1.0;
            if *cwnd < clamp {
                *cwnd += 1;
            }
        }
        while self.0 <= -1.0 {
            self.0 += 1.0;
            *cwnd = cwnd.saturating_sub(1).max(1);
        }
    }
}

/// What one coupled algorithm decides: how much a subflow grows per packet
/// acked in congestion avoidance, and how far it falls on a loss.
pub trait CoupledRule: Send + core::fmt::Debug + Default {
    /// The name `net.ipv4.tcp_congestion_control` would print.
    const NAME: &'static str;
    /// Growth of subflow `me`, packets (negative: shrinking), for `acked`
    /// packets acked; `subflows` has `me` at its live window and at least
    /// two subflows that can send.
    fn increase(subflows: &[SubflowCc], me: usize, acked: u32) -> f64;
    /// Packets subflow `me` gives up on a loss; `None`: NewReno's halving.
    fn decrease(_subflows: &[SubflowCc], _me: usize) -> Option<u32> {
        None
    }
}

/// A coupled controller: NewReno in slow start and while its connection
/// has a single subflow that can send, `R`'s increase and decrease when
/// coupled.
#[derive(Clone, Debug, Default)]
pub struct Coupled<R: CoupledRule> {
    siblings: Siblings,
    credit: Credit,
    rule: PhantomData<R>,
}

impl<R: CoupledRule> Coupled<R> {
    /// A controller that behaves as NewReno until it is coupled.
    pub fn new() -> Self {
        Coupled { siblings: Siblings::default(), credit: Credit::default(), rule: PhantomData }
    }
}

impl<R: CoupledRule> CongestionControl for Coupled<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn init(&mut self, _state: &mut CcState, _now: Instant) {}

    fn pkts_acked(&mut self, _state: &mut CcState, _sample: &AckSample, _now: Instant) {}

    fn cong_avoid(&mut self, state: &mut CcState, _ack: u32, acked: u32, _now: Instant) {
        let Some(acked) = slow_start_first(state, acked) else { return };
        match self.siblings.coupled_with(state.cwnd) {
            Some((v, me)) => self.credit.apply(&mut state.cwnd, state.cwnd_clamp, R::increase(&v, me, acked)),
            None => {
                let w = state.cwnd;
                tcp_cong_avoid_ai(state, w, acked);
            }
        }
    }

    fn ssthresh(&mut self, state: &CcState) -> u32 {
        let cut = self.siblings.coupled_with(state.cwnd).and_then(|(v, me)| R::decrease(&v, me));
        match cut {
            Some(d) => state.cwnd.saturating_sub(d).max(1),
            None => tcp_reno_ssthresh(state),
        }
    }

    fn set_state(&mut self, _state: &mut CcState, new: CaState, _now: Instant) {
        if matches!(new, CaState::Recovery | CaState::Loss) {
            self.credit = Credit::default();
        }
    }

    fn cwnd_event(&mut self, _state: &mut CcState, _event: CaEvent, _now: Instant) {}

    fn set_coupling(&mut self, coupling: &Coupling<'_>) {
        self.siblings.update(coupling);
    }

    fn is_coupled(&self) -> bool {
        true
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;

    /// A usable subflow in congestion avoidance.
    pub(crate) fn sf(cwnd: u32, rtt_ms: u64) -> SubflowCc {
        SubflowCc {
            cwnd,
            ssthresh: cwnd / 2,
            srtt: Some(Duration::from_millis(rtt_ms)),
            in_flight: cwnd,
            mss: 1000,
            ca_state: CaState::Open,
            loss_interval: 0,
            usable: true,
        }
    }

    pub(crate) fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }
}
