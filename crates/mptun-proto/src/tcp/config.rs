//! Per-subflow tunables, with Linux's defaults so a run compares one to one
//! with the kernel's TCP.

use mptun_cc::PacerKind;
use mptun_cc::{Algorithm, CubicConfig};
use mptun_time::Duration;

/// Ethernet MTU (Linux `ETH_DATA_LEN`).
const ETH_DATA_LEN: u16 = 1500;
/// Linux `TCP_RTO_MIN` (HZ/5); also the floor of the MPTCP-level timers.
pub(crate) const TCP_RTO_MIN: Duration = Duration::from_millis(200);
/// Linux `TCP_RTO_MAX`; also the ceiling of the MPTCP-level backoffs.
pub(crate) const TCP_RTO_MAX: Duration = Duration::from_secs(120);
/// Linux `TCP_TIMEOUT_INIT` (RFC 6298 2.1); also the DATA_FIN interval
/// when no subflow has an RTO to offer.
pub(crate) const TCP_TIMEOUT_INIT: Duration = Duration::from_secs(1);
/// Linux `TCP_DELACK_MIN`.
const TCP_DELACK_MIN: Duration = Duration::from_millis(40);
/// Linux `TCP_TIMEWAIT_LEN`.
const TCP_TIMEWAIT_LEN: Duration = Duration::from_secs(60);
/// Linux `TCP_INIT_CWND` (RFC 6928).
pub(crate) const TCP_INIT_CWND: u32 = 10;
/// Linux `net.ipv4.tcp_syn_retries`.
const TCP_SYN_RETRIES: u32 = 6;
/// Linux `net.ipv4.tcp_retries2`.
const TCP_RETRIES2: u32 = 15;
/// Linux `net.ipv4.tcp_reordering`.
const TCP_REORDERING: u32 = 3;
/// Linux `net.ipv4.tcp_invalid_ratelimit` (500 ms).
const TCP_INVALID_RATELIMIT: Duration = Duration::from_millis(500);
/// Linux `net.ipv4.tcp_challenge_ack_limit` before 6.0 (1000 a second).
const TCP_CHALLENGE_ACK_LIMIT: u32 = 1000;
/// Linux `net.ipv4.ip_default_ttl`.
const IPDEFTTL: u8 = 64;
/// Linux `net.ipv4.tcp_base_mss`: where packetization-layer PMTUD starts
/// after a black hole.
const TCP_BASE_MSS: u16 = 1024;
/// Linux `net.ipv4.tcp_probe_interval` (600 s): how long a finished MTU
/// search stands before the path is probed again.
const TCP_PROBE_INTERVAL: Duration = Duration::from_secs(600);
/// Linux `net.ipv4.tcp_probe_threshold`: the search stops once its range
/// is narrower than this many bytes.
const TCP_PROBE_THRESHOLD: u32 = 8;

/// Buffer sizing: a fixed size (like setting `SO_SNDBUF`/`SO_RCVBUF`, which
/// turns Linux's autotuning off) or autotuned between bounds.
///
/// Sizes count payload bytes. Linux doubles the `setsockopt` value to cover
/// skb overhead and then advertises roughly half of it, so `Fixed(n)` here
/// behaves like `setsockopt(SO_RCVBUF, n)` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferSize {
    /// Exactly this many bytes, never tuned.
    Fixed(usize),
    /// Start at `initial` and let autotuning grow the buffer up to `max`.
    Auto {
        /// Starting size (Linux `tcp_rmem[1]`/`tcp_wmem[1]`).
        initial: usize,
        /// Ceiling (Linux `tcp_rmem[2]`/`tcp_wmem[2]`).
        max: usize,
    },
}

impl BufferSize {
    /// The starting size.
    pub fn initial(self) -> usize {
        match self {
            BufferSize::Fixed(n) => n,
            BufferSize::Auto { initial, .. } => initial,
        }
    }
    /// The ceiling autotuning may reach.
    pub fn max(self) -> usize {
        match self {
            BufferSize::Fixed(n) => n,
            BufferSize::Auto { max, .. } => max,
        }
    }
    /// Whether autotuning may change the size.
    pub fn is_auto(self) -> bool {
        matches!(self, BufferSize::Auto { .. })
    }
}

