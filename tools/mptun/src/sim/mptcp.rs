//! `mptun sim aggregate|failover|fallback|penalise`: the MPTCP scenarios
//! of the simulator, reported as text or JSON, traced into CSV and SVG.

use crate::flags::{Json, Seed, Series};
use crate::plot;
use crate::report::AggregateLine;
use crate::traces;
use crate::units::parse_size;
use anyhow::{bail, Context, Result};
use clap::Args;
use mptun::{Algorithm, PenaltyConfig, Policy};
use mptun_sim::scenarios::penalise::{self, Scenario};
use mptun_sim::scenarios::{aggregate, failover, fallback, handover};

#[derive(Args)]
#[command(
    mut_arg("seed", |a| a.help("RNG seed")),
    mut_arg("csv", |a| a.help(
        "Write the client's per-subflow time series (cwnd, ssthresh, srtt, bytes, throughput, penalties; \
         every 100 ms) as DIR/<scenario>.csv")),
    mut_arg("plot", |a| a.help(
        "Plot the time series (cwnd, throughput, srtt per subflow, halvings marked) into DIR/<scenario>.svg")),
)]
pub(crate) struct AggregateArgs {
    #[command(flatten)]
    json: Json,
    /// Bytes to transfer.
    #[arg(long, default_value = "32M", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    /// Congestion control of every subflow: reno, cubic, bbr (per subflow,
    /// uncoupled as in Linux), or coupled (lia, olia, balia). `aggregate` only.
    #[arg(long, default_value_t = Algorithm::Cubic)]
    cc: Algorithm,
    #[arg(long, default_value_t = Policy::Default,
          help = format!("MPTCP scheduler of both ends: {}", Policy::names()))]
    scheduler: Policy,
    #[command(flatten)]
    seed: Seed,
    #[command(flatten)]
    series: Series,
}

#[derive(Args)]
#[command(
    mut_arg("plot", |a| a.help(
        "Write an SVG of both subflows' cwnd (halvings marked) for `default` and the chosen policy, first seed, \
         forward direction, into DIR; and the chosen policy's cwnd/throughput/srtt panels")),
    mut_arg("csv", |a| a.help(
        "Write the chosen policy's per-subflow time series (first case, first seed, forward) as \
         DIR/penalise-<scenario>-<policy>.csv")),
)]
pub(crate) struct PenaliseArgs {
    #[command(flatten)]
    json: Json,
    /// suite, unbounded, rwnd, sndbuf or both.
    #[arg(long, default_value = "sndbuf")]
    scenario: Scenario,
    /// default, penalise, penalise-guarded or mptcp-org (the matrix's policies), or minrtt.
    #[arg(long, default_value = "penalise-guarded")]
    policy: Policy,
    /// Number of RNG seeds to average over.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// A subflow is slow below FACTOR × the fastest subflow's rate.
    #[arg(long, default_value_t = 0.5)]
    factor: f64,
    /// Minimum spacing of two halvings of one subflow, in its RTTs.
    #[arg(long, default_value_t = 1.0)]
    interval_rtts: f64,
    /// Run every policy and print them side by side with deltas against `default`.
    #[arg(long)]
    compare: bool,
    /// The hosts build TSO super-segments that the link cuts, as mptun on a
    /// TUN device with offload (`mptun lab`) and Linux do.
    #[arg(long)]
    tso: bool,
    #[command(flatten)]
    series: Series,
}

fn print_aggregate(r: &aggregate::Report) {
    print!(
        "{}",
        AggregateLine {
            name: r.scenario,
            goodput_bps: r.result.goodput_bps,
            sum_path_bps: r.sum_path_bps,
            duration_s: r.result.duration_s,
            ofo_queue: r.ofo_queue,
            sha256_match: r.result.sha256_match,
            subflows: r.subflows.iter().map(|s| (s.local.clone(), s.remote.clone(), s.bytes_acked)).collect(),
        }
    );
}

/// `--csv`/`--plot` of aggregate and failover: the same (deterministic) run, traced.
fn series(a: &AggregateArgs, name: &str, failover: bool) -> Result<()> {
    if !a.series.wanted() {
        return Ok(());
    }
    let seed = a.seed.seed;
    let (t, _) = traces::aggregate_traced(a.size, seed, failover);
    let title = format!("{name}: 10 Mbit/s/20 ms + 3 Mbit/s/40 ms, {} bytes, seed {}", a.size, seed);
    a.series.emit(name, &title, &t.subflow_trace)
}

fn emit<T: serde::Serialize>(json: bool, r: &T, text: impl FnOnce()) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        text();
    }
    Ok(())
}

pub(crate) fn run_aggregate(a: AggregateArgs) -> Result<()> {
    let params =
        aggregate::Params { size: a.size, seed: a.seed.seed, cc: a.cc, policy: a.scheduler, ..Default::default() };
    let r = aggregate::run(&params);
    emit(a.json.json, &r, || print_aggregate(&r))?;
    series(&a, "aggregate", false)?;
    if !r.result.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}

/// `--cc` is `aggregate`'s alone: refused rather than ignored elsewhere.
fn default_cc_only(a: &AggregateArgs, scenario: &str) -> Result<()> {
    if a.cc != Algorithm::Cubic {
        bail!("--cc is for `sim aggregate`; `sim {scenario}` runs CUBIC");
    }
    Ok(())
}

