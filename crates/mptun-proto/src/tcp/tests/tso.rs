//! TCP segmentation offload: super-segments are the wire segments a
//! subflow without TSO sends, behind one header, and everything counted in
//! packets (cwnd, the scoreboard, SACK) still counts wire segments.

use super::seg::*;

const S: u32 = ISS + 1;
const R: u32 = IRS + 1;
const M: u32 = MSS as u32;

/// Every wire segment sent now, with TSO (a 64 KiB buffer) and how many
/// packets carried them.
fn drain_gso(t: &mut Sf) -> (Vec<Seg>, usize) {
    let mut segs = Vec::new();
    let mut packets = 0;
    while let Some((_, s)) = t.recv_gso() {
        segs.extend(s);
        packets += 1;
        assert!(packets < 10_000);
    }
    (segs, packets)
}

#[test]
fn super_segments_cut_into_exactly_the_segments_sent_without_tso() {
    for peer in [PLAIN, FULL] {
        let mut plain = Sf::client(TcpConfig { tso: false, ..cfg() }, peer);
        let mut tso = Sf::client(cfg(), peer);
        let d = bytes(30 * 1460 + 123);
        plain.write(&d);
        tso.write(&d);
        let want = plain.recv_all();
        let (got, packets) = drain_gso(&mut tso);
        assert_eq!(got, want);
        assert_eq!(want.len(), 10, "the initial window, in wire segments");
        assert!(packets < want.len(), "{packets} packets for {} segments", want.len());
        // The ACK of the first four releases more, again the same segments.
        for t in [&mut plain, &mut tso] {
            let ts = if peer.ts { Some((PEER_TS, t.ms())) } else { None };
            t.send(Seg { seq: R, ack: S + 4 * want[0].payload.len() as u32, window: 65535, ts, ..SEG });
        }
        let want = plain.recv_all();
        let (got, _) = drain_gso(&mut tso);
        assert!(!want.is_empty());
        assert_eq!(got, want);
        assert_eq!(tso.sf.info().packets_out, plain.sf.info().packets_out, "in flight counts wire segments");
        assert_eq!(tso.sf.counters().tcp_out_segs, plain.sf.counters().tcp_out_segs);
    }
}

#[test]
fn a_gathered_payload_makes_the_packets_a_copied_one_does() {
    for peer in [PLAIN, FULL] {
        let offload = TcpConfig { checksum_offload: true, ..cfg() };
        let mut copied = Sf::client(offload.clone(), peer);
        let mut gathered = Sf::client(TcpConfig { gather_payload: true, ..offload }, peer);
        // Three large writes, then more small ones than a tail has pieces.
        let d = bytes(40 * 1460);
        let mut cuts = vec![0, 9_000, 20_000, 30_000];
        cuts.extend((0..12).map(|i| 30_000 + 100 * (i + 1)));
        cuts.push(d.len());
        for w in cuts.windows(2) {
            copied.write(&d[w[0]..w[1]]);
            gathered.write(&d[w[0]..w[1]]);
        }
        let (mut tails, mut whole, mut sent) = (0, 0, 0u32);
        for _ in 0..20 {
            let a = copied.recv_packet(mptun_wire::gso::GSO_MAX_SIZE);
            let b = gathered.recv_packet(mptun_wire::gso::GSO_MAX_SIZE);
            let (Some((ta, pa)), Some((tb, pb))) = (a, b) else {
                // Both out of window (or done) at once: acknowledge
                // everything sent, as the peer would.
                for t in [&mut copied, &mut gathered] {
                    let ts = if peer.ts { Some((PEER_TS, t.ms())) } else { None };
                    t.send(Seg { seq: R, ack: S + sent, window: 65535, ts, ..SEG });
                }
                continue;
            };
            assert_eq!(pa, pb, "the same packet on the wire");
            assert!(ta.tail.is_empty());
            assert_eq!(tb.packet_len(), pb.len());
            sent += mptun_wire::gso::Layout::parse(&pb).unwrap().payload_len() as u32;
            if tb.tail.is_empty() {
                whole += 1;
            } else {
                tails += 1;
            }
        }
        assert_eq!(sent, d.len() as u32, "everything was sent");
        assert!(tails > 0, "the payloads went out as tails");
        assert!(whole > 0, "the one over more than {TAIL_PARTS} writes was copied");
    }
}

/// ESTABLISHED as [`Sf::client`] with a plain peer, over a path of `rtt`.
fn client_with_rtt(rtt: Duration) -> Sf {
    let mut t = Sf::connect(cfg());
    t.recv().expect("a SYN");
    t.advance(rtt);
    t.send(Seg { ack: ISS + 1, flags: SYN | ACK, ..Sf::peer_syn(PLAIN) });
    t.recv().expect("the handshake's ACK");
    t.events();
    t
}

