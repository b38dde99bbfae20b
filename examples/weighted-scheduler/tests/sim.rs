//! The external scheduler in the simulator: the transfer arrives intact,
//! the report names it, and its weights decide which paths carry data.

use mptun_example_scheduler::WeightedScheduler;
use mptun_sim::scenarios::aggregate::{self, Params};
use mptun_sim::scenarios::transfer::SchedulerHook;

fn run(weights: Vec<u32>) -> aggregate::Report {
    let hook = SchedulerHook::new(move || Box::new(WeightedScheduler::new(weights.clone())));
    aggregate::run(&Params { size: 8 << 20, scheduler_hook: Some(hook), ..Params::default() })
}

#[test]
fn the_weighted_scheduler_runs_in_the_simulator() {
    let both = run(vec![1, 1]);
    assert!(both.result.sha256_match);
    assert_eq!(both.scheduler, Some("weighted"));
    assert!(both.subflows.iter().all(|s| s.bytes_acked > 1_000_000), "{:?}", both.subflows);
    assert!(both.efficiency > 0.8, "both paths filled: {}", both.efficiency);
    // Weight 0 keeps the second path out: only the first carries data.
    let one = run(vec![1, 0]);
    assert!(one.result.sha256_match);
    // (The last ACKs may still be on their way when the receiver has it all.)
    assert!(one.subflows[0].bytes_acked > 8_000_000, "{:?}", one.subflows);
    assert!(one.subflows.iter().skip(1).all(|s| s.bytes_acked == 0), "{:?}", one.subflows);
}
