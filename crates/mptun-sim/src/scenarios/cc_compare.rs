//! `cc-compare`: a CUBIC flow and a Reno flow sharing one droptail
//! bottleneck, to see CUBIC's known behaviour against standard TCP:
//! RTT-independent window growth that takes more than half the link once
//! the BDP is large (Reno adds one packet per RTT, CUBIC follows its cubic
//! curve in wall-clock time), and a Reno-like share in the "TCP-friendly"
//! region of small BDPs, where CUBIC's `tcp_friendliness` makes it grow at
//! least as fast as an AIMD flow and no faster.
//!
//! Both flows go from host A to host B over the same path (two connections
//! on the same hosts), each with its own controller; nothing else differs
//! (same MSS, pacer, buffers), so the shares are the controllers' doing.

use super::bottleneck::Bottleneck;
use crate::apps::BulkApp;
use crate::stack::StackHost;
use crate::world::{PathSpec, Sim, SimConfig};
use mptun_cc::Algorithm;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::net::SocketAddr;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Bottleneck rate (IP bytes), both directions.
    pub rate_bps: u64,
    /// Round-trip propagation delay, split evenly.
    pub rtt: Duration,
    /// Bottleneck buffer in packets; `None` = 1 BDP of 1500-byte packets.
    pub queue_packets: Option<usize>,
    /// Length of the run.
    pub duration: Duration,
    /// The CUBIC flow starts this long after the Reno flow.
    pub cubic_delay: Duration,
    /// Interval of the throughput/cwnd samples.
    pub sample_every: Duration,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            rate_bps: 50_000_000,
            rtt: Duration::from_millis(100),
            queue_packets: None,
            duration: Duration::from_secs(60),
            cubic_delay: Duration::ZERO,
            sample_every: Duration::from_secs(1),
            seed: 1,
        }
    }
}

/// One interval of the run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Sample {
    /// End of the interval, seconds from the start.
    pub t_s: f64,
    pub cubic_mbps: f64,
    pub reno_mbps: f64,
    /// CUBIC's share of what both delivered in the interval.
    pub cubic_share: f64,
    pub cubic_cwnd: u32,
    pub reno_cwnd: u32,
}

/// One flow's totals.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowReport {
    pub cc: String,
    /// Bytes delivered to the receiving application over the whole run.
    pub bytes: u64,
    /// Goodput over the second half of the run (the first half holds both
    /// slow starts and the convergence), Mbit/s.
    pub steady_mbps: f64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub recoveries: u64,
    pub final_cwnd: u32,
    pub final_ssthresh: u32,
    /// How slow start ended (HyStart reason and cwnd), if it did by HyStart.
    pub slow_start_exit: Option<(&'static str, u32)>,
}

/// The JSON `mptun sim cc-compare` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub seed: u64,
    pub rate_bps: u64,
    pub rtt_ms: f64,
    pub bdp_packets: u64,
    pub queue_packets: usize,
    pub duration_s: f64,
    pub cubic_delay_s: f64,
    pub cubic: FlowReport,
    pub reno: FlowReport,
    /// CUBIC's share of the bytes delivered in the second half.
    pub cubic_steady_share: f64,
    /// Jain's fairness index of the two second-half goodputs (1 = equal).
    pub jain_index: f64,
    /// Both flows' goodput in the second half over the link rate. Goodput is
    /// what the applications read, so over short runs it can exceed 1: a
    /// recovery releases out-of-order data received earlier all at once.
    pub link_utilisation: f64,
    pub dropped_queue: u64,
    pub samples: Vec<Sample>,
    pub wall_s: f64,
    /// SHA-256 of this report without its wall-clock fields (see [`crate::report::run_digest`]).
    pub run_digest: String,
}

