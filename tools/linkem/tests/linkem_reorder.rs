//! Jitter keeps packet order unless reordering is asked for, by `jitter-mode=reordering` or by
//! netem's `reorder=`; the settings are changed at run time through the control socket.

mod common;
use common::{inversions, netns_available, udp_collect, udp_send, Topo};
use std::time::Duration;

fn probe(topo: &Topo, port: u16) -> (usize, usize) {
    let dst = format!("10.0.1.2:{port}").parse().unwrap();
    let rx = udp_collect(&topo.srv(), dst, Duration::from_millis(300));
    udp_send(&topo.cli(), dst, 3000, 3000, 100).join().unwrap();
    let seqs = rx.join().unwrap();
    (seqs.len(), inversions(&seqs))
}

#[test]
fn linkem_reorder_only_when_asked() {
    if !netns_available("linkem_reorder") {
        return;
    }
    let topo = Topo::up("r", &["delay=10ms"]);
    let mut results = Vec::new();
    for (i, (spec, expect_reordering)) in [
        ("delay=10ms", false),
        ("jitter=5ms", false),
        ("rate=20mbit,jitter=5ms", false),
        ("jitter-mode=reordering", true),
        ("reset,delay=10ms,reorder=10%", true),
        ("reorder=0", false),
    ]
    .into_iter()
    .enumerate()
    {
        topo.ctl(1, &format!("set a2b {spec}"));
        let (got, inv) = probe(&topo, 7100 + i as u16);
        eprintln!("a2b {spec:<32} -> {got} received, {inv} inversions");
        assert!(got >= 2990, "{spec}: only {got} of 3000 arrived");
        results.push((spec, inv, expect_reordering));
    }
    for (spec, inv, expect) in results {
        if expect {
            assert!(inv > 30, "`{spec}` should reorder, saw {inv} inversions");
        } else {
            assert_eq!(inv, 0, "`{spec}` must preserve order");
        }
    }
    let st = topo.stats(1);
    assert!(st["a2b"]["reordered"].as_u64().unwrap() > 100, "model counted netem reorders: {}", st["a2b"]);
}
