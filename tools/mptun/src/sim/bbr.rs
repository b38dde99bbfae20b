//! `mptun sim bbr`: BBR's experiments in the simulator (`mptun_sim::scenarios::bbr`):
//! BBR and CUBIC each alone on a deep-buffered link, then one BBR flow against
//! one or more CUBIC flows across buffer sizes.

use crate::units::parse_duration;
use anyhow::Result;
use clap::Args;
use mptun::Algorithm;
use mptun_sim::scenarios::bbr::{self, Path};
use serde::Serialize;

#[derive(Args)]
pub(crate) struct BbrArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Link rates of the flow-alone runs, Mbit/s.
    #[arg(long, value_delimiter = ',', default_value = "10,100")]
    alone_rates: Vec<u64>,
    /// Buffer of the flow-alone runs, BDPs.
    #[arg(long, default_value_t = 10.0)]
    alone_buffer: f64,
    /// Length of each flow-alone run (goodput over its second half).
    #[arg(long, default_value = "30s", value_parser = parse_duration, allow_negative_numbers = true)]
    alone_duration: mptun_time::Duration,
    /// Buffers of the BBR-against-CUBIC runs, BDPs.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,4,16")]
    buffers: Vec<f64>,
    /// Numbers of CUBIC flows against the one BBR flow.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    cubic_flows: Vec<usize>,
    /// Link rate of the BBR-against-CUBIC runs, Mbit/s.
    #[arg(long, default_value_t = 10)]
    versus_rate: u64,
    /// Length of each BBR-against-CUBIC run (shares over its second half).
    #[arg(long, default_value = "60s", value_parser = parse_duration, allow_negative_numbers = true)]
    versus_duration: mptun_time::Duration,
    /// Seeds per grid point (1..=N); figures are their mean and standard deviation.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Order-preserving delay jitter of the bottleneck, µs (both experiments; the flow-alone
    /// runs are also made without).
    #[arg(long, default_value_t = 500)]
    jitter_us: u64,
}

#[derive(Serialize)]
struct Alone {
    rate_mbit: u64,
    cc: &'static str,
    jitter_us: u64,
    buffer_bdp: f64,
    goodput_mbit: f64,
    /// Goodput over the link rate.
    goodput_of_link: f64,
    /// The link's use on the wire (headers counted).
    link_utilisation: f64,
    queue_delay_p50_ms: f64,
    queue_delay_p99_ms: f64,
    drops: u64,
}

#[derive(Serialize)]
struct Versus {
    buffer_bdp: f64,
    cubic_flows: usize,
    /// The BBR flow's share of all goodput, mean and standard deviation over the seeds.
    bbr_share: f64,
    bbr_share_sd: f64,
    /// Each CUBIC flow's mean share.
    cubic_share_each: f64,
    /// What the BBR flow would get with an equal split.
    fair_share: f64,
    link_utilisation: f64,
    queue_delay_p50_ms: f64,
    drops: f64,
}

#[derive(Serialize)]
struct Report {
    alone: Vec<Alone>,
    versus: Vec<Versus>,
    seeds: u64,
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 { v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (m, var.sqrt())
}

pub(crate) fn run(a: BbrArgs) -> Result<()> {
    let jitter = mptun_time::Duration::from_micros(a.jitter_us);
    let mut alone = Vec::new();
    for &rate in &a.alone_rates {
        for jitter_us in [a.jitter_us, 0] {
            for cc in [Algorithm::Bbr, Algorithm::Cubic] {
                let path = Path {
                    jitter: mptun_time::Duration::from_micros(jitter_us),
                    ..Path::new(rate * 1_000_000, a.alone_buffer)
                };
                let r = bbr::alone(&path, cc, a.alone_duration, 1);
                let (f, l) = (&r.flows[0], &r.links[0]);
                alone.push(Alone {
                    rate_mbit: rate,
                    cc: cc.name(),
                    jitter_us,
                    buffer_bdp: a.alone_buffer,
                    goodput_mbit: f.goodput_bps / 1e6,
                    goodput_of_link: f.goodput_bps / (rate as f64 * 1e6),
                    link_utilisation: l.utilisation,
                    queue_delay_p50_ms: l.queue_delay_p50_ms,
                    queue_delay_p99_ms: l.queue_delay_p99_ms,
                    drops: l.dropped_queue,
                });
            }
            if a.jitter_us == 0 {
                break;
            }
        }
    }
    let mut versus = Vec::new();
    for &buffer in &a.buffers {
        for &n in &a.cubic_flows {
            let path = Path { jitter, ..Path::new(a.versus_rate * 1_000_000, buffer) };
            let (mut bbr_s, mut cubic_s, mut util, mut q, mut drops) = (vec![], vec![], vec![], vec![], vec![]);
            for seed in 1..=a.seeds.max(1) {
                let r = bbr::versus(&path, n, a.versus_duration, seed);
                bbr_s.push(r.flows[0].share);
                cubic_s.push(r.flows[1..].iter().map(|f| f.share).sum::<f64>() / n as f64);
                util.push(r.links[0].utilisation);
                q.push(r.links[0].queue_delay_p50_ms);
                drops.push(r.links[0].dropped_queue as f64);
            }
            let (m, sd) = mean_sd(&bbr_s);
            versus.push(Versus {
                buffer_bdp: buffer,
                cubic_flows: n,
                bbr_share: m,
                bbr_share_sd: sd,
                cubic_share_each: mean_sd(&cubic_s).0,
                fair_share: 1.0 / (n as f64 + 1.0),
                link_utilisation: mean_sd(&util).0,
                queue_delay_p50_ms: mean_sd(&q).0,
                drops: mean_sd(&drops).0,
            });
        }
    }
    let r = Report { alone, versus, seeds: a.seeds };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!("One flow alone, 40 ms RTT, buffer {} BDP; goodput over the second half:", a.alone_buffer);
    println!("  Mbit/s  cc     jitter  goodput Mbit/s  of link  wire use  queue p50 ms  p99 ms  drops");
    for x in &r.alone {
        println!(
            "  {:>6}  {:<5}  {:>4}us  {:>14.2}  {:>6.1}%  {:>7.1}%  {:>12.1}  {:>6.1}  {:>5}",
            x.rate_mbit,
            x.cc,
            x.jitter_us,
            x.goodput_mbit,
            x.goodput_of_link * 100.0,
            x.link_utilisation * 100.0,
            x.queue_delay_p50_ms,
            x.queue_delay_p99_ms,
            x.drops
        );
    }
    println!(
        "One BBR flow against N CUBIC flows, {} Mbit/s, 40 ms RTT, {} seeds; shares over the second half:",
        a.versus_rate, r.seeds
    );
    println!("  buffer BDP  N  BBR share (sd)    each CUBIC  fair   queue p50 ms  drops");
    for x in &r.versus {
        println!(
            "  {:>10}  {}  {:.3} ({:.3})     {:.3}       {:.3}  {:>12.1}  {:>5.0}",
            x.buffer_bdp,
            x.cubic_flows,
            x.bbr_share,
            x.bbr_share_sd,
            x.cubic_share_each,
            x.fair_share,
            x.queue_delay_p50_ms,
            x.drops
        );
    }
    Ok(())
}
