//! The building block of most scenarios: one connection from host A to host B
//! over the given paths, bulk data in one or both directions, hashed on both
//! ends.

use super::seed32;
use crate::apps::BulkApp;
use crate::report::{counters_map, LinkReport};
use crate::stack::StackHost;
use crate::world::{Action, PathSpec, Sim, SimConfig};
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::tcp::TcpInfo;
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// A scheduler the client's connection runs instead of its
/// configuration's policy: one written outside the crates, against the
/// public [`Scheduler`](mptun_proto::sched::Scheduler) trait.
#[derive(Clone)]
pub struct SchedulerHook(pub std::sync::Arc<dyn Fn() -> Box<dyn mptun_proto::sched::Scheduler> + Send + Sync>);

impl SchedulerHook {
    /// A hook building the scheduler with `make`, once per connection.
    pub fn new(make: impl Fn() -> Box<dyn mptun_proto::sched::Scheduler> + Send + Sync + 'static) -> Self {
        SchedulerHook(std::sync::Arc::new(make))
    }

    /// The name its schedulers give.
    pub fn name(&self) -> &'static str {
        (self.0)().name()
    }
}

impl std::fmt::Debug for SchedulerHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SchedulerHook").field(&self.name()).finish()
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct TransferSpec {
    pub paths: Vec<PathSpec>,
    /// Bytes from A (client) to B (server).
    pub size: u64,
    /// Bytes from B back to A.
    pub reverse_size: u64,
    pub client: EndpointConfig,
    pub server: EndpointConfig,
    pub seed: u64,
    pub max_time: Duration,
    pub port: u16,
    /// Trace sampling interval, if traces are wanted.
    pub sample_every: Option<Duration>,
    /// Link changes during the run.
    pub actions: Vec<(Instant, usize, Option<mptun_link::LinkConfig>, Option<mptun_link::LinkConfig>)>,
    /// The client connection's scheduler, if not its configuration's.
    pub client_scheduler: Option<SchedulerHook>,
}

/// One trace sample of the client's connection.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TraceSample {
    pub t_s: f64,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u64,
    pub pacing_rate_bps: u64,
    pub bytes_acked: u64,
    pub in_flight: u32,
}

/// Outcome of a transfer.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TransferResult {
    /// Every byte arrived and each end received the other's stream, byte
    /// for byte, checked against the regenerated stream (`crate::pattern`):
    /// what equal SHA-256 digests of both directions would say, under the
    /// name that keeps run digests comparable.
    pub sha256_match: bool,
    pub completed: bool,
    pub bytes_received: u64,
    pub reverse_bytes_received: u64,
    /// From the client's connect to the last byte at the server.
    pub duration_s: f64,
    pub goodput_bps: f64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub client_counters: BTreeMap<&'static str, u64>,
    pub server_counters: BTreeMap<&'static str, u64>,
    pub links: Vec<(LinkReport, LinkReport)>,
    pub final_cwnd: u32,
    pub final_srtt_us: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<TraceSample>,
    pub sim_end_s: f64,
    /// Not serialised: the client's final TCP_INFO, for scenarios to dig into.
    #[serde(skip)]
    pub client_info: Option<TcpInfo>,
    /// `mptcp` or `plain` (never offered, or fell back).
    pub client_mode: &'static str,
    /// Not serialised: the client connection's subflows at the end.
    #[serde(skip)]
    pub client_subflows: Vec<mptun_proto::mptcp::SubflowInfo>,
    /// Not serialised: how long the client's data waited for the server's
    /// window (`ConnectionInfo::rwnd_limited`).
    #[serde(skip)]
    pub client_rwnd_limited: Duration,
    /// Not serialised: HyStart exit as reported by the client's controller.
    #[serde(skip)]
    pub slow_start_exit: Option<(&'static str, u32)>,
}

/// One sample of one subflow of the traced connection.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SubflowSample {
    pub t_s: f64,
    pub subflow: usize,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u64,
    pub bytes_acked: u64,
    /// Slow-subflow halvings applied so far.
    pub penalized: u64,
    /// The receiving end's MPTcpExtOFOQueue so far (connection-level
    /// out-of-order segments, cumulative), at the same instant.
    pub receiver_ofo_queue: u64,
}

