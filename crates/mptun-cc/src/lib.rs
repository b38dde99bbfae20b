//! Congestion control, RTT estimation and pacing for one TCP subflow.
//!
//! The split follows Linux's `struct tcp_congestion_ops`: the subflow owns the
//! loss-recovery machinery (fast retransmit, PRR, RTO) and the window state
//! ([`CcState`], in packets like `snd_cwnd`/`snd_ssthresh`); a
//! [`CongestionControl`] only decides how the window grows (`cong_avoid`), where
//! it falls to on a loss (`ssthresh`) and what it learns from ACK samples
//! (`pkts_acked`). So CUBIC drops in for Reno without touching the subflow, and
//! counters and thresholds keep the kernel's units.
//!
//! What a subflow does with this crate, in the kernel's order:
//! * on each ACK that newly acknowledges data: feed the RTT sample (Karn's
//!   rule applied) to [`RttEstimator::update`], call
//!   [`CongestionControl::pkts_acked`], then `cong_avoid` if in
//!   [`CaState::Open`] and cwnd-limited; then recompute the pacing rate with
//!   [`PacingRateConfig::rate`] and hand it to the [`Pacer`] and to
//!   [`CongestionControl::set_pacing`];
//! * on entering Recovery or Loss: `ssthresh`, then `set_state`; on an RTO
//!   also [`RttEstimator::backoff`];
//! * on each data segment sent: `cwnd_event(TxStart)` if nothing was in
//!   flight, [`CongestionControl::data_sent`], [`Pacer::on_send`].
//!
//! A controller that owns the window and the pacing rate outright (BBR,
//! Linux's `cong_control` hook) gets each ACK's delivery-rate sample
//! ([`rate::RateSample`]) in [`CongestionControl::cong_control`] instead,
//! and the subflow's PRR, `cong_avoid` and pacing-rate formula stand aside.
//!
//! Pieces: [`Reno`], [`Cubic`] (with HyStart, [`HystartRoundStart`]) and
//! [`Bbr`], chosen by [`Algorithm`]; [`rate::DeliveryRate`] (Linux
//! `tcp_rate.c`); [`RttEstimator`] (RFC 6298 + Linux RTO floor,
//! windowed min RTT); [`EdtPacer`] and [`QuantumPacer`] behind [`Pacer`],
//! chosen by [`PacerKind`]. Nothing here reads a clock: every entry point
//! takes the driver's [`Instant`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod algorithm;
mod bbr;
pub mod coupled;
mod cubic;
mod hystart;
mod minmax;
mod pacing;
pub mod rate;
mod reno;
mod rtt;

pub use algorithm::{new_controller, new_controller_with, Algorithm, ControllerFactory, ParseError};
pub use bbr::{
    Bbr, BbrCounters, BbrInfo, BbrMode, BBR_BW_RTTS, BBR_CWND_GAIN, BBR_CWND_MIN_TARGET, BBR_CYCLE_RAND,
    BBR_DRAIN_GAIN, BBR_FULL_BW_CNT, BBR_FULL_BW_THRESH, BBR_HIGH_GAIN, BBR_MIN_RTT_WIN, BBR_PACING_GAIN,
    BBR_PROBE_RTT_MODE, BBR_UNIT, BW_SCALE, BW_UNIT, CYCLE_LEN,
};
pub use cubic::{cubic_root, Cubic, CubicConfig, BICTCP_BETA_SCALE, BICTCP_HZ, HZ};
pub use hystart::{
    hystart_delay_thresh, HystartRoundStart, HYSTART_ACK_TRAIN, HYSTART_DELAY, HYSTART_DELAY_MAX_US,
    HYSTART_DELAY_MIN_US, HYSTART_MIN_SAMPLES,
};
pub use minmax::WindowedMin;
pub use mptun_time::{Duration, Instant};
pub use pacing::{new_pacer, EdtPacer, NoPacer, Pacer, PacerKind, PacingRateConfig, QuantumConfig, QuantumPacer};
pub use reno::{tcp_cong_avoid_ai, tcp_reno_ssthresh, tcp_slow_start, Reno};
pub use rtt::{RtoFloor, RttConfig, RttEstimator};

