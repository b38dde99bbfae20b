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
        port: None,
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

/// Subflows of `c` up (not closing: TIME_WAIT keeps a closed one a while).
fn up(c: &Connection) -> usize {
    c.subflows().filter(|(_, s)| s.state() == crate::tcp::State::Established).count()
}

fn kinds(ep: &mut Endpoint) -> Vec<crate::pm::PmEventKind> {
    std::iter::from_fn(|| ep.poll_pm_event()).map(|(_, e)| e.kind).collect()
}

#[test]
fn a_two_path_transfer_reports_its_events_in_order() {
    use crate::pm::PmEventKind::*;
    let mut n = two_path();
    n.a.listen_pm_events();
    n.b.listen_pm_events();
    n.b.listen(sa("10.0.1.2:6000"));
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let a = kinds(&mut n.a);
    assert_eq!(a, [Created, Established, Announced, SubEstablished], "client");
    let b = kinds(&mut n.b);
    assert_eq!(b, [ListenerCreated, Created, Established, SubEstablished], "server");
    let sh = n.b.accept().unwrap();
    n.a.close(h);
    n.b.close(sh);
    n.run(Duration::from_secs(2), &mut pass());
    let a = kinds(&mut n.a);
    assert_eq!(a.iter().filter(|k| **k == SubClosed).count(), 2, "{a:?}");
    assert_eq!(a.last(), Some(&Closed), "{a:?}");
    n.b.unlisten(sa("10.0.1.2:6000"));
    assert_eq!(kinds(&mut n.b).last(), Some(&ListenerClosed));
}

#[test]
fn events_carry_the_kernel_s_attributes() {
    use crate::pm::PmEventKind::*;
    let mut n = two_path();
    n.a.listen_pm_events();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let evs: Vec<_> = std::iter::from_fn(|| n.a.poll_pm_event()).map(|(_, e)| e).collect();
    let token = n.a.conn(h).unwrap().local_token().unwrap();
    assert!(evs.iter().all(|e| e.token == token));
    let created = &evs[0];
    assert_eq!((created.kind, created.server_side), (Created, false));
    assert_eq!(created.remote, Some(sa("10.0.1.2:5000")));
    let ann = evs.iter().find(|e| e.kind == Announced).unwrap();
    assert_eq!((ann.remote_id, ann.remote.map(|r| r.ip())), (Some(1), Some(ip("10.0.2.2"))));
    let sub = evs.iter().find(|e| e.kind == SubEstablished).unwrap();
    assert_eq!((sub.local.map(|l| l.ip()), sub.local_id, sub.remote_id), (Some(ip("10.0.2.1")), Some(1), Some(1)));
    let line = sub.to_string();
    assert!(line.contains("SUB-ESTABLISHED") && line.contains("saddr4=10.0.2.1") && line.contains("locid=1"), "{line}");
}

#[test]
fn remove_sends_rm_addr_and_the_peer_closes_its_subflow_to_it() {
    use crate::pm::PmEventKind::*;
    let mut n = two_path();
    n.a.listen_pm_events();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let _ = kinds(&mut n.a);
    let sh = n.b.accept().unwrap();
    let token = n.b.conn(sh).unwrap().local_token().unwrap();
    assert_eq!(n.b.pm_remove(token, 9), Err(crate::pm::PmError::NoSuchId), "nothing has id 9");
    assert_eq!(n.b.pm_remove(token ^ 1, 1), Err(crate::pm::PmError::UnknownToken));
    n.b.pm_remove(token, 1).unwrap();
    n.run(Duration::from_millis(200), &mut pass());
    assert_eq!((n.b.counters().mptcp_rm_addr_tx, n.a.counters().mptcp_rm_addr), (1, 1));
    let a = kinds(&mut n.a);
    // The RM_ADDR rides on the subflow that stays; the withdrawn one's FIN
    // may come first.
    assert!(a.contains(&Removed) && a.contains(&SubClosed), "{a:?}");
    assert_eq!(up(n.a.conn(h).unwrap()), 1, "the subflow to the withdrawn address is gone");
    // The connection carries on over the other.
    n.a.send(h, &[5u8; 50_000]).unwrap();
    n.run(Duration::from_millis(500), &mut pass());
    let mut buf = vec![0u8; 65536];
    assert_eq!(n.read_b(sh, &mut buf).len(), 50_000);
}

