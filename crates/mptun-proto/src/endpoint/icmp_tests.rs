//! ICMP destination-unreachable and time-exceeded through the endpoint:
//! a handshake ends at once with the error, a synchronized connection only
//! remembers it, and nothing quoting a sequence number outside the window
//! is believed.

use super::*;
use crate::pm::{EndpointFlags, PmEndpoint};
use crate::test_util::{ip, pass, sa, Pair};
use mptun_time::Duration;
use mptun_wire::icmp::{emit_unreachable, Unreachable};

type Net = Pair<Endpoint>;

fn config(mptcp: bool) -> EndpointConfig {
    let mut c = EndpointConfig::default();
    c.mptcp.enabled = mptcp;
    c
}

fn icmp_about(router: &str, quoted: &[u8], why: Unreachable) -> Vec<u8> {
    let mut out = vec![0u8; 1500];
    let n = emit_unreachable(ip(router), quoted, why, &mut out).unwrap();
    out.truncate(n);
    out
}

fn events(ep: &mut Endpoint) -> Vec<(ConnectionHandle, Event)> {
    std::iter::from_fn(|| ep.poll_event()).collect()
}

/// The SYN a fresh connect sends.
fn connect(ep: &mut Endpoint, now: Instant, from: &str, to: &str) -> (ConnectionHandle, Vec<u8>) {
    let h = ep.connect(now, sa(from), sa(to)).unwrap();
    ep.handle_timeout(now);
    let out = Net::drain(ep, now);
    assert_eq!(out.len(), 1, "one SYN");
    (h, out.into_iter().next().unwrap())
}

fn with_seq(pkt: &[u8], seq: u32) -> Vec<u8> {
    let mut p = pkt.to_vec();
    let ihl = if p[0] >> 4 == 4 { usize::from(p[0] & 0x0f) * 4 } else { 40 };
    p[ihl + 4..ihl + 8].copy_from_slice(&seq.to_be_bytes());
    p
}

/// Kernel TCP fails `connect` at once with `ENETUNREACH` when a router
/// answers the SYN so; without this, the SYN retries ran for minutes.
fn handshake_ends_at_once(mptcp: bool, from: &str, to: &str, router: &str) {
    for why in [Unreachable::Network, Unreachable::Host, Unreachable::Port, Unreachable::TimeExceeded] {
        let mut ep = Endpoint::new(config(mptcp), [1; 32]);
        let now = Instant::ZERO + Duration::from_millis(5);
        let (h, syn) = connect(&mut ep, now, from, to);
        ep.handle_packet(now, &icmp_about(router, &syn, why));
        assert_eq!(events(&mut ep), vec![(h, Event::Unreachable(why))], "{why:?} mptcp={mptcp} {to}");
        assert!(ep.is_closed(h));
        assert!(ep.poll_timeout().is_none_or(|t| t > now + Duration::from_secs(60)), "no SYN retry left");
        let c = ep.counters();
        let v6 = to.starts_with('[');
        let te = why == Unreachable::TimeExceeded;
        assert_eq!(
            (c.icmp_in_dest_unreachs, c.icmp6_in_dest_unreachs, c.icmp_in_time_excds, c.icmp6_in_time_excds),
            ((!v6 && !te) as u64, (v6 && !te) as u64, (!v6 && te) as u64, (v6 && te) as u64)
        );
        assert_eq!((c.tcp_attempt_fails, c.mptun_icmp_handshake_aborts, c.tcp_ext_out_of_window_icmps), (1, 1, 0));
    }
}

#[test]
fn an_unreachable_ends_a_plain_handshake_at_once() {
    handshake_ends_at_once(false, "10.0.1.1:40000", "10.77.0.1:5201", "10.0.1.254");
    handshake_ends_at_once(false, "[fd00::1]:40000", "[fd77::1]:5201", "fd00::fe");
}

#[test]
fn an_unreachable_ends_an_mp_capable_handshake_at_once() {
    handshake_ends_at_once(true, "10.0.1.1:40000", "10.77.0.1:5201", "10.0.1.254");
    handshake_ends_at_once(true, "[fd00::1]:40000", "[fd77::1]:5201", "fd00::fe");
}

