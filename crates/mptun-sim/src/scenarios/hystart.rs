//! `hystart`: the experiment of the 2025 HyStart round-start fix
//! ("tcp_cubic: fix incorrect HyStart round start detection"), end to end
//! through the real subflow.
//!
//! The patch's setup: min RTT 150 ms, a 50 Mbit/s bottleneck with a 1-BDP
//! droptail buffer (50 Mbit/s / 1514 B / 8 × 0.150 s = 619 packets), one CUBIC
//! flow from server to client for 1.5 s, run once with the old round
//! bookkeeping (`legacy`) and once with the fix (`fixed`). The patch reports
//! legacy → HYSTART-DELAY at cwnd 516 (below the BDP, link not saturated),
//! fixed → HYSTART-ACK-TRAIN at cwnd 632 (above it), and 300 KB more data.
//!
//! # Ethernet framing
//!
//! The patch counts 1514-byte Ethernet frames; our links carry IP packets
//! (1500 bytes at MSS 1460 with timestamps). The link is therefore given the
//! *IP-equivalent* rate `rate × 1500 / 1514`, which makes a full-sized packet
//! take exactly the time a 1514-byte frame takes at `rate`; the BDP is
//! computed in 1514-byte frames as in the patch, and utilisation counts IP
//! length + 14 bytes against `rate`. (Small packets are charged slightly less
//! than their real framing; only ACKs are small, and they use the other
//! direction.)

use super::seed32;
use crate::apps::BulkApp;
use crate::stack::StackHost;
use crate::tap::Tap;
use crate::world::{PathSpec, Sim, SimConfig};
use mptun_cc::{Algorithm, CaState, HystartRoundStart, PacerKind};
use mptun_link::LinkConfig;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::tcp::BufferSize;
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Ethernet header bytes on the wire per IP packet (no FCS/preamble, as
/// the patch's 1514 counts them).
pub const ETHERNET_OVERHEAD: u32 = 14;
/// IP packet size of a full-sized segment (MSS 1460, timestamps on: 1448 payload).
pub const IP_PACKET: u32 = 1500;

/// Parameters (defaults are the patch's).
#[derive(Clone, Debug)]
pub struct Params {
    /// Bottleneck rate on the wire (Ethernet frames), bits per second.
    pub rate_bps: u64,
    /// Minimum RTT: split evenly into the two one-way delays.
    pub rtt: Duration,
    /// Bottleneck buffer in packets; `None` = 1 BDP of 1514-byte frames.
    pub queue_packets: Option<usize>,
    /// How long the server sends, from the moment it accepted the connection.
    pub duration: Duration,
    /// The sender's pacer. Default `None`: the patch's sender ran CUBIC
    /// without the `fq` qdisc, and Linux TCP then does not pace
    /// (`sk_pacing_status == SK_PACING_NONE`), which also selects HyStart's
    /// `delay_min / 2` train threshold.
    pub pacer: PacerKind,
    /// The client's receive buffer, fixed (like `SO_RCVBUF`) at this many
    /// bytes, or `None` for the subflow's autotuning. Default: Linux's
    /// `tcp_rmem[2]` (6 MiB), so the receive window never limits the sender,
    /// as a Linux receiver's autotuning does not in the patch, whatever the
    /// subflow's own autotuning does in slow start (`docs/cc.md`).
    pub fixed_recv_buffer: Option<usize>,
    /// Sample the sender's state every this often into `trace` (None: no trace).
    pub trace_every: Option<Duration>,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            rate_bps: 50_000_000,
            rtt: Duration::from_millis(150),
            queue_packets: None,
            duration: Duration::from_millis(1500),
            pacer: PacerKind::None,
            fixed_recv_buffer: Some(6 * 1024 * 1024),
            trace_every: None,
            seed: 1,
        }
    }
}

