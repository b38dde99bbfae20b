//! One TCP connection (an MPTCP subflow, or a whole plain-TCP connection), sans-IO.
//!
//! # Contract
//!
//! In the style of quinn-proto's `Connection` and smoltcp's sockets, the
//! subflow never reads a clock, never sleeps and never touches a socket. Its
//! driver (the endpoint, in the simulator or the tokio runtime) calls, with
//! the current [`Instant`]:
//!
//! 1. [`Subflow::handle_segment`] for each arriving segment addressed to it;
//! 2. [`Subflow::handle_timeout`] once `now` has reached [`Subflow::poll_timeout`];
//! 3. [`Subflow::poll_transmit`] repeatedly until it returns `None`: each call
//!    writes at most one IP packet (a TSO super-segment when the buffer and
//!    [`TcpConfig::tso`] allow) and stamps it with its earliest departure
//!    time, which is never later than `now` plus
//!    [`TcpConfig::pacing_horizon`] (a segment whose EDT slot is further
//!    out is held back and its slot shows up in `poll_timeout`);
//! 4. [`Subflow::poll_event`] until `None`;
//! 5. [`Subflow::poll_timeout`] for the next instant to come back.
//!
//! Application calls ([`Subflow::send`], [`Subflow::recv`], [`Subflow::close`])
//! may happen at any point between those steps; afterwards the driver runs
//! steps 3–5 again.
//!
//! # What is implemented
//!
//! RFC 9293 state machine with simultaneous open and close and TIME_WAIT;
//! RFC 5961 RST/SYN/ACK hardening (challenge ACKs); RFC 7323 window scaling and
//! timestamps; RFC 2018 SACK generation and an RFC 6675-style scoreboard with
//! Linux's PRR (RFC 6937) for the window during recovery; NewReno when the
//! peer does not do SACK; RFC 6298 RTO with exponential backoff; zero-window
//! probes; delayed ACKs with Linux's quick-ack start; receive-buffer
//! autotuning (Linux DRS) and send-buffer autotuning; EDT pacing. Congestion
//! control is a [`CongestionControl`] trait object.
//!
//! # Layout
//!
//! This file holds the [`Subflow`] state and the application API; the rest
//! is split by concern, each file adding methods to `Subflow`:
//! `types` (states, events, the emission hook, reports), `input` (segment
//! acceptance and ACK processing), `recovery` (the `Scoreboard`
//! with SACK, RACK and PRR, and the congestion state machine), `timers`
//! (the `TimerTable` and what fires), `output` (segment
//! selection, options and window) and `autotune` (buffer autotuning, shared
//! with the MPTCP connection), `pmtu` (path MTU) and `icmp` (ICMP errors).

#![deny(missing_docs)]

pub(crate) mod autotune;
pub mod config;
mod coupling;
mod icmp;
mod input;
mod output;
mod pmtu;
mod recovery;
mod tail;
mod timers;
mod types;

pub use config::{BufferSize, TcpConfig};
pub use mptun_wire::icmp::Unreachable;
pub use tail::{Tail, TAIL_PARTS};
pub use types::{Event, SegmentHook, SegmentMeta, State, TcpInfo, Transmit, Verdict};

use autotune::{RcvRtt, RcvSpace};
use input::DelayedAck;
use output::wscale_for;
use recovery::{Acked, LossProbe, Scoreboard};
use timers::{Timer, TimerTable};

use crate::buf::{RecvBuf, SendBuf, Src};
use crate::counters::Counters;
use crate::seq::Seq;
use bytes::Bytes;
use mptun_cc::{AckSample, CaEvent, CaState, CcState, CongestionControl};
use mptun_cc::{Pacer, PacingRateConfig};
use mptun_cc::{RttConfig, RttEstimator};
use mptun_time::{Duration, Instant};
use mptun_wire::tcp::{OptionSummary, SackBlocks};
use mptun_wire::{TcpFlags, TcpHeader, TcpOption, TcpOptions};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// A TCP subflow.
pub struct Subflow {
    cfg: TcpConfig,
    state: State,
    local: SocketAddr,
    remote: SocketAddr,
    events: VecDeque<Event>,
    pub(crate) counters: Counters,

