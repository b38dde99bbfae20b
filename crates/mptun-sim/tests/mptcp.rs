//! MPTCP end to end in the simulator.

use mptun_sim::scenarios::aggregate::{self, Params};

#[test]
fn aggregate_two_paths() {
    let p = Params::default();
    let r = aggregate::run(&p);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert!(r.result.sha256_match);
}

#[test]
fn single_path_mptcp_survives_loss_and_reordering() {
    use mptun_sim::scenarios::tcp_single;
    for (loss, reorder) in [(0.0, 0.0), (0.01, 0.0), (0.0, 0.02)] {
        let p = tcp_single::Params { size: 4_000_000, loss, reorder, mptcp: true, ..Default::default() };
        let r = tcp_single::run(&p);
        eprintln!("loss {loss} reorder {reorder}: {:.2} Mbit/s, sha {}, {:?}", r.result.goodput_bps / 1e6, r.result.sha256_match, r.result.client_counters);
        assert!(r.result.sha256_match, "loss {loss} reorder {reorder}");
    }
}
