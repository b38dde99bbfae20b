//! `penalise`: the reference series' scenario matrix (Linux selftest
//! `simult_flows.sh` topology, `mptcp_sched_penalise.sh` regimes) for every
//! scheduler policy, averaged over seeds.
//!
//! Each run moves 16 MiB one way and 80 KiB the other at the same time; the
//! "reverse" run swaps the roles. Both directions of both paths are shaped
//! like netem: rate, one-way delay, and a packet `limit` counting everything
//! the emulator holds ([`LimitScope::Held`]); an order-preserving 1 ms jitter
//! makes seeds differ. Socket buffers (`RCVBUF`/`SNDBUF`) apply to both ends,
//! as `mptcp_connect -R/-S` does.

use super::aggregate::{addrs, mptcp_configs};
use super::transfer::{self, TransferSpec};
use crate::world::PathSpec;
use mptun_link::{JitterMode, LimitScope, LinkConfig};
use mptun_proto::endpoint::EndpointConfig;
use mptun_proto::sched::{PenaltyConfig, Policy};
use mptun_proto::tcp::BufferSize;
use mptun_time::Duration;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// The regimes of the reference's test script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Suite,
    Unbounded,
    Rwnd,
    Sndbuf,
    Both,
}

impl Scenario {
    pub const ALL: [Scenario; 5] =
        [Scenario::Suite, Scenario::Unbounded, Scenario::Rwnd, Scenario::Sndbuf, Scenario::Both];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Suite => "suite",
            Scenario::Unbounded => "unbounded",
            Scenario::Rwnd => "rwnd",
            Scenario::Sndbuf => "sndbuf",
            Scenario::Both => "both",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown scenario '{s}' (suite, unbounded, rwnd, sndbuf, both)"))
    }
}

/// One path pair of the matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub name: String,
    pub rate_mbit: (u64, u64),
    pub delay_ms: (u64, u64),
    pub limit: (usize, usize),
    pub rcvbuf: Option<usize>,
    pub sndbuf: Option<usize>,
}

fn case(rate: (u64, u64), delay: (u64, u64), limit: (usize, usize), rcv: Option<usize>, snd: Option<usize>) -> Case {
    Case {
        name: format!("{}/{} mbit, {}/{} ms, limit {}/{}", rate.0, rate.1, delay.0, delay.1, limit.0, limit.1),
        rate_mbit: rate,
        delay_ms: delay,
        limit,
        rcvbuf: rcv,
        sndbuf: snd,
    }
}

/// The cases of a scenario: `simult_flows.sh`'s path pairs for `suite`, the
/// reference script's regime for the others.
pub fn cases(s: Scenario) -> Vec<Case> {
    match s {
        Scenario::Suite => vec![
            case((10, 10), (0, 0), (20, 20), None, None),
            case((10, 10), (1, 25), (20, 50), None, None),
            case((10, 3), (0, 0), (30, 20), None, None),
            case((10, 3), (1, 25), (40, 30), None, None),
            case((10, 3), (25, 1), (50, 30), None, None),
        ],
        Scenario::Unbounded => vec![case((10, 3), (0, 30), (100, 100), None, None)],
        Scenario::Rwnd => vec![case((10, 3), (0, 50), (100, 100), Some(262_144), None)],
        Scenario::Sndbuf => vec![case((10, 3), (0, 0), (30, 20), None, Some(65_536))],
        Scenario::Both => vec![case((10, 3), (0, 50), (100, 100), Some(262_144), Some(65_536))],
    }
}

/// Bytes moved by the big side of each run.
pub const SIZE: u64 = 16 * 1024 * 1024;
/// Bytes moved by the small side at the same time.
pub const SMALL: u64 = 80 * 1024;

/// simult_flows.sh's bound in seconds: 1000·size·8·10 / ((r1+r2)·10^6·9) ms + 400 ms + 50 ms slack.
pub fn pass_bound_s(c: &Case) -> f64 {
    let ms = 1000.0 * SIZE as f64 * 8.0 * 10.0 / ((c.rate_mbit.0 + c.rate_mbit.1) as f64 * 1e6 * 9.0);
    (ms + 400.0 + 50.0) / 1000.0
}

/// One run's outcome.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Run {
    pub seed: u64,
    /// `forward`: client sends 16 MiB; `reverse`: server does.
    pub direction: &'static str,
    pub runtime_s: f64,
    pub goodput_bps: f64,
    /// MPTcpExtOFOQueue at the receiver of the 16 MiB.
    pub ofo_queue: u64,
    /// MPTcpExtCwndPenalized at the sender of the 16 MiB.
    pub cwnd_penalized: u64,
    /// MPTcpExtPenalCandidate at the sender of the 16 MiB.
    pub penal_candidate: u64,
    pub sha256_match: bool,
    pub subflows: usize,
}