    // --- send sequence space ---
    iss: Seq,
    snd_una: Seq,
    snd_nxt: Seq,
    /// Peer's window, scaled, in bytes.
    snd_wnd: u32,
    max_snd_wnd: u32,
    snd_wl1: Seq,
    snd_wl2: Seq,
    snd_wscale: u8,
    /// Both SYNs carried Window Scale, so both shifts apply (RFC 7323 2.2).
    wscale_ok: bool,
    peer_mss: u16,
    /// Path MTU and its discovery (ICMP, probing).
    pmtu: pmtu::PathMtu,
    sack_ok: bool,
    ts_ok: bool,
    send_buf: SendBuf,
    send_limit: usize,
    fin_queued: bool,
    fin_sent: bool,
    /// Segments in flight with their SACK/loss marks, RACK and PRR.
    scoreboard: Scoreboard,
    dupacks: u32,
    /// Tail loss probe (RFC 8985 7).
    tlp: LossProbe,

    // --- congestion control ---
    cc: Box<dyn CongestionControl>,
    ccs: CcState,
    ca_state: CaState,
    high_seq: Seq,
    is_cwnd_limited: bool,
    max_packets_out: u32,
    cwnd_usage_seq: Seq,
    rtt: RttEstimator,
    pacer: Box<dyn Pacer>,
    data_segs_out: u64,

    // --- receive sequence space ---
    irs: Seq,
    rcv_nxt: Seq,
    rcv_wscale: u8,
    /// Right edge we last advertised (never moves left, RFC 7323 2.4).
    rcv_adv: Seq,
    /// The furthest right edge ever advertised (`rcv_adv` can move left
    /// under MPTCP, whose window is the connection's): what data is accepted up to.
    rcv_edge_max: Seq,
    /// The largest window ever advertised: under MPTCP the subflow's
    /// buffer is the connection's, and this is what it let the subflow offer.
    rcv_wnd_max: u32,
    /// The window advertised is the connection's (MPTCP: the segment hook
    /// gives it), not this subflow's free buffer space.
    rcv_wnd_shared: bool,
    /// With a shared window: the connection's window now, from its
    /// DATA_ACK point to the furthest edge any subflow announced (set by the
    /// connection before each segment). The peer's sender may use it on this
    /// subflow before this subflow has announced it (Linux shares `snd_wnd`
    /// across subflows, `MPTcpExtSndWndShared`).
    rcv_wnd_conn: u32,
    /// A duplicate received, to report once as the first SACK block of the
    /// next ACK (D-SACK, RFC 2883; Linux `tcp_dsack_set`): it tells the
    /// sender its retransmission was spurious, so that it undoes the
    /// window reduction and widens its reordering window (RACK's
    /// `reo_wnd_steps`) instead of taking every reordering for a loss.
    dsack: Option<(Seq, Seq)>,
    recv_buf: RecvBuf,
    recv_limit: usize,
    fin_received: Option<u64>,
    ts_recent: u32,
    /// When `ts_recent` was taken (Linux `ts_recent_stamp`): PAWS trusts it
    /// for 24 days at most (RFC 7323 5.5).
    ts_recent_stamp: Instant,
    ts_offset: u32,
    last_ack_sent: Seq,

    // --- ACK generation ---
    delack: DelayedAck,
    /// Send an ACK at the next `poll_transmit`.
    ack_now: bool,
    challenge_ack: bool,
    /// When we last answered an invalid segment (Linux `last_oow_ack_time`).
    last_oow_ack: Option<Instant>,
    /// The second the challenge-ACK budget belongs to, and what is left of
    /// it (Linux `tcp_challenge_timestamp`, `tcp_challenge_count`).
    challenge_second: Option<u64>,
    challenge_count: u32,
    pending_rst: Option<(Seq, Seq, TcpFlags)>,

    // --- receive autotuning (Linux rcvq_space) ---
    rcv_rtt: RcvRtt,
    rcv_space: RcvSpace,

