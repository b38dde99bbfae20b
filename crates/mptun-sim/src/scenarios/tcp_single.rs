//! `tcp-single`: one TCP flow over one emulated link (the stack's basic
//! acceptance test): 20 MB over 10 Mbit/s, 20 ms one-way delay, a 1-BDP
//! droptail buffer, optional loss and reordering.

use super::transfer::{self, TransferResult, TransferSpec};
use crate::report::WallClock;
use crate::world::PathSpec;
use mptun_cc::Algorithm;
use mptun_link::{LinkConfig, LossModel};
use mptun_proto::endpoint::EndpointConfig;
use mptun_time::Duration;
use serde::Serialize;

/// Parameters of the scenario (defaults: the acceptance test above).
#[derive(Clone, Debug)]
pub struct Params {
    pub size: u64,
    pub rate_bps: u64,
    pub delay: Duration,
    /// Bottleneck buffer in packets; `None` = 1 BDP of 1500-byte packets.
    pub queue_packets: Option<usize>,
    pub loss: f64,
    pub reorder: f64,
    pub cc: Algorithm,
    pub seed: u64,
    /// Run it as a single-subflow MPTCP connection instead of plain TCP.
    pub mptcp: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            size: 20_000_000,
            rate_bps: 10_000_000,
            delay: Duration::from_millis(20),
            queue_packets: None,
            loss: 0.0,
            reorder: 0.0,
            cc: Algorithm::Reno,
            seed: 1,
            mptcp: false,
        }
    }
}

/// The JSON the command prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub cc: String,
    pub seed: u64,
    pub size_bytes: u64,
    pub rate_bps: u64,
    pub one_way_delay_ms: f64,
    pub queue_packets: usize,
    pub loss: f64,
    pub reorder: f64,
    /// goodput / link rate.
    pub link_utilisation: f64,
    #[serde(flatten)]
    pub result: TransferResult,
    pub wall_s: f64,
    pub sim_gbps_per_wall_s: f64,
    /// SHA-256 of this report without its wall-clock fields (see [`crate::report::run_digest`]).
    pub run_digest: String,
}

/// Builds the path for these parameters (the link both ways; ACKs share it).
pub fn path(p: &Params) -> (PathSpec, usize) {
    let rtt = p.delay * 2;
    let bdp_packets = (LinkConfig { rate_bps: Some(p.rate_bps), ..Default::default() }.bdp_bytes(rtt) / 1500) as usize;
    let queue = p.queue_packets.unwrap_or(bdp_packets.max(2));
    let link = LinkConfig {
        rate_bps: Some(p.rate_bps),
        delay: p.delay,
        limit_packets: Some(queue),
        loss: if p.loss > 0.0 { LossModel::Bernoulli(p.loss) } else { LossModel::None },
        reorder: p.reorder,
        ..Default::default()
    };
    let spec = PathSpec {
        addr_a: "10.0.1.1".parse().expect("literal"),
        addr_b: "10.0.1.2".parse().expect("literal"),
        a_to_b: link,
        b_to_a: link,
    };
    (spec, queue)
}

/// The transfer this scenario runs, traced every `sample_every` if given.
pub fn spec(p: &Params, sample_every: Option<Duration>) -> TransferSpec {
    let (spec, _) = path(p);
    let mut cfg = EndpointConfig::default();
    cfg.tcp.congestion_control = p.cc;
    cfg.mptcp.enabled = p.mptcp;
    TransferSpec {
        paths: vec![spec],
        size: p.size,
        reverse_size: 0,
        client: cfg.clone(),
        server: cfg,
        seed: p.seed,
        max_time: Duration::from_secs(3600),
        port: 5201,
        sample_every,
        actions: Vec::new(),
        client_scheduler: None,
    }
}

pub fn run(p: &Params) -> Report {
    let (_, queue) = path(p);
    let t = spec(p, None);
    let wall = std::time::Instant::now();
    let r = transfer::run(&t);
    let wc = WallClock::new(wall.elapsed(), r.bytes_received);
    let mut report = Report {
        scenario: "tcp-single",
        cc: p.cc.to_string(),
        seed: p.seed,
        size_bytes: p.size,
        rate_bps: p.rate_bps,
        one_way_delay_ms: p.delay.as_secs_f64() * 1e3,
        queue_packets: queue,
        loss: p.loss,
        reorder: p.reorder,
        link_utilisation: r.goodput_bps / p.rate_bps as f64,
        result: r,
        wall_s: wc.wall_s,
        sim_gbps_per_wall_s: wc.sim_gbps_per_wall_s,
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    report
}