/// A transfer plus the per-subflow trace of one side's connection.
pub struct Traced {
    pub result: TransferResult,
    pub subflow_trace: Vec<SubflowSample>,
}

/// Runs the transfer.
pub fn run(spec: &TransferSpec) -> TransferResult {
    run_with_subflow_trace(spec, false).result
}

/// Every subflow of `c` at `now`, with the receiver's OFO count `rx_ofo`.
pub(crate) fn sample_subflows(out: &mut Vec<SubflowSample>, now: Instant, c: &mptun_proto::Connection, rx_ofo: u64) {
    for s in c.info().subflows {
        out.push(SubflowSample {
            t_s: now.as_secs_f64(),
            subflow: s.id,
            cwnd: s.tcp.cwnd,
            ssthresh: s.tcp.ssthresh,
            srtt_us: s.tcp.srtt.as_micros() as u64,
            bytes_acked: s.tcp.bytes_acked,
            penalized: s.penalized,
            receiver_ofo_queue: rx_ofo,
        });
    }
}

/// Runs the transfer, sampling every subflow of the server's (`trace_server`)
/// or the client's connection every `spec.sample_every`.
pub fn run_with_subflow_trace(spec: &TransferSpec, trace_server: bool) -> Traced {
    run_traced(spec, trace_server, false)
}

/// Runs the transfer with TSO: the hosts build super-segments
/// ([`SimConfig::gso`]) that the sending side cuts before the link.
pub fn run_with_tso(spec: &TransferSpec) -> TransferResult {
    run_traced(spec, false, true).result
}

