//! Option negotiation and use: MSS, timestamps (RFC 7323 3-5), SACK
//! (RFC 2018).

use super::seg::*;

const S: u32 = ISS + 1;
const R: u32 = IRS + 1;

#[test]
fn handshake_ack_carries_a_timestamp_when_both_sides_agree() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    t.advance(Duration::from_millis(10));
    send!(t, seq: IRS, ack: S, flags: SYN | ACK, window: 65535, mss: Some(MSS), ws: Some(7), sack_perm: true,
        ts: Some((PEER_TS, T0 as u32)));
    recv!(t, seq: S, ack: R, ts: Some((T0 as u32 + 10, PEER_TS)));
}

#[test]
fn data_carries_timestamps_when_negotiated() {
    let mut t = Sf::client(cfg(), FULL);
    t.advance(Duration::from_millis(5));
    t.write(b"abc");
    recv!(t, seq: S, ack: R, flags: ACK | PSH, ts: Some((t.ms(), PEER_TS)), payload: b"abc".to_vec());
}

#[test]
fn no_timestamps_when_the_peer_does_not_offer_them() {
    let mut t = Sf::client(cfg(), PeerOpts { ts: false, ..FULL });
    t.write(b"abc");
    recv!(t, seq: S, ack: R, flags: ACK | PSH, payload: b"abc".to_vec());
}

#[test]
fn no_timestamps_when_disabled_locally() {
    let mut t = Sf::connect(TcpConfig { timestamps: false, ..cfg() });
    let syn = t.recv().unwrap();
    assert_eq!(syn.ts, None);
    send!(t, seq: IRS, ack: S, flags: SYN | ACK, window: 65535, mss: Some(MSS), ts: Some((PEER_TS, 0)));
    recv!(t, seq: S, ack: R);
}

#[test]
fn timestamps_cost_twelve_bytes_of_mss() {
    let mut t = Sf::client(cfg(), FULL);
    assert_eq!(t.sf.mss(0), 1448);
    t.write(&bytes(3000));
    let lens: Vec<_> = t.recv_all().iter().map(|s| s.payload.len()).collect();
    assert_eq!(lens, [1448, 1448, 104]);
}

#[test]
fn timestamp_echo_follows_in_order_segments() {
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, payload: bytes(10), ts: Some((PEER_TS + 7, T0 as u32)));
    recv!(t, seq: S, ack: R + 10, window: WIN - 10, ts: Some((t.ms(), PEER_TS + 7)));
}

#[test]
fn timestamp_echo_ignores_out_of_order_segments() {
    // RFC 7323 4.3: TS.Recent only from a segment at or before Last.ACK.sent.
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R + 100, ack: S, payload: bytes(10), ts: Some((PEER_TS + 9, T0 as u32)));
    recv!(t, seq: S, ack: R, ts: Some((t.ms(), PEER_TS)), sack: vec![(R + 100, R + 110)]);
}

#[test]
fn paws_drops_a_segment_with_an_old_timestamp() {
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, payload: bytes(10), ts: Some((PEER_TS + 100, T0 as u32)));
    t.recv_all();
    send!(t, seq: R + 10, ack: S, payload: bytes(10), ts: Some((PEER_TS + 50, T0 as u32)));
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S, ack: R + 10, window: WIN - 10, ts: Some((t.ms(), PEER_TS + 100)));
    recv_nothing!(t);
    assert_eq!(t.sf.recv_ready(), 10);
    assert_eq!(t.sf.counters().tcp_ext_paws_estab, 1);
}

#[test]
fn paws_lets_a_timestamp_one_tick_old_through() {
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, payload: bytes(10), ts: Some((PEER_TS + 100, T0 as u32)));
    t.recv_all();
    send!(t, seq: R + 10, ack: S, payload: bytes(10), ts: Some((PEER_TS + 99, T0 as u32)));
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    assert_eq!(t.sf.recv_ready(), 20);
    // ts_recent never moves back: the echo stays the newest value.
    recv!(t, seq: S, ack: R + 20, window: WIN - 20, ts: Some((t.ms(), PEER_TS + 100)));
}