#[test]
fn set_flags_sends_mp_prio_and_reports_the_priority() {
    use crate::pm::PmEventKind::*;
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    n.a.listen_pm_events();
    let token = n.a.conn(h).unwrap().local_token().unwrap();
    assert_eq!(n.a.pm_set_flags(token, ip("10.0.9.9"), None, true), Err(crate::pm::PmError::NoSuchSubflow));
    assert_eq!(n.a.pm_set_flags(token, ip("10.0.2.1"), None, true), Ok(1));
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(n.b.counters().mptcp_mp_prio_rx, 1);
    let ev: Vec<_> = std::iter::from_fn(|| n.a.poll_pm_event()).map(|(_, e)| e).collect();
    assert!(ev.iter().any(|e| e.kind == SubPriority && e.backup), "{ev:?}");
}

#[test]
fn subflow_create_and_destroy_with_their_refusals() {
    use crate::pm::PmError;
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let token = n.a.conn(h).unwrap().local_token().unwrap();
    let srv = sa("10.0.1.2:5000");
    n.a.add_local_address(ip("10.0.1.1"));
    n.a.add_local_address(ip("10.0.2.1"));
    n.a.add_local_address(ip("10.0.3.1"));
    assert_eq!(n.a.pm_subflow_create(token, ip("10.0.7.1"), 7, srv, false), Err(PmError::AddrNotLocal));
    assert_eq!(n.a.pm_subflow_create(token, ip("10.0.3.1"), 3, sa("[fd00::2]:5000"), false), Err(PmError::BadAddress));
    // The limit is 2 additional subflows, one is up: one more.
    n.a.pm_subflow_create(token, ip("10.0.3.1"), 3, srv, false).unwrap();
    assert_eq!(n.a.pm_subflow_create(token, ip("10.0.3.1"), 3, srv, false), Err(PmError::LimitReached));
    n.run(Duration::from_millis(100), &mut pass());
    let c = n.a.conn(h).unwrap();
    assert_eq!(up(c), 3);
    let sf = c.subflows().map(|(_, s)| s).find(|s| s.local().ip() == ip("10.0.3.1")).unwrap();
    let (l, r) = (sf.local(), sf.remote());
    assert_eq!(n.b.counters().mptcp_mp_join_ack_rx, 2);
    assert_eq!(n.a.pm_subflow_destroy(token, sa("10.0.3.1:1"), r), Err(PmError::NoSuchSubflow));
    n.a.pm_subflow_destroy(token, l, r).unwrap();
    n.run(Duration::from_millis(500), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 2);
}

#[test]
fn an_announcement_with_a_port_is_joined_at_that_port() {
    let mut n = two_path_with(|s| s.mptcp.pm.endpoints.clear());
    n.b.listen(sa("10.0.2.2:7000"));
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    let token = n.b.conn(sh).unwrap().local_token().unwrap();
    n.b.pm_announce(token, 1, ip("10.0.2.2"), Some(7000)).unwrap();
    assert_eq!(n.b.pm_announce(token, 1, ip("10.0.3.2"), None), Err(crate::pm::PmError::IdInUse));
    assert_eq!(n.b.pm_announce(token, 0, ip("10.0.3.2"), None), Err(crate::pm::PmError::IdInUse));
    n.run(Duration::from_millis(100), &mut pass());
    let c = n.a.conn(h).unwrap();
    let ports: Vec<u16> = c.subflows().map(|(_, s)| s.remote().port()).collect();
    assert!(ports.contains(&7000), "{ports:?}");
    assert_eq!(n.b.counters().mptcp_mp_join_ack_rx, 1);
}