/// Runs the transfer, sampling the server's (`trace_server`) or the
/// client's subflows every `spec.sample_every`; `gso`: the hosts hand TSO
/// super-segments to the link ([`SimConfig::gso`]), as a stack on a TUN
/// device with offload does.
pub fn run_traced(spec: &TransferSpec, trace_server: bool, gso: bool) -> Traced {
    let first = spec.paths.first().expect("at least one path");
    let client_addr = SocketAddr::new(first.addr_a, 0);
    let server_addr = SocketAddr::new(first.addr_b, spec.port);

    let mut a = StackHost::new(Endpoint::new(spec.client.clone(), seed32(spec.seed, 0xA)));
    let mut b = StackHost::new(Endpoint::new(spec.server.clone(), seed32(spec.seed, 0xB)));
    b.ep.listen(server_addr);
    b.accept_template =
        Some(BulkApp::new(spec.reverse_size, spec.seed ^ 0x0005_EEDB).expecting(spec.seed ^ 0x0005_EEDA));
    let h: ConnectionHandle =
        a.ep.connect(Instant::ZERO, client_addr, server_addr).expect("a fresh endpoint has free ports");
    if let (Some(hook), Some(conn)) = (&spec.client_scheduler, a.ep.conn_mut(h)) {
        conn.set_scheduler((hook.0)());
    }
    a.attach(h, BulkApp::new(spec.size, spec.seed ^ 0x0005_EEDA).expecting(spec.seed ^ 0x0005_EEDB));
    a.pump(Instant::ZERO);

    let mut sim = Sim::new(
        SimConfig { seed: spec.seed, max_time: spec.max_time, gso, ..Default::default() },
        a,
        b,
        spec.paths.clone(),
    );
    for (at, path, ab, ba) in &spec.actions {
        sim.schedule(Action { at: *at, path: *path, a_to_b: *ab, b_to_a: *ba });
    }
    let size = spec.size;
    let rsize = spec.reverse_size;
    let mut trace = Vec::new();
    let mut subflow_trace = Vec::new();
    let end = sim.run(
        |s| {
            let srv_done = s.b.apps.values().next().is_some_and(|app| app.received >= size);
            let cli_done = s.a.apps.get(&h).is_some_and(|app| app.received >= rsize);
            srv_done && cli_done
        },
        spec.sample_every,
        |now, a, b| {
            let traced = if trace_server { b.apps.keys().next().and_then(|&sh| b.ep.conn(sh)) } else { a.ep.conn(h) };
            if let Some(c) = traced {
                let receiver = if trace_server { &a.ep } else { &b.ep };
                sample_subflows(&mut subflow_trace, now, c, receiver.counters().mptcp_ofo_queue);
            }
            if let Some(sf) = a.ep.conn(h).and_then(|c| c.subflow(0)) {
                let i = sf.info();
                trace.push(TraceSample {
                    t_s: now.as_secs_f64(),
                    cwnd: i.cwnd,
                    ssthresh: i.ssthresh,
                    srtt_us: i.srtt.as_micros() as u64,
                    pacing_rate_bps: i.pacing_rate.saturating_mul(8),
                    bytes_acked: i.bytes_acked,
                    in_flight: i.packets_out.saturating_sub(i.sacked_out + i.lost_out) + i.retrans_out,
                });
            }
        },
    );

    if std::env::var_os("MPTUN_DEBUG").is_some() {
        for (name, ep) in [("client", &sim.a.ep), ("server", &sim.b.ep)] {
            for ch in ep.handles() {
                let c = ep.conn(ch).expect("live");
                eprintln!("{name} {c:?} info={:?}", c.info());
                for (i, sf) in c.subflows() {
                    eprintln!("  sf{i} {sf:?} {:?}", sf.info());
                }
                eprintln!("  {}", c.debug_state());
            }
        }
    }
    let cli_app = sim.a.apps.get(&h).expect("attached");
    let srv_app = sim.b.apps.values().next();
    let received = srv_app.map_or(0, |a| a.received);
    let rreceived = cli_app.received;
    let completed = received >= size && rreceived >= rsize;
    // Each end got the other's stream, byte for byte and all of it.
    let sha_ok = srv_app.is_some_and(|s| {
        s.received == cli_app.sent && s.received_intact() && cli_app.received == s.sent && cli_app.received_intact()
    });
    let last = srv_app.and_then(|s| s.last_rx).unwrap_or(end);
    let duration = last.as_secs_f64();
    let cc = sim.a.ep.counters();
    let sc = sim.b.ep.counters();
    let initial = sim.a.ep.conn(h).and_then(|c| c.subflow(0));
    let info = initial.map(|c| c.info());
    let slow_start_exit = initial.and_then(|c| c.cc().slow_start_exit()).map(|e| (e.reason.name(), e.cwnd));
    let result = TransferResult {
        sha256_match: completed && sha_ok,
        completed,
        bytes_received: received,
        reverse_bytes_received: rreceived,
        duration_s: duration,
        goodput_bps: if duration > 0.0 { received as f64 * 8.0 / duration } else { 0.0 },
        retransmits: cc.tcp_retrans_segs + sc.tcp_retrans_segs,
        timeouts: cc.tcp_ext_tcp_timeouts + sc.tcp_ext_tcp_timeouts,
        client_counters: counters_map(&cc),
        server_counters: counters_map(&sc),
        links: (0..sim.path_count())
            .map(|i| {
                let (ab, ba) = sim.link_stats(i);
                (ab.into(), ba.into())
            })
            .collect(),
        final_cwnd: info.map_or(0, |i| i.cwnd),
        final_srtt_us: info.map_or(0, |i| i.srtt.as_micros() as u64),
        trace,
        sim_end_s: end.as_secs_f64(),
        client_info: info,
        client_subflows: sim.a.ep.conn(h).map(|c| c.info().subflows).unwrap_or_default(),
        client_rwnd_limited: sim.a.ep.conn(h).map(|c| c.info().rwnd_limited).unwrap_or_default(),
        client_mode: match sim.a.ep.conn(h).map(|c| c.mode()) {
            Some(mptun_proto::mptcp::Mode::Mptcp) => "mptcp",
            Some(mptun_proto::mptcp::Mode::Pending) => "pending",
            _ => "plain",
        },
        slow_start_exit,
    };
    Traced { result, subflow_trace }
}
