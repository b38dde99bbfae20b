//! etherparse as an independent oracle for the hand-written IP/TCP path:
//! what we emit, etherparse reads back identically (checksums included);
//! what etherparse builds, we read identically; and on corrupted packets,
//! whenever we accept, etherparse agrees on every field.

mod strategies;

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use mptun_wire::tcp::{TcpFlags, TcpHeader, TcpOptions};
use mptun_wire::{emit_tcp_packet, parse_tcp_packet, tcp_packet_len, TcpPacket};
use proptest::prelude::*;
use std::net::IpAddr;
use strategies::*;

/// Compares our parse of `pkt` with etherparse's, field by field.
fn agree(pkt: &[u8], ours: &TcpPacket<'_>) -> Result<(), TestCaseError> {
    let sp = SlicedPacket::from_ip(pkt).map_err(|e| TestCaseError::fail(format!("etherparse refused: {e:?}")))?;
    let (src, dst, ttl) = match sp.net.as_ref().unwrap() {
        NetSlice::Ipv4(v4) => {
            let h = v4.header();
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), h.ttl())
        }
        NetSlice::Ipv6(v6) => {
            let h = v6.header();
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), h.hop_limit())
        }
        NetSlice::Arp(_) => return Err(TestCaseError::fail("arp")),
    };
    prop_assert_eq!((src, dst, ttl), (ours.src, ours.dst, ours.ttl));
    let Some(TransportSlice::Tcp(t)) = sp.transport.as_ref() else {
        return Err(TestCaseError::fail("etherparse saw no TCP"));
    };
    let h = &ours.tcp;
    prop_assert_eq!(t.source_port(), h.src_port);
    prop_assert_eq!(t.destination_port(), h.dst_port);
    prop_assert_eq!(t.sequence_number(), h.seq);
    prop_assert_eq!(t.acknowledgment_number(), h.ack);
    prop_assert_eq!(t.window_size(), h.window);
    prop_assert_eq!(t.checksum(), h.checksum);
    prop_assert_eq!(t.urgent_pointer(), h.urgent);
    prop_assert_eq!(t.options(), h.options.as_bytes());
    let flags = [
        (t.fin(), h.flags.fin()),
        (t.syn(), h.flags.syn()),
        (t.rst(), h.flags.rst()),
        (t.psh(), h.flags.psh()),
        (t.ack(), h.flags.ack()),
        (t.urg(), h.flags.contains(TcpFlags::URG)),
        (t.ece(), h.flags.contains(TcpFlags::ECE)),
        (t.cwr(), h.flags.contains(TcpFlags::CWR)),
    ];
    for (a, b) in flags {
        prop_assert_eq!(a, b);
    }
    prop_assert_eq!(t.payload(), ours.payload);
    // etherparse's own checksum computation agrees with the field we accepted.
    let expect = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => t.calc_checksum_ipv4(s.octets(), d.octets()).unwrap(),
        (IpAddr::V6(s), IpAddr::V6(d)) => t.calc_checksum_ipv6(s.octets(), d.octets()).unwrap(),
        _ => unreachable!(),
    };
    prop_assert_eq!(expect, h.checksum);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn etherparse_reads_what_we_emit(
        (src, dst) in arb_ip_pair(), ttl in any::<u8>(), h in arb_header(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut buf = vec![0u8; tcp_packet_len(src, &h, payload.len())];
        let n = emit_tcp_packet(src, dst, ttl, &h, &payload, &mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        let ours = parse_tcp_packet(&buf).unwrap();
        agree(&buf, &ours)?;
        let sp = SlicedPacket::from_ip(&buf).unwrap();
        if let Some(NetSlice::Ipv4(v4)) = sp.net.as_ref() {
            let ih = v4.header();
            prop_assert!(ih.dont_fragment());
            prop_assert_eq!(ih.identification(), 0);
            prop_assert_eq!(ih.to_header().calc_header_checksum(), ih.header_checksum());
        }
    }

    #[test]
    fn we_read_what_etherparse_builds(
        (src, dst) in arb_ip_pair(), ttl in any::<u8>(), h in arb_header(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let b = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), ttl),
            (IpAddr::V6(s), IpAddr::V6(d)) => PacketBuilder::ipv6(s.octets(), d.octets(), ttl),
            _ => unreachable!(),
        };
        let mut th = etherparse::TcpHeader::new(h.src_port, h.dst_port, h.seq, h.window);
        th.acknowledgment_number = h.ack;
        th.fin = h.flags.fin();
        th.syn = h.flags.syn();
        th.rst = h.flags.rst();
        th.psh = h.flags.psh();
        th.ack = h.flags.ack();
        th.urg = h.flags.contains(TcpFlags::URG);
        th.ece = h.flags.contains(TcpFlags::ECE);
        th.cwr = h.flags.contains(TcpFlags::CWR);
        th.urgent_pointer = h.urgent;
        th.set_options_raw(h.options.as_bytes()).unwrap();
        let mut pkt = Vec::new();
        b.tcp_header(th).write(&mut pkt, &payload).unwrap();
        let ours = parse_tcp_packet(&pkt).unwrap();
        agree(&pkt, &ours)?;
        prop_assert_eq!(ours.payload, &payload[..]);
        let mut expect = h.clone();
        expect.checksum = ours.tcp.checksum;
        prop_assert_eq!(ours.tcp, expect);
    }

    #[test]
    fn corrupted_packets_we_accept_etherparse_agrees_on(
        (src, dst) in arb_ip_pair(), h in arb_header(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<proptest::sample::Index>(),
        fix_csum in any::<bool>(),
    ) {
        let mut buf = vec![0u8; tcp_packet_len(src, &h, payload.len())];
        emit_tcp_packet(src, dst, 64, &h, &payload, &mut buf).unwrap();
        for (i, v) in flips {
            let i = i.index(buf.len());
            buf[i] = v;
        }
        buf.truncate(cut.index(buf.len() + 1).max(buf.len() / 2));
        // Corruption of the checksums alone would hide everything else.
        if fix_csum {
            if let Ok(p) = mptun_wire::parse_tcp_packet_unverified(&buf) {
                let hl = buf.len() - p.payload.len() - p.tcp.header_len();
                let seg_len = p.tcp.header_len() + p.payload.len();
                let c = mptun_wire::checksum::tcp_checksum(p.src, p.dst, &buf[hl..hl + seg_len]);
                buf[hl + 16..hl + 18].copy_from_slice(&c.to_be_bytes());
            }
        }
        if let Ok(p) = parse_tcp_packet(&buf) {
            agree(&buf, &p)?;
        }
    }
}

