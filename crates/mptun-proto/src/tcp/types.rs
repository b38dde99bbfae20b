//! The vocabulary the subflow shares with its driver and with the MPTCP layer
//! above it: states, events, the emission hook and the reports.

use crate::seq::Seq;
use mptun_cc::CaState;
use mptun_time::{Duration, Instant};
use mptun_wire::{TcpFlags, TcpOptions};
use std::net::SocketAddr;

/// RFC 9293 connection states.
///
/// Exposed so that the layer above can tell a usable subflow from one still
/// opening or already closing, without reaching into the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection: never opened, reset, timed out or fully closed.
    Closed,
    /// Our SYN is out, the peer's is not yet in.
    SynSent,
    /// The peer's SYN is in, our SYN-ACK not yet acknowledged.
    SynReceived,
    /// Both directions open.
    Established,
    /// We closed; our FIN is not yet acknowledged.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both sides closed at once; our FIN is not yet acknowledged.
    Closing,
    /// The peer closed first, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both FINs acknowledged; 2MSL wait so late segments die here.
    TimeWait,
}

impl State {
    /// Both SYNs have been seen.
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::Closed | State::SynSent | State::SynReceived)
    }
    /// We may still receive data.
    pub(crate) fn can_receive(self) -> bool {
        matches!(self, State::Established | State::FinWait1 | State::FinWait2)
    }
}

/// Something the application or the layer above should react to.
///
/// Events are queued rather than returned so that one call that causes
/// several (a SYN-ACK carrying a FIN) loses none; see [`super::Subflow::poll_event`].
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
    /// An ICMP error ended the handshake, or retransmissions gave up after
    /// one was believed (see `Subflow::handle_unreachable`): what to tell
    /// the application instead of a timeout.
    Unreachable(mptun_wire::icmp::Unreachable),
    /// The connection reached CLOSED after an orderly close.
    Closed,
}

/// Describes a segment being emitted, for [`SegmentHook`].
///
/// The hook sees the segment before its options are final, so MPTCP can
/// attach the DSS mapping that matches exactly these bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentMeta {
    /// Sequence number of the first byte (or of the SYN/FIN).
    pub seq: Seq,
    /// Payload bytes.
    pub len: u32,
    /// The segment's flags (SYN, FIN, RST, ACK, PSH).
    pub flags: TcpFlags,
    /// A copy of something sent before (RTO, fast retransmit, loss probe,
    /// SYN retry): MPTCP must repeat the original mapping, not make a new one.
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
    /// Option bytes the hook adds to a data segment starting at `seq` that
    /// was sent before (a retransmission repeats its mapping's options).
    fn option_space_at(&self, _seq: Seq) -> usize {
        self.option_space(true)
    }
    /// Called for each emitted segment; may push options and return a
    /// receive window (bytes, unscaled) to advertise instead of the subflow's.
    fn on_emit(&mut self, _seg: &SegmentMeta, _opts: &mut TcpOptions) -> Option<u64> {
        None
    }
}

/// The no-op hook of plain TCP.
impl SegmentHook for () {}

/// A packet written by [`super::Subflow::poll_transmit`].
///
/// The bytes are in the caller's buffer (with [`super::TcpConfig::gather_payload`],
/// possibly only the headers, the payload in [`Self::tail`]); this says how
/// many and where they go, so the driver needs no parsing to route them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written to the output buffer: a whole IP packet, or its
    /// headers when [`Self::tail`] holds the payload.
    pub len: usize,
    /// The payload not written to the buffer, to follow its `len` bytes:
    /// the packet is `len + tail.len()` bytes long. Empty unless
    /// [`super::TcpConfig::gather_payload`] is on.
    pub tail: super::Tail,
    /// Earliest departure time (EDT): `now`, or for paced data up to
    /// [`super::TcpConfig::pacing_horizon`] later (the driver holds it).
    pub departure: Instant,
    /// Payload bytes per wire segment when the packet is a TSO super-segment
    /// (as quinn's `Transmit::segment_size` is for UDP GSO): the packet
    /// carries several segments' consecutive data behind one header, and
    /// whatever puts it on a wire cuts it there (`mptun_wire::gso`), the
    /// header replicated, sequence numbers advanced, FIN and PSH on the last
    /// piece only. `None`: an ordinary packet.
    pub segment_size: Option<usize>,
    /// Our address and port (the packet's source).
    pub src: SocketAddr,
    /// The peer's address and port (the packet's destination).
    pub dst: SocketAddr,
    /// The TCP checksum holds only the pseudo-header sum, for the device
    /// to complete ([`super::TcpConfig::checksum_offload`]): a device that
    /// cannot must have it completed first (`mptun_wire::gso::complete_checksum`).
    pub checksum_partial: bool,
}

impl Transmit {
    /// Bytes of the whole IP packet: the buffer's and the tail's.
    pub fn packet_len(&self) -> usize {
        self.len + self.tail.len()
    }

