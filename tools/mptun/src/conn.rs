//! One connection, whichever stack carries it: an mptun stream over TUN or
//! a kernel socket, with the same byte stream and the same [`Probe`] of its
//! subflows, so the transfer code and the report never ask which.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::probe::{Probe, SubflowProbe};

/// Linux's name of an mptun TCP state.
fn state_name(s: mptun::TcpState) -> &'static str {
    use mptun::TcpState as S;
    match s {
        S::Closed => "CLOSE",
        S::SynSent => "SYN_SENT",
        S::SynReceived => "SYN_RECV",
        S::Established => "ESTABLISHED",
        S::FinWait1 => "FIN_WAIT1",
        S::FinWait2 => "FIN_WAIT2",
        S::CloseWait => "CLOSE_WAIT",
        S::Closing => "CLOSING",
        S::LastAck => "LAST_ACK",
        S::TimeWait => "TIME_WAIT",
    }
}

/// A connected stream of either stack.
pub(crate) enum Conn {
    Mptun(mptun::MptcpStream),
    Kernel(tokio::net::TcpStream),
}

impl Conn {
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Conn::Mptun(s) => s.local_addr().ok(),
            Conn::Kernel(s) => s.local_addr().ok(),
        }
    }

    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            Conn::Mptun(s) => s.peer_addr().ok(),
            Conn::Kernel(s) => s.peer_addr().ok(),
        }
    }

    /// Which stack carries it, for reports.
    pub(crate) fn stack_name(&self) -> &'static str {
        match self {
            Conn::Mptun(_) => "mptun",
            Conn::Kernel(_) => "kernel",
        }
    }

    pub(crate) fn probe(&self) -> Probe {
        match self {
            Conn::Kernel(s) => crate::kernel::probe(s),
            Conn::Mptun(s) => {
                let Ok(info) = s.info() else { return Probe { mode: "tcp", ..Default::default() } };
                let subflows = info
                    .conn
                    .subflows
                    .iter()
                    .map(|sf| {
                        let mss = u64::from(sf.tcp.mss.max(1));
                        SubflowProbe {
                            id: sf.id,
                            local: Some(sf.local),
                            remote: Some(sf.remote),
                            bytes_acked: sf.tcp.bytes_acked,
                            bytes_received: sf.tcp.bytes_received,
                            bytes_retrans: sf.tcp.bytes_retrans,
                            retrans_segs: sf.tcp.bytes_retrans.div_ceil(mss),
                            cwnd: u64::from(sf.tcp.cwnd),
                            mss,
                            snd_wnd: u64::from(sf.tcp.snd_wnd),
                            pmtu: u64::from(sf.tcp.pmtu),
                            srtt_us: sf.tcp.srtt.as_micros() as u64,
                            rttvar_us: sf.tcp.rttvar.as_micros() as u64,
                            pacing_rate: sf.tcp.pacing_rate,
                            bbr: sf.tcp.bbr.map(|b| (b.bw, b.min_rtt_us)),
                            penalized: sf.penalized,
                            state: state_name(sf.tcp.state),
                            withdrawn: sf.withdrawn,
                            established: sf.tcp.state.is_synchronized()
                                || sf.tcp.bytes_acked > 0
                                || sf.tcp.bytes_received > 0,
                        }
                    })
                    .collect::<Vec<_>>();
                // The total is the sum of its parts (the per-subflow figures
                // the report lists), not a separately kept counter.
                let retrans_segs = subflows.iter().map(|s| s.retrans_segs).sum();
                Probe { mode: if info.is_mptcp() { "mptcp" } else { "tcp" }, subflows, retrans_segs }
            }
        }
    }

    /// `SO_SNDBUF` and `SO_RCVBUF` as a getsockopt would read them now
    /// (mptun: the first subflow's send and receive buffer limits).
    pub(crate) fn buffers(&self) -> (u64, u64) {
        match self {
            Conn::Kernel(s) => {
                let r = socket2::SockRef::from(s);
                (r.send_buffer_size().unwrap_or(0) as u64, r.recv_buffer_size().unwrap_or(0) as u64)
            }
            Conn::Mptun(s) => s
                .info()
                .ok()
                .and_then(|i| i.conn.subflows.first().map(|f| (f.tcp.send_buffer as u64, f.tcp.recv_buffer as u64)))
                .unwrap_or((0, 0)),
        }
    }

    /// Of the `written` bytes this side wrote, how many the peer has
    /// acknowledged at the connection level (MPTCP data ACK; TCP ACK after
    /// a fallback).
    pub(crate) fn acked(&self, written: u64) -> u64 {
        let a = match self {
            Conn::Kernel(s) => match crate::kernel::unacked(s) {
                Some(q) => written.saturating_sub(q),
                None => crate::kernel::probe(s).subflows.iter().map(|s| s.bytes_acked).sum(),
            },
            Conn::Mptun(s) => match s.info() {
                Ok(i) if i.is_mptcp() => i.conn.bytes_acked,
                Ok(i) => i.conn.subflows.first().map_or(0, |s| s.tcp.bytes_acked),
                Err(_) => written,
            },
        };
        a.min(written)
    }

    /// The scheduler the connection runs, from its info (mptun; the
    /// kernel's is its sysctl, not per connection).
    pub(crate) fn scheduler(&self) -> Option<String> {
        match self {
            Conn::Kernel(_) => None,
            Conn::Mptun(s) => s.info().ok().map(|i| i.conn.scheduler.to_string()),
        }
    }

    /// Time the connection's data waited for the peer's receive window
    /// (mptun's connection-level chrono; the kernel keeps one per subflow only).
    pub(crate) fn rwnd_limited(&self) -> Option<std::time::Duration> {
        match self {
            Conn::Kernel(_) => None,
            Conn::Mptun(s) => s.info().ok().map(|i| i.conn.rwnd_limited),
        }
    }

    /// The congestion control in use.
    pub(crate) fn congestion(&self) -> String {
        match self {
            Conn::Kernel(s) => crate::kernel::congestion(s).unwrap_or_else(|| "unknown".into()),
            Conn::Mptun(s) => s.stack().stream_options().config().tcp.congestion_control.to_string(),
        }
    }
}

