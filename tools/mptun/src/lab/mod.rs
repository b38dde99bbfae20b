//! `mptun lab`: the simulator's scenarios on real packets. Each runs in
//! client — linkem — server namespaces ([`topo`]), with mptun's stack or
//! the kernel's MPTCP at both ends, reports the fields the matching
//! `mptun sim` scenario reports, and carries the simulator's prediction for
//! the same parameters beside its own figures ([`VsSim`]), so a difference
//! between model and packets is visible in every run.

mod aggregate;
mod failover;
mod fallback;
mod handover;
mod hystart;
mod peer;
mod penalise;
mod routes;
mod run;
mod sched_compare;
mod topo;
mod udp;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::report::Verdict;

#[derive(Args, Debug)]
pub(crate) struct LabArgs {
    #[command(subcommand)]
    scenario: LabScenario,
}

#[derive(Subcommand, Debug)]
enum LabScenario {
    /// Two paths, 10 Mbit/s/20 ms and 3 Mbit/s/40 ms, one MPTCP connection.
    Aggregate(aggregate::AggregateArgs),
    /// The penalise-slow-subflow matrix: 16 MiB one way and 80 KiB the other at once, then swapped.
    Penalise(penalise::PenaliseArgs),
    /// The aggregate paths; path 1 down at 5 s, up at 15 s (linkem's control socket).
    Failover(TransferArgs),
    /// The client offers MPTCP to a plain-TCP kernel server: fallback to TCP.
    Fallback(TransferArgs),
    /// A download over a Wi-Fi-like and an LTE-like path; Wi-Fi goes down at 5 s (its endpoint deleted)
    /// and back at 15 s (added again): mptun and the kernel (`ip mptcp endpoint`), the simulator beside.
    Handover(handover::HandoverArgs),
    /// One CUBIC flow, 50 Mbit/s, 150 ms RTT, 1-BDP buffer: HyStart's legacy vs fixed round start.
    Hystart(hystart::HystartArgs),
    /// A scenario file (as `mptun sim run` takes) on real packets, the simulator's run beside it.
    Run(run::RunArgs),
    /// The packet schedulers on a Wi-Fi-like and an LTE-like linkem path (bulk, objects, loss), the
    /// kernel's MPTCP as a row, the simulator beside each.
    SchedCompare(sched_compare::SchedCompareArgs),
    /// One end of a lab transfer (run by the scenarios inside a namespace).
    #[command(hide = true)]
    Peer(peer::PeerArgs),
}

impl LabArgs {
    /// Whether the command prints a JSON document (which then carries an error too).
    pub(crate) fn json(&self) -> bool {
        match &self.scenario {
            LabScenario::Aggregate(a) => a.common.json.json,
            LabScenario::Penalise(a) => a.common.json.json,
            LabScenario::Hystart(a) => a.common.json.json,
            LabScenario::Failover(a) => a.common.json.json,
            LabScenario::Fallback(a) => a.common.json.json,
            LabScenario::Handover(a) => a.common.json.json,
            LabScenario::Run(a) => a.common.json.json,
            LabScenario::SchedCompare(a) => a.common.json.json,
            LabScenario::Peer(_) => true,
        }
    }
}

pub(crate) fn run(a: LabArgs) -> Result<Verdict> {
    match a.scenario {
        LabScenario::Aggregate(a) => aggregate::run(a),
        LabScenario::Penalise(a) => penalise::run(a),
        LabScenario::Hystart(a) => hystart::run(a),
        LabScenario::Failover(a) => failover::run(a),
        LabScenario::Fallback(a) => fallback::run(a),
        LabScenario::Handover(a) => handover::run(a),
        LabScenario::Run(a) => run::run(a),
        LabScenario::SchedCompare(a) => sched_compare::run(a),
        LabScenario::Peer(a) => peer::run(a),
    }
}

/// The options of a transfer over the `aggregate` paths (`failover`, `fallback`).
#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the report (the simulator's fields, its prediction, the deltas) as JSON")))]
pub(crate) struct TransferArgs {
    /// Whose MPTCP runs at the client (and the server, where the scenario has it).
    #[arg(long, value_enum, default_value = "mptun")]
    pub(crate) stack: topo::LabStack,
    /// Bytes to transfer (client to server).
    #[arg(long, short = 'n', default_value = "32M", value_parser = crate::units::parse_size)]
    pub(crate) size: u64,
    /// Congestion control at both ends: reno, cubic, bbr, lia, olia, balia (mptun), any the kernel has
    /// (--stack kernel). The simulator's prediction runs the same one, or CUBIC where it has no such.
    #[arg(long, default_value = "cubic")]
    pub(crate) cc: String,
    #[command(flatten)]
    pub(crate) common: topo::LabCommon,
}

impl TransferArgs {
    /// The controller the simulator's prediction runs (`--cc` when the
    /// simulator has it, CUBIC otherwise).
    pub(crate) fn sim_cc(&self) -> mptun_cc::Algorithm {
        sim_cc(&self.cc)
    }
}

/// `name` as a simulator controller, CUBIC when the simulator has none of
/// that name (a kernel-only one like bbr).
pub(crate) fn sim_cc(name: &str) -> mptun_cc::Algorithm {
    name.parse().unwrap_or(mptun_cc::Algorithm::Cubic)
}

/// Prints a report: JSON (the command's document), or the text form.
pub(crate) fn emit<T: Serialize>(json: bool, r: &T, text: impl FnOnce()) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        text();
    }
    Ok(())
}

/// One figure as the simulator predicts it and as the lab measured it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub(crate) struct VsSim {
    pub(crate) figure: &'static str,
    pub(crate) sim: f64,
    pub(crate) lab: f64,
    /// (lab − sim) / sim; 0 when the simulator predicts 0 and the lab agrees.
    pub(crate) delta: f64,
}

impl VsSim {
    pub(crate) fn new(figure: &'static str, sim: f64, lab: f64) -> VsSim {
        let delta = if sim != 0.0 {
            (lab - sim) / sim
        } else if lab == 0.0 {
            0.0
        } else {
            f64::INFINITY.copysign(lab)
        };
        VsSim { figure, sim, lab, delta }
    }
}

/// The text form: one line per figure.
pub(crate) fn vs_sim_table(v: &[VsSim]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from("simulator beside lab:\n");
    for x in v {
        let _ = writeln!(
            s,
            "  {:<16} sim {:>14.3}  lab {:>14.3}  delta {:>+7.1} %",
            x.figure,
            x.sim,
            x.lab,
            x.delta * 100.0
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::VsSim;

    #[test]
    fn delta_is_relative_to_the_simulator() {
        assert_eq!(VsSim::new("g", 10.0, 11.0).delta, 0.1);
        assert_eq!(VsSim::new("g", 10.0, 9.0).delta, -0.1);
        assert_eq!(VsSim::new("o", 0.0, 0.0).delta, 0.0);
        assert!(VsSim::new("o", 0.0, 3.0).delta.is_infinite());
    }
}
