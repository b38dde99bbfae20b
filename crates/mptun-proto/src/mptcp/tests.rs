//! MPTCP connection tests: two endpoints back to back through the real codec,
//! with a hand on every packet in between (to drop or tamper with it).

use super::*;
use crate::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use crate::pm::{EndpointFlags, PmEndpoint};
use crate::test_util::{pass, Pair};
use mptun_wire::{emit_tcp_packet, parse_tcp_packet, TcpOption};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A client and a server endpoint on the shared harness.
type Net = Pair<Endpoint>;

fn net(client: EndpointConfig, server: EndpointConfig) -> Net {
    let mut b = Endpoint::new(server, [2; 32]);
    b.listen("10.0.1.2:5000".parse().unwrap());
    Net::new(Endpoint::new(client, [1; 32]), b, Instant::ZERO)
}

/// Two addresses each (paths 1 and 2); the server announces its second.
fn two_path() -> Net {
    two_path_with(|_| {})
}

/// [`two_path`] with the server's configuration changed by `f`.
fn two_path_with(f: impl FnOnce(&mut EndpointConfig)) -> Net {
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint { id: 1, addr: ip("10.0.2.1"), flags: EndpointFlags::default(), port: None });
    c.mptcp.pm.max_add_addr_accepted = 2;
    let mut s = EndpointConfig::default();
    s.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.2"),
        flags: EndpointFlags { signal: true, ..Default::default() },
        port: None,
    });
    f(&mut s);
    net(c, s)
}

trait NetExt {
    fn read_b(&mut self, sh: ConnectionHandle, buf: &mut [u8]) -> Vec<u8>;
    fn connect(&mut self) -> ConnectionHandle;
}

impl NetExt for Net {
    /// Everything connection `sh` of B has ready to read.
    fn read_b(&mut self, sh: ConnectionHandle, buf: &mut [u8]) -> Vec<u8> {
        let mut got = Vec::new();
        loop {
            let k = self.b.recv(sh, self.now, buf).unwrap_or(0);
            if k == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..k]);
        }
    }

    fn connect(&mut self) -> ConnectionHandle {
        self.a.connect(self.now, "10.0.1.1:0".parse().unwrap(), "10.0.1.2:5000".parse().unwrap()).expect("connect")
    }
}

/// Rewrites the MPTCP options of a packet with `f`, re-emitting it.
fn rewrite(p: &[u8], f: &mut dyn FnMut(&mut MptcpOption)) -> Vec<u8> {
    let pkt = parse_tcp_packet(p).unwrap();
    let mut hdr = pkt.tcp.clone();
    let mut opts = mptun_wire::TcpOptions::new();
    for o in pkt.tcp.options.iter() {
        let mut o = o.unwrap();
        if let TcpOption::Mptcp(m) = &mut o {
            f(m);
        }
        opts.push(&o).unwrap();
    }
    hdr.options = opts;
    let mut out = vec![0u8; 1600];
    let n = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &hdr, pkt.payload, &mut out).unwrap();
    out.truncate(n);
    out
}

fn mptcp_opts(p: &[u8]) -> Vec<MptcpOption> {
    parse_tcp_packet(p).unwrap().tcp.options.summary().mptcp.into_iter().collect()
}

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
fn data_fin_closes_both_directions() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let reply = b"thanks, bye";
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..200 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        if sent == data.len() {
            n.a.close(h);
        }
        n.run(Duration::from_millis(20), &mut pass());
        got.extend(n.read_b(sh, &mut buf));
        if n.b.recv_finished(sh) {
            break;
        }
    }
    assert_eq!(got, data);
    assert!(n.b.recv_finished(sh));
    assert!(!n.a.recv_finished(h));
    // The server answers and closes its direction.
    assert_eq!(n.b.send(sh, reply).unwrap_or(0), reply.len());
    n.b.close(sh);
    n.run(Duration::from_millis(500), &mut pass());
    let k = n.a.recv(h, n.now, &mut buf).unwrap_or(0);
    assert_eq!(&buf[..k], reply);
    assert!(n.a.recv_finished(h));
    // Both DATA_FINs acknowledged: the subflows close (FIN), then TIME_WAIT.
    n.run(Duration::from_secs(70), &mut pass());
    assert!(n.a.is_closed(h) && n.b.is_closed(sh));
    let evs: Vec<_> = std::iter::from_fn(|| n.a.poll_event()).filter(|(c, _)| *c == h).map(|(_, e)| e).collect();
    assert!(evs.contains(&Event::PeerFin), "{evs:?}");
}

