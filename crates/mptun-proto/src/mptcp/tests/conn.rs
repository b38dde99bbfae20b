//! Connection-level edges: DATA_ACK until the peer is fully established, the
//! MPTCP-level window probe and retransmission timer, a prompt DATA_FIN and
//! bounded retries, release without reset, handshake flags and fallback,
//! joins refused when they may not happen, ADD_ADDR retransmission.

use super::*;
use crate::tcp::BufferSize;
use mptun_wire::{TcpFlags, TcpOptions};

fn hdr(p: &[u8]) -> TcpHeader {
    parse_tcp_packet(p).unwrap().tcp
}

fn payload_len(p: &[u8]) -> usize {
    parse_tcp_packet(p).unwrap().payload.len()
}

/// The packet turned into a bare RST+ACK (same ports, seq and ack).
fn to_rst_ack(p: &[u8]) -> Vec<u8> {
    let pkt = parse_tcp_packet(p).unwrap();
    let mut h = pkt.tcp.clone();
    h.flags = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);
    h.options = TcpOptions::new();
    let mut out = vec![0u8; 1600];
    let n = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &h, &[], &mut out).unwrap();
    out.truncate(n);
    out
}

fn has_data_ack(p: &[u8]) -> bool {
    mptcp_opts(p).iter().any(|o| matches!(o, MptcpOption::Dss { data_ack: Some(_), .. }))
}

fn has_mpc(p: &[u8]) -> bool {
    mptcp_opts(p).iter().any(|o| matches!(o, MptcpOption::MpCapable { .. }))
}

/// The server's first data segments reach the client before the
/// server's pure ACKs (which carry its DATA_ACK). The wire models Linux's
/// `check_fully_established`: a client not yet fully established that
/// receives a segment with neither MP_CAPABLE nor a DATA_ACK falls back.
/// The server's first mapping must therefore carry the DATA_ACK, and every
/// DSS until the server has seen a DATA_ACK from the client.
#[test]
fn data_ack_on_every_dss_until_the_peer_is_fully_established() {
    data_ack_reaches_a_client_not_yet_fully_established(&[100]);
}

/// The same with a request written in two parts: the second part's DSS
/// carries the client's DATA_ACK although the client is not fully
/// established yet (as a Linux client's does), which must not let the
/// server's first response mapping go without one.
#[test]
fn data_ack_on_the_first_mapping_after_a_two_part_request() {
    data_ack_reaches_a_client_not_yet_fully_established(&[100, 3000]);
}

/// The client writes `request` (one write per element, 1.5 ms apart), the
/// server reads it all, acknowledges it and answers with 6000 bytes.
fn data_ack_reaches_a_client_not_yet_fully_established(request: &[usize]) {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    n.run(Duration::from_millis(10), &mut pass());
    let sh = n.b.accept().unwrap();
    let request_len: usize = request.iter().sum();
    assert_eq!(n.a.send(h, &vec![1u8; request[0]]).unwrap_or(0), request[0]);
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut client_established = false;
    let mut model_fallback = false;
    let mut tamper = |from_a: bool, p: Vec<u8>, held: &mut Vec<Vec<u8>>| -> Option<Vec<u8>> {
        if from_a {
            return Some(p);
        }
        let f = hdr(&p).flags;
        if payload_len(&p) == 0 && !f.syn() && !client_established {
            // The server's pure ACKs are reordered behind its data.
            held.push(p);
            return None;
        }
        if !client_established && !has_mpc(&p) && !has_data_ack(&p) {
            model_fallback = true;
        }
        if has_data_ack(&p) {
            client_established = true;
        }
        Some(p)
    };
    // The server's application reads the request at once, then its
    // (delayed) ACK goes out: the response's DATA_ACK would be unchanged.
    n.run(Duration::from_micros(1500), &mut |a, p| tamper(a, p, &mut held));
    for &part in &request[1..] {
        assert_eq!(n.a.send(h, &vec![1u8; part]).unwrap_or(0), part);
        n.run(Duration::from_micros(1500), &mut |a, p| tamper(a, p, &mut held));
    }
    if request.len() > 1 {
        assert!(n.b.conn(sh).unwrap().hs.peer_data_ack_seen(), "the client's later part must carry a DATA_ACK");
    }
    let mut buf = vec![0u8; 65536];
    assert_eq!(n.read_b(sh, &mut buf), vec![1u8; request_len]);
    n.run(Duration::from_millis(60), &mut |a, p| tamper(a, p, &mut held));
    let response: Vec<u8> = (0..6000u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(n.b.send(sh, &response).unwrap_or(0), response.len());
    n.run(Duration::from_millis(5), &mut |a, p| tamper(a, p, &mut held));
    assert!(!held.is_empty(), "the test must hold back a pure ACK of the server");
    for p in held.drain(..) {
        n.wire.push_back((n.now + n.delay, false, p));
    }
    n.run(Duration::from_millis(200), &mut |a, p| tamper(a, p, &mut held));
    assert!(!model_fallback, "a server data segment without DATA_ACK reached a client not yet fully established");
    let mut got = Vec::new();
    loop {
        let k = n.a.recv(h, n.now, &mut buf).unwrap_or(0);
        if k == 0 {
            break;
        }
        got.extend_from_slice(&buf[..k]);
    }
    assert_eq!(got, response);
    assert_eq!(n.a.conn(h).unwrap().mode(), Mode::Mptcp);
}

/// The receiver's connection-level window closes (its
/// application does not read); every window update after that is lost
/// once. The sender's MPTCP-level zero-window probe recovers each time and
/// the transfer completes.
#[test]
fn window_probe_recovers_every_lost_window_update() {
    let mut s = EndpointConfig::default();
    s.mptcp.recv_buffer = BufferSize::Fixed(64 * 1024);
    let mut n = net(EndpointConfig::default(), s);
    let h = n.connect();
    n.run(Duration::from_millis(10), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 249) as u8).collect();
    let mut sent = 0;
    let mut last_ack: Option<u32> = None;
    let mut seen = std::collections::HashSet::new();
    let mut dropped = 0;
    let mut tamper = |from_a: bool, p: Vec<u8>| -> Option<Vec<u8>> {
        if from_a {
            return Some(p);
        }
        let h = hdr(&p);
        let pure_update = payload_len(&p) == 0 && last_ack == Some(h.ack);
        last_ack = Some(h.ack);
        let dack = mptcp_opts(&p).iter().find_map(|o| match o {
            MptcpOption::Dss { data_ack: Some(a), .. } => Some(a.ack),
            _ => None,
        });
        if pure_update && seen.insert((dack, h.window)) {
            dropped += 1;
            return None;
        }
        Some(p)
    };
    // Fill the window without reading.
    for _ in 0..20 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(10), &mut tamper);
    }
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..3000 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut tamper);
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got.len(), data.len(), "stalled: {}", n.a.conn(h).unwrap().debug_state());
    assert!(got == data);
    assert!(dropped > 0, "no window update was dropped");
    assert!(n.a.counters().mptcp_win_probe > 0);
}

