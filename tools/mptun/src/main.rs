//! `mptun`: the command users touch first. `mptun sim ...` runs the
//! deterministic simulator's scenarios; the TUN-backed modes arrive with the
//! runtime.

mod cli_mptcp;
mod cli_sim;
mod plot;
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
    /// Run a scenario in the deterministic simulator (no root needed).
    Sim(cli_sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Command::Sim(a) => cli_sim::run(a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mptun: {e:#}");
            ExitCode::FAILURE
        }
    }
}