#[test]
fn endpoint_changes_apply_to_live_connections() {
    let mut n = two_path_with(|s| s.mptcp.pm.endpoints.clear());
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 1);
    // The server gets a `signal` endpoint: the live connection announces it
    // and the client joins it.
    let id =
        n.b.pm_endpoint_add(PmEndpoint {
            id: 0,
            addr: ip("10.0.2.2"),
            flags: EndpointFlags { signal: true, ..Default::default() },
            port: None,
        })
        .unwrap();
    assert_eq!(id, 1);
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 2);
    // Backup now: MP_PRIO on its subflows.
    n.b.pm_endpoint_change(1, EndpointFlags { backup: true, ..Default::default() }).unwrap();
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(n.a.counters().mptcp_mp_prio_rx, 1);
    // Deleted: RM_ADDR, and the client's subflow to it closes.
    n.b.pm_endpoint_delete(1).unwrap();
    n.run(Duration::from_millis(300), &mut pass());
    assert_eq!(n.a.counters().mptcp_rm_addr, 1);
    assert_eq!(up(n.a.conn(h).unwrap()), 1);
    assert_eq!(n.b.pm_endpoint_delete(1), Err(crate::pm::PmError::NoSuchId));
}

#[test]
fn remove_of_an_address_announced_by_command_closes_the_peer_s_subflow_to_it() {
    let mut n = two_path_with(|s| s.mptcp.pm.endpoints.clear());
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    let token = n.b.conn(sh).unwrap().local_token().unwrap();
    n.b.pm_announce(token, 5, ip("10.0.2.2"), None).unwrap();
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 2);
    // The join's SYN-ACK carried the announcement's id, so the client
    // knows its subflow by it.
    let ids: Vec<(u8, u8)> = n.b.conn(sh).unwrap().info().subflows.iter().map(|s| (s.local_id, s.remote_id)).collect();
    assert!(ids.contains(&(5, 1)), "server (local, remote) ids: {ids:?}");
    n.b.pm_remove(token, 5).unwrap();
    n.run(Duration::from_millis(300), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 1, "the client closed its subflow to the withdrawn id");
    assert_eq!(up(n.b.conn(sh).unwrap()), 1, "and so did the server");
}

#[test]
fn a_subflow_destroyed_gives_its_place_back_to_the_limit() {
    use crate::pm::PmError;
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let token = n.a.conn(h).unwrap().local_token().unwrap();
    let srv = sa("10.0.1.2:5000");
    n.a.pm_subflow_create(token, ip("10.0.3.1"), 3, srv, false).unwrap();
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(n.a.pm_subflow_create(token, ip("10.0.4.1"), 4, srv, false), Err(PmError::LimitReached));
    let sf = n.a.conn(h).unwrap().subflows().map(|(_, s)| s).find(|s| s.local().ip() == ip("10.0.3.1")).unwrap();
    let (l, r) = (sf.local(), sf.remote());
    n.a.pm_subflow_destroy(token, l, r).unwrap();
    // Closing (FIN out) or in TIME_WAIT: it holds no place any more, and a
    // second destroy finds nothing open.
    assert_eq!(n.a.pm_subflow_destroy(token, l, r), Err(PmError::NoSuchSubflow));
    n.run(Duration::from_millis(50), &mut pass());
    n.a.pm_subflow_create(token, ip("10.0.4.1"), 4, srv, false).unwrap();
    // An id that names another address is refused; the initial address is 0.
    assert_eq!(n.a.pm_subflow_create(token, ip("10.0.5.1"), 4, srv, false), Err(PmError::IdInUse));
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 3);
}

#[test]
fn a_retransmitted_announcement_is_not_joined_twice_and_priority_events_come_on_change() {
    use crate::pm::PmEventKind::*;
    let mut n = two_path_with(|s| s.mptcp.add_addr_timeout = Duration::from_millis(300));
    n.a.listen_pm_events();
    // Every ADD_ADDR echo from the client is lost once: the server sends
    // its announcement again.
    let mut echoes_lost = 0;
    let mut lose_echo = |from_a: bool, p: Vec<u8>| {
        let echo = mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::AddAddr { echo: true, .. }));
        if from_a && echo && echoes_lost < 1 {
            echoes_lost += 1;
            return None;
        }
        Some(p)
    };
    let h = n.connect();
    n.run(Duration::from_secs(3), &mut lose_echo);
    assert_eq!(echoes_lost, 1);
    assert!(n.a.counters().mptcp_add_addr >= 2, "announced twice: {}", n.a.counters().mptcp_add_addr);
    assert_eq!(n.b.counters().mptcp_mp_join_syn_rx, 1, "joined once");
    assert_eq!(up(n.a.conn(h).unwrap()), 2);
    let sh = n.b.accept().unwrap();
    let token = n.b.conn(sh).unwrap().local_token().unwrap();
    let _ = kinds(&mut n.a);
    // MP_PRIO twice with the same flag: one sub-priority event.
    n.b.pm_set_flags(token, ip("10.0.2.2"), None, true).unwrap();
    n.run(Duration::from_millis(100), &mut pass());
    let c = n.b.conn_mut(sh).unwrap();
    let i = c.info().subflows.iter().find(|s| s.local.ip() == ip("10.0.2.2")).unwrap().id;
    c.set_backup(i, true);
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(n.a.counters().mptcp_mp_prio_rx, 2);
    assert_eq!(kinds(&mut n.a), [SubPriority]);
}