#[test]
fn thirty_two_bit_data_acks_are_expanded() {
    assert_eq!(expand32(0x0000_0010, 0x1_ffff_fff0), 0x2_0000_0010);
    assert_eq!(expand32(0xffff_fff0, 0x2_0000_0010), 0x1_ffff_fff0);
    assert_eq!(expand32(0x1234, 0x5_0000_1000), 0x5_0000_1234);
    let mut n = net(EndpointConfig::default(), {
        let mut s = EndpointConfig::default();
        s.mptcp.enabled = true;
        s
    });
    let h = n.connect();
    n.run(Duration::from_millis(50), &mut pass());
    n.a.send(h, &[7u8; 3000]).unwrap_or(0);
    // Rewrite the server's DATA_ACKs to their 32-bit form.
    n.run(Duration::from_millis(200), &mut |from_a, p| {
        if from_a {
            return Some(p);
        }
        Some(rewrite(&p, &mut |m| {
            if let MptcpOption::Dss { data_ack: Some(a), .. } = m {
                a.ack &= 0xffff_ffff;
                a.ack64 = false;
            }
        }))
    });
    let c = n.a.conn(h).unwrap();
    assert_eq!(c.info().bytes_acked, 3000);
}

#[test]
fn duplicate_and_out_of_order_data_is_counted_at_the_connection_level() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    let data = vec![3u8; 400_000];
    let mut sent = 0;
    let mut got = 0;
    let mut k = 0u32;
    let mut buf = vec![0u8; 65536];
    for _ in 0..300 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        // Drop every 50th data packet on path 1: the receiver sees holes at
        // the data level while path 2 keeps delivering.
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            if from_a && p.len() > 200 && p[19] == 2 {
                k += 1;
                if k.is_multiple_of(50) {
                    return None;
                }
            }
            Some(p)
        });
        loop {
            let r = n.b.recv(sh, n.now, &mut buf).unwrap_or(0);
            if r == 0 {
                break;
            }
            got += r;
        }
        if got == data.len() {
            break;
        }
    }
    assert_eq!(got, data.len());
    let c = n.b.counters();
    assert!(c.mptcp_ofo_queue > 0, "{c:?}");
}

#[test]
fn dss_checksum_matches_the_rfc_construction() {
    // Pseudo-header and payload summed by hand: ones' complement of the sum.
    let payload = [0x01u8, 0x02, 0x03];
    let c = dss_checksum(0x0102_0304_0506_0708, 0x0a0b_0c0d, 3, &payload);
    let words: [u32; 10] = [0x0102, 0x0304, 0x0506, 0x0708, 0x0a0b, 0x0c0d, 0x0003, 0x0000, 0x0102, 0x0300];
    let mut acc: u32 = words.iter().sum();
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    assert_eq!(c, !(acc as u16));
}