/// Window state shared between a subflow and its congestion controller,
/// in packets (MSS-sized segments), exactly as Linux keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcState {
    /// `snd_cwnd`.
    pub cwnd: u32,
    /// `snd_cwnd_cnt`: fractional growth accumulator used in congestion avoidance.
    pub cwnd_cnt: u32,
    /// `snd_ssthresh`; `u32::MAX` until the first loss (Linux `TCP_INFINITE_SSTHRESH`).
    pub ssthresh: u32,
    /// `snd_cwnd_clamp`.
    pub cwnd_clamp: u32,
}

impl CcState {
    /// Linux's initial state: IW10, infinite ssthresh.
    pub fn new(initial_cwnd: u32) -> Self {
        CcState { cwnd: initial_cwnd, cwnd_cnt: 0, ssthresh: u32::MAX, cwnd_clamp: u32::MAX / 2 }
    }

    /// `tcp_in_slow_start`.
    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }
}

/// Linux `tcp_ca_state`, reported to the controller on every transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaState {
    /// Normal operation: cwnd may grow.
    Open,
    /// Duplicate ACKs or SACKs seen, not yet enough to declare a loss.
    Disorder,
    /// Fast retransmit / recovery after a loss.
    Recovery,
    /// Retransmission timeout: everything in flight presumed lost.
    Loss,
}

/// Linux `tcp_ca_event`s a controller may react to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaEvent {
    /// First transmission after the flow was idle (nothing in flight).
    TxStart,
    /// Loss recovery completed (cwnd set back to ssthresh).
    CompleteCwr,
    /// The whole window was lost (RTO).
    Loss,
}

/// One ACK's worth of information for `pkts_acked` (Linux `struct ack_sample`
/// plus the sequence numbers HyStart needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckSample {
    /// Packets newly acknowledged (cumulatively or by SACK).
    pub pkts_acked: u32,
    /// RTT sample of this ACK, if it produced one (Karn: none from retransmits).
    pub rtt: Option<Duration>,
    /// `snd_una` after processing this ACK.
    pub snd_una: u32,
    /// `snd_nxt` when this ACK was processed.
    pub snd_nxt: u32,
    /// Packets in flight before this ACK.
    pub in_flight: u32,
}

/// What a controller that sets the window and pacing rate itself (Linux
/// `cong_control`, BBR) reads of its subflow on an ACK, beside the rate
/// sample: the parts of `tcp_sock` the kernel's BBR reads directly.
#[derive(Clone, Copy, Debug)]
pub struct AckContext {
    /// Payload bytes per segment (`mss_cache`).
    pub mss: u32,
    /// Packets in flight after this ACK (`tcp_packets_in_flight`).
    pub in_flight: u32,
    /// Smoothed RTT, if measured (`srtt_us`).
    pub srtt: Option<Duration>,
    /// Windowed minimum RTT of the subflow (`tcp_min_rtt`).
    pub min_rtt: Option<Duration>,
    /// The CA state after this ACK (`icsk_ca_state`).
    pub ca_state: CaState,
    /// When the next paced segment may leave (`tcp_wstamp_ns`).
    pub next_departure: Instant,
    /// `sk_max_pacing_rate`, bytes per second (`u64::MAX`: none).
    pub max_pacing_rate: u64,
    /// The subflow's delivery state (`delivered`, `lost`, `app_limited`, ...).
    pub delivery: rate::DeliveryRate,
}

/// How far a window reduction asked from outside the controller goes
/// ([`CongestionControl::reduce_window`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WindowCut {
    /// cwnd halved; ssthresh halved too once the flow is past slow start,
    /// so that a flow still probing keeps probing from the smaller window.
    Halve,
    /// cwnd and ssthresh halved, in slow start too, so that the flow grows
    /// back linearly instead of doubling to where it was.
    HalveWithSsthresh,
}

/// Why a controller ended slow start by its own decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlowStartExitReason {
    /// HyStart's ACK-train detection (`TcpExtTCPHystartTrainDetect`).
    AckTrain,
    /// HyStart's delay-increase detection (`TcpExtTCPHystartDelayDetect`).
    Delay,
}