/// Runs a 100-byte request / 100-byte response with close on both sides
/// over a 2 ms RTT, the server answering once the request ended (it reads
/// to end of stream, as an HTTP/1.0 server does); returns the time from
/// connect until the client has the whole response and its end.
fn request_response_with_close() -> Duration {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let t0 = n.now;
    let h = n.connect();
    let mut sh = None;
    let mut buf = vec![0u8; 4096];
    let (mut req_sent, mut got_req, mut got_resp, mut replied) = (false, 0, 0, false);
    for _ in 0..20_000 {
        n.run(Duration::from_micros(100), &mut pass());
        if !req_sent && n.a.is_established(h) && n.a.conn(h).unwrap().mode() == Mode::Mptcp {
            assert_eq!(n.a.send(h, &[7u8; 100]).unwrap_or(0), 100);
            n.a.close(h);
            req_sent = true;
        }
        if sh.is_none() {
            sh = n.b.accept();
        }
        if let Some(sh) = sh {
            let k = n.b.recv(sh, n.now, &mut buf).unwrap_or(0);
            got_req += k;
            if got_req == 100 && n.b.recv_finished(sh) && n.b.send_space(sh) > 0 && !replied {
                replied = true;
                assert_eq!(n.b.send(sh, &[9u8; 100]).unwrap_or(0), 100);
                n.b.close(sh);
            }
        }
        got_resp += n.a.recv(h, n.now, &mut buf).unwrap_or(0);
        if got_resp == 100 && n.a.recv_finished(h) {
            return n.now - t0;
        }
    }
    panic!("the request/response did not complete");
}

/// Handshake (1 RTT) plus request, response and both DATA_FINs
/// (1 RTT): 4 ms at a 2 ms RTT. Each DATA_FIN must leave at once, not
/// after a minimum RTO (200 ms).
#[test]
fn request_response_with_close_completes_in_one_rtt_after_the_handshake() {
    let d = request_response_with_close();
    eprintln!("request/response with close: {d:?} (RTT 2 ms)");
    assert!(d <= Duration::from_millis(8), "took {d:?}");
}

/// A peer's RST+ACK during a join handshake ends that
/// subflow quietly: no RST (with MP_TCPRST) goes back, in either role.
#[test]
fn rst_ack_during_a_join_handshake_is_not_answered() {
    for client_side in [true, false] {
        let mut n = two_path();
        let h = n.connect();
        let mut answered = 0;
        let mut converted = 0;
        n.run(Duration::from_millis(300), &mut |from_a, p| {
            let opts = mptcp_opts(&p);
            if hdr(&p).flags.rst() && converted > 0 {
                answered += 1;
            }
            let target = if client_side {
                !from_a && opts.iter().any(|o| matches!(o, MptcpOption::MpJoinSynAck { .. }))
            } else {
                from_a && opts.iter().any(|o| matches!(o, MptcpOption::MpJoinAck { .. }))
            };
            if target && converted == 0 {
                converted += 1;
                return Some(to_rst_ack(&p));
            }
            Some(p)
        });
        assert_eq!(converted, 1);
        assert_eq!(answered, 0, "a RST was answered with a RST (client side: {client_side})");
        assert_eq!(n.a.counters().mptcp_mp_rst_tx + n.b.counters().mptcp_mp_rst_tx, 0);
        assert!(n.a.conn(h).unwrap().is_established());
    }
}

