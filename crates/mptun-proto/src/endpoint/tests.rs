//! Endpoint tests: typed errors of the socket surface, and what the
//! endpoint reclaims and bounds whatever its peers do.

use super::*;
use crate::pm::{EndpointFlags, PmEndpoint};
use crate::test_util::{pass, Pair};
use mptun_time::Duration;

type Net = Pair<Endpoint>;

const SERVER: &str = "10.0.1.2:5000";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn net_with(client: EndpointConfig, server: EndpointConfig) -> Net {
    let mut b = Endpoint::new(server, [2; 32]);
    b.listen(sa(SERVER));
    Net::new(Endpoint::new(client, [1; 32]), b, Instant::ZERO)
}

fn net() -> Net {
    net_with(EndpointConfig::default(), EndpointConfig::default())
}

fn narrow_ports(lo: u16, hi: u16) -> EndpointConfig {
    let mut c = EndpointConfig::default();
    c.limits.local_port_range = lo..=hi;
    c
}

#[test]
fn a_pair_in_use_is_refused_until_its_subflow_closed() {
    let mut n = net();
    let h = n.a.connect(n.now, sa("10.0.1.1:40000"), sa(SERVER)).unwrap();
    assert_eq!(n.a.connect(n.now, sa("10.0.1.1:40000"), sa(SERVER)), Err(ConnectError::AddrInUse));
    // Another destination or another local port is a different pair.
    n.a.connect(n.now, sa("10.0.1.1:40000"), sa("10.0.1.2:5001")).unwrap();
    n.a.connect(n.now, sa("10.0.1.1:40001"), sa(SERVER)).unwrap();
    n.a.abort(h);
    assert!(n.a.is_closed(h));
    n.a.connect(n.now, sa("10.0.1.1:40000"), sa(SERVER)).expect("the pair is free once its subflow closed");
}

#[test]
fn exhausted_ports_fail_at_once_and_come_back_when_freed() {
    let mut n = net_with(narrow_ports(40000, 40009), EndpointConfig::default());
    let hs: Vec<_> = (0..10).map(|_| n.a.connect(n.now, sa("10.0.1.1:0"), sa(SERVER)).unwrap()).collect();
    let mut ports: Vec<_> = hs.iter().map(|&h| n.a.addresses(h).unwrap().0.port()).collect();
    ports.sort_unstable();
    assert_eq!(ports, (40000..=40009).collect::<Vec<_>>(), "every port of the range, each once");
    assert_eq!(n.a.connect(n.now, sa("10.0.1.1:0"), sa(SERVER)), Err(ConnectError::AddrNotAvailable));
    // Other destinations still have the whole range.
    n.a.connect(n.now, sa("10.0.1.1:0"), sa("10.0.1.2:5001")).unwrap();
    let freed = n.a.addresses(hs[3]).unwrap().0.port();
    n.a.abort(hs[3]);
    n.a.remove(hs[3]);
    let h = n.a.connect(n.now, sa("10.0.1.1:0"), sa(SERVER)).unwrap();
    assert_eq!(n.a.addresses(h).unwrap().0.port(), freed);
}

#[test]
fn a_join_without_a_free_port_is_counted_not_retried() {
    let mut c = narrow_ports(40000, 40000);
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: "10.0.2.1".parse().unwrap(),
        flags: EndpointFlags { subflow: true, ..Default::default() },
    });
    let mut n = net_with(c, EndpointConfig::default());
    // The only port from 10.0.2.1 towards the server is taken.
    n.a.connect(n.now, sa("10.0.2.1:40000"), sa(SERVER)).unwrap();
    let h = n.a.connect(n.now, sa("10.0.1.1:50000"), sa(SERVER)).unwrap();
    n.run(Duration::from_millis(50), &mut pass());
    n.a.send(h, b"data makes the connection fully established").unwrap();
    n.run(Duration::from_millis(200), &mut pass());
    assert!(n.a.is_established(h));
    assert_eq!(n.a.counters().mptcp_mp_join_syn_tx_connect_err, 1);
    assert_eq!(n.a.conn(h).unwrap().info().subflows.len(), 1);
}

/// Reads what `h` of `ep` has until `Ok(0)` or an error.
fn read_all(ep: &mut Endpoint, h: ConnectionHandle, now: Instant) -> (Vec<u8>, Result<usize, RecvError>) {
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    loop {
        match ep.recv(h, now, &mut buf) {
            Ok(0) => return (got, Ok(0)),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) => return (got, Err(e)),
        }
    }
}

fn send_recv_errors(mptcp: bool) {
    let mut c = EndpointConfig::default();
    c.mptcp.enabled = mptcp;
    let mut n = net_with(c, EndpointConfig::default());
    let h = n.a.connect(n.now, sa("10.0.1.1:0"), sa(SERVER)).unwrap();
    n.run(Duration::from_millis(50), &mut pass());
    let sh = n.b.accept().expect("accepted");
    assert_eq!(n.b.conn(sh).unwrap().mode() == crate::mptcp::Mode::Mptcp, mptcp);
    // Nothing yet is not an error.
    assert_eq!(n.b.recv(sh, n.now, &mut [0u8; 16]), Ok(0));
    assert_eq!(n.a.send(h, b"hello"), Ok(5));
    n.a.close(h);
    assert_eq!(n.a.send(h, b"more"), Err(SendError::InvalidState), "our direction is shut down");
    n.run(Duration::from_millis(50), &mut pass());
    let (got, end) = read_all(&mut n.b, sh, n.now);
    assert_eq!(got, b"hello");
    assert_eq!(end, Err(RecvError::Finished));
    // The other direction is still open, then reset.
    assert_eq!(n.b.send(sh, b"x"), Ok(1));
    n.b.abort(sh);
    n.run(Duration::from_millis(50), &mut pass());
    assert_eq!(n.b.send(sh, b"y"), Err(SendError::InvalidState));
    let (_, end) = read_all(&mut n.a, h, n.now);
    assert!(n.a.is_closed(h));
    assert_eq!(end, Err(RecvError::InvalidState), "a reset is no orderly end");
    n.a.remove(h);
    assert_eq!(n.a.send(h, b"z"), Err(SendError::InvalidState));
    assert_eq!(n.a.recv(h, n.now, &mut [0u8; 4]), Err(RecvError::InvalidState));
}

#[test]
fn send_and_recv_tell_later_from_never_mptcp() {
    send_recv_errors(true);
}

#[test]
fn send_and_recv_tell_later_from_never_plain() {
    send_recv_errors(false);
}