impl SlowStartExitReason {
    /// The short name reports print (`"train"`, `"delay"`), as the kernel's
    /// counter names abbreviate them.
    pub fn name(self) -> &'static str {
        match self {
            SlowStartExitReason::AckTrain => "train",
            SlowStartExitReason::Delay => "delay",
        }
    }
}

/// The end of slow start a controller decided ([`CongestionControl::slow_start_exit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlowStartExit {
    /// What ended it.
    pub reason: SlowStartExitReason,
    /// cwnd at that moment, packets.
    pub cwnd: u32,
}

/// Counters a controller maintains, with the kernel's names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcCounters {
    /// `TcpExtTCPHystartTrainDetect`: slow starts ended by an ACK train.
    pub tcp_ext_tcp_hystart_train_detect: u64,
    /// `TcpExtTCPHystartTrainCwnd`: sum of cwnd at those exits.
    pub tcp_ext_tcp_hystart_train_cwnd: u64,
    /// `TcpExtTCPHystartDelayDetect`: slow starts ended by an RTT increase.
    pub tcp_ext_tcp_hystart_delay_detect: u64,
    /// `TcpExtTCPHystartDelayCwnd`: sum of cwnd at those exits.
    pub tcp_ext_tcp_hystart_delay_cwnd: u64,
}

