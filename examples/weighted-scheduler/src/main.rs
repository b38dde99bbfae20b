//! Runs the simulator's `aggregate` scenario (10 and 3 Mbit/s paths) with
//! the weighted scheduler and prints its JSON report: an external
//! scheduler in the simulator. `mptun-example-scheduler [W0 W1]`.

use mptun_example_scheduler::WeightedScheduler;
use mptun_sim::scenarios::aggregate;
use mptun_sim::scenarios::transfer::SchedulerHook;

fn main() {
    let weights: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let weights = if weights.is_empty() { vec![1, 1] } else { weights };
    let hook = SchedulerHook::new(move || Box::new(WeightedScheduler::new(weights.clone())));
    let r = aggregate::run(&aggregate::Params { scheduler_hook: Some(hook), ..Default::default() });
    println!("{}", serde_json::to_string_pretty(&r).expect("a report serialises"));
    if !r.result.sha256_match {
        std::process::exit(1);
    }
}