#[test]
fn deleting_the_endpoint_of_the_initial_address_withdraws_id_0() {
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.1.1"),
        flags: EndpointFlags { subflow: true, ..Default::default() },
        port: None,
    });
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 2,
        addr: ip("10.0.2.1"),
        flags: EndpointFlags { subflow: true, ..Default::default() },
        port: None,
    });
    let mut n = net(c, EndpointConfig::default());
    let h = n.connect();
    n.run_for(Duration::from_millis(3), &mut pass());
    // Data makes the server's DSS prove it has our key: fully established.
    n.a.send(h, &[1u8; 1000]).unwrap();
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 2);
    let sh = n.b.accept().unwrap();
    let mut buf = vec![0u8; 32768];
    assert_eq!(n.read_b(sh, &mut buf).len(), 1000);
    n.a.pm_endpoint_delete(1).unwrap();
    n.run(Duration::from_millis(300), &mut pass());
    assert_eq!(n.b.counters().mptcp_rm_addr, 1);
    let c = n.a.conn(h).unwrap();
    assert_eq!(up(c), 1);
    assert!(c.subflows().all(|(_, s)| s.state() != crate::tcp::State::Established || s.local().ip() == ip("10.0.2.1")));
    // The connection goes on over the other path.
    n.a.send(h, &[3u8; 20_000]).unwrap();
    n.run(Duration::from_millis(300), &mut pass());
    assert_eq!(n.read_b(sh, &mut buf).len(), 20_000);
    // Deleting the last path's endpoint keeps the path.
    n.a.pm_endpoint_delete(2).unwrap();
    n.run(Duration::from_millis(300), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 1);
}

#[test]
fn a_subflow_reset_by_the_peer_is_opened_again_after_a_backoff_while_its_endpoints_stand() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 2);
    let sh = n.b.accept().unwrap();
    // The server resets its subflow of the announced address (a middlebox
    // or a reboot of that interface would too).
    let reset_join = |n: &mut Net| {
        let c = n.b.conn_mut(sh).unwrap();
        let s = c.subflows.live_mut().find(|s| s.is_open() && s.tcp.local().ip() == ip("10.0.2.2")).unwrap();
        s.tcp.abort();
    };
    reset_join(&mut n);
    n.run(Duration::from_millis(500), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 1, "gone, and not yet back: the first wait is 1 s");
    assert_eq!(n.a.counters().mptun_pm_subflow_reopen, 0);
    n.run(Duration::from_millis(700), &mut pass());
    assert_eq!(n.a.counters().mptun_pm_subflow_reopen, 1);
    assert_eq!(up(n.a.conn(h).unwrap()), 2, "opened again");
    assert_eq!(n.b.counters().mptcp_mp_join_ack_rx, 2);
    // Withdrawn by the peer (RM_ADDR): closed in order, not opened again.
    let token = n.b.conn(sh).unwrap().local_token().unwrap();
    n.b.pm_remove(token, 1).unwrap();
    n.run(Duration::from_secs(5), &mut pass());
    assert_eq!(up(n.a.conn(h).unwrap()), 1);
    assert_eq!(n.a.counters().mptun_pm_subflow_reopen, 1, "an address withdrawn is not joined again");
}

