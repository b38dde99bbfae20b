//! A client that falls back to TCP while its server stays MPTCP (the two
//! open crashes of the `endpoint` fuzzer, `crash-04` and `crash-05` in
//! `crates/mptun-fuzz/corpus/endpoint/`): what the client reads must stay a
//! prefix of what the server wrote, whatever the server's MPTCP-level
//! retransmission does on the only subflow.

use super::*;

/// A middlebox strips the MPTCP options of the server's first pure ACK (the
/// one that acknowledges the client's first data): the client, not yet
/// fully established, falls back to TCP on it (Linux
/// `check_fully_established`) while the server stays MPTCP. Everything else
/// passes untouched.
fn one_sided_fallback(csum: bool) -> (Net, ConnectionHandle, ConnectionHandle) {
    let mut c = EndpointConfig::default();
    c.mptcp.checksum = csum;
    let mut n = net(c.clone(), c);
    let h = n.connect();
    n.run(Duration::from_millis(10), &mut pass());
    let sh = n.b.accept().unwrap();
    assert!(!n.a.conn(h).unwrap().info().fully_established);
    assert_eq!(n.a.send(h, &[7u8; 100]).unwrap_or(0), 100);
    let mut stripped = false;
    n.run(Duration::from_millis(5), &mut |from_a, p| {
        let pkt = parse_tcp_packet(&p).unwrap();
        if !from_a && !stripped && pkt.payload.is_empty() && !pkt.tcp.flags.syn() {
            stripped = true;
            return Some(strip_mptcp(&p));
        }
        Some(p)
    });
    assert!(stripped);
    assert_eq!(n.a.conn(h).unwrap().counters().mptcp_dss_fallback, 1, "the client fell back");
    assert_eq!(n.b.conn(sh).unwrap().counters().mptcp_dss_fallback, 0, "the server did not");
    (n, h, sh)
}

/// The server's 2,000 bytes (`i % 251`).
fn server_data() -> Vec<u8> {
    (0..2000u32).map(|i| (i % 251) as u8).collect()
}

/// Everything the client has ready.
fn read_a(n: &mut Net, h: ConnectionHandle) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(k @ 1..) = n.a.recv(h, n.now, &mut buf) {
        got.extend_from_slice(&buf[..k]);
    }
    got
}

/// The server writes; its data reaches the fallen-back client, whose ACKs
/// carry no option any more, so no DATA_ACK ever covers it. Before, the
/// server's MPTCP-level retransmission timer then sent the data again on its
/// only subflow (new subflow sequence numbers, the same data sequence
/// numbers), and the client read that copy as new bytes (4,896 bytes read
/// of 2,000 written). Now the server, seeing that the ACKs of its data came
/// without an option, falls back too instead of copying, and the stream
/// completes.
fn server_retransmission_after_a_one_sided_fallback(csum: bool) {
    let (mut n, h, sh) = one_sided_fallback(csum);
    let data = server_data();
    assert_eq!(n.b.send(sh, &data).unwrap_or(0), data.len());
    let mut got = Vec::new();
    for _ in 0..50 {
        n.run(Duration::from_millis(100), &mut pass());
        got.extend(read_a(&mut n, h));
    }
    assert!(got.len() <= data.len() && got[..] == data[..got.len()], "read {} bytes of {}", got.len(), data.len());
    assert_eq!(got, data, "every byte arrives once");
    let s = n.b.conn(sh).unwrap().counters();
    assert_eq!((s.mptcp_dss_fallback, s.mptcp_retrans), (1, 0), "the server falls back instead of copying");
    n.b.close(sh);
    n.run(Duration::from_secs(1), &mut pass());
    assert!(n.a.recv_finished(h), "the FIN ends the stream");
}

/// The state of corpus input `crash-04-one-sided-fallback-copy`.
#[test]
fn a_server_falls_back_instead_of_copying_to_a_fallen_back_client() {
    server_retransmission_after_a_one_sided_fallback(false);
}

/// The state of corpus input `crash-05-one-sided-fallback-copy-csum`: the same with
/// DSS checksums, which do not catch the copy (its mapping and checksum are
/// right; only its subflow position is new).
#[test]
fn a_server_falls_back_instead_of_copying_to_a_fallen_back_client_with_checksums() {
    server_retransmission_after_a_one_sided_fallback(true);
}

/// The segment moved `shift` bytes on in the subflow's sequence space, its
/// DSS mapping with it (same data sequence number): a data-level copy.
fn copy_at(p: &[u8], shift: u32) -> Vec<u8> {
    let moved = rewrite(p, &mut |m| {
        if let MptcpOption::Dss { mapping: Some(m), .. } = m {
            m.ssn = m.ssn.wrapping_add(shift);
        }
    });
    let pkt = parse_tcp_packet(&moved).unwrap();
    let mut hdr = pkt.tcp.clone();
    hdr.seq = hdr.seq.wrapping_add(shift);
    let mut out = vec![0u8; 1600];
    let k = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &hdr, pkt.payload, &mut out).unwrap();
    out.truncate(k);
    out
}

/// The receiving half of the same guard, for a copy the sender's check
/// cannot stop (say an old ACK with options replayed to it): a fallen-back
/// client that gets a segment whose DSS mapping puts its bytes at another
/// data sequence number than the infinite mapping does resets the subflow
/// instead of reading it as the stream.
#[test]
fn a_fallen_back_receiver_resets_on_a_mapping_that_contradicts_the_infinite_one() {
    let (mut n, h, sh) = one_sided_fallback(false);
    let data = server_data();
    assert_eq!(n.b.send(sh, &data).unwrap_or(0), data.len());
    let mut first = None;
    n.run(Duration::from_millis(20), &mut |from_a, p| {
        if !from_a && !parse_tcp_packet(&p).unwrap().payload.is_empty() && first.is_none() {
            first = Some(p.clone());
        }
        Some(p)
    });
    assert_eq!(read_a(&mut n, h), data);
    let before = n.a.counters().mptcp_dss_not_matching;
    // A consistent mapping (the original again) is a duplicate, nothing more.
    let first = first.expect("a data segment");
    n.a.handle_packet(n.now, &first);
    assert_eq!(n.a.counters().mptcp_dss_not_matching, before);
    n.a.handle_packet(n.now, &copy_at(&first, data.len() as u32));
    assert_eq!(n.a.counters().mptcp_dss_not_matching, before + 1);
    assert!(read_a(&mut n, h).is_empty(), "the copy was read as new bytes");
    n.run(Duration::from_millis(50), &mut pass());
    assert!(read_a(&mut n, h).is_empty());
    assert!(n.a.is_closed(h) || n.a.conn(h).is_none(), "the subflow is reset");
}
