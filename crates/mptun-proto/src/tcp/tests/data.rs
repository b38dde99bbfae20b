//! Data transfer: segmentation, initial window, delayed and quick ACKs,
//! retransmission on RTO (RFC 6298), fast retransmit (RFC 5681 3.2, RFC 6675),
//! Nagle.

use super::seg::*;

const S: u32 = ISS + 1;
const R: u32 = IRS + 1;
const M: u32 = MSS as u32;

#[test]
fn a_small_write_goes_out_as_one_pushed_segment() {
    let mut t = Sf::established();
    t.write(b"hello");
    recv!(t, seq: S, ack: R, flags: ACK | PSH, payload: b"hello".to_vec());
    recv_nothing!(t);
    assert_eq!(t.sf.snd_nxt().0, S + 5);
}

#[test]
fn a_large_write_is_cut_at_the_mss_with_psh_on_the_last_segment() {
    let mut t = Sf::established();
    let d = bytes(3000);
    t.write(&d);
    recv!(t, seq: S, ack: R, payload: d[..1460].to_vec());
    recv!(t, seq: S + M, ack: R, payload: d[1460..2920].to_vec());
    recv!(t, seq: S + 2 * M, ack: R, flags: ACK | PSH, payload: d[2920..].to_vec());
    recv_nothing!(t);
}

#[test]
fn the_initial_window_is_ten_segments() {
    let mut t = Sf::established();
    t.write(&bytes(20 * 1460));
    let segs = t.recv_all();
    assert_eq!(segs.len(), 10);
    for (i, s) in segs.iter().enumerate() {
        assert_eq!((s.seq, s.payload.len()), (S + i as u32 * M, 1460));
    }
}

#[test]
fn acks_in_slow_start_release_new_segments() {
    let mut t = Sf::established();
    t.write(&bytes(20 * 1460));
    t.recv_all();
    send!(t, seq: R, ack: S + 2 * M, window: 65535);
    let segs = t.recv_all();
    assert!(segs.len() >= 2, "{segs:?}");
    assert_eq!(segs[0].seq, S + 10 * M);
    assert_eq!(segs[1].seq, S + 11 * M);
}

#[test]
fn in_order_data_is_acked_at_once_in_quickack_mode() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, payload: bytes(100));
    recv!(t, seq: S, ack: R + 100, window: WIN - 100);
    assert_eq!(t.sf.poll_timeout(), None);
}

/// Uses up the quick ACKs left after the handshake with one-byte segments
/// (read at once); returns the next expected sequence number.
fn end_quickack(t: &mut Sf) -> u32 {
    let mut r = R;
    for _ in 0..15 {
        send!(t, seq: r, ack: S, payload: vec![1]);
        r += 1;
        recv!(t, seq: S, ack: r, window: WIN - 1);
        t.read();
    }
    r
}

#[test]
fn after_quickack_a_small_segment_is_acked_by_the_delayed_ack_timer() {
    let mut t = Sf::established();
    let r = end_quickack(&mut t);
    send!(t, seq: r, ack: S, payload: bytes(10));
    recv_nothing!(t);
    assert_eq!(t.fire_timer(), Duration::from_millis(40));
    recv!(t, seq: S, ack: r + 10, window: WIN - 10);
    assert_eq!(t.sf.counters().tcp_ext_delayed_acks, 1);
}

#[test]
fn after_quickack_every_second_full_segment_is_acked_at_once() {
    let mut t = Sf::established();
    let r = end_quickack(&mut t);
    send!(t, seq: r, ack: S, payload: bytes(1460));
    recv_nothing!(t);
    send!(t, seq: r + M, ack: S, payload: bytes(1460));
    recv!(t, seq: S, ack: r + 2 * M, window: WIN - 2 * MSS);
}

#[test]
fn a_delayed_ack_rides_on_data() {
    let mut t = Sf::established();
    let r = end_quickack(&mut t);
    send!(t, seq: r, ack: S, payload: bytes(10));
    t.write(b"reply");
    recv!(t, seq: S, ack: r + 10, window: WIN - 10, flags: ACK | PSH, payload: b"reply".to_vec());
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_delayed_acks, 0);
}

#[test]
fn out_of_order_data_is_acked_at_once_even_after_quickack() {
    let mut t = Sf::established();
    let r = end_quickack(&mut t);
    send!(t, seq: r + 100, ack: S, payload: bytes(10));
    // The right edge stays where the last ACK put it (one byte read late).
    recv!(t, seq: S, ack: r, window: WIN - 1);
}

#[test]
fn rto_retransmits_the_first_unacked_segment() {
    let mut t = Sf::established();
    t.write(b"hello");
    t.recv().unwrap();
    let rto = t.sf.info().rto;
    assert_eq!(t.fire_timer(), rto);
    // (The retransmission does not repeat PSH: the flag is not kept per segment.)
    recv!(t, seq: S, ack: R, payload: b"hello".to_vec());
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_tcp_timeouts, 1);
    assert_eq!(t.sf.counters().tcp_retrans_segs, 1);
}

