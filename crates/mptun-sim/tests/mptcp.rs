//! MPTCP end to end in the simulator.

use mptun_sim::scenarios::aggregate::{self, Params};

#[test]
fn aggregate_two_paths() {
    let p = Params::default();
    let r = aggregate::run(&p);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert!(r.result.sha256_match);
    // The acceptance bound: at least 90 % of the sum of the path rates.
    assert!(r.efficiency >= 0.90, "efficiency {}", r.efficiency);
    assert_eq!(r.subflows.len(), 2);
    assert!(r.subflows.iter().all(|s| s.bytes_acked > 1_000_000), "{:?}", r.subflows);
}

/// Every shipped scheduler carries the aggregate transfer intact over both
/// paths, and says so in the report; the default's report names none (so
/// its digest carries no scheduler field).
#[test]
fn aggregate_runs_under_every_scheduler() {
    use mptun_proto::sched::Policy;
    for policy in Policy::ALL {
        let r = aggregate::run(&Params { size: 8 << 20, policy, ..Params::default() });
        assert!(r.result.sha256_match, "{policy}");
        if matches!(policy, Policy::First | Policy::Backup) {
            // Pinned to the initial subflow by design.
            assert_eq!(
                r.subflows.iter().map(|s| (s.bytes_acked > 0) as u32).sum::<u32>(),
                1,
                "{policy}: {:?}",
                r.subflows
            );
        } else {
            assert!(r.subflows.iter().all(|s| s.bytes_acked > 100_000), "{policy}: {:?}", r.subflows);
        }
        let copies = r.result.client_counters.get("MptunSchedCopyBytes").copied().unwrap_or(0);
        // Only the redundant scheduler copies much: the slow path carries
        // copies of what the fast one sent.
        assert_eq!(policy == Policy::Redundant, copies > 1_000_000, "{policy}: {copies} bytes copied");
        let named = (policy != Policy::Default).then(|| policy.name());
        assert_eq!(r.scheduler, named);
    }
    let minrtt = aggregate::run(&Params { policy: Policy::MinRtt, ..Params::default() });
    assert!(minrtt.efficiency >= 0.90, "minRTT fills both paths: {}", minrtt.efficiency);
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

/// The aggregate run second by second: the two subflows together never
/// deliver more than the two paths carry, and once both are past slow start
/// they keep the pair busy until the data runs out.
#[test]
fn aggregate_timeline_fills_both_paths_and_never_exceeds_them() {
    use mptun_sim::scenarios::transfer::{self, TransferSpec};
    let p = Params::default();
    let capacity_bps: f64 = p.paths.iter().map(|x| x.rate_bps as f64).sum();
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
        client_scheduler: None,
    };
    let t = transfer::run_with_subflow_trace(&spec, false);
    assert!(t.result.sha256_match);
    let end = t.result.sim_end_s;
    // Bits acknowledged per whole second, both subflows together.
    let mut per_second = vec![0u64; end.ceil() as usize + 1];
    let mut last = std::collections::HashMap::new();
    for s in &t.subflow_trace {
        let prev = last.insert(s.subflow, s.bytes_acked).unwrap_or(0);
        assert!(s.bytes_acked >= prev, "subflow {} acked bytes went back at {} s", s.subflow, s.t_s);
        per_second[s.t_s.round() as usize] += (s.bytes_acked - prev) * 8;
    }
    assert_eq!(last.len(), 2, "both subflows are sampled");
    // The last sample is at most a second before the end: all but that
    // second's worth is acknowledged in it.
    let acked: u64 = last.values().sum();
    let tail = (capacity_bps / 8.0) as u64;
    assert!(acked + tail >= p.size && acked <= p.size, "the subflows acknowledged {acked} of {} bytes", p.size);
    for (sec, &bits) in per_second.iter().enumerate() {
        // ACKs bunch up at a sample's edge: allow 10 % over the line rate.
        assert!(bits as f64 <= capacity_bps * 1.10, "{sec} s: {bits} bit/s over {capacity_bps} bit/s of paths");
        // Past slow start (3 s) and before the last, partial second.
        if sec >= 3 && (sec as f64) < end.floor() {
            assert!(bits as f64 >= capacity_bps * 0.80, "{sec} s: only {bits} bit/s of {capacity_bps}");
        }
    }
}
