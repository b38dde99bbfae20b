//! `mptun lab failover`: the simulator's `failover` on real packets. The
//! `aggregate` paths; path 1 (the initial subflow's) goes down both ways
//! through its linkem's control socket 5 s after the client starts to
//! connect and comes back at 15 s. The transfer must complete intact over
//! the other path, the stalled data re-sent there, and the recovered path
//! must carry data again.

use std::time::Duration;

use anyhow::{anyhow, Result};
use mptun_sim::scenarios::{aggregate, failover};
use serde::Serialize;

use super::peer::{run_pair, Event};
use super::topo::{LabStack, Topology};
use super::{TransferArgs, VsSim};
use crate::report::Verdict;

#[derive(Serialize)]
struct LabReport {
    scenario: &'static str,
    stack: &'static str,
    size_bytes: u64,
    paths: Vec<String>,
    runtime_s: f64,
    goodput_bps: f64,
    sha256_match: bool,
    subflows: usize,
    down_at_s: f64,
    up_at_s: f64,
    /// Bytes re-sent on another subflow (mptun's MptunMPReinjectedBytes; the kernel has no such counter).
    reinjected_bytes: Option<u64>,
    path0_bytes_at_up: u64,
    path0_bytes_at_end: u64,
    recovered_path_used: bool,
    client_counters: std::collections::BTreeMap<String, u64>,
    vs_sim: Vec<VsSim>,
    sim: failover::Report,
}

/// The peers' arguments for an `aggregate`-path transfer of `size` bytes client → server.
pub(super) fn aggregate_peers(
    stack: LabStack,
    size: u64,
    port: u16,
    server_mptcp: bool,
    cc: &str,
) -> (Vec<String>, Vec<String>) {
    let mut srv: Vec<String> = vec!["lab".into(), "peer".into(), "--cc".into(), cc.into()];
    let mut cli = srv.clone();
    cli.extend(["--send".into(), size.to_string(), "--trace".into(), "--sample-ms".into(), "100".into()]);
    match (stack, server_mptcp) {
        (LabStack::Mptun, true) => {
            srv.extend(["--topology".into(), "linkem-server".into(), "--listen".into(), format!("10.8.1.2:{port}")]);
            cli.extend(["--topology".into(), "linkem-client:2".into(), "--connect".into(), format!("10.8.1.2:{port}")]);
        }
        (stack, mptcp) => {
            // The kernel's stack at the server (and its plain TCP when `server_mptcp` is off).
            srv.extend(["--stack".into(), "kernel".into(), "--listen".into(), format!("0.0.0.0:{port}")]);
            if !mptcp {
                srv.push("--no-mptcp".into());
            }
            if stack == LabStack::Mptun {
                cli.extend(["--topology".into(), "linkem-client:2".into()]);
            } else {
                cli.extend(["--stack".into(), "kernel".into()]);
            }
            cli.extend(["--connect".into(), format!("10.0.1.2:{port}")]);
        }
    }
    (srv, cli)
}

pub(crate) fn run(a: TransferArgs) -> Result<Verdict> {
    let params = aggregate::Params { size: a.size, ..aggregate::Params::default() };
    let (down, up) = (5.0, 15.0);
    let topo = Topology::plan(&a.common)?.up(&super::aggregate::specs(&params), a.stack, true)?;
    let (srv, cli) = aggregate_peers(a.stack, a.size, 5401, true, &a.cc);
    let events: Vec<Event<'_>> = vec![
        (Duration::from_secs_f64(down), Box::new(|| topo.ctl(1, &["down", "both"]).map(drop))),
        (Duration::from_secs_f64(up), Box::new(|| topo.ctl(1, &["up", "both"]).map(drop))),
    ];
    let limit = Duration::from_secs_f64(a.size as f64 * 8.0 / 1.5e6 + 60.0);
    let (cr, sr) = run_pair(&topo, &srv, &cli, limit, events)?;
    drop(topo);
    let path0_at = |t: f64| {
        cr.subflow_series
            .iter()
            .take_while(|(s, _)| *s <= t)
            .last()
            .and_then(|(_, b)| b.first().map(|s| s.bytes_acked))
            .unwrap_or(0)
    };
    let path0_bytes_at_up = path0_at(up);
    let path0_bytes_at_end = path0_at(f64::INFINITY);
    let sim = failover::run_with(1, a.size, a.sim_cc());
    let reinjected = (a.stack == LabStack::Mptun).then(|| cr.counter("MptunMPReinjectedBytes"));
    let goodput = a.size as f64 * 8.0 / cr.runtime_s.max(1e-9);
    let mut vs_sim = vec![
        VsSim::new("goodput_bps", sim.aggregate.result.goodput_bps, goodput),
        VsSim::new("runtime_s", sim.aggregate.result.duration_s, cr.runtime_s),
        VsSim::new("path0_bytes_at_up", sim.path0_bytes_at_up as f64, path0_bytes_at_up as f64),
        VsSim::new("path0_bytes_at_end", sim.path0_bytes_at_end as f64, path0_bytes_at_end as f64),
    ];
    if let Some(r) = reinjected {
        vs_sim.push(VsSim::new("reinjected_bytes", sim.reinjected_bytes as f64, r as f64));
    }
    let r = LabReport {
        scenario: "failover",
        stack: a.stack.name(),
        size_bytes: a.size,
        paths: super::aggregate::specs(&params),
        runtime_s: cr.runtime_s,
        goodput_bps: goodput,
        sha256_match: cr.intact_with(&sr),
        subflows: cr.subflows_max,
        down_at_s: down,
        up_at_s: up,
        reinjected_bytes: reinjected,
        recovered_path_used: path0_bytes_at_end > path0_bytes_at_up,
        path0_bytes_at_up,
        path0_bytes_at_end,
        client_counters: cr.counters.clone(),
        vs_sim,
        sim,
    };
    super::emit(a.common.json.json, &r, || {
        println!(
            "failover (lab, {}): {:.2} Mbit/s, {:.2} s, sha256 {}; path 1 down {down:.0}-{up:.0} s: {} bytes reinjected; \
             initial subflow {} bytes when the path came back, {} at the end ({})",
            r.stack,
            r.goodput_bps / 1e6,
            r.runtime_s,
            if r.sha256_match { "match" } else { "MISMATCH" },
            r.reinjected_bytes.map_or("-".into(), |b| b.to_string()),
            r.path0_bytes_at_up,
            r.path0_bytes_at_end,
            if r.recovered_path_used { "used again" } else { "NOT used again" }
        );
        print!("{}", super::vs_sim_table(&r.vs_sim));
    })?;
    if !r.sha256_match {
        return Ok(Verdict::Fail(anyhow!("integrity check failed")));
    }
    Ok(Verdict::Pass)
}