#[test]
fn checksums_negotiated_by_either_side_and_corruption_caught() {
    let mut n = two_path();
    n.a = {
        let mut c = EndpointConfig::default();
        c.mptcp.checksum = true;
        c.mptcp.pm.endpoints.push(PmEndpoint {
            id: 1,
            addr: ip("10.0.2.1"),
            flags: EndpointFlags::default(),
            port: None,
        });
        c.mptcp.pm.max_add_addr_accepted = 2;
        Endpoint::new(c, [1; 32])
    };
    let h = n.connect();
    let mut server_a_flag = None;
    n.run(Duration::from_millis(100), &mut |from_a, p| {
        let syn_ack = parse_tcp_packet(&p).unwrap().tcp.flags.syn() && !from_a;
        for o in mptcp_opts(&p) {
            if let (true, MptcpOption::MpCapable { flags, .. }) = (syn_ack, o) {
                server_a_flag.get_or_insert(flags & mptun_wire::mptcp::cap_flags::CHECKSUM != 0);
            }
        }
        Some(p)
    });
    let sh = n.b.accept().unwrap();
    assert_eq!(server_a_flag, Some(true), "the server must agree to the client's A flag");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut corrupted = 0;
    let mut rst_opts = Vec::new();
    for _ in 0..300 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            if !from_a && parse_tcp_packet(&p).unwrap().tcp.flags.rst() {
                rst_opts.extend(mptcp_opts(&p));
            }
            // A middlebox rewrites one payload byte of one data segment on path 1
            // and fixes the TCP checksum: only the DSS checksum can tell.
            if from_a && corrupted == 0 && p.len() > 1000 && p[19] == 2 {
                let pkt = parse_tcp_packet(&p).unwrap();
                let mut payload = pkt.payload.to_vec();
                payload[100] ^= 0xff;
                let mut out = vec![0u8; 1600];
                let k = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &pkt.tcp, &payload, &mut out).unwrap();
                out.truncate(k);
                corrupted += 1;
                return Some(out);
            }
            Some(p)
        });
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(corrupted, 1);
    assert_eq!(n.b.counters().mptcp_data_csum_err, 1);
    assert_eq!(got, data, "the corrupted mapping must not be delivered; it is re-sent on the other path");
    // With another subflow the failed one is reset with MP_TCPRST
    // "middlebox interference" and MP_FAIL (RFC 8684 3.7).
    assert!(
        rst_opts.contains(&MptcpOption::MpTcpRst { flags: 0, reason: MPTCP_RST_EMIDDLEBOX }),
        "{rst_opts:?} {:?}",
        n.b.counters()
    );
    assert!(rst_opts.iter().any(|o| matches!(o, MptcpOption::MpFail { .. })), "{rst_opts:?}");
    assert_eq!(n.b.counters().mptcp_mp_fail_tx, 1);
}

#[test]
fn abort_sends_mp_fastclose_and_the_peer_drops_the_whole_connection() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    assert_eq!(n.b.conn(sh).unwrap().subflows().count(), 2);
    n.a.abort(h);
    let mut fastcloses = 0;
    n.run(Duration::from_millis(50), &mut |from_a, p| {
        if from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::MpFastclose { .. })) {
            fastcloses += 1;
        }
        Some(p)
    });
    assert!(fastcloses >= 1);
    assert_eq!(n.b.counters().mptcp_mp_fastclose_rx, 1);
    assert!(n.b.is_closed(sh));
    let evs: Vec<_> = std::iter::from_fn(|| n.b.poll_event()).filter(|(c, _)| *c == sh).map(|(_, e)| e).collect();
    assert!(evs.contains(&Event::Reset), "{evs:?}");
}

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

/// Removes every MPTCP option from a packet (a middlebox that strips them).
fn strip_mptcp(p: &[u8]) -> Vec<u8> {
    let pkt = parse_tcp_packet(p).unwrap();
    let mut hdr = pkt.tcp.clone();
    let mut opts = mptun_wire::TcpOptions::new();
    for o in pkt.tcp.options.iter() {
        let o = o.unwrap();
        if !matches!(o, TcpOption::Mptcp(_)) {
            opts.push(&o).unwrap();
        }
    }
    opts.pad_to_word();
    hdr.options = opts;
    let mut out = vec![0u8; 1600];
    let n = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &hdr, pkt.payload, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn options_stripped_mid_stream_fall_back_to_an_infinite_mapping() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    n.run(Duration::from_millis(50), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..400_000u32).map(|i| (i % 241) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut step = 0;
    let mut reasons = (None, None);
    for _ in 0..400 {
        step += 1;
        // A slow writer, so the options disappear in the middle of the stream.
        let upto = (sent + 8192).min(data.len());
        sent += n.a.send(h, &data[sent..upto]).unwrap_or(0);
        if sent == data.len() {
            n.a.close(h);
        }
        // After 100 ms of MPTCP, a middlebox starts stripping the options both ways.
        let strip = step > 5;
        n.run(Duration::from_millis(20), &mut |_, p| Some(if strip { strip_mptcp(&p) } else { p }));
        got.extend(n.read_b(sh, &mut buf));
        reasons.0 = reasons.0.or(n.a.conn(h).and_then(|c| c.fallback_reason()));
        reasons.1 = reasons.1.or(n.b.conn(sh).and_then(|c| c.fallback_reason()));
        if n.b.recv_finished(sh) {
            break;
        }
    }
    let stripped = Some(FallbackReason::StrippedOptions);
    assert_eq!(reasons, (stripped, stripped), "both ends took the options as stripped");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "stream corrupted across the fallback");
    assert!(n.b.recv_finished(sh), "the FIN must end the stream after the fallback");
    assert_eq!(n.a.counters().mptcp_dss_fallback, 1);
    assert_eq!(n.b.counters().mptcp_dss_fallback, 1);
}

