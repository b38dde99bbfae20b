//! `mptun lab aggregate`: the simulator's `aggregate` scenario in real
//! namespaces. Two paths, 10 Mbit/s/20 ms and 3 Mbit/s/40 ms one way, with
//! one-BDP droptail limits counting only the packets waiting for the link
//! (the simulator's router queue); `mptun serve`/`mptun send` run inside
//! the namespaces (or their `--kernel` forms), and the report is the
//! client's, with the simulator's prediction for the same size beside it.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use mptun_sim::scenarios::aggregate::{self, Params};
use serde::Serialize;

use super::topo::{LabCommon, LabStack, Topology};
use super::VsSim;
use crate::report::{self, AggregateLine, Report, Verdict};
use crate::units::parse_size;

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the client's JSON report (with efficiency and the simulator's prediction)")))]
pub(crate) struct AggregateArgs {
    /// Whose MPTCP runs at both ends.
    #[arg(long, value_enum, default_value = "mptun")]
    stack: LabStack,
    /// Bytes to transfer (client to server).
    #[arg(long, short = 'n', default_value = "32M", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    /// Congestion control at both ends: reno, cubic, bbr, lia, olia, balia (mptun), any the kernel has
    /// (--stack kernel). The simulator's prediction runs the same one, or CUBIC where it has no such.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// mptun's MPTCP scheduler at both ends (docs/schedulers.md); the simulator's prediction runs it too.
    #[arg(long, default_value_t = mptun::Policy::Default)]
    scheduler: mptun::Policy,
    #[command(flatten)]
    pub(crate) common: LabCommon,
}

/// The client's report plus the simulator beside it.
#[derive(Serialize)]
struct LabReport<'a> {
    #[serde(flatten)]
    report: &'a Report,
    vs_sim: Vec<VsSim>,
}

/// The path specs of the simulator's `aggregate` for linkem.
pub(super) fn specs(params: &Params) -> Vec<String> {
    specs_of(&params.paths)
}

/// linkem specs of simulated paths.
pub(super) fn specs_of(paths: &[aggregate::PathParams]) -> Vec<String> {
    paths
        .iter()
        .map(|p| {
            let l = p.link();
            // The simulator's `aggregate` buffer is a router queue (packets
            // waiting for the link); linkem's default counts the delay line
            // too (netem `limit`), which would make the lab's buffer smaller.
            format!(
                "rate={}mbit,delay={}ms,limit={},limit-scope=bottleneck",
                p.rate_bps / 1_000_000,
                p.delay.as_millis(),
                l.limit_packets.unwrap_or(100)
            )
        })
        .collect()
}

pub(crate) fn run(a: AggregateArgs) -> Result<Verdict> {
    if a.stack == LabStack::Kernel && a.scheduler != mptun::Policy::Default {
        bail!("--scheduler {}: the kernel's MPTCP runs its own (net.mptcp.scheduler)", a.scheduler);
    }
    let params = Params { size: a.size, cc: super::sim_cc(&a.cc), policy: a.scheduler, ..Params::default() };
    let specs = specs(&params);
    let sum_path_bps: f64 = params.paths.iter().map(|p| p.rate_bps as f64).sum();
    let topo = Topology::plan(&a.common)?.up(&specs, a.stack, true)?;
    let mut cc = vec!["--cc".to_string(), a.cc.clone()];
    if a.stack == LabStack::Mptun {
        cc.extend(["--scheduler".to_string(), a.scheduler.name().to_string()]);
    }
    let size = a.size.to_string();
    let (serve_args, send_args): (Vec<String>, Vec<String>) = match a.stack {
        LabStack::Mptun => (
            ["serve", "--topology", "linkem-server", "-1", "--json", "--no-progress"].map(String::from).to_vec(),
            ["send", "10.8.1.2", "-n", &size, "--topology", "linkem-client:2", "--json", "--no-progress"]
                .map(String::from)
                .to_vec(),
        ),
        LabStack::Kernel => (
            ["serve", "--kernel", "-B", "10.0.1.2", "-1", "--json", "--no-progress"].map(String::from).to_vec(),
            ["send", "10.0.1.2", "-n", &size, "--kernel", "--json", "--no-progress"].map(String::from).to_vec(),
        ),
    };
    let mut server = topo.spawn(&topo.srv, &[serve_args, cc.clone()].concat())?;
    server.wait_ready("Server listening", Duration::from_secs(10)).context("the server")?;
    // Generous: the paths' rate at half efficiency, plus setup.
    let limit = Duration::from_secs_f64(a.size as f64 * 8.0 / (sum_path_bps * 0.5) + 60.0);
    let mut client = topo.spawn(&topo.cli, &[send_args, cc].concat())?;
    let (status, text, err) = client.finish(limit).context("the transfer")?;
    if !status.success() {
        bail!("mptun send failed: {}", err.lines().last().unwrap_or("no message"));
    }
    let mut r: Report = serde_json::from_str(&text).context("the client's JSON report")?;
    let _ = server.finish(Duration::from_secs(15));
    r.end.mptcp.efficiency = Some(r.end.sum_received.bits_per_second / sum_path_bps);
    let sim = aggregate::run(&params);
    let vs_sim = vec![
        VsSim::new("goodput_bps", sim.result.goodput_bps, r.end.sum_received.bits_per_second),
        VsSim::new("runtime_s", sim.result.duration_s, r.end.sum_received.seconds),
        VsSim::new(
            "ofo_queue",
            sim.ofo_queue as f64,
            r.end.mptcp.receiver_counter(r.start.mptun.sender, "MPTcpExtOFOQueue") as f64,
        ),
    ];
    let label = format!("aggregate (lab, {})", a.stack.name());
    if a.common.json.json {
        println!("{}", serde_json::to_string_pretty(&LabReport { report: &r, vs_sim })?);
    } else {
        print!("{}", report::header_lines(&r.start));
        for i in &r.intervals {
            print!("{}", report::interval_lines(i));
        }
        print!("{}", report::end_lines(&r));
        print!("{}", AggregateLine::from_report(&label, &r, sum_path_bps));
        print!("{}", super::vs_sim_table(&vs_sim));
    }
    if !r.end.mptcp.sha256_match {
        return Ok(Verdict::Fail(anyhow!("integrity check failed")));
    }
    Ok(Verdict::Pass)
}
