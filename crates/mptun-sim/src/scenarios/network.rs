//! Networks, not pipes: any number of flows between host A and host B over
//! named links that routes share. The engine behind `shared-bottleneck`
//! and the scenario files `mptun sim run FILE` reads.
//!
//! A link is a duplex pair of one-way links alike both ways. A route joins
//! an address of A to one of B through links in order (A to B; B to A the
//! same links in reverse). A flow is an MPTCP connection (its first
//! address opens it, each further one adds a `subflow` endpoint) or a plain
//! TCP flow, each with its own congestion control, backlogged from its
//! start to its stop; every flow's goodput is measured over the same
//! window, by default the second half of the run.

use super::bottleneck::Bottleneck;
use super::transfer::SubflowSample;
use crate::apps::BulkApp;
use crate::cross::{Source, WithCross};
use crate::stack::StackHost;
use crate::world::{RouteSpec, Sim, SimConfig, Topology};
use mptun_cc::Algorithm;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::mptcp::ConnConfig;
use mptun_proto::pm::{EndpointFlags, PmEndpoint};
use mptun_proto::sched::Policy;
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};

/// One named duplex link.
#[derive(Clone, Debug)]
pub struct LinkSpec {
    pub name: String,
    pub link: Bottleneck,
}

/// A route from an address of A to one of B through named links.
#[derive(Clone, Debug)]
pub struct Route {
    pub a: IpAddr,
    pub b: IpAddr,
    pub links: Vec<String>,
}

/// What carries a flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowKind {
    /// An MPTCP connection from the first of `from`, a subflow from each
    /// further one (to the server's address).
    Mptcp,
    /// A plain TCP flow from the first of `from`.
    Tcp,
    /// Unresponsive UDP from the first of `from` (IPv4), at `rate_bps` of
    /// IP bytes while on, in packets of `packet` bytes: on for `on`, off
    /// for `off` (zero: constant rate), whatever the network does.
    Unresponsive { rate_bps: u64, packet: usize, on: Duration, off: Duration },
}

impl FlowKind {
    /// The flow is TCP, MPTCP or plain: a connection with congestion control.
    pub fn responsive(&self) -> bool {
        matches!(self, FlowKind::Mptcp | FlowKind::Tcp)
    }

    /// The report's name of the kind.
    pub fn name(&self) -> &'static str {
        match self {
            FlowKind::Mptcp => "mptcp",
            FlowKind::Tcp => "tcp",
            FlowKind::Unresponsive { .. } => "udp",
        }
    }
}

/// One flow from A to B.
#[derive(Clone, Debug)]
pub struct Flow {
    pub kind: FlowKind,
    /// A's addresses it leaves from (see [`FlowKind`]).
    pub from: Vec<IpAddr>,
    /// B's address it goes to.
    pub to: IpAddr,
    pub cc: Algorithm,
    /// The scheduler policy (MPTCP only).
    pub policy: Policy,
    /// It starts sending at `start` and sends until `stop` (the run's end
    /// when `None`).
    pub start: Duration,
    pub stop: Option<Duration>,
}

/// A whole experiment.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub links: Vec<LinkSpec>,
    pub routes: Vec<Route>,
    pub flows: Vec<Flow>,
    pub duration: Duration,
    /// Goodput is measured from here to the end (default: half the run).
    pub measure_from: Option<Duration>,
    pub seed: u64,
}

/// Why a [`Spec`] cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

/// One flow's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowReport {
    /// `mptcp`, `tcp` or `udp` (unresponsive; its goodput counts IP bytes).
    pub kind: &'static str,
    pub cc: &'static str,
    /// The scheduler policy (MPTCP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<&'static str>,
    /// Subflows it had at the end.
    pub subflows: usize,
    /// Goodput over the measurement window.
    pub goodput_bps: f64,
    /// Its part of all flows' goodput over that window.
    pub share: f64,
    /// Bytes received over the whole run.
    pub bytes: u64,
    /// Bytes each of its subflows carried (acknowledged at the subflow
    /// level), by the link its route enters first.
    pub bytes_by_link: Vec<(String, u64)>,
}

/// One link's figures, the A→B direction (where the data goes).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LinkReport {
    pub name: String,
    pub delivered_bytes: u64,
    pub dropped_queue: u64,
    /// Dropped by the queue discipline (CoDel); 0 under droptail.
    pub dropped_aqm: u64,
    /// Delivered bytes over what the link could carry in the run.
    pub utilisation: f64,
    /// Median and 99th percentile of the time packets waited in the
    /// link's queue, ms (bucket upper bounds, within 1/64: `mptun_link::Histogram`).
    pub queue_delay_p50_ms: f64,
    pub queue_delay_p99_ms: f64,
}