/// a third ACK without MP_CAPABLE makes the server's connection
/// plain TCP (`MPCapableFallbackACK`); the bytes still arrive.
#[test]
fn third_ack_without_mp_capable_falls_back_on_the_server() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    let mut stripped = false;
    n.run(Duration::from_millis(10), &mut |from_a, p| {
        let f = hdr(&p).flags;
        if from_a && !stripped && !f.syn() && f.ack() {
            stripped = true;
            return Some(strip_mptcp(&p));
        }
        Some(p)
    });
    assert!(stripped);
    let sh = n.b.accept().unwrap();
    assert_eq!(n.b.conn(sh).unwrap().mode(), Mode::Plain);
    assert_eq!(n.b.conn(sh).unwrap().fallback_reason(), Some(FallbackReason::ThirdAck));
    assert_eq!(n.b.counters().mptcp_mp_capable_fallback_ack, 1);
    assert_eq!(n.a.send(h, b"hello").unwrap_or(0), 5);
    n.run(Duration::from_millis(50), &mut pass());
    let mut buf = vec![0u8; 64];
    assert_eq!(n.read_b(sh, &mut buf), b"hello");
}

/// A SYN-ACK without MP_CAPABLE (a server that does not speak MPTCP) makes
/// the client's connection plain TCP (`MPCapableFallbackSYNACK`).
#[test]
fn synack_without_mp_capable_falls_back_on_the_client() {
    let mut s = EndpointConfig::default();
    s.mptcp.enabled = false;
    let mut n = net(EndpointConfig::default(), s);
    let h = n.connect();
    assert_eq!(n.a.conn(h).unwrap().mode(), Mode::Pending);
    assert_eq!(n.a.conn(h).unwrap().fallback_reason(), None);
    n.run(Duration::from_millis(10), &mut pass());
    let sh = n.b.accept().unwrap();
    let c = n.a.conn(h).unwrap();
    assert_eq!(c.mode(), Mode::Plain);
    assert_eq!(c.fallback_reason(), Some(FallbackReason::SynAck));
    assert_eq!(n.a.counters().mptcp_mp_capable_fallback_synack, 1);
    // The server never offered: plain from the start, no fallback.
    assert_eq!(n.b.conn(sh).unwrap().fallback_reason(), None);
    assert_eq!(n.a.send(h, b"hello").unwrap_or(0), 5);
    n.run(Duration::from_millis(50), &mut pass());
    let mut buf = vec![0u8; 64];
    assert_eq!(n.read_b(sh, &mut buf), b"hello");
}

/// the client's first data segments reach the server before its
/// third ACK. They carry MP_CAPABLE with the data length (the client's key
/// and the server's), so the server becomes fully established from them and
/// neither end falls back; the late third ACK changes nothing.
#[test]
fn first_data_reordered_ahead_of_the_third_ack() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    let mut held: Option<Vec<u8>> = None;
    let hold = |from_a: bool, p: Vec<u8>, held: &mut Option<Vec<u8>>| {
        let f = hdr(&p).flags;
        if from_a && held.is_none() && !f.syn() && payload_len(&p) == 0 && has_mpc(&p) {
            *held = Some(p);
            return None;
        }
        Some(p)
    };
    n.run(Duration::from_millis(3), &mut |a, p| hold(a, p, &mut held));
    assert!(held.is_some(), "the third ACK was held back");
    assert!(n.b.accept().is_none(), "the server has not completed the handshake yet");
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(n.a.send(h, &data).unwrap_or(0), data.len());
    n.run(Duration::from_millis(5), &mut |a, p| hold(a, p, &mut held));
    let sh = n.b.accept().expect("the first data completed the handshake");
    n.wire.push_back((n.now + n.delay, true, held.take().unwrap()));
    n.run(Duration::from_millis(20), &mut pass());
    let mut buf = vec![0u8; 65536];
    assert_eq!(n.read_b(sh, &mut buf), data);
    assert_eq!(n.b.conn(sh).unwrap().mode(), Mode::Mptcp);
    assert_eq!(n.a.conn(h).unwrap().mode(), Mode::Mptcp);
    for c in [n.a.counters(), n.b.counters()] {
        assert_eq!(c.mptcp_dss_fallback + c.mptcp_mp_capable_fallback_ack, 0, "{}", c.to_nstat());
    }
    assert!(!n.a.conn(h).unwrap().mode.infinite() && !n.b.conn(sh).unwrap().mode.infinite());
}

/// an MP_CAPABLE without H or with B is ignored (fallback to
/// TCP), and the C flag keeps the path manager from joining the peer's
/// initial address.
#[test]
fn mp_capable_flags_h_and_b_checked_and_c_honoured() {
    for (clear, set) in [(cap_flags_h(), 0u8), (0, 0x40)] {
        let mut n = net(EndpointConfig::default(), EndpointConfig::default());
        let h = n.connect();
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            if from_a && hdr(&p).flags.syn() {
                return Some(rewrite(&p, &mut |m| {
                    if let MptcpOption::MpCapable { flags, .. } = m {
                        *flags = (*flags & !clear) | set;
                    }
                }));
            }
            Some(p)
        });
        assert_eq!(n.a.conn(h).unwrap().mode(), Mode::Plain, "flags -{clear:#x} +{set:#x}");
        let sh = n.b.accept().unwrap();
        assert_eq!(n.b.conn(sh).unwrap().mode(), Mode::Plain);
    }
    // C flag in the server's SYN-ACK: the client's subflow endpoint must not
    // join the server's initial address.
    let mut c = EndpointConfig::default();
    c.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.1"),
        flags: EndpointFlags { subflow: true, ..Default::default() },
        port: None,
    });
    for c_flag in [false, true] {
        let mut n = net(c.clone(), EndpointConfig::default());
        let h = n.connect();
        let mut tamper = |from_a: bool, p: Vec<u8>| {
            if !from_a && hdr(&p).flags.syn() && c_flag {
                return Some(rewrite(&p, &mut |m| {
                    if let MptcpOption::MpCapable { flags, .. } = m {
                        *flags |= 0x20;
                    }
                }));
            }
            Some(p)
        };
        n.run(Duration::from_millis(20), &mut tamper);
        // Data makes the client fully established (the server's DATA_ACK).
        n.a.send(h, &[1u8; 100]).unwrap_or(0);
        n.run(Duration::from_millis(100), &mut tamper);
        let subflows = n.a.conn(h).unwrap().info().subflows.len();
        assert_eq!(subflows, if c_flag { 1 } else { 2 }, "C flag {c_flag}");
    }
}