/// Configuration of one TCP subflow.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// MSS we announce (payload bytes per segment): MTU 1500 − 40 for IPv4.
    pub mss: u16,
    /// Linux `tcp_rmem` / `SO_RCVBUF`.
    pub recv_buffer: BufferSize,
    /// Linux `tcp_wmem` / `SO_SNDBUF`.
    pub send_buffer: BufferSize,
    /// Offer RFC 7323 window scaling (needed for windows over 64 KiB).
    pub window_scaling: bool,
    /// Offer RFC 7323 timestamps (RTT samples on every ACK, PAWS, and the
    /// receiver-side RTT that drives receive-buffer autotuning).
    pub timestamps: bool,
    /// Offer RFC 2018 SACK (recovery without a timeout for most losses).
    pub sack: bool,
    /// Nagle's algorithm (off by default: an MPTCP stack feeding bulk data wants no delay).
    pub nagle: bool,
    /// Congestion control (CUBIC by default, as in Linux).
    pub congestion_control: Algorithm,
    /// A controller from outside `mptun-cc`, built for every subflow in
    /// place of `congestion_control` when set.
    pub controller: Option<std::sync::Arc<dyn mptun_cc::ControllerFactory>>,
    /// CUBIC and HyStart tunables (Linux module parameters), used when
    /// `congestion_control` is CUBIC.
    pub cubic: CubicConfig,
    /// How segments are spaced out: EDT timestamps (Linux `fq`), a
    /// quantum pacer, or none.
    pub pacer: PacerKind,
    /// How far ahead of `now` a paced segment may be built and stamped
    /// with its departure time ([`crate::tcp::Transmit::departure`]), so one
    /// wake-up produces many segments and a driver with a departure queue
    /// (Linux's `fq` under EDT) spaces them. Zero (the default): a segment
    /// is built only once its time has come, for drivers without such a
    /// queue (the simulator, tests).
    pub pacing_horizon: Duration,
    /// `SO_MAX_PACING_RATE` in bytes per second.
    pub max_pacing_rate: Option<u64>,
    /// Initial congestion window in segments (IW10, RFC 6928).
    pub initial_cwnd: u32,
    /// Linux `TCP_RTO_MIN`.
    pub rto_min: Duration,
    /// Linux `TCP_RTO_MAX`.
    pub rto_max: Duration,
    /// Initial RTO before any RTT sample (RFC 6298: 1 s).
    pub rto_initial: Duration,
    /// SYN retries before giving up (Linux `tcp_syn_retries` = 6).
    pub syn_retries: u32,
    /// Data retransmission timeouts in a row before the subflow is declared
    /// dead (Linux `tcp_retries2` = 15).
    pub max_retries: u32,
    /// Delayed-ACK timeout (Linux `TCP_DELACK_MIN` = 40 ms).
    pub delayed_ack: Duration,
    /// TIME_WAIT duration (Linux `TCP_TIMEWAIT_LEN` = 60 s).
    pub time_wait: Duration,
    /// Duplicate-ACK / SACK threshold for fast retransmit (`tcp_reordering` = 3).
    pub dup_thresh: u32,
    /// IP TTL / hop limit of our packets.
    pub ttl: u8,
    /// The device completes TCP checksums (a TUN with `IFF_VNET_HDR`
    /// offload, a NIC's `CHECKSUM_PARTIAL`): packets leave with the
    /// pseudo-header sum in the field and [`super::Transmit::checksum_partial`]
    /// set, and their payload is never summed here. The runtime sets it when
    /// every device of the stack can; a packet that reaches a device
    /// without it is completed on the way (`mptun_wire::gso::complete_checksum`).
    pub checksum_offload: bool,
    /// Data segments leave with only their headers in the output buffer
    /// and their payload as zero-copy pieces of the send buffer
    /// ([`super::Transmit::tail`]), for a driver whose devices write them
    /// behind the headers (`writev`): the payload is then copied once, by
    /// the device, instead of twice. Only with [`Self::checksum_offload`]
    /// (nothing here reads the payload then); a payload over more than
    /// [`super::TAIL_PARTS`] pieces is copied in instead. The runtime
    /// sets it when every device can; the simulator never does.
    pub gather_payload: bool,
    /// Least spacing of ACKs that answer invalid segments: challenge ACKs and
    /// duplicate ACKs for bare out-of-window segments (Linux
    /// `tcp_invalid_ratelimit`, 500 ms), so that two endpoints that disagree
    /// cannot ping-pong ACKs and an attacker gains little from provoking them.
    pub invalid_ratelimit: Duration,
    /// Most challenge ACKs sent in one second (RFC 5961 7; Linux
    /// `tcp_challenge_ack_limit`, here per subflow and without Linux's
    /// randomisation). `u32::MAX` turns the limit off.
    pub challenge_ack_limit: u32,
    /// Never put bytes of two `send` calls in one segment. MPTCP subflows set
    /// it so each segment lies inside one DSS mapping.
    pub segment_at_write_boundaries: bool,
    /// TCP segmentation offload: new data leaves in super-segments of up
    /// to 64 KiB ([`crate::tcp::Transmit::segment_size`]) that the device
    /// cuts into wire segments, sized like Linux's `tcp_tso_autosize`. A
    /// super-segment never exceeds the buffer `poll_transmit` is given, so a
    /// driver passing an MTU-sized buffer gets wire segments whatever this
    /// says; off, every data segment is built on its own.
    pub tso: bool,
    /// Packetization-layer path-MTU discovery (RFC 4821; Linux
    /// `net.ipv4.tcp_mtu_probing`): 0 off, 1 only after a black hole is
    /// detected (full-size segments time out again and again), 2 always.
    /// Runs only on subflows that know their device MTU
    /// ([`crate::tcp::Subflow::set_device_mtu`]).
    pub mtu_probing: u8,
    /// MSS a black hole falls back to (Linux `tcp_base_mss`).
    pub base_mss: u16,
    /// Re-probe a finished search after this long (Linux `tcp_probe_interval`).
    pub probe_interval: Duration,
    /// Stop the search once its range is narrower (Linux `tcp_probe_threshold`).
    pub probe_threshold: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: ETH_DATA_LEN - super::IPV4_TCP_HEADER_LEN as u16,
            recv_buffer: BufferSize::Auto { initial: 128 * 1024, max: 6 * 1024 * 1024 },
            send_buffer: BufferSize::Auto { initial: 64 * 1024, max: 4 * 1024 * 1024 },
            window_scaling: true,
            timestamps: true,
            sack: true,
            nagle: false,
            congestion_control: Algorithm::Cubic,
            controller: None,
            cubic: CubicConfig::default(),
            pacer: PacerKind::Edt,
            pacing_horizon: Duration::ZERO,
            max_pacing_rate: None,
            initial_cwnd: TCP_INIT_CWND,
            rto_min: TCP_RTO_MIN,
            rto_max: TCP_RTO_MAX,
            rto_initial: TCP_TIMEOUT_INIT,
            syn_retries: TCP_SYN_RETRIES,
            max_retries: TCP_RETRIES2,
            delayed_ack: TCP_DELACK_MIN,
            time_wait: TCP_TIMEWAIT_LEN,
            dup_thresh: TCP_REORDERING,
            ttl: IPDEFTTL,
            checksum_offload: false,
            gather_payload: false,
            invalid_ratelimit: TCP_INVALID_RATELIMIT,
            challenge_ack_limit: TCP_CHALLENGE_ACK_LIMIT,
            segment_at_write_boundaries: false,
            tso: true,
            mtu_probing: 1,
            base_mss: TCP_BASE_MSS,
            probe_interval: TCP_PROBE_INTERVAL,
            probe_threshold: TCP_PROBE_THRESHOLD,
        }
    }
}
