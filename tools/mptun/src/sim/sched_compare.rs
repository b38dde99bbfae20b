//! `mptun sim sched-compare`: the packet schedulers on a Wi-Fi-like and an
//! LTE-like path, per workload (bulk with a 256 KiB and an autotuned
//! receive buffer, 100 KB objects back to back, the same with loss),
//! printed as a table or JSON.

use crate::flags::{Json, Seed};
use crate::units::parse_size;
use anyhow::{bail, Result};
use clap::Args;
use mptun::{Algorithm, Policy};
use mptun_sim::scenarios::sched_compare::{self, Params, Row, Workload};

#[derive(Args)]
pub(crate) struct SchedCompareArgs {
    #[command(flatten)]
    json: Json,
    /// Schedulers to compare, comma-separated (default: default, minrtt,
    /// roundrobin, redundant, blest, ecf).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    scheduler: Vec<Policy>,
    /// Workloads, comma-separated: bulk-256k, bulk-auto, objects, objects-loss (default: all).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    workload: Vec<Workload>,
    /// Bytes of each bulk upload.
    #[arg(long, default_value = "16M", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    /// Objects per object workload.
    #[arg(long, default_value_t = 200)]
    objects: u64,
    /// Congestion control of every subflow.
    #[arg(long, default_value_t = Algorithm::Cubic)]
    cc: Algorithm,
    #[command(flatten)]
    seed: Seed,
}

/// The table `sched-compare` prints: one line per workload and scheduler.
pub(crate) fn print_rows(rows: &[Row]) {
    println!(
        "{:<13} {:<11} {:>8} {:>7} {:>8} {:>8} {:>8}  path bytes",
        "workload", "scheduler", "Mbit/s", "OFO", "rwnd s", "p50 ms", "p99 ms"
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
    for r in rows {
        println!(
            "{:<13} {:<11} {:>8.2} {:>7} {:>8.2} {:>8} {:>8}  {:?}{}",
            r.workload,
            r.scheduler,
            r.goodput_mbps,
            r.ofo_queue,
            r.rwnd_limited_s,
            ms(r.object_p50_ms),
            ms(r.object_p99_ms),
            r.path_bytes,
            if r.complete { "" } else { "  INCOMPLETE" }
        );
    }
}

pub(crate) fn run(a: SchedCompareArgs) -> Result<()> {
    let mut p =
        Params { seed: a.seed.seed, bulk_size: a.size, objects: a.objects.max(1), cc: a.cc, ..Params::default() };
    if !a.scheduler.is_empty() {
        p.schedulers = a.scheduler;
    }
    if !a.workload.is_empty() {
        p.workloads = a.workload;
    }
    let r = sched_compare::run(&p);
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("sched-compare, seed {}: {}", r.seed, r.paths.join(" | "));
        print_rows(&r.rows);
        println!("run digest {}", r.run_digest);
    }
    if r.rows.iter().any(|r| !r.complete) {
        bail!("a run did not complete");
    }
    Ok(())
}