fn cap_flags_h() -> u8 {
    mptun_wire::mptcp::cap_flags::HMAC_SHA256
}

/// with checksums negotiated, a DSS mapping without one resets
/// the subflow (MP_TCPRST), counted as `DSSNotMatching`.
#[test]
fn dss_without_checksum_is_refused_when_checksums_are_on() {
    let mut c = EndpointConfig::default();
    c.mptcp.checksum = true;
    let mut n = net(c, EndpointConfig::default());
    let h = n.connect();
    n.run(Duration::from_millis(20), &mut pass());
    // The first mapping rides on MP_CAPABLE; the next ones are DSS.
    n.a.send(h, &[5u8; 3000]).unwrap_or(0);
    n.run(Duration::from_millis(100), &mut pass());
    n.a.send(h, &[5u8; 3000]).unwrap_or(0);
    let mut rst_with_reason = 0;
    n.run(Duration::from_millis(200), &mut |from_a, p| {
        if !from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::MpTcpRst { .. })) {
            rst_with_reason += 1;
        }
        if from_a && payload_len(&p) > 0 {
            return Some(rewrite(&p, &mut |m| {
                if let MptcpOption::Dss { mapping: Some(m), .. } = m {
                    m.checksum = None;
                }
            }));
        }
        Some(p)
    });
    assert!(n.b.counters().mptcp_dss_not_matching >= 1);
    assert!(rst_with_reason >= 1);
}

/// a zero-length (infinite) mapping from a peer that fell back:
/// the receiver falls back too and the bytes arrive intact.
#[test]
fn infinite_mapping_is_followed() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    n.run(Duration::from_millis(20), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    let mut buf = vec![0u8; 65536];
    let mut got = Vec::new();
    let mut sent = n.a.send(h, &data[..20_000]).unwrap_or(0);
    n.run(Duration::from_millis(50), &mut pass());
    got.extend(n.read_b(sh, &mut buf));
    // From here the client "falls back": its next mapping is sent as an
    // infinite one, and no MPTCP option follows.
    let mut infinite_sent = false;
    for _ in 0..200 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            if !from_a {
                return Some(p);
            }
            if infinite_sent {
                return Some(strip_mptcp(&p));
            }
            if payload_len(&p) > 0 {
                infinite_sent = true;
                return Some(rewrite(&p, &mut |m| {
                    if let MptcpOption::Dss { mapping: Some(m), data_ack, .. } = m {
                        m.len = 0;
                        *data_ack = None;
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
    assert!(got == data, "{} of {} bytes", got.len(), data.len());
    assert_eq!(n.b.counters().mptcp_infinite_map_rx, 1);
    assert_eq!(n.b.conn(sh).unwrap().fallback_reason(), Some(FallbackReason::InfiniteMapping));
    assert_eq!(n.b.counters().mptcp_dss_fallback, 1);
}

/// an unechoed ADD_ADDR goes out once and is retransmitted at
/// most 3 times, `add_addr_timeout` apart.
#[test]
fn add_addr_retransmitted_three_times_at_add_addr_timeout() {
    let mut n = two_path();
    let h = n.connect();
    let _ = h;
    // Shorter timeout on the announcing server.
    let mut s = EndpointConfig::default();
    s.mptcp.add_addr_timeout = Duration::from_secs(2);
    s.mptcp.pm.endpoints.push(PmEndpoint {
        id: 1,
        addr: ip("10.0.2.2"),
        flags: EndpointFlags { signal: true, ..Default::default() },
        port: None,
    });
    let mut b = Endpoint::new(s, [2; 32]);
    b.listen(sa("10.0.1.2:5000"));
    n = Net::new(Endpoint::new(EndpointConfig::default(), [1; 32]), b, Instant::ZERO);
    n.connect();
    let mut times = Vec::new();
    let mut now_seen = Instant::ZERO;
    n.run(Duration::from_secs(20), &mut |from_a, p| {
        let _ = now_seen;
        if !from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::AddAddr { echo: false, .. })) {
            times.push(());
            return None;
        }
        Some(p)
    });
    now_seen = n.now;
    let _ = now_seen;
    assert_eq!(times.len(), 4, "one transmission and three retransmissions");
    assert_eq!(n.b.counters().mptcp_add_addr_tx, 4);
}

/// our DATA_FIN is retried with backoff but not forever: with
/// the peer gone, the connection is reset after the close timeout.
#[test]
fn data_fin_retries_end_at_the_close_timeout() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    n.run(Duration::from_millis(20), &mut pass());
    n.a.send(h, b"last words").unwrap_or(0);
    n.run(Duration::from_millis(20), &mut pass());
    n.a.close(h);
    n.run(Duration::from_secs(90), &mut |from_a, p| from_a.then_some(p));
    assert_eq!(n.a.counters().mptun_data_fin_timeout, 1);
    assert!(n.a.is_closed(h));
}

/// both DATA_FINs and the subflow FINs done, the application
/// aborting (as a process exit does) sends nothing: no RST, no MP_FASTCLOSE.
#[test]
fn a_finished_connection_is_released_without_a_reset() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    n.run(Duration::from_millis(20), &mut pass());
    let sh = n.b.accept().unwrap();
    n.a.send(h, b"ping").unwrap_or(0);
    n.a.close(h);
    assert!(!n.a.all_data_acked(h), "written, not yet acknowledged");
    n.run(Duration::from_millis(50), &mut pass());
    let mut buf = vec![0u8; 64];
    assert_eq!(n.read_b(sh, &mut buf), b"ping");
    assert!(n.a.all_data_acked(h) && n.b.all_data_acked(sh));
    assert!(!n.a.is_finished(h) && !n.b.is_finished(sh), "one side closed: the close is not over");
    n.b.close(sh);
    n.run(Duration::from_millis(200), &mut pass());
    assert!(n.a.recv_finished(h));
    assert!(n.a.is_finished(h) && n.b.is_finished(sh), "both closed: TIME_WAIT or gone");
    n.a.abort(h);
    n.b.abort(sh);
    let mut rsts = 0;
    n.run(Duration::from_millis(100), &mut |_, p| {
        rsts += hdr(&p).flags.rst() as u32;
        Some(p)
    });
    assert_eq!(rsts, 0);
    assert_eq!(n.a.counters().mptcp_mp_fastclose_rx + n.b.counters().mptcp_mp_fastclose_rx, 0);
    assert_eq!(n.a.counters().mptcp_mp_fastclose_tx + n.b.counters().mptcp_mp_fastclose_tx, 0);
}

/// Runs 20 ms holding back the server's ADD_ADDRs (at least one).
fn hold_add_addr(n: &mut Net) -> Vec<Vec<u8>> {
    let mut held = Vec::new();
    n.run(Duration::from_millis(20), &mut |from_a, p| {
        if !from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::AddAddr { echo: false, .. })) {
            held.push(p);
            return None;
        }
        Some(p)
    });
    assert!(!held.is_empty());
    held
}