#[test]
fn mptcp_over_ipv6_with_a_join() {
    let v6 = |s: &str| -> IpAddr { s.parse().unwrap() };
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: v6("fd00:0:0:2::1"),
        flags: EndpointFlags::default(),
        port: None,
    });
    c.mptcp.pm.max_add_addr_accepted = 2;
    let mut s = EndpointConfig::default();
    s.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: v6("fd00:0:0:2::2"),
        flags: EndpointFlags { signal: true, ..Default::default() },
        port: None,
    });
    let mut b = Endpoint::new(s, [2; 32]);
    b.listen("[fd00:0:0:1::2]:5000".parse().unwrap());
    let mut n = Net::new(Endpoint::new(c, [1; 32]), b, Instant::ZERO);
    let h =
        n.a.connect(n.now, "[fd00:0:0:1::1]:0".parse().unwrap(), "[fd00:0:0:1::2]:5000".parse().unwrap())
            .expect("connect");
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

#[test]
fn a_mapping_outside_the_window_resets_the_subflow_and_the_data_arrives_anyway() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 233) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut forged = 0;
    for _ in 0..300 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            // A hostile (or broken) rewrite moves one mapping on path 2 a gigabyte ahead.
            if from_a && forged == 0 && p.len() > 1000 && p[14] == 2 {
                forged += 1;
                return Some(rewrite(&p, &mut |m| {
                    if let MptcpOption::Dss { mapping: Some(map), .. } = m {
                        map.dsn += 1 << 30;
                    }
                }));
            }
            Some(p)
        });
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(forged, 1);
    // The forged segment's data lies past the window: dropped and counted
    // (Linux MPTcpExtNoDSSInWindow); the true mapping of the same subflow
    // bytes then contradicts the forged one, which resets the subflow.
    let c = n.b.counters();
    assert_eq!(c.mptcp_no_dss_in_window, 1, "{}", c.to_nstat());
    assert!(c.mptcp_dss_not_matching >= 1, "{}", c.to_nstat());
    assert_eq!(got, data, "the reset subflow's data is reinjected on the other path");
}

/// How a stream ended for the application at B.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Every byte, then the end of stream.
    Whole,
    /// An explicit error (reset) after a prefix of the stream.
    Error,
}

/// Where in A's stream the stripping began: the first stripped packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum StripPoint {
    /// A SYN, SYN-ACK or third ACK.
    Handshake,
    /// A packet without data (either way) after the handshake.
    PureAck,
    /// A data segment of A that starts a DSS mapping.
    MappingStart,
    /// A data segment of A strictly inside a mapping (a partial mapping is
    /// in place at the receiver when the options stop).
    MappingInside,
    /// A data segment of A that ends a mapping it did not start.
    MappingEnd,
}

