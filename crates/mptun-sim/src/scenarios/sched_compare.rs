//! `sched-compare`: the packet schedulers on heterogeneous paths, the
//! setting of the scheduler literature (BLEST, IFIP Networking 2016; ECF,
//! CoNEXT 2017): a Wi-Fi-like path (20 Mbit/s, 10 ms one way, a one-BDP
//! queue) beside an LTE-like one (10 Mbit/s, 60 ms one way, a deep queue
//! of five BDPs, 600 ms when full).
//!
//! Workloads, each run under every scheduler (both ends run it; the
//! sender's decides):
//! * `bulk-256k`: a bulk upload into a fixed 256 KiB receive buffer, where
//!   head-of-line blocking behind the slow path stalls the window;
//! * `bulk-auto`: the same with autotuned buffers;
//! * `objects`: 100 KB objects requested back to back (a 100-byte request,
//!   the server answers with the object, the next request follows its last
//!   byte), their completion times;
//! * `objects-loss`: the same with 1 % random loss on the Wi-Fi-like path,
//!   the case for the redundant scheduler.
//!
//! Per run: goodput, the receiver's `MPTcpExtOFOQueue`, the time the
//! sender's data waited for the receive window, and for the object
//! workloads the completion-time median and 99th percentile.

use super::aggregate::{mptcp_configs, paths, PathParams};
use super::seed32;
use super::transfer::{self, TransferSpec};
use crate::rr::{RrApp, RrClient, RrHost, RrServer};
use crate::world::{Sim, SimConfig};
use mptun_cc::Algorithm;
use mptun_link::LossModel;
use mptun_proto::endpoint::{Endpoint, EndpointConfig};
use mptun_proto::sched::Policy;
use mptun_proto::tcp::BufferSize;
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::net::SocketAddr;

/// The schedulers compared by default: the ones of the literature and the
/// two kernels' defaults.
pub const SCHEDULERS: [Policy; 6] =
    [Policy::Default, Policy::MinRtt, Policy::RoundRobin, Policy::Redundant, Policy::Blest, Policy::Ecf];

/// A workload of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Bulk upload into a fixed 256 KiB receive buffer.
    Bulk256k,
    /// Bulk upload, autotuned buffers.
    BulkAuto,
    /// 100 KB objects back to back.
    Objects,
    /// As `Objects`, 1 % loss on the Wi-Fi-like path.
    ObjectsLoss,
}

impl Workload {
    /// All four, in table order.
    pub const ALL: [Workload; 4] = [Workload::Bulk256k, Workload::BulkAuto, Workload::Objects, Workload::ObjectsLoss];

    /// The name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Bulk256k => "bulk-256k",
            Workload::BulkAuto => "bulk-auto",
            Workload::Objects => "objects",
            Workload::ObjectsLoss => "objects-loss",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL.into_iter().find(|w| w.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
            format!("unknown workload '{s}' ({})", names.join(", "))
        })
    }
}

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    pub schedulers: Vec<Policy>,
    pub workloads: Vec<Workload>,
    pub seed: u64,
    /// Bytes of each bulk upload.
    pub bulk_size: u64,
    /// The small receive buffer of `bulk-256k`.
    pub small_rcvbuf: usize,
    /// Objects per object workload, and their size.
    pub objects: u64,
    pub object_size: usize,
    /// Loss on the Wi-Fi-like path in `objects-loss`.
    pub loss: f64,
    pub cc: Algorithm,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            schedulers: SCHEDULERS.to_vec(),
            workloads: Workload::ALL.to_vec(),
            seed: 1,
            bulk_size: 16 << 20,
            small_rcvbuf: 256 << 10,
            objects: 200,
            object_size: 100_000,
            loss: 0.01,
            cc: Algorithm::Cubic,
        }
    }
}

/// The two paths: Wi-Fi-like first (the initial subflow), LTE-like second.
pub fn path_params() -> Vec<PathParams> {
    let lte_bdp_packets = (10_000_000.0 * 0.120 / 8.0 / 1500.0) as usize;
    vec![
        PathParams { rate_bps: 20_000_000, delay: Duration::from_millis(10), queue_packets: None },
        PathParams { rate_bps: 10_000_000, delay: Duration::from_millis(60), queue_packets: Some(5 * lte_bdp_packets) },
    ]
}

/// One scheduler under one workload.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub workload: &'static str,
    pub scheduler: &'static str,
    pub goodput_mbps: f64,
    /// Receiver's `MPTcpExtOFOQueue`: segments that arrived out of order
    /// at the data level.
    pub ofo_queue: u64,
    /// Sender's time with data waiting for the receive window, seconds.
    pub rwnd_limited_s: f64,
    /// Object completion time, median and 99th percentile (nearest rank), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_p99_ms: Option<f64>,
    /// Bytes each path's subflow carried (the sender's), Wi-Fi first.
    pub path_bytes: Vec<u64>,
    pub retransmits: u64,
    /// Bulk: the payload arrived intact; objects: every object completed.
    pub complete: bool,
}

/// The JSON `mptun sim sched-compare` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub seed: u64,
    pub paths: Vec<String>,
    pub rows: Vec<Row>,
    pub wall_s: f64,
    pub run_digest: String,
}

fn configs(p: &Params, policy: Policy) -> (EndpointConfig, EndpointConfig) {
    let (mut c, mut s) = mptcp_configs(2);
    for cfg in [&mut c, &mut s] {
        cfg.tcp.congestion_control = p.cc;
        cfg.mptcp.scheduler = policy;
    }
    (c, s)
}

