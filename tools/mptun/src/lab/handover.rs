//! `mptun lab handover`: the simulator's `handover` on real packets, with
//! the kernel's MPTCP beside mptun in the same run. A download over a
//! Wi-Fi-like linkem path (the initial subflow's) and an LTE-like one; 5 s
//! after the connect the Wi-Fi path goes down both ways (linkem's control
//! socket) and the client's operator deletes its endpoint, 10 s later it
//! comes back and the endpoint is added again: on mptun with `mptun pm`'s
//! requests on the client's control socket, on the kernel with
//! `ip mptcp endpoint delete|add`. LTE is a backup subflow (`break`,
//! break-before-make) or an active one (`make`, make-before-break).
//!
//! Each row: the longest gap in the bytes the client's application got
//! (from its 10 ms samples), the time from the loss until LTE delivered
//! data it had not, from the return until a new Wi-Fi subflow delivered
//! data, and the bytes lost; the simulator's row for the same paths first.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use mptun_sim::scenarios::handover::{self, Figures, Mode};
use serde::Serialize;

use super::peer::{run_pair, Event, PeerReport};
use super::topo::{LabCommon, LabStack, Topology};
use crate::report::Verdict;
use crate::units::parse_size;

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the rows (simulator, mptun, kernel) as JSON")))]
pub(crate) struct HandoverArgs {
    /// break (LTE a backup subflow: break-before-make) or make (LTE active: make-before-break).
    #[arg(long, default_value = "break")]
    mode: Mode,
    /// Bytes the client downloads.
    #[arg(long, short = 'n', default_value = "48M", value_parser = parse_size, allow_negative_numbers = true)]
    size: u64,
    /// Whose MPTCP runs (both: mptun's, then the kernel's, in one run).
    #[arg(long, value_enum)]
    stack: Option<LabStack>,
    /// The server's (the sender's) congestion control, at both ends and on both stacks: cubic, reno,
    /// bbr, ... The simulator's row runs the same one, or CUBIC where it has no such.
    #[arg(long, default_value = "cubic")]
    cc: String,
    #[command(flatten)]
    pub(crate) common: LabCommon,
}

/// One row of the table.
#[derive(Clone, Debug, Serialize)]
struct Row {
    who: &'static str,
    #[serde(flatten)]
    figures: Figures,
}

#[derive(Serialize)]
struct LabReport {
    scenario: &'static str,
    mode: Mode,
    /// The server's (the sender's) congestion control on every row.
    cc: String,
    size_bytes: u64,
    paths: Vec<String>,
    down_at_s: f64,
    up_at_s: f64,
    rows: Vec<Row>,
    sim: handover::Report,
}

/// The per-subflow samples of a report in the simulator's terms (s after
/// the connect, bytes each subflow delivered by this side's end of it), a
/// subflow keeping its last count once the stack no longer lists it.
fn samples(r: &PeerReport) -> handover::Samples {
    let mut out: handover::Samples = Vec::new();
    for (t, points) in &r.subflow_series {
        let mut m: BTreeMap<SocketAddr, u64> = out.last().map(|(_, m)| m.clone()).unwrap_or_default();
        for p in points {
            if let Some(l) = p.local {
                m.insert(l, p.bytes_received);
            }
        }
        out.push((t + r.established_s, m));
    }
    out
}

/// The row of one lab run.
fn figures(cr: &PeerReport, sr: &PeerReport, size: u64, wifi: IpAddr, lte: IpAddr) -> Figures {
    let series: Vec<(f64, u64)> = cr.rx_series.iter().map(|&(t, b)| (t + cr.established_s, b)).collect();
    let o = handover::Outcome {
        size,
        received: cr.received,
        intact: cr.intact_with(sr),
        duration_s: series.iter().find(|(_, b)| *b >= size).map_or(cr.runtime_s, |(t, _)| *t),
        lte_cwnd: sr
            .subflow_series
            .iter()
            .flat_map(|(t, points)| {
                points
                    .iter()
                    .filter(|p| p.remote.is_some_and(|r| r.ip() == lte))
                    .map(move |p| (t + sr.established_s, p.cwnd))
            })
            .collect(),
    };
    handover::figures(&series, &samples(cr), wifi, lte, o)
}

