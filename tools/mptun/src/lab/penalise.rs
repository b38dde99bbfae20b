//! `mptun lab penalise`: the simulator's penalty matrix (`mptun sim
//! penalise`) on real packets. Per case, linkem shapes both paths in both
//! directions exactly as the simulator's links (rate, one-way delay, 1 ms
//! order-preserving jitter, a netem-style limit counting every packet
//! held); per run, 16 MiB go one way and 80 KiB the other at the same time
//! (`forward`: the client sends the 16 MiB), then the roles swap
//! (`reverse`); the buffers apply at both ends, CUBIC at both ends. The
//! report has the simulator's fields (its [`penalise::Report`], `seeds`
//! being the runs) with the simulator's prediction for the same runs and
//! the relative difference beside it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use mptun::{PenaltyConfig, Policy};
use mptun_sim::scenarios::penalise::{self, Case, CaseReport, Report, Run, Scenario, Summary, SIZE, SMALL};
use serde::Serialize;

use super::peer::{run_pair, PeerReport};
use super::topo::{LabCommon, LabStack, Topology};
use super::VsSim;
use crate::report::Verdict;

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print the report (the simulator's fields, its prediction, the deltas) as JSON")))]
pub(crate) struct PenaliseArgs {
    /// suite, unbounded, rwnd, sndbuf or both.
    #[arg(long, default_value = "sndbuf")]
    scenario: Scenario,
    /// default, penalise, penalise-guarded (the default, as `mptun sim penalise`) or mptcp-org;
    /// the kernel runs its default scheduler only.
    #[arg(long)]
    policy: Option<Policy>,
    /// Runs per case (each a forward and a reverse transfer).
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Whose MPTCP runs at both ends.
    #[arg(long, value_enum, default_value = "mptun")]
    stack: LabStack,
    /// Run every policy (mptun) and print them side by side with deltas against `default`.
    #[arg(long, conflicts_with = "policy")]
    compare: bool,
    /// Write the 16 MiB sender's per-subflow series of every transfer (cwnd,
    /// srtt, bytes acknowledged; every 100 ms) as
    /// DIR/lab-penalise-<scenario>-<stack>-<policy>-<case>-run<N>-<direction>.csv.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) common: LabCommon,
}

/// Smallest, largest and standard deviation over the runs.
#[derive(Clone, Debug, Serialize)]
struct Spread {
    min: f64,
    max: f64,
    stddev: f64,
}

impl Spread {
    fn of(v: impl Iterator<Item = f64> + Clone) -> Spread {
        let n = v.clone().count().max(1) as f64;
        let mean = v.clone().sum::<f64>() / n;
        Spread {
            min: v.clone().fold(f64::INFINITY, f64::min),
            max: v.clone().fold(f64::NEG_INFINITY, f64::max),
            stddev: (v.map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct Spreads {
    runtime_s: Spread,
    goodput_bps: Spread,
    ofo_queue: Spread,
}

impl Spreads {
    fn of(runs: &[Run]) -> Spreads {
        Spreads {
            runtime_s: Spread::of(runs.iter().map(|r| r.runtime_s)),
            goodput_bps: Spread::of(runs.iter().map(|r| r.goodput_bps)),
            ofo_queue: Spread::of(runs.iter().map(|r| r.ofo_queue as f64)),
        }
    }
}

/// One case beside the simulator.
#[derive(Clone, Debug, Serialize)]
struct CaseVsSim {
    case: String,
    spread: Spreads,
    vs_sim: Vec<VsSim>,
}

/// What `mptun lab penalise --json` prints (per policy with `--compare`).
#[derive(Clone, Debug, Serialize)]
struct LabReport {
    stack: &'static str,
    #[serde(flatten)]
    lab: Report,
    spread: Spreads,
    vs_sim: Vec<VsSim>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cases_vs_sim: Vec<CaseVsSim>,
    /// The simulator's report for the same scenario, policy and number of runs (seeds).
    sim: Report,
}

fn vs_sim(sim: &Summary, lab: &Summary) -> Vec<VsSim> {
    vec![
        VsSim::new("runtime_s", sim.runtime_s, lab.runtime_s),
        VsSim::new("goodput_bps", sim.goodput_bps, lab.goodput_bps),
        VsSim::new("ofo_queue", sim.ofo_queue, lab.ofo_queue),
        VsSim::new("cwnd_penalized", sim.cwnd_penalized, lab.cwnd_penalized),
        VsSim::new("penal_candidate", sim.penal_candidate, lab.penal_candidate),
    ]
}

/// The simulator's prediction runs with TSO super-segments, as mptun on
/// the lab's TUN devices and the kernel on its veths send: in `rwnd` the
/// slow subflow's slow-start exit, and with it the goodput, depends on it.
const SIM_TSO: bool = true;

/// A path of the case as linkem spells the simulator's link.
fn spec(rate_mbit: u64, delay_ms: u64, limit: usize) -> String {
    format!("rate={rate_mbit}mbit,delay={delay_ms}ms,jitter=1ms,limit={limit}")
}

/// The peers' arguments shared by both ends.
fn peer_common(c: &Case, stack: LabStack, policy: Policy, trace: bool) -> Vec<String> {
    let mut v: Vec<String> = vec!["lab".into(), "peer".into(), "--stack".into(), stack.name().into()];
    if trace {
        v.extend(["--trace".into(), "--sample-ms".into(), "100".into()]);
    }
    v.extend(["--cc".into(), "cubic".into()]);
    if let Some(b) = c.rcvbuf {
        v.extend(["--rcvbuf".into(), b.to_string()]);
    }
    if let Some(b) = c.sndbuf {
        v.extend(["--sndbuf".into(), b.to_string()]);
    }
    if stack == LabStack::Mptun {
        v.extend(["--scheduler".into(), policy.to_string()]);
    }
    v
}

/// One transfer: the client sends `client_sends`, the server the other
/// size. Returns the run and the 16 MiB sender's report.
fn transfer(
    topo: &Topology,
    c: &Case,
    stack: LabStack,
    policy: Policy,
    port: u16,
    reverse: bool,
    trace: bool,
) -> Result<(Run, PeerReport)> {
    let (cli_sends, srv_sends) = if reverse { (SMALL, SIZE) } else { (SIZE, SMALL) };
    let common = peer_common(c, stack, policy, trace);
    let (listen, connect, srv_topo, cli_topo) = match stack {
        LabStack::Mptun => (format!("10.8.1.2:{port}"), format!("10.8.1.2:{port}"), "linkem-server", "linkem-client:2"),
        LabStack::Kernel => (format!("0.0.0.0:{port}"), format!("10.0.1.2:{port}"), "", ""),
    };
    let topo_arg = |t: &str| if t.is_empty() { vec![] } else { vec!["--topology".to_string(), t.to_string()] };
    let srv_args = [
        common.clone(),
        vec!["--listen".into(), listen, "--send".into(), srv_sends.to_string(), "--seed".into(), "2".into()],
        topo_arg(srv_topo),
    ]
    .concat();
    let cli_args =
        [common, vec!["--connect".into(), connect, "--send".into(), cli_sends.to_string()], topo_arg(cli_topo)]
            .concat();
    let (cr, sr) = run_pair(topo, &srv_args, &cli_args, Duration::from_secs(180), Vec::new())?;
    let (rx, tx) = if reverse { (&cr, &sr) } else { (&sr, &cr) };
    let runtime = cr.runtime_s;
    let run = Run {
        seed: 0,
        direction: if reverse { "reverse" } else { "forward" },
        runtime_s: runtime,
        goodput_bps: SIZE as f64 * 8.0 / runtime.max(1e-9),
        ofo_queue: rx.counter("MPTcpExtOFOQueue"),
        cwnd_penalized: tx.counter("MPTcpExtCwndPenalized"),
        penal_candidate: tx.counter("MPTcpExtPenalCandidate"),
        sha256_match: cr.sent == cli_sends && sr.sent == srv_sends && cr.intact_with(&sr),
        subflows: cr.subflows_max,
    };
    Ok((run, tx.clone()))
}

/// Writes the sender's per-subflow series of one transfer (`--csv`).
fn write_series(dir: &Path, name: &str, tx: &PeerReport) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{name}.csv"));
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    writeln!(f, "t_s,subflow,cwnd,srtt_us,bytes_acked")?;
    for (t, points) in &tx.subflow_series {
        for p in points {
            writeln!(f, "{t:.3},{},{},{},{}", p.id, p.cwnd, p.srtt_us, p.bytes_acked)?;
        }
    }
    f.flush()?;
    Ok(path)
}

/// The scenario under one policy, on real packets, with the simulator beside it.
fn run_policy(a: &PenaliseArgs, policy: Policy) -> Result<LabReport> {
    let penalty = PenaltyConfig::default();
    let mut case_reports = Vec::new();
    let mut cases_vs_sim = Vec::new();
    let mut all = Vec::new();
    let mut port = 5001u16;
    for c in penalise::cases(a.scenario) {
        let specs = [spec(c.rate_mbit.0, c.delay_ms.0, c.limit.0), spec(c.rate_mbit.1, c.delay_ms.1, c.limit.1)];
        eprintln!("lab penalise {} ({}), policy {policy}, {} run(s)", a.scenario, c.name, a.runs);
        let topo = Topology::plan(&a.common)?.up(&specs, a.stack, true)?;
        let mut runs = Vec::new();
        for run in 1..=a.runs {
            for reverse in [false, true] {
                port += 1;
                let (mut r, tx) = transfer(&topo, &c, a.stack, policy, port, reverse, a.csv.is_some())
                    .with_context(|| format!("{} run {run} {}", c.name, if reverse { "reverse" } else { "forward" }))?;
                r.seed = run;
                if let Some(dir) = &a.csv {
                    let case: String =
                        c.name.chars().map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '_' }).collect();
                    let name = format!(
                        "lab-penalise-{}-{}-{policy}-{case}-run{run}-{}",
                        a.scenario,
                        a.stack.name(),
                        r.direction
                    );
                    eprintln!("wrote {}", write_series(dir, &name, &tx)?.display());
                }
                eprintln!(
                    "  run {run} {:<7} {:>7.3} s  {:>6.2} Mbit/s  OFO {:>6}  penalized {:>4}  subflows {}  sha256 {}",
                    r.direction,
                    r.runtime_s,
                    r.goodput_bps / 1e6,
                    r.ofo_queue,
                    r.cwnd_penalized,
                    r.subflows,
                    if r.sha256_match { "match" } else { "MISMATCH" }
                );
                runs.push(r);
            }
        }
        drop(topo);
        let sim_runs: Vec<Run> = (1..=a.runs)
            .flat_map(|seed| [false, true].map(|rev| penalise::run_once(&c, policy, penalty, seed, rev, SIM_TSO)))
            .collect();
        cases_vs_sim.push(CaseVsSim {
            case: c.name.clone(),
            spread: Spreads::of(&runs),
            vs_sim: vs_sim(&Summary::of(sim_runs), &Summary::of(runs.clone())),
        });
        all.extend(runs.iter().cloned());
        let bound = penalise::pass_bound_s(&c);
        case_reports.push(CaseReport {
            case: c.name.clone(),
            bound_s: bound,
            pass: runs.iter().all(|r| r.sha256_match && r.runtime_s <= bound),
            summary: Summary::of(runs),
        });
    }
    let suite = a.scenario == Scenario::Suite;
    let lab = Report {
        scenario: a.scenario.to_string(),
        policy: if a.stack == LabStack::Kernel { "kernel default".into() } else { policy.to_string() },
        seeds: a.runs,
        factor: penalty.factor,
        // Both stacks build TSO super-segments on the lab's devices.
        tso: true,
        summary: Summary::of(all.clone()),
        cases: if suite { case_reports } else { Vec::new() },
        // Real packets: a run is not a function of its arguments.
        run_digest: String::new(),
    };
    let sim = penalise::run(&penalise::Params {
        scenario: a.scenario,
        policy,
        seeds: a.runs,
        penalty,
        first_seed: 1,
        tso: SIM_TSO,
    });
    Ok(LabReport {
        stack: a.stack.name(),
        spread: Spreads::of(&all),
        vs_sim: vs_sim(&sim.summary, &lab.summary),
        cases_vs_sim: if suite { cases_vs_sim } else { Vec::new() },
        lab,
        sim,
    })
}

fn print_text(r: &LabReport) {
    print!("{}", penalise::compare_table(std::slice::from_ref(&r.lab)));
    print!("{}", super::vs_sim_table(&r.vs_sim));
    for c in &r.cases_vs_sim {
        println!("  {}:", c.case);
        for v in &c.vs_sim {
            println!(
                "    {:<16} sim {:>12.3}  lab {:>12.3}  delta {:>+7.1} %",
                v.figure,
                v.sim,
                v.lab,
                v.delta * 100.0
            );
        }
    }
}

pub(crate) fn run(a: PenaliseArgs) -> Result<Verdict> {
    if a.runs == 0 || a.runs > 100 {
        bail!("--runs must be between 1 and 100, got {}", a.runs);
    }
    let policies: Vec<Policy> = match (a.stack, a.compare, a.policy) {
        (LabStack::Kernel, true, _) => {
            bail!("--compare runs mptun's policies; the kernel has its default scheduler only")
        }
        (LabStack::Kernel, false, Some(p)) if p != Policy::Default => {
            bail!("--policy {p}: the kernel runs its default scheduler only (--policy default)")
        }
        (LabStack::Kernel, false, _) => vec![Policy::Default],
        (LabStack::Mptun, true, _) => Policy::PENALTIES.to_vec(),
        (LabStack::Mptun, false, p) => vec![p.unwrap_or(Policy::PenaliseGuarded)],
    };
    let mut reports = Vec::new();
    for p in policies {
        reports.push(run_policy(&a, p)?);
    }
    if a.common.json.json && a.compare {
        super::emit(true, &reports, || {})?;
    } else if a.common.json.json {
        super::emit(true, &reports[0], || {})?;
    } else if a.compare {
        let labs: Vec<Report> = reports.iter().map(|r| r.lab.clone()).collect();
        println!("lab ({} stack, {} run(s) per case):", a.stack.name(), a.runs);
        print!("{}", penalise::compare_table(&labs));
        let sims: Vec<Report> = reports.iter().map(|r| r.sim.clone()).collect();
        println!("simulator (same runs as seeds):");
        print!("{}", penalise::compare_table(&sims));
    } else {
        print_text(&reports[0]);
    }
    if let Some(r) = reports.iter().find(|r| !r.lab.summary.sha256_match) {
        return Ok(Verdict::Fail(anyhow!("integrity check failed under policy {}", r.lab.policy)));
    }
    Ok(Verdict::Pass)
}
