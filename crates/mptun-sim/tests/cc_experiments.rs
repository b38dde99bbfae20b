//! The simulator experiments of `docs/cc.md`, asserted end to end through
//! the real subflow: the HyStart round-start fix (`sim hystart`), EDT vs
//! quantum pacing under request/response traffic (`sim edt-rr`), CUBIC's
//! link utilisation and its behaviour next to Reno. Every run is a pure
//! function of its seed.

use mptun_cc::Algorithm;
use mptun_sim::scenarios::{cc_compare, edt_rr, hystart, tcp_single};
use mptun_time::Duration;
use serde_json::Value;

/// A report as JSON without its wall-clock fields, the only ones allowed to
/// differ between two runs with the same seed.
fn without_wall_clock(v: impl serde::Serialize) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("wall_s");
                m.remove("sim_gbps_per_wall_s");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(v).expect("reports serialise");
    strip(&mut v);
    v
}

#[test]
fn hystart_fix_reproduces_the_seed() {
    let r = hystart::run(&hystart::Params::default());
    let (legacy, fixed) = (&r.legacy, &r.fixed);
    eprintln!(
        "legacy: {} at {}, {} B; fixed: {} at {}, {} B",
        legacy.exit_reason,
        legacy.exit_cwnd,
        legacy.delivered_bytes,
        fixed.exit_reason,
        fixed.exit_cwnd,
        fixed.delivered_bytes
    );
    assert_eq!(r.queue_packets, 619, "1 BDP of 1514-byte frames, as in the patch");
    assert_eq!(legacy.bdp_packets, 619);

    // Legacy: HyStart's delay detector fires below the BDP; the pipe is not full.
    assert_eq!(legacy.exit_reason, "delay");
    assert!(legacy.exit_cwnd < legacy.bdp_packets, "legacy exit {}", legacy.exit_cwnd);
    assert!(!legacy.bottleneck_saturated, "tail utilisation {}", legacy.tail_utilisation);
    assert_eq!(legacy.server_counters.get("TcpExtTCPHystartDelayDetect"), Some(&1));

    // Fixed: the ACK train fires at or above the BDP and the pipe stays full.
    assert_eq!(fixed.exit_reason, "train");
    assert!(fixed.exit_cwnd >= fixed.bdp_packets, "fixed exit {}", fixed.exit_cwnd);
    assert!(fixed.bottleneck_saturated, "tail utilisation {}", fixed.tail_utilisation);
    assert_eq!(fixed.server_counters.get("TcpExtTCPHystartTrainDetect"), Some(&1));
    // Not a runaway slow start either: the exit is within 10% of the patch's 632.
    assert!((570..=700).contains(&fixed.exit_cwnd), "fixed exit {}", fixed.exit_cwnd);

    // The fix delivers more (the patch: +300 KB), without losses on either run.
    assert!(r.delivered_gain_bytes > 200_000, "gain {}", r.delivered_gain_bytes);
    assert_eq!(legacy.retransmits + fixed.retransmits, 0);
}

#[test]
fn hystart_reports_loss_when_the_buffer_ends_slow_start() {
    // A 20-packet buffer overflows long before a queue worth 16 ms builds.
    let p = hystart::Params { queue_packets: Some(20), ..hystart::Params::default() };
    let v = hystart::run_variant(&p, mptun_cc::HystartRoundStart::Fixed);
    assert_eq!(v.exit_reason, "loss");
    assert!(v.dropped_queue > 0 && v.retransmits > 0);
    assert!(v.exit_cwnd > 10 && v.exit_cwnd < 619, "exit cwnd {}", v.exit_cwnd);
    // And too short a run ends still in slow start.
    let p = hystart::Params { duration: Duration::from_millis(500), ..hystart::Params::default() };
    let v = hystart::run_variant(&p, mptun_cc::HystartRoundStart::Fixed);
    assert_eq!((v.exit_reason, v.exit_time_s), ("none", None));
}

#[test]
fn degenerate_parameters_give_reports_not_hangs() {
    let p = hystart::Params {
        rtt: Duration::ZERO,
        rate_bps: 0,
        duration: Duration::from_millis(50),
        ..hystart::Params::default()
    };
    let v = hystart::run_variant(&p, mptun_cc::HystartRoundStart::Legacy);
    assert_eq!(v.bdp_packets, 0);
    assert!(!v.bottleneck_saturated);
    let r = edt_rr::run(&edt_rr::Params { transactions: 10, mtu: 100, ..Default::default() });
    assert_eq!((r.edt.latency.transactions, r.quantum.latency.transactions), (10, 10));
    let c = cc_compare::run(&cc_compare::Params {
        duration: Duration::ZERO,
        sample_every: Duration::ZERO,
        ..Default::default()
    });
    assert_eq!(c.cubic.bytes + c.reno.bytes, 0);
}

