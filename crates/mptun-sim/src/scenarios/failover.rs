//! `failover`: the `aggregate` paths, but the 10 Mbit/s path (the initial
//! subflow's) goes down at t = 5 s — every packet dropped both ways — and
//! comes back at t = 15 s. The transfer must complete intact over the other
//! path, with the stalled subflow's data reinjected, and the recovered path
//! must carry data again once it is back.

use super::aggregate::{self, Params};
use super::transfer::TraceSample;
use mptun_cc::Algorithm;
use mptun_time::{Duration, Instant};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub aggregate: aggregate::Report,
    pub down_at_s: f64,
    pub up_at_s: f64,
    /// Bytes re-sent on another subflow (MptunMPReinjectedBytes).
    pub reinjected_bytes: u64,
    /// Bytes the initial subflow had acknowledged when its path came back, and at the end.
    pub path0_bytes_at_up: u64,
    pub path0_bytes_at_end: u64,
    /// The recovered path carried data again.
    pub recovered_path_used: bool,
}

/// The scenario with CUBIC at both ends.
pub fn run(seed: u64, size: u64) -> Report {
    run_with(seed, size, Algorithm::Cubic)
}

/// The scenario with congestion control `cc` at both ends (what
/// `mptun lab failover --cc` predicts from).
pub fn run_with(seed: u64, size: u64, cc: Algorithm) -> Report {
    let down = Instant::from_millis(5_000);
    let up = Instant::from_millis(15_000);
    let p = Params { size, seed, events: vec![(down, 0, true), (up, 0, false)], cc, ..Params::default() };
    let (c, s) = aggregate::mptcp_configs(p.paths.len());
    let r = aggregate::run_named_traced("failover", &p, c, s, Some(Duration::from_millis(100)));
    let at = |t: Instant| -> u64 {
        r.result
            .trace
            .iter()
            .take_while(|x: &&TraceSample| x.t_s <= t.as_secs_f64())
            .last()
            .map_or(0, |x| x.bytes_acked)
    };
    let path0_bytes_at_up = at(up);
    let path0_bytes_at_end = r.subflows.first().map_or(0, |s| s.bytes_acked);
    let mut report = Report {
        down_at_s: down.as_secs_f64(),
        up_at_s: up.as_secs_f64(),
        reinjected_bytes: r.result.client_counters.get("MptunMPReinjectedBytes").copied().unwrap_or(0),
        recovered_path_used: path0_bytes_at_end > path0_bytes_at_up,
        path0_bytes_at_up,
        path0_bytes_at_end,
        aggregate: r,
    };
    // The flattened aggregate digest covers only its own fields: cover ours too.
    report.aggregate.run_digest = crate::report::run_digest(&report);
    report
}
