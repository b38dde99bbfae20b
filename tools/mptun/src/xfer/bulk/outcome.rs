//! What a finished test becomes: the [`Outcome`] both phases end with,
//! assembled with the start section into iperf3's [`Report`] (sums from the
//! two trailers, per-subflow shares, CPU percentages, counters).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::{SenderSubflow, Settings, Summary, BLKSIZE};
use crate::conn::Conn;
use crate::host::{uname, utilisation, CpuUse};
use crate::probe::Probe;
use crate::report::{
    self, http_date, Connected, Cpu, End, EndReceiver, EndSender, EndStream, HostPort, Interval, MptcpEnd, Report,
    Start, StartExtra, SubflowEnd, Sum, TestStart, Timestamp,
};
use crate::xfer::control::{Amount, HashKind, Request, Trailer};

/// Everything a finished test knows, before it becomes a [`Report`].
pub(super) struct Outcome {
    pub(super) sender: bool,
    pub(super) local: Trailer,
    pub(super) peer: Trailer,
    /// Local end of the data phase (sender: the receiver's trailer arrived).
    pub(super) local_elapsed: f64,
    /// This process's CPU time over its span of the test.
    pub(super) cpu: CpuUse,
    pub(super) final_probe: Probe,
    pub(super) counters: BTreeMap<String, u64>,
    pub(super) peer_summary: Summary,
    pub(super) congestion: String,
    /// Why the data ended before the amount asked for, if it did.
    pub(super) stopped: Option<String>,
    /// How the data was checked.
    pub(super) hash: HashKind,
}

pub(super) fn start_section(conn: &Conn, s: &Settings, req: &Request, sender: bool) -> Start {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (l, r) = (conn.local_addr(), conn.peer_addr());
    let probe = conn.probe();
    let (sndbuf, rcvbuf) = conn.buffers();
    let (duration, bytes) = match req.amount {
        Amount::DurationMs(ms) => (ms.div_ceil(1000), 0),
        Amount::Bytes(n) => (0, n),
    };
    Start {
        connected: vec![Connected {
            socket: 5,
            local_host: l.map_or("?".into(), |a| a.ip().to_string()),
            local_port: l.map_or(0, |a| a.port()),
            remote_host: r.map_or("?".into(), |a| a.ip().to_string()),
            remote_port: r.map_or(0, |a| a.port()),
        }],
        version: format!("mptun {}", env!("CARGO_PKG_VERSION")),
        system_info: uname(),
        timestamp: Timestamp { time: http_date(now), timesecs: now },
        connecting_to: s.connecting_to.as_ref().map(|(h, p)| HostPort { host: h.clone(), port: *p }),
        accepted_connection: r.filter(|_| !s.client).map(|a| HostPort { host: a.ip().to_string(), port: a.port() }),
        cookie: req.cookie.clone(),
        tcp_mss_default: probe.subflows.first().map_or(0, |f| f.mss),
        target_bitrate: 0,
        sock_bufsize: s.sock_bufsize,
        sndbuf_actual: sndbuf,
        rcvbuf_actual: rcvbuf,
        test_start: TestStart {
            protocol: "TCP".into(),
            num_streams: 1,
            blksize: BLKSIZE as u64,
            omit: 0,
            duration,
            bytes,
            blocks: 0,
            reverse: u8::from(req.reverse),
            tos: 0,
            target_bitrate: 0,
        },
        mptun: StartExtra {
            stack: conn.stack_name().into(),
            role: if s.client { "client" } else { "server" }.into(),
            sender,
            mode: probe.mode.into(),
            path_manager: s.path_manager.clone(),
            paths: s.paths.clone(),
            congestion: s.congestion.clone(),
            scheduler: conn.scheduler().unwrap_or_else(|| s.scheduler.clone()),
            file: req.file.clone().filter(|f| !f.is_empty()),
        },
    }
}

/// Each subflow's sending figures, in the probe's order: the largest cwnd
/// of the samples (or the current one, if larger), retransmissions, RTT.
pub(super) fn sender_subflows(probe: &Probe, intervals: &[Interval]) -> Vec<SenderSubflow> {
    let max_cwnd: HashMap<usize, u64> = intervals
        .iter()
        .flat_map(|i| i.streams.iter().flat_map(|s| s.subflows.iter()))
        .fold(HashMap::new(), |mut m, s| {
            let e = m.entry(s.id).or_insert(0);
            *e = (*e).max(s.snd_cwnd);
            m
        });
    probe
        .subflows
        .iter()
        .map(|s| SenderSubflow {
            local: s.local.map_or("?".into(), |a| a.to_string()),
            remote: s.remote.map_or("?".into(), |a| a.to_string()),
            retransmits: s.retrans_segs,
            bytes_retrans: s.bytes_retrans,
            max_snd_cwnd: max_cwnd.get(&s.id).copied().unwrap_or(0).max(s.cwnd * s.mss),
            rtt: s.srtt_us,
        })
        .collect()
}