/// Delivers the held ADD_ADDRs, runs 100 ms and counts the MP_JOIN SYNs.
fn release_and_count_join_syns(n: &mut Net, held: Vec<Vec<u8>>) -> u32 {
    for p in held {
        n.wire.push_back((n.now + n.delay, false, p));
    }
    let mut join_syns = 0;
    n.run(Duration::from_millis(100), &mut |_, p| {
        join_syns += mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::MpJoinSyn { .. })) as u32;
        Some(p)
    });
    join_syns
}

/// the peer's ADD_ADDR that arrives once the connection is
/// closing (both DATA_FINs sent) opens no subflow.
#[test]
fn no_join_once_closing() {
    let mut n = two_path();
    let h = n.connect();
    // Hold the server's ADD_ADDR back until it has closed.
    let held = hold_add_addr(&mut n);
    let sh = n.b.accept().unwrap();
    n.b.close(sh);
    n.a.close(h);
    n.run(Duration::from_millis(20), &mut pass());
    assert!(n.a.recv_finished(h));
    assert_eq!(release_and_count_join_syns(&mut n, held), 0);
    assert_eq!(n.a.conn(h).unwrap().info().subflows.len(), 1);
}

/// an ADD_ADDR that arrives after the connection fell back to
/// TCP (a middlebox began to strip the options mid-stream) opens no subflow:
/// a fallen-back connection has no data sequence space to share.
#[test]
fn no_join_after_a_fallback() {
    let mut n = two_path();
    let h = n.connect();
    let held = hold_add_addr(&mut n);
    let sh = n.b.accept().unwrap();
    // From here on every option is stripped, both ways: data makes both
    // ends fall back.
    let data = vec![5u8; 20_000];
    assert_eq!(n.a.send(h, &data).unwrap_or(0), data.len());
    assert_eq!(n.b.send(sh, &data).unwrap_or(0), data.len());
    n.run(Duration::from_millis(50), &mut |_, p| Some(super::strip_mptcp(&p)));
    let mut buf = vec![0u8; 65536];
    assert_eq!(n.read_b(sh, &mut buf), data);
    assert!(n.a.conn(h).unwrap().mode.infinite() && n.b.conn(sh).unwrap().mode.infinite(), "both fell back");
    assert_eq!(release_and_count_join_syns(&mut n, held), 0);
    assert_eq!(n.a.conn(h).unwrap().info().subflows.len(), 1);
}

/// data a subflow acknowledged but the peer never DATA_ACKed
/// (here its mapping was rewritten into a duplicate, as if the peer's
/// connection dropped it) is sent again by the MPTCP-level retransmission
/// timer.
#[test]
fn mptcp_retransmit_timer_resends_data_never_data_acked() {
    let (_, c) = never_data_acked(None);
    assert!(c.mptcp_retrans >= 1);
}

/// The same with a tiny MSS, where the lost mapping spans many segments:
/// one expiry of the MPTCP-level timer sends the whole head fragment again
/// (Linux `__mptcp_retrans` sends its rtx head dfrag), not one segment of
/// it per (backed-off) timeout.
#[test]
fn retransmit_timer_sends_the_whole_head_fragment_with_a_tiny_mss() {
    let mss = 200;
    let (lost, c) = never_data_acked(Some(mss));
    assert!(lost > 4 * u32::from(mss), "the lost mapping spans segments: {lost} bytes");
    assert_eq!(c.mptcp_retrans, 1, "{lost} bytes lost: {}", c.to_nstat());
}