/// What a run reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub duration_s: f64,
    pub measure_from_s: f64,
    pub flows: Vec<FlowReport>,
    pub links: Vec<LinkReport>,
    pub wall_s: f64,
    pub sim_gbps_per_wall_s: f64,
    /// SHA-256 of this report without its wall-clock fields.
    pub run_digest: String,
}

/// The addresses B listens on, the topology, and per route its first link's name.
fn build(spec: &Spec) -> Result<(Topology, Vec<String>), SpecError> {
    let mut topo = Topology::default();
    for l in &spec.links {
        let (cfg, _, _) = l.link.link();
        topo.links.push((format!("{}-a2b", l.name), cfg));
        topo.links.push((format!("{}-b2a", l.name), cfg));
    }
    let index = |name: &str| {
        spec.links
            .iter()
            .position(|l| l.name == name)
            .ok_or_else(|| SpecError(format!("route through unknown link `{name}`")))
    };
    let mut first = Vec::new();
    for r in &spec.routes {
        if r.links.is_empty() {
            return Err(SpecError(format!("route {} -> {} crosses no link", r.a, r.b)));
        }
        let ids = r.links.iter().map(|n| index(n)).collect::<Result<Vec<_>, _>>()?;
        topo.routes.push(RouteSpec {
            addr_a: r.a,
            addr_b: r.b,
            a_to_b: ids.iter().map(|i| 2 * i).collect(),
            b_to_a: ids.iter().rev().map(|i| 2 * i + 1).collect(),
        });
        first.push(r.links[0].clone());
    }
    for f in &spec.flows {
        if f.from.is_empty() {
            return Err(SpecError("a flow leaves from at least one address".into()));
        }
        if f.kind != FlowKind::Mptcp && f.from.len() > 1 {
            return Err(SpecError("a TCP or unresponsive flow leaves from one address".into()));
        }
        if let FlowKind::Unresponsive { rate_bps, packet, .. } = f.kind {
            if !(f.from[0].is_ipv4() && f.to.is_ipv4()) {
                return Err(SpecError("unresponsive traffic is IPv4".into()));
            }
            if rate_bps == 0 || !(28..=1500).contains(&packet) {
                return Err(SpecError("unresponsive traffic needs a rate and packets of 28 to 1500 bytes".into()));
            }
        }
        for a in &f.from {
            if !spec.routes.iter().any(|r| r.a == *a) {
                return Err(SpecError(format!("no route from {a}")));
            }
        }
        if !spec.routes.iter().any(|r| r.b == f.to) {
            return Err(SpecError(format!("no route to {}", f.to)));
        }
        if f.stop.is_some_and(|s| s <= f.start) {
            return Err(SpecError("a flow stops after it starts".into()));
        }
    }
    Ok((topo, first))
}

/// A running flow.
#[derive(Clone, Copy, Default)]
struct Running {
    handle: Option<ConnectionHandle>,
    port: u16,
    /// Its source among A's unresponsive ones.
    cross: Option<usize>,
}

/// The hosts of a network run.
type NetSim = Sim<WithCross<StackHost>, WithCross<StackHost>>;

/// What B received of flow `r` so far: its application's bytes, or the IP
/// bytes of an unresponsive flow.
fn got(sim: &NetSim, r: &Running) -> u64 {
    match r.cross {
        Some(k) => sim.b.received(k),
        None => received_by(&sim.b.inner, r.port),
    }
}

/// A's unresponsive sources, and for each flow its source's index.
fn sources(spec: &Spec) -> (Vec<Source>, Vec<Option<usize>>) {
    let mut out = Vec::new();
    let index = spec
        .flows
        .iter()
        .map(|f| match f.kind {
            FlowKind::Unresponsive { rate_bps, packet, on, off } => {
                out.push(Source { src: f.from[0], dst: f.to, rate_bps, packet, on, off, start: f.start, stop: f.stop });
                Some(out.len() - 1)
            }
            _ => None,
        })
        .collect();
    (out, index)
}

/// Bytes B's apps received on the connection whose client port is `port`.
fn received_by(b: &StackHost, port: u16) -> u64 {
    b.apps
        .iter()
        .find(|(h, _)| b.ep.addresses(**h).is_some_and(|(_, remote)| remote.port() == port))
        .map_or(0, |(_, app)| app.received)
}

/// A's endpoint: each flow's further addresses are `subflow` endpoints.
fn client_config(spec: &Spec) -> EndpointConfig {
    let mut c = EndpointConfig::default();
    let mut id = 0u8;
    for f in spec.flows.iter().filter(|f| f.kind == FlowKind::Mptcp) {
        for a in &f.from[1..] {
            if c.mptcp.pm.endpoints.iter().all(|e| e.addr != *a) {
                id += 1;
                let flags = EndpointFlags { subflow: true, ..Default::default() };
                c.mptcp.pm.endpoints.push(PmEndpoint { id, addr: *a, flags, port: None });
            }
        }
    }
    c.mptcp.pm.max_subflows = c.mptcp.pm.max_subflows.max(id);
    c
}