#[test]
fn rto_backs_off_exponentially() {
    let mut t = Sf::established();
    t.write(b"hello");
    t.recv().unwrap();
    let d1 = t.fire_timer();
    t.recv().unwrap();
    let d2 = t.fire_timer();
    t.recv().unwrap();
    let d3 = t.fire_timer();
    assert_eq!((d2, d3), (d1 * 2, d1 * 4));
    assert_eq!(t.sf.rto_streak(), 3);
}

#[test]
fn rto_collapses_the_window_to_one_segment() {
    let mut t = Sf::established();
    t.write(&bytes(5 * 1460));
    assert_eq!(t.recv_all().len(), 5);
    t.fire_timer();
    let segs = t.recv_all();
    assert_eq!(segs.len(), 1);
    assert_eq!((segs[0].seq, segs[0].payload.len()), (S, 1460));
    assert_eq!(t.sf.info().cwnd, 1);
    assert_eq!(t.sf.ca_state(), CaState::Loss);
}

#[test]
fn after_rto_each_ack_releases_the_next_lost_segment() {
    let mut t = Sf::established();
    t.write(&bytes(5 * 1460));
    t.recv_all();
    t.fire_timer();
    t.recv_all();
    send!(t, seq: R, ack: S + M, window: 65535);
    let segs = t.recv_all();
    assert_eq!(segs[0].seq, S + M);
    assert_eq!(segs[0].payload.len(), 1460);
}

#[test]
fn an_ack_resets_the_backoff() {
    let mut t = Sf::established();
    t.write(&bytes(2000));
    t.recv_all();
    t.fire_timer();
    t.recv_all();
    send!(t, seq: R, ack: S + M, window: 65535);
    assert_eq!(t.sf.rto_streak(), 0);
}

#[test]
fn retransmissions_give_up_after_max_retries() {
    let mut t = Sf::client(TcpConfig { max_retries: 2, ..cfg() }, PLAIN);
    t.write(b"x");
    t.recv().unwrap();
    for _ in 0..2 {
        t.fire_timer();
        t.recv().unwrap();
    }
    t.fire_timer();
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::TimedOut]);
}

#[test]
fn three_duplicate_acks_trigger_fast_retransmit() {
    let mut t = Sf::established();
    t.write(&bytes(6 * 1460));
    assert_eq!(t.recv_all().len(), 6);
    for _ in 0..2 {
        send!(t, seq: R, ack: S, window: 65535);
        recv_nothing!(t);
    }
    send!(t, seq: R, ack: S, window: 65535);
    recv!(t, seq: S, ack: R, payload: bytes(6 * 1460)[..1460].to_vec());
    assert_eq!(t.sf.counters().tcp_ext_tcp_fast_retrans, 1);
    assert_eq!(t.sf.counters().tcp_ext_tcp_reno_recovery, 1);
    assert_eq!(t.sf.ca_state(), CaState::Recovery);
}

#[test]
fn a_window_change_is_not_a_duplicate_ack() {
    let mut t = Sf::established();
    t.write(&bytes(6 * 1460));
    t.recv_all();
    for w in [65000, 64000, 63000] {
        send!(t, seq: R, ack: S, window: w);
    }
    recv_nothing!(t);
    assert_eq!(t.sf.ca_state(), CaState::Open);
}

#[test]
fn sack_of_three_segments_above_a_hole_retransmits_the_hole() {
    let mut t = Sf::client(cfg(), FULL);
    let d = bytes(6 * 1448);
    t.write(&d);
    assert_eq!(t.recv_all().len(), 6);
    let ts = Some((PEER_TS + 1, T0 as u32 + 10));
    send!(t, seq: R, ack: S, window: 500, ts: ts, sack: vec![(S + 1448, S + 4 * 1448)]);
    recv!(t, seq: S, ack: R, ts: Some((t.ms(), PEER_TS + 1)), payload: d[..1448].to_vec());
    assert_eq!(t.sf.counters().tcp_ext_tcp_sack_recovery, 1);
    assert_eq!(t.sf.info().sacked_out, 3);
}

#[test]
fn a_full_ack_ends_recovery() {
    let mut t = Sf::established();
    t.write(&bytes(6 * 1460));
    t.recv_all();
    for _ in 0..3 {
        send!(t, seq: R, ack: S, window: 65535);
    }
    t.recv_all();
    send!(t, seq: R, ack: S + 6 * M, window: 65535);
    assert_eq!(t.sf.ca_state(), CaState::Open);
    assert_eq!(t.sf.snd_una().0, S + 6 * M);
    assert_eq!(t.sf.poll_timeout(), None);
}

