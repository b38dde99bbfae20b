//! `shared-bottleneck`: RFC 6356's second goal, do no harm. One MPTCP
//! connection with two subflows and one plain TCP flow go through the same
//! droptail bottleneck (by default 20 Mbit/s, 40 ms RTT, a buffer of one
//! BDP). Uncoupled subflows are two TCP flows to the bottleneck and take
//! about two thirds of it; coupled ones (LIA, OLIA, BALIA) together take
//! about what the TCP flow takes, a half.
//!
//! The two subflows leave host A from two addresses, and both routes run
//! through the one link each way; the TCP flow leaves from the first
//! address. All three flows are backlogged for the whole run, and the shares
//! are counted over its second half, once slow start is long over.

use super::bottleneck::Bottleneck;
use crate::apps::BulkApp;
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

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// The bottleneck; its jitter, order-preserving, is there because
    /// without some randomness a droptail queue fed by deterministic senders
    /// drops in phase with them, and every seed is the same run.
    pub bottleneck: Bottleneck,
    /// Length of the run.
    pub duration: Duration,
    /// The MPTCP connection's congestion control.
    pub mptcp_cc: Algorithm,
    /// The TCP flow's.
    pub tcp_cc: Algorithm,
    /// The MPTCP connection's scheduler policy.
    pub policy: Policy,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            bottleneck: Bottleneck {
                rate_bps: 20_000_000,
                rtt: Duration::from_millis(40),
                queue_packets: None,
                jitter: Duration::from_micros(500),
            },
            duration: Duration::from_secs(60),
            mptcp_cc: Algorithm::Cubic,
            tcp_cc: Algorithm::Cubic,
            policy: Policy::Default,
            seed: 1,
        }
    }
}

/// One flow's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowReport {
    /// `mptcp` or `tcp`.
    pub kind: &'static str,
    pub cc: &'static str,
    /// The scheduler policy (MPTCP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<&'static str>,
    /// Subflows it had at the end.
    pub subflows: usize,
    /// Goodput over the second half of the run.
    pub goodput_bps: f64,
    /// Its part of all flows' goodput over that half.
    pub share: f64,
    /// Bytes received over the whole run.
    pub bytes: u64,
}

/// The bottleneck's figures (A→B, the data direction).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LinkReport {
    pub name: String,
    pub delivered_bytes: u64,
    pub dropped_queue: u64,
    /// Delivered bytes over what the link could carry in the run.
    pub utilisation: f64,
}

/// What a run reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub seed: u64,
    pub rate_bps: u64,
    pub rtt_ms: f64,
    pub queue_packets: usize,
    pub jitter_us: f64,
    pub duration_s: f64,
    pub flows: Vec<FlowReport>,
    pub bottleneck: LinkReport,
    pub wall_s: f64,
    pub sim_gbps_per_wall_s: f64,
    /// SHA-256 of this report without its wall-clock fields.
    pub run_digest: String,
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal")
}

/// The topology: two client addresses routed through one link each way.
pub fn topology(p: &Params) -> (Topology, usize) {
    let (link, queue, _) = p.bottleneck.link();
    let t = Topology {
        links: vec![("bottleneck-a2b".into(), link), ("bottleneck-b2a".into(), link)],
        routes: ["10.0.1.1", "10.0.2.1"]
            .into_iter()
            .map(|a| RouteSpec { addr_a: ip(a), addr_b: ip("10.0.1.2"), a_to_b: vec![0], b_to_a: vec![1] })
            .collect(),
    };
    (t, queue)
}

/// Bytes B's app received on the connection whose client port is `port`.
fn received_by(b: &StackHost, port: u16) -> u64 {
    b.apps
        .iter()
        .find(|(h, _)| b.ep.addresses(**h).is_some_and(|(_, remote)| remote.port() == port))
        .map_or(0, |(_, app)| app.received)
}

