//! The reference series' findings, reproduced in the simulator.

use mptun_proto::sched::{PenaltyConfig, Policy};
use mptun_sim::scenarios::penalise::{self, compare, compare_table, Params, Scenario};

fn run(s: Scenario, p: Policy, seeds: u64) -> penalise::Report {
    penalise::run(&Params { scenario: s, policy: p, seeds, penalty: PenaltyConfig::default(), first_seed: 1 })
}

#[test]
#[ignore = "prints the full comparison; run with --ignored --nocapture"]
fn print_compare_tables() {
    for s in Scenario::ALL {
        println!("== {s}\n{}", compare_table(&compare(s, 3, PenaltyConfig::default())));
    }
}

#[test]
fn every_run_delivers_intact_data() {
    for s in Scenario::ALL {
        for p in Policy::ALL {
            let r = run(s, p, 1);
            assert!(r.summary.sha256_match, "{s} {p}");
            assert!(r.summary.per_seed.iter().all(|x| x.subflows == 2), "{s} {p}: a run used one subflow");
        }
    }
}

#[test]
#[ignore = "diagnostics"]
fn print_case_runs() {
    let cases = penalise::cases(Scenario::Suite);
    for c in &cases {
        for reverse in [false, true] {
            let (r, trace) = penalise::run_traced(
                c,
                Policy::Default,
                PenaltyConfig::default(),
                1,
                reverse,
                Some(mptun_time::Duration::from_millis(1000)),
            );
            println!("{} {}: {:.3}s ofo {}", c.name, r.direction, r.runtime_s, r.ofo_queue);
            for s in trace.iter().filter(|s| s.t_s < 20.0) {
                println!(
                    "   t={:.1} sf{} cwnd={} ssth={} srtt={}us acked={}",
                    s.t_s, s.subflow, s.cwnd, s.ssthresh, s.srtt_us, s.bytes_acked
                );
            }
        }
    }
}
