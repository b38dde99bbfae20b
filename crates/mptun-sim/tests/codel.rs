//! CoDel (Linux `sch_codel`) on a simulated bottleneck: a CUBIC flow that
//! fills a deep droptail buffer keeps a standing queue of hundreds of
//! milliseconds; under CoDel the median queueing delay stays near the 5 ms
//! target while the link stays full.

use mptun_cc::Algorithm;
use mptun_link::{CodelParams, Qdisc};
use mptun_sim::scenarios::bottleneck::Bottleneck;
use mptun_sim::scenarios::network::{run, Flow, FlowKind, LinkReport, LinkSpec, Route, Spec};
use mptun_time::Duration;

fn one_flow(qdisc: Qdisc) -> LinkReport {
    let link = Bottleneck {
        rate_bps: 20_000_000,
        rtt: Duration::from_millis(40),
        queue_packets: Some(1000),
        jitter: Duration::from_micros(500),
        qdisc,
    };
    let spec = Spec {
        name: "codel".into(),
        links: vec![LinkSpec { name: "bottleneck".into(), link }],
        routes: vec![Route {
            a: "10.0.1.1".parse().unwrap(),
            b: "10.0.1.2".parse().unwrap(),
            links: vec!["bottleneck".into()],
        }],
        flows: vec![Flow {
            kind: FlowKind::Tcp,
            from: vec!["10.0.1.1".parse().unwrap()],
            to: "10.0.1.2".parse().unwrap(),
            cc: Algorithm::Cubic,
            policy: Default::default(),
            start: Duration::ZERO,
            stop: None,
        }],
        duration: Duration::from_secs(20),
        measure_from: None,
        seed: 1,
    };
    let r = run(&spec).expect("a valid spec");
    r.links.into_iter().next().expect("one link")
}

#[test]
fn codel_keeps_the_standing_queue_near_its_target() {
    let tail = one_flow(Qdisc::DropTail);
    let codel = one_flow(Qdisc::Codel(CodelParams::default()));
    assert_eq!(tail.dropped_aqm, 0);
    assert!(tail.queue_delay_p50_ms > 100.0, "a deep droptail buffer fills: {tail:?}");
    assert!(codel.dropped_aqm > 0 && codel.dropped_queue == 0, "CoDel drops, the buffer never fills: {codel:?}");
    assert!(codel.queue_delay_p50_ms < 10.0, "near the 5 ms target: {codel:?}");
    assert!(codel.utilisation > 0.9, "and the link stays full: {codel:?}");
}