/// Opens flow `f` from A at `now`.
fn open(a: &mut StackHost, now: Instant, f: &Flow, seed: u64) -> Running {
    let mut cfg = ConnConfig { tcp: a.ep.config().tcp.clone(), mptcp: a.ep.config().mptcp.clone() };
    cfg.tcp.congestion_control = f.cc;
    cfg.mptcp.enabled = f.kind == FlowKind::Mptcp;
    cfg.mptcp.scheduler = f.policy;
    // The endpoint lists every MPTCP flow's further addresses; this flow
    // opens subflows from its own only (a user's, not every user's).
    cfg.mptcp.pm.endpoints.retain(|e| f.from[1..].contains(&e.addr));
    debug_assert!(f.kind.responsive());
    let server = SocketAddr::new(f.to, 5201);
    let h = a.ep.connect_conn(now, SocketAddr::new(f.from[0], 0), server, cfg).expect("the endpoint has free ports");
    // More than any link carries in the run: the flow stays backlogged.
    a.attach(h, BulkApp::new(u64::MAX / 4, seed));
    a.pump(now);
    Running { handle: Some(h), port: a.ep.addresses(h).map_or(0, |(l, _)| l.port()), cross: None }
}

/// One flow at one instant of a traced run: what B received so far and
/// each subflow's state at A, the sender.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowSample {
    pub t_s: f64,
    /// Index of the flow in the spec.
    pub flow: usize,
    /// Bytes B's application received on it so far.
    pub received: u64,
    /// Its subflows (one for a TCP flow), `subflow` their ids.
    pub subflows: Vec<SubflowSample>,
}

/// Runs `spec`.
pub fn run(spec: &Spec) -> Result<Report, SpecError> {
    run_traced(spec, None).map(|(r, _)| r)
}

