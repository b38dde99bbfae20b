//! `mptun lab sched-compare`: the simulator's `sched-compare` on real
//! packets. Two linkem paths, Wi-Fi-like (20 Mbit/s, 10 ms one way, a
//! one-BDP queue) and LTE-like (10 Mbit/s, 60 ms, five BDPs), each
//! scheduler of mptun at both ends, and the kernel's MPTCP (its default
//! scheduler) to the kernel as a row of its own, under each workload: bulk
//! into a 256 KiB and into an autotuned receive buffer, 100 KB objects back
//! to back, the same with 1 % loss on the Wi-Fi-like path. The simulator's
//! figures for the same run are beside each row (the kernel's beside the
//! simulator's `default`, upstream Linux's scheduler).

use std::time::Duration;

use anyhow::{anyhow, Result};
use clap::Args;
use mptun::Policy;
use mptun_sim::scenarios::aggregate::PathParams;
use mptun_sim::scenarios::sched_compare::{self, Params, Row, Workload};
use serde::Serialize;

use super::peer::{run_pair, PeerReport};
use super::topo::{LabCommon, LabStack, Topology};
use crate::report::Verdict;
use crate::units::parse_size;

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the rows (lab and simulator) as JSON")))]
pub(crate) struct SchedCompareArgs {
    /// mptun's schedulers to compare, comma-separated (default: default, minrtt, roundrobin,
    /// redundant, blest, ecf).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    scheduler: Vec<Policy>,
    /// Workloads, comma-separated: bulk-256k, bulk-auto, objects, objects-loss (default: all).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    workload: Vec<Workload>,
    /// Bytes of each bulk upload.
    #[arg(long, short = 'n', default_value = "16M", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    /// Objects per object workload (100 KB each).
    #[arg(long, default_value_t = 100)]
    objects: u64,
    /// Leave out the kernel-to-kernel row.
    #[arg(long)]
    no_kernel: bool,
    #[command(flatten)]
    pub(crate) common: LabCommon,
}

/// One lab row with the simulator's beside it.
#[derive(Serialize)]
struct LabRow {
    stack: &'static str,
    lab: Row,
    sim: Row,
}

#[derive(Serialize)]
struct LabReport {
    scenario: &'static str,
    paths: Vec<String>,
    rows: Vec<LabRow>,
}

/// linkem specs of the two paths; `loss` on the Wi-Fi-like one.
fn specs(paths: &[PathParams], loss: Option<f64>) -> Vec<String> {
    let mut specs = super::aggregate::specs_of(paths);
    if let (Some(first), Some(x)) = (specs.first_mut(), loss) {
        first.push_str(&format!(",loss={}%", x * 100.0));
    }
    specs
}

/// The peers' arguments for one run.
fn peers(stack: LabStack, w: Workload, p: &Params, policy: Option<Policy>, port: u16) -> (Vec<String>, Vec<String>) {
    let mut srv: Vec<String> = vec!["lab".into(), "peer".into(), "--cc".into(), p.cc.to_string()];
    if let Some(s) = policy {
        srv.extend(["--scheduler".into(), s.name().into()]);
    }
    let mut cli = srv.clone();
    match w {
        Workload::Bulk256k | Workload::BulkAuto => {
            cli.extend(["--send".into(), p.bulk_size.to_string()]);
            if w == Workload::Bulk256k {
                srv.extend(["--rcvbuf".into(), p.small_rcvbuf.to_string()]);
            }
        }
        Workload::Objects | Workload::ObjectsLoss => {
            srv.extend(["--object-size".into(), p.object_size.to_string()]);
            cli.extend(["--objects".into(), p.objects.to_string(), "--object-size".into(), p.object_size.to_string()]);
        }
    }
    match stack {
        LabStack::Mptun => {
            srv.extend(["--topology".into(), "linkem-server".into(), "--listen".into(), format!("10.8.1.2:{port}")]);
            cli.extend(["--topology".into(), "linkem-client:2".into(), "--connect".into(), format!("10.8.1.2:{port}")]);
        }
        LabStack::Kernel => {
            srv.extend(["--stack".into(), "kernel".into(), "--listen".into(), format!("0.0.0.0:{port}")]);
            cli.extend(["--stack".into(), "kernel".into(), "--connect".into(), format!("10.0.1.2:{port}")]);
        }
    }
    (srv, cli)
}

