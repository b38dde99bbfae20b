//! `edt-rr`: the netperf `TCP_RR` test of Linux's switch to the
//! earliest-departure-time pacing model (Eric Dumazet, "tcp: switch tcp and
//! sch_fq to new earliest departure time model", 4.20), run on both pacers.
//!
//! The patch: 100-byte requests and responses over a flow whose pacing rate
//! is *reduced* — as after a few losses shrink cwnd, or with an RTT above a
//! few ms. The old `sch_fq` paced such a flow in quanta: each flow gets
//! `quantum` (2 × MTU) bytes of credit, and when a dequeue exhausts it, the
//! flow is throttled for `quantum / rate` (halved by fq's drift credit)
//! before its next packet, however small. A request/response flow spends its
//! credit 150 bytes at a time, so every ~quantum/150 packets one message sits
//! out a multi-millisecond throttle: the patch saw max 5279 µs and P99 3825 µs
//! against a 20 µs minimum. EDT charges each packet only `len / rate` from
//! the previous departure, which a transaction round trip already covers, so
//! the artefact disappears (max 128 µs, P99 63 µs).
//!
//! # How the reduced rate is produced here
//!
//! With `SO_MAX_PACING_RATE` ([`TcpConfig::max_pacing_rate`]) on both ends.
//! A flow whose own rate estimate fell (small cwnd, larger srtt) ends up in
//! the same place, but in a simulator with no other traffic the estimate
//! would be set by the RR flow itself (cwnd 10, 20 µs srtt: gigabytes per
//! second) — the cap is the faithful way to put the flow at a rate where the
//! mechanism shows, and it is what the patch's `fq` would also apply.
//!
//! The default rate, 80 Mbit/s (10 MB/s), keeps EDT's per-packet spacing
//! (152 bytes / rate = 15 µs) below the 20 µs transaction round trip, so EDT
//! adds nothing, as in the patch. The MTU sets the fq quantum (2 × MTU) and
//! decides what the artefact can look like:
//! * the throttle is `quantum / rate / 2` and EDT's spacing `pkt / rate`, so
//!   quantum-over-EDT latency is bounded by `quantum / (2 × pkt)`: with a
//!   1500-byte MTU that is 3000 / 304 ≈ 9.9, never an order of magnitude;
//! * the throttled share of transactions is `pkt / quantum`, and it must
//!   exceed 1% for the P99 to show it: quantum < 15 200 bytes here. (Both
//!   directions' credits run out in the same transaction in the simulator,
//!   see `docs/cc.md`; in the kernel, fq also charges the handshake to the
//!   flow's credit, which puts the two directions out of phase and doubles
//!   the share.)
//!
//! The default MTU, 4000 (quantum 8000 bytes), sits inside that window.
//! `--mtu 1500` shows the bounded version of the artefact; `--mtu 9000
//! --pacing-rate 19.2mbit` is what the patch's own numbers point to (a
//! ≈3.8 ms throttle), where the P99 hides the artefact because of the
//! in-phase credits.
//!
//! [`TcpConfig::max_pacing_rate`]: mptun_proto::tcp::TcpConfig::max_pacing_rate

use super::seed32;
use crate::rr::{LatencyStats, RrApp, RrClient, RrHost, RrServer};
use crate::world::{PathSpec, Sim, SimConfig};
use mptun_cc::PacerKind;
use mptun_link::LinkConfig;
use mptun_proto::endpoint::{Endpoint, EndpointConfig};
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::net::SocketAddr;

/// Parameters (defaults reproduce the patch's shape).
#[derive(Clone, Debug)]
pub struct Params {
    pub request_size: usize,
    pub response_size: usize,
    /// Transactions per variant.
    pub transactions: u64,
    /// `SO_MAX_PACING_RATE` on both ends, bytes per second.
    pub max_pacing_rate: u64,
    /// Link MTU: sets the MSS and the quantum pacer's quantum (2 × MTU).
    pub mtu: usize,
    /// Link rate, both directions.
    pub link_rate_bps: u64,
    /// One-way delay, both directions (a LAN: tens of microseconds).
    pub one_way_delay: Duration,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            request_size: 100,
            response_size: 100,
            transactions: 50_000,
            max_pacing_rate: 10_000_000,
            mtu: 4000,
            link_rate_bps: 10_000_000_000,
            one_way_delay: Duration::from_micros(10),
            seed: 1,
        }
    }
}