impl Params {
    /// BDP in 1514-byte frames, rounded down as the seed does (619.2 → 619).
    pub fn bdp_packets(&self) -> u32 {
        let frame = u128::from(IP_PACKET + ETHERNET_OVERHEAD);
        (u128::from(self.rate_bps) * self.rtt.as_nanos() / 8 / 1_000_000_000 / frame) as u32
    }

    /// The IP-level rate that serialises a 1500-byte packet in the time a
    /// 1514-byte frame takes at `rate_bps`.
    pub fn ip_rate_bps(&self) -> u64 {
        (u128::from(self.rate_bps) * u128::from(IP_PACKET) / u128::from(IP_PACKET + ETHERNET_OVERHEAD)) as u64
    }
}

/// One sample of the sender's state.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HystartTrace {
    pub t_s: f64,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u64,
    pub packets_out: u32,
    /// The client's advertised window as the sender sees it, bytes.
    pub snd_wnd: u32,
    /// Client-side arrivals so far (IP bytes): the bottleneck's output.
    pub arrived_bytes: u64,
}

/// Outcome of one run (one round-start variant).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VariantReport {
    pub round_start: String,
    /// `"train"` or `"delay"` (HyStart), `"loss"` (a loss ended slow start
    /// before HyStart fired), `"none"` (still in slow start at the end).
    pub exit_reason: &'static str,
    /// cwnd in packets when slow start ended (for `"loss"`: the last cwnd
    /// before recovery; for `"none"`: the cwnd at the end).
    pub exit_cwnd: u32,
    /// When slow start ended, seconds after the server started sending.
    pub exit_time_s: Option<f64>,
    pub bdp_packets: u32,
    /// Bytes the client application received within `duration` of the
    /// server starting to send.
    pub delivered_bytes: u64,
    /// The bottleneck ran at ≥ 99% of its rate (wire bytes, framing
    /// included, against `rate_bps`) over the last min-RTT of the run, i.e.
    /// the flow kept the pipe full when the run ended.
    pub bottleneck_saturated: bool,
    /// The utilisation `bottleneck_saturated` is judged on.
    pub tail_utilisation: f64,
    /// Bottleneck utilisation in consecutive min-RTT windows from the first
    /// data packet's arrival.
    pub utilisation_per_rtt: Vec<f64>,
    pub max_queue_packets: u64,
    pub dropped_queue: u64,
    pub retransmits: u64,
    pub final_cwnd: u32,
    pub final_ssthresh: u32,
    pub min_rtt_us: u64,
    /// Sender counters (TcpExtTCPHystart* included).
    pub server_counters: BTreeMap<&'static str, u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<HystartTrace>,
}

/// The JSON `mptun sim hystart` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub seed: u64,
    pub rate_bps: u64,
    pub ip_rate_bps: u64,
    pub rtt_ms: f64,
    pub queue_packets: usize,
    pub duration_s: f64,
    pub pacer: String,
    /// The client's receive buffer: `"auto"` or a fixed size in bytes.
    pub recv_buffer: String,
    pub legacy: VariantReport,
    pub fixed: VariantReport,
    /// Extra bytes the fix delivered (fixed − legacy).
    pub delivered_gain_bytes: i64,
    pub wall_s: f64,
    /// SHA-256 of this report without its wall-clock fields (see [`crate::report::run_digest`]).
    pub run_digest: String,
}

/// The path: data (server B → client A) through the bottleneck; ACKs back
/// over a link of the same rate and delay.
pub fn path(p: &Params) -> (PathSpec, usize) {
    let queue = p.queue_packets.unwrap_or(p.bdp_packets() as usize).max(1);
    let link = LinkConfig {
        rate_bps: Some(p.ip_rate_bps()),
        delay: p.rtt / 2,
        limit_packets: Some(queue),
        ..Default::default()
    };
    let spec = PathSpec {
        addr_a: "10.0.3.1".parse().expect("literal"),
        addr_b: "10.0.3.2".parse().expect("literal"),
        a_to_b: link,
        b_to_a: link,
    };
    (spec, queue)
}

