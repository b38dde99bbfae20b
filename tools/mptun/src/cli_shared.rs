//! Flags several commands share, declared once and flattened into each
//! (`#[command(flatten)]`). A command whose output gives a flag a more
//! specific meaning rewords its help with `mut_arg` on its own struct
//! rather than declaring the flag again, so name, type, default and
//! parsing stay one.

use std::path::{Path, PathBuf};

use clap::Args;

/// `--json` of the `sim` scenarios: the scenario's report as JSON.
#[derive(Args, Clone, Debug)]
pub struct Json {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `-J`/`--json` of the commands whose report is iperf3's JSON document
/// (`demo`, `send`, `serve`, `lab`), with iperf3's short flag.
#[derive(Args, Clone, Debug)]
pub struct JsonDocument {
    /// Print the iperf3-shaped JSON report instead of text.
    #[arg(long, short = 'J')]
    pub json: bool,
}

/// `--seed` of the simulated runs: a run is a pure function of it.
#[derive(Args, Clone, Debug)]
pub struct Seed {
    /// RNG seed (the run is a pure function of it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `--csv`/`--plot`: where a simulated run's per-subflow time series goes.
#[derive(Args, Clone, Debug)]
pub struct Series {
    /// Write the per-subflow time series (cwnd, ssthresh, srtt, bytes,
    /// throughput; every 100 ms) as DIR/<name>.csv.
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,
    /// Plot cwnd, throughput and srtt over time into DIR/<name>.svg.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

impl Series {
    /// Whether either output was asked for (the traced run costs a second run).
    pub fn wanted(&self) -> bool {
        self.csv.is_some() || self.plot.is_some()
    }

    /// The CSV directory, as [`crate::traces::emit_series`] takes it.
    pub fn csv(&self) -> Option<&Path> {
        self.csv.as_deref()
    }

    /// The plot directory, as [`crate::traces::emit_series`] takes it.
    pub fn plot(&self) -> Option<&Path> {
        self.plot.as_deref()
    }
}