    /// Copies the tail behind the headers in `out`, the buffer
    /// `poll_transmit` wrote into (it has room: a packet is emitted only
    /// into a buffer that would hold it whole), and returns the whole
    /// packet's length: for a consumer that wants the packet in one piece.
    pub fn assemble(&self, out: &mut [u8]) -> usize {
        let n = self.packet_len();
        self.tail.copy_to(&mut out[self.len..n]);
        n
    }
}

/// A snapshot like Linux's `TCP_INFO`, for reports and traces.
///
/// Field names follow `struct tcp_info` so a simulator report reads like
/// `ss -ti` output and can be compared with the kernel's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpInfo {
    /// Connection state.
    pub state: State,
    /// Congestion-avoidance state (Open, Disorder, Recovery, Loss).
    pub ca_state: CaState,
    /// Congestion window, in segments.
    pub cwnd: u32,
    /// Slow-start threshold, in segments.
    pub ssthresh: u32,
    /// Payload bytes per data segment now.
    pub mss: u32,
    /// Path MTU the segments are cut for (Linux `tcpi_pmtu`); 0 when the
    /// device MTU is unknown.
    pub pmtu: u32,
    /// Smoothed RTT (zero before the first sample).
    pub srtt: Duration,
    /// RTT variation.
    pub rttvar: Duration,
    /// Minimum RTT seen (zero before the first sample).
    pub min_rtt: Duration,
    /// Current retransmission timeout, backoff included.
    pub rto: Duration,
    /// Pacing rate, bytes per second.
    pub pacing_rate: u64,
    /// Segments sent and not cumulatively acknowledged.
    pub packets_out: u32,
    /// Of those, SACKed.
    pub sacked_out: u32,
    /// Of those, marked lost and not yet retransmitted.
    pub lost_out: u32,
    /// Retransmissions in flight.
    pub retrans_out: u32,
    /// Payload bytes cumulatively acknowledged.
    pub bytes_acked: u64,
    /// Payload bytes received in order.
    pub bytes_received: u64,
    /// Payload bytes sent once (retransmissions excluded).
    pub bytes_sent: u64,
    /// Payload bytes retransmitted.
    pub bytes_retrans: u64,
    /// Peer's window, scaled, in bytes.
    pub snd_wnd: u32,
    /// Window still open from what we last advertised, in bytes.
    pub rcv_wnd: u32,
    /// Send-buffer limit (autotuned or fixed), bytes.
    pub send_buffer: usize,
    /// Receive-buffer limit (autotuned or fixed), bytes.
    pub recv_buffer: usize,
    /// The last window was limited by cwnd, not by the application or rwnd.
    pub cwnd_limited: bool,
    /// Why slow start ended by the controller's own decision (HyStart's
    /// ACK train or delay) and the cwnd then: what Linux reports only as
    /// `TcpExtTCPHystart*` counters, here per subflow so a real-packet run
    /// (`mptun lab hystart`) can tell the exits apart as the simulator does.
    pub slow_start_exit: Option<mptun_cc::SlowStartExit>,
    /// When data was last sent (Linux `lsndtime`), new or retransmitted.
    pub last_data_send: Option<Instant>,
    /// When an ACK last acknowledged new data.
    pub last_ack_recv: Option<Instant>,
    /// Delivery rate, bytes per second (Linux `tcpi_delivery_rate`, from
    /// `tcp_rate.c`'s samples): the last sample not app-limited, or the best
    /// app-limited one; 0 before the first. For schedulers that weigh what
    /// a path delivers rather than what its window allows.
    pub delivery_rate: u64,
    /// That sample was app-limited (`tcpi_delivery_rate_app_limited`).
    pub delivery_rate_app_limited: bool,
    /// Packets delivered, ACKed or SACKed (`tcpi_delivered`).
    pub delivered: u64,
    /// Packets marked lost (`tcpi_lost` counts those outstanding; this is
    /// Linux's cumulative `tp->lost`).
    pub lost: u64,
    /// BBR's model when the controller is BBR (`ss -ti`'s `bbr:(...)`).
    pub bbr: Option<mptun_cc::BbrInfo>,
    /// The controller's name (`tcpi_ca_name` as `ss -ti` prints it: `cubic`, `bbr`...).
    pub cc: &'static str,
}

/// What a subflow made of one incoming segment
/// ([`Subflow::handle_segment`](super::Subflow::handle_segment)).
///
/// Everything a segment carries beyond TCP (MPTCP options: mappings,
/// DATA_ACKs, DATA_FIN, address signals, MP_PRIO, MP_FASTCLOSE) may change
/// connection state only when the segment was [`Verdict::Accepted`]: an
/// attacker who knows only the 4-tuple cannot get a segment accepted without
/// also guessing a sequence number inside the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "options of a segment that was not accepted must not be acted on"]
pub enum Verdict {
    /// Passed the sequence check (RFC 9293 3.10.7.4), the RST and SYN checks
    /// (RFC 5961) and the ACK check; its ACK was processed. In SYN-SENT: a SYN
    /// or a SYN-ACK that acknowledges our SYN.
    Accepted,
    /// Unacceptable (outside the window, challenged, bad or missing ACK, or
    /// the subflow is closed): only answered, as TCP says, never acted on.
    Dropped,
    /// An acceptable RST: the subflow is closed.
    Reset,
}
