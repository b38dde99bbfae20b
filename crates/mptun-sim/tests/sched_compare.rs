//! The scheduler comparison's findings (docs/schedulers.md), held as tests
//! at a smaller size: BLEST against head-of-line blocking in a small
//! receive buffer, minRTT-based schedulers keeping objects off the slow
//! path, redundant's tail under loss.

use mptun_proto::sched::Policy;
use mptun_sim::scenarios::sched_compare::{run_one, Params, Row, Workload};

fn params() -> Params {
    Params { bulk_size: 8 << 20, objects: 50, ..Params::default() }
}

fn row(w: Workload, s: Policy) -> Row {
    let r = run_one(&params(), w, s);
    assert!(r.complete, "{w:?} under {s}: incomplete");
    r
}

#[test]
fn blest_avoids_the_window_stall_that_minrtt_runs_into_with_a_small_buffer() {
    let (minrtt, blest) = (row(Workload::Bulk256k, Policy::MinRtt), row(Workload::Bulk256k, Policy::Blest));
    assert!(blest.goodput_mbps > 1.2 * minrtt.goodput_mbps, "{blest:?} vs {minrtt:?}");
    assert!(blest.rwnd_limited_s * 10.0 < minrtt.rwnd_limited_s, "{blest:?} vs {minrtt:?}");
    assert!(blest.ofo_queue * 10 < minrtt.ofo_queue, "{blest:?} vs {minrtt:?}");
}

#[test]
fn objects_finish_sooner_off_the_slow_path() {
    let default = row(Workload::Objects, Policy::Default);
    for s in [Policy::MinRtt, Policy::Blest, Policy::Ecf] {
        let r = row(Workload::Objects, s);
        let (p50, d50) = (r.object_p50_ms.unwrap(), default.object_p50_ms.unwrap());
        assert!(p50 < 0.8 * d50, "{s}: p50 {p50} ms, default {d50} ms");
    }
}

#[test]
fn redundant_shortens_the_tail_under_loss() {
    let (minrtt, red) = (row(Workload::ObjectsLoss, Policy::MinRtt), row(Workload::ObjectsLoss, Policy::Redundant));
    let (a, b) = (red.object_p99_ms.unwrap(), minrtt.object_p99_ms.unwrap());
    assert!(a < b, "redundant p99 {a} ms, minRTT {b} ms");
    assert_eq!(red.ofo_queue, 0, "its copies arrive in order");
}