/// Runs `spec`, sampling every flow each `every` (none when `None`). The
/// samples do not touch the run: its report, digest included, is the one
/// [`run`] gives.
pub fn run_traced(spec: &Spec, every: Option<Duration>) -> Result<(Report, Vec<FlowSample>), SpecError> {
    let wall = std::time::Instant::now();
    let (topo, first_links) = build(spec)?;
    let mut a = StackHost::new(Endpoint::new(client_config(spec), super::seed32(spec.seed, 0xA)));
    let mut b = StackHost::new(Endpoint::new(EndpointConfig::default(), super::seed32(spec.seed, 0xB)));
    for to in spec.flows.iter().map(|f| f.to) {
        b.ep.listen(SocketAddr::new(to, 5201));
    }
    b.accept_template = Some(BulkApp::new(0, 0));
    let (cross, cross_index) = sources(spec);
    let mut running: Vec<Running> = cross_index.iter().map(|&cross| Running { cross, ..Running::default() }).collect();
    let seed_of = |i: usize| spec.seed ^ ((i as u64 + 1) << 16);
    for (i, f) in spec.flows.iter().enumerate().filter(|(_, f)| f.start.is_zero() && f.kind.responsive()) {
        running[i] = open(&mut a, Instant::ZERO, f, seed_of(i));
    }
    let cfg = SimConfig { seed: spec.seed, max_time: spec.duration, ..Default::default() };
    let mut sim = Sim::with_topology(cfg, WithCross::new(a, cross), WithCross::new(b, Vec::new()), topo);
    // The instants something happens to a flow, and the measurement's start.
    let end = Instant::ZERO + spec.duration;
    let measure = Instant::ZERO + spec.measure_from.unwrap_or(spec.duration / 2).min(spec.duration);
    let every = every.filter(|d| !d.is_zero());
    let sample_at = |t: Instant| every.is_some_and(|e| (t - Instant::ZERO).as_nanos().is_multiple_of(e.as_nanos()));
    let ticks = every.map_or(0, |e| (spec.duration.as_nanos() / e.as_nanos()) as u64);
    let mut marks: Vec<Instant> = spec
        .flows
        .iter()
        .flat_map(|f| [Some(f.start), f.stop].into_iter().flatten())
        .map(|d| Instant::ZERO + d)
        .chain([measure])
        .chain((1..=ticks).map(|k| Instant::ZERO + every.expect("ticks") * k as u32))
        .filter(|&t| t > Instant::ZERO && t < end)
        .collect();
    let mut samples: Vec<FlowSample> = Vec::new();
    marks.sort();
    marks.dedup();
    let mut at_measure: Vec<u64> = vec![0; spec.flows.len()];
    let mut stopped: Vec<Option<u64>> = vec![None; spec.flows.len()];
    for t in marks {
        sim.run(|s| s.now() >= t, None, |_, _, _| {});
        let now = sim.now();
        if sample_at(t) {
            sample(&sim, &running, t, &mut samples);
        }
        if t == measure {
            for (i, r) in running.iter().enumerate() {
                at_measure[i] = got(&sim, r);
            }
        }
        for (i, f) in spec.flows.iter().enumerate() {
            if Instant::ZERO + f.start == t && f.kind.responsive() {
                running[i] = open(&mut sim.a.inner, now, f, seed_of(i));
            }
            if f.stop.is_some_and(|s| Instant::ZERO + s == t) {
                stopped[i] = Some(got(&sim, &running[i]));
                if let Some(h) = running[i].handle {
                    if let Some(c) = sim.a.inner.ep.conn_mut(h) {
                        c.abort();
                    }
                }
            }
        }
    }
    sim.run(|_| false, None, |_, _, _| {});
    let stop_time = sim.now();
    if sample_at(end) {
        sample(&sim, &running, end, &mut samples);
    }
    let secs = (stop_time - measure).as_secs_f64().max(1e-9);
    let mut flows: Vec<FlowReport> = Vec::new();
    for (i, f) in spec.flows.iter().enumerate() {
        let r = &running[i];
        let bytes = stopped[i].unwrap_or_else(|| got(&sim, r));
        let conn = r.handle.and_then(|h| sim.a.inner.ep.conn(h));
        let bytes_by_link = conn
            .map(|c| {
                c.info()
                    .subflows
                    .iter()
                    .map(|s| {
                        let link = spec.routes.iter().position(|rt| rt.a == s.local.ip() && rt.b == s.remote.ip());
                        let link = link.or_else(|| spec.routes.iter().position(|rt| rt.a == s.local.ip()));
                        (link.map_or_else(|| "?".into(), |k| first_links[k].clone()), s.tcp.bytes_acked)
                    })
                    .collect()
            })
            .unwrap_or_default();
        flows.push(FlowReport {
            kind: f.kind.name(),
            cc: if f.kind.responsive() { f.cc.name() } else { "none" },
            scheduler: (f.kind == FlowKind::Mptcp).then(|| f.policy.name()),
            subflows: conn.map_or(0, |c| c.info().subflows.len()),
            goodput_bps: bytes.saturating_sub(at_measure[i]) as f64 * 8.0 / secs,
            share: 0.0,
            bytes,
            bytes_by_link,
        });
    }
    let total: f64 = flows.iter().map(|f| f.goodput_bps).sum::<f64>().max(1e-9);
    for f in &mut flows {
        f.share = f.goodput_bps / total;
    }
    let ms = |h: &mptun_link::Histogram, q| h.quantile(q) as f64 / 1e6;
    let links = sim
        .links()
        .zip(sim.link_queue_delays())
        .step_by(2)
        .zip(&spec.links)
        .map(|(((_, st), (_, delays)), l)| LinkReport {
            name: l.name.clone(),
            delivered_bytes: st.delivered_bytes,
            dropped_queue: st.dropped_queue,
            dropped_aqm: st.dropped_aqm,
            utilisation: st.delivered_bytes as f64 / (l.link.rate_bps as f64 / 8.0 * stop_time.as_secs_f64()).max(1.0),
            queue_delay_p50_ms: ms(delays, 0.5),
            queue_delay_p99_ms: ms(delays, 0.99),
        })
        .collect();
    let delivered: u64 = flows.iter().map(|f| f.bytes).sum();
    let wc = crate::report::WallClock::new(wall.elapsed(), delivered);
    let mut report = Report {
        scenario: spec.name.clone(),
        seed: spec.seed,
        duration_s: stop_time.as_secs_f64(),
        measure_from_s: (measure - Instant::ZERO).as_secs_f64(),
        flows,
        links,
        wall_s: wc.wall_s,
        sim_gbps_per_wall_s: wc.sim_gbps_per_wall_s,
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    Ok((report, samples))
}

/// Every flow's sample at `t`.
fn sample(sim: &NetSim, running: &[Running], t: Instant, out: &mut Vec<FlowSample>) {
    let t_s = (t - Instant::ZERO).as_secs_f64();
    for (flow, r) in running.iter().enumerate() {
        let mut subflows = Vec::new();
        if let Some(c) = r.handle.and_then(|h| sim.a.inner.ep.conn(h)) {
            super::transfer::sample_subflows(&mut subflows, t, c, 0);
        }
        out.push(FlowSample { t_s, flow, received: got(sim, r), subflows });
    }
}