    // --- timers ---
    timers: TimerTable,
    persist_backoff: u32,
    retries: u32,
    syn_tx_time: Instant,
    syn_retransmitted: bool,
    /// An ICMP error believed while synchronized (`icmp`).
    soft_error: Option<mptun_wire::icmp::Unreachable>,

    // --- statistics ---
    bytes_acked: u64,
    bytes_sent: u64,
    bytes_retrans: u64,
    /// `bytes_acked` at the last two losses (`coupling`).
    loss_marks: [u64; 2],
    /// Linux `lsndtime`: the last data segment sent.
    last_data_send: Option<Instant>,
    /// The last ACK of new data.
    last_ack_recv: Option<Instant>,
    scratch: Vec<u8>,
}

impl core::fmt::Debug for Subflow {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Subflow")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("state", &self.state)
            .field("snd_una", &self.snd_una)
            .field("snd_nxt", &self.snd_nxt)
            .field("rcv_nxt", &self.rcv_nxt)
            .field("cwnd", &self.ccs.cwnd)
            .finish()
    }
}

/// Largest window scale RFC 7323 allows (Linux `TCP_MAX_WSCALE`).
const TCP_MAX_WSCALE: u8 = 14;
/// Segments ACKed at once after the handshake, before delayed ACKs start
/// (Linux `TCP_MAX_QUICKACKS`).
const TCP_MAX_QUICKACKS: u32 = 16;
/// MSS assumed when the peer sends none (RFC 9293 3.7.1, Linux `TCP_MSS_DEFAULT`).
const TCP_MSS_DEFAULT: u16 = 536;
/// Smallest MSS we use, whatever the peer announces: a tiny MSS only
/// multiplies per-segment cost (Linux has `TCP_MIN_MSS` = 88 for the same).
const MIN_MSS: u16 = 64;
/// Bytes of NOP NOP TIMESTAMP on every segment once timestamps are on
/// (Linux `TCPOLEN_TSTAMP_ALIGNED`).
const TCPOLEN_TSTAMP_ALIGNED: usize = 12;
/// How long an idle connection's `ts_recent` is trusted by PAWS (RFC 7323
/// 5.5, Linux `TCP_PAWS_24DAYS`).
const TCP_PAWS_24DAYS: Duration = Duration::from_secs(60 * 60 * 24 * 24);
/// Timestamp ticks a segment may lag `ts_recent` and still pass PAWS
/// (Linux `TCP_PAWS_WINDOW`).
const TCP_PAWS_WINDOW: i32 = 1;
/// Largest value of the 16-bit window field; a scaled window is this
/// shifted by the window scale.
const MAX_WINDOW_FIELD: u32 = 65535;
/// Room for options in a TCP header (Linux `MAX_TCP_OPTION_SPACE`).
const MAX_TCP_OPTION_SPACE: usize = 40;
/// Most SACK blocks we send (Linux `TCP_NUM_SACKS`).
const TCP_NUM_SACKS: usize = 4;
/// NOP NOP kind length ahead of the SACK blocks (Linux `TCPOLEN_SACK_BASE_ALIGNED`).
const TCPOLEN_SACK_BASE_ALIGNED: usize = 4;
/// Bytes per SACK block (Linux `TCPOLEN_SACK_PERBLOCK`).
const TCPOLEN_SACK_PERBLOCK: usize = 8;
/// Linux `sk_pacing_shift` for TCP: a TSO burst is about 1/2^10 s (1 ms)
/// of the pacing rate.
const TCP_PACING_SHIFT: u32 = 10;
/// Linux `net.ipv4.tcp_tso_rtt_log`: paths with a minimum RTT under 2^9 µs
/// get full-size super-segments on top.
const TCP_TSO_RTT_LOG: u32 = 9;
/// Linux `net.ipv4.tcp_min_tso_segs`.
const TCP_MIN_TSO_SEGS: u64 = 2;
/// IPv4 plus TCP header without options.
const IPV4_TCP_HEADER_LEN: u32 = 40;
/// IPv6 plus TCP header without options.
const IPV6_TCP_HEADER_LEN: u32 = 60;