/// Averages over runs (seeds × directions), plus the runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub runtime_s: f64,
    pub goodput_bps: f64,
    pub ofo_queue: f64,
    pub cwnd_penalized: f64,
    pub penal_candidate: f64,
    /// True only if every run matched.
    pub sha256_match: bool,
    pub per_seed: Vec<Run>,
}

impl Summary {
    /// The averages of `runs` (also of runs measured on real packets, `mptun lab penalise`).
    pub fn of(runs: Vec<Run>) -> Summary {
        let n = runs.len().max(1) as f64;
        let avg = |f: &dyn Fn(&Run) -> f64| runs.iter().map(f).sum::<f64>() / n;
        Summary {
            runtime_s: avg(&|r| r.runtime_s),
            goodput_bps: avg(&|r| r.goodput_bps),
            ofo_queue: avg(&|r| r.ofo_queue as f64),
            cwnd_penalized: avg(&|r| r.cwnd_penalized as f64),
            penal_candidate: avg(&|r| r.penal_candidate as f64),
            sha256_match: runs.iter().all(|r| r.sha256_match),
            per_seed: runs,
        }
    }
}

/// One case of a scenario under one policy.
#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    pub case: String,
    /// simult_flows bound (meaningful for `suite` only).
    pub bound_s: f64,
    /// Every run finished within the bound.
    pub pass: bool,
    #[serde(flatten)]
    pub summary: Summary,
}

/// The JSON `mptun sim penalise` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub policy: String,
    pub seeds: u64,
    pub factor: f64,
    /// The hosts built TSO super-segments (`--tso`); absent when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tso: bool,
    /// Averages over every case (the only case, except for `suite`).
    #[serde(flatten)]
    pub summary: Summary,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<CaseReport>,
    /// SHA-256 of this report (see [`crate::report::run_digest`]).
    pub run_digest: String,
}

/// Settings of a matrix run.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub scenario: Scenario,
    pub policy: Policy,
    pub seeds: u64,
    pub penalty: PenaltyConfig,
    /// First seed (runs use `first_seed..first_seed + seeds`).
    pub first_seed: u64,
    /// The hosts build TSO super-segments that the link cuts, as mptun on a
    /// TUN device with offload (and Linux) does; off, every segment is
    /// built on its own.
    pub tso: bool,
}

fn link(rate_mbit: u64, delay_ms: u64, limit: usize) -> LinkConfig {
    LinkConfig {
        rate_bps: Some(rate_mbit * 1_000_000),
        delay: Duration::from_millis(delay_ms),
        jitter: Duration::from_millis(1),
        jitter_mode: JitterMode::OrderPreserving,
        limit_packets: Some(limit),
        limit_scope: LimitScope::Held,
        ..Default::default()
    }
}

/// Paths of a case.
pub fn case_paths(c: &Case) -> Vec<PathSpec> {
    [(c.rate_mbit.0, c.delay_ms.0, c.limit.0), (c.rate_mbit.1, c.delay_ms.1, c.limit.1)]
        .into_iter()
        .enumerate()
        .map(|(i, (r, d, l))| {
            let (a, b) = addrs(i);
            PathSpec { addr_a: a, addr_b: b, a_to_b: link(r, d, l), b_to_a: link(r, d, l) }
        })
        .collect()
}

/// Endpoint configurations of a case under a policy.
pub fn case_configs(c: &Case, policy: Policy, penalty: PenaltyConfig) -> (EndpointConfig, EndpointConfig) {
    let (mut cl, mut sv) = mptcp_configs(2);
    for e in [&mut cl, &mut sv] {
        e.mptcp.scheduler = policy;
        e.mptcp.penalty = penalty;
        if let Some(r) = c.rcvbuf {
            e.mptcp.recv_buffer = BufferSize::Fixed(r);
            e.tcp.recv_buffer = BufferSize::Fixed(r);
        }
        if let Some(s) = c.sndbuf {
            e.mptcp.send_buffer = BufferSize::Fixed(s);
            e.tcp.send_buffer = BufferSize::Fixed(s);
        }
    }
    (cl, sv)
}

/// One transfer of a case (`tso`: see [`Params::tso`]).
pub fn run_once(c: &Case, policy: Policy, penalty: PenaltyConfig, seed: u64, reverse: bool, tso: bool) -> Run {
    run_traced(c, policy, penalty, seed, reverse, None, tso).0
}