#[test]
fn rto_and_loss_probe_due_together_send_one_segment() {
    let mut t = Sf::client(cfg(), FULL);
    t.write(b"hello");
    t.recv().unwrap();
    let mut sent = Vec::new();
    while sent.is_empty() {
        t.fire_timer();
        sent = t.recv_all();
    }
    assert_eq!(sent.len(), 1, "{sent:?}");
}

#[test]
fn rto_drops_the_sack_marks_of_a_receiver_that_reneged() {
    // RFC 2018 8, Linux tcp_timeout_mark_lost: at the RTO, a SACKed head
    // means the receiver dropped what it SACKed; everything goes again.
    let mut t = Sf::client(cfg(), FULL);
    let d = bytes(2 * 1448);
    t.write(&d);
    assert_eq!(t.recv_all().len(), 2);
    let ts = Some((PEER_TS + 1, T0 as u32 + 10));
    send!(t, seq: R, ack: S, ts: ts, sack: vec![(S, S + 1448)]);
    recv_nothing!(t);
    assert_eq!(t.sf.info().sacked_out, 1);
    let mut sent = Vec::new();
    while sent.is_empty() {
        t.fire_timer();
        sent = t.recv_all();
    }
    let want = Seg { seq: S, ack: R, ts: Some((t.ms(), PEER_TS + 1)), payload: d[..1448].to_vec(), ..SEG };
    assert_eq!(sent, vec![want]);
    let c = t.sf.counters();
    assert_eq!((c.tcp_ext_tcp_timeouts, c.tcp_ext_tcp_sack_reneging), (1, 1));
    assert_eq!((t.sf.info().sacked_out, t.sf.info().lost_out), (0, 2));
}

#[test]
fn a_cumulative_ack_stopping_at_a_sacked_segment_brings_the_rto_forward() {
    // Linux tcp_check_sack_reneging: the receiver SACKed the second segment,
    // then acknowledged only the first: it reneged. An RTO after
    // max(srtt/16, 10 ms) resends the second segment.
    let mut t = Sf::client(cfg(), FULL);
    let d = bytes(3 * 1448);
    t.write(&d);
    assert_eq!(t.recv_all().len(), 3);
    let ts = Some((PEER_TS + 1, T0 as u32 + 10));
    send!(t, seq: R, ack: S, ts: ts, sack: vec![(S + 1448, S + 2 * 1448)]);
    recv_nothing!(t);
    send!(t, seq: R, ack: S + 1448, ts: ts);
    recv_nothing!(t);
    assert_eq!(t.fire_timer(), Duration::from_millis(10));
    let want =
        Seg { seq: S + 1448, ack: R, ts: Some((t.ms(), PEER_TS + 1)), payload: d[1448..2 * 1448].to_vec(), ..SEG };
    assert_eq!(t.recv_all(), vec![want]);
    assert_eq!(t.sf.counters().tcp_ext_tcp_sack_reneging, 1);
}

#[test]
fn nagle_holds_a_small_segment_while_data_is_unacked() {
    let mut t = Sf::client(TcpConfig { nagle: true, ..cfg() }, PLAIN);
    t.write(b"a");
    recv!(t, seq: S, ack: R, flags: ACK | PSH, payload: b"a".to_vec());
    t.write(b"b");
    recv_nothing!(t);
    send!(t, seq: R, ack: S + 1, window: 65535);
    recv!(t, seq: S + 1, ack: R, flags: ACK | PSH, payload: b"b".to_vec());
}

#[test]
fn without_nagle_small_segments_go_at_once() {
    let mut t = Sf::established();
    t.write(b"a");
    t.recv().unwrap();
    t.write(b"b");
    recv!(t, seq: S + 1, ack: R, flags: ACK | PSH, payload: b"b".to_vec());
}

#[test]
fn acknowledged_bytes_are_counted() {
    let mut t = Sf::established();
    t.write(&bytes(3000));
    t.recv_all();
    send!(t, seq: R, ack: S + 3000, window: 65535);
    let i = t.sf.info();
    assert_eq!((i.bytes_acked, i.bytes_sent, i.packets_out), (3000, 3000, 0));
}

#[test]
fn an_ack_inside_a_segment_trims_its_retransmission() {
    // A middlebox cut our last segment short (checksum fixed) and the peer
    // acknowledged the bytes it got: the RTO must retransmit from that ACK
    // on, not the whole segment from bytes the ACK has freed.
    let mut t = Sf::established();
    let d = bytes(2000);
    t.write(&d);
    t.sf.close();
    recv!(t, seq: S, ack: R, payload: d[..1460].to_vec());
    recv!(t, seq: S + M, ack: R, flags: ACK | PSH | FIN, payload: d[1460..].to_vec());
    send!(t, seq: R, ack: S + M + 100, window: 65535);
    t.fire_timer();
    recv!(t, seq: S + M + 100, ack: R, flags: ACK | FIN, payload: d[1560..].to_vec());
}