/// RFC 5927: a forged ICMP must also guess the sequence number; one that
/// quotes anything but what is in flight changes nothing.
#[test]
fn an_unreachable_quoting_a_sequence_outside_the_window_is_ignored() {
    let mut ep = Endpoint::new(config(true), [1; 32]);
    let now = Instant::ZERO;
    let (h, syn) = connect(&mut ep, now, "10.0.1.1:40000", "10.77.0.1:5201");
    let iss = u32::from_be_bytes(syn[24..28].try_into().unwrap());
    for seq in [iss.wrapping_add(2), iss.wrapping_sub(1), iss.wrapping_add(0x8000_0000)] {
        ep.handle_packet(now, &icmp_about("10.0.1.254", &with_seq(&syn, seq), Unreachable::Network));
    }
    // Nor does one about a pair no connection has.
    let mut other = syn.clone();
    other[20..22].copy_from_slice(&40001u16.to_be_bytes());
    ep.handle_packet(now, &icmp_about("10.0.1.254", &other, Unreachable::Network));
    assert_eq!(events(&mut ep), vec![]);
    assert!(!ep.is_closed(h));
    assert_eq!(ep.counters().tcp_ext_out_of_window_icmps, 3);
    assert_eq!(ep.counters().icmp_in_dest_unreachs, 4);
    // The SYN is still retried.
    let t = ep.poll_timeout().expect("SYN retry armed");
    ep.handle_timeout(t);
    assert_eq!(Net::drain(&mut ep, t).len(), 1, "the SYN goes out again");
}

/// An established connection whose subflows give up after 3 RTOs, and
/// what it sends of `data` while `deliver` says whether the wire carries it.
fn established_sending(mptcp: bool, data: &[u8], deliver: bool) -> (Net, ConnectionHandle, Vec<Vec<u8>>) {
    let mut cfg = config(mptcp);
    cfg.tcp.max_retries = 3;
    let mut b = Endpoint::new(cfg.clone(), [2; 32]);
    b.listen(sa("10.0.1.2:5000"));
    let mut n = Net::new(Endpoint::new(cfg, [1; 32]), b, Instant::ZERO);
    let (h, _) = established(&mut n);
    n.a.send(h, data).unwrap();
    let mut sent = Vec::new();
    n.run_for(Duration::ZERO, &mut |from_a, p| {
        if from_a {
            sent.push(p.clone());
        }
        deliver.then_some(p)
    });
    (n, h, sent)
}

fn established(n: &mut Net) -> (ConnectionHandle, ConnectionHandle) {
    let h = n.a.connect(n.now, sa("10.0.1.1:0"), sa("10.0.1.2:5000")).unwrap();
    n.run(Duration::from_millis(10), &mut pass());
    n.a.send(h, b"x").unwrap();
    n.run(Duration::from_millis(10), &mut pass());
    let sh = n.b.accept().unwrap();
    events(&mut n.a);
    (h, sh)
}

/// RFC 1122 4.2.3.9: once synchronized, net and host unreachable are soft
/// errors. The connection goes on; if it times out, the application is
/// told the ICMP's error rather than a bare timeout (Linux `sk_err_soft`).
#[test]
fn an_established_connection_keeps_an_unreachable_as_its_timeout_error() {
    for mptcp in [false, true] {
        // The path dies: the data goes out and is not answered.
        let (mut n, h, sent) = established_sending(mptcp, &[7; 3000], false);
        let head = sent.iter().find(|p| p.len() > 1000).expect("a data segment");
        n.a.handle_packet(n.now, &icmp_about("10.0.1.254", head, Unreachable::Host));
        assert_eq!(events(&mut n.a), vec![], "soft: nothing ends");
        assert!(!n.a.is_closed(h));
        n.run(Duration::from_secs(120), &mut |_, _| None);
        assert_eq!(
            events(&mut n.a),
            vec![(h, if mptcp { Event::Reset } else { Event::Unreachable(Unreachable::Host) })]
        );
    }
}