#[test]
fn paws_duplicate_acks_for_bare_segments_are_rate_limited() {
    let mut t = Sf::client(cfg(), FULL);
    let old = Some((PEER_TS - 10_000, T0 as u32));
    send!(t, seq: R, ack: S, window: 1000, ts: old);
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S, ack: R, ts: Some((t.ms(), PEER_TS)));
    send!(t, seq: R, ack: S, window: 1000, ts: old);
    recv_nothing!(t);
    let c = t.sf.counters();
    assert_eq!((c.tcp_ext_paws_estab, c.tcp_ext_tcp_ack_skipped_paws), (2, 1));
}

#[test]
fn paws_lets_a_disordered_duplicate_ack_through() {
    // Two pure ACKs for the same data, swapped on the way (Linux
    // tcp_disordered_ack): the older timestamp, within an RTO, is no threat.
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, ts: Some((PEER_TS + 101, T0 as u32)));
    send!(t, seq: R, ack: S, ts: Some((PEER_TS + 100, T0 as u32)));
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_paws_estab, 0);
}

#[test]
fn paws_does_not_apply_to_rst() {
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, payload: bytes(10), ts: Some((PEER_TS + 100, T0 as u32)));
    t.recv_all();
    send!(t, seq: R + 10, flags: RST, window: 0, ts: Some((PEER_TS + 50, 0)));
    assert_eq!(t.verdict, Some(Verdict::Reset));
    assert_eq!(t.state(), State::Closed);
}

#[test]
fn paws_forgets_a_timestamp_24_days_old() {
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, payload: bytes(10), ts: Some((PEER_TS + 100, T0 as u32)));
    t.recv_all();
    t.advance(Duration::from_secs(24 * 24 * 3600 - 1));
    send!(t, seq: R + 10, ack: S, payload: bytes(10), ts: Some((PEER_TS + 50, T0 as u32)));
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    t.recv_all();
    t.advance(Duration::from_secs(1));
    send!(t, seq: R + 10, ack: S, payload: bytes(10), ts: Some((PEER_TS + 50, T0 as u32)));
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    assert_eq!(t.sf.recv_ready(), 20);
    recv!(t, seq: S, ack: R + 20, window: WIN - 20, ts: Some((t.ms(), PEER_TS + 50)));
}

#[test]
fn sack_block_for_out_of_order_data() {
    let mut t = Sf::client(cfg(), FULL);
    let ts = Some((PEER_TS + 1, T0 as u32));
    send!(t, seq: R + 1000, ack: S, payload: bytes(500), ts: ts);
    recv!(t, seq: S, ack: R, ts: Some((t.ms(), PEER_TS)), sack: vec![(R + 1000, R + 1500)]);
}

#[test]
fn sack_blocks_most_recent_first() {
    let mut t = Sf::client(cfg(), FULL);
    let ts = Some((PEER_TS + 1, T0 as u32));
    send!(t, seq: R + 1000, ack: S, payload: bytes(500), ts: ts);
    t.recv_all();
    send!(t, seq: R + 2000, ack: S, payload: bytes(500), ts: ts);
    recv!(t, seq: S, ack: R, ts: Some((t.ms(), PEER_TS)),
        sack: vec![(R + 2000, R + 2500), (R + 1000, R + 1500)]);
}

#[test]
fn adjacent_sack_blocks_merge() {
    let mut t = Sf::client(cfg(), FULL);
    let ts = Some((PEER_TS + 1, T0 as u32));
    send!(t, seq: R + 1000, ack: S, payload: bytes(500), ts: ts);
    send!(t, seq: R + 2000, ack: S, payload: bytes(500), ts: ts);
    t.recv_all();
    send!(t, seq: R + 1500, ack: S, payload: bytes(500), ts: ts);
    recv!(t, seq: S, ack: R, ts: Some((t.ms(), PEER_TS)), sack: vec![(R + 1000, R + 2500)]);
}

#[test]
fn filling_the_hole_acks_everything_without_sack() {
    let mut t = Sf::client(cfg(), FULL);
    let ts = Some((PEER_TS + 1, T0 as u32));
    send!(t, seq: R + 1000, ack: S, payload: bytes(500), ts: ts);
    t.recv_all();
    send!(t, seq: R, ack: S, payload: bytes(1000), ts: ts);
    recv!(t, seq: S, ack: R + 1500, window: WIN - 1500, ts: Some((t.ms(), PEER_TS + 1)));
}