/// One pacer's result.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VariantReport {
    pub pacer: String,
    #[serde(flatten)]
    pub latency: LatencyStats,
    /// Transactions per second of simulated time (netperf's result column).
    pub transactions_per_s: f64,
    /// Transactions that took more than 10 × the minimum: the throttled ones.
    pub slow_transactions: u64,
    pub retransmits: u64,
}

/// The JSON `mptun sim edt-rr` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub seed: u64,
    pub request_size: usize,
    pub response_size: usize,
    pub max_pacing_rate_bps: u64,
    pub mtu: usize,
    pub link_rate_bps: u64,
    pub one_way_delay_us: f64,
    pub edt: VariantReport,
    pub quantum: VariantReport,
    pub wall_s: f64,
    /// SHA-256 of this report without its wall-clock fields (see [`crate::report::run_digest`]).
    pub run_digest: String,
}

/// Runs the request/response test with one pacer.
pub fn run_variant(p: &Params, pacer: PacerKind) -> VariantReport {
    let link = LinkConfig { rate_bps: Some(p.link_rate_bps), delay: p.one_way_delay, ..Default::default() };
    let spec = PathSpec {
        addr_a: "10.0.4.1".parse().expect("literal"),
        addr_b: "10.0.4.2".parse().expect("literal"),
        a_to_b: link,
        b_to_a: link,
    };
    let mut cfg = EndpointConfig::default();
    cfg.mptcp.enabled = false;
    cfg.tcp.pacer = pacer;
    cfg.tcp.max_pacing_rate = Some(p.max_pacing_rate);
    cfg.tcp.mss = u16::try_from(p.mtu.saturating_sub(40).clamp(88, 65_495)).expect("clamped");

    let mut a = RrHost::new(Endpoint::new(cfg.clone(), seed32(p.seed, 0xA)));
    let mut b = RrHost::new(Endpoint::new(cfg, seed32(p.seed, 0xB)));
    let server_addr = SocketAddr::new(spec.addr_b, 12865);
    b.ep.listen(server_addr);
    b.accept_template = Some(RrApp::Server(RrServer::new(p.request_size, p.response_size)));
    let h =
        a.ep.connect(Instant::ZERO, SocketAddr::new(spec.addr_a, 0), server_addr)
            .expect("a fresh endpoint has free ports");
    a.attach(h, RrApp::Client(RrClient::new(p.request_size, p.response_size, p.transactions)));
    a.pump(Instant::ZERO);

    let mut sim = Sim::new(
        SimConfig { seed: p.seed, max_time: Duration::from_secs(3600), mtu: p.mtu.max(576), ..Default::default() },
        a,
        b,
        vec![spec],
    );
    sim.run(|s| s.a.client(h).is_some_and(RrClient::done), None, |_, _, _| {});
    let client = sim.a.client(h).expect("attached");
    let latency = LatencyStats::from_latencies(&client.latencies);
    let total: Duration = client.latencies.iter().sum();
    let floor = client.latencies.iter().min().copied().unwrap_or_default() * 10;
    VariantReport {
        pacer: pacer.to_string(),
        transactions_per_s: if total.is_zero() {
            0.0
        } else {
            (latency.transactions as f64 / total.as_secs_f64() * 10.0).round() / 10.0
        },
        slow_transactions: client.latencies.iter().filter(|&&l| l > floor).count() as u64,
        retransmits: sim.a.ep.counters().tcp_retrans_segs + sim.b.ep.counters().tcp_retrans_segs,
        latency,
    }
}

/// Runs both pacers.
pub fn run(p: &Params) -> Report {
    let wall = std::time::Instant::now();
    let edt = run_variant(p, PacerKind::Edt);
    let quantum = run_variant(p, PacerKind::Quantum);
    let mut report = Report {
        scenario: "edt-rr",
        seed: p.seed,
        request_size: p.request_size,
        response_size: p.response_size,
        max_pacing_rate_bps: p.max_pacing_rate * 8,
        mtu: p.mtu,
        link_rate_bps: p.link_rate_bps,
        one_way_delay_us: p.one_way_delay.as_secs_f64() * 1e6,
        edt,
        quantum,
        wall_s: wall.elapsed().as_secs_f64(),
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    report
}
