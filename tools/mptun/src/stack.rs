//! Setting up and ending what a command's stack runs on, shared by
//! `send`, `serve`, the proxies and the lab peers: the socket options of
//! mptun's connections, mptun's stack over TUN devices, the runtime, the
//! end of an mptun stack, and the message of a failed connect on either
//! stack.

use anyhow::{anyhow, Context, Result};
use mptun::{Algorithm, PacerKind, PmConfig, Policy, Stack, StreamOptions};
use mptun_cc::HystartRoundStart;
use std::net::SocketAddr;
use std::path::Path;

use crate::pathspec::{self, PathSpec};

/// A command's socket options for mptun's connections, checked: the same
/// settings make the stack's defaults (what its listeners accept with) and
/// the options of the connections it dials. `None` keeps what the options
/// they are applied to have.
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamSettings {
    /// Plain TCP instead of MPTCP.
    pub(crate) no_mptcp: bool,
    pub(crate) cc: Option<Algorithm>,
    pub(crate) sndbuf: Option<usize>,
    pub(crate) rcvbuf: Option<usize>,
    /// `SO_MAX_PACING_RATE` per subflow, bytes per second.
    pub(crate) pacing: Option<u64>,
    pub(crate) pacer: Option<PacerKind>,
    pub(crate) scheduler: Option<Policy>,
    /// HyStart's round start (CUBIC).
    pub(crate) round_start: Option<HystartRoundStart>,
    pub(crate) pm: Option<PmConfig>,
}

impl StreamSettings {
    /// `o` with these settings: the stack's defaults when `o` is
    /// [`StreamOptions::default`], a dialed connection's when it is the
    /// stack's own.
    pub(crate) fn apply(&self, mut o: StreamOptions) -> StreamOptions {
        o = o.mptcp(!self.no_mptcp);
        if let Some(a) = self.cc {
            o = o.congestion_control(a);
        }
        if let Some(b) = self.sndbuf {
            o = o.send_buffer_size(b);
        }
        if let Some(b) = self.rcvbuf {
            o = o.recv_buffer_size(b);
        }
        if let Some(r) = self.pacing {
            o = o.max_pacing_rate(Some(r));
        }
        if let Some(p) = self.pacer {
            o = o.pacer(p);
        }
        let cfg = o.config_mut();
        if let Some(p) = self.scheduler {
            cfg.mptcp.scheduler = p;
        }
        if let Some(r) = self.round_start {
            cfg.tcp.cubic.round_start = r;
        }
        if let Some(pm) = &self.pm {
            cfg.mptcp.pm = pm.clone();
        }
        o
    }
}

/// `--cc NAME` for mptun's stack.
pub(crate) fn parse_cc(name: &str) -> Result<Algorithm> {
    name.parse().map_err(|e| anyhow!("--cc: {e}"))
}

/// mptun's stack over freshly created TUN devices for `paths` (inside the
/// runtime): `defaults` become its connections' defaults, so those it
/// dials and those its listeners accept both run them. `gro`: see
/// [`mptun::StackBuilder::gro`]; `pcap`: the file `--pcap` records into.
pub(crate) fn build_stack(
    paths: &[PathSpec],
    defaults: &StreamOptions,
    gro: bool,
    pcap: Option<&Path>,
) -> Result<Stack> {
    let devs = pathspec::create_tuns(paths)?;
    let cfg = defaults.config().clone();
    let mut b = Stack::builder().tcp_config(cfg.tcp).mptcp_config(cfg.mptcp).gro(gro);
    for (addr, dev) in devs {
        b = b.path(addr, dev);
    }
    if let Some(p) = pcap {
        b = b.pcap(p);
    }
    b.build().map_err(|e| match pcap {
        Some(p) => anyhow!("cannot start the stack (--pcap {}): {e}", p.display()),
        None => anyhow!("cannot start the stack: {e}"),
    })
}

/// The tokio runtime `send`, `serve` and the proxies run on: one thread,
/// where the test's I/O task (a proxy's relays) and mptun's stack driver
/// take turns (a file's disk I/O and hashing run on a thread of their own,
/// `xfer::bulk::pipeline`). The stack's driver is one task whatever the runtime,
/// so a proxy's many connections share it either way.
///
/// On a runtime with two workers the two tasks sat on different threads,
/// or moved between them, and every hand-over between them (data written,
/// data arrived, window opened) and every device readiness woke the other
/// worker: a futex or eventfd wake-up and an IPI each, which cost more
/// than the second core gave.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// Ends an mptun stack before its `block_on` returns: on the one-thread
/// runtime nothing polls the stack's driver afterwards, so what it still
/// holds (packets in its departure queue, the resets of connections left
/// open after an error, or of a proxy's relays still open after its stop)
/// would never leave, and the peer would wait for them.
pub(crate) async fn end_stack(stack: Option<mptun::Stack>) {
    if let Some(s) = stack {
        s.shutdown().await;
    }
}

/// One line with the cause of a failed connect.
pub(crate) fn connect_error(to: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind as K;
    let why = match e.kind() {
        K::ConnectionRefused => "connection refused".to_string(),
        K::TimedOut => "timed out".to_string(),
        K::HostUnreachable => "host unreachable".to_string(),
        K::NetworkUnreachable => "network unreachable".to_string(),
        K::AddrNotAvailable => format!("no local address for it ({e})"),
        _ => e.to_string(),
    };
    anyhow!("cannot connect to {to}: {why}")
}