#[test]
fn a_super_segment_is_a_millisecond_of_the_pacing_rate_and_at_least_two_segments() {
    // 10 ms: IW10 at 200 % is 2.9 MB/s, 2.8 kB a millisecond: the minimum of 2.
    let mut t = client_with_rtt(Duration::from_millis(10));
    let rate = t.sf.pacing_rate();
    assert!((rate >> 10) / 1460 < 2, "{rate}");
    t.write(&bytes(100 * 1460));
    let (tr, segs) = t.recv_gso().unwrap();
    assert_eq!((tr.segment_size, segs.len()), (Some(1460), 2));
    assert!(segs.iter().all(|s| s.payload.len() == 1460 && !s.flags.contains(PSH)));
    // 1 ms: 29 MB/s, 28 kB a millisecond (19 segments), but tcp_cwnd_test
    // keeps two super-segments in flight: half of the initial window.
    let mut t = client_with_rtt(Duration::from_millis(1));
    t.write(&bytes(100 * 1460));
    let (_, segs) = t.recv_gso().unwrap();
    assert_eq!(segs.len(), 5);
    assert_eq!(segs[4].seq, S + 4 * M);
    let (_, segs) = t.recv_gso().unwrap();
    assert_eq!(segs.len(), 5, "the other half");
    assert!(t.recv_gso().is_none(), "the window is full");
    assert_eq!(t.sf.info().packets_out, 10);
}

#[test]
fn the_tail_of_the_data_carries_psh_and_fin_on_its_last_segment_only() {
    let mut t = client_with_rtt(Duration::from_micros(100));
    let d = bytes(3 * 1460 + 10);
    t.write(&d);
    t.sf.close();
    let (tr, segs) = t.recv_gso().unwrap();
    assert_eq!(tr.segment_size, Some(1460));
    assert_eq!(segs.len(), 4);
    for (i, s) in segs.iter().enumerate() {
        let last = i == 3;
        assert_eq!(s.flags.fin(), last, "{s:?}");
        assert_eq!(s.flags.contains(PSH), last, "{s:?}");
    }
    assert_eq!(segs[3].payload.len(), 10);
    assert_eq!(segs.iter().flat_map(|s| s.payload.clone()).collect::<Vec<_>>(), d);
    assert_eq!(t.sf.snd_nxt().0, S + d.len() as u32 + 1);
    assert!(t.recv_gso().is_none());
}

#[test]
fn a_window_edge_cuts_at_a_whole_segment_and_the_rest_follows_alone() {
    let mut t = client_with_rtt(Duration::from_micros(100));
    // The peer's window: 2.5 segments.
    t.send(Seg { seq: R, ack: S, window: (M * 5 / 2) as u16, ..SEG });
    t.write(&bytes(10 * 1460));
    let (tr, segs) = t.recv_gso().unwrap();
    assert_eq!((tr.segment_size, segs.len()), (Some(1460), 2));
    let (tr, segs) = t.recv_gso().unwrap();
    assert_eq!((tr.segment_size, segs.len(), segs[0].payload.len()), (None, 1, 730));
    assert!(t.recv_gso().is_none());
}

#[test]
fn a_lost_piece_of_a_super_segment_is_retransmitted_alone() {
    let mut t = Sf::client(cfg(), FULL);
    t.write(&bytes(10 * 1460));
    let (segs, packets) = drain_gso(&mut t);
    assert_eq!((segs.len(), packets), (10, 5), "2 segments a packet at a 10 ms RTT");
    let m = segs[0].payload.len() as u32;
    // The second segment is lost: SACKs for the rest.
    for k in 3..=5u32 {
        t.send(Seg {
            seq: R,
            ack: S + m,
            window: 65535,
            ts: Some((PEER_TS, t.ms())),
            sack: vec![(S + 2 * m, S + k * m)],
            ..SEG
        });
    }
    let (tr, segs) = t.recv_gso().expect("a fast retransmit");
    assert_eq!(tr.segment_size, None);
    assert_eq!((segs[0].seq, segs[0].payload.len() as u32), (S + m, m));
    assert_eq!(t.sf.counters().tcp_retrans_segs, 1);
}

#[test]
fn an_mtu_sized_buffer_or_tso_off_gives_wire_segments() {
    let mut t = Sf::established();
    t.write(&bytes(10 * 1460));
    // The buffer of `recv` holds one wire segment: no super-segments.
    let segs = t.recv_all();
    assert_eq!(segs.len(), 10);
    let mut off = Sf::client(TcpConfig { tso: false, ..cfg() }, PLAIN);
    off.write(&bytes(10 * 1460));
    let (segs, packets) = drain_gso(&mut off);
    assert_eq!((segs.len(), packets), (10, 10));
}