/// The row a lab run makes, in the simulator's terms.
fn row(w: Workload, scheduler: &'static str, p: &Params, cr: &PeerReport, sr: &PeerReport) -> Row {
    let objects = matches!(w, Workload::Objects | Workload::ObjectsLoss);
    let (sender, receiver) = if objects { (sr, cr) } else { (cr, sr) };
    let mut ms = cr.object_ms.clone();
    ms.sort_by(f64::total_cmp);
    let pct = |q: usize| sched_compare::percentile(&ms, q);
    let goodput_mbps = if objects {
        let total: f64 = ms.iter().sum::<f64>() / 1e3;
        (ms.len() as f64 * p.object_size as f64 * 8.0 / total.max(1e-9)) / 1e6
    } else {
        p.bulk_size as f64 * 8.0 / cr.runtime_s.max(1e-9) / 1e6
    };
    Row {
        workload: w.name(),
        scheduler,
        goodput_mbps,
        ofo_queue: receiver.counter("MPTcpExtOFOQueue"),
        // The kernel keeps no connection-level account (NaN: `null` in JSON).
        rwnd_limited_s: sender.rwnd_limited_s.unwrap_or(f64::NAN),
        object_p50_ms: pct(50),
        object_p99_ms: pct(99),
        path_bytes: sender.subflow_bytes.clone(),
        retransmits: sender.counter("TcpRetransSegs"),
        complete: cr.intact_with(sr) && (!objects || ms.len() as u64 == p.objects),
    }
}

pub(crate) fn run(a: SchedCompareArgs) -> Result<Verdict> {
    let mut p = Params { bulk_size: a.size, objects: a.objects.max(1), ..Params::default() };
    if !a.scheduler.is_empty() {
        p.schedulers = a.scheduler.clone();
    }
    if !a.workload.is_empty() {
        p.workloads = a.workload.clone();
    }
    let paths = sched_compare::path_params();
    let mut rows = Vec::new();
    let mut port = 5601u16;
    let limit = Duration::from_secs_f64(p.bulk_size as f64 * 8.0 / 5e6 + p.objects as f64 * 2.0 + 60.0);
    for &w in &p.workloads {
        let loss = (w == Workload::ObjectsLoss).then_some(p.loss);
        let specs = specs(&paths, loss);
        let mut runs: Vec<(LabStack, Option<Policy>)> =
            p.schedulers.iter().map(|&s| (LabStack::Mptun, Some(s))).collect();
        if !a.no_kernel {
            runs.push((LabStack::Kernel, None));
        }
        for stack in [LabStack::Mptun, LabStack::Kernel] {
            let mine: Vec<Option<Policy>> = runs.iter().filter(|r| r.0 == stack).map(|r| r.1).collect();
            if mine.is_empty() {
                continue;
            }
            let topo = Topology::plan(&a.common)?.up(&specs, stack, true)?;
            for policy in mine {
                port += 1;
                let (srv, cli) = peers(stack, w, &p, policy, port);
                let name = policy.map_or("kernel", |s| s.name());
                eprintln!("sched-compare: {} under {name} ...", w.name());
                let (cr, sr) = run_pair(&topo, &srv, &cli, limit, Vec::new())?;
                let lab = row(w, name, &p, &cr, &sr);
                let sim = sched_compare::run_one(&p, w, policy.unwrap_or(Policy::Default));
                rows.push(LabRow { stack: stack.name(), lab, sim });
            }
        }
    }
    let r = LabReport {
        scenario: "sched-compare (lab)",
        paths: paths
            .iter()
            .map(|q| format!("{} Mbit/s, {} ms one way", q.rate_bps as f64 / 1e6, q.delay.as_millis()))
            .collect(),
        rows,
    };
    super::emit(a.common.json.json, &r, || {
        println!("sched-compare (lab): {}", r.paths.join(" | "));
        println!(
            "{:<13} {:<11} {:>14} {:>12} {:>10} {:>14} {:>14}",
            "workload", "scheduler", "Mbit/s lab/sim", "OFO lab/sim", "rwnd s lab", "p50 ms lab/sim", "p99 ms lab/sim"
        );
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
        for x in &r.rows {
            println!(
                "{:<13} {:<11} {:>6.2}/{:<7.2} {:>5}/{:<6} {:>10} {:>6}/{:<7} {:>6}/{:<7}{}",
                x.lab.workload,
                x.lab.scheduler,
                x.lab.goodput_mbps,
                x.sim.goodput_mbps,
                x.lab.ofo_queue,
                x.sim.ofo_queue,
                if x.lab.rwnd_limited_s.is_nan() { "-".to_string() } else { format!("{:.2}", x.lab.rwnd_limited_s) },
                ms(x.lab.object_p50_ms),
                ms(x.sim.object_p50_ms),
                ms(x.lab.object_p99_ms),
                ms(x.sim.object_p99_ms),
                if x.lab.complete { "" } else { "  INCOMPLETE" }
            );
        }
    })?;
    if let Some(x) = r.rows.iter().find(|x| !x.lab.complete) {
        return Ok(Verdict::Fail(anyhow!(
            "{} under {}: transfer incomplete or corrupted",
            x.lab.workload,
            x.lab.scheduler
        )));
    }
    Ok(Verdict::Pass)
}
