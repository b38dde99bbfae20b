//! Per-stream options, the runtime's `setsockopt`: they become the
//! [`ConnConfig`] the connection is created with.
//!
//! They are set before connecting (like `tokio::net::TcpSocket`) because the
//! core fixes most of a connection's configuration at creation: buffer sizes
//! decide the window scale announced in the SYN, MP_CAPABLE is offered or
//! not in the SYN, and the congestion controller is built with each subflow.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use mptun_cc::{Algorithm, PacerKind};
use mptun_proto::sched::Scheduler;
use mptun_proto::tcp::{BufferSize, TcpConfig};
use mptun_proto::{ConnConfig, MptcpConfig};
use mptun_time::Duration;

/// Builds a connection's scheduler (each connection owns its own state).
pub type SchedulerFactory = Arc<dyn Fn() -> Box<dyn Scheduler> + Send + Sync>;

/// The registry (`net.mptcp.scheduler` names): a factory for the shipped
/// scheduler called `name` (`default`, `minrtt`, `roundrobin`,
/// `redundant`, `blest`, `ecf`, `first`, `backup`, and the penalty
/// policies), for [`StreamOptions::scheduler`] or
/// [`crate::MptcpListener::set_scheduler`]; the error lists the names.
pub fn scheduler_by_name(name: &str) -> Result<impl Fn() -> Box<dyn Scheduler> + Send + Sync + 'static, String> {
    let policy: mptun_proto::sched::Policy = name.parse()?;
    Ok(move || mptun_proto::sched::new_scheduler(policy, mptun_proto::sched::PenaltyConfig::default()))
}

/// Options for [`crate::MptcpStream::connect_with`].
#[derive(Clone)]
pub struct StreamOptions {
    pub(crate) cfg: ConnConfig,
    pub(crate) bind: Option<SocketAddr>,
    pub(crate) scheduler: Option<SchedulerFactory>,
}

impl StreamOptions {
    /// Options starting from `cfg` (the stack's defaults come from
    /// [`crate::Stack::stream_options`]).
    pub fn from_config(cfg: ConnConfig) -> Self {
        StreamOptions { cfg, bind: None, scheduler: None }
    }

    /// Offer MPTCP (the default) or speak plain TCP on this socket, like
    /// choosing `IPPROTO_MPTCP` or `IPPROTO_TCP` at `socket()`. A peer that
    /// does not answer MP_CAPABLE gets plain TCP either way (fallback).
    pub fn mptcp(mut self, enabled: bool) -> Self {
        self.cfg.mptcp.enabled = enabled;
        self
    }

    /// `SO_SNDBUF`: a fixed send buffer of `bytes` for the connection and
    /// each subflow, which, as on Linux, turns send-buffer autotuning off.
    pub fn send_buffer_size(mut self, bytes: usize) -> Self {
        let b = BufferSize::Fixed(bytes.max(1));
        self.cfg.tcp.send_buffer = b;
        self.cfg.mptcp.send_buffer = b;
        self
    }

    /// `SO_RCVBUF`: a fixed receive buffer (autotuning off); under MPTCP the
    /// connection-level buffer is the shared window.
    pub fn recv_buffer_size(mut self, bytes: usize) -> Self {
        let b = BufferSize::Fixed(bytes.max(1));
        self.cfg.tcp.recv_buffer = b;
        self.cfg.mptcp.recv_buffer = b;
        self
    }

    /// `TCP_CONGESTION` for every subflow.
    pub fn congestion_control(mut self, algorithm: Algorithm) -> Self {
        self.cfg.tcp.congestion_control = algorithm;
        self
    }

    /// `SO_MAX_PACING_RATE` per subflow, bytes per second (`None`: unlimited).
    pub fn max_pacing_rate(mut self, bytes_per_sec: Option<u64>) -> Self {
        self.cfg.tcp.max_pacing_rate = bytes_per_sec;
        self
    }

    /// How each subflow spaces its data segments. [`PacerKind::Edt`] (the
    /// default) is Linux's earliest-departure-time model since 4.20: every
    /// segment leaves `len / rate` after the previous one, so a small
    /// request never waits for more than its own share of the rate.
    /// [`PacerKind::Quantum`] is the `sch_fq` throttle before it, kept to
    /// measure what EDT fixed: a flow sends a quantum (2 × MTU) back to back
    /// and is then held for `quantum / rate`, which a request/response flow
    /// at a reduced rate pays as a stall of milliseconds once per quantum's
    /// worth of small packets (every ~20 requests at MTU 1500). [`PacerKind::None`] sends as soon as the windows allow, as
    /// Linux TCP does without `fq` or `SO_MAX_PACING_RATE`.
    pub fn pacer(mut self, pacer: PacerKind) -> Self {
        self.cfg.tcp.pacer = pacer;
        self
    }