#[test]
fn builders_emit_what_etherparse_decodes_as_options() {
    // Cross-check the option layout with etherparse's own option iterator.
    let full = mptun_wire::MptcpOption::Dss {
        data_ack: Some(mptun_wire::DataAck { ack: 7, ack64: true }),
        mapping: Some(mptun_wire::DssMapping { dsn: 9, dsn64: true, ssn: 1, len: 100, checksum: None }),
        data_fin: false,
    };
    // TS (12) + full DSS (26 + 2 NOPs) use all 40 bytes: SACK is dropped, as Linux does.
    let o = TcpOptions::established(Some((11, 12)), &[(100, 200)], std::slice::from_ref(&full)).unwrap();
    assert_eq!(o.len(), 40);
    assert!(o.summary().sack.is_empty());
    let ack_only = mptun_wire::MptcpOption::Dss {
        data_ack: Some(mptun_wire::DataAck { ack: 7, ack64: true }),
        mapping: None,
        data_fin: false,
    };
    let mut h = TcpHeader::new(1, 2, 3, 4, TcpFlags::ACK, 5);
    h.options = TcpOptions::established(Some((11, 12)), &[(100, 200), (300, 400), (500, 600)], &[ack_only]).unwrap();
    let mut buf = [0u8; 100];
    let (s, d): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let n = emit_tcp_packet(s, d, 64, &h, &[], &mut buf).unwrap();
    let sp = SlicedPacket::from_ip(&buf[..n]).unwrap();
    let Some(TransportSlice::Tcp(t)) = sp.transport else { panic!() };
    use etherparse::TcpOptionElement as E;
    // etherparse does not know kind 30: it reports it and stops there.
    let els: Vec<_> = t.options_iterator().collect();
    assert_eq!(
        els,
        [
            Ok(E::Noop),
            Ok(E::Noop),
            Ok(E::Timestamp(11, 12)),
            Ok(E::Noop),
            Ok(E::Noop),
            // 40 - 12 (TS) - 12 (DSS ack64) leaves room for one block.
            Ok(E::SelectiveAcknowledgement((100, 200), [None, None, None])),
            Err(etherparse::TcpOptionReadError::UnknownId(30)),
        ]
    );
}
