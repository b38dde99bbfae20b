//! Flags several commands share, declared once and flattened into each
//! (`#[command(flatten)]`). A command whose output gives a flag a more
//! specific meaning rewords its help with `mut_arg` on its own struct
//! rather than declaring the flag again, so name, type, default and
//! parsing stay one.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use mptun_sim::scenarios::transfer::SubflowSample;

/// `--json` of the `sim` scenarios: the scenario's report as JSON.
#[derive(Args, Clone, Debug)]
pub(crate) struct Json {
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `-J`/`--json` of the commands whose report is iperf3's JSON document
/// (`demo`, `send`, `serve`, `lab`), with iperf3's short flag.
#[derive(Args, Clone, Debug)]
pub(crate) struct JsonDocument {
    /// Print the iperf3-shaped JSON report instead of text.
    #[arg(long, short = 'J')]
    pub(crate) json: bool,
}

/// `--seed` of the simulated runs: a run is a pure function of it.
#[derive(Args, Clone, Debug)]
pub(crate) struct Seed {
    /// RNG seed (the run is a pure function of it).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

/// `--csv`/`--plot`: where a simulated run's per-subflow time series goes.
#[derive(Args, Clone, Debug)]
pub(crate) struct Series {
    /// Write the per-subflow time series (cwnd, ssthresh, srtt, bytes,
    /// throughput; every 100 ms) as DIR/<name>.csv.
    #[arg(long, value_name = "DIR")]
    pub(crate) csv: Option<PathBuf>,
    /// Plot cwnd, throughput and srtt over time into DIR/<name>.svg.
    #[arg(long, value_name = "DIR")]
    pub(crate) plot: Option<PathBuf>,
}

impl Series {
    /// Whether either output was asked for (the traced run costs a second run).
    pub(crate) fn wanted(&self) -> bool {
        self.csv.is_some() || self.plot.is_some()
    }

    /// Writes the per-flow series of a traced network run as asked:
    /// `DIR/<scenario>.csv`, `DIR/<scenario>.svg`.
    pub(crate) fn emit_flows(
        &self,
        report: &mptun_sim::scenarios::network::Report,
        samples: &[mptun_sim::scenarios::network::FlowSample],
    ) -> Result<()> {
        let name = report.scenario.as_str();
        if let Some(dir) = &self.csv {
            let p = crate::traces::write_flow_csv(dir, name, &report.flows, samples)?;
            eprintln!("wrote {}", p.display());
        }
        if let Some(dir) = &self.plot {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            let p = dir.join(format!("{name}.svg"));
            crate::plot::flow_panels(&p, name, &report.flows, samples)?;
            eprintln!("wrote {}", p.display());
        }
        Ok(())
    }

    /// Writes the series of a traced run as asked: `DIR/<name>.csv` for
    /// `--csv`, `DIR/<name>.svg` (titled `title`) for `--plot`.
    pub(crate) fn emit(&self, name: &str, title: &str, samples: &[SubflowSample]) -> Result<()> {
        if let Some(dir) = &self.csv {
            let p = crate::traces::write_csv(dir, name, samples)?;
            eprintln!("wrote {}", p.display());
        }
        if let Some(dir) = &self.plot {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            let p = dir.join(format!("{name}.svg"));
            crate::plot::subflow_panels(&p, title, samples)?;
            eprintln!("wrote {}", p.display());
        }
        Ok(())
    }
}
