//! `mptun demo`: MPTCP in seconds, without root. The simulator's
//! `aggregate` scenario, reported exactly as `mptun send` reports a real
//! transfer.

mod report;

use anyhow::{bail, Result};
use clap::Args;

use crate::flags::{JsonDocument, Seed, Series};
use crate::report::AggregateLine;
use crate::traces;
use crate::units::parse_size;

#[derive(Args)]
#[command(
    mut_arg("seed", |a| a.help("RNG seed")),
    mut_arg("csv", |a| a.help("Also write the per-subflow time series as DIR/demo.csv")),
    mut_arg("plot", |a| a.help("Also plot it into DIR/demo.svg")),
)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    pub(crate) json: JsonDocument,
    /// Bytes to transfer.
    #[arg(long, short = 'n', default_value = "32M", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    #[command(flatten)]
    seed: Seed,
    #[command(flatten)]
    series: Series,
}

/// `mptun demo`: the `aggregate` scenario, reported exactly as `mptun send`
/// reports a real transfer.
pub(crate) fn run(a: DemoArgs) -> Result<()> {
    let wall = std::time::Instant::now();
    let (t, paths) = traces::aggregate_traced(a.size, a.seed.seed, false);
    let wall_s = wall.elapsed().as_secs_f64();
    let names: Vec<String> = paths
        .iter()
        .map(|p| format!("{} Mbit/s, {} ms one way", p.rate_bps as f64 / 1e6, p.delay.as_millis()))
        .collect();
    let sum: f64 = paths.iter().map(|p| p.rate_bps as f64).sum();
    let cc = mptun::TcpConfig::default().congestion_control.to_string();
    let r = report::sim_report(&t, a.size, &names, Some(sum), &cc, wall_s);
    if a.json.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("mptun demo: one MPTCP connection over two simulated paths (deterministic simulator, no root)");
        print!("{}", crate::report::header_lines(&r.start));
        for i in &r.intervals {
            print!("{}", crate::report::interval_lines(i));
        }
        print!("{}", crate::report::end_lines(&r));
        print!("{}", AggregateLine::from_report("aggregate (sim)", &r, sum));
        println!("simulated {:.1} s in {:.3} s of wall time", r.end.sum_received.seconds, wall_s);
    }
    let title = format!("demo (aggregate): {} bytes, seed {}", a.size, a.seed.seed);
    a.series.emit("demo", &title, &t.subflow_trace)?;
    if !r.end.mptcp.sha256_match {
        bail!("transfer incomplete or corrupted");
    }
    Ok(())
}
