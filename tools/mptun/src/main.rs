//! `mptun`: the command users touch first. `serve`/`send` measure a bulk
//! transfer like iperf3 over mptun's TUN-backed stack (or the kernel's with
//! `--kernel`), `demo` shows MPTCP working in the simulator without root,
//! `sim ...` runs the deterministic simulator's scenarios and `lab` runs
//! one in real namespaces behind emulated links.

mod bulk;
mod cli_demo;
mod cli_lab;
mod cli_shared;
mod cli_sim;
mod cli_sim_mptcp;
mod cli_xfer;
mod conn;
mod control;
mod kernel;
mod pathspec;
mod plot;
mod report;
mod traces;
mod units;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "mptun", version, about = "Userspace Multipath TCP over TUN: simulator, bulk transfer, lab runs")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// MPTCP in seconds, without root: a two-path transfer in the simulator,
    /// reported as `mptun send` reports a real one.
    Demo(cli_demo::DemoArgs),
    /// Run a scenario in the deterministic simulator (no root needed).
    Sim(cli_sim::SimArgs),
    /// Accept bulk-transfer tests (like `iperf3 -s`) on mptun's stack or the kernel's.
    Serve(cli_xfer::ServeArgs),
    /// Run a bulk-transfer test against `mptun serve` (like `iperf3 -c`).
    Send(cli_xfer::SendArgs),
    /// Run a scenario in real namespaces behind linkem paths (needs root), reported like `sim`.
    Lab(cli_lab::LabArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Command::Demo(a) => cli_demo::run(a),
        Command::Sim(a) => cli_sim::run(a),
        Command::Serve(a) => cli_xfer::run_serve(a),
        Command::Send(a) => cli_xfer::run_send(a),
        Command::Lab(a) => cli_lab::run(a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mptun: {e:#}");
            ExitCode::FAILURE
        }
    }
}