/// One handover on `stack`: the topology up, the client's endpoints as the
/// mode wants them, the transfer with its two path events.
fn run_one(a: &HandoverArgs, stack: LabStack, specs: &[String], port: u16) -> Result<Row> {
    let topo = Topology::plan(&a.common)?.up(specs, stack, true)?;
    let backup = a.mode == Mode::Break;
    let size = a.size.to_string();
    // The controller named at both ends: a kernel socket that names none
    // runs the namespace's default, which need not be mptun's.
    // The server traces its subflows too: the LTE sender's cwnd.
    let mut srv: Vec<String> = ["lab", "peer", "--send", &size, "--cc", &a.cc, "--trace", "--sample-ms", "50"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut cli: Vec<String> = ["lab", "peer", "--trace", "--sample-ms", "10", "--hold-open", "--cc", &a.cc]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let ctl = std::env::temp_dir().join(format!("mptun-handover-{}-{port}.sock", std::process::id()));
    let (wifi, lte): (IpAddr, IpAddr) = match stack {
        LabStack::Mptun => {
            srv.extend(["--topology", "linkem-server", "--listen", &format!("10.8.1.2:{port}")].map(String::from));
            let lte_flags = if backup { ",subflow,backup" } else { "" };
            cli.extend(
                [
                    "--path",
                    "dev=mptc1,addr=10.9.1.2/24,peer=10.9.1.1",
                    "--path",
                    &format!("dev=mptc2,addr=10.9.2.2/24,peer=10.9.2.1{lte_flags}"),
                    "--connect",
                    &format!("10.8.1.2:{port}"),
                    "--control",
                    &ctl.to_string_lossy(),
                ]
                .map(String::from),
            );
            ([10, 9, 1, 2].into(), [10, 9, 2, 2].into())
        }
        LabStack::Kernel => {
            srv.extend(["--stack", "kernel", "--listen", &format!("0.0.0.0:{port}")].map(String::from));
            cli.extend(["--stack", "kernel", "--connect", &format!("10.0.1.2:{port}")].map(String::from));
            // The client's endpoints as an operator sets them: Wi-Fi (the
            // initial subflow's address) and LTE, backup or not.
            topo.ip(&topo.cli, &["mptcp", "endpoint", "flush"])?;
            topo.ip(&topo.cli, &["mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "0"])?;
            topo.ip(&topo.srv, &["mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "0"])?;
            topo.ip(&topo.cli, &["mptcp", "endpoint", "add", "10.0.1.1", "dev", "c1", "id", "1", "subflow"])?;
            let mut lte = vec!["mptcp", "endpoint", "add", "10.0.2.1", "dev", "c2", "id", "2", "subflow"];
            if backup {
                lte.push("backup");
            }
            topo.ip(&topo.cli, &lte)?;
            ([10, 0, 1, 1].into(), [10, 0, 2, 1].into())
        }
    };
    let operator = |cmd: &'static str| -> Result<()> {
        match stack {
            LabStack::Mptun => {
                let reply = mptun_io::ctl::send_command(&ctl, cmd).map_err(|e| anyhow!("{}: {e}", ctl.display()))?;
                if let Some(e) = reply.strip_prefix("error ") {
                    bail!("mptun pm {cmd}: {e}");
                }
                Ok(())
            }
            LabStack::Kernel => {
                let words: Vec<&str> = match cmd {
                    "down" => vec!["mptcp", "endpoint", "delete", "id", "1"],
                    _ => vec!["mptcp", "endpoint", "add", "10.0.1.1", "dev", "c1", "id", "1", "subflow"],
                };
                topo.ip(&topo.cli, &words)
            }
        }
    };
    let mptun_cmd = |down: bool| if down { "endpoint delete id 1" } else { "endpoint add 10.9.1.2 id 1 subflow" };
    let events: Vec<Event<'_>> = vec![
        (
            handover::DOWN,
            Box::new(|| {
                topo.ctl(1, &["down", "both"])?;
                operator(if stack == LabStack::Mptun { mptun_cmd(true) } else { "down" })
            }),
        ),
        (
            handover::UP,
            Box::new(|| {
                topo.ctl(1, &["up", "both"])?;
                operator(if stack == LabStack::Mptun { mptun_cmd(false) } else { "up" })
            }),
        ),
    ];
    let limit = Duration::from_secs_f64(a.size as f64 * 8.0 / 5e6 + 60.0);
    eprintln!("handover ({}, {}) ...", stack.name(), a.mode.name());
    let (cr, sr) = run_pair(&topo, &srv, &cli, limit, events)?;
    drop(topo);
    let _ = std::fs::remove_file(&ctl);
    Ok(Row {
        who: if stack == LabStack::Mptun { "mptun (lab)" } else { "kernel (lab)" },
        figures: figures(&cr, &sr, a.size, wifi, lte),
    })
}

pub(crate) fn run(a: HandoverArgs) -> Result<Verdict> {
    let p = handover::Params { mode: a.mode, size: a.size, cc: super::sim_cc(&a.cc), ..Default::default() };
    let sim = handover::run(&p);
    let specs = super::aggregate::specs_of(&p.paths);
    let stacks = match a.stack {
        Some(s) => vec![s],
        None => vec![LabStack::Mptun, LabStack::Kernel],
    };
    let mut rows = vec![Row { who: "mptun (sim)", figures: sim.figures.clone() }];
    for (i, &s) in stacks.iter().enumerate() {
        rows.push(run_one(&a, s, &specs, 5701 + i as u16)?);
    }
    let r = LabReport {
        scenario: "handover (lab)",
        mode: a.mode,
        cc: a.cc.clone(),
        size_bytes: a.size,
        paths: sim.paths.clone(),
        down_at_s: sim.down_at_s,
        up_at_s: sim.up_at_s,
        rows,
        sim,
    };
    super::emit(a.common.json.json, &r, || {
        println!(
            "handover (lab): {}; Wi-Fi down {:.0}-{:.0} s; {} at both ends",
            r.paths.join(", "),
            r.down_at_s,
            r.up_at_s,
            r.cc
        );
        for x in &r.rows {
            println!("{}", crate::sim::mptcp::handover_line(x.who, r.mode.name(), &x.figures));
        }
    })?;
    if let Some(x) = r.rows.iter().find(|x| !x.figures.sha256_match) {
        return Ok(Verdict::Fail(anyhow!("{}: transfer incomplete or corrupted", x.who)));
    }
    Ok(Verdict::Pass)
}