/// What the per-step observer learns about the sender.
#[derive(Default)]
struct Watch {
    server: Option<ConnectionHandle>,
    t0: Option<Instant>,
    /// Client bytes received at the last step not after the end.
    delivered: u64,
    /// cwnd at the last step still in slow start.
    last_ss_cwnd: u32,
    /// The first way slow start ended: (reason, cwnd, when).
    exit: Option<(&'static str, u32, Instant)>,
}

/// Runs one variant.
pub fn run_variant(p: &Params, round_start: HystartRoundStart) -> VariantReport {
    let (spec, _) = path(p);
    // Plain TCP on both ends, as in the patch.
    let mut server_cfg = EndpointConfig::default();
    server_cfg.mptcp.enabled = false;
    server_cfg.tcp.congestion_control = Algorithm::Cubic;
    server_cfg.tcp.cubic.round_start = round_start;
    server_cfg.tcp.pacer = p.pacer;
    let mut client_cfg = EndpointConfig::default();
    client_cfg.mptcp.enabled = false;
    if let Some(n) = p.fixed_recv_buffer {
        client_cfg.tcp.recv_buffer = BufferSize::Fixed(n);
    }

    let client_addr = SocketAddr::new(spec.addr_a, 0);
    let server_addr = SocketAddr::new(spec.addr_b, 5201);
    let mut a = StackHost::new(Endpoint::new(client_cfg, seed32(p.seed, 0xA)));
    let mut b = StackHost::new(Endpoint::new(server_cfg, seed32(p.seed, 0xB)));
    b.ep.listen(server_addr);
    // More than the path can carry in `duration`: the sender is never app-limited.
    let bulk = (p.rate_bps / 8).saturating_mul(p.duration.as_secs().max(1) * 4);
    b.accept_template = Some(BulkApp::new(bulk, p.seed ^ 0x0005_EEDB));
    let h = a.ep.connect(Instant::ZERO, client_addr, server_addr).expect("a fresh endpoint has free ports");
    a.attach(h, BulkApp::new(0, p.seed ^ 0x0005_EEDA));
    a.pump(Instant::ZERO);

    let mut sim = Sim::new(
        SimConfig { seed: p.seed, max_time: Duration::from_secs(3600), ..Default::default() },
        Tap::new(a),
        b,
        vec![spec],
    );
    let mut w = Watch::default();
    let mut trace = Vec::new();
    let duration = p.duration;
    sim.run(
        |s| {
            let now = s.now();
            if w.server.is_none() {
                w.server = s.b.apps.keys().next().copied();
                if w.server.is_some() {
                    w.t0 = Some(now);
                }
            }
            let (Some(sh), Some(t0)) = (w.server, w.t0) else { return false };
            let end = t0 + duration;
            if now <= end {
                w.delivered = s.a.inner.apps.get(&h).map_or(0, |app| app.received);
                if let Some(c) = s.b.ep.conn(sh).and_then(|c| c.subflow(0)).filter(|_| w.exit.is_none()) {
                    let i = c.info();
                    if let Some(e) = c.cc().slow_start_exit() {
                        w.exit = Some((e.reason.name(), e.cwnd, now));
                    } else if i.ssthresh != u32::MAX || !matches!(i.ca_state, CaState::Open | CaState::Disorder) {
                        w.exit = Some(("loss", w.last_ss_cwnd, now));
                    } else {
                        w.last_ss_cwnd = i.cwnd;
                    }
                }
            }
            now >= end
        },
        p.trace_every,
        |now, a, b| {
            let Some(sh) = b.apps.keys().next() else { return };
            if let Some(c) = b.ep.conn(*sh).and_then(|c| c.subflow(0)) {
                let i = c.info();
                trace.push(HystartTrace {
                    t_s: now.as_secs_f64(),
                    cwnd: i.cwnd,
                    ssthresh: i.ssthresh,
                    srtt_us: i.srtt.as_micros() as u64,
                    packets_out: i.packets_out,
                    snd_wnd: i.snd_wnd,
                    arrived_bytes: a.rx_bytes,
                });
            }
        },
    );

    let t0 = w.t0.expect("the handshake completes long before the end");
    let end = t0 + p.duration;
    let sh = w.server.expect("accepted");
    let conn = sim.b.ep.conn(sh).and_then(|c| c.subflow(0)).expect("connection alive");
    let info = conn.info();
    let (exit_reason, exit_cwnd, exit_at) = match w.exit {
        Some((reason, cwnd, at)) => (reason, cwnd, Some(at)),
        None => ("none", w.last_ss_cwnd, None),
    };

    // The bottleneck's output as seen at the client; windows of one min RTT
    // starting when the first data packet arrived.
    let first_data = sim.a.arrivals().iter().find(|&&(_, len)| len >= IP_PACKET).map_or(end, |&(t, _)| t);
    // A zero RTT has no windows to cut; judge the tail over 1 ms instead.
    let rtt = p.rtt.max(Duration::from_millis(1));
    let mut per_rtt = Vec::new();
    let mut from = first_data;
    while from + rtt <= end {
        per_rtt.push(round4(sim.a.utilisation(from, from + rtt, p.rate_bps, ETHERNET_OVERHEAD)));
        from += rtt;
    }
    let tail = sim.a.utilisation(end - rtt, end, p.rate_bps, ETHERNET_OVERHEAD);
    let (_, ba) = sim.link_stats(0);
    let sc = sim.b.ep.counters();
    let mut counters = crate::report::counters_map(&sc);
    let cc = conn.cc().counters();
    for (k, v) in [
        ("TcpExtTCPHystartTrainDetect", cc.tcp_ext_tcp_hystart_train_detect),
        ("TcpExtTCPHystartTrainCwnd", cc.tcp_ext_tcp_hystart_train_cwnd),
        ("TcpExtTCPHystartDelayDetect", cc.tcp_ext_tcp_hystart_delay_detect),
        ("TcpExtTCPHystartDelayCwnd", cc.tcp_ext_tcp_hystart_delay_cwnd),
    ] {
        if v != 0 {
            counters.insert(k, v);
        }
    }
    VariantReport {
        round_start: round_start.to_string(),
        exit_reason,
        exit_cwnd,
        exit_time_s: exit_at.map(|t| round6((t - t0).as_secs_f64())),
        bdp_packets: p.bdp_packets(),
        delivered_bytes: w.delivered,
        bottleneck_saturated: tail >= 0.99,
        tail_utilisation: round4(tail),
        utilisation_per_rtt: per_rtt,
        max_queue_packets: ba.max_queue_packets,
        dropped_queue: ba.dropped_queue,
        retransmits: sc.tcp_retrans_segs,
        final_cwnd: info.cwnd,
        final_ssthresh: info.ssthresh,
        min_rtt_us: info.min_rtt.as_micros() as u64,
        server_counters: counters,
        trace,
    }
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Runs both variants.
pub fn run(p: &Params) -> Report {
    let wall = std::time::Instant::now();
    let legacy = run_variant(p, HystartRoundStart::Legacy);
    let fixed = run_variant(p, HystartRoundStart::Fixed);
    let (_, queue) = path(p);
    let mut report = Report {
        scenario: "hystart",
        seed: p.seed,
        rate_bps: p.rate_bps,
        ip_rate_bps: p.ip_rate_bps(),
        rtt_ms: p.rtt.as_secs_f64() * 1e3,
        queue_packets: queue,
        duration_s: p.duration.as_secs_f64(),
        pacer: p.pacer.to_string(),
        recv_buffer: p.fixed_recv_buffer.map_or_else(|| "auto".to_string(), |n| n.to_string()),
        delivered_gain_bytes: fixed.delivered_bytes as i64 - legacy.delivered_bytes as i64,
        legacy,
        fixed,
        wall_s: wall.elapsed().as_secs_f64(),
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    report
}
