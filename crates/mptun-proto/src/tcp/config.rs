//! Per-subflow tunables, with Linux's defaults so a run compares one to one
//! with the kernel's TCP.

use mptun_cc::PacerKind;
use mptun_cc::{Algorithm, CubicConfig};
use mptun_time::Duration;

/// Buffer sizing: a fixed size (like setting `SO_SNDBUF`/`SO_RCVBUF`, which
/// turns Linux's autotuning off) or autotuned between bounds.
///
/// Sizes count payload bytes. Linux doubles the `setsockopt` value to cover
/// skb overhead and then advertises roughly half of it, so `Fixed(n)` here
/// behaves like `setsockopt(SO_RCVBUF, n)` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferSize {
    Fixed(usize),
    Auto { initial: usize, max: usize },
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
    pub window_scaling: bool,
    pub timestamps: bool,
    pub sack: bool,
    /// Nagle's algorithm (off by default: an MPTCP stack feeding bulk data wants no delay).
    pub nagle: bool,
    /// Congestion control (CUBIC by default, as in Linux).
    pub congestion_control: Algorithm,
    /// CUBIC and HyStart tunables (Linux module parameters), used when
    /// `congestion_control` is CUBIC.
    pub cubic: CubicConfig,
    pub pacer: PacerKind,
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
    /// Never put bytes of two `send` calls in one segment. MPTCP subflows set
    /// it so each segment lies inside one DSS mapping.
    pub segment_at_write_boundaries: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1460,
            recv_buffer: BufferSize::Auto { initial: 128 * 1024, max: 6 * 1024 * 1024 },
            send_buffer: BufferSize::Auto { initial: 64 * 1024, max: 4 * 1024 * 1024 },
            window_scaling: true,
            timestamps: true,
            sack: true,
            nagle: false,
            congestion_control: Algorithm::Cubic,
            cubic: CubicConfig::default(),
            pacer: PacerKind::Edt,
            max_pacing_rate: None,
            initial_cwnd: 10,
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(120),
            rto_initial: Duration::from_secs(1),
            syn_retries: 6,
            max_retries: 15,
            delayed_ack: Duration::from_millis(40),
            time_wait: Duration::from_secs(60),
            dup_thresh: 3,
            ttl: 64,
            segment_at_write_boundaries: false,
        }
    }
}
