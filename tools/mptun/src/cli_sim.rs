//! `mptun sim <scenario>`: runs a simulator scenario and prints its report.

use crate::units::{parse_duration, parse_rate, parse_ratio, parse_size};
use anyhow::Result;
use clap::{Args, Subcommand};
use mptun_cc::Algorithm;
use mptun_cc::PacerKind;
use mptun_sim::scenarios::{hystart, tcp_single};

#[derive(Args)]
pub struct SimArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// One TCP flow over one link (default: 20 MB, 10 Mbit/s, 20 ms one way, 1-BDP buffer).
    TcpSingle(TcpSingleArgs),
    /// HyStart round-start fix experiment: one CUBIC flow, legacy vs fixed
    /// (default: 50 Mbit/s, 150 ms RTT, 1-BDP buffer of 619 packets, 1.5 s).
    Hystart(HystartArgs),
}

#[derive(Args)]
struct HystartArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Bottleneck rate on the wire (Ethernet frames of 1514 bytes).
    #[arg(long, default_value = "50mbit", value_parser = parse_rate)]
    rate: u64,
    /// Minimum round-trip time (split evenly between the directions).
    #[arg(long, default_value = "150ms", value_parser = parse_duration)]
    rtt: mptun_time::Duration,
    /// Bottleneck buffer in packets (default: 1 BDP of 1514-byte frames).
    #[arg(long)]
    queue: Option<usize>,
    /// How long the server sends.
    #[arg(long, default_value = "1500ms", value_parser = parse_duration)]
    duration: mptun_time::Duration,
    /// Sender pacing: none (Linux CUBIC without fq, as in the seed), edt or quantum.
    #[arg(long, default_value = "none")]
    pacer: PacerKind,
    /// Client receive buffer: a size (fixed, like SO_RCVBUF; default 6M =
    /// Linux tcp_rmem[2]) or "auto" for the subflow's autotuning.
    #[arg(long, default_value = "6M")]
    rcvbuf: String,
    /// Include a trace of the sender's state sampled this often (e.g. 10ms).
    #[arg(long, value_parser = parse_duration)]
    trace: Option<mptun_time::Duration>,
    /// RNG seed (the run is a pure function of it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
struct TcpSingleArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Congestion control: reno or cubic.
    #[arg(long, default_value = "reno")]
    cc: Algorithm,
    /// Bytes to transfer (20MB = 20,000,000; 20M = 20 MiB).
    #[arg(long, default_value = "20MB", value_parser = parse_size)]
    size: u64,
    /// Link rate, both directions.
    #[arg(long, default_value = "10mbit", value_parser = parse_rate)]
    rate: u64,
    /// One-way delay, both directions.
    #[arg(long, default_value = "20ms", value_parser = parse_duration)]
    delay: mptun_time::Duration,
    /// Bottleneck buffer in packets (default: 1 BDP).
    #[arg(long)]
    queue: Option<usize>,
    /// Random loss probability per packet, both directions (0.01 or 1%).
    #[arg(long, default_value = "0", value_parser = parse_ratio)]
    loss: f64,
    /// Probability that a packet skips the delay line and overtakes others (netem `reorder`).
    #[arg(long, default_value = "0", value_parser = parse_ratio)]
    reorder: f64,
    /// RNG seed (the run is a pure function of it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub fn run(a: SimArgs) -> Result<()> {
    match a.scenario {
        Scenario::Hystart(h) => run_hystart(h),
        Scenario::TcpSingle(t) => {
            let p = tcp_single::Params {
                size: t.size,
                rate_bps: t.rate,
                delay: t.delay,
                queue_packets: t.queue,
                loss: t.loss,
                reorder: t.reorder,
                cc: t.cc,
                seed: t.seed,
                ..tcp_single::Params::default()
            };
            let r = tcp_single::run(&p);
            if t.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "tcp-single ({}): {:.2} Mbit/s goodput over a {:.1} Mbit/s link ({:.1}%), {:.2} s, {} retransmits, {} timeouts, sha256 {}",
                    r.cc,
                    r.result.goodput_bps / 1e6,
                    r.rate_bps as f64 / 1e6,
                    r.link_utilisation * 100.0,
                    r.result.duration_s,
                    r.result.retransmits,
                    r.result.timeouts,
                    if r.result.sha256_match { "match" } else { "MISMATCH" }
                );
                println!(
                    "simulated in {:.3} s wall ({:.2} Gbit simulated per wall second)",
                    r.wall_s, r.sim_gbps_per_wall_s
                );
            }
            if !r.result.sha256_match {
                anyhow::bail!("transfer incomplete or corrupted");
            }
            Ok(())
        }
    }
}

fn run_hystart(h: HystartArgs) -> Result<()> {
    let p = hystart::Params {
        rate_bps: h.rate,
        rtt: h.rtt,
        queue_packets: h.queue,
        duration: h.duration,
        pacer: h.pacer,
        fixed_recv_buffer: if h.rcvbuf.eq_ignore_ascii_case("auto") {
            None
        } else {
            Some(usize::try_from(parse_size(&h.rcvbuf)?)?)
        },
        trace_every: h.trace,
        seed: h.seed,
    };
    let r = hystart::run(&p);
    if h.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "hystart: {:.1} Mbit/s, RTT {:.0} ms, buffer {} packets (BDP {}), {:.2} s, pacer {}",
        r.rate_bps as f64 / 1e6,
        r.rtt_ms,
        r.queue_packets,
        r.legacy.bdp_packets,
        r.duration_s,
        r.pacer
    );
    for v in [&r.legacy, &r.fixed] {
        println!(
            "  {:<7} exit {:<5} at cwnd {:>4} ({}), delivered {:>9} bytes, tail utilisation {:.1}% ({})",
            v.round_start,
            v.exit_reason,
            v.exit_cwnd,
            v.exit_time_s.map_or("never".to_string(), |t| format!("t+{t:.3} s")),
            v.delivered_bytes,
            v.tail_utilisation * 100.0,
            if v.bottleneck_saturated { "saturated" } else { "not saturated" }
        );
    }
    println!("  fixed - legacy: {:+} bytes; simulated in {:.3} s wall", r.delivered_gain_bytes, r.wall_s);
    Ok(())
}