/// The server's DSS mappings are rewritten on the way so that one of them
/// (100 kB in) claims the first DSN: its bytes are acknowledged by the
/// subflow but never delivered. Returns that mapping's length and the
/// server's counters once the client has read everything.
fn never_data_acked(server_mss: Option<u16>) -> (u32, crate::Counters) {
    let mut s = EndpointConfig::default();
    if let Some(m) = server_mss {
        s.tcp.mss = m;
    }
    let mut n = net(EndpointConfig::default(), s);
    let h = n.connect();
    n.run(Duration::from_millis(20), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 239) as u8).collect();
    let mut sent = 0;
    let mut first_dsn = None;
    let mut victim: Option<(u64, u32)> = None;
    let mut lost = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..500 {
        sent += n.b.send(sh, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            if from_a || payload_len(&p) == 0 {
                return Some(p);
            }
            Some(rewrite(&p, &mut |m| {
                if let MptcpOption::Dss { mapping: Some(m), .. } = m {
                    let base = *first_dsn.get_or_insert(m.dsn);
                    if victim.is_none() && m.dsn - base >= 100_000 {
                        victim = Some((m.dsn, m.ssn));
                        lost = u32::from(m.len);
                    }
                    if victim == Some((m.dsn, m.ssn)) {
                        m.dsn = base;
                    }
                }
            }))
        });
        loop {
            let k = n.a.recv(h, n.now, &mut buf).unwrap_or(0);
            if k == 0 {
                break;
            }
            got.extend_from_slice(&buf[..k]);
        }
        if got.len() == data.len() {
            break;
        }
    }
    assert!(victim.is_some());
    assert!(got == data, "{} of {} bytes", got.len(), data.len());
    (lost, n.b.counters())
}

/// A hostile sender leaves a one-byte hole at the start of the
/// data sequence space (every mapping is moved one byte on) and ignores the
/// connection-level window: the server's DATA_ACKs are forged on the way so
/// the sender believes everything arrived and keeps mapping new data far
/// past the window, on both subflows. An out-of-order chunk must not move
/// the accepted edge on: nothing past the largest edge announced is queued (`MPTcpExtNoDSSInWindow`), the
/// subflows are not reset, and the receive side stays within its memory
/// budget: `2 × recv_buffer + MEM_SLACK` for the connection's queue plus
/// the same per subflow (here the subflows hold nothing: their data is in
/// order at the subflow level).
#[test]
fn a_peer_ignoring_the_window_behind_a_hole_stays_within_the_receive_buffer() {
    const RCVBUF: usize = 256 * 1024;
    const TOTAL: usize = 16 << 20;
    let mut n = two_path_with(|s| s.mptcp.recv_buffer = BufferSize::Fixed(RCVBUF));
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    assert_eq!(n.a.conn(h).unwrap().info().subflows.len(), 2);
    let chunk = vec![0x5au8; 256 * 1024];
    let mut sent = 0usize;
    let mut max_end = 0u64;
    let mut peak = 0usize;
    let mut tamper = |from_a: bool, p: Vec<u8>| -> Option<Vec<u8>> {
        Some(rewrite(&p, &mut |m| match m {
            MptcpOption::Dss { mapping: Some(map), .. } if from_a => {
                max_end = max_end.max(map.dsn + map.len as u64);
                map.dsn += 1;
            }
            MptcpOption::Dss { data_ack: Some(a), .. } if !from_a && max_end > 0 => {
                a.ack = max_end;
                a.ack64 = true;
            }
            _ => {}
        }))
    };
    let mut steps = 0;
    while sent < TOTAL {
        steps += 1;
        assert!(steps < 20_000, "the sender stalled at {sent}");
        sent += n.a.send(h, &chunk).unwrap_or(0);
        n.run(Duration::from_millis(5), &mut tamper);
        let c = n.b.conn(sh).expect("the connection is not reset");
        peak = peak.max(c.recv_mem());
    }
    let c = n.b.conn(sh).unwrap();
    assert_eq!(c.info().subflows.len(), 2, "no subflow was reset");
    assert_eq!(c.recv_ready(), 0, "nothing in order: the hole is never filled");
    let k = n.b.counters();
    assert!(k.mptcp_no_dss_in_window > 1000, "{}", k.to_nstat());
    assert_eq!(k.mptcp_dss_not_matching, 0);
    let bound = 2 * RCVBUF + crate::buf::MEM_SLACK;
    eprintln!("sent {sent} B past a one-byte hole: peak receive memory {peak} B (bound {bound} B)\n{}", k.to_nstat());
    assert!(peak <= bound, "peak {peak} > {bound}");
}

/// A healthy two-path transfer into a small fixed receive buffer completes
/// intact without hitting the memory budget.
#[test]
fn a_small_fixed_receive_buffer_still_completes_intact() {
    let mut n = two_path_with(|s| s.mptcp.recv_buffer = BufferSize::Fixed(64 * 1024));
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut sent, mut got) = (0, Vec::new());
    let mut buf = vec![0u8; 65536];
    for _ in 0..5000 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(5), &mut pass());
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data, "{} of {} bytes", got.len(), data.len());
    let k = n.b.counters();
    assert_eq!(
        (k.mptcp_no_dss_in_window, k.mptcp_rcv_pruned, k.mptcp_ofo_pruned, k.tcp_ext_prune_called),
        (0, 0, 0, 0),
        "{}",
        k.to_nstat()
    );
}