/// What the IP and TCP headers add to a segment's payload on the wire for
/// this address family (the pacer sizes its quantum in whole packets).
fn ip_tcp_header_len(addr: &SocketAddr) -> u32 {
    if addr.is_ipv4() {
        IPV4_TCP_HEADER_LEN
    } else {
        IPV6_TCP_HEADER_LEN
    }
}

impl Subflow {
    fn new(
        now: Instant,
        cfg: TcpConfig,
        local: SocketAddr,
        remote: SocketAddr,
        iss: u32,
        ts_offset: u32,
        state: State,
    ) -> Self {
        let mut ccs = CcState::new(cfg.initial_cwnd);
        let mut cc = match &cfg.controller {
            Some(f) => f.build(),
            None => mptun_cc::new_controller_with(cfg.congestion_control, cfg.cubic),
        };
        cc.init(&mut ccs, now);
        cc.seed(u64::from(iss) << 32 | u64::from(ts_offset));
        // A controller that sets its own pacing rate needs pacing (Linux
        // SK_PACING_NEEDED: TCP paces itself when no qdisc does).
        let pacer_kind = match cfg.pacer {
            mptun_cc::PacerKind::None if cc.pacing_rate().is_some() => mptun_cc::PacerKind::Edt,
            kind => kind,
        };
        let pacer = mptun_cc::new_pacer(pacer_kind, cfg.mss as u32 + ip_tcp_header_len(&local));
        let rcv_wscale = if cfg.window_scaling { wscale_for(cfg.recv_buffer.max()) } else { 0 };
        let iss = Seq(iss);
        let recv_limit = cfg.recv_buffer.initial();
        Subflow {
            state,
            local,
            remote,
            events: VecDeque::new(),
            counters: Counters::default(),
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: Seq(0),
            snd_wl2: iss,
            snd_wscale: 0,
            wscale_ok: false,
            peer_mss: TCP_MSS_DEFAULT,
            pmtu: pmtu::PathMtu::default(),
            sack_ok: false,
            ts_ok: false,
            send_buf: SendBuf::new(iss + 1),
            send_limit: cfg.send_buffer.initial(),
            fin_queued: false,
            fin_sent: false,
            scoreboard: Scoreboard::default(),
            dupacks: 0,
            tlp: LossProbe::default(),
            cc,
            ccs,
            ca_state: CaState::Open,
            high_seq: iss,
            is_cwnd_limited: false,
            max_packets_out: 0,
            cwnd_usage_seq: iss,
            rtt: RttEstimator::new(RttConfig {
                initial_rto: cfg.rto_initial,
                min_rto: cfg.rto_min,
                max_rto: cfg.rto_max,
                ..RttConfig::default()
            }),
            pacer,
            data_segs_out: 0,
            irs: Seq(0),
            rcv_nxt: Seq(0),
            rcv_wscale,
            rcv_adv: Seq(0),
            rcv_edge_max: Seq(0),
            rcv_wnd_max: 0,
            rcv_wnd_shared: false,
            rcv_wnd_conn: 0,
            dsack: None,
            recv_buf: RecvBuf::default(),
            recv_limit,
            fin_received: None,
            ts_recent: 0,
            ts_recent_stamp: now,
            ts_offset,
            last_ack_sent: Seq(0),
            delack: DelayedAck::default(),
            ack_now: false,
            challenge_ack: false,
            last_oow_ack: None,
            challenge_second: None,
            challenge_count: 0,
            pending_rst: None,
            rcv_rtt: RcvRtt::default(),
            // Linux tcp_init_buffer_space: min(rcv_wnd, TCP_INIT_CWND × advmss).
            rcv_space: RcvSpace::new(
                now,
                RcvSpace::initial_space((cfg.mss as usize).saturating_sub(TCPOLEN_TSTAMP_ALIGNED), recv_limit),
            ),
            timers: TimerTable::default(),
            persist_backoff: 0,
            retries: 0,
            syn_tx_time: now,
            syn_retransmitted: false,
            soft_error: None,
            bytes_acked: 0,
            bytes_sent: 0,
            bytes_retrans: 0,
            loss_marks: [0; 2],
            last_data_send: None,
            last_ack_recv: None,
            scratch: Vec::new(),
            cfg,
        }
    }

