//! `aggregate`: one MPTCP connection over two unequal paths (10 Mbit/s with
//! 20 ms one-way delay and 3 Mbit/s with 40 ms), each with a one-BDP buffer.
//! The server announces its second address (`signal` endpoint), the client
//! joins it: the in-kernel PM's usual two-path setup. Efficiency is goodput
//! over the sum of the path rates.

use super::transfer::{self, SchedulerHook, TransferResult, TransferSpec};
use crate::report::WallClock;
use crate::world::PathSpec;
use mptun_cc::Algorithm;
use mptun_link::LinkConfig;
use mptun_proto::endpoint::EndpointConfig;
use mptun_proto::pm::{EndpointFlags, PmConfig, PmEndpoint};
use mptun_proto::sched::Policy;
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::net::IpAddr;

/// One path of a multi-path scenario.
#[derive(Clone, Copy, Debug)]
pub struct PathParams {
    pub rate_bps: u64,
    pub delay: Duration,
    /// Droptail buffer in packets; `None` = one BDP of 1500-byte packets.
    pub queue_packets: Option<usize>,
}

impl PathParams {
    pub fn link(&self) -> LinkConfig {
        let bdp = LinkConfig { rate_bps: Some(self.rate_bps), ..Default::default() }.bdp_bytes(self.delay * 2);
        LinkConfig {
            rate_bps: Some(self.rate_bps),
            delay: self.delay,
            limit_packets: Some(self.queue_packets.unwrap_or(((bdp / 1500) as usize).max(4))),
            ..Default::default()
        }
    }
}

/// Addresses of path `i` (0-based): client 10.0.(i+1).1, server 10.0.(i+1).2.
pub fn addrs(i: usize) -> (IpAddr, IpAddr) {
    let n = (i + 1) as u8;
    (IpAddr::from([10, 0, n, 1]), IpAddr::from([10, 0, n, 2]))
}

/// The two endpoints' configuration for `n` paths: the server signals its
/// extra addresses, the client accepts the announcements.
pub fn mptcp_configs(n: usize) -> (EndpointConfig, EndpointConfig) {
    let mut client = EndpointConfig::default();
    let mut server = EndpointConfig::default();
    for i in 1..n {
        let (a, b) = addrs(i);
        client.mptcp.pm.endpoints.push(PmEndpoint {
            id: i as u8,
            addr: a,
            flags: EndpointFlags::default(),
            port: None,
        });
        server.mptcp.pm.endpoints.push(PmEndpoint {
            id: i as u8,
            addr: b,
            flags: EndpointFlags { signal: true, ..Default::default() },
            port: None,
        });
    }
    client.mptcp.pm = PmConfig { max_subflows: 8, max_add_addr_accepted: 8, ..client.mptcp.pm };
    server.mptcp.pm.max_subflows = 8;
    (client, server)
}

/// Path specs for the given parameters (both directions shaped alike).
pub fn paths(params: &[PathParams]) -> Vec<PathSpec> {
    params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (a, b) = addrs(i);
            PathSpec { addr_a: a, addr_b: b, a_to_b: p.link(), b_to_a: p.link() }
        })
        .collect()
}

/// Bytes one subflow carried.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SubflowBytes {
    pub local: String,
    pub remote: String,
    pub bytes_acked: u64,
    pub retransmits: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    /// The congestion control, when not the default (so that a default
    /// run's report, and its digest, carry no such field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cc: Option<&'static str>,
    /// The scheduler, when not the default (as `cc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<&'static str>,
    pub seed: u64,
    pub size_bytes: u64,
    pub paths: Vec<String>,
    pub sum_path_bps: f64,
    /// goodput / sum of path rates.
    pub efficiency: f64,
    pub ofo_queue: u64,
    pub subflows: Vec<SubflowBytes>,
    #[serde(flatten)]
    pub result: TransferResult,
    pub wall_s: f64,
    pub sim_gbps_per_wall_s: f64,
    /// SHA-256 of this report without its wall-clock fields (see [`crate::report::run_digest`]).
    pub run_digest: String,
}

