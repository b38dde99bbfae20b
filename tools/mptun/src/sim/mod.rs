//! `mptun sim <scenario>`: runs a simulator scenario and prints its report.
//! The MPTCP scenarios (aggregate, failover, handover, fallback, penalise)
//! are in `mptcp`; `bbr`, `sched_compare` and `sweep` are one scenario
//! each; the single-flow ones are here.

mod bbr;
pub(crate) mod mptcp;
mod sched_compare;
mod sweep;

use crate::flags::{Json, Seed, Series};
use crate::units::{parse_duration, parse_rate, parse_ratio, parse_size};
use anyhow::Result;
use clap::{Args, Subcommand};
use mptun::{Algorithm, PacerKind};
use mptun_sim::scenarios::bottleneck::Bottleneck;
use mptun_sim::scenarios::{cc_compare, edt_rr, hystart, network, shared_bottleneck, tcp_single};

#[derive(Args)]
pub(crate) struct SimArgs {
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
    /// netperf TCP_RR (100-byte request/response) on a flow with a reduced
    /// pacing rate: EDT pacing vs the old sch_fq quantum pacer.
    EdtRr(EdtRrArgs),
    /// A CUBIC and a Reno flow sharing one bottleneck: throughput shares over time.
    CcCompare(CcCompareArgs),
    /// One MPTCP connection over 10 Mbit/s/20 ms and 3 Mbit/s/40 ms paths (32 MiB).
    Aggregate(mptcp::AggregateArgs),
    /// `aggregate` with the 10 Mbit/s path down from 5 s to 15 s.
    Failover(mptcp::AggregateArgs),
    /// A download over Wi-Fi-like and LTE-like paths; Wi-Fi goes away at 5 s (its endpoint deleted) and
    /// comes back at 15 s (added again): the longest delivery gap, LTE's takeover and Wi-Fi's return.
    Handover(mptcp::HandoverArgs),
    /// The client offers MPTCP, the server answers as plain TCP.
    Fallback(mptcp::AggregateArgs),
    /// The slow-subflow penalty scenario matrix (suite/unbounded/rwnd/sndbuf/both) per scheduler policy.
    Penalise(mptcp::PenaliseArgs),
    /// An MPTCP connection (2 subflows) and a TCP flow through one bottleneck
    /// (default 20 Mbit/s, 40 ms RTT, 1-BDP buffer): each flow's share, coupled or not.
    SharedBottleneck(SharedBottleneckArgs),
    /// Runs a scenario file: links, routes and flows in TOML (docs/scenarios/).
    Run(RunArgs),
    /// A grid of parameters x seeds on every core: a scenario file, the penalise matrix or tcp-single;
    /// one CSV row per run, mean/sd/95 % CI/min/max per point, a figure with error bars (docs/sweep.md).
    Sweep(sweep::SweepArgs),
    /// BBR's experiments: BBR and CUBIC alone on a 10-BDP buffer (goodput, standing queue), then one
    /// BBR flow against 1, 2, 4 CUBIC flows with buffers of 0.5 to 16 BDP (shares).
    Bbr(bbr::BbrArgs),
    /// The packet schedulers on a Wi-Fi-like (20 Mbit/s, 10 ms) and an LTE-like (10 Mbit/s, 60 ms,
    /// deep queue) path: bulk with a 256 KiB and an autotuned receive buffer, 100 KB objects, with loss.
    SchedCompare(sched_compare::SchedCompareArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The scenario file.
    file: std::path::PathBuf,
    #[command(flatten)]
    json: Json,
    /// Congestion control of the scenario's MPTCP connections (their file's `cc` otherwise).
    #[arg(long)]
    cc: Option<Algorithm>,
    /// Seed (the file's otherwise).
    #[arg(long)]
    seed: Option<u64>,
    /// Every link's buffer, in BDPs of its round trip (the file's `queue` otherwise).
    #[arg(long, value_name = "BDP")]
    queue_bdp: Option<f64>,
    #[command(flatten)]
    series: Series,
}

#[derive(Args)]
struct SharedBottleneckArgs {
    #[command(flatten)]
    json: Json,
    /// The MPTCP connection's congestion control: cubic, reno, lia, olia, balia.
    #[arg(long, default_value_t = Algorithm::Cubic)]
    cc: Algorithm,
    /// The TCP flow's congestion control.
    #[arg(long, default_value_t = Algorithm::Cubic)]
    tcp_cc: Algorithm,
    /// The MPTCP connection's scheduler: minrtt (the multipath-tcp.org kernel's, which its coupled
    /// controllers were built with), default (upstream Linux's), penalise, penalise-guarded, mptcp-org.
    #[arg(long, default_value_t = mptun::Policy::MinRtt)]
    policy: mptun::Policy,
    /// Bottleneck rate, both directions.
    #[arg(long, default_value = "20mbit", value_parser = parse_rate, allow_negative_numbers = true)]
    rate: u64,
    /// Round-trip propagation delay.
    #[arg(long, default_value = "40ms", value_parser = parse_duration, allow_negative_numbers = true)]
    rtt: mptun_time::Duration,
    /// Bottleneck buffer in packets (default: 1 BDP).
    #[arg(long)]
    queue: Option<usize>,
    /// Length of the run (shares are counted over its second half).
    #[arg(long, default_value = "60s", value_parser = parse_duration, allow_negative_numbers = true)]
    duration: mptun_time::Duration,
    /// Order-preserving delay jitter on the bottleneck (breaks droptail's
    /// phase effects; seeds differ only through it).
    #[arg(long, default_value = "500us", value_parser = parse_duration, allow_negative_numbers = true)]
    jitter: mptun_time::Duration,
    #[command(flatten)]
    seed: Seed,
}

#[derive(Args)]
struct CcCompareArgs {
    #[command(flatten)]
    json: Json,
    /// Bottleneck rate, both directions.
    #[arg(long, default_value = "50mbit", value_parser = parse_rate, allow_negative_numbers = true)]
    rate: u64,
    /// Round-trip propagation delay (split evenly between the directions).
    #[arg(long, default_value = "100ms", value_parser = parse_duration, allow_negative_numbers = true)]
    rtt: mptun_time::Duration,
    /// Bottleneck buffer in packets (default: 1 BDP).
    #[arg(long)]
    queue: Option<usize>,
    /// Length of the run.
    #[arg(long, default_value = "60s", value_parser = parse_duration, allow_negative_numbers = true)]
    duration: mptun_time::Duration,
    /// Start the CUBIC flow this long after the Reno flow.
    #[arg(long, default_value = "0s", value_parser = parse_duration, allow_negative_numbers = true)]
    cubic_delay: mptun_time::Duration,
    /// Interval of the per-flow throughput samples.
    #[arg(long, default_value = "1s", value_parser = parse_duration, allow_negative_numbers = true)]
    sample: mptun_time::Duration,
    #[command(flatten)]
    seed: Seed,
}

#[derive(Args)]
struct EdtRrArgs {
    #[command(flatten)]
    json: Json,
    /// Transactions per pacer.
    #[arg(long, default_value_t = 50_000)]
    transactions: u64,
    /// Request size in bytes.
    #[arg(long, default_value_t = 100)]
    request: usize,
    /// Response size in bytes.
    #[arg(long, default_value_t = 100)]
    response: usize,
    /// SO_MAX_PACING_RATE on both ends (the reduced pacing rate).
    #[arg(long, default_value = "80mbit", value_parser = parse_rate, allow_negative_numbers = true)]
    pacing_rate: u64,
    /// Link MTU: sets the MSS and the fq quantum (2 x MTU).
    #[arg(long, default_value_t = 4000)]
    mtu: usize,
    /// Link rate, both directions.
    #[arg(long, default_value = "10gbit", value_parser = parse_rate, allow_negative_numbers = true)]
    rate: u64,
    /// One-way delay, both directions.
    #[arg(long, default_value = "10us", value_parser = parse_duration, allow_negative_numbers = true)]
    delay: mptun_time::Duration,
    #[command(flatten)]
    seed: Seed,
}

#[derive(Args)]
struct HystartArgs {
    #[command(flatten)]
    json: Json,
    /// Bottleneck rate on the wire (Ethernet frames of 1514 bytes).
    #[arg(long, default_value = "50mbit", value_parser = parse_rate, allow_negative_numbers = true)]
    rate: u64,
    /// Minimum round-trip time (split evenly between the directions).
    #[arg(long, default_value = "150ms", value_parser = parse_duration, allow_negative_numbers = true)]
    rtt: mptun_time::Duration,
    /// Bottleneck buffer in packets (default: 1 BDP of 1514-byte frames).
    #[arg(long)]
    queue: Option<usize>,
    /// How long the server sends.
    #[arg(long, default_value = "1500ms", value_parser = parse_duration, allow_negative_numbers = true)]
    duration: mptun_time::Duration,
    /// Sender pacing: none (Linux CUBIC without fq, as in the seed), edt or quantum.
    #[arg(long, default_value = "none")]
    pacer: PacerKind,
    /// Client receive buffer: a size (fixed, like SO_RCVBUF; default 6M =
    /// Linux tcp_rmem[2]) or "auto" for the subflow's autotuning.
    #[arg(long, default_value = "6M")]
    rcvbuf: String,
    /// Include a trace of the sender's state sampled this often (e.g. 10ms).
    #[arg(long, value_parser = parse_duration, allow_negative_numbers = true)]
    trace: Option<mptun_time::Duration>,
    #[command(flatten)]
    seed: Seed,
}

#[derive(Args)]
#[command(
    mut_arg("csv", |a| a.help(
        "Write the flow's time series (cwnd, ssthresh, srtt, bytes, throughput; every 100 ms) as DIR/tcp-single.csv")),
    mut_arg("plot", |a| a.help("Plot cwnd, throughput and srtt over time into DIR/tcp-single.svg")),
)]
struct TcpSingleArgs {
    #[command(flatten)]
    json: Json,
    /// Congestion control: reno, cubic or bbr (default cubic, as `send`,
    /// `demo` and the stack's default configuration).
    #[arg(long, default_value_t = mptun::TcpConfig::default().congestion_control)]
    cc: Algorithm,
    /// Bytes to transfer (20MB = 20,000,000; 20M = 20 MiB).
    #[arg(long, default_value = "20MB", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    /// Link rate, both directions.
    #[arg(long, default_value = "10mbit", value_parser = parse_rate, allow_negative_numbers = true)]
    rate: u64,
    /// One-way delay, both directions.
    #[arg(long, default_value = "20ms", value_parser = parse_duration, allow_negative_numbers = true)]
    delay: mptun_time::Duration,
    /// Bottleneck buffer in packets (default: 1 BDP).
    #[arg(long)]
    queue: Option<usize>,
    /// Random loss probability per packet, both directions (0.01 or 1%).
    #[arg(long, default_value = "0", value_parser = parse_ratio, allow_negative_numbers = true)]
    loss: f64,
    /// Probability that a packet skips the delay line and overtakes others (netem `reorder`).
    #[arg(long, default_value = "0", value_parser = parse_ratio, allow_negative_numbers = true)]
    reorder: f64,
    #[command(flatten)]
    seed: Seed,
    #[command(flatten)]
    series: Series,
}

