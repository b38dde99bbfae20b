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
//!    writes at most one IP packet and stamps it with its earliest departure
//!    time, which is never later than `now` (a segment whose EDT slot is in the
//!    future is held back and its slot shows up in `poll_timeout`);
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

pub mod config;
mod penalty;
pub(crate) mod recv_buf;
pub(crate) mod send_buf;

pub use config::{BufferSize, TcpConfig};

use crate::counters::Counters;
use crate::seq::Seq;
use bytes::Bytes;
use mptun_cc::{AckSample, CaEvent, CaState, CcState, CongestionControl};
use mptun_cc::{Pacer, PacingRateConfig};
use mptun_cc::{RttConfig, RttEstimator};
use mptun_time::{Duration, Instant};
use mptun_wire::tcp::{OptionSummary, SackBlocks};
use mptun_wire::{TcpFlags, TcpHeader, TcpOption, TcpOptions};
use recv_buf::RecvBuf;
use send_buf::SendBuf;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// RFC 9293 connection states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    Closed,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl State {
    /// Both SYNs have been seen.
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::Closed | State::SynSent | State::SynReceived)
    }
    /// We may still receive data.
    fn can_receive(self) -> bool {
        matches!(self, State::Established | State::FinWait1 | State::FinWait2)
    }
}

/// Something the application or the layer above should react to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// The peer sent FIN: no more data will arrive.
    PeerFin,
    /// The connection was reset by the peer.
    Reset,
    /// Retransmissions gave up (RTO streak past `max_retries`/`syn_retries`).
    TimedOut,
    /// The connection reached CLOSED after an orderly close.
    Closed,
}

/// Describes a segment being emitted, for [`SegmentHook`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentMeta {
    pub seq: Seq,
    /// Payload bytes.
    pub len: u32,
    pub flags: TcpFlags,
    pub retransmit: bool,
}

/// Lets the layer above (MPTCP) add options to, and override the advertised
/// window of, every segment this subflow emits, without the subflow knowing
/// what MPTCP is.
pub trait SegmentHook {
    /// Option bytes (a multiple of 4) the hook adds to data segments
    /// (`data`) or to pure ACKs, so the subflow leaves room for them when it
    /// cuts segments and picks SACK blocks.
    fn option_space(&self, _data: bool) -> usize {
        0
    }
    /// Called for each emitted segment; may push options and return a
    /// receive window (bytes, unscaled) to advertise instead of the subflow's.
    fn on_emit(&mut self, _seg: &SegmentMeta, _opts: &mut TcpOptions) -> Option<u64> {
        None
    }
}

/// The no-op hook of plain TCP.
impl SegmentHook for () {}

/// A packet written by [`Subflow::poll_transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written to the output buffer (a whole IP packet).
    pub len: usize,
    /// Earliest departure time (EDT); `<= now` when returned.
    pub departure: Instant,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// A snapshot like Linux's `TCP_INFO`, for reports and traces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpInfo {
    pub state: State,
    pub ca_state: CaState,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub mss: u32,
    pub srtt: Duration,
    pub rttvar: Duration,
    pub min_rtt: Duration,
    pub rto: Duration,
    pub pacing_rate: u64,
    pub packets_out: u32,
    pub sacked_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub send_buffer: usize,
    pub recv_buffer: usize,
    pub cwnd_limited: bool,
}

/// One transmitted, not yet cumulatively acknowledged segment.
#[derive(Clone, Copy, Debug)]
struct Sent {
    seq: Seq,
    /// Payload bytes.
    len: u32,
    fin: bool,
    tx_time: Instant,
    /// Retransmitted at least once (Karn: no RTT sample).
    ever_retrans: bool,
    sacked: bool,
    lost: bool,
    /// A retransmission of this segment is in flight.
    retrans: bool,
}

impl Sent {
    fn end(&self) -> Seq {
        self.seq + self.len + self.fin as u32
    }
}

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
    peer_mss: u16,
    sack_ok: bool,
    ts_ok: bool,
    send_buf: SendBuf,
    send_limit: usize,
    fin_queued: bool,
    fin_sent: bool,
    scoreboard: VecDeque<Sent>,
    sacked_out: u32,
    lost_out: u32,
    retrans_out: u32,
    dupacks: u32,
    /// RACK (RFC 8985): send time of the most recently sent segment known
    /// delivered, and its RTT; lets a lost retransmission be detected
    /// without waiting for the RTO.
    rack_xmit: Option<(Instant, Duration)>,
    /// Tail loss probe (RFC 8985 7): when it fires, and the `snd_nxt` of
    /// the probe in flight.
    tlp_at: Option<Instant>,
    tlp_high_seq: Option<Seq>,
    tlp_probe_due: bool,
    /// RACK reorder timer: re-run loss detection then.
    rack_timer_at: Option<Instant>,
    /// RACK reordering-window multiplier and recoveries since it last grew.
    reo_wnd_mult: u32,
    reo_wnd_recoveries: u32,

    // --- congestion control ---
    cc: Box<dyn CongestionControl>,
    ccs: CcState,
    ca_state: CaState,
    high_seq: Seq,
    prior_cwnd: u32,
    prr_delivered: u32,
    prr_out: u32,
    is_cwnd_limited: bool,
    max_packets_out: u32,
    cwnd_usage_seq: Seq,
    rtt: RttEstimator,
    pacer: Box<dyn Pacer>,
    data_segs_out: u64,
    /// EDT slot of a segment held back by the pacer at the last poll.
    paced_until: Option<Instant>,

    // --- receive sequence space ---
    irs: Seq,
    rcv_nxt: Seq,
    rcv_wscale: u8,
    /// Right edge we last advertised (never moves left, RFC 7323 2.4).
    rcv_adv: Seq,
    recv_buf: RecvBuf,
    recv_limit: usize,
    fin_received: Option<u64>,
    ts_recent: u32,
    ts_offset: u32,
    last_ack_sent: Seq,

    // --- ACK generation ---
    ack_pending: bool,
    ack_now: bool,
    unacked_bytes: u32,
    quickacks: u32,
    challenge_ack: bool,
    pending_rst: Option<(Seq, Seq, TcpFlags)>,

    // --- receive autotuning (Linux rcvq_space) ---
    rcv_rtt_us: u32,
    rcvq_space: usize,
    rcvq_copied_at: u64,
    rcvq_time: Instant,
    app_read: u64,

    // --- timers ---
    rto_at: Option<Instant>,
    delack_at: Option<Instant>,
    persist_at: Option<Instant>,
    persist_backoff: u32,
    time_wait_at: Option<Instant>,
    retries: u32,
    syn_tx_time: Instant,
    syn_retransmitted: bool,

    // --- statistics ---
    bytes_acked: u64,
    bytes_sent: u64,
    bytes_retrans: u64,
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

