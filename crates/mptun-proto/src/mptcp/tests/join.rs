//! MP_JOIN: the handshake of an additional subflow, its HMACs and tokens,
//! a join to an unknown token, and a join over IPv6.

use super::*;

#[test]
fn handshake_join_and_tokens() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let c = n.a.conn(h).unwrap();
    assert_eq!(c.mode(), Mode::Mptcp);
    let info = c.info();
    assert!(info.fully_established);
    assert_eq!(info.subflows.len(), 2, "{info:?}");
    let sh = n.b.accept().unwrap();
    let s = n.b.conn(sh).unwrap();
    assert_eq!(s.remote_token(), c.local_token());
    assert_eq!(c.remote_token(), s.local_token());
    let cc = n.b.counters();
    assert_eq!(cc.mptcp_mp_join_ack_rx, 1);
    assert_eq!(cc.mptcp_echo_add, 1);
    assert_eq!(n.a.counters().mptcp_add_addr, 1);
}

#[test]
fn join_with_bad_synack_hmac_is_refused() {
    let mut n = two_path();
    n.connect();
    let mut tampered = 0;
    let mut rsts_with_reason = 0;
    n.run(Duration::from_millis(200), &mut |from_a, p| {
        if from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::MpTcpRst { reason: MPTCP_RST_EMPTCP, .. }))
        {
            rsts_with_reason += 1;
        }
        if !from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::MpJoinSynAck { .. })) {
            tampered += 1;
            return Some(rewrite(&p, &mut |m| {
                if let MptcpOption::MpJoinSynAck { hmac, .. } = m {
                    *hmac ^= 1;
                }
            }));
        }
        Some(p)
    });
    assert!(tampered >= 1);
    assert_eq!(n.a.counters().mptcp_mp_join_synack_hmac_failure, tampered);
    assert_eq!(rsts_with_reason, tampered, "each refused join is reset with MP_TCPRST");
    assert!(n.a.counters().tcp_out_rsts >= 1);
    let h = n.a.handles().next().unwrap();
    let live: Vec<_> = n.a.conn(h).unwrap().subflows().filter(|(_, s)| !s.is_closed()).collect();
    assert_eq!(live.len(), 1, "the refused join must not survive");
}

#[test]
fn join_with_bad_ack_hmac_is_refused() {
    let mut n = two_path();
    n.connect();
    n.run(Duration::from_millis(300), &mut |from_a, p| {
        if from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::MpJoinAck { .. })) {
            return Some(rewrite(&p, &mut |m| {
                if let MptcpOption::MpJoinAck { hmac } = m {
                    hmac[0] ^= 0x80;
                }
            }));
        }
        Some(p)
    });
    assert!(n.b.counters().mptcp_mp_join_ack_hmac_failure >= 1);
    assert_eq!(n.b.counters().mptcp_mp_join_ack_rx, 0);
    let sh = n.b.accept().unwrap();
    let live = n.b.conn(sh).unwrap().subflows().filter(|(_, s)| !s.is_closed()).count();
    assert_eq!(live, 1);
}

#[test]
fn join_for_unknown_token_gets_rst() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let syn = {
        let mut opts = mptun_wire::TcpOptions::new();
        opts.push(&TcpOption::Mss(1460)).unwrap();
        opts.push_aligned(&TcpOption::Mptcp(MptcpOption::MpJoinSyn {
            backup: false,
            addr_id: 3,
            token: 0xdead_beef,
            nonce: 7,
        }))
        .unwrap();
        let mut hdr = TcpHeader::new(40000, 5000, 1234, 0, mptun_wire::TcpFlags::SYN, 65535);
        hdr.options = opts;
        let mut out = vec![0u8; 200];
        let len = emit_tcp_packet(ip("10.0.2.1"), ip("10.0.1.2"), 64, &hdr, &[], &mut out).unwrap();
        out.truncate(len);
        out
    };
    n.b.handle_packet(Instant::ZERO, &syn);
    assert_eq!(n.b.counters().mptcp_mp_join_no_token_found, 1);
    let mut buf = vec![0u8; 1600];
    let t = n.b.poll_transmit(Instant::ZERO, &mut buf).expect("a RST");
    let rst = parse_tcp_packet(&buf[..t.len]).unwrap();
    assert!(rst.tcp.flags.rst());
    assert_eq!(rst.tcp.ack, 1235);
    assert!(mptcp_opts(&buf[..t.len]).contains(&MptcpOption::MpTcpRst { flags: 0, reason: MPTCP_RST_EMPTCP }));
    assert!(n.b.handles().next().is_none());
}

#[test]
fn mptcp_over_ipv6_with_a_join() {
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("fd00:0:0:2::1"),
        flags: EndpointFlags::default(),
        port: None,
    });
    c.mptcp.pm.max_add_addr_accepted = 2;
    let mut s = EndpointConfig::default();
    s.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("fd00:0:0:2::2"),
        flags: EndpointFlags { signal: true, ..Default::default() },
        port: None,
    });
    let mut b = Endpoint::new(s, [2; 32]);
    b.listen(sa("[fd00:0:0:1::2]:5000"));
    let mut n = Net::new(Endpoint::new(c, [1; 32]), b, Instant::ZERO);
    let h = n.a.connect(n.now, sa("[fd00:0:0:1::1]:0"), sa("[fd00:0:0:1::2]:5000")).expect("connect");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 239) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut sh = None;
    for _ in 0..200 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut pass());
        sh = sh.or_else(|| n.b.accept());
        if let Some(sh) = sh {
            got.extend(n.read_b(sh, &mut buf));
        }
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
    let info = n.a.conn(h).unwrap().info();
    assert_eq!(info.mode, Mode::Mptcp);
    assert_eq!(info.subflows.len(), 2, "the announced IPv6 address is joined");
    assert!(info.subflows.iter().all(|s| s.local.is_ipv6()));
}