pub struct Params {
    pub paths: Vec<PathParams>,
    pub size: u64,
    pub seed: u64,
    /// (time, path index, down?) link events, both directions.
    pub events: Vec<(Instant, usize, bool)>,
    /// Congestion control of both ends' subflows (coupled or not).
    pub cc: Algorithm,
    /// Both ends' MPTCP scheduler (the client's carries the transfer).
    pub policy: Policy,
    /// A scheduler from outside the crates for the client instead of
    /// `policy`'s; the report names it.
    pub scheduler_hook: Option<SchedulerHook>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            paths: vec![
                PathParams { rate_bps: 10_000_000, delay: Duration::from_millis(20), queue_packets: None },
                PathParams { rate_bps: 3_000_000, delay: Duration::from_millis(40), queue_packets: None },
            ],
            size: 32 * 1024 * 1024,
            seed: 1,
            events: Vec::new(),
            cc: Algorithm::Cubic,
            policy: Policy::Default,
            scheduler_hook: None,
        }
    }
}

pub fn run_named(name: &'static str, p: &Params, client: EndpointConfig, server: EndpointConfig) -> Report {
    run_named_traced(name, p, client, server, None)
}

/// [`run_named`] with the client's initial subflow traced every `sample_every`.
pub fn run_named_traced(
    name: &'static str,
    p: &Params,
    client: EndpointConfig,
    server: EndpointConfig,
    sample_every: Option<Duration>,
) -> Report {
    let specs = paths(&p.paths);
    let actions = p
        .events
        .iter()
        .map(|&(t, i, down)| {
            let mut l = specs[i].a_to_b;
            l.down = down;
            (t, i, Some(l), Some(l))
        })
        .collect();
    let t = TransferSpec {
        paths: specs,
        size: p.size,
        reverse_size: 0,
        client,
        server,
        seed: p.seed,
        max_time: Duration::from_secs(3600),
        port: 5201,
        sample_every,
        actions,
        client_scheduler: p.scheduler_hook.clone(),
    };
    let wall = std::time::Instant::now();
    let r = transfer::run(&t);
    let wc = WallClock::new(wall.elapsed(), r.bytes_received);
    let sum: f64 = p.paths.iter().map(|p| p.rate_bps as f64).sum();
    let mut report = Report {
        scenario: name,
        cc: (p.cc != Algorithm::default()).then(|| p.cc.name()),
        scheduler: match &p.scheduler_hook {
            Some(h) => Some(h.name()),
            None => (p.policy != Policy::Default).then(|| p.policy.name()),
        },
        seed: p.seed,
        size_bytes: p.size,
        paths: p
            .paths
            .iter()
            .map(|q| format!("{} Mbit/s, {} ms one way", q.rate_bps as f64 / 1e6, q.delay.as_millis()))
            .collect(),
        sum_path_bps: sum,
        efficiency: r.goodput_bps / sum,
        ofo_queue: r.server_counters.get("MPTcpExtOFOQueue").copied().unwrap_or(0),
        subflows: r
            .client_subflows
            .iter()
            .map(|s| SubflowBytes {
                local: s.local.to_string(),
                remote: s.remote.to_string(),
                bytes_acked: s.tcp.bytes_acked,
                retransmits: s.tcp.bytes_retrans,
            })
            .collect(),
        result: r,
        wall_s: wc.wall_s,
        sim_gbps_per_wall_s: wc.sim_gbps_per_wall_s,
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    report
}

pub fn run(p: &Params) -> Report {
    let (mut c, mut s) = mptcp_configs(p.paths.len());
    c.tcp.congestion_control = p.cc;
    s.tcp.congestion_control = p.cc;
    c.mptcp.scheduler = p.policy;
    s.mptcp.scheduler = p.policy;
    run_named("aggregate", p, c, s)
}
