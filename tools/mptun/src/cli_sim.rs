//! `mptun sim <scenario>`: runs a simulator scenario and prints its report.

use crate::units::{parse_duration, parse_rate, parse_ratio, parse_size};
use anyhow::Result;
use clap::{Args, Subcommand};
use mptun_cc::Algorithm;
use mptun_sim::scenarios::tcp_single;

#[derive(Args)]
pub struct SimArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// One TCP flow over one link (default: 20 MB, 10 Mbit/s, 20 ms one way, 1-BDP buffer).
    TcpSingle(TcpSingleArgs),
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
