//! DSS checksums (RFC 8684 3.3.1, 3.7): the checksum itself, its
//! negotiation, a failure on one of two subflows (the subflow reset, its
//! data sent on the other), and a failure on the only subflow: MP_FAIL, the
//! fallback from the failed mapping, and the sender's answer (the MP_FAIL
//! echoed, the infinite mapping on new data and its copies).

use super::*;
use mptun_wire::checksum::dss_checksum;

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

/// On the only subflow a checksum failure does not reset (RFC 8684 3.7):
/// the receiver sends MP_FAIL with the failed mapping's DSN and both ends
/// fall back to TCP, from that mapping on. The stream stays whole and in
/// place; the byte the middlebox rewrote is delivered as TCP carried it.
#[test]
fn checksum_failure_on_the_only_subflow_sends_mp_fail_and_falls_back() {
    checksum_failure_on_the_only_subflow(false, false);
}

/// Without pacing the sender's data segments leave in bursts: the MP_FAIL
/// echo and the infinite mapping still never share one (with timestamps
/// they would not fit in 40 bytes), and no data segment goes unmapped.
#[test]
fn checksum_failure_answered_without_pacing() {
    checksum_failure_on_the_only_subflow(false, true);
}

/// The segment that carries the infinite mapping is lost once: its
/// retransmission carries the same infinite mapping again.
#[test]
fn checksum_failure_infinite_mapping_survives_a_loss() {
    checksum_failure_on_the_only_subflow(true, false);
}

