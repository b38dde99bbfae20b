//! The path manager at work between two endpoints: when joins are (not)
//! opened, and what its events and commands do on the wire.

use super::*;
use crate::mptcp::close::FIN_HOLD_MAX;
use crate::test_util::Host;

/// A client with a `subflow` endpoint (10.0.2.1) and a server that takes
/// joins: the client's PM opens one subflow once fully established.
fn subflow_endpoint_net() -> Net {
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.1"),
        flags: EndpointFlags { subflow: true, ..Default::default() },
    });
    net(c, EndpointConfig::default())
}

fn is_join_syn(p: &[u8]) -> bool {
    let h = parse_tcp_packet(p).unwrap().tcp;
    h.flags.syn() && !h.flags.ack() && mptcp_opts(p).iter().any(|o| matches!(o, MptcpOption::MpJoinSyn { .. }))
}

fn is_data_fin(p: &[u8]) -> bool {
    mptcp_opts(p).iter().any(|o| matches!(o, MptcpOption::Dss { data_fin: true, .. }))
}

fn is_join_third_ack(p: &[u8]) -> bool {
    mptcp_opts(p).iter().any(|o| matches!(o, MptcpOption::MpJoinAck { .. }))
}

#[test]
fn a_client_that_closes_at_once_opens_its_joins_before_its_data_fin() {
    // The application writes a request and shuts its side down before the
    // connection is fully established (a download's usual start; the
    // kernel-server case of 13,930 bytes). A Linux server takes no join
    // once it has our DATA_FIN: the DATA_FIN waits until the PM's join is
    // through its handshake, so the join is taken and the answer can use
    // both paths.
    let mut n = subflow_endpoint_net();
    let h = n.connect();
    n.run_for(Duration::from_millis(3), &mut pass());
    assert!(n.a.is_established(h));
    assert_eq!(n.a.send(h, &[7u8; 13_930]).unwrap(), 13_930);
    n.a.close(h);
    let (mut k, mut third_ack, mut fin) = (0, None, None);
    let mut order = |from_a: bool, p: Vec<u8>| {
        if from_a {
            k += 1;
            if is_join_third_ack(&p) {
                third_ack.get_or_insert(k);
            }
            if is_data_fin(&p) {
                fin.get_or_insert(k);
            }
        }
        Some(p)
    };
    n.run(Duration::from_millis(500), &mut order);
    let (third_ack, fin) = (third_ack.expect("the join completed"), fin.expect("the DATA_FIN went out"));
    assert!(third_ack < fin, "third ACK #{third_ack}, DATA_FIN #{fin}");
    let sh = n.b.accept().unwrap();
    let mut buf = vec![0u8; 20_000];
    assert_eq!(n.read_b(sh, &mut buf).len(), 13_930);
    assert!(n.b.recv_finished(sh));
    let b = n.b.counters();
    assert_eq!((b.mptcp_mp_join_syn_rx, b.mptcp_mp_join_ack_rx, b.mptcp_mp_join_rejected), (1, 1, 0));
}

#[test]
fn a_join_still_in_flight_when_the_data_fin_hold_ends_is_reset_at_its_syn_ack() {
    let mut n = subflow_endpoint_net();
    let h = n.connect();
    n.run_for(Duration::from_millis(3), &mut pass());
    n.a.send(h, &[1u8; 1000]).unwrap();
    n.a.close(h);
    // Every join SYN is lost for longer than the DATA_FIN may wait; the
    // first is kept and delivered late.
    let mut held = None;
    let mut lose = |from_a: bool, p: Vec<u8>| {
        if from_a && is_join_syn(&p) {
            held.get_or_insert(p);
            return None;
        }
        Some(p)
    };
    let sh = loop {
        n.run(Duration::from_millis(10), &mut lose);
        if let Some(sh) = n.b.accept() {
            break sh;
        }
    };
    let mut buf = vec![0u8; 2000];
    assert_eq!(n.read_b(sh, &mut buf).len(), 1000);
    // The DATA_FIN waits for the join, and no longer than FIN_HOLD_MAX.
    n.run(FIN_HOLD_MAX - Duration::from_millis(100), &mut lose);
    assert!(!n.b.recv_finished(sh), "the DATA_FIN waited");
    n.run(Duration::from_millis(300), &mut lose);
    assert!(n.b.recv_finished(sh), "the DATA_FIN left when the hold ended");
    let syn = held.expect("the PM sent its join SYN");
    n.b.receive(n.now, &syn);
    n.run(Duration::from_millis(500), &mut pass());
    let (a, b) = (n.a.counters(), n.b.counters());
    assert_eq!(a.mptun_mp_join_after_data_fin, 1, "the late SYN-ACK is answered with a RST");
    assert_eq!((b.mptcp_mp_join_syn_rx, b.mptcp_mp_join_ack_rx, b.mptcp_mp_join_rejected), (1, 0, 0));
}
