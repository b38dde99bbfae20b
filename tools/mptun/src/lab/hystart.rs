//! `mptun lab hystart`: the HyStart round-start experiment (`mptun sim
//! hystart`) on real packets. One plain-TCP CUBIC flow from server to
//! client for 1.5 s over one linkem path of 50 Mbit/s (Ethernet frames, as
//! netem counts them), 75 ms each way and a 619-packet bottleneck buffer
//! (1 BDP of 1514-byte frames, packets waiting for the link); mptun's
//! stack runs it twice (`legacy` and `fixed` round start, unpaced as the
//! patch's sender), the kernel once (a kernel with the fix, 6.14 on) as the
//! anchor, read from its `TcpExtTCPHystart*` counters and `TCP_INFO`.
//!
//! Delivered bytes and the bottleneck's tail utilisation are measured at
//! the client: the server starts sending when it accepts, half an RTT
//! after the client's connect completed, so the run's end is `duration +
//! RTT/2` on the client's clock; utilisation counts payload as 1514-byte
//! frames per 1448 bytes against the rate.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use mptun_sim::scenarios::hystart::{self, Params, VariantReport, ETHERNET_OVERHEAD, IP_PACKET};
use serde::Serialize;

use super::peer::run_pair;
use super::topo::{LabCommon, LabStack, Topology};
use super::VsSim;
use crate::report::Verdict;