/// Runs the experiment.
pub fn run(p: &Params) -> Report {
    let wall = std::time::Instant::now();
    let (topo, queue) = topology(p);
    let server = SocketAddr::new(ip("10.0.1.2"), 5201);
    let mut client = EndpointConfig::default();
    client.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.1"),
        flags: EndpointFlags { subflow: true, ..Default::default() },
    });
    let mut a = StackHost::new(Endpoint::new(client.clone(), super::seed32(p.seed, 0xA)));
    let mut b = StackHost::new(Endpoint::new(EndpointConfig::default(), super::seed32(p.seed, 0xB)));
    b.ep.listen(server);
    b.accept_template = Some(BulkApp::new(0, 0));
    let local = SocketAddr::new(ip("10.0.1.1"), 0);
    let mut open = |mptcp: bool, cc: Algorithm, salt: u64| -> (ConnectionHandle, u16) {
        let mut cfg = ConnConfig { tcp: client.tcp.clone(), mptcp: client.mptcp.clone() };
        cfg.tcp.congestion_control = cc;
        cfg.mptcp.enabled = mptcp;
        cfg.mptcp.scheduler = p.policy;
        let h = a.ep.connect_conn(Instant::ZERO, local, server, cfg).expect("a fresh endpoint has free ports");
        // More than the link can carry in the run: every flow stays backlogged.
        a.attach(h, BulkApp::new(u64::MAX / 4, p.seed ^ salt));
        (h, a.ep.addresses(h).map_or(0, |(l, _)| l.port()))
    };
    let (mh, mport) = open(true, p.mptcp_cc, 0x0001_0000);
    let (_th, tport) = open(false, p.tcp_cc, 0x0002_0000);
    a.pump(Instant::ZERO);

    let mut sim =
        Sim::with_topology(SimConfig { seed: p.seed, max_time: p.duration, ..Default::default() }, a, b, topo);
    let half = Instant::ZERO + p.duration / 2;
    sim.run(|s| s.now() >= half, None, |_, _, _| {});
    let at_half = (received_by(&sim.b, mport), received_by(&sim.b, tport), sim.now());
    sim.run(|_| false, None, |_, _, _| {});
    let end = sim.now();
    let (m, t) = (received_by(&sim.b, mport), received_by(&sim.b, tport));
    let secs = (end - at_half.2).as_secs_f64().max(1e-9);
    let (gm, gt) = ((m - at_half.0) as f64 * 8.0 / secs, (t - at_half.1) as f64 * 8.0 / secs);
    let total = (gm + gt).max(1e-9);
    let subflows = sim.a.ep.conn(mh).map_or(0, |c| c.info().subflows.len());
    let flows = vec![
        FlowReport {
            kind: "mptcp",
            cc: p.mptcp_cc.name(),
            scheduler: Some(p.policy.name()),
            subflows,
            goodput_bps: gm,
            share: gm / total,
            bytes: m,
        },
        FlowReport {
            kind: "tcp",
            cc: p.tcp_cc.name(),
            scheduler: None,
            subflows: 1,
            goodput_bps: gt,
            share: gt / total,
            bytes: t,
        },
    ];
    let (name, st) = sim.links().next().map(|(n, s)| (n.to_string(), s)).expect("the topology has its links");
    let capacity = p.bottleneck.rate_bps as f64 / 8.0 * end.as_secs_f64();
    let wc = crate::report::WallClock::new(wall.elapsed(), m + t);
    let mut r = Report {
        scenario: "shared-bottleneck",
        seed: p.seed,
        rate_bps: p.bottleneck.rate_bps,
        rtt_ms: p.bottleneck.rtt.as_secs_f64() * 1e3,
        queue_packets: queue,
        jitter_us: p.bottleneck.jitter.as_secs_f64() * 1e6,
        duration_s: end.as_secs_f64(),
        flows,
        bottleneck: LinkReport {
            name,
            delivered_bytes: st.delivered_bytes,
            dropped_queue: st.dropped_queue,
            utilisation: st.delivered_bytes as f64 / capacity.max(1.0),
        },
        wall_s: wc.wall_s,
        sim_gbps_per_wall_s: wc.sim_gbps_per_wall_s,
        run_digest: String::new(),
    };
    r.run_digest = crate::report::run_digest(&r);
    r
}
