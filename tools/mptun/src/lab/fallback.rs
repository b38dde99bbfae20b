//! `mptun lab fallback`: the simulator's `fallback` on real packets. The
//! client offers MPTCP (mptun's, or the kernel's with `--stack kernel`) to
//! a plain-TCP kernel server, which answers without MP_CAPABLE: the
//! connection must fall back to TCP and the transfer complete over the one
//! path, over the `aggregate` paths.

use std::time::Duration;

use anyhow::{anyhow, Result};
use mptun_sim::scenarios::{aggregate, fallback};
use serde::Serialize;

use super::failover::aggregate_peers;
use super::peer::run_pair;
use super::topo::Topology;
use super::{TransferArgs, VsSim};
use crate::report::Verdict;

#[derive(Serialize)]
struct LabReport {
    scenario: &'static str,
    stack: &'static str,
    size_bytes: u64,
    runtime_s: f64,
    goodput_bps: f64,
    sha256_match: bool,
    /// The client's connection ended up plain TCP.
    fallback: bool,
    subflows: usize,
    client_counters: std::collections::BTreeMap<String, u64>,
    vs_sim: Vec<VsSim>,
    sim: fallback::Report,
}

pub(crate) fn run(a: TransferArgs) -> Result<Verdict> {
    let params = aggregate::Params { size: a.size, ..aggregate::Params::default() };
    let topo = Topology::plan(&a.common)?.up(&super::aggregate::specs(&params), a.stack, true)?;
    let (srv, cli) = aggregate_peers(a.stack, a.size, 5501, false, &a.cc);
    let limit = Duration::from_secs_f64(a.size as f64 * 8.0 / 5e6 + 60.0);
    let (cr, sr) = run_pair(&topo, &srv, &cli, limit, Vec::new())?;
    drop(topo);
    let sim = fallback::run_with(1, a.size, a.sim_cc());
    let goodput = a.size as f64 * 8.0 / cr.runtime_s.max(1e-9);
    let r = LabReport {
        scenario: "fallback",
        stack: a.stack.name(),
        size_bytes: a.size,
        runtime_s: cr.runtime_s,
        goodput_bps: goodput,
        sha256_match: cr.intact_with(&sr),
        fallback: cr.mode == "tcp",
        subflows: cr.subflows_max,
        client_counters: cr.counters.clone(),
        vs_sim: vec![
            VsSim::new("goodput_bps", sim.aggregate.result.goodput_bps, goodput),
            VsSim::new("runtime_s", sim.aggregate.result.duration_s, cr.runtime_s),
        ],
        sim,
    };
    super::emit(a.common.json.json, &r, || {
        println!(
            "fallback (lab, {} client, plain-TCP kernel server): {:.2} Mbit/s, {:.2} s, sha256 {}, fallback to TCP: {}",
            r.stack,
            r.goodput_bps / 1e6,
            r.runtime_s,
            if r.sha256_match { "match" } else { "MISMATCH" },
            r.fallback
        );
        print!("{}", super::vs_sim_table(&r.vs_sim));
    })?;
    if !r.sha256_match {
        return Ok(Verdict::Fail(anyhow!("integrity check failed")));
    }
    if !r.fallback {
        return Ok(Verdict::Fail(anyhow!("the connection did not fall back to TCP")));
    }
    Ok(Verdict::Pass)
}