/// A 400 kB transfer A → B with DSS checksums, one payload byte of the 50th
/// data segment rewritten (TCP checksum fixed). `drop_infinite_once` drops
/// the first segment that carries A's infinite mapping; `unpaced` turns A's
/// pacer off.
fn checksum_failure_on_the_only_subflow(drop_infinite_once: bool, unpaced: bool) {
    let mut c = EndpointConfig::default();
    c.mptcp.checksum = true;
    if unpaced {
        c.tcp.pacer = mptun_cc::PacerKind::None;
    }
    let mut n = net(c, EndpointConfig::default());
    let h = n.connect();
    let mut iss = None;
    n.run(Duration::from_millis(100), &mut |from_a, p| {
        let t = parse_tcp_packet(&p).unwrap().tcp;
        if from_a && t.flags.syn() {
            iss = Some(t.seq);
        }
        Some(p)
    });
    let iss = iss.unwrap();
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
    let (mut sent, mut got, mut buf) = (0, Vec::new(), vec![0u8; 65536]);
    let (mut corrupted, mut mp_fail_dsn, mut rsts) = (None, Vec::new(), 0);
    let (mut echo_dsn, mut infinite_maps) = (Vec::new(), Vec::new());
    let (mut data_segs, mut dropped_infinite, mut unmapped, mut oversize) = (0, false, Vec::new(), 0);
    let mut reasons = (None, None);
    for _ in 0..300 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        if sent == data.len() {
            n.a.close(h);
        }
        n.run(Duration::from_millis(20), &mut |from_a, p| {
            let pkt = parse_tcp_packet(&p).unwrap();
            rsts += pkt.tcp.flags.rst() as usize;
            oversize += (p.len() > 1500) as usize;
            let mut infinite_here = false;
            let mut mapped = false;
            for o in mptcp_opts(&p) {
                match (from_a, o) {
                    (false, MptcpOption::MpFail { dsn }) => mp_fail_dsn.push(dsn),
                    (true, MptcpOption::MpFail { dsn }) => echo_dsn.push(dsn),
                    (true, MptcpOption::Dss { mapping: Some(m), data_fin: false, .. }) => {
                        mapped = true;
                        if m.len == 0 {
                            infinite_here = true;
                            infinite_maps.push((m, pkt.tcp.seq, pkt.payload.len()));
                        }
                    }
                    _ => {}
                }
            }
            // From B's MP_FAIL until A's infinite mapping, every data
            // segment of A carries a mapping (its old one or the infinite one).
            if from_a && !pkt.payload.is_empty() && !mp_fail_dsn.is_empty() && infinite_maps.is_empty() && !mapped {
                unmapped.push(pkt.tcp.seq);
            }
            if drop_infinite_once && infinite_here && !dropped_infinite {
                dropped_infinite = true;
                return None;
            }
            // One payload byte of the 50th data segment rewritten, TCP
            // checksum fixed: only the DSS checksum can tell.
            data_segs += (from_a && pkt.payload.len() > 1000) as usize;
            if from_a && corrupted.is_none() && pkt.payload.len() > 1000 && data_segs == 50 {
                let mut payload = pkt.payload.to_vec();
                payload[100] ^= 0xff;
                let mut out = vec![0u8; 1600];
                let k = emit_tcp_packet(pkt.src, pkt.dst, pkt.ttl, &pkt.tcp, &payload, &mut out).unwrap();
                out.truncate(k);
                corrupted = Some(pkt.tcp.seq.wrapping_add(100));
                return Some(out);
            }
            Some(p)
        });
        got.extend(n.read_b(sh, &mut buf));
        reasons.0 = reasons.0.or(n.a.conn(h).and_then(|c| c.fallback_reason()));
        reasons.1 = reasons.1.or(n.b.conn(sh).and_then(|c| c.fallback_reason()));
        if got.len() == data.len() && n.b.recv_finished(sh) {
            break;
        }
    }
    assert!(corrupted.is_some());
    let (bc, ac) = (n.b.counters(), n.a.counters());
    assert_eq!(bc.mptcp_data_csum_err, 1, "{bc:?}");
    assert_eq!(bc.mptcp_mp_fail_tx, 1);
    assert_eq!(ac.mptcp_mp_fail_rx, 1, "the MP_FAIL reached the sender");
    assert_eq!(mp_fail_dsn.len(), 1, "one MP_FAIL: {mp_fail_dsn:?}");
    assert_eq!(
        reasons,
        (Some(FallbackReason::MpFailReceived), Some(FallbackReason::ChecksumFailed)),
        "the sender fell back on the MP_FAIL, the receiver on its checksum"
    );
    // The sender answers as Linux does (RFC 8684 3.7): MP_FAIL echoed, and
    // one infinite mapping on its next new data segment, at that segment's
    // own data and subflow sequence numbers (the stream is the subflow
    // there), repeated on a retransmission of that segment.
    assert_eq!(echo_dsn, mp_fail_dsn, "the MP_FAIL is echoed once");
    assert_eq!(ac.mptcp_infinite_map_tx, 1, "{ac:?}");
    assert!(bc.mptcp_infinite_map_rx >= 1, "{bc:?}");
    assert_eq!(infinite_maps.len(), 1 + drop_infinite_once as usize, "{infinite_maps:?}");
    assert_eq!(dropped_infinite, drop_infinite_once);
    assert!(infinite_maps.windows(2).all(|w| w[0] == w[1]), "the copy carries the same mapping: {infinite_maps:?}");
    let (m, seq, len) = infinite_maps[0];
    assert!(len > 0, "on a data segment");
    let rel = seq.wrapping_sub(iss);
    assert_eq!(m.ssn, rel, "at the segment's relative subflow sequence number");
    assert_eq!(m.checksum, Some(0), "checksum field 0, as Linux writes it");
    assert_eq!(m.dsn.wrapping_sub(n.a.conn(h).map_or(0, |c| c.tx.base().0)), u64::from(rel - 1), "{m:?}");
    assert!(unmapped.is_empty(), "data segments without a mapping before the infinite one: {unmapped:?}");
    assert_eq!(oversize, 0, "a packet exceeded the 1500-byte MTU");
    assert_eq!(rsts, 0, "no reset");
    assert_eq!(bc.mptcp_mp_rst_tx + ac.mptcp_mp_rst_tx, 0);
    assert!(n.b.conn(sh).is_none_or(|c| c.mode.infinite()), "the receiver fell back");
    assert_eq!(got.len(), data.len(), "every byte arrives, in place");
    assert!(n.b.recv_finished(sh), "the stream ends cleanly after the fallback");
    let diff: Vec<usize> = (0..data.len()).filter(|&i| got[i] != data[i]).collect();
    assert_eq!(diff.len(), 1, "exactly the rewritten byte differs: {diff:?}");
    let at = corrupted.unwrap().wrapping_sub(iss.wrapping_add(1)) as usize;
    assert_eq!(diff, [at], "the rewritten byte sits where TCP carried it");
}
