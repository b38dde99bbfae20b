//! MPTCP end to end in the simulator.

use mptun_sim::scenarios::aggregate::{self, Params};

#[test]
fn aggregate_two_paths() {
    let p = Params { size: 8 * 1024 * 1024, ..Params::default() };
    let r = aggregate::run(&p);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert!(r.result.sha256_match);
}