/// Payload of a full-sized segment (MSS 1460 less the timestamp option).
const PAYLOAD: f64 = 1448.0;

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the report (the simulator's fields, its prediction, the deltas) as JSON")))]
pub(crate) struct HystartArgs {
    /// mptun (legacy and fixed round start) or the kernel's CUBIC (fixed).
    #[arg(long, value_enum, default_value = "mptun")]
    stack: LabStack,
    /// Seconds the server sends for.
    #[arg(long, default_value_t = 1.5)]
    duration: f64,
    #[command(flatten)]
    pub(crate) common: LabCommon,
}

/// One variant on real packets: the simulator's fields it can measure.
#[derive(Clone, Debug, Serialize)]
struct LabVariant {
    round_start: String,
    exit_reason: String,
    exit_cwnd: u32,
    exit_time_s: Option<f64>,
    bdp_packets: u32,
    delivered_bytes: u64,
    bottleneck_saturated: bool,
    tail_utilisation: f64,
    retransmits: u64,
    final_cwnd: u64,
    server_counters: BTreeMap<String, u64>,
    /// The simulator's run of the same variant (for the kernel: `fixed`).
    vs_sim: Vec<VsSim>,
}

#[derive(Serialize)]
struct LabReport {
    scenario: &'static str,
    stack: &'static str,
    rate_bps: u64,
    rtt_ms: f64,
    queue_packets: usize,
    duration_s: f64,
    variants: Vec<LabVariant>,
    /// fixed − legacy (mptun).
    #[serde(skip_serializing_if = "Option::is_none")]
    delivered_gain_bytes: Option<i64>,
    /// How late linkem released frames against their due instants over the whole run (its
    /// `release_error_us`), per direction: `acks` (client → server) and `data`. HyStart's ACK
    /// train needs ACKs no more than 2 ms apart, so a late emulator breaks the train the
    /// controller is judged on: this says whether the emulator, not the stack, moved a result.
    #[serde(skip_serializing_if = "Option::is_none")]
    emulator_release_error_us: Option<serde_json::Value>,
    sim: hystart::Report,
}

/// Bytes received by `t` (seconds after the client's connect completed), interpolated.
fn received_at(series: &[(f64, u64)], t: f64) -> f64 {
    let i = series.partition_point(|&(s, _)| s <= t);
    match (i.checked_sub(1).map(|j| series[j]), series.get(i)) {
        (Some((t0, b0)), Some(&(t1, b1))) if t1 > t0 => b0 as f64 + (b1 - b0) as f64 * (t - t0) / (t1 - t0),
        (Some((_, b)), _) => b as f64,
        (None, _) => 0.0,
    }
}

fn variant(topo: &Topology, a: &HystartArgs, p: &Params, round_start: &str, port: u16) -> Result<LabVariant> {
    let stack = a.stack.name().to_string();
    let mut srv: Vec<String> =
        ["lab", "peer", "--stack", &stack, "--no-mptcp", "--cc", "cubic", "--trace", "--sample-ms", "1"]
            .map(String::from)
            .to_vec();
    // Past the end by one RTT, so the window judged is full.
    let send_for = a.duration + p.rtt.as_secs_f64();
    srv.extend(["--listen".into(), format!("0.0.0.0:{port}"), "--send-for".into(), send_for.to_string()]);
    let mut cli: Vec<String> =
        ["lab", "peer", "--stack", &stack, "--no-mptcp", "--cc", "cubic", "--trace", "--sample-ms", "2"]
            .map(String::from)
            .to_vec();
    match a.stack {
        LabStack::Mptun => {
            srv.extend(
                ["--topology", "linkem-server", "--round-start", round_start, "--pacer", "none"].map(String::from),
            );
            cli.extend(["--topology", "linkem-client:1", "--connect"].map(String::from));
            cli.push(format!("10.8.1.2:{port}"));
            // The simulator's receiver: a fixed 6 MiB (Linux's tcp_rmem[2]), never the limit.
            cli.extend(["--rcvbuf".into(), (6 << 20).to_string()]);
        }
        LabStack::Kernel => {
            cli.extend(["--connect".into(), format!("10.0.1.2:{port}")]);
        }
    }
    let (cr, sr) = run_pair(topo, &srv, &cli, Duration::from_secs(60), Vec::new())?;
    if cr.received != sr.sent || cr.received_sha256 != sr.sent_sha256 {
        bail!("integrity: the server sent {} bytes, the client received {}", sr.sent, cr.received);
    }
    let rtt = p.rtt.as_secs_f64();
    let end = a.duration + rtt / 2.0;
    let delivered = received_at(&cr.rx_series, end);
    let frame = f64::from(IP_PACKET + ETHERNET_OVERHEAD);
    let tail = (delivered - received_at(&cr.rx_series, end - rtt)) * frame / PAYLOAD * 8.0 / (p.rate_bps as f64 * rtt);
    let c = |k: &str| sr.counter(k);
    let (reason, cwnd, t) =
        match (&sr.slow_start_exit, c("TcpExtTCPHystartTrainDetect"), c("TcpExtTCPHystartDelayDetect")) {
            // The kernel's account: which detector fired, and the cwnd it fired at.
            (e, train, _) if a.stack == LabStack::Kernel && train > 0 => {
                ("train".to_string(), c("TcpExtTCPHystartTrainCwnd") as u32, e.as_ref().map(|e| e.t_s))
            }
            (e, _, delay) if a.stack == LabStack::Kernel && delay > 0 => {
                ("delay".to_string(), c("TcpExtTCPHystartDelayCwnd") as u32, e.as_ref().map(|e| e.t_s))
            }
            (Some(e), _, _) => (e.reason.clone(), e.cwnd, Some(e.t_s)),
            (None, _, _) => ("none".to_string(), sr.final_cwnd as u32, None),
        };
    Ok(LabVariant {
        round_start: round_start.into(),
        exit_reason: reason,
        exit_cwnd: cwnd,
        exit_time_s: t,
        bdp_packets: p.bdp_packets(),
        delivered_bytes: delivered as u64,
        bottleneck_saturated: tail >= 0.99,
        tail_utilisation: (tail * 1e4).round() / 1e4,
        retransmits: c("TcpRetransSegs"),
        final_cwnd: sr.final_cwnd,
        server_counters: sr.counters,
        vs_sim: Vec::new(),
    })
}

fn vs_sim(sim: &VariantReport, lab: &LabVariant) -> Vec<VsSim> {
    vec![
        VsSim::new("exit_cwnd", f64::from(sim.exit_cwnd), f64::from(lab.exit_cwnd)),
        VsSim::new("exit_time_s", sim.exit_time_s.unwrap_or(0.0), lab.exit_time_s.unwrap_or(0.0)),
        VsSim::new("delivered_bytes", sim.delivered_bytes as f64, lab.delivered_bytes as f64),
        VsSim::new("tail_utilisation", sim.tail_utilisation, lab.tail_utilisation),
    ]
}

pub(crate) fn run(a: HystartArgs) -> Result<Verdict> {
    if !(a.duration > 0.0 && a.duration <= 60.0) {
        bail!("--duration must be in (0, 60] seconds, got {}", a.duration);
    }
    let p = Params { duration: mptun_time::Duration::from_secs_f64(a.duration), ..Params::default() };
    let (_, queue) = hystart::path(&p);
    let spec = format!(
        "rate={}mbit,delay={}ms,limit={queue},limit-scope=bottleneck",
        p.rate_bps / 1_000_000,
        p.rtt.as_millis() / 2
    );
    let topo = Topology::plan(&a.common)?.up(&[spec], a.stack, false)?;
    let names: &[&str] = match a.stack {
        LabStack::Mptun => &["legacy", "fixed"],
        LabStack::Kernel => &["kernel"],
    };
    let mut variants = Vec::new();
    for (i, n) in names.iter().enumerate() {
        variants.push(variant(&topo, &a, &p, n, 5301 + i as u16)?);
    }
    let emulator = topo
        .ctl(1, &["stats"])
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .map(|v| serde_json::json!({"acks": v["a2b"]["release_error_us"], "data": v["b2a"]["release_error_us"]}));
    drop(topo);
    let sim = hystart::run(&p);
    for v in &mut variants {
        let s = if v.round_start == "legacy" { &sim.legacy } else { &sim.fixed };
        v.vs_sim = vs_sim(s, v);
    }
    let gain = (variants.len() == 2).then(|| variants[1].delivered_bytes as i64 - variants[0].delivered_bytes as i64);
    let r = LabReport {
        scenario: "hystart",
        stack: a.stack.name(),
        rate_bps: p.rate_bps,
        rtt_ms: p.rtt.as_secs_f64() * 1e3,
        queue_packets: queue,
        duration_s: a.duration,
        variants,
        delivered_gain_bytes: gain,
        emulator_release_error_us: emulator,
        sim,
    };
    super::emit(a.common.json.json, &r, || {
        println!(
            "hystart (lab, {}): {} Mbit/s, RTT {} ms, buffer {} packets (BDP {}), {} s",
            r.stack,
            r.rate_bps / 1_000_000,
            r.rtt_ms,
            r.queue_packets,
            p.bdp_packets(),
            r.duration_s
        );
        for v in &r.variants {
            println!(
                "  {:<7} exit {:<6} cwnd {:>4} at {}  delivered {:>9} B  tail utilisation {:.3}{}",
                v.round_start,
                v.exit_reason,
                v.exit_cwnd,
                v.exit_time_s.map_or("-".into(), |t| format!("{t:.3} s")),
                v.delivered_bytes,
                v.tail_utilisation,
                if v.bottleneck_saturated { " (saturated)" } else { "" }
            );
            print!("{}", super::vs_sim_table(&v.vs_sim));
        }
        if let Some(e) = &r.emulator_release_error_us {
            let f = |d: &str, k: &str| e[d][k].as_f64().unwrap_or(f64::NAN) / 1e3;
            println!(
                "  linkem release lateness: ACKs p99 {:.2} ms, max {:.2} ms; data p99 {:.2} ms, max {:.2} ms",
                f("acks", "p99"),
                f("acks", "max"),
                f("data", "p99"),
                f("data", "max")
            );
        }
    })?;
    Ok(Verdict::Pass)
}