    /// Active open: the subflow will send a SYN on the next `poll_transmit`.
    ///
    /// `iss` and `ts_offset` come from the endpoint's random source (RFC 9293
    /// 3.4.1 wants them unpredictable; the simulator seeds them).
    pub fn connect(
        now: Instant,
        cfg: TcpConfig,
        local: SocketAddr,
        remote: SocketAddr,
        iss: u32,
        ts_offset: u32,
    ) -> Self {
        let mut s = Subflow::new(now, cfg, local, remote, iss, ts_offset, State::SynSent);
        s.snd_nxt = s.iss; // the SYN is sent by poll_transmit
        s.counters.tcp_active_opens += 1;
        s.timers.set(Timer::Rto, now);
        s
    }

    /// Passive open from a received SYN: the subflow answers with a SYN-ACK.
    #[allow(clippy::too_many_arguments)]
    pub fn accept(
        now: Instant,
        cfg: TcpConfig,
        local: SocketAddr,
        remote: SocketAddr,
        syn: &TcpHeader,
        opts: &OptionSummary,
        iss: u32,
        ts_offset: u32,
    ) -> Self {
        let mut s = Subflow::new(now, cfg, local, remote, iss, ts_offset, State::SynReceived);
        s.counters.tcp_passive_opens += 1;
        s.counters.tcp_in_segs += 1;
        s.take_syn_options(now, syn, opts);
        s.timers.set(Timer::Rto, now);
        s
    }

    // ------------------------------------------------------------------
    // Accessors
    // ------------------------------------------------------------------

    /// The RFC 9293 state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Our address and port.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The peer's address and port.
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// This subflow's share of the `netstat -s` counters; the endpoint sums them.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Controller counters (HyStart) and why slow start ended, if it did.
    pub fn cc(&self) -> &dyn CongestionControl {
        &*self.cc
    }

    /// Shrinks the window on the request of a layer above (the MPTCP
    /// scheduler), through the controller's
    /// [`CongestionControl::reduce_window`] rather than by writing its window
    /// state behind its back. The connection calls it from the subflow's own
    /// push path, as Linux applies such a cut under the subflow socket lock.
    pub(crate) fn reduce_window(&mut self, cut: mptun_cc::WindowCut) {
        self.cc.reduce_window(&mut self.ccs, cut);
    }

    /// `snd_una`.
    pub fn snd_una(&self) -> Seq {
        self.snd_una
    }

    /// `snd_nxt`: where the next new segment starts.
    pub fn snd_nxt(&self) -> Seq {
        self.snd_nxt
    }

    /// Sequence number the next written byte will get.
    pub fn write_seq(&self) -> Seq {
        self.send_buf.end()
    }

    /// Peer's window-scale shift (to read the window of a segment).
    pub fn snd_wscale(&self) -> u8 {
        self.snd_wscale
    }

    /// Our initial sequence number.
    pub fn iss(&self) -> Seq {
        self.iss
    }