fn bulk(p: &Params, policy: Policy, small: bool) -> Row {
    let (c, mut s) = configs(p, policy);
    if small {
        let b = BufferSize::Fixed(p.small_rcvbuf);
        s.tcp.recv_buffer = b;
        s.mptcp.recv_buffer = b;
    }
    let spec = TransferSpec {
        paths: paths(&path_params()),
        size: p.bulk_size,
        reverse_size: 0,
        client: c,
        server: s,
        seed: p.seed,
        max_time: Duration::from_secs(3600),
        port: 5201,
        sample_every: None,
        actions: Vec::new(),
        client_scheduler: None,
    };
    let r = transfer::run(&spec);
    Row {
        workload: if small { Workload::Bulk256k.name() } else { Workload::BulkAuto.name() },
        scheduler: policy.name(),
        goodput_mbps: r.goodput_bps / 1e6,
        ofo_queue: r.server_counters.get("MPTcpExtOFOQueue").copied().unwrap_or(0),
        rwnd_limited_s: r.client_rwnd_limited.as_secs_f64(),
        object_p50_ms: None,
        object_p99_ms: None,
        path_bytes: r.client_subflows.iter().map(|s| s.tcp.bytes_acked).collect(),
        retransmits: r.retransmits,
        complete: r.sha256_match,
    }
}

/// Nearest-rank percentile of sorted `v`, ms.
/// Nearest-rank `q`th percentile of sorted completion times in ms, `None`
/// for none (the lab's rows use it too, so both columns rank alike).
pub fn percentile(sorted_ms: &[f64], q: usize) -> Option<f64> {
    let rank = (sorted_ms.len() * q).div_ceil(100).max(1);
    sorted_ms.get(rank - 1).copied()
}

fn objects(p: &Params, policy: Policy, lossy: bool) -> Row {
    let (c, s) = configs(p, policy);
    let mut specs = paths(&path_params());
    if lossy {
        specs[0].a_to_b.loss = LossModel::Bernoulli(p.loss);
        specs[0].b_to_a.loss = LossModel::Bernoulli(p.loss);
    }
    let mut a = RrHost::new(Endpoint::new(c, seed32(p.seed, 0xA)));
    let mut b = RrHost::new(Endpoint::new(s, seed32(p.seed, 0xB)));
    let server_addr = SocketAddr::new(specs[0].addr_b, 8080);
    b.ep.listen(server_addr);
    b.accept_template = Some(RrApp::Server(RrServer::new(100, p.object_size)));
    let h = a.ep.connect(Instant::ZERO, SocketAddr::new(specs[0].addr_a, 0), server_addr).expect("free ports");
    a.attach(h, RrApp::Client(RrClient::new(100, p.object_size, p.objects)));
    a.pump(Instant::ZERO);
    let mut sim =
        Sim::new(SimConfig { seed: p.seed, max_time: Duration::from_secs(3600), ..Default::default() }, a, b, specs);
    sim.run(|s| s.a.client(h).is_some_and(RrClient::done), None, |_, _, _| {});
    let client = sim.a.client(h).expect("attached");
    let mut lat: Vec<f64> = client.latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    lat.sort_by(f64::total_cmp);
    let total: Duration = client.latencies.iter().sum();
    let server = sim.b.ep.handles().next();
    let server_conn = server.and_then(|sh| sim.b.ep.conn(sh));
    let info = server_conn.map(|c| c.info());
    Row {
        workload: if lossy { Workload::ObjectsLoss.name() } else { Workload::Objects.name() },
        scheduler: policy.name(),
        goodput_mbps: if total.is_zero() {
            0.0
        } else {
            (lat.len() * p.object_size) as f64 * 8.0 / total.as_secs_f64() / 1e6
        },
        ofo_queue: sim.a.ep.counters().mptcp_ofo_queue,
        rwnd_limited_s: info.as_ref().map_or(0.0, |i| i.rwnd_limited.as_secs_f64()),
        object_p50_ms: percentile(&lat, 50),
        object_p99_ms: percentile(&lat, 99),
        path_bytes: info.map(|i| i.subflows.iter().map(|s| s.tcp.bytes_acked).collect()).unwrap_or_default(),
        retransmits: sim.b.ep.counters().tcp_retrans_segs,
        complete: client.done(),
    }
}

/// One workload under one scheduler.
pub fn run_one(p: &Params, w: Workload, policy: Policy) -> Row {
    match w {
        Workload::Bulk256k => bulk(p, policy, true),
        Workload::BulkAuto => bulk(p, policy, false),
        Workload::Objects => objects(p, policy, false),
        Workload::ObjectsLoss => objects(p, policy, true),
    }
}

/// Every workload under every scheduler.
pub fn run(p: &Params) -> Report {
    let wall = std::time::Instant::now();
    let rows = p.workloads.iter().flat_map(|&w| p.schedulers.iter().map(move |&s| run_one(p, w, s))).collect();
    let mut report = Report {
        scenario: "sched-compare",
        seed: p.seed,
        paths: path_params()
            .iter()
            .map(|q| format!("{} Mbit/s, {} ms one way", q.rate_bps as f64 / 1e6, q.delay.as_millis()))
            .collect(),
        rows,
        wall_s: wall.elapsed().as_secs_f64(),
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    report
}