fn seed32(seed: u64, salt: u8) -> [u8; 32] {
    let mut s = [salt; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    s
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// The shared path: the data direction's buffer is the bottleneck.
pub fn path(p: &Params) -> (PathSpec, usize, u64) {
    let b = Bottleneck {
        rate_bps: p.rate_bps,
        rtt: p.rtt,
        queue_packets: p.queue_packets,
        jitter: Duration::ZERO,
        qdisc: Default::default(),
    };
    let (link, queue, bdp) = b.link();
    let spec = PathSpec {
        addr_a: "10.0.5.1".parse().expect("literal"),
        addr_b: "10.0.5.2".parse().expect("literal"),
        a_to_b: link,
        b_to_a: link,
    };
    (spec, queue, bdp)
}

/// Bytes received by B's app for the connection whose client port is `port`.
fn received_by(b: &StackHost, port: u16) -> u64 {
    b.apps
        .iter()
        .find(|(h, _)| b.ep.addresses(**h).is_some_and(|(_, remote)| remote.port() == port))
        .map_or(0, |(_, app)| app.received)
}

struct Flow {
    cc: Algorithm,
    handle: Option<ConnectionHandle>,
    port: u16,
}

fn open(a: &mut StackHost, now: Instant, flow: &mut Flow, spec: &PathSpec, server: SocketAddr, seed: u64) {
    let mut tcp = a.ep.config().tcp.clone();
    tcp.congestion_control = flow.cc;
    let h =
        a.ep.connect_with(now, SocketAddr::new(spec.addr_a, 0), server, tcp).expect("a fresh endpoint has free ports");
    flow.port = a.ep.addresses(h).map_or(0, |(local, _)| local.port());
    flow.handle = Some(h);
    // More than the link can carry in the run: both flows stay backlogged.
    a.attach(h, BulkApp::new(u64::MAX / 4, seed));
    a.pump(now);
}

/// Per-interval throughput, sampled from the step observer at the first
/// event at or after each boundary (so intervals are exact in length up to
/// one packet time).
struct Sampler {
    every: Duration,
    next: Instant,
    /// (t, CUBIC bytes, Reno bytes) at the last sample.
    prev: (Instant, u64, u64),
    half_t: Instant,
    half: Option<(Instant, u64, u64)>,
    samples: Vec<Sample>,
}

impl Sampler {
    fn observe(&mut self, s: &Sim<StackHost, StackHost>, cubic: &Flow, reno: &Flow, last: bool) {
        let now = s.now();
        if now < self.next && !last {
            return;
        }
        self.next = now + self.every;
        let (cb, rb) = (received_by(&s.b, cubic.port), received_by(&s.b, reno.port));
        if self.half.is_none() && now >= self.half_t {
            self.half = Some((now, cb, rb));
        }
        let dt = (now - self.prev.0).as_secs_f64();
        if dt <= 0.0 {
            return;
        }
        let (dc, dr) = (cb - self.prev.1, rb - self.prev.2);
        let cwnd =
            |f: &Flow| f.handle.and_then(|h| s.a.ep.conn(h)).and_then(|c| c.subflow(0)).map_or(0, |sf| sf.info().cwnd);
        self.samples.push(Sample {
            t_s: round3(now.as_secs_f64()),
            cubic_mbps: round3(dc as f64 * 8.0 / dt / 1e6),
            reno_mbps: round3(dr as f64 * 8.0 / dt / 1e6),
            cubic_share: if dc + dr == 0 { 0.0 } else { round3(dc as f64 / (dc + dr) as f64) },
            cubic_cwnd: cwnd(cubic),
            reno_cwnd: cwnd(reno),
        });
        self.prev = (now, cb, rb);
    }
}

/// Runs the experiment.
pub fn run(p: &Params) -> Report {
    let wall = std::time::Instant::now();
    let (spec, queue, bdp) = path(p);
    let mut cfg = EndpointConfig::default();
    cfg.mptcp.enabled = false;
    let server = SocketAddr::new(spec.addr_b, 5201);
    let mut a = StackHost::new(Endpoint::new(cfg.clone(), seed32(p.seed, 0xA)));
    let mut b = StackHost::new(Endpoint::new(cfg, seed32(p.seed, 0xB)));
    b.ep.listen(server);
    b.accept_template = Some(BulkApp::new(0, 0));
    let mut reno = Flow { cc: Algorithm::Reno, handle: None, port: 0 };
    let mut cubic = Flow { cc: Algorithm::Cubic, handle: None, port: 0 };
    open(&mut a, Instant::ZERO, &mut reno, &spec, server, p.seed ^ 0x0001_0000);
    if p.cubic_delay.is_zero() {
        open(&mut a, Instant::ZERO, &mut cubic, &spec, server, p.seed ^ 0x0002_0000);
    }

    let end = Instant::ZERO + p.duration;
    let addrs = spec.clone();
    let mut sim = Sim::new(SimConfig { seed: p.seed, max_time: p.duration, ..Default::default() }, a, b, vec![spec]);
    let mut sampler = Sampler {
        every: p.sample_every.max(Duration::from_millis(1)),
        next: Instant::ZERO + p.sample_every.max(Duration::from_millis(1)),
        prev: (Instant::ZERO, 0, 0),
        half_t: Instant::ZERO + p.duration / 2,
        half: None,
        samples: Vec::new(),
    };
    if !p.cubic_delay.is_zero() {
        let start = Instant::ZERO + p.cubic_delay.min(p.duration);
        sim.run(
            |s| {
                sampler.observe(s, &cubic, &reno, false);
                s.now() >= start
            },
            None,
            |_, _, _| {},
        );
        let now = sim.now();
        open(&mut sim.a, now, &mut cubic, &addrs, server, p.seed ^ 0x0002_0000);
    }
    sim.run(
        |s| {
            sampler.observe(s, &cubic, &reno, false);
            s.now() >= end
        },
        None,
        |_, _, _| {},
    );
    sampler.observe(&sim, &cubic, &reno, true);
    let now = sim.now();
    let samples = std::mem::take(&mut sampler.samples);

    let (cb, rb) = (received_by(&sim.b, cubic.port), received_by(&sim.b, reno.port));
    let (ht, hc, hr) = sampler.half.unwrap_or((sampler.half_t, 0, 0));
    let steady_s = (now - ht).as_secs_f64().max(1e-9);
    let (sc, sr) = ((cb - hc) as f64 * 8.0 / steady_s, (rb - hr) as f64 * 8.0 / steady_s);
    let flow_report = |f: &Flow, bytes: u64, steady_bps: f64| {
        let conn = f.handle.and_then(|h| sim.a.ep.conn(h));
        let sub = conn.and_then(|c| c.subflow(0));
        let counters = conn.map(|c| c.counters()).unwrap_or_default();
        let info = sub.map(|s| s.info());
        FlowReport {
            cc: f.cc.to_string(),
            bytes,
            steady_mbps: round3(steady_bps / 1e6),
            retransmits: counters.tcp_retrans_segs,
            timeouts: counters.tcp_ext_tcp_timeouts,
            recoveries: counters.tcp_ext_tcp_sack_recovery + counters.tcp_ext_tcp_reno_recovery,
            final_cwnd: info.map_or(0, |i| i.cwnd),
            final_ssthresh: info.map_or(0, |i| i.ssthresh),
            slow_start_exit: sub.and_then(|s| s.cc().slow_start_exit()).map(|e| (e.reason.name(), e.cwnd)),
        }
    };
    let cubic_report = flow_report(&cubic, cb, sc);
    let reno_report = flow_report(&reno, rb, sr);
    let jain = if sc + sr > 0.0 { (sc + sr).powi(2) / (2.0 * (sc * sc + sr * sr)) } else { 0.0 };
    let (ab, _) = sim.link_stats(0);
    let mut report = Report {
        scenario: "cc-compare",
        seed: p.seed,
        rate_bps: p.rate_bps,
        rtt_ms: p.rtt.as_secs_f64() * 1e3,
        bdp_packets: bdp,
        queue_packets: queue,
        duration_s: p.duration.as_secs_f64(),
        cubic_delay_s: p.cubic_delay.as_secs_f64(),
        cubic: cubic_report,
        reno: reno_report,
        cubic_steady_share: if sc + sr > 0.0 { round3(sc / (sc + sr)) } else { 0.0 },
        jain_index: round3(jain),
        link_utilisation: round3((sc + sr) / p.rate_bps as f64),
        dropped_queue: ab.dropped_queue,
        samples,
        wall_s: wall.elapsed().as_secs_f64(),
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    report
}