/// A pluggable congestion controller (Linux `tcp_congestion_ops`).
///
/// Call order per ACK, as `tcp_ack` does it: `pkts_acked` with the sample,
/// then `cong_avoid` if the ACK advanced `snd_una`, the subflow is in
/// [`CaState::Open`] and it was cwnd-limited.
pub trait CongestionControl: Send + core::fmt::Debug {
    /// Name as `net.ipv4.tcp_congestion_control` would print it.
    fn name(&self) -> &'static str;
    /// Connection start (`init`).
    fn init(&mut self, state: &mut CcState, now: Instant);
    /// Per-ACK sample (`pkts_acked`).
    fn pkts_acked(&mut self, state: &mut CcState, sample: &AckSample, now: Instant);
    /// Window growth for `acked` newly acknowledged packets (`cong_avoid`).
    fn cong_avoid(&mut self, state: &mut CcState, ack: u32, acked: u32, now: Instant);
    /// New slow-start threshold on entering Recovery or Loss (`ssthresh`).
    fn ssthresh(&mut self, state: &CcState) -> u32;
    /// The subflow changed CA state (`set_state`).
    fn set_state(&mut self, state: &mut CcState, new: CaState, now: Instant);
    /// An event the controller may care about (`cwnd_event`).
    fn cwnd_event(&mut self, state: &mut CcState, event: CaEvent, now: Instant);
    /// A layer above the subflow asks for a smaller window, outside any loss
    /// (a multipath scheduler that finds this subflow holding the others up,
    /// for one). It goes through the controller so that a controller with its
    /// own window model can answer it its own way; the provided method is the
    /// plain halving that [`WindowCut`] describes.
    fn reduce_window(&mut self, state: &mut CcState, cut: WindowCut) {
        let old = state.cwnd;
        state.cwnd = (old / 2).max(1);
        state.cwnd_cnt = 0;
        let past_slow_start = state.ssthresh != u32::MAX && old >= state.ssthresh;
        if cut == WindowCut::HalveWithSsthresh || past_slow_start {
            state.ssthresh = (state.ssthresh.min(old) / 2).max(2);
        }
    }
    /// The subflow transmitted a data segment (Linux sets `tp->lsndtime` in
    /// `tcp_event_data_sent`). CUBIC needs the time of the last send to shift
    /// its epoch by the idle period on [`CaEvent::TxStart`]; call it after
    /// `cwnd_event(TxStart)` for the same segment, as the kernel does.
    fn data_sent(&mut self, _now: Instant) {}
    /// The subflow's current pacing rate and whether pacing is actually
    /// applied (Linux `sk_pacing_rate` and `sk_pacing_status != SK_PACING_NONE`).
    /// HyStart's ACK-train threshold depends on both: paced flows get no
    /// `delay_min / 2` halving, and the rate sizes the TSO/GRO cushion.
    /// Call whenever the pacing rate is recomputed (once per ACK in Linux).
    fn set_pacing(&mut self, _rate_bytes_per_sec: u64, _paced: bool) {}
    /// HyStart and other controller counters.
    fn counters(&self) -> CcCounters {
        CcCounters::default()
    }
    /// Why slow start ended, if it did by the controller's own decision
    /// (HyStart), with the cwnd at that moment.
    fn slow_start_exit(&self) -> Option<SlowStartExit> {
        None
    }
    /// The subflow reached ESTABLISHED (Linux calls `init` then, in
    /// `tcp_init_transfer`, with the handshake's RTT known; mptun calls
    /// [`CongestionControl::init`] at creation and this at establishment).
    fn established(&mut self, _state: &mut CcState, _ctx: &AckContext, _now: Instant) {}
    /// The endpoint's randomness for this subflow (the core has no RNG of
    /// its own; BBR draws its gain-cycle phase from it). Called once, right
    /// after `init`.
    fn seed(&mut self, _seed: u64) {}
    /// Linux `cong_control`: set the window (and the pacing rate, see
    /// [`CongestionControl::pacing_rate`]) from this ACK's delivery-rate
    /// sample. Called for every ACK, after `pkts_acked`, with the sample
    /// every controller may read; returns whether the controller took the
    /// window in hand, in which case the subflow's PRR, `cong_avoid` and
    /// its own pacing-rate formula are skipped, as in the kernel. `rate` is
    /// writable because BBR marks the flow app-limited in PROBE_RTT.
    fn cong_control(
        &mut self,
        _state: &mut CcState,
        _ctx: &AckContext,
        _rate: &mut rate::DeliveryRate,
        _rs: &rate::RateSample,
        _now: Instant,
    ) -> bool {
        false
    }
    /// Whether the controller has a `cong_control` of its own (Linux tests
    /// `icsk_ca_ops->cong_control`): the subflow then leaves the window to
    /// it at the end of a recovery too (`tcp_end_cwnd_reduction` returns
    /// early, no `CompleteCwr`), and signals a transmission start from idle
    /// whatever the first burst's size.
    fn has_cong_control(&self) -> bool {
        false
    }
    /// The subflow's delivery state changed outside an ACK (a transmission
    /// from idle, an RTO): what a rate-based controller reads there.
    fn observe_delivery(&mut self, _delivery: &rate::DeliveryRate) {}
    /// The pacing rate the controller set itself (`sk_pacing_rate` under
    /// BBR), bytes of payload per second; `None`: the subflow computes it
    /// (`tcp_update_pacing_rate`). A controller that sets it needs pacing:
    /// the subflow paces it even where no pacer was chosen, as Linux does
    /// for `SK_PACING_NEEDED`.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }
    /// Least segments per TSO burst (`min_tso_segs`); `None`: the sysctl's 2.
    fn min_tso_segs(&self) -> Option<u32> {
        None
    }
    /// Send-buffer size in congestion windows (`sndbuf_expand`; Linux: 2).
    fn sndbuf_expand(&self) -> u32 {
        2
    }
    /// BBR's model, for `ss`-like reports (`get_info` with `INET_DIAG_BBRINFO`).
    fn bbr_info(&self) -> Option<BbrInfo> {
        None
    }
    /// The subflows of this subflow's multipath connection, given before
    /// every input and timeout the subflow processes, when
    /// [`CongestionControl::is_coupled`] says the controller reads it: what a
    /// coupled controller ([`coupled`]) decides with. Never given for plain
    /// TCP, so a coupled controller there behaves as its single-path self.
    fn set_coupling(&mut self, _coupling: &coupled::Coupling<'_>) {}
    /// Whether the controller reads the connection's subflows: only then
    /// does the connection build the [`coupled::Coupling`] for it.
    fn is_coupled(&self) -> bool {
        false
    }
}

/// A boxed controller is a controller, so code generic over
/// `C: CongestionControl` also accepts the factory's `Box<dyn ...>`.
impl<C: CongestionControl + ?Sized> CongestionControl for Box<C> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn init(&mut self, state: &mut CcState, now: Instant) {
        (**self).init(state, now)
    }
    fn pkts_acked(&mut self, state: &mut CcState, sample: &AckSample, now: Instant) {
        (**self).pkts_acked(state, sample, now)
    }
    fn cong_avoid(&mut self, state: &mut CcState, ack: u32, acked: u32, now: Instant) {
        (**self).cong_avoid(state, ack, acked, now)
    }
    fn ssthresh(&mut self, state: &CcState) -> u32 {
        (**self).ssthresh(state)
    }
    fn set_state(&mut self, state: &mut CcState, new: CaState, now: Instant) {
        (**self).set_state(state, new, now)
    }
    fn cwnd_event(&mut self, state: &mut CcState, event: CaEvent, now: Instant) {
        (**self).cwnd_event(state, event, now)
    }
    fn reduce_window(&mut self, state: &mut CcState, cut: WindowCut) {
        (**self).reduce_window(state, cut)
    }
    fn data_sent(&mut self, now: Instant) {
        (**self).data_sent(now)
    }
    fn set_pacing(&mut self, rate_bytes_per_sec: u64, paced: bool) {
        (**self).set_pacing(rate_bytes_per_sec, paced)
    }
    fn counters(&self) -> CcCounters {
        (**self).counters()
    }
    fn slow_start_exit(&self) -> Option<SlowStartExit> {
        (**self).slow_start_exit()
    }
    fn set_coupling(&mut self, coupling: &coupled::Coupling<'_>) {
        (**self).set_coupling(coupling)
    }
    fn established(&mut self, state: &mut CcState, ctx: &AckContext, now: Instant) {
        (**self).established(state, ctx, now)
    }
    fn seed(&mut self, seed: u64) {
        (**self).seed(seed)
    }
    fn cong_control(
        &mut self,
        state: &mut CcState,
        ctx: &AckContext,
        rate: &mut rate::DeliveryRate,
        rs: &rate::RateSample,
        now: Instant,
    ) -> bool {
        (**self).cong_control(state, ctx, rate, rs, now)
    }
    fn observe_delivery(&mut self, delivery: &rate::DeliveryRate) {
        (**self).observe_delivery(delivery)
    }
    fn has_cong_control(&self) -> bool {
        (**self).has_cong_control()
    }
    fn pacing_rate(&self) -> Option<u64> {
        (**self).pacing_rate()
    }
    fn min_tso_segs(&self) -> Option<u32> {
        (**self).min_tso_segs()
    }
    fn sndbuf_expand(&self) -> u32 {
        (**self).sndbuf_expand()
    }
    fn bbr_info(&self) -> Option<BbrInfo> {
        (**self).bbr_info()
    }
    fn is_coupled(&self) -> bool {
        (**self).is_coupled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(cwnd: u32, ssthresh: u32, how: WindowCut) -> (u32, u32) {
        let mut st = CcState { cwnd, cwnd_cnt: 7, ssthresh, cwnd_clamp: u32::MAX / 2 };
        Reno.reduce_window(&mut st, how);
        assert_eq!(st.cwnd_cnt, 0);
        (st.cwnd, st.ssthresh)
    }

    #[test]
    fn a_window_cut_halves_cwnd_and_ssthresh_only_where_asked() {
        // In slow start (ssthresh infinite or above cwnd) only cwnd halves...
        assert_eq!(cut(40, u32::MAX, WindowCut::Halve), (20, u32::MAX));
        assert_eq!(cut(40, 100, WindowCut::Halve), (20, 100));
        // ...unless the cut takes ssthresh too, from the smaller of the two.
        assert_eq!(cut(40, u32::MAX, WindowCut::HalveWithSsthresh), (20, 20));
        assert_eq!(cut(40, 100, WindowCut::HalveWithSsthresh), (20, 20));
        // Past slow start both halve, with the floors of 1 and 2.
        assert_eq!(cut(40, 30, WindowCut::Halve), (20, 15));
        assert_eq!(cut(1, 1, WindowCut::Halve), (1, 2));
    }
}