/// Something that worked since (new data acknowledged) clears the soft
/// error: a later timeout is a timeout.
#[test]
fn an_acknowledgement_forgets_the_soft_error() {
    let (mut n, h, sent) = established_sending(false, &[7; 3000], true);
    let head = sent.iter().find(|p| p.len() > 1000).expect("a data segment");
    n.a.handle_packet(n.now, &icmp_about("10.0.1.254", head, Unreachable::Network));
    n.run(Duration::from_millis(50), &mut pass());
    assert!(n.a.conn(h).unwrap().subflows().all(|(_, s)| s.soft_error().is_none()), "the ACK cleared it");
    n.a.send(h, &[8; 3000]).unwrap();
    n.run(Duration::from_secs(120), &mut |_, _| None);
    assert_eq!(events(&mut n.a), vec![(h, Event::TimedOut)]);
}

/// A join whose SYN a router answers with net unreachable fails at once;
/// the connection goes on over its first subflow and nothing waits out the
/// join's SYN retries.
#[test]
fn an_unreachable_join_fails_at_once_and_the_connection_goes_on() {
    let mut c = config(true);
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.1"),
        flags: EndpointFlags { subflow: true, ..Default::default() },
        port: None,
    });
    let mut b = Endpoint::new(config(true), [2; 32]);
    b.listen(sa("10.0.1.2:5000"));
    let mut n = Net::new(Endpoint::new(c, [1; 32]), b, Instant::ZERO);
    let joins = std::cell::RefCell::new(Vec::new());
    let mut tamper = |from_a: bool, p: Vec<u8>| {
        if from_a && p[12..16] == [10, 0, 2, 1] {
            joins.borrow_mut().push(p);
            return None;
        }
        Some(p)
    };
    let (h, _) = {
        let h = n.a.connect(n.now, sa("10.0.1.1:0"), sa("10.0.1.2:5000")).unwrap();
        n.run(Duration::from_millis(10), &mut tamper);
        n.a.send(h, b"x").unwrap();
        n.run(Duration::from_millis(10), &mut tamper);
        (h, n.b.accept().unwrap())
    };
    let syn = joins.borrow_mut().remove(0);
    assert!(joins.borrow().is_empty(), "one join SYN");
    n.a.handle_packet(n.now, &icmp_about("10.0.2.254", &syn, Unreachable::Network));
    assert_eq!(n.a.counters().mptun_icmp_handshake_aborts, 1);
    assert_eq!(n.a.conn(h).unwrap().subflows().count(), 1, "the join is gone at once");
    n.a.send(h, &[9; 10_000]).unwrap();
    n.run(Duration::from_millis(100), &mut tamper);
    assert!(n.a.is_established(h));
    assert!(!events(&mut n.a).iter().any(|(_, e)| matches!(e, Event::Reset | Event::TimedOut)));
}

/// Linux `tcp_req_err`: a listener's half-open connection whose SYN-ACK a
/// router answers with net/host unreachable is dropped (a listen drop);
/// port unreachable about a SYN-ACK is not believed to be fatal.
#[test]
fn a_half_open_connection_dies_only_of_net_or_host_unreachable() {
    for (why, dropped) in [(Unreachable::Network, true), (Unreachable::Host, true), (Unreachable::Port, false)] {
        let mut s = Endpoint::new(config(true), [2; 32]);
        s.listen(sa("10.0.1.2:5000"));
        let mut c = Endpoint::new(config(true), [1; 32]);
        let now = Instant::ZERO;
        let (_, syn) = connect(&mut c, now, "10.0.1.1:40000", "10.0.1.2:5000");
        s.handle_packet(now, &syn);
        let synack = Net::drain(&mut s, now).into_iter().next().expect("SYN-ACK");
        let drops = s.counters().tcp_ext_listen_drops;
        s.handle_packet(now, &icmp_about("10.0.1.254", &synack, why));
        assert_eq!(s.counters().tcp_ext_listen_drops - drops, dropped as u64, "{why:?}");
        assert_eq!(s.counters().mptun_icmp_handshake_aborts, dropped as u64);
        s.handle_timeout(now + Duration::from_secs(5));
        let retried = Net::drain(&mut s, now + Duration::from_secs(5));
        assert_eq!(retried.is_empty(), dropped, "{why:?}: the SYN-ACK is retried unless dropped");
    }
}