pub(super) fn assemble(
    mut start: Start,
    intervals: Vec<Interval>,
    o: Outcome,
    sfmax: usize,
    file: Option<PathBuf>,
) -> Report {
    if let Some(f) = file {
        start.mptun.file = Some(f.display().to_string());
    }
    let (snd, rcv) = if o.sender { (&o.local, &o.peer) } else { (&o.peer, &o.local) };
    let snd_secs = if o.sender { o.local_elapsed } else { snd.elapsed_us as f64 / 1e6 };
    let rcv_secs = rcv.elapsed_us as f64 / 1e6;
    // iperf3's `sender` in every sum: whether this side sent the data.
    let sum_sent = Sum::new(0.0, snd_secs, snd.bytes, Some(u64::from(snd.retransmits)), o.sender);
    let sum_received = Sum::new(0.0, rcv_secs, rcv.bytes, None, o.sender);
    let sf_total: u64 =
        o.final_probe.subflows.iter().map(|s| if o.sender { s.bytes_acked } else { s.bytes_received }).sum();
    let mine = sender_subflows(&o.final_probe, &intervals);
    let subflows = o
        .final_probe
        .subflows
        .iter()
        .zip(&mine)
        .map(|(s, own)| {
            let b = if o.sender { s.bytes_acked } else { s.bytes_received };
            let (local, remote) = (own.local.clone(), own.remote.clone());
            // The receiver's own retransmissions and cwnd say nothing of the
            // data: take the sender's, found by its addresses (ours swapped).
            let figures = if o.sender {
                Some(own)
            } else {
                o.peer_summary.subflows.iter().find(|p| p.local == remote && p.remote == local)
            };
            let f = figures.cloned().unwrap_or_default();
            SubflowEnd {
                id: s.id,
                local,
                remote,
                bytes: b,
                share: if sf_total > 0 { b as f64 / sf_total as f64 } else { 0.0 },
                retransmits: f.retransmits,
                bytes_retrans: f.bytes_retrans,
                max_snd_cwnd: f.max_snd_cwnd,
                rtt: f.rtt,
                sender_figures: figures.is_some(),
                penalized: s.penalized,
                state: if s.established { s.state.into() } else { format!("never established ({})", s.state) },
            }
        })
        .collect();
    // Each side's CPU time over the span it was read in: ours over ours,
    // the peer's over its trailer's elapsed time, which is that span.
    let (wall, peer_wall) = (o.cpu.wall_us, o.peer.elapsed_us);
    let cpu = Cpu {
        host_total: utilisation(o.cpu.user_us + o.cpu.sys_us, wall),
        host_user: utilisation(o.cpu.user_us, wall),
        host_system: utilisation(o.cpu.sys_us, wall),
        remote_total: utilisation(o.peer.cpu_user_us + o.peer.cpu_sys_us, peer_wall),
        remote_user: utilisation(o.peer.cpu_user_us, peer_wall),
        remote_system: utilisation(o.peer.cpu_sys_us, peer_wall),
    };
    let peer_cc =
        if o.peer_summary.congestion.is_empty() { "unknown".to_string() } else { o.peer_summary.congestion.clone() };
    let (scc, rcc) = if o.sender { (o.congestion.clone(), peer_cc) } else { (peer_cc, o.congestion.clone()) };
    let mptcp = MptcpEnd {
        mode: o.final_probe.mode.into(),
        subflows_max: sfmax.max(o.peer_summary.subflows_max).max(o.final_probe.established()),
        hash: o.hash.name().into(),
        sha256_sent: report::hex(&snd.digest),
        sha256_received: report::hex(&rcv.digest),
        sha256_match: snd.digest == rcv.digest && snd.bytes == rcv.bytes,
        efficiency: None,
        counters: o.counters,
        peer_counters: o.peer_summary.counters,
        stopped: o.stopped,
    };
    let streams = vec![EndStream {
        sender: EndSender::new(sum_sent.clone(), &intervals),
        receiver: EndReceiver { socket: 5, sum: sum_received.clone() },
        subflows,
    }];
    Report {
        start,
        intervals,
        end: End {
            streams,
            sum_sent,
            sum_received,
            cpu_utilization_percent: cpu,
            sender_tcp_congestion: scc,
            receiver_tcp_congestion: rcc,
            mptcp,
        },
        error: None,
    }
}
