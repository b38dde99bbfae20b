//! `mptun sim aggregate|failover|fallback|penalise`: the MPTCP scenarios.

use crate::plot;
use crate::units::parse_size;
use anyhow::{bail, Context, Result};
use clap::Args;
use mptun_proto::sched::{PenaltyConfig, Policy};
use mptun_sim::scenarios::penalise::{self, Scenario};
use mptun_sim::scenarios::{aggregate, failover, fallback};
use std::path::PathBuf;

#[derive(Args)]
pub struct AggregateArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Bytes to transfer.
    #[arg(long, default_value = "32M", value_parser = parse_size)]
    size: u64,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
pub struct PenaliseArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// suite, unbounded, rwnd, sndbuf or both.
    #[arg(long, default_value = "sndbuf")]
    scenario: Scenario,
    /// default, penalise, penalise-guarded or mptcp-org.
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
    /// Write an SVG of both subflows' cwnd (halvings marked) for `default`
    /// and the chosen policy, first seed, forward direction, into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

fn print_aggregate(r: &aggregate::Report) {
    println!(
        "{}: {:.2} Mbit/s goodput over {:.1} Mbit/s of paths (efficiency {:.3}), {:.2} s, OFOQueue {}, sha256 {}",
        r.scenario,
        r.result.goodput_bps / 1e6,
        r.sum_path_bps / 1e6,
        r.efficiency,
        r.result.duration_s,
        r.ofo_queue,
        if r.result.sha256_match { "match" } else { "MISMATCH" }
    );
    for s in &r.subflows {
        println!("  subflow {} -> {}: {} bytes", s.local, s.remote, s.bytes_acked);
    }
}

fn emit<T: serde::Serialize>(json: bool, r: &T, text: impl FnOnce()) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        text();
    }
    Ok(())
}

pub fn run_aggregate(a: AggregateArgs) -> Result<()> {
    let r = aggregate::run(&aggregate::Params { size: a.size, seed: a.seed, ..Default::default() });
    emit(a.json, &r, || print_aggregate(&r))?;
    if !r.result.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}

pub fn run_failover(a: AggregateArgs) -> Result<()> {
    let r = failover::run(a.seed, a.size);
    emit(a.json, &r, || {
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
    if !r.aggregate.result.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}

pub fn run_fallback(a: AggregateArgs) -> Result<()> {
    let r = fallback::run(a.seed, a.size);
    emit(a.json, &r, || {
        print_aggregate(&r.aggregate);
        println!("  fallback to TCP: {}", r.fallback);
    })?;
    if !r.aggregate.result.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}

pub fn run_penalise(a: PenaliseArgs) -> Result<()> {
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
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let case = penalise::cases(a.scenario).remove(0);
        let mut runs = Vec::new();
        for policy in [Policy::Default, a.policy] {
            let (r, trace) =
                penalise::run_traced(&case, policy, penalty, 1, false, Some(mptun_time::Duration::from_millis(20)));
            runs.push((
                format!("{policy}: {:.2} s, OFOQueue {}, CwndPenalized {}", r.runtime_s, r.ofo_queue, r.cwnd_penalized),
                trace,
            ));
        }
        let file = dir.join(format!("penalise-{}-cwnd.svg", a.scenario));
        plot::cwnd_panels(&file, &format!("{} ({}), subflow cwnd, halvings marked ×", a.scenario, case.name), &runs)?;
        eprintln!("wrote {}", file.display());
    }
    if a.compare {
        let reports = penalise::compare(a.scenario, a.seeds, penalty);
        if a.json {
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
    });
    emit(a.json, &r, || print!("{}", penalise::compare_table(std::slice::from_ref(&r))))?;
    if !r.summary.sha256_match {
        bail!("a run did not deliver its data intact");
    }
    Ok(())
}
