//! The basic acceptance runs: one TCP flow over one emulated link.

use mptun_cc::Algorithm;
use mptun_sim::scenarios::tcp_single::{self, Params};

fn deterministic_json(r: &tcp_single::Report) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap();
    let o = v.as_object_mut().unwrap();
    // The only wall-clock fields.
    o.remove("wall_s");
    o.remove("sim_gbps_per_wall_s");
    o.remove("run_digest");
    v
}

#[test]
fn reno_fills_the_link_and_delivers_every_byte() {
    let r = tcp_single::run(&Params::default());
    assert!(r.result.sha256_match);
    assert!(r.link_utilisation >= 0.95, "goodput {} bps = {:.3} of link", r.result.goodput_bps, r.link_utilisation);
    assert_eq!(r.result.timeouts, 0);
}

#[test]
fn same_seed_same_run_bit_for_bit() {
    let p = Params { size: 5_000_000, loss: 0.005, reorder: 0.01, ..Params::default() };
    let (ra, rb) = (tcp_single::run(&p), tcp_single::run(&p));
    assert_eq!(ra.run_digest, rb.run_digest);
    let a = deterministic_json(&ra);
    let b = deterministic_json(&rb);
    assert_eq!(a, b);
    let c = deterministic_json(&tcp_single::run(&Params { seed: 2, ..p }));
    assert_ne!(a, c, "a different seed must change the run");
}

#[test]
fn loss_and_reordering_never_corrupt_the_stream() {
    for (loss, reorder) in [(0.01, 0.0), (0.0, 0.02), (0.02, 0.02)] {
        for cc in [Algorithm::Reno, Algorithm::Cubic] {
            let p = Params { size: 4_000_000, loss, reorder, cc, ..Params::default() };
            let r = tcp_single::run(&p);
            assert!(r.result.sha256_match, "loss {loss} reorder {reorder} {cc}: {:?}", r.result.completed);
            assert!(r.result.retransmits > 0, "loss {loss} reorder {reorder}: no retransmits?");
            assert!(r.result.goodput_bps > 1e6, "loss {loss} reorder {reorder} {cc}: {}", r.result.goodput_bps);
        }
    }
}

#[test]
fn reno_under_random_loss_follows_the_mathis_model() {
    // Mathis et al.: rate ≈ MSS/RTT · sqrt(3/2)/sqrt(p). A stack that ignored
    // losses would beat it; one that over-reacted would fall far short.
    let p = Params { loss: 0.01, size: 10_000_000, ..Params::default() };
    let r = tcp_single::run(&p);
    let mathis = 1448.0 * 8.0 / 0.040 * (1.5f64).sqrt() / (0.01f64).sqrt();
    let ratio = r.result.goodput_bps / mathis;
    assert!((0.6..1.6).contains(&ratio), "goodput {} vs Mathis {mathis}: ratio {ratio}", r.result.goodput_bps);
}

#[test]
fn with_tso_super_segments_are_cut_on_the_wire_and_the_run_keeps_its_meaning() {
    // The hosts get a 64 KiB buffer and build super-segments; the sending
    // side cuts them into wire segments before the link, as a NIC does.
    for (loss, cc) in [(0.0, Algorithm::Reno), (0.01, Algorithm::Cubic)] {
        let p = Params { size: 20_000_000, loss, cc, ..Params::default() };
        let spec = tcp_single::spec(&p, None);
        let plain = mptun_sim::scenarios::transfer::run(&spec);
        let tso = mptun_sim::scenarios::transfer::run_with_tso(&spec);
        assert!(tso.sha256_match && tso.completed, "loss {loss}: {:?}", tso.completed);
        // The link saw every wire segment the sender counted, not the fewer
        // super-segments it built.
        let link = &tso.links[0].0;
        let offered =
            link.delivered_packets - link.duplicated + link.dropped_queue + link.dropped_loss + link.dropped_down;
        assert_eq!(offered, tso.client_counters["TcpOutSegs"], "{link:?}");
        // Super-segments were built: with an MTU-sized buffer (the only
        // difference) the run is another, bit for bit.
        assert_ne!(tso, plain);
        // Same link, same flow: goodput within a few percent of the run
        // built segment by segment.
        let r = tso.goodput_bps / plain.goodput_bps;
        assert!((0.9..1.1).contains(&r), "loss {loss}: goodput {} vs {}", tso.goodput_bps, plain.goodput_bps);
        if loss == 0.0 {
            assert_eq!(tso.timeouts, 0);
        }
    }
}

#[test]
fn bits_flipped_on_the_wire_are_caught_by_the_checksum_and_resent() {
    // The simulator lets the stack skip checksums only on packets the wire
    // left alone; a corrupted one must still be verified, dropped, counted
    // and retransmitted, or the stream would arrive wrong.
    let p = Params { size: 4_000_000, ..Params::default() };
    let mut spec = tcp_single::spec(&p, None);
    for path in &mut spec.paths {
        path.a_to_b.corrupt = 0.01;
        path.b_to_a.corrupt = 0.01;
    }
    let r = mptun_sim::scenarios::transfer::run(&spec);
    assert!(r.completed && r.sha256_match, "{:?}", r.completed);
    let csum = |c: &std::collections::BTreeMap<&str, u64>| c.get("TcpInCsumErrors").copied().unwrap_or(0);
    // 1 % of ~2,800 data packets one way, of ~1,400 ACKs the other.
    assert!(csum(&r.server_counters) > 10, "{:?}", r.server_counters);
    assert!(csum(&r.client_counters) > 3, "{:?}", r.client_counters);
    assert!(r.retransmits >= csum(&r.server_counters), "every corrupted data packet is sent again");
}

/// BBR's acceptance is the kernel's BBR on the same path, not an absolute
/// figure: on tcp-single's path in the lab (10 Mbit/s, 20 ms each way, 33
/// packets, 17 s) the kernel's BBR moves 94.1 % of the link (docs/cc.md,
/// three runs: 9.408 to 9.410 Mbit/s); the simulator must stay within one
/// point of it, above or below.
#[test]
fn bbr_stays_within_a_point_of_the_kernels_bbr_on_the_same_path() {
    const KERNEL_BBR: f64 = 0.941;
    let r = tcp_single::run(&Params { cc: Algorithm::Bbr, ..Params::default() });
    assert!(r.result.sha256_match);
    let u = r.link_utilisation;
    assert!((u - KERNEL_BBR).abs() <= 0.01, "BBR moved {u:.3} of the link, the kernel's BBR {KERNEL_BBR}");
}