#[test]
fn a_join_that_keeps_failing_is_tried_again_with_a_doubling_wait() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    // The server takes no more subflows and resets the one it has: each
    // re-open is refused at its SYN, and the wait doubles (1, 2, 4, 8 s).
    n.b.pm_limits_set(Some(0), None);
    let c = n.b.conn_mut(sh).unwrap();
    let s = c.subflows.live_mut().find(|s| s.is_open() && s.tcp.local().ip() == ip("10.0.2.2")).unwrap();
    s.tcp.abort();
    // Its resets say the refusal is transient (MP_TCPRST's T flag), so the
    // client tries again.
    let mut transient = |from_a: bool, p: Vec<u8>| {
        let rst = parse_tcp_packet(&p).unwrap().tcp.flags.rst();
        if !from_a && rst {
            return Some(super::rewrite(&p, &mut |o| {
                if let MptcpOption::MpTcpRst { flags, .. } = o {
                    *flags |= 1;
                }
            }));
        }
        Some(p)
    };
    n.run(Duration::from_millis(7_500), &mut transient);
    assert_eq!(n.a.counters().mptun_pm_subflow_reopen, 3, "at 1, 3 and 7 s");
    assert_eq!(n.b.counters().mptcp_mp_join_rejected, 3);
    n.run(Duration::from_secs(6), &mut transient);
    assert_eq!(n.a.counters().mptun_pm_subflow_reopen, 3, "the next one waits 8 s");
    // The server takes subflows again: the fourth re-open (at 15 s) holds.
    n.b.pm_limits_set(Some(2), None);
    n.run(Duration::from_secs(3), &mut transient);
    assert_eq!(n.a.counters().mptun_pm_subflow_reopen, 4);
    assert_eq!(up(n.a.conn(h).unwrap()), 2);
}

#[test]
fn a_port_endpoint_is_announced_with_its_port_and_joined_there() {
    let mut n = two_path_with(|s| s.mptcp.pm.endpoints.clear());
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let _sh = n.b.accept().unwrap();
    let port_ep = |port, flags| PmEndpoint { id: 0, addr: ip("10.0.2.2"), flags, port };
    let signal = EndpointFlags { signal: true, ..Default::default() };
    let subflow = EndpointFlags { subflow: true, ..Default::default() };
    assert_eq!(n.b.pm_endpoint_add(port_ep(Some(7100), subflow)), Err(crate::pm::PmError::BadAddress), "signal only");
    assert_eq!(n.b.pm_endpoint_add(port_ep(Some(0), signal)), Err(crate::pm::PmError::BadAddress));
    let id = n.b.pm_endpoint_add(port_ep(Some(7100), signal)).unwrap();
    // The same address without a port is another endpoint.
    assert!(n.b.pm_endpoint_add(port_ep(None, EndpointFlags::default())).is_ok());
    assert_eq!(n.b.pm_endpoint_add(port_ep(Some(7100), signal)), Err(crate::pm::PmError::IdInUse));
    n.run(Duration::from_millis(100), &mut pass());
    let c = n.a.conn(h).unwrap();
    assert!(c.subflows().any(|(_, s)| s.remote() == sa("10.0.2.2:7100")), "joined at the port");
    assert_eq!(up(c), 2);
    // Deleted: RM_ADDR of its id, and the subflow at its port closes.
    n.b.pm_endpoint_delete(id).unwrap();
    n.run(Duration::from_millis(300), &mut pass());
    assert_eq!(n.a.counters().mptcp_rm_addr, 1);
    assert_eq!(up(n.a.conn(h).unwrap()), 1);
}

#[test]
fn a_join_refused_for_good_is_not_tried_again() {
    let mut n = two_path();
    n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    n.b.pm_limits_set(Some(0), None);
    let c = n.b.conn_mut(sh).unwrap();
    let s = c.subflows.live_mut().find(|s| s.is_open() && s.tcp.local().ip() == ip("10.0.2.2")).unwrap();
    s.tcp.abort();
    // The refusal's MP_TCPRST has no T flag: one re-open, then none (RFC 8684 3.6).
    n.run(Duration::from_secs(20), &mut pass());
    assert_eq!(n.a.counters().mptun_pm_subflow_reopen, 1);
    assert_eq!(n.b.counters().mptcp_mp_join_rejected, 1);
}