    /// `TCP_NODELAY` (true disables Nagle's algorithm, the default here).
    pub fn nodelay(mut self, nodelay: bool) -> Self {
        self.cfg.tcp.nagle = !nodelay;
        self
    }

    /// The MPTCP packet scheduler (`net.mptcp.scheduler`, per socket): which
    /// subflow carries the next burst. Default: Linux's.
    pub fn scheduler(mut self, factory: impl Fn() -> Box<dyn Scheduler> + Send + Sync + 'static) -> Self {
        self.scheduler = Some(Arc::new(factory));
        self
    }

    /// `bind()` before `connect()`: the local address (one of the stack's
    /// paths) and port (0 picks an ephemeral one).
    pub fn bind(mut self, local: SocketAddr) -> Self {
        self.bind = Some(local);
        self
    }

    /// The underlying configuration, for what has no shortcut above.
    pub fn config_mut(&mut self) -> &mut ConnConfig {
        &mut self.cfg
    }

    /// The configuration the connection will get.
    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }

    /// Send-buffer room that wakes a blocked writer: half the initial
    /// buffer, at most 16 KiB.
    pub(crate) fn wake_space(cfg: &ConnConfig) -> usize {
        let initial = if cfg.mptcp.enabled {
            cfg.tcp.send_buffer.initial().min(cfg.mptcp.send_buffer.initial())
        } else {
            cfg.tcp.send_buffer.initial()
        };
        (initial / 2).clamp(1, 16 * 1024)
    }
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self::from_config(ConnConfig { tcp: runtime_tcp_config(), mptcp: MptcpConfig::default() })
    }
}

/// How far ahead of now the core builds paced segments in the runtime:
/// about what Linux's TCP small queues let sit in `fq` (1 ms of the pacing
/// rate), so one wake-up of the driver produces a millisecond of traffic
/// and the departure queue spaces it.
pub(crate) const PACING_HORIZON: Duration = Duration::from_millis(1);

/// The core's defaults as the runtime runs them: EDT with a pacing horizon
/// (the driver has a departure queue; the simulator has none).
pub(crate) fn runtime_tcp_config() -> TcpConfig {
    TcpConfig { pacing_horizon: PACING_HORIZON, ..TcpConfig::default() }
}

impl fmt::Debug for StreamOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamOptions")
            .field("cfg", &self.cfg)
            .field("bind", &self.bind)
            .field("scheduler", &self.scheduler.as_ref().map(|s| s().name()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_map_to_conn_config() {
        let o = StreamOptions::default()
            .send_buffer_size(1 << 20)
            .recv_buffer_size(2 << 20)
            .congestion_control(Algorithm::Reno)
            .max_pacing_rate(Some(12_500_000))
            .pacer(PacerKind::Quantum)
            .nodelay(false)
            .mptcp(false)
            .scheduler(|| Box::new(mptun_proto::sched::DefaultScheduler::new()))
            .bind("10.0.0.1:0".parse().unwrap());
        let c = o.config();
        assert_eq!(c.tcp.send_buffer, BufferSize::Fixed(1 << 20));
        assert_eq!(c.mptcp.send_buffer, BufferSize::Fixed(1 << 20));
        assert_eq!(c.tcp.recv_buffer, BufferSize::Fixed(2 << 20));
        assert_eq!(c.mptcp.recv_buffer, BufferSize::Fixed(2 << 20));
        assert_eq!(c.tcp.congestion_control, Algorithm::Reno);
        assert_eq!(c.tcp.max_pacing_rate, Some(12_500_000));
        assert_eq!(c.tcp.pacer, PacerKind::Quantum);
        assert!(c.tcp.nagle);
        assert!(!c.mptcp.enabled);
        assert_eq!(o.bind, Some("10.0.0.1:0".parse().unwrap()));
        assert!(o.scheduler.is_some());
        let d = StreamOptions::default();
        assert!(!d.config().tcp.nagle, "nodelay by default");
        assert!(d.config().mptcp.enabled, "MPTCP by default");
        assert_eq!(d.config().tcp.pacer, PacerKind::Edt, "EDT by default");
        assert_eq!(StreamOptions::wake_space(o.config()), 16 * 1024);
        assert_eq!(StreamOptions::wake_space(StreamOptions::default().send_buffer_size(1000).config()), 500);
    }
}