/// The failure behind a flaky interop test: a path goes down mid-transfer
/// while the data at the peer's DATA_ACK point is in flight on it. The
/// stale subflow's data is reinjected on the live one and arrives, but the
/// peer's DATA_ACKs stay behind for a while (Linux fills the DATA_ACK from
/// `msk->ack_seq`, which moves only once the msk has taken the subflow's
/// data: an ACK can go out with the old value and none follows). With all
/// data sent, nothing new elicits an ACK: only the MPTCP-level
/// retransmission timer can. It must not defer to the dead subflow (its
/// own RTO never succeeds) but send the head again on a live one, as
/// Linux's `__mptcp_retrans` does.
#[test]
fn retransmit_timer_does_not_wait_on_a_stale_subflow() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(50), &mut pass());
    let sh = n.b.accept().unwrap();
    let joined = |n: &Net| n.a.conn(h).unwrap().info().subflows.iter().filter(|s| s.joined).count();
    assert_eq!(joined(&n), 2, "the second path joined");
    let data: Vec<u8> = (0..400_000u32).map(|i| (i % 241) as u8).collect();
    let on_path2 = |p: &[u8]| {
        let pkt = parse_tcp_packet(p).unwrap();
        pkt.src == ip("10.0.2.1") || pkt.dst == ip("10.0.2.1")
    };
    let mut sent = n.a.send(h, &data).unwrap_or(0);
    // Let the transfer start on both paths, then path 2 dies.
    n.run(Duration::from_millis(2), &mut pass());
    let t_dead = n.now;
    let thaw = t_dead + Duration::from_secs(5);
    let mut first_lost: Option<u64> = None;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..600 {
        let now = n.now;
        n.run(Duration::from_millis(100), &mut |from_a, p| {
            if on_path2(&p) {
                if from_a && first_lost.is_none() {
                    first_lost = mptcp_opts(&p).iter().find_map(|o| match o {
                        MptcpOption::Dss { mapping: Some(m), .. } if m.len > 0 => Some(m.dsn),
                        _ => None,
                    });
                }
                return None;
            }
            let (Some(lost), false) = (first_lost, from_a || now >= thaw) else { return Some(p) };
            // The peer's DATA_ACK lags at the first byte lost on path 2.
            Some(rewrite(&p, &mut |m| {
                if let MptcpOption::Dss { data_ack: Some(a), .. } = m {
                    let ahead =
                        if a.ack64 { a.ack > lost } else { (a.ack as u32).wrapping_sub(lost as u32) as i32 > 0 };
                    if ahead {
                        a.ack = if a.ack64 { lost } else { lost & 0xffff_ffff };
                    }
                }
            }))
        });
        got.extend(n.read_b(sh, &mut buf));
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        if n.a.conn(h).unwrap().info().bytes_acked == data.len() as u64 {
            break;
        }
    }
    let done = n.now;
    assert!(first_lost.is_some(), "data was in flight on path 2 when it died");
    assert!(got == data, "{} of {} bytes arrived", got.len(), data.len());
    let c = n.a.conn(h).unwrap();
    assert_eq!(c.info().bytes_acked, data.len() as u64, "stalled: {}", c.debug_state());
    assert!(c.counters().mptcp_subflow_stale >= 1);
    assert!(c.counters().mptcp_retrans >= 1);
    // The timer backs off while the DATA_ACKs lag (5 s), so its next expiry
    // after they catch up comes within about as long again; before, it counted
    // in the dead subflow's RTO (backed off to 25.9 s) and the transfer ended
    // at 30.2 s.
    assert!(done <= thaw + Duration::from_secs(5), "done {done:?}, DATA_ACKs caught up at {thaw:?}");
}

/// A client is
/// fully established only by what proves the server has its key: a DSS, or
/// an ADD_ADDR whose HMAC (computed with that key) verifies. An ADD_ADDR with
/// another HMAC proves nothing: a client whose third ACK was lost (its server
/// fell back to TCP) must not take the server for an MPTCP one because of it.
#[test]
fn only_a_verified_add_addr_establishes_the_client() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    // Every server segment after the SYN-ACK is held back: nothing real
    // from the server proves anything yet.
    let (mut synack, mut third_ack) = (None, None);
    n.run(Duration::from_millis(10), &mut |from_a, p| {
        let f = hdr(&p).flags;
        if from_a {
            if third_ack.is_none() && !f.syn() && has_mpc(&p) {
                third_ack = Some(p.clone());
            }
            return Some(p);
        }
        if f.syn() {
            synack = Some(p.clone());
            return Some(p);
        }
        None
    });
    assert!(!n.a.conn(h).unwrap().info().fully_established);
    let (synack, third_ack) = (synack.expect("a SYN-ACK"), third_ack.expect("a third ACK"));
    let s = parse_tcp_packet(&synack).unwrap();
    let (server_key, client_key) = match mptcp_opts(&third_ack)[..] {
        [MptcpOption::MpCapable { sender_key: Some(c), receiver_key: Some(s), .. }] => (s, c),
        ref o => panic!("third ACK options {o:?}"),
    };
    let addr = ip("10.0.2.2");
    let add_addr = |hmac: u64| {
        let mut t =
            TcpHeader::new(s.tcp.src_port, s.tcp.dst_port, s.tcp.seq.wrapping_add(1), s.tcp.ack, TcpFlags::ACK, 1000);
        let ts = s.tcp.options.summary().timestamp.map(|(v, e)| (v.wrapping_add(1), e));
        let o = MptcpOption::AddAddr { echo: false, addr_id: 1, addr, port: None, hmac: Some(hmac) };
        t.options = TcpOptions::established(ts, &[], &[o]).unwrap();
        let mut out = vec![0u8; 1600];
        let k = emit_tcp_packet(s.src, s.dst, 64, &t, &[], &mut out).unwrap();
        out.truncate(k);
        out
    };
    let valid = mptun_wire::crypto::add_addr_hmac(server_key, client_key, 1, addr, None);
    n.a.handle_packet(n.now, &add_addr(valid ^ 1));
    assert!(!n.a.conn(h).unwrap().info().fully_established, "a wrong HMAC established the client");
    n.a.handle_packet(n.now, &add_addr(valid));
    assert!(n.a.conn(h).unwrap().info().fully_established, "the verified ADD_ADDR did not");
}