pub(crate) fn run_failover(a: AggregateArgs) -> Result<()> {
    default_cc_only(&a, "failover")?;
    let r = failover::run(a.seed.seed, a.size);
    emit(a.json.json, &r, || {
        print_aggregate(&r.aggregate);
        println!(
            "  path 1 down {:.0}-{:.0} s: {} bytes reinjected; initial subflow {} bytes when the path came back, {} at the end ({})",
            r.down_at_s,
            r.up_at_s,
            r.reinjected_bytes,
            r.path0_bytes_at_up,
            r.path0_bytes_at_end,
            if r.recovered_path_used { "used again" } else { "NOT used again" }
        );
    })?;
    series(&a, "failover", true)?;
    if !r.aggregate.result.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}

#[derive(Args)]
pub(crate) struct HandoverArgs {
    #[command(flatten)]
    json: Json,
    /// break (LTE a backup subflow until Wi-Fi is gone: break-before-make) or make (LTE active all
    /// along: make-before-break).
    #[arg(long, default_value = "break")]
    mode: handover::Mode,
    /// Bytes to download.
    #[arg(long, default_value = "48M", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    /// Congestion control of every subflow.
    #[arg(long, default_value_t = Algorithm::Cubic)]
    cc: Algorithm,
    #[command(flatten)]
    seed: Seed,
}

/// One line of a handover's figures (the lab prints its rows with it too).
pub(crate) fn handover_line(who: &str, mode: &str, f: &handover::Figures) -> String {
    let ms = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.0} ms"));
    format!(
        "{who:<14} {mode:<6} gap at loss {:>5.0} ms, at return {:>5.0} ms, longest {:>5.0} ms (at {:.2} s)  LTE takes over {:>8}, cwnd up to {:>4}  Wi-Fi back {:>8}  lost {} B  {:.2} Mbit/s  sha256 {}",
        f.handover_gap_ms,
        f.return_gap_ms,
        f.longest_gap_ms,
        f.longest_gap_at_s,
        ms(f.lte_takeover_ms),
        f.lte_max_cwnd,
        ms(f.wifi_return_ms),
        f.bytes_lost,
        f.goodput_bps / 1e6,
        if f.sha256_match { "match" } else { "MISMATCH" }
    )
}

pub(crate) fn run_handover(a: HandoverArgs) -> Result<()> {
    let p = handover::Params { mode: a.mode, size: a.size, seed: a.seed.seed, cc: a.cc, ..Default::default() };
    let r = handover::run(&p);
    emit(a.json.json, &r, || {
        println!("handover: {}; Wi-Fi down {:.0}-{:.0} s", r.paths.join(", "), r.down_at_s, r.up_at_s);
        println!("{}", handover_line("mptun (sim)", r.mode.name(), &r.figures));
    })?;
    if !r.figures.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}

pub(crate) fn run_fallback(a: AggregateArgs) -> Result<()> {
    default_cc_only(&a, "fallback")?;
    let r = fallback::run(a.seed.seed, a.size);
    emit(a.json.json, &r, || {
        print_aggregate(&r.aggregate);
        println!("  fallback to TCP: {}", r.fallback);
    })?;
    if a.series.wanted() {
        bail!("--csv/--plot: fallback runs plain TCP with no subflows to trace (use tcp-single)");
    }
    if !r.aggregate.result.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}

pub(crate) fn run_penalise(a: PenaliseArgs) -> Result<()> {
    if !(a.factor > 0.0 && a.factor <= 1.0) {
        bail!("--factor must be in (0, 1], got {}", a.factor);
    }
    if !(a.interval_rtts >= 0.0 && a.interval_rtts.is_finite()) {
        bail!("--interval-rtts must be a non-negative number, got {}", a.interval_rtts);
    }
    if a.seeds == 0 || a.seeds > 1000 {
        bail!("--seeds must be between 1 and 1000, got {}", a.seeds);
    }
    let penalty = PenaltyConfig { factor: a.factor, interval_rtts: a.interval_rtts };
    if let Some(dir) = &a.series.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let case = penalise::cases(a.scenario).remove(0);
        let mut runs = Vec::new();
        for policy in [Policy::Default, a.policy] {
            let (r, trace) = penalise::run_traced(
                &case,
                policy,
                penalty,
                1,
                false,
                Some(mptun_time::Duration::from_millis(20)),
                a.tso,
            );
            runs.push((
                format!("{policy}: {:.2} s, OFOQueue {}, CwndPenalized {}", r.runtime_s, r.ofo_queue, r.cwnd_penalized),
                trace,
            ));
        }
        let file = dir.join(format!("penalise-{}-cwnd.svg", a.scenario));
        plot::cwnd_panels(&file, &format!("{} ({}), subflow cwnd, halvings marked ×", a.scenario, case.name), &runs)?;
        eprintln!("wrote {}", file.display());
    }
    if a.series.wanted() {
        let case = penalise::cases(a.scenario).remove(0);
        let (_, trace) = penalise::run_traced(&case, a.policy, penalty, 1, false, Some(traces::SAMPLE), a.tso);
        let name = format!("penalise-{}-{}", a.scenario, a.policy);
        let title = format!("penalise {} ({}), policy {}, seed 1, forward", a.scenario, case.name, a.policy);
        a.series.emit(&name, &title, &trace)?;
    }
    if a.compare {
        let reports = penalise::compare(a.scenario, a.seeds, penalty, a.tso);
        if a.json.json {
            println!("{}", serde_json::to_string_pretty(&reports)?);
        } else {
            print!("{}", penalise::compare_table(&reports));
        }
        return Ok(());
    }
    let r = penalise::run(&penalise::Params {
        scenario: a.scenario,
        policy: a.policy,
        seeds: a.seeds,
        penalty,
        first_seed: 1,
        tso: a.tso,
    });
    emit(a.json.json, &r, || print!("{}", penalise::compare_table(std::slice::from_ref(&r))))?;
    if !r.summary.sha256_match {
        bail!("a run did not deliver its data intact");
    }
    Ok(())
}