/// Counters of a stack since a baseline: mptun's own (the stack's, which
/// for a one-connection test are the connection's), or the namespace's
/// kernel counters.
pub(crate) enum CounterSource {
    /// The stack and its counters when the test began.
    Mptun(mptun::Stack, BTreeMap<String, u64>),
    Kernel(BTreeMap<String, u64>),
}

fn mptun_counters(s: &mptun::Stack) -> BTreeMap<String, u64> {
    s.counters().iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

impl CounterSource {
    /// The namespace's kernel counters from now on.
    pub(crate) fn kernel() -> Self {
        CounterSource::Kernel(crate::kernel::netstat())
    }

    /// `stack`'s counters from now on (a server's stack serves many tests:
    /// each reports its own).
    pub(crate) fn mptun(stack: mptun::Stack) -> Self {
        let base = mptun_counters(&stack);
        CounterSource::Mptun(stack, base)
    }

    /// The mptun stack counted, to end it when the test is over.
    pub(crate) fn stack(&self) -> Option<mptun::Stack> {
        match self {
            CounterSource::Mptun(s, _) => Some(s.clone()),
            CounterSource::Kernel(_) => None,
        }
    }

    /// The counters that grew since the baseline, with their increase.
    pub(crate) fn read(&self) -> BTreeMap<String, u64> {
        match self {
            CounterSource::Mptun(s, before) => crate::kernel::netstat_delta(before, &mptun_counters(s)),
            CounterSource::Kernel(before) => crate::kernel::netstat_delta(before, &crate::kernel::netstat()),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Mptun(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Kernel(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Mptun(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Kernel(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Mptun(s) => Pin::new(s).poll_flush(cx),
            Conn::Kernel(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Mptun(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Kernel(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