#[test]
fn at_most_three_sack_blocks_beside_timestamps() {
    let mut t = Sf::client(cfg(), FULL);
    let ts = Some((PEER_TS + 1, T0 as u32));
    for i in 1..=4u32 {
        send!(t, seq: R + 1000 * i, ack: S, payload: bytes(100), ts: ts);
        t.recv_all();
    }
    send!(t, seq: R + 5000, ack: S, payload: bytes(100), ts: ts);
    let ack = t.recv().unwrap();
    assert_eq!(ack.sack, vec![(R + 5000, R + 5100), (R + 4000, R + 4100), (R + 3000, R + 3100)]);
}

#[test]
fn four_sack_blocks_without_timestamps() {
    let mut t = Sf::client(cfg(), PeerOpts { ts: false, ..FULL });
    for i in 1..=4u32 {
        send!(t, seq: R + 1000 * i, ack: S, payload: bytes(100));
        t.recv_all();
    }
    send!(t, seq: R + 5000, ack: S, payload: bytes(100));
    recv!(t, seq: S, ack: R,
        sack: vec![(R + 5000, R + 5100), (R + 4000, R + 4100), (R + 3000, R + 3100), (R + 2000, R + 2100)]);
}

#[test]
fn no_sack_without_the_peer_permission() {
    let mut t = Sf::client(cfg(), PeerOpts { sack_perm: false, ts: false, ..FULL });
    send!(t, seq: R + 1000, ack: S, payload: bytes(500));
    recv!(t, seq: S, ack: R);
}

#[test]
fn no_sack_when_disabled_locally() {
    let mut t = Sf::client(TcpConfig { sack: false, timestamps: false, ..cfg() }, FULL);
    send!(t, seq: R + 1000, ack: S, payload: bytes(500));
    recv!(t, seq: S, ack: R);
}

/// D-SACK (RFC 2883, Linux `tcp_dsack_set`): a duplicate is reported once
/// as the first SACK block of the next ACK, so the sender learns that its
/// retransmission was spurious (and widens its reordering window) instead
/// of taking the next reordering for a loss again.
#[test]
fn duplicate_data_is_reported_once_as_a_d_sack_block() {
    // Wholly old: below rcv_nxt.
    let mut t = Sf::client(cfg(), FULL);
    let ts = Some((PEER_TS + 1, T0 as u32));
    send!(t, seq: R, ack: S, payload: bytes(1000), ts: ts);
    t.recv_all();
    send!(t, seq: R, ack: S, payload: bytes(1000), ts: ts);
    recv!(t, seq: S, ack: R + 1000, window: WIN - 1000, ts: Some((t.ms(), PEER_TS + 1)), sack: vec![(R, R + 1000)]);
    assert_eq!(t.sf.counters().tcp_ext_tcp_dsack_old_sent, 1);
    // Once: the next ACK has no block.
    send!(t, seq: R + 1000, ack: S, payload: bytes(500), ts: ts);
    t.advance(Duration::from_millis(200));
    recv!(t, seq: S, ack: R + 1500, window: WIN - 1500, ts: Some((t.ms(), PEER_TS + 1)));

    // Partly old (seq < rcv_nxt < end): the old part, with the new data's ACK.
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, payload: bytes(1000), ts: ts);
    t.recv_all();
    send!(t, seq: R + 500, ack: S, payload: bytes(1000), ts: ts);
    recv!(t, seq: S, ack: R + 1500, window: WIN - 1500, ts: Some((t.ms(), PEER_TS + 1)), sack: vec![(R + 500, R + 1000)]);

    // Already held out of order: the duplicate first, then the range it lies in.
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R + 1000, ack: S, payload: bytes(500), ts: ts);
    t.recv_all();
    send!(t, seq: R + 1000, ack: S, payload: bytes(500), ts: ts);
    recv!(t, seq: S, ack: R, ts: Some((t.ms(), PEER_TS)), sack: vec![(R + 1000, R + 1500), (R + 1000, R + 1500)]);
    assert_eq!(t.sf.counters().tcp_ext_tcp_dsack_ofo_sent, 1);

    // Without SACK agreed, no option at all.
    let mut t = Sf::client(cfg(), PLAIN);
    send!(t, seq: R, ack: S, payload: bytes(1000));
    t.recv_all();
    send!(t, seq: R, ack: S, payload: bytes(1000));
    recv!(t, seq: S, ack: R + 1000, window: WIN - 1000);
    assert_eq!(t.sf.counters().tcp_ext_tcp_dsack_old_sent, 0);
}
