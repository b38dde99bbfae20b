//! The simulated network answers what no route takes with ICMP net
//! unreachable, as a router does: a connect to a network nobody has fails
//! at once (not after its SYN retries), and a join from an address no route
//! starts at fails at once while the transfer goes on.

use mptun_link::LinkConfig;
use mptun_proto::endpoint::{Endpoint, EndpointConfig};
use mptun_proto::pm::{EndpointFlags, PmEndpoint};
use mptun_sim::apps::BulkApp;
use mptun_sim::stack::StackHost;
use mptun_sim::world::{PathSpec, Sim, SimConfig};
use mptun_time::{Duration, Instant};
use std::net::SocketAddr;

fn path() -> PathSpec {
    let link = LinkConfig { rate_bps: Some(100_000_000), delay: Duration::from_millis(10), ..Default::default() };
    PathSpec { addr_a: "10.0.1.1".parse().unwrap(), addr_b: "10.0.1.2".parse().unwrap(), a_to_b: link, b_to_a: link }
}

fn hosts(client: EndpointConfig) -> (StackHost, StackHost) {
    let mut b = StackHost::new(Endpoint::new(EndpointConfig::default(), [2; 32]));
    b.ep.listen("10.0.1.2:5201".parse().unwrap());
    b.accept_template = Some(BulkApp::new(0, 2).expecting(1));
    (StackHost::new(Endpoint::new(client, [1; 32])), b)
}

#[test]
fn a_connect_to_a_network_nobody_has_fails_at_once() {
    for mptcp in [true, false] {
        let mut cfg = EndpointConfig::default();
        cfg.mptcp.enabled = mptcp;
        let (mut a, b) = hosts(cfg);
        let h = a.ep.connect(Instant::ZERO, "10.0.1.1:0".parse().unwrap(), "10.77.0.1:5201".parse().unwrap()).unwrap();
        let mut sim = Sim::new(SimConfig::default(), a, b, vec![path()]);
        let end = sim.run(|s| s.a.ep.is_closed(h), None, |_, _, _| {});
        assert!(end < Instant::ZERO + Duration::from_millis(5), "failed at {end:?}, not at once");
        let c = sim.a.ep.counters();
        assert_eq!((c.icmp_in_dest_unreachs, c.mptun_icmp_handshake_aborts, c.tcp_attempt_fails), (1, 1, 1));
        assert_eq!(sim.stats().no_route, 1, "one SYN, no retry");
    }
}

#[test]
fn a_join_from_an_unrouted_address_fails_at_once_and_the_transfer_completes() {
    let mut cfg = EndpointConfig::default();
    cfg.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: "10.0.9.1".parse().unwrap(),
        flags: EndpointFlags { subflow: true, ..Default::default() },
        port: None,
    });
    let (mut a, b) = hosts(cfg);
    let server: SocketAddr = "10.0.1.2:5201".parse().unwrap();
    let h = a.ep.connect(Instant::ZERO, "10.0.1.1:0".parse().unwrap(), server).unwrap();
    a.attach(h, BulkApp::new(2_000_000, 1));
    a.pump(Instant::ZERO);
    let mut sim = Sim::new(SimConfig::default(), a, b, vec![path()]);
    sim.run(|s| s.b.apps.values().any(|app| app.received == 2_000_000), None, |_, _, _| {});
    let c = sim.a.ep.counters();
    assert!(c.mptun_icmp_handshake_aborts >= 1, "the join was answered: {c:?}");
    // Without the answer, each join would sit out its SYN retries: one
    // SYN per attempt here, and the transfer is not held up by them.
    assert_eq!(c.mptun_icmp_handshake_aborts, sim.stats().no_route);
    assert!(sim.b.apps.values().all(|app| app.received_intact()));
}