#[test]
fn edt_removes_the_quantum_artefact() {
    let p = edt_rr::Params { transactions: 20_000, ..edt_rr::Params::default() };
    let r = edt_rr::run(&p);
    let (e, q) = (&r.edt.latency, &r.quantum.latency);
    eprintln!("edt {e:?}\nquantum {q:?}");
    assert_eq!((e.transactions, q.transactions), (20_000, 20_000));
    // Same wire, same minimum: the difference is all pacing.
    assert_eq!(e.min_us, q.min_us);
    assert!(q.p99_us >= 10.0 * e.p99_us, "p99 edt {} quantum {}", e.p99_us, q.p99_us);
    assert!(q.max_us >= 10.0 * e.max_us, "max edt {} quantum {}", e.max_us, q.max_us);
    assert!(q.mean_us > 1.2 * e.mean_us, "mean edt {} quantum {}", e.mean_us, q.mean_us);
    assert!(q.stddev_us > 10.0 * e.stddev_us.max(0.1));
    assert_eq!(r.edt.slow_transactions, 0);
    assert!(r.quantum.slow_transactions > 200, "{}", r.quantum.slow_transactions);
    assert_eq!(r.edt.retransmits + r.quantum.retransmits, 0);
}

#[test]
fn edt_rr_with_a_1500_byte_mtu_stays_below_an_order_of_magnitude() {
    // The bound in the scenario's docs: quantum / (2 x packet) = 3000 / 304.
    let p = edt_rr::Params { transactions: 5_000, mtu: 1500, ..edt_rr::Params::default() };
    let r = edt_rr::run(&p);
    let ratio = r.quantum.latency.p99_us / r.edt.latency.p99_us;
    assert!(ratio > 5.0 && ratio < 10.0, "p99 ratio {ratio}");
}

#[test]
fn cubic_fills_the_tcp_single_link() {
    let r = tcp_single::run(&tcp_single::Params { cc: Algorithm::Cubic, ..tcp_single::Params::default() });
    assert!(r.result.sha256_match);
    assert!(r.link_utilisation >= 0.95, "CUBIC utilisation {}", r.link_utilisation);
}

/// BBR on the same link: intact, and within a point and a half of CUBIC.
/// Its 16.9 s hold one PROBE_RTT (10 s after the handshake) and STARTUP's
/// overshoot into the one-BDP buffer, which together keep it under 95 %
/// (94.6 %; docs/cc.md, section 6, has the kernel's BBR on the same path).
#[test]
fn bbr_on_the_tcp_single_link() {
    let r = tcp_single::run(&tcp_single::Params { cc: Algorithm::Bbr, ..tcp_single::Params::default() });
    assert!(r.result.sha256_match);
    assert!(r.link_utilisation >= 0.94, "BBR utilisation {}", r.link_utilisation);
    let cubic = tcp_single::run(&tcp_single::Params::default());
    assert!(
        cubic.link_utilisation - r.link_utilisation < 0.015,
        "{} vs CUBIC {}",
        r.link_utilisation,
        cubic.link_utilisation
    );
}

#[test]
fn cubic_outgrows_reno_on_long_rtts_and_shares_on_short_ones() {
    let long = cc_compare::run(&cc_compare::Params { duration: Duration::from_secs(40), ..Default::default() });
    eprintln!("100 ms: cubic share {} jain {}", long.cubic_steady_share, long.jain_index);
    assert!(long.cubic_steady_share > 0.65, "share {}", long.cubic_steady_share);
    assert!(long.link_utilisation > 0.9, "utilisation {}", long.link_utilisation);
    assert!(long.reno.steady_mbps > 0.0, "Reno is not starved out");

    let short = cc_compare::run(&cc_compare::Params {
        rate_bps: 20_000_000,
        rtt: Duration::from_millis(10),
        duration: Duration::from_secs(40),
        ..Default::default()
    });
    eprintln!("10 ms: cubic share {} jain {}", short.cubic_steady_share, short.jain_index);
    assert!((0.35..0.65).contains(&short.cubic_steady_share), "share {}", short.cubic_steady_share);
    assert!(short.jain_index > 0.95);
    // One sample per second, the last at the end of the run.
    let last = long.samples.last().expect("samples");
    assert!((last.t_s - 40.0).abs() < 0.01, "last sample at {}", last.t_s);
    assert_eq!(long.samples.len(), 40);
}

#[test]
fn same_seed_same_reports() {
    let h = hystart::Params::default();
    assert_eq!(without_wall_clock(hystart::run(&h)), without_wall_clock(hystart::run(&h)));
    let e = edt_rr::Params { transactions: 3_000, ..Default::default() };
    assert_eq!(without_wall_clock(edt_rr::run(&e)), without_wall_clock(edt_rr::run(&e)));
    let c = cc_compare::Params { duration: Duration::from_secs(10), ..Default::default() };
    assert_eq!(without_wall_clock(cc_compare::run(&c)), without_wall_clock(cc_compare::run(&c)));
}