/// A Linux sender overestimates the connection's window: it adds a
/// subflow's last window to a DATA_ACK that came later, and raises a
/// subflow's window to the connection's (`ack_update_msk`,
/// `mptcp_check_allowed_size`), so at high rates data arrives past the
/// edge the receiver announced, on the connection and on the subflow
/// carrying it. Emulated here by B's windows growing by half on their way
/// to A. Dropping the excess (`MPTcpExtNoDSSInWindow` at the connection,
/// `TcpExtBeyondWindow` or a trimmed tail at the subflow) would leave it to
/// retransmissions, the connection-level ones hundreds of milliseconds
/// later, so it is taken within the memory budget.
#[test]
fn data_past_the_announced_edge_from_a_linux_sender_is_taken() {
    const RCVBUF: usize = 128 * 1024;
    let mut n = two_path_with(|s| s.mptcp.recv_buffer = BufferSize::Fixed(RCVBUF));
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    assert_eq!(n.a.conn(h).unwrap().info().subflows.len(), 2);
    let mut inflate = |from_a: bool, p: Vec<u8>| -> Option<Vec<u8>> {
        let pkt = parse_tcp_packet(&p).unwrap();
        if from_a || pkt.tcp.flags.syn() {
            return Some(p);
        }
        let mut hdr = pkt.tcp.clone();
        hdr.window = (u32::from(hdr.window) * 3 / 2).min(65535) as u16;
        let mut out = vec![0u8; 1600];
        let k = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &hdr, pkt.payload, &mut out).unwrap();
        out.truncate(k);
        Some(out)
    };
    let data: Vec<u8> = (0..4_000_000u32).map(|i| (i % 253) as u8).collect();
    let (mut sent, mut got) = (0, Vec::new());
    let mut buf = vec![0u8; 65536];
    let mut peak = 0;
    for _ in 0..5000 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        n.run(Duration::from_millis(2), &mut inflate);
        peak = peak.max(n.b.conn(sh).unwrap().recv_mem());
        got.extend(n.read_b(sh, &mut buf));
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data, "{} of {} bytes", got.len(), data.len());
    let (a, b) = (n.a.counters(), n.b.counters());
    assert_eq!((b.mptcp_no_dss_in_window, b.tcp_ext_beyond_window), (0, 0), "{}", b.to_nstat());
    assert_eq!((a.mptcp_retrans, a.tcp_retrans_segs), (0, 0), "nothing to repair:\n{}", a.to_nstat());
    assert!(peak <= 2 * RCVBUF + crate::buf::MEM_SLACK, "within the memory budget: {peak}");
}

/// A third ACK whose MP_CAPABLE gives the server's own key as the
/// client's (a forger that saw the SYN-ACK) is not taken: the connection
/// would get its own token as the peer's, and its own joins to an address
/// routed back to it would be accepted as the peer's subflows, its own
/// data read as the peer's. A
/// SYN-ACK claiming the client's own key likewise makes the client fall
/// back rather than take it.
#[test]
fn a_peer_key_equal_to_our_own_is_not_taken() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    n.connect();
    let mut own_key = |from_a: bool, p: Vec<u8>| -> Option<Vec<u8>> {
        if !from_a {
            return Some(p);
        }
        Some(rewrite(&p, &mut |m| {
            if let MptcpOption::MpCapable { sender_key: Some(sk), receiver_key: Some(rk), .. } = m {
                *sk = *rk;
            }
        }))
    };
    n.run(Duration::from_millis(200), &mut own_key);
    let sh = n.b.accept().expect("accepted");
    let info = n.b.conn(sh).unwrap().info();
    assert!(info.remote_token.is_none_or(|t| Some(t) != info.local_token), "{info:?}");
    assert!(!info.fully_established, "{info:?}");

    // The client side: a SYN-ACK carrying the client's own key.
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    let client_key = n.a.conn(h).unwrap().hs.local_key();
    let mut mirror = |from_a: bool, p: Vec<u8>| -> Option<Vec<u8>> {
        Some(rewrite(&p, &mut |m| {
            if let MptcpOption::MpCapable { sender_key: Some(sk), receiver_key: None, .. } = m {
                if !from_a {
                    *sk = client_key;
                }
            }
        }))
    };
    n.run(Duration::from_millis(200), &mut mirror);
    let info = n.a.conn(h).unwrap().info();
    assert_eq!(info.mode, Mode::Plain, "{info:?}");
    assert!(n.a.counters().mptcp_mp_capable_fallback_synack >= 1);
}