/// Classifies the first stripped packet by its options before stripping.
fn strip_point(p: &[u8], from_a: bool, iss: u32) -> StripPoint {
    let pkt = parse_tcp_packet(p).unwrap();
    if pkt.tcp.flags.syn() || mptcp_opts(p).iter().any(|o| matches!(o, MptcpOption::MpCapable { .. })) {
        return StripPoint::Handshake;
    }
    if !from_a || pkt.payload.is_empty() {
        return StripPoint::PureAck;
    }
    let rel = pkt.tcp.seq.wrapping_sub(iss);
    let end = rel.wrapping_add(pkt.payload.len() as u32);
    let map = mptcp_opts(p).into_iter().find_map(|o| match o {
        MptcpOption::Dss { mapping: Some(m), .. } => Some(m),
        _ => None,
    });
    match map {
        Some(m) if m.ssn == rel => StripPoint::MappingStart,
        Some(m) if m.ssn.wrapping_add(u32::from(m.len)) == end => StripPoint::MappingEnd,
        _ => StripPoint::MappingInside,
    }
}

/// A 120 kB transfer A → B (8 KiB writes, so several mappings) where a
/// middlebox strips every MPTCP option from the `strip_from`-th packet on
/// (counting both directions), optionally dropping the packet just after
/// that point (`loss`) or holding one back behind the next (`reorder`).
/// The application at B gets the whole stream and its end, or an explicit
/// error: never a short stream that looks complete, never a silent stall.
/// Also returns where the stripping began.
fn fallback_case(strip_from: usize, loss: bool, reorder: bool) -> (Outcome, StripPoint) {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    let (mut iss, mut point) = (0u32, None);
    let data: Vec<u8> = (0..120_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let (mut sent, mut got, mut buf) = (0, Vec::new(), vec![0u8; 65536]);
    let (mut seen, mut held): (usize, Option<Vec<u8>>) = (0, None);
    let mut sh = None;
    let mut error = false;
    for _ in 0..1500 {
        let upto = (sent + 8192).min(data.len());
        sent += n.a.send(h, &data[sent..upto]).unwrap_or(0);
        if sent == data.len() {
            n.a.close(h);
        }
        n.run(Duration::from_millis(5), &mut |from_a, p| {
            let k = seen;
            seen += 1;
            if k == 0 {
                iss = parse_tcp_packet(&p).unwrap().tcp.seq;
            }
            if k == strip_from {
                point = Some(strip_point(&p, from_a, iss));
            }
            let p = if k >= strip_from { strip_mptcp(&p) } else { p };
            if loss && k == strip_from + 1 {
                return None;
            }
            if reorder && k == strip_from && held.is_none() {
                held = Some(p);
                return None;
            }
            if let Some(q) = held.take() {
                // Released behind the packet that followed it.
                n_push_later(q);
            }
            Some(p)
        });
        for q in take_later() {
            // The held packet arrives last, at the next step.
            n.b.handle_packet(n.now, &q);
            n.a.handle_packet(n.now, &q);
        }
        sh = sh.or_else(|| n.b.accept());
        while let Some((c, ev)) = n.b.poll_event() {
            if Some(c) == sh && matches!(ev, crate::tcp::Event::Reset | crate::tcp::Event::TimedOut) {
                error = true;
            }
        }
        if let Some(sh) = sh {
            got.extend(n.read_b(sh, &mut buf));
            assert!(data.starts_with(&got), "strip at {strip_from}: corrupted stream");
            if error {
                return (Outcome::Error, point.expect("stripping began"));
            }
            if n.b.recv_finished(sh) {
                assert_eq!(got.len(), data.len(), "strip at {strip_from}: the stream ended short");
                return (Outcome::Whole, point.expect("stripping began"));
            }
        }
    }
    panic!(
        "strip at {strip_from} (loss {loss}, reorder {reorder}): stalled with {} of {} bytes",
        got.len(),
        data.len()
    );
}

thread_local! {
    static LATER: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}
fn n_push_later(p: Vec<u8>) {
    LATER.with(|l| l.borrow_mut().push(p));
}
fn take_later() -> Vec<Vec<u8>> {
    LATER.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

#[test]
fn fallback_at_every_point_delivers_every_byte_or_fails_loudly() {
    let mut points = std::collections::HashMap::new();
    for strip_from in (0..2).chain(3..70) {
        for (loss, reorder) in [(false, false), (true, false), (false, true)] {
            let (o, at) = fallback_case(strip_from, loss, reorder);
            *points.entry(at).or_insert(0) += 1;
            // With one subflow and every byte still held by TCP, a fallback
            // at any point is transparent: the whole stream, then its end
            // (fallback_case has already checked every byte read).
            assert_eq!(o, Outcome::Whole, "strip at {strip_from} ({at:?}), loss {loss}, reorder {reorder}");
        }
    }
    // The sweep covers the handshake, pure ACKs, and each position in a
    // mapping: before (at its start), inside and at its end.
    for at in [
        StripPoint::Handshake,
        StripPoint::PureAck,
        StripPoint::MappingStart,
        StripPoint::MappingInside,
        StripPoint::MappingEnd,
    ] {
        assert!(points.get(&at).copied().unwrap_or(0) > 0, "no case starts at {at:?}: {points:?}");
    }
}

/// Options stripped from the third ACK on: the server falls back when the
/// third ACK has no MP_CAPABLE (Linux MPCapableFallbackACK).
#[test]
fn fallback_when_the_third_ack_is_stripped() {
    assert_eq!(fallback_case(2, false, false), (Outcome::Whole, StripPoint::Handshake));
}

mod checksum;
mod conn;
mod one_sided_fallback;
mod pm;

#[test]
fn expand32_picks_the_closest_value_modulo_2_64() {
    use super::data_rx::expand32;
    // Ordinary: the same 2^32 block, the next, the previous.
    assert_eq!(expand32(5, 0x1_0000_0003), 0x1_0000_0005);
    assert_eq!(expand32(2, 0x1_ffff_fff0), 0x2_0000_0002);
    assert_eq!(expand32(0xffff_fff0, 0x2_0000_0002), 0x1_ffff_fff0);
    // Across the 2^64 wrap: 5 is 15 ahead of 2^64 - 10, not 2^32 behind it.
    assert_eq!(expand32(5, u64::MAX - 9), 5);
    assert_eq!(expand32(0xffff_fff0, 3), u64::MAX - 15);
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

/// A mapping ends on a wire-segment boundary, as Linux sizes an skb (one
/// mapping) to a multiple of the MSS: a 65,535-byte mapping would end every
/// 64 KiB super-segment in a short segment, so would a mapping cut to the
/// send-buffer room an ACK frees, or one sized for segments without the
/// DATA_ACK that then carries it (8 bytes less payload each).
#[test]
fn mappings_end_on_segment_boundaries() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    // (payload length, with a DATA_ACK) of every data segment A sends, by
    // subflow (source port).
    type Seg = (usize, bool);
    let mut segs: std::collections::HashMap<u16, Vec<Seg>> = Default::default();
    let mut tap = |from_a: bool, p: Vec<u8>| {
        if from_a {
            let pkt = parse_tcp_packet(&p).unwrap();
            if !pkt.payload.is_empty() {
                let dss = pkt.tcp.options.summary().mptcp.into_iter().find_map(|o| match o {
                    MptcpOption::Dss { mapping: Some(_), data_ack, .. } => Some(data_ack.is_some()),
                    _ => None,
                });
                let ack = dss.expect("every data segment carries its mapping");
                segs.entry(pkt.tcp.src_port).or_default().push((pkt.payload.len(), ack));
            }
        }
        Some(p)
    };
    let (mut sent, mut got) = (0, Vec::new());
    let mut buf = vec![0u8; 65536];
    for _ in 0..2000 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(2), &mut tap);
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
    assert_eq!(segs.len(), 2, "both subflows carried data");
    let (mut runts, mut total) = (0, 0);
    for (port, v) in &segs {
        // Full segments with and without the DATA_ACK.
        let full = |ack: bool| v.iter().filter(|s| s.1 == ack).map(|s| s.0).max().unwrap_or(0);
        assert!(full(false) > full(true), "port {port}: the DATA_ACK takes payload: {} {}", full(false), full(true));
        runts += v.iter().filter(|s| s.0 < full(s.1)).count();
        total += v.len();
    }
    // Application writes land at any byte, as the freed room allows: the
    // data waiting when a subflow's last mapping went out may end short, but
    // not one segment in 45 (65,535-byte mappings) nor one per ACK.
    assert!(runts * 100 <= total, "{runts} short segments of {total}");
}