    /// The peer's initial sequence number.
    pub fn irs(&self) -> Seq {
        self.irs
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether the connection is fully closed and may be reaped.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Payload bytes a data segment can carry now.
    pub fn mss(&self, hook_space: usize) -> u32 {
        let opt = if self.ts_ok { TCPOLEN_TSTAMP_ALIGNED } else { 0 } + hook_space;
        (self.mss_cap() as usize).saturating_sub(opt).max(MIN_MSS as usize) as u32
    }

    /// A `TCP_INFO`-like snapshot for reports and traces.
    pub fn info(&self) -> TcpInfo {
        TcpInfo {
            state: self.state,
            ca_state: self.ca_state,
            cwnd: self.ccs.cwnd,
            ssthresh: self.ccs.ssthresh,
            mss: self.mss(0),
            pmtu: self.path_mtu().unwrap_or(0),
            srtt: self.rtt.smoothed().unwrap_or_default(),
            rttvar: self.rtt.var(),
            min_rtt: self.rtt.min().unwrap_or_default(),
            rto: self.rtt.rto(),
            pacing_rate: self.pacer.rate(),
            packets_out: self.scoreboard.len(),
            sacked_out: self.scoreboard.sacked_out(),
            lost_out: self.scoreboard.lost_out(),
            retrans_out: self.scoreboard.retrans_out(),
            bytes_acked: self.bytes_acked,
            bytes_received: self.recv_buf.next(),
            bytes_sent: self.bytes_sent,
            bytes_retrans: self.bytes_retrans,
            snd_wnd: self.snd_wnd,
            rcv_wnd: self.rcv_wnd_now(),
            send_buffer: self.send_limit,
            recv_buffer: self.recv_limit,
            cwnd_limited: self.is_cwnd_limited(),
            slow_start_exit: self.cc.slow_start_exit(),
            last_data_send: self.last_data_send,
            last_ack_recv: self.last_ack_recv,
            delivery_rate: self.scoreboard.rate().rate(self.mss(0)).0,
            delivery_rate_app_limited: self.scoreboard.rate().rate(self.mss(0)).1,
            delivered: self.scoreboard.rate().delivered(),
            lost: self.scoreboard.rate().lost(),
            bbr: self.cc.bbr_info(),
            cc: self.cc.name(),
        }
    }

    /// What a rate-based controller reads of this subflow on an ACK.
    pub(super) fn ack_context(&self, now: Instant) -> mptun_cc::AckContext {
        mptun_cc::AckContext {
            mss: self.mss(0),
            in_flight: self.in_flight(),
            srtt: self.rtt.smoothed(),
            min_rtt: self.rtt.min(),
            ca_state: self.ca_state,
            next_departure: self.pacer.departure(now),
            max_pacing_rate: self.cfg.max_pacing_rate.unwrap_or(u64::MAX),
            delivery: *self.scoreboard.rate(),
        }
    }

    /// The handshake completed: the controller's `init` as Linux calls it
    /// (`tcp_init_transfer`, the handshake's RTT known), then the pacing rate.
    pub(super) fn on_established_cc(&mut self, now: Instant) {
        let ctx = self.ack_context(now);
        self.cc.established(&mut self.ccs, &ctx, now);
        self.update_pacing_rate();
    }

    /// Linux `tcp_rate_check_app_limited`, called where the application
    /// writes ([`Subflow::send`], a plain TCP connection's writes): little
    /// left to send and room in the window means the delivery-rate samples
    /// to come describe the application, not the path. Not where the MPTCP
    /// layer hands a subflow data (`send_bytes`): its scheduler hands data
    /// exactly when the window has room, and Linux's MPTCP never marks a
    /// subflow app-limited either.
    fn check_app_limited(&mut self) {
        let (unsent, mss, in_flight, cwnd) = (self.unsent_bytes() as u64, self.mss(0), self.in_flight(), self.ccs.cwnd);
        let (lost_out, retrans_out) = (self.scoreboard.lost_out(), self.scoreboard.retrans_out());
        self.scoreboard.rate_mut().check_app_limited(unsent, mss, in_flight, cwnd, lost_out, retrans_out);
    }

    /// Congestion-avoidance state (the scheduler avoids subflows in recovery).
    pub fn ca_state(&self) -> CaState {
        self.ca_state
    }

    /// Turns Nagle's algorithm on or off (`TCP_NODELAY` is its negation).
    pub fn set_nagle(&mut self, on: bool) {
        self.cfg.nagle = on;
    }

    /// Whether Nagle's algorithm is on.
    pub fn nagle(&self) -> bool {
        self.cfg.nagle
    }

    /// The connection-level window open to the peer now (bytes beyond the
    /// DATA_ACK point up to the furthest edge announced on any subflow):
    /// under a shared window (MPTCP) the peer may send that much on this
    /// subflow beyond its `rcv_nxt`, even past the edge this subflow itself
    /// last announced, and the data is accepted (RFC 8684 3.3.4: the window
    /// is the connection's). Without a shared window it has no effect.
    pub(crate) fn set_conn_rcv_window(&mut self, window: u64) {
        // Sequence comparisons hold within 2^31; a window of 2^30 is the
        // most TCP can announce (RFC 7323 2.3).
        self.rcv_wnd_conn = window.min(1 << 30) as u32;
    }

    /// Sends an ACK at the next `poll_transmit` (a window update, or a
    /// segment that carries a connection-level option).
    pub fn request_ack(&mut self) {
        if self.state.is_synchronized() {
            self.ack_now = true;
        }
    }

    /// Retransmission timeouts in a row without progress (Linux `icsk_retransmits`).
    pub fn rto_streak(&self) -> u32 {
        self.retries
    }

    /// Packets in flight (Linux `tcp_packets_in_flight`).
    pub fn packets_in_flight(&self) -> u32 {
        self.in_flight()
    }

    /// Whether the last window was limited by cwnd (Linux `tcp_is_cwnd_limited`).
    pub fn cwnd_limited(&self) -> bool {
        self.is_cwnd_limited()
    }

    /// Current pacing rate in bytes per second.
    pub fn pacing_rate(&self) -> u64 {
        self.pacer.rate()
    }

    /// The receiver-side RTT estimate (Linux `rcv_rtt_est`, from timestamp
    /// echoes), which a pure receiver has even though it never samples `srtt`.
    pub fn rcv_rtt(&self) -> Option<Duration> {
        self.rcv_rtt.get()
    }

    /// Smoothed RTT, if measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.smoothed()
    }

