//! Backup subflows: MP_PRIO on a live subflow, and the backup flag of an
//! endpoint on the subflows it creates.

use super::*;

#[test]
fn mp_prio_marks_the_subflow_backup_on_both_ends() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    let joined = n.a.conn(h).unwrap().info().subflows.iter().find(|s| s.local.ip() == ip("10.0.2.1")).unwrap().id;
    assert!(n.a.conn_mut(h).unwrap().set_backup(joined, true));
    n.run(Duration::from_millis(50), &mut pass());
    assert_eq!(n.b.counters().mptcp_mp_prio_rx, 1);
    let srv = n.b.conn(sh).unwrap().info();
    let s = srv.subflows.iter().find(|s| s.remote.ip() == ip("10.0.2.1")).unwrap();
    assert!(s.backup);
    // With an active subflow available, nothing new goes to the backup one.
    let before = srv.subflows.iter().find(|s| s.remote.ip() == ip("10.0.2.1")).unwrap().tcp.bytes_received;
    let mut sent = 0;
    let data = vec![9u8; 200_000];
    for _ in 0..50 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut pass());
        let mut buf = vec![0u8; 65536];
        while n.b.recv(sh, n.now, &mut buf).unwrap_or(0) > 0 {}
    }
    let after = n.b.conn(sh).unwrap().info();
    let s = after.subflows.iter().find(|s| s.remote.ip() == ip("10.0.2.1")).unwrap();
    assert_eq!(s.tcp.bytes_received, before);
}

#[test]
fn a_backup_endpoint_makes_its_subflows_backup_at_creation_on_both_ends() {
    let joined = |i: &ConnectionInfo| i.subflows.iter().find(|s| s.local.ip() == ip("10.0.2.1")).map(|s| s.backup);
    let on_b = |i: &ConnectionInfo| i.subflows.iter().find(|s| s.remote.ip() == ip("10.0.2.1")).map(|s| s.backup);
    // The server's announced address is a `signal backup` endpoint: the
    // join to it is backup from its SYN/ACK on, at both ends.
    let mut n = two_path_with(|s| s.mptcp.pm.endpoints[0].flags.backup = true);
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    let both = (joined(&n.a.conn(h).unwrap().info()), on_b(&n.b.conn(sh).unwrap().info()));
    assert_eq!(both, (Some(true), Some(true)));
    assert_eq!(n.a.counters().mptcp_mp_prio_rx + n.b.counters().mptcp_mp_prio_rx, 0, "no MP_PRIO needed");
    // The client's `backup` endpoint, the source of its join to the
    // announced address: its SYN carries B.
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.1"),
        flags: EndpointFlags { backup: true, ..Default::default() },
        port: None,
    });
    c.mptcp.pm.max_add_addr_accepted = 1;
    let mut s = EndpointConfig::default();
    s.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.2"),
        flags: EndpointFlags { signal: true, ..Default::default() },
        port: None,
    });
    let mut n = net(c, s);
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    let both = (joined(&n.a.conn(h).unwrap().info()), on_b(&n.b.conn(sh).unwrap().info()));
    assert_eq!(both, (Some(true), Some(true)));
}
