//! RFC 6356's "do no harm" at a shared bottleneck: two uncoupled CUBIC
//! subflows take about two thirds of it from one TCP flow; coupled LIA,
//! OLIA and BALIA subflows take about what the TCP flow takes, with the
//! scheduler the multipath-tcp.org kernel ran them with (minRTT).

use mptun_cc::Algorithm;
use mptun_proto::sched::Policy;
use mptun_sim::scenarios::shared_bottleneck::{run, Params};

/// The MPTCP connection's mean share over `seeds`.
fn share(cc: Algorithm, seeds: u64) -> f64 {
    share_with(cc, Policy::MinRtt, seeds)
}

fn share_with(cc: Algorithm, policy: Policy, seeds: u64) -> f64 {
    let runs: Vec<_> =
        (1..=seeds).map(|seed| run(&Params { mptcp_cc: cc, policy, seed, ..Params::default() })).collect();
    for r in &runs {
        assert_eq!(r.flows[0].kind, "mptcp");
        assert_eq!(r.flows[0].subflows, 2, "both subflows up: {r:?}");
        assert!(r.links[0].utilisation > 0.9, "the bottleneck is full: {r:?}");
    }
    runs.iter().map(|r| r.flows[0].share).sum::<f64>() / runs.len() as f64
}

#[test]
fn uncoupled_subflows_take_two_thirds_coupled_ones_a_fair_share() {
    let cubic = share(Algorithm::Cubic, 3);
    assert!(cubic >= 0.6, "uncoupled CUBIC: {cubic:.3}");
    for cc in [Algorithm::Lia, Algorithm::Olia, Algorithm::Balia] {
        let s = share(cc, 3);
        assert!((0.40..=0.60).contains(&s), "{cc}: {s:.3}");
        assert!(s < cubic - 0.1, "{cc} must take less than uncoupled: {s:.3} against {cubic:.3}");
    }
}

/// Upstream Linux's linger-time scheduler hands OLIA's starved subflow
/// (cwnd 2) bursts of up to 64 KiB, which block the connection for seconds
/// (head-of-line blocking); minRTT hands a subflow only its window's room.
#[test]
fn olia_loses_a_third_to_head_of_line_blocking_under_the_linger_time_scheduler() {
    let linger = share_with(Algorithm::Olia, Policy::Default, 3);
    let minrtt = share(Algorithm::Olia, 3);
    assert!(linger < 0.40, "OLIA under the default scheduler: {linger:.3}");
    assert!(minrtt > linger + 0.08, "minRTT removes the blocking: {minrtt:.3} against {linger:.3}");
}

#[test]
fn a_run_is_a_function_of_its_seed() {
    let p = Params { mptcp_cc: Algorithm::Olia, seed: 3, ..Params::default() };
    assert_eq!(run(&p).run_digest, run(&p).run_digest);
    assert_ne!(run(&p).run_digest, run(&Params { seed: 4, ..p }).run_digest, "the jitter draws from the seed");
}