    // ------------------------------------------------------------------
    // Application interface
    // ------------------------------------------------------------------

    /// Room left in the send buffer.
    pub fn send_space(&self) -> usize {
        if self.fin_queued
            || !matches!(self.state, State::SynSent | State::SynReceived | State::Established | State::CloseWait)
        {
            return 0;
        }
        self.send_limit.saturating_sub(self.send_buf.len())
    }

    /// Queues as much of `data` as the send buffer takes; returns how much.
    pub fn send(&mut self, data: &[u8]) -> usize {
        self.write_with(data.len(), |n| Bytes::copy_from_slice(&data[..n]))
    }

    /// Queues the first `n` bytes (at most `len`, as the send buffer has
    /// room) of an application write, which `take(n)` hands over: a copy
    /// for [`Subflow::send`], a slice for a zero-copy writer.
    pub(crate) fn write_with(&mut self, len: usize, take: impl FnOnce(usize) -> Bytes) -> usize {
        self.check_app_limited();
        let n = len.min(self.send_space());
        if n > 0 {
            self.send_buf.push(take(n));
        }
        n
    }

    /// Queues a whole `Bytes` if the send buffer has room for all of it
    /// (zero-copy path for the MPTCP layer and bulk senders).
    pub fn send_bytes(&mut self, data: Bytes) -> Result<(), Bytes> {
        if data.len() > self.send_space() {
            return Err(data);
        }
        self.send_buf.push(data);
        Ok(())
    }

    /// As [`Subflow::send_bytes`], but `data` continues the previous write
    /// (the MPTCP layer grew that write's mapping): segments, and so TSO
    /// super-segments, may span both.
    pub fn send_bytes_joined(&mut self, data: Bytes) -> Result<(), Bytes> {
        if data.len() > self.send_space() {
            return Err(data);
        }
        self.send_buf.push_joined(data);
        Ok(())
    }

    /// Bytes written but not yet acknowledged.
    pub fn send_queued(&self) -> usize {
        self.send_buf.len()
    }

    /// Bytes written but not yet sent once.
    pub fn unsent(&self) -> usize {
        self.unsent_bytes() as usize
    }

    fn unsent_bytes(&self) -> u32 {
        let end = self.send_buf.end();
        if self.snd_nxt.lt(end) {
            end - self.snd_nxt
        } else {
            0
        }
    }

