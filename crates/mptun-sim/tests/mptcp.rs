//! MPTCP end to end in the simulator.

use mptun_sim::scenarios::aggregate::{self, Params};

#[test]
fn aggregate_two_paths() {
    let p = Params::default();
    let r = aggregate::run(&p);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert!(r.result.sha256_match);
    // The acceptance bound (the kernel reaches 0.69 on a similar pair).
    assert!(r.efficiency >= 0.90, "efficiency {}", r.efficiency);
    assert_eq!(r.subflows.len(), 2);
    assert!(r.subflows.iter().all(|s| s.bytes_acked > 1_000_000), "{:?}", r.subflows);
}

#[test]
fn single_path_mptcp_survives_loss_and_reordering() {
    use mptun_sim::scenarios::tcp_single;
    for (loss, reorder) in [(0.0, 0.0), (0.01, 0.0), (0.0, 0.02)] {
        let p = tcp_single::Params { size: 4_000_000, loss, reorder, mptcp: true, ..Default::default() };
        let r = tcp_single::run(&p);
        eprintln!(
            "loss {loss} reorder {reorder}: {:.2} Mbit/s, sha {}, {:?}",
            r.result.goodput_bps / 1e6,
            r.result.sha256_match,
            r.result.client_counters
        );
        assert!(r.result.sha256_match, "loss {loss} reorder {reorder}");
    }
}

#[test]
fn failover_completes_reinjects_and_reuses_the_recovered_path() {
    let r = mptun_sim::scenarios::failover::run(1, 32 * 1024 * 1024);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert!(r.aggregate.result.sha256_match);
    assert!(r.reinjected_bytes > 0);
    assert!(r.recovered_path_used, "{} -> {}", r.path0_bytes_at_up, r.path0_bytes_at_end);
}

#[test]
fn fallback_to_plain_tcp_is_transparent() {
    let r = mptun_sim::scenarios::fallback::run(1, 4 * 1024 * 1024);
    assert!(r.fallback);
    assert!(r.aggregate.result.sha256_match);
    assert_eq!(r.aggregate.subflows.len(), 1);
    assert_eq!(r.aggregate.result.client_counters.get("MPTcpExtMPCapableFallbackSYNACK"), Some(&1));
}

#[test]
#[ignore = "diagnostics"]
fn print_aggregate_timeline() {
    use mptun_sim::scenarios::transfer::{self, TransferSpec};
    let p = Params::default();
    let (client, server) = aggregate::mptcp_configs(2);
    let spec = TransferSpec {
        paths: aggregate::paths(&p.paths),
        size: p.size,
        reverse_size: 0,
        client,
        server,
        seed: 1,
        max_time: mptun_time::Duration::from_secs(100),
        port: 5201,
        sample_every: Some(mptun_time::Duration::from_millis(1000)),
        actions: Vec::new(),
    };
    let t = transfer::run_with_subflow_trace(&spec, false);
    let mut last = [0u64; 2];
    for s in &t.subflow_trace {
        let d = s.bytes_acked - last[s.subflow.min(1)];
        last[s.subflow.min(1)] = s.bytes_acked;
        println!(
            "t={:.0} sf{} {:.2} Mbit/s cwnd={} srtt={}ms",
            s.t_s,
            s.subflow,
            d as f64 * 8.0 / 1e6,
            s.cwnd,
            s.srtt_us / 1000
        );
    }
    println!("end {:.2}s", t.result.sim_end_s);
}