/// Largest window scale RFC 7323 allows.
const MAX_WSCALE: u8 = 14;
/// Linux `TCP_MAX_QUICKACKS`.
const MAX_QUICKACKS: u32 = 16;
/// MSS assumed when the peer sends none (RFC 9293 3.7.1).
const DEFAULT_PEER_MSS: u16 = 536;
/// Bytes of NOP NOP TIMESTAMP on every segment once timestamps are on.
const TS_SPACE: usize = 12;

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
        let mut cc = mptun_cc::new_controller_with(cfg.congestion_control, cfg.cubic);
        cc.init(&mut ccs, now);
        let pacer = mptun_cc::new_pacer(cfg.pacer, cfg.mss as u32 + 40);
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
            peer_mss: DEFAULT_PEER_MSS,
            sack_ok: false,
            ts_ok: false,
            send_buf: SendBuf::new(iss + 1),
            send_limit: cfg.send_buffer.initial(),
            fin_queued: false,
            fin_sent: false,
            scoreboard: VecDeque::new(),
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            dupacks: 0,
            rack_xmit: None,
            tlp_at: None,
            tlp_high_seq: None,
            tlp_probe_due: false,
            rack_timer_at: None,
            reo_wnd_mult: 1,
            reo_wnd_recoveries: 0,
            cc,
            ccs,
            ca_state: CaState::Open,
            high_seq: iss,
            prior_cwnd: 0,
            prr_delivered: 0,
            prr_out: 0,
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
            paced_until: None,
            irs: Seq(0),
            rcv_nxt: Seq(0),
            rcv_wscale,
            rcv_adv: Seq(0),
            recv_buf: RecvBuf::default(),
            recv_limit,
            fin_received: None,
            ts_recent: 0,
            ts_offset,
            last_ack_sent: Seq(0),
            ack_pending: false,
            ack_now: false,
            unacked_bytes: 0,
            quickacks: MAX_QUICKACKS,
            challenge_ack: false,
            pending_rst: None,
            rcv_rtt_us: 0,
            // Linux tcp_init_buffer_space: min(rcv_wnd, TCP_INIT_CWND × advmss).
            rcvq_space: (10 * (cfg.mss as usize).saturating_sub(TS_SPACE)).min(recv_limit),
            rcvq_copied_at: 0,
            rcvq_time: now,
            app_read: 0,
            rto_at: None,
            delack_at: None,
            persist_at: None,
            persist_backoff: 0,
            time_wait_at: None,
            retries: 0,
            syn_tx_time: now,
            syn_retransmitted: false,
            bytes_acked: 0,
            bytes_sent: 0,
            bytes_retrans: 0,
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
        s.rto_at = Some(now);
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
        s.take_syn_options(syn, opts);
        s.rto_at = Some(now);
        s
    }

    fn take_syn_options(&mut self, syn: &TcpHeader, opts: &OptionSummary) {
        self.irs = Seq(syn.seq);
        self.rcv_nxt = self.irs + 1;
        self.rcv_adv = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.peer_mss = opts.mss.unwrap_or(DEFAULT_PEER_MSS).max(64);
        match opts.window_scale {
            Some(ws) if self.cfg.window_scaling => self.snd_wscale = ws.min(MAX_WSCALE),
            _ => {
                self.snd_wscale = 0;
                self.rcv_wscale = 0;
            }
        }
        self.sack_ok = self.cfg.sack && opts.sack_permitted;
        self.ts_ok = self.cfg.timestamps && opts.timestamp.is_some();
        if let Some((tsval, _)) = opts.timestamp {
            self.ts_recent = tsval;
        }
        // The window in a SYN is never scaled.
        self.snd_wnd = syn.window as u32;
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = Seq(syn.seq);
        self.snd_wl2 = Seq(syn.ack);
    }

    // ------------------------------------------------------------------
    // Accessors
    // ------------------------------------------------------------------

    pub fn state(&self) -> State {
        self.state
    }
    pub fn local(&self) -> SocketAddr {
        self.local
    }
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }
    pub fn counters(&self) -> Counters {
        self.counters
    }
    /// Controller counters (HyStart) and why slow start ended, if it did.
    pub fn cc(&self) -> &dyn CongestionControl {
        &*self.cc
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
        let opt = if self.ts_ok { TS_SPACE } else { 0 } + hook_space;
        (self.peer_mss.min(self.cfg.mss) as usize).saturating_sub(opt).max(64) as u32
    }

    pub fn info(&self) -> TcpInfo {
        TcpInfo {
            state: self.state,
            ca_state: self.ca_state,
            cwnd: self.ccs.cwnd,
            ssthresh: self.ccs.ssthresh,
            mss: self.mss(0),
            srtt: self.rtt.smoothed().unwrap_or_default(),
            rttvar: self.rtt.var(),
            min_rtt: self.rtt.min().unwrap_or_default(),
            rto: self.rtt.rto(),
            pacing_rate: self.pacer.rate(),
            packets_out: self.scoreboard.len() as u32,
            sacked_out: self.sacked_out,
            lost_out: self.lost_out,
            retrans_out: self.retrans_out,
            bytes_acked: self.bytes_acked,
            bytes_received: self.recv_buf.next(),
            bytes_sent: self.bytes_sent,
            bytes_retrans: self.bytes_retrans,
            snd_wnd: self.snd_wnd,
            rcv_wnd: self.rcv_adv - self.rcv_nxt,
            send_buffer: self.send_limit,
            recv_buffer: self.recv_limit,
            cwnd_limited: self.is_cwnd_limited(),
        }
    }

    /// Mutable window state, for a scheduler that penalises this subflow
    /// (the MPTCP layer applies it from this subflow's own push path).
    pub fn cc_state_mut(&mut self) -> &mut CcState {
        &mut self.ccs
    }

    pub fn ca_state(&self) -> CaState {
        self.ca_state
    }

    /// Turns Nagle's algorithm on or off (`TCP_NODELAY` is its negation).
    pub fn set_nagle(&mut self, on: bool) {
        self.cfg.nagle = on;
    }

    pub fn nagle(&self) -> bool {
        self.cfg.nagle
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
        (self.rcv_rtt_us > 0).then(|| Duration::from_micros(self.rcv_rtt_us as u64))
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
        let n = data.len().min(self.send_space());
        if n > 0 {
            self.send_buf.push(Bytes::copy_from_slice(&data[..n]));
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

    /// The peer has closed its direction and everything before its FIN was read.
    pub fn recv_finished(&self) -> bool {
        self.fin_received.is_some() && self.recv_buf.ready_len() == 0
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
        self.app_read += n as u64;
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
        if !self.cfg.recv_buffer.is_auto() || self.rcv_rtt_us == 0 {
            return;
        }
        if now - self.rcvq_time < Duration::from_micros(self.rcv_rtt_us as u64) {
            return;
        }
        let copied = (self.app_read - self.rcvq_copied_at) as usize;
        if copied > self.rcvq_space {
            let mss = self.mss(0) as usize;
            let mut rcvwin = 2 * copied + 16 * mss;
            let grow = rcvwin * (copied - self.rcvq_space) / self.rcvq_space.max(1);
            rcvwin += 2 * grow;
            let new = rcvwin.min(self.cfg.recv_buffer.max());
            if new > self.recv_limit {
                self.recv_limit = new;
                self.counters.tcp_ext_tcp_rcv_space_grow += 1;
            }
            self.rcvq_space = copied;
        }
        self.rcvq_copied_at = self.app_read;
        self.rcvq_time = now;
    }

    // ------------------------------------------------------------------
    // Receive path
    // ------------------------------------------------------------------

    /// Processes one segment addressed to this subflow.
    pub fn handle_segment(&mut self, now: Instant, hdr: &TcpHeader, opts: &OptionSummary, payload: &[u8]) {
        self.counters.tcp_in_segs += 1;
        match self.state {
            State::Closed => {}
            State::SynSent => self.handle_syn_sent(now, hdr, opts, payload),
            _ => self.handle_synchronized(now, hdr, opts, payload),
        }
    }

    fn handle_syn_sent(&mut self, now: Instant, hdr: &TcpHeader, opts: &OptionSummary, payload: &[u8]) {
        let f = hdr.flags;
        let ack = Seq(hdr.ack);
        if f.ack() && (ack.le(self.iss) || ack.gt(self.snd_nxt)) {
            if !f.rst() {
                self.queue_rst(ack, Seq(0), TcpFlags::RST);
            }
            return;
        }
        if f.rst() {
            // RFC 5961 3.2 leaves SYN-SENT as RFC 793: acceptable iff it acks our SYN.
            if f.ack() {
                self.counters.tcp_estab_resets += 1;
                self.enter_closed(Some(Event::Reset));
            }
            return;
        }
        if !f.syn() {
            return;
        }
        self.take_syn_options(hdr, opts);
        if f.ack() {
            self.snd_una = ack;
            self.snd_wl1 = Seq(hdr.seq);
            self.snd_wl2 = ack;
            if !self.syn_retransmitted {
                self.rtt.update(now, now - self.syn_tx_time);
            }
            // Linux sets the pacing rate once the handshake gave an RTT
            // (tcp_init_transfer), not only on the first data ACK.
            self.update_pacing_rate();
            self.rto_at = None;
            self.retries = 0;
            self.state = State::Established;
            self.events.push_back(Event::Connected);
            self.ack_now = true;
            self.on_data(now, Seq(hdr.seq) + 1, payload, f.fin());
        } else {
            // Simultaneous open (RFC 9293 figure 8): answer with SYN-ACK.
            self.state = State::SynReceived;
            self.rto_at = Some(now);
        }
    }

    fn handle_synchronized(&mut self, now: Instant, hdr: &TcpHeader, opts: &OptionSummary, payload: &[u8]) {
        let f = hdr.flags;
        let seq = Seq(hdr.seq);
        let seg_len = payload.len() as u32 + f.syn() as u32 + f.fin() as u32;

        if self.state == State::SynReceived && f.syn() && !f.ack() && seq == self.irs {
            // Retransmitted SYN: our SYN-ACK was lost.
            self.rto_at = Some(now);
            return;
        }

        // 1. Sequence check (RFC 9293 3.10.7.4).
        let wnd = self.rcv_wnd_now();
        let acceptable = if seg_len == 0 {
            if wnd == 0 {
                seq == self.rcv_nxt
            } else {
                seq.in_range(self.rcv_nxt, self.rcv_nxt + wnd)
            }
        } else if wnd == 0 {
            false
        } else {
            seq.in_range(self.rcv_nxt, self.rcv_nxt + wnd)
                || (seq + seg_len - 1).in_range(self.rcv_nxt, self.rcv_nxt + wnd)
        };
        // A zero window still accepts the ACK and window of a segment at rcv_nxt.
        let ack_only_ok = !acceptable && wnd == 0 && seq == self.rcv_nxt;
        if !acceptable && !ack_only_ok {
            if !f.rst() {
                if self.state == State::TimeWait && f.fin() {
                    self.time_wait_at = Some(now + self.cfg.time_wait);
                }
                self.counters.tcp_ext_beyond_window += (seg_len > 0 && seq.gt(self.rcv_nxt)) as u64;
                self.counters.tcp_ext_tcp_duplicate_data += (seg_len > 0 && seq.lt(self.rcv_nxt)) as u64;
                self.ack_now = true;
            }
            return;
        }

        // 2. RST (RFC 5961 3.2): exact match resets, in-window challenges.
        if f.rst() {
            if seq == self.rcv_nxt {
                if self.state == State::SynReceived {
                    self.enter_closed(Some(Event::Reset));
                } else {
                    self.counters.tcp_estab_resets += 1;
                    self.enter_closed(Some(Event::Reset));
                }
            } else {
                self.send_challenge_ack();
            }
            return;
        }

        // 3. SYN in a synchronized state (RFC 5961 4.2): challenge ACK.
        if f.syn() {
            self.counters.tcp_ext_tcp_syn_challenge += 1;
            self.send_challenge_ack();
            return;
        }

        // 4. No ACK: drop.
        if !f.ack() {
            return;
        }

        // Timestamps: remember the peer's clock for echoing (RFC 7323 4.3).
        if let Some((tsval, tsecr)) = opts.timestamp.filter(|_| self.ts_ok) {
            if seq.le(self.last_ack_sent) {
                self.ts_recent = tsval;
            }
            if !payload.is_empty() && tsecr != 0 {
                self.rcv_rtt_sample(now, tsecr);
            }
        }

        // 5. ACK processing.
        let ack = Seq(hdr.ack);
        if self.state == State::SynReceived {
            if ack.gt(self.snd_una) && ack.le(self.snd_nxt) {
                self.snd_una = ack;
                self.state = State::Established;
                self.rto_at = None;
                self.retries = 0;
                if !self.syn_retransmitted {
                    self.rtt.update(now, now - self.syn_tx_time);
                }
                self.update_pacing_rate();
                self.snd_wnd = (hdr.window as u32) << self.snd_wscale;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.snd_wl1 = seq;
                self.snd_wl2 = ack;
                self.events.push_back(Event::Connected);
            } else {
                self.queue_rst(ack, Seq(0), TcpFlags::RST);
                return;
            }
        } else {
            // RFC 5961 5.2: an ACK for data never sent, or far too old.
            if ack.gt(self.snd_nxt) {
                self.send_challenge_ack();
                return;
            }
            if ack.lt(self.snd_una - self.max_snd_wnd.max(1)) {
                self.send_challenge_ack();
                return;
            }
            self.process_ack(now, hdr, opts, payload.is_empty() && !f.fin());
        }

        // 6. Data and FIN.
        if ack_only_ok {
            return;
        }
        if self.state.can_receive() || (self.fin_received.is_none() && matches!(self.state, State::Closing)) {
            self.on_data(now, seq, payload, f.fin());
        } else if f.fin() && self.state == State::TimeWait {
            // Retransmitted FIN: ACK again and restart 2MSL.
            self.ack_now = true;
            self.time_wait_at = Some(now + self.cfg.time_wait);
        } else if !payload.is_empty() || f.fin() {
            self.ack_now = true;
        }
    }

    fn rcv_rtt_sample(&mut self, now: Instant, tsecr: u32) {
        let now_ts = self.ts_now(now);
        let ms = now_ts.wrapping_sub(tsecr);
        if ms < 60_000 {
            let us = (ms.max(1)) * 1000;
            self.rcv_rtt_us = if self.rcv_rtt_us == 0 { us } else { (7 * self.rcv_rtt_us + us) / 8 };
        }
    }

    fn send_challenge_ack(&mut self) {
        self.counters.tcp_ext_tcp_challenge_ack += 1;
        self.challenge_ack = true;
    }

    fn queue_rst(&mut self, seq: Seq, ack: Seq, flags: TcpFlags) {
        self.pending_rst = Some((seq, ack, flags));
    }

    /// Accepts payload and FIN that passed the sequence check.
    fn on_data(&mut self, now: Instant, seq: Seq, payload: &[u8], fin: bool) {
        if payload.is_empty() && !fin {
            return;
        }
        // Convert to stream offsets (offset 0 is the first byte after the SYN).
        let base = self.irs + 1;
        let next_off = self.recv_buf.next();
        let start = next_off as i64 + (seq - self.rcv_nxt) as i32 as i64;
        let fin_off = start + payload.len() as i64;
        let (off, mut data) = if start < next_off as i64 {
            let skip = ((next_off as i64 - start) as usize).min(payload.len());
            (next_off, &payload[skip..])
        } else {
            (start as u64, payload)
        };
        let limit = self.rcv_window_edge_off();
        let mut trimmed = false;
        if off + data.len() as u64 > limit {
            data = &data[..limit.saturating_sub(off).min(data.len() as u64) as usize];
            trimmed = true;
        }
        if fin && !trimmed && fin_off >= next_off as i64 && self.fin_received.is_none() {
            self.fin_received = Some(fin_off as u64);
        }
        let ins = self.recv_buf.insert(off, data);
        if ins.queued_ofo {
            self.counters.tcp_ext_tcp_ofo_queue += 1;
            self.counters.tcp_ext_tcp_ofo_merge += ins.merged as u64;
            self.ack_now = true; // dupack with SACK right away (RFC 5681 4.2)
        }
        if ins.duplicate {
            self.counters.tcp_ext_tcp_duplicate_data += 1;
            self.ack_now = true;
        }
        if ins.in_order > 0 {
            let had_ofo = !self.recv_buf.ofo_is_empty() || ins.in_order > data.len();
            self.unacked_bytes += ins.in_order as u32;
            if had_ofo {
                self.ack_now = true; // filled a hole
            }
            self.schedule_ack(now);
        }
        self.rcv_nxt = base + self.recv_buf.next() as u32;
        if let Some(fin_off) = self.fin_received {
            if self.recv_buf.next() == fin_off && self.rcv_nxt == base + fin_off as u32 {
                self.rcv_nxt += 1;
                self.ack_now = true;
                self.on_fin(now);
            }
        }
    }

    fn on_fin(&mut self, now: Instant) {
        self.events.push_back(Event::PeerFin);
        match self.state {
            State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_sent && self.snd_una == self.snd_nxt {
                    self.enter_time_wait(now);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.rto_at = None;
        self.persist_at = None;
        self.time_wait_at = Some(now + self.cfg.time_wait);
    }

    fn enter_closed(&mut self, ev: Option<Event>) {
        if self.state == State::Closed {
            return;
        }
        self.state = State::Closed;
        self.rto_at = None;
        self.delack_at = None;
        self.persist_at = None;
        self.time_wait_at = None;
        self.events.push_back(ev.unwrap_or(Event::Closed));
    }

    fn schedule_ack(&mut self, now: Instant) {
        self.ack_pending = true;
        // Linux: ACK at least every second full-sized segment, at once in quick-ack mode.
        // A window about to close is announced at once (Linux does so under
        // receive-buffer pressure), or the sender would wait for the timer.
        let closing = self.free_window() < 2 * self.mss(0) as usize;
        if self.quickacks > 0 || self.unacked_bytes >= 2 * self.mss(0) || closing {
            self.ack_now = true;
        } else if self.delack_at.is_none() {
            self.delack_at = Some(now + self.cfg.delayed_ack);
        }
    }

    /// Free receive-buffer space, the basis of the advertised window.
    fn free_window(&self) -> usize {
        self.recv_limit.saturating_sub(self.recv_buf.ready_len() + self.recv_buf.ofo_len())
    }

    /// Window currently open to the peer (from what we advertised).
    fn rcv_wnd_now(&self) -> u32 {
        if self.rcv_adv.gt(self.rcv_nxt) {
            self.rcv_adv - self.rcv_nxt
        } else {
            0
        }
    }

    /// Stream offset of the right edge we accept data up to.
    fn rcv_window_edge_off(&self) -> u64 {
        self.recv_buf.next() + self.rcv_wnd_now().max(self.free_window() as u32) as u64
    }

    /// The window to advertise now (bytes), never shrinking the right edge.
    fn select_window(&mut self) -> u32 {
        let free = self.free_window() as u32;
        let mss = self.mss(0);
        let cur = self.rcv_wnd_now();
        // Receiver-side silly window avoidance (RFC 9293 3.8.6.2.2).
        let mut win = if free < (self.recv_limit as u32 / 2).min(mss) { 0 } else { free };
        win = win.max(cur);
        let max = 65535u32 << self.rcv_wscale;
        win = win.min(max);
        // Round down to the scale granularity, except to never shrink.
        let gran = (1u32 << self.rcv_wscale) - 1;
        if win & gran != 0 && win > cur {
            win = (win & !gran).max(cur);
        }
        win
    }

    fn process_ack(&mut self, now: Instant, hdr: &TcpHeader, opts: &OptionSummary, pure: bool) {
        let ack = Seq(hdr.ack);
        let seq = Seq(hdr.seq);
        let wnd = (hdr.window as u32) << self.snd_wscale;
        let prior_una = self.snd_una;
        let prior_in_flight = self.in_flight();
        let prior_wnd = self.snd_wnd;

        // Window update (RFC 9293 3.10.7.4, SND.WL1/WL2 rule).
        if self.snd_wl1.lt(seq) || (self.snd_wl1 == seq && self.snd_wl2.le(ack)) {
            self.snd_wnd = wnd;
            self.max_snd_wnd = self.max_snd_wnd.max(wnd);
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
            if wnd > 0 {
                self.persist_at = None;
                self.persist_backoff = 0;
            }
        }

        // SACK scoreboard.
        let mut newly_sacked = 0;
        let mut sack_rtt = None;
        if self.sack_ok && !opts.sack.is_empty() {
            let (n, rtt) = self.apply_sack(now, &opts.sack);
            newly_sacked = n;
            sack_rtt = rtt;
        }

        // Cumulative ACK.
        let mut newly_acked_segs = 0;
        let mut rtt_first = None;
        let mut rtt_last = None;
        let mut fin_acked = false;
        if ack.gt(self.snd_una) {
            while let Some(front) = self.scoreboard.front() {
                if front.end().gt(ack) {
                    break;
                }
                let s = self.scoreboard.pop_front().expect("front exists");
                if !s.sacked {
                    self.rack_update(now, s.tx_time, s.ever_retrans);
                }
                if s.sacked {
                    self.sacked_out -= 1;
                } else {
                    newly_acked_segs += 1;
                    if !s.ever_retrans {
                        let rtt = now - s.tx_time;
                        rtt_first.get_or_insert(rtt);
                        rtt_last = Some(rtt);
                    }
                }
                if s.lost {
                    self.lost_out -= 1;
                }
                if s.retrans {
                    self.retrans_out -= 1;
                }
                fin_acked |= s.fin;
            }
            self.bytes_acked += (ack - self.snd_una) as u64 - fin_acked as u64;
            self.send_buf.ack_to(ack);
            self.snd_una = ack;
            self.retries = 0;
            self.dupacks = 0;
            self.rtt.reset_backoff();
            // RFC 6298 5.3: restart the timer when new data is acknowledged.
            self.rto_at = (!self.scoreboard.is_empty()).then(|| now + self.rtt.rto());
            if self.tlp_high_seq.is_some_and(|h| self.snd_una.ge(h)) {
                self.tlp_high_seq = None;
            }
        } else if pure && ack == self.snd_una && !self.scoreboard.is_empty() && wnd == prior_wnd && newly_sacked == 0 {
            self.dupacks += 1;
        }

        // RTT: Linux takes the oldest newly acked segment for the RTO
        // estimator; SACK gives one when nothing was cumulatively acked.
        if let Some(rtt) = rtt_first.or(sack_rtt) {
            self.rtt.update(now, rtt);
        }
        let ca_rtt = rtt_last.or(sack_rtt);

        let delivered = newly_acked_segs + newly_sacked;
        if self.sack_ok {
            self.rack_timer_at = self.rack_detect_loss(now);
        }
        if self.cfg.dup_thresh > 0 && !self.sack_ok && self.dupacks >= self.cfg.dup_thresh {
            self.mark_head_lost();
        }
        if self.sack_ok && self.sacked_out > 0 {
            self.mark_lost_from_sack();
        }

        // Congestion state machine (Linux tcp_fastretrans_alert, simplified).
        match self.ca_state {
            CaState::Open | CaState::Disorder => {
                if self.lost_out > 0 {
                    self.enter_recovery(now);
                } else if self.sacked_out > 0 || self.dupacks > 0 {
                    self.ca_state = CaState::Disorder;
                } else {
                    self.ca_state = CaState::Open;
                }
            }
            CaState::Recovery => {
                if self.snd_una.ge(self.high_seq) {
                    self.exit_recovery(now);
                } else if !self.sack_ok && ack.gt(prior_una) {
                    // NewReno partial ACK: the next hole is lost too.
                    self.mark_head_lost();
                }
            }
            CaState::Loss => {
                if self.snd_una.ge(self.high_seq) {
                    self.ca_state = CaState::Open;
                    self.cc.set_state(&mut self.ccs, CaState::Open, now);
                }
            }
        }

        // Controller sample (Linux pkts_acked), then growth or PRR.
        let sample = AckSample {
            pkts_acked: delivered,
            rtt: ca_rtt,
            snd_una: self.snd_una.0,
            snd_nxt: self.snd_nxt.0,
            in_flight: prior_in_flight,
        };
        if delivered > 0 || ca_rtt.is_some() {
            self.cc.pkts_acked(&mut self.ccs, &sample, now);
        }
        if self.ca_state == CaState::Recovery {
            self.prr_update(delivered, ack.gt(prior_una));
        } else if ack.gt(prior_una) && self.is_cwnd_limited() {
            self.cc.cong_avoid(&mut self.ccs, self.snd_una.0, delivered.max(1), now);
        }
        self.ccs.cwnd = self.ccs.cwnd.clamp(1, self.ccs.cwnd_clamp);
        self.update_pacing_rate();
        if ack.gt(prior_una) || self.ca_state != CaState::Open {
            self.schedule_tlp(now);
        }

        // Our FIN acknowledged.
        if fin_acked {
            match self.state {
                State::FinWait1 => self.state = State::FinWait2,
                State::Closing => self.enter_time_wait(now),
                State::LastAck => self.enter_closed(None),
                _ => {}
            }
        }
        if self.cfg.send_buffer.is_auto() {
            // Linux tcp_sndbuf_expand: room for two windows of segments.
            let want = 2 * self.ccs.cwnd as usize * self.mss(0) as usize;
            self.send_limit = self.send_limit.max(want.min(self.cfg.send_buffer.max()));
        }
    }

    /// Marks SACKed segments; returns how many became SACKed and an RTT
    /// sample from the newest never-retransmitted one.
    fn apply_sack(&mut self, now: Instant, blocks: &SackBlocks) -> (u32, Option<Duration>) {
        let mut n = 0;
        let mut rtt: Option<Duration> = None;
        let mut newest: Option<Instant> = None;
        let mut spurious = false;
        let min_rtt = self.rtt.min();
        for &(l, r) in blocks {
            let (l, r) = (Seq(l), Seq(r));
            // Ignore D-SACKs and nonsense (RFC 2883 / RFC 5961 spirit).
            if !l.lt(r) || r.le(self.snd_una) || r.gt(self.snd_nxt) || l.lt(self.snd_una) {
                continue;
            }
            let start = self.scoreboard.partition_point(|s| s.seq.lt(l));
            for i in start..self.scoreboard.len() {
                let s = &mut self.scoreboard[i];
                if s.end().gt(r) {
                    break;
                }
                if s.sacked {
                    continue;
                }
                s.sacked = true;
                n += 1;
                self.sacked_out += 1;
                if s.lost {
                    s.lost = false;
                    self.lost_out -= 1;
                }
                if s.retrans {
                    s.retrans = false;
                    self.retrans_out -= 1;
                }
                let tx = s.tx_time;
                if !s.ever_retrans {
                    let t = now - tx;
                    rtt = Some(rtt.map_or(t, |x: Duration| x.min(t)));
                } else if min_rtt.is_some_and(|m| now - tx < m) {
                    spurious = true;
                }
                newest = newest.max(Some(tx));
            }
        }
        if spurious {
            self.rack_spurious();
        }
        if let Some(tx) = newest {
            self.rack_update(now, tx, false);
        }
        (n, rtt)
    }

    /// RACK: remember the latest send time among delivered segments. A
    /// delivery faster than the minimum RTT must be of an earlier copy
    /// (the original of a retransmission) and says nothing (RFC 8985 6.2).
    fn rack_update(&mut self, now: Instant, tx: Instant, ever_retrans: bool) {
        let rtt = now - tx;
        if self.rtt.min().is_some_and(|m| rtt < m) {
            if ever_retrans {
                self.rack_spurious();
            }
            return;
        }
        if self.rack_xmit.is_none_or(|(t, _)| tx > t) {
            self.rack_xmit = Some((tx, rtt));
        }
    }

    /// A retransmission turned out unnecessary (the original arrived: the
    /// acknowledgement came sooner than any real round trip). The path
    /// reorders: widen RACK's reordering window (RFC 8985 6.2, step 4,
    /// with this in place of DSACK).
    fn rack_spurious(&mut self) {
        self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(16);
        self.reo_wnd_recoveries = 0;
        self.counters.tcp_ext_tcp_spurious_retrans += 1;
    }

    /// RACK loss detection (RFC 8985 6.2): a segment sent before one that
    /// has since been delivered, and older than that delivery's RTT plus a
    /// reordering window, is lost — whether it is an original (a hole too
    /// short for the three-SACK rule) or a retransmission. Returns when the
    /// next not-yet-late candidate becomes late (the RACK reorder timer).
    fn rack_detect_loss(&mut self, now: Instant) -> Option<Instant> {
        let (xmit, rtt) = self.rack_xmit?;
        if self.sacked_out == 0 && self.retrans_out == 0 {
            return None;
        }
        let reo_wnd = (self.rtt.min().unwrap_or(rtt) / 4 * self.reo_wnd_mult).min(self.rtt.smoothed().unwrap_or(rtt));
        let mut next = None;
        for s in self.scoreboard.iter_mut() {
            if s.sacked || (s.lost && !s.retrans) || s.tx_time >= xmit {
                continue;
            }
            let deadline = s.tx_time + rtt + reo_wnd;
            if now < deadline {
                next = Instant::min_opt(next, Some(deadline));
                continue;
            }
            if s.retrans {
                s.retrans = false;
                self.retrans_out -= 1;
                self.counters.tcp_ext_tcp_lost_retransmit += 1;
            } else {
                s.lost = true;
                self.lost_out += 1;
            }
        }
        next
    }

    /// RFC 6675 IsLost: a hole with at least `dup_thresh` SACKed segments above it is lost.
    fn mark_lost_from_sack(&mut self) {
        let thresh = self.cfg.dup_thresh.max(1);
        if self.sacked_out < thresh {
            return;
        }
        let mut count = 0;
        let mut boundary = 0;
        for (i, s) in self.scoreboard.iter().enumerate().rev() {
            if s.sacked {
                count += 1;
                if count == thresh {
                    boundary = i;
                    break;
                }
            }
        }
        for s in self.scoreboard.range_mut(..boundary) {
            if !s.sacked && !s.lost && !s.retrans {
                s.lost = true;
                self.lost_out += 1;
            }
        }
    }

    /// Marks the first unacknowledged segment lost (dupack threshold without
    /// SACK, NewReno partial ACK).
    fn mark_head_lost(&mut self) {
        if let Some(s) = self.scoreboard.iter_mut().find(|s| !s.sacked) {
            if !s.lost {
                s.lost = true;
                self.lost_out += 1;
                if s.retrans {
                    s.retrans = false;
                    self.retrans_out -= 1;
                }
            }
        }
    }

    fn enter_recovery(&mut self, now: Instant) {
        if self.sack_ok {
            self.counters.tcp_ext_tcp_sack_recovery += 1;
        } else {
            self.counters.tcp_ext_tcp_reno_recovery += 1;
        }
        self.prior_cwnd = self.ccs.cwnd;
        self.ccs.ssthresh = self.cc.ssthresh(&self.ccs);
        self.high_seq = self.snd_nxt;
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.ca_state = CaState::Recovery;
        self.cc.set_state(&mut self.ccs, CaState::Recovery, now);
    }

    fn exit_recovery(&mut self, now: Instant) {
        // RFC 8985: the widened reordering window decays after 16 recoveries.
        self.reo_wnd_recoveries += 1;
        if self.reo_wnd_recoveries >= 16 {
            self.reo_wnd_mult = 1;
            self.reo_wnd_recoveries = 0;
        }
        // Linux tcp_end_cwnd_reduction.
        if self.ccs.ssthresh < u32::MAX {
            self.ccs.cwnd = self.ccs.ssthresh.max(1);
        }
        self.ccs.cwnd_cnt = 0;
        self.ca_state = if self.sacked_out > 0 { CaState::Disorder } else { CaState::Open };
        self.cc.set_state(&mut self.ccs, CaState::Open, now);
        self.cc.cwnd_event(&mut self.ccs, CaEvent::CompleteCwr, now);
    }

    /// Proportional Rate Reduction (RFC 6937, Linux `tcp_cwnd_reduction`).
    fn prr_update(&mut self, delivered: u32, una_advanced: bool) {
        if delivered == 0 && !una_advanced {
            return;
        }
        self.prr_delivered += delivered;
        let in_flight = self.in_flight();
        let ssthresh = self.ccs.ssthresh.min(self.prior_cwnd.max(1));
        let delta = ssthresh as i64 - in_flight as i64;
        let mut sndcnt: i64 = if delta < 0 {
            let dividend = ssthresh as u64 * self.prr_delivered as u64 + self.prior_cwnd.max(1) as u64 - 1;
            (dividend / self.prior_cwnd.max(1) as u64) as i64 - self.prr_out as i64
        } else {
            let s = if una_advanced {
                (self.prr_delivered as i64 - self.prr_out as i64).max(delivered as i64)
            } else {
                self.prr_delivered as i64 - self.prr_out as i64
            };
            delta.min(s + 1)
        };
        sndcnt = sndcnt.max(if self.prr_out == 0 { 1 } else { 0 });
        self.ccs.cwnd = (in_flight as i64 + sndcnt).max(1) as u32;
    }

    /// Linux `tcp_packets_in_flight`.
    fn in_flight(&self) -> u32 {
        (self.scoreboard.len() as u32 + self.retrans_out).saturating_sub(self.sacked_out + self.lost_out)
    }

    /// Linux `tcp_is_cwnd_limited`.
    fn is_cwnd_limited(&self) -> bool {
        if self.is_cwnd_limited {
            return true;
        }
        if self.ccs.in_slow_start() {
            return self.ccs.cwnd < 2 * self.max_packets_out;
        }
        false
    }

    /// Linux `tcp_cwnd_validate`.
    fn cwnd_validate(&mut self, cwnd_limited: bool) {
        let packets_out = self.scoreboard.len() as u32;
        if self.snd_una.ge(self.cwnd_usage_seq) || cwnd_limited || packets_out > self.max_packets_out {
            self.is_cwnd_limited = cwnd_limited;
            self.max_packets_out = packets_out;
            self.cwnd_usage_seq = self.snd_nxt;
        }
    }

    /// Linux `tcp_update_pacing_rate`: 200 % of cwnd/srtt in slow start, 120 % after.
    fn update_pacing_rate(&mut self) {
        let cfg = PacingRateConfig {
            max_pacing_rate: self.cfg.max_pacing_rate.unwrap_or(u64::MAX),
            ..PacingRateConfig::default()
        };
        let rate =
            cfg.rate(self.mss(0), self.ccs.cwnd, self.ccs.ssthresh, self.scoreboard.len() as u32, self.rtt.smoothed());
        self.pacer.set_rate(rate);
        self.cc.set_pacing(rate, self.cfg.pacer != mptun_cc::PacerKind::None && rate != u64::MAX);
    }

    // ------------------------------------------------------------------
    // Timers
    // ------------------------------------------------------------------

    /// The next instant the subflow needs to be called back: a timer, or the
    /// EDT slot of a segment it holds back.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = Instant::min_opt(self.rto_at, self.delack_at);
        t = Instant::min_opt(t, self.tlp_at);
        t = Instant::min_opt(t, self.rack_timer_at);
        t = Instant::min_opt(t, self.persist_at);
        t = Instant::min_opt(t, self.time_wait_at);
        Instant::min_opt(t, self.paced_until)
    }

    /// Fires whatever timers are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.time_wait_at.is_some_and(|t| t <= now) {
            self.time_wait_at = None;
            self.enter_closed(None);
            return;
        }
        if self.delack_at.is_some_and(|t| t <= now) {
            self.delack_at = None;
            if self.ack_pending {
                self.counters.tcp_ext_delayed_acks += 1;
                self.ack_now = true;
            }
        }
        if self.persist_at.is_some_and(|t| t <= now) {
            self.persist_at = None;
            self.send_window_probe(now);
        }
        if self.rack_timer_at.is_some_and(|t| t <= now) {
            self.rack_timer_at = self.rack_detect_loss(now);
            if self.lost_out > 0 && matches!(self.ca_state, CaState::Open | CaState::Disorder) {
                self.enter_recovery(now);
            }
        }
        if self.tlp_at.is_some_and(|t| t <= now) {
            self.tlp_at = None;
            if !self.scoreboard.is_empty() && self.ca_state == CaState::Open && self.state.is_synchronized() {
                self.tlp_probe_due = true;
            }
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            self.tlp_at = None;
            self.on_rto(now);
        }
    }

    /// Linux `tcp_schedule_loss_probe`: if nothing is acknowledged within two
    /// smoothed RTTs, send a probe so that a lost tail of the window is
    /// repaired by SACK recovery instead of an RTO and a restart from cwnd 1.
    fn schedule_tlp(&mut self, now: Instant) {
        self.tlp_at = None;
        if !self.sack_ok || self.scoreboard.is_empty() || self.ca_state != CaState::Open || self.tlp_high_seq.is_some()
        {
            return;
        }
        let mut pto = self.rtt.smoothed().map_or(self.cfg.rto_initial, |s| s * 2);
        // RFC 8985 7.2 adds the worst-case delayed-ACK time for a single
        // segment in flight; the same holds whenever less than two full
        // segments are outstanding, since the receiver's "ACK every second
        // full segment" rule cannot fire.
        let flight: u32 = self.scoreboard.iter().filter(|s| !s.sacked).map(|s| s.len).sum();
        if flight < 2 * self.mss(0) {
            pto += self.cfg.rto_min;
        }
        let mut at = now + pto.max(Duration::from_millis(2));
        if let Some(rto) = self.rto_at {
            at = at.min(rto);
        }
        self.tlp_at = Some(at);
    }

    /// The loss probe: the highest segment sent, once more.
    fn send_loss_probe(&mut self, now: Instant, hook: &mut dyn SegmentHook, out: &mut [u8]) -> Option<Transmit> {
        let i = self.scoreboard.iter().rposition(|s| !s.sacked)?;
        let s = self.scoreboard[i];
        self.scoreboard[i].ever_retrans = true;
        self.tlp_high_seq = Some(self.snd_nxt);
        self.counters.tcp_ext_tcp_loss_probes += 1;
        self.counters.tcp_retrans_segs += 1;
        self.bytes_retrans += s.len as u64;
        let opts = self.ack_options(now, hook.option_space(true));
        let mut flags = TcpFlags::ACK | TcpFlags::PSH;
        if s.fin {
            flags |= TcpFlags::FIN;
        }
        self.emit(now, hook, out, s.seq, self.rcv_nxt, flags, Some(s.len), true, opts)
    }

    fn on_rto(&mut self, now: Instant) {
        match self.state {
            State::SynSent | State::SynReceived => {
                // The first "timeout" is the initial send of the SYN/SYN-ACK.
                if self.snd_nxt != self.iss {
                    self.retries += 1;
                    self.syn_retransmitted = true;
                    self.counters.tcp_ext_tcp_timeouts += 1;
                    self.counters.tcp_retrans_segs += 1;
                    self.rtt.backoff();
                    if self.retries > self.cfg.syn_retries {
                        self.enter_closed(Some(Event::TimedOut));
                        return;
                    }
                }
                self.snd_nxt = self.iss; // resend SYN / SYN-ACK
            }
            State::Closed | State::TimeWait => {}
            _ => {
                if self.scoreboard.is_empty() {
                    return;
                }
                self.retries += 1;
                self.counters.tcp_ext_tcp_timeouts += 1;
                if self.retries > self.cfg.max_retries {
                    self.enter_closed(Some(Event::TimedOut));
                    return;
                }
                self.enter_loss(now);
                self.rtt.backoff();
                self.rto_at = Some(now + self.rtt.rto());
            }
        }
    }

    /// Linux `tcp_enter_loss`: everything not SACKed is lost, cwnd back to 1.
    fn enter_loss(&mut self, now: Instant) {
        if !matches!(self.ca_state, CaState::Loss) {
            self.prior_cwnd = self.ccs.cwnd;
            if matches!(self.ca_state, CaState::Open | CaState::Disorder) || self.snd_una == self.high_seq {
                self.ccs.ssthresh = self.cc.ssthresh(&self.ccs);
            }
            self.cc.cwnd_event(&mut self.ccs, CaEvent::Loss, now);
        }
        self.ca_state = CaState::Loss;
        self.cc.set_state(&mut self.ccs, CaState::Loss, now);
        self.ccs.cwnd = 1;
        self.ccs.cwnd_cnt = 0;
        self.high_seq = self.snd_nxt;
        self.lost_out = 0;
        self.retrans_out = 0;
        for s in self.scoreboard.iter_mut() {
            s.retrans = false;
            s.lost = !s.sacked;
            self.lost_out += s.lost as u32;
        }
    }

    fn send_window_probe(&mut self, now: Instant) {
        if !self.state.is_synchronized() || self.snd_wnd > 0 || self.unsent_bytes() == 0 {
            return;
        }
        self.counters.tcp_ext_tcp_win_probe += 1;
        // Linux tcp_xmit_probe_skb: an old sequence number elicits an ACK with the current window.
        self.challenge_ack = true;
        self.persist_backoff = (self.persist_backoff + 1).min(16);
        self.arm_persist(now);
    }

    fn arm_persist(&mut self, now: Instant) {
        let base = self.rtt.rto();
        let d = base.saturating_mul(1 << self.persist_backoff.min(10)).min(self.cfg.rto_max);
        self.persist_at = Some(now + d);
    }

    // ------------------------------------------------------------------
    // Transmit path
    // ------------------------------------------------------------------

    /// Pending control segments, or data the windows would let us send.
    fn can_send_data(&self) -> bool {
        if !matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait1 | State::LastAck | State::Closing
        ) {
            return false;
        }
        if self.in_flight() >= self.ccs.cwnd {
            return false;
        }
        if self.next_lost().is_some() {
            return true;
        }
        let unsent = self.unsent_bytes();
        if unsent > 0 {
            return self.window_allows(1);
        }
        self.fin_queued && !self.fin_sent
    }

    fn window_allows(&self, len: u32) -> bool {
        (self.snd_nxt + len).le(self.snd_una + self.snd_wnd)
    }

    fn next_lost(&self) -> Option<usize> {
        if self.lost_out == 0 {
            return None;
        }
        self.scoreboard.iter().position(|s| s.lost && !s.retrans && !s.sacked)
    }

    fn ts_now(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.ts_offset)
    }

    /// Writes the next packet to send at `now` into `out`, if any.
    pub fn poll_transmit(&mut self, now: Instant, hook: &mut dyn SegmentHook, out: &mut [u8]) -> Option<Transmit> {
        if let Some((seq, ack, flags)) = self.pending_rst.take() {
            self.counters.tcp_out_rsts += 1;
            return self.emit(now, hook, out, seq, ack, flags, None, false, TcpOptions::new());
        }
        match self.state {
            State::Closed => return None,
            State::SynSent | State::SynReceived if self.snd_nxt == self.iss => {
                return self.emit_syn(now, hook, out);
            }
            _ => {}
        }
        if self.state.is_synchronized() {
            if let Some(t) = self.poll_data(now, hook, out) {
                return Some(t);
            }
            if self.challenge_ack {
                self.challenge_ack = false;
                let seq = if self.persist_at.is_some() { self.snd_una - 1 } else { self.snd_nxt };
                let opts = self.ack_options(now, hook.option_space(false));
                return self.emit(now, hook, out, seq, self.rcv_nxt, TcpFlags::ACK, None, false, opts);
            }
        }
        if self.ack_now && self.state != State::SynSent {
            let opts = self.ack_options(now, hook.option_space(false));
            let seq = if self.state == State::SynReceived { self.iss + 1 } else { self.snd_nxt };
            return self.emit(now, hook, out, seq, self.rcv_nxt, TcpFlags::ACK, None, false, opts);
        }
        None
    }

    fn poll_data(&mut self, now: Instant, hook: &mut dyn SegmentHook, out: &mut [u8]) -> Option<Transmit> {
        self.paced_until = None;
        if std::mem::take(&mut self.tlp_probe_due) {
            if let Some(t) = self.send_loss_probe(now, hook, out) {
                return Some(t);
            }
        }
        if !self.can_send_data() {
            // Nothing sendable: zero window with data waiting arms the persist timer.
            let unsent = self.unsent_bytes();
            if unsent > 0
                && self.scoreboard.is_empty()
                && !self.window_allows(1)
                && self.persist_at.is_none()
                && self.state.is_synchronized()
            {
                self.arm_persist(now);
            }
            if self.in_flight() >= self.ccs.cwnd {
                self.cwnd_validate(true);
            }
            return None;
        }
        let departure = self.pacer.departure(now);
        if departure > now {
            self.paced_until = Some(departure);
            return None;
        }
        self.paced_until = None;
        let hook_space = hook.option_space(true);
        let mss = self.mss(hook_space);
        let opts = self.ack_options(now, hook_space);
        let mut flags = TcpFlags::ACK;

        // Retransmit the first lost segment, else send new data.
        if let Some(i) = self.next_lost() {
            let s = self.scoreboard[i];
            self.scoreboard[i].retrans = true;
            self.scoreboard[i].ever_retrans = true;
            self.scoreboard[i].tx_time = now;
            self.retrans_out += 1;
            self.counters.tcp_retrans_segs += 1;
            self.bytes_retrans += s.len as u64;
            if self.ca_state == CaState::Loss {
                self.counters.tcp_ext_tcp_slow_start_retrans += 1;
            } else {
                self.counters.tcp_ext_tcp_fast_retrans += 1;
            }
            if s.fin {
                flags |= TcpFlags::FIN;
            }
            if self.ca_state == CaState::Recovery {
                self.prr_out += 1;
            }
            if self.rto_at.is_none() {
                self.rto_at = Some(now + self.rtt.rto());
            }
            let t = self.emit(now, hook, out, s.seq, self.rcv_nxt, flags, Some(s.len), true, opts);
            self.after_data_sent(now, t);
            return t;
        }

        let unsent = self.unsent_bytes();
        let wnd_room = (self.snd_una + self.snd_wnd) - self.snd_nxt;
        let mut len = unsent.min(mss).min(if self.window_allows(1) { wnd_room } else { 0 });
        if self.cfg.segment_at_write_boundaries {
            // One MPTCP mapping per write: a segment never straddles two (Linux
            // refuses to collapse skbs whose MPTCP extensions differ).
            len = len.min(self.send_buf.contiguous_from(self.snd_nxt) as u32);
        }
        if len == 0 && !(self.fin_queued && !self.fin_sent && unsent == 0) {
            return None;
        }
        if self.cfg.nagle && len < mss && !self.scoreboard.is_empty() && !self.fin_queued {
            return None;
        }
        let fin = self.fin_queued && !self.fin_sent && len == unsent;
        if fin {
            flags |= TcpFlags::FIN;
            self.fin_sent = true;
        }
        // Linux sets PSH only on the segment that empties the write queue
        // (tcp_mark_push); segments with identical headers can then be merged
        // by TSO on the way out.
        if len > 0 && len == unsent {
            flags |= TcpFlags::PSH;
        }
        let seq = self.snd_nxt;
        self.scoreboard.push_back(Sent {
            seq,
            len,
            fin,
            tx_time: now,
            ever_retrans: false,
            sacked: false,
            lost: false,
            retrans: false,
        });
        self.snd_nxt = seq + len + fin as u32;
        self.bytes_sent += len as u64;
        if self.ca_state == CaState::Recovery {
            self.prr_out += 1;
        }
        if self.scoreboard.len() == 1 {
            // First transmission after idle (Linux CA_EVENT_TX_START).
            self.cc.cwnd_event(&mut self.ccs, CaEvent::TxStart, now);
        }
        self.cc.data_sent(now);
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rtt.rto());
        }
        let t = self.emit(now, hook, out, seq, self.rcv_nxt, flags, Some(len), false, opts);
        self.after_data_sent(now, t);
        t
    }

    fn after_data_sent(&mut self, now: Instant, t: Option<Transmit>) {
        if let Some(t) = t {
            self.schedule_tlp(now);
            self.data_segs_out += 1;
            self.pacer.on_send(now, t.len);
            let limited = self.in_flight() >= self.ccs.cwnd;
            self.cwnd_validate(limited);
        }
    }

    /// Timestamps and SACK blocks for a non-SYN segment, leaving `hook_space` free.
    fn ack_options(&self, now: Instant, hook_space: usize) -> TcpOptions {
        let mut o = TcpOptions::new();
        if self.ts_ok {
            let _ = o.push(&TcpOption::Nop);
            let _ = o.push(&TcpOption::Nop);
            let _ = o.push(&TcpOption::Timestamp { tsval: self.ts_now(now), tsecr: self.ts_recent });
        }
        if self.sack_ok && !self.recv_buf.ofo_is_empty() {
            let room = 40usize.saturating_sub(o.len() + hook_space);
            let max_blocks = (room.saturating_sub(4) / 8).min(4);
            if max_blocks > 0 {
                let base = self.irs + 1;
                let mut blocks = SackBlocks::new();
                let first = self.recv_buf.last_ofo.and_then(|l| self.recv_buf.ofo_range_at(l));
                if let Some((s, e)) = first {
                    blocks.push(((base + s as u32).0, (base + e as u32).0));
                }
                for (s, e) in self.recv_buf.ofo_ranges().rev() {
                    if blocks.len() >= max_blocks {
                        break;
                    }
                    if Some((s, e)) != first {
                        blocks.push(((base + s as u32).0, (base + e as u32).0));
                    }
                }
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Sack(blocks));
            }
        }
        o
    }

    fn emit_syn(&mut self, now: Instant, hook: &mut dyn SegmentHook, out: &mut [u8]) -> Option<Transmit> {
        let mut o = TcpOptions::new();
        let syn_ack = self.state == State::SynReceived;
        let _ = o.push(&TcpOption::Mss(self.cfg.mss));
        let sack = if syn_ack { self.sack_ok } else { self.cfg.sack };
        let ts = if syn_ack { self.ts_ok } else { self.cfg.timestamps };
        let ws = if syn_ack { self.cfg.window_scaling && self.rcv_wscale > 0 } else { self.cfg.window_scaling };
        let tsopt = TcpOption::Timestamp { tsval: self.ts_now(now), tsecr: if syn_ack { self.ts_recent } else { 0 } };
        match (sack, ts) {
            (true, true) => {
                let _ = o.push(&TcpOption::SackPermitted);
                let _ = o.push(&tsopt);
            }
            (true, false) => {
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::SackPermitted);
            }
            (false, true) => {
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&TcpOption::Nop);
                let _ = o.push(&tsopt);
            }
            (false, false) => {}
        }
        if ws {
            let _ = o.push(&TcpOption::Nop);
            let _ = o.push(&TcpOption::WindowScale(self.rcv_wscale));
        }
        let (flags, ack) =
            if syn_ack { (TcpFlags::SYN | TcpFlags::ACK, self.rcv_nxt) } else { (TcpFlags::SYN, Seq(0)) };
        self.syn_tx_time = now;
        self.snd_nxt = self.iss + 1;
        self.rto_at = Some(now + self.rtt.rto());
        self.emit(now, hook, out, self.iss, ack, flags, None, self.syn_retransmitted, o)
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        now: Instant,
        hook: &mut dyn SegmentHook,
        out: &mut [u8],
        seq: Seq,
        ack: Seq,
        flags: TcpFlags,
        payload_len: Option<u32>,
        retransmit: bool,
        mut options: TcpOptions,
    ) -> Option<Transmit> {
        let len = payload_len.unwrap_or(0);
        let meta = SegmentMeta { seq, len, flags, retransmit };
        // RSTs go through the hook too: MPTCP may say why (MP_TCPRST).
        let hook_window = hook.on_emit(&meta, &mut options);
        let window = if flags.syn() {
            let w = self.recv_limit.min(65535) as u16;
            if flags.ack() {
                self.rcv_adv = self.rcv_nxt + w as u32;
            }
            w
        } else if flags.rst() {
            0
        } else {
            let w = match hook_window {
                Some(w) => w.min((65535u64) << self.rcv_wscale) as u32,
                None => self.select_window(),
            };
            if flags.ack() {
                self.rcv_adv = self.rcv_nxt + w;
                if w == 0 {
                    self.counters.tcp_ext_tcp_to_zero_window_adv += 1;
                }
            }
            (w >> self.rcv_wscale).min(65535) as u16
        };
        let hdr = TcpHeader {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            seq: seq.0,
            ack: if flags.ack() { ack.0 } else { 0 },
            flags,
            window,
            checksum: 0,
            urgent: 0,
            options,
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let payload: &[u8] = if len > 0 { self.send_buf.range(seq, len as usize, &mut scratch) } else { &[] };
        let res = mptun_wire::ip::emit_tcp_packet(self.local.ip(), self.remote.ip(), self.cfg.ttl, &hdr, payload, out);
        self.scratch = scratch;
        let n = match res {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "could not emit segment");
                return None;
            }
        };
        self.counters.tcp_out_segs += 1;
        if flags.ack() {
            self.last_ack_sent = ack;
            self.ack_now = false;
            self.ack_pending = false;
            self.delack_at = None;
            self.unacked_bytes = 0;
            self.quickacks = self.quickacks.saturating_sub(1);
        }
        Some(Transmit { len: n, departure: now, src: self.local, dst: self.remote })
    }
}

/// Smallest window scale that lets `max_buffer` be advertised (Linux
/// `tcp_select_initial_window`).
fn wscale_for(max_buffer: usize) -> u8 {
    let mut ws = 0;
    while ws < MAX_WSCALE && (max_buffer >> ws) > 65535 {
        ws += 1;
    }
    ws
}

#[cfg(test)]
mod tests;