    /// Memory the receive queues hold, charged per chunk like Linux's
    /// `truesize` ([`crate::buf`]'s `mem_charged`).
    pub fn recv_mem(&self) -> usize {
        self.recv_buf.mem_charged()
    }

    /// The window a SYN or SYN-ACK of ours offers (unscaled), before any
    /// other segment: what the peer may send first.
    pub(crate) fn syn_window(&self) -> u64 {
        self.recv_limit.min(MAX_WINDOW_FIELD as usize) as u64
    }

    /// In-order bytes ready for the application.
    pub fn recv_ready(&self) -> usize {
        self.recv_buf.ready_len()
    }

    /// Copies received in-order bytes into `out`.
    pub fn recv(&mut self, now: Instant, out: &mut [u8]) -> usize {
        let n = self.recv_buf.read(out);
        self.after_read(now, n);
        n
    }

    /// Takes the next in-order chunk (at most `max` bytes) without copying.
    pub fn recv_chunk(&mut self, now: Instant, max: usize) -> Option<Bytes> {
        let b = self.recv_buf.read_chunk(max)?;
        self.after_read(now, b.len());
        Some(b)
    }

    /// Takes the next received piece (at most `max` bytes) as it arrived,
    /// never copying it: the application's zero-copy read.
    pub fn recv_piece(&mut self, now: Instant, max: usize) -> Option<Bytes> {
        let b = self.recv_buf.read_piece(max)?;
        self.after_read(now, b.len());
        Some(b)
    }

    /// The peer has closed its direction and everything before its FIN was
    /// received and read. A FIN that came beyond a hole is remembered
    /// (`fin_received`) but ends nothing until the hole is filled.
    pub fn recv_finished(&self) -> bool {
        self.fin_received.is_some_and(|fin| self.recv_buf.next() == fin) && self.recv_buf.ready_len() == 0
    }

    /// Stream offset (bytes since the SYN) of the next byte `recv` returns.
    pub fn recv_offset(&self) -> u64 {
        self.recv_buf.next() - self.recv_buf.ready_len() as u64
    }

    /// Orderly close of our direction: a FIN follows the queued data.
    pub fn close(&mut self) {
        match self.state {
            State::SynSent => self.enter_closed(None),
            State::SynReceived | State::Established => {
                self.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// A RST is waiting to go out.
    pub fn rst_pending(&self) -> bool {
        self.pending_rst.is_some()
    }

    /// Abortive close: a RST goes out and the subflow is closed at once.
    pub fn abort(&mut self) {
        if self.state.is_synchronized() || self.state == State::SynReceived {
            self.pending_rst = Some((self.snd_nxt, self.rcv_nxt, TcpFlags::RST | TcpFlags::ACK));
        }
        self.enter_closed(None);
    }

    fn after_read(&mut self, now: Instant, n: usize) {
        if n == 0 {
            return;
        }
        self.rcv_space.on_read(n);
        self.rcv_space_adjust(now);
        // Linux tcp_cleanup_rbuf: announce a window that at least doubled.
        // The window still open from what we advertised; under MPTCP the peer
        // may legitimately be past the subflow's own edge (the connection's
        // window is what goes on the wire), so this saturates.
        let adv = self.rcv_wnd_now();
        let new = self.free_window() as u32;
        if self.state.can_receive() && new >= 2 * adv.max(1) && new >= self.mss(0) {
            self.ack_now = true;
        }
    }

    /// Linux DRS (`tcp_rcv_space_adjust`): once per receiver-side RTT, size
    /// the receive buffer so it holds twice what the application drained.
    fn rcv_space_adjust(&mut self, now: Instant) {
        if !self.cfg.recv_buffer.is_auto() {
            return;
        }
        let Some(rtt) = self.rcv_rtt.get() else { return };
        let mss = self.mss(0) as usize;
        if let Some(rcvwin) = self.rcv_space.adjust(now, rtt, mss) {
            let new = rcvwin.min(self.cfg.recv_buffer.max());
            if new > self.recv_limit {
                self.recv_limit = new;
                self.counters.tcp_ext_tcp_rcv_space_grow += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