/// [`run_once`] with the big sender's subflows sampled every `sample_every`.
pub fn run_traced(
    c: &Case,
    policy: Policy,
    penalty: PenaltyConfig,
    seed: u64,
    reverse: bool,
    sample_every: Option<Duration>,
    tso: bool,
) -> (Run, Vec<transfer::SubflowSample>) {
    let (client, server) = case_configs(c, policy, penalty);
    let (size, reverse_size) = if reverse { (SMALL, SIZE) } else { (SIZE, SMALL) };
    let spec = TransferSpec {
        paths: case_paths(c),
        size,
        reverse_size,
        client,
        server,
        seed,
        max_time: Duration::from_secs(600),
        port: 5201,
        sample_every,
        actions: Vec::new(),
        client_scheduler: None,
    };
    let r = transfer::run_traced(&spec, reverse, tso);
    let (rx, tx) = if reverse {
        (&r.result.client_counters, &r.result.server_counters)
    } else {
        (&r.result.server_counters, &r.result.client_counters)
    };
    let get = |m: &std::collections::BTreeMap<&'static str, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    let runtime = r.result.sim_end_s;
    (
        Run {
            seed,
            direction: if reverse { "reverse" } else { "forward" },
            runtime_s: runtime,
            goodput_bps: SIZE as f64 * 8.0 / runtime.max(1e-9),
            ofo_queue: get(rx, "MPTcpExtOFOQueue"),
            cwnd_penalized: get(tx, "MPTcpExtCwndPenalized"),
            penal_candidate: get(tx, "MPTcpExtPenalCandidate"),
            sha256_match: r.result.sha256_match,
            subflows: r.result.client_subflows.len(),
        },
        r.subflow_trace,
    )
}

/// Runs a scenario under one policy.
pub fn run(p: &Params) -> Report {
    let mut case_reports = Vec::new();
    let mut all = Vec::new();
    for c in cases(p.scenario) {
        let mut runs = Vec::new();
        for seed in p.first_seed..p.first_seed + p.seeds {
            for reverse in [false, true] {
                runs.push(run_once(&c, p.policy, p.penalty, seed, reverse, p.tso));
            }
        }
        all.extend(runs.iter().cloned());
        let bound = pass_bound_s(&c);
        case_reports.push(CaseReport {
            case: c.name.clone(),
            bound_s: bound,
            pass: runs.iter().all(|r| r.sha256_match && r.runtime_s <= bound),
            summary: Summary::of(runs),
        });
    }
    let mut report = Report {
        scenario: p.scenario.to_string(),
        policy: p.policy.to_string(),
        seeds: p.seeds,
        factor: p.penalty.factor,
        tso: p.tso,
        summary: Summary::of(all),
        cases: if p.scenario == Scenario::Suite { case_reports } else { Vec::new() },
        run_digest: String::new(),
    };
    report.run_digest = crate::report::run_digest(&report);
    report
}

/// All policies on one scenario, for `--compare`.
pub fn compare(scenario: Scenario, seeds: u64, penalty: PenaltyConfig, tso: bool) -> Vec<Report> {
    Policy::PENALTIES
        .into_iter()
        .map(|policy| run(&Params { scenario, policy, seeds, penalty, first_seed: 1, tso }))
        .collect()
}

/// The side-by-side table `--compare` prints (deltas against `default`).
pub fn compare_table(reports: &[Report]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let base = reports.iter().find(|r| r.policy == "default");
    let pct = |v: f64, b: f64| if b == 0.0 { 0.0 } else { (v - b) / b * 100.0 };
    let _ = writeln!(
        s,
        "{:<18} {:>10} {:>8} {:>13} {:>8} {:>10} {:>8} {:>12} {:>10} {:>6}",
        "policy", "runtime_s", "Δ%", "goodput_Mbps", "Δ%", "OFOQueue", "Δ%", "CwndPenalized", "PenalCand", "sha"
    );
    for r in reports {
        let b = base.map(|b| &b.summary);
        let m = &r.summary;
        let _ = writeln!(
            s,
            "{:<18} {:>10.3} {:>+8.1} {:>13.3} {:>+8.1} {:>10.1} {:>+8.1} {:>12.1} {:>10.1} {:>6}",
            r.policy,
            m.runtime_s,
            b.map_or(0.0, |b| pct(m.runtime_s, b.runtime_s)),
            m.goodput_bps / 1e6,
            b.map_or(0.0, |b| pct(m.goodput_bps, b.goodput_bps)),
            m.ofo_queue,
            b.map_or(0.0, |b| pct(m.ofo_queue, b.ofo_queue)),
            m.cwnd_penalized,
            m.penal_candidate,
            if m.sha256_match { "ok" } else { "FAIL" }
        );
        for c in &r.cases {
            let _ = writeln!(
                s,
                "  {:<40} {:>8.3}s (bound {:.3}s) {}  OFO {:.0}",
                c.case,
                c.summary.runtime_s,
                c.bound_s,
                if c.pass { "pass" } else { "FAIL" },
                c.summary.ofo_queue
            );
        }
    }
    s
}
