//! 1% Bernoulli loss configured: over 10^5 datagrams the measured loss is 1% ± 0.2% (six
//! standard deviations), and it is the model's loss, not the machinery's.

mod common;
use common::{netns_available, udp_collect, udp_send, Topo};
use std::collections::HashSet;
use std::time::Duration;

#[test]
fn linkem_loss_matches_the_configured_rate() {
    if !netns_available("linkem_loss") {
        return;
    }
    let topo = Topo::up("l", &["loss=1%|"]);
    let n = 100_000u64;
    let rx = udp_collect(&topo.srv(), "10.0.1.2:7001".parse().unwrap(), Duration::from_millis(500));
    let sent = udp_send(&topo.cli(), "10.0.1.2:7001".parse().unwrap(), n, 40_000, 64).join().unwrap();
    let seqs = rx.join().unwrap();
    let distinct: HashSet<u64> = seqs.iter().copied().collect();
    let lost = sent - distinct.len() as u64;
    let loss = lost as f64 / sent as f64;
    let st = topo.stats(1);
    let d = &st["a2b"]["dropped"];
    eprintln!(
        "sent {sent}, received {} ({} distinct), measured loss {:.4}%; linkem a2b drops {d}",
        seqs.len(),
        distinct.len(),
        loss * 100.0
    );
    // Every other way to lose a datagram must be zero, or the figure measures the wrong thing.
    for cause in ["queue_full", "link_down", "oversize", "tx_error", "rx_kernel"] {
        assert_eq!(d[cause], 0, "non-model drops ({cause}): {d}");
    }
    // linkem's model also drops the odd ARP/ND frame the client sends meanwhile
    // (1 % of a handful): its count may exceed the datagrams lost by that few.
    let dropped = d["loss"].as_u64().unwrap();
    assert!((lost..=lost + 5).contains(&dropped), "receiver lost {lost}, linkem dropped {dropped}");
    assert!((0.008..=0.012).contains(&loss), "measured loss {loss}");
    assert_eq!(seqs.len(), distinct.len(), "duplicates without duplicate=");
}