pub(crate) fn run(a: SimArgs) -> Result<()> {
    match a.scenario {
        Scenario::Hystart(h) => run_hystart(h),
        Scenario::EdtRr(e) => run_edt_rr(e),
        Scenario::CcCompare(c) => run_cc_compare(c),
        Scenario::Aggregate(a) => mptcp::run_aggregate(a),
        Scenario::Failover(a) => mptcp::run_failover(a),
        Scenario::Handover(a) => mptcp::run_handover(a),
        Scenario::Fallback(a) => mptcp::run_fallback(a),
        Scenario::Penalise(a) => mptcp::run_penalise(a),
        Scenario::SharedBottleneck(b) => run_shared_bottleneck(b),
        Scenario::Bbr(b) => bbr::run(b),
        Scenario::Sweep(s) => sweep::run(s),
        Scenario::SchedCompare(s) => sched_compare::run(s),
        Scenario::Run(r) => {
            let o = crate::scenario_file::Overrides { mptcp_cc: r.cc, seed: r.seed, queue_bdp: r.queue_bdp };
            let spec = crate::scenario_file::load(&r.file, o)?;
            if !r.series.wanted() {
                return print_network(&crate::scenario_file::run(&spec)?, r.json.json);
            }
            let (report, samples) =
                network::run_traced(&spec, Some(crate::traces::SAMPLE)).map_err(|e| anyhow::anyhow!("{e}"))?;
            r.series.emit_flows(&report, &samples)?;
            print_network(&report, r.json.json)
        }
        Scenario::TcpSingle(t) => {
            let p = tcp_single::Params {
                size: t.size,
                rate_bps: t.rate,
                delay: t.delay,
                queue_packets: t.queue,
                loss: t.loss,
                reorder: t.reorder,
                cc: t.cc,
                seed: t.seed.seed,
                ..tcp_single::Params::default()
            };
            let r = tcp_single::run(&p);
            if t.json.json {
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
            if t.series.wanted() {
                let tr = crate::traces::tcp_single_traced(&p);
                let title = format!(
                    "tcp-single: {} over {:.1} Mbit/s, {} ms one way, seed {}",
                    r.cc,
                    p.rate_bps as f64 / 1e6,
                    p.delay.as_millis(),
                    p.seed
                );
                t.series.emit("tcp-single", &title, &tr.subflow_trace)?;
            }
            Ok(())
        }
    }
}

fn run_shared_bottleneck(b: SharedBottleneckArgs) -> Result<()> {
    let p = shared_bottleneck::Params {
        bottleneck: Bottleneck {
            rate_bps: b.rate,
            rtt: b.rtt,
            queue_packets: b.queue,
            jitter: b.jitter,
            qdisc: Default::default(),
        },
        duration: b.duration,
        mptcp_cc: b.cc,
        tcp_cc: b.tcp_cc,
        policy: b.policy,
        seed: b.seed.seed,
    };
    let r = shared_bottleneck::run(&p);
    print_network(&r, b.json.json)
}

/// A network run's report: JSON, or a line per link and per flow.
pub(crate) fn print_network(r: &network::Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    println!("{}: {:.0} s, seed {}, goodput measured from {:.0} s", r.scenario, r.duration_s, r.seed, r.measure_from_s);
    for l in &r.links {
        println!("  link {:<12} {:5.1} % used, {} drops", l.name, l.utilisation * 100.0, l.dropped_queue);
    }
    for f in &r.flows {
        // Two subflows may cross the same first link: number them.
        let by_link: Vec<String> =
            f.bytes_by_link.iter().enumerate().map(|(i, (l, b))| format!("subflow {i} via {l}: {b} B")).collect();
        println!(
            "  {:<5} {:<6} {} subflow(s): {:6.2} Mbit/s, share {:.3}{}",
            f.kind,
            f.cc,
            f.subflows,
            f.goodput_bps / 1e6,
            f.share,
            if by_link.len() > 1 { format!(" ({})", by_link.join(", ")) } else { String::new() }
        );
    }
    Ok(())
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
        seed: h.seed.seed,
    };
    let r = hystart::run(&p);
    if h.json.json {
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

fn run_edt_rr(e: EdtRrArgs) -> Result<()> {
    if e.transactions == 0 {
        anyhow::bail!("--transactions must be at least 1");
    }
    let p = edt_rr::Params {
        request_size: e.request,
        response_size: e.response,
        transactions: e.transactions,
        max_pacing_rate: (e.pacing_rate / 8).max(1),
        mtu: e.mtu,
        link_rate_bps: e.rate,
        one_way_delay: e.delay,
        seed: e.seed.seed,
    };
    let r = edt_rr::run(&p);
    if e.json.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "edt-rr: {}/{} byte request/response, pacing rate {:.1} Mbit/s, MTU {}, {} us one way",
        r.request_size,
        r.response_size,
        r.max_pacing_rate_bps as f64 / 1e6,
        r.mtu,
        r.one_way_delay_us
    );
    println!("  pacer    Minimum Latency us,Mean Latency us,Maximum Latency us,99th Percentile Latency us,Stddev Latency us,Transactions");
    for v in [&r.edt, &r.quantum] {
        let l = &v.latency;
        println!(
            "  {:<8} {:.0},{:.2},{:.0},{:.0},{:.2},{}",
            v.pacer, l.min_us, l.mean_us, l.max_us, l.p99_us, l.stddev_us, l.transactions
        );
    }
    println!("  simulated in {:.3} s wall", r.wall_s);
    Ok(())
}

fn run_cc_compare(c: CcCompareArgs) -> Result<()> {
    let p = cc_compare::Params {
        rate_bps: c.rate,
        rtt: c.rtt,
        queue_packets: c.queue,
        duration: c.duration,
        cubic_delay: c.cubic_delay,
        sample_every: c.sample,
        seed: c.seed.seed,
    };
    let r = cc_compare::run(&p);
    if c.json.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "cc-compare: {:.1} Mbit/s, RTT {:.0} ms (BDP {} packets), buffer {} packets, {:.0} s",
        r.rate_bps as f64 / 1e6,
        r.rtt_ms,
        r.bdp_packets,
        r.queue_packets,
        r.duration_s
    );
    println!("     t_s  cubic_mbps  reno_mbps  cubic_share  cubic_cwnd  reno_cwnd");
    for s in &r.samples {
        println!(
            "  {:>6.1}  {:>10.2}  {:>9.2}  {:>11.3}  {:>10}  {:>9}",
            s.t_s, s.cubic_mbps, s.reno_mbps, s.cubic_share, s.cubic_cwnd, s.reno_cwnd
        );
    }
    for f in [&r.cubic, &r.reno] {
        println!(
            "  {:<5} second half {:.2} Mbit/s, {} bytes in all, {} recoveries, {} retransmits, {} timeouts",
            f.cc, f.steady_mbps, f.bytes, f.recoveries, f.retransmits, f.timeouts
        );
    }
    println!(
        "  CUBIC share (second half) {:.1}%, Jain index {:.3}, utilisation {:.1}%; simulated in {:.3} s wall",
        r.cubic_steady_share * 100.0,
        r.jain_index,
        r.link_utilisation * 100.0,
        r.wall_s
    );
    Ok(())
}
