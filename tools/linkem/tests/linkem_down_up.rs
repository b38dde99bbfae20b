//! A scenario cuts a path mid-run and restores it through the control socket: while down every
//! frame is dropped (and counted as such), after `up` traffic flows again.

mod common;
use common::{netns_available, udp_collect, udp_send, Topo};
use std::time::Duration;

#[test]
fn linkem_down_up_at_run_time() {
    if !netns_available("linkem_down_up") {
        return;
    }
    let topo = Topo::up("d", &["rate=50mbit,delay=2ms"]);
    let run = |port: u16| {
        let dst = format!("10.0.1.2:{port}").parse().unwrap();
        let rx = udp_collect(&topo.srv(), dst, Duration::from_millis(300));
        udp_send(&topo.cli(), dst, 500, 5000, 200).join().unwrap();
        // Nothing may arrive while down: give the receiver its idle window, then stop it.
        rx.join().unwrap().len()
    };
    assert_eq!(run(7400), 500, "link up: everything arrives");
    let reply = topo.ctl(1, "down a2b");
    assert!(reply.contains("a2b:") && reply.ends_with("down"), "{reply}");
    assert_eq!(run(7401), 0, "link down: nothing arrives");
    let st = topo.stats(1);
    // The 500 datagrams, plus whatever ARP/ND the client sent meanwhile.
    let down = st["a2b"]["dropped"]["link_down"].as_u64().unwrap();
    assert!((500..520).contains(&down), "{}", st["a2b"]);
    topo.ctl(1, "up a2b");
    assert_eq!(run(7402), 500, "link up again");
    assert!(topo.ctl(1, "config").contains("rate=50000000bit"), "other settings survive down/up");
}
