//! Segment acceptability (RFC 9293 3.10.7.4 first: zero/non-zero window ×
//! zero/non-zero length) and ACK acceptability (fifth; RFC 5961 5.2).

use super::seg::*;

const S: u32 = ISS + 1;
const R: u32 = IRS + 1;

#[test]
fn empty_segment_at_rcv_nxt_is_accepted_silently() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S);
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv_nothing!(t);
}

#[test]
fn empty_segment_inside_the_window_is_accepted_silently() {
    let mut t = Sf::established();
    send!(t, seq: R + 100, ack: S);
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv_nothing!(t);
}

#[test]
fn empty_segment_at_the_last_window_byte_is_accepted() {
    let mut t = Sf::established();
    send!(t, seq: R + WIN as u32 - 1, ack: S);
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv_nothing!(t);
}

#[test]
fn empty_segment_before_the_window_is_acked_and_dropped() {
    let mut t = Sf::established();
    send!(t, seq: R - 1, ack: S);
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S, ack: R);
    recv_nothing!(t);
}

#[test]
fn empty_segment_at_the_right_edge_is_acked_and_dropped() {
    let mut t = Sf::established();
    send!(t, seq: R + WIN as u32, ack: S);
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S, ack: R);
}

#[test]
fn data_at_rcv_nxt_is_accepted_and_acked() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, payload: bytes(100));
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv!(t, seq: S, ack: R + 100, window: WIN - 100);
    assert_eq!(t.read(), bytes(100));
}

#[test]
fn old_duplicate_data_is_acked_and_not_delivered_twice() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, payload: bytes(10));
    t.recv_all();
    send!(t, seq: R, ack: S, payload: bytes(10));
    recv!(t, seq: S, ack: R + 10, window: WIN - 10);
    assert_eq!(t.read(), bytes(10));
    assert_eq!(t.sf.counters().tcp_ext_tcp_duplicate_data, 1);
}

#[test]
fn data_overlapping_the_left_edge_is_trimmed() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, payload: bytes(10));
    t.recv_all();
    let d = bytes(15);
    send!(t, seq: R + 5, ack: S, payload: d[5..15].to_vec());
    recv!(t, seq: S, ack: R + 15, window: WIN - 15);
    assert_eq!(t.read(), d);
}

#[test]
fn data_beyond_the_window_is_acked_and_dropped() {
    let mut t = Sf::established();
    send!(t, seq: R + WIN as u32, ack: S, payload: bytes(10));
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S, ack: R);
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_beyond_window, 1);
    send!(t, seq: R, ack: S, payload: bytes(5));
    t.recv_all();
    assert_eq!(t.read(), bytes(5));
}

#[test]
fn data_straddling_the_right_edge_is_trimmed_to_the_window() {
    let mut t = Sf::established();
    let r = t.fill(R, S, BUF - 5);
    send!(t, seq: r, ack: S, payload: bytes(10));
    recv!(t, seq: S, ack: r + 5, window: 0);
    assert_eq!(t.sf.recv_ready(), BUF);
}

#[test]
fn zero_window_empty_segment_at_rcv_nxt_is_accepted() {
    let mut t = Sf::established();
    t.write(&bytes(100));
    t.recv().unwrap();
    let r = t.fill(R, S, BUF);
    send!(t, seq: r, ack: S + 100);
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv_nothing!(t);
    assert_eq!(t.sf.snd_una().0, S + 100);
}

#[test]
fn zero_window_empty_segment_elsewhere_is_acked_and_dropped() {
    let mut t = Sf::established();
    t.write(&bytes(100));
    t.recv().unwrap();
    let r = t.fill(R, S, BUF);
    send!(t, seq: r + 1, ack: S + 100);
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S + 100, ack: r, window: 0);
    assert_eq!(t.sf.snd_una().0, S);
}

#[test]
fn zero_window_data_is_acked_with_zero_window_and_dropped() {
    let mut t = Sf::established();
    let r = t.fill(R, S, BUF);
    send!(t, seq: r, ack: S, payload: bytes(1));
    // The data is dropped, but the segment passed the sequence check for its
    // ACK, which was processed: accepted (Linux hands its MPTCP options on too).
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv!(t, seq: S, ack: r, window: 0);
    recv_nothing!(t);
    assert_eq!(t.sf.recv_ready(), BUF);
    assert_eq!(t.sf.counters().tcp_ext_tcp_zero_window_drop, 1);
}

#[test]
fn zero_window_bare_fin_at_rcv_nxt_is_taken() {
    let mut t = Sf::established();
    let r = t.fill(R, S, BUF);
    send!(t, seq: r, ack: S, flags: FIN | ACK);
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv!(t, seq: S, ack: r + 1, window: 0);
    assert_eq!(t.state(), State::CloseWait);
}

#[test]
fn zero_window_data_segment_still_delivers_its_ack() {
    let mut t = Sf::established();
    t.write(&bytes(100));
    t.recv().unwrap();
    let r = t.fill(R, S, BUF);
    send!(t, seq: r, ack: S + 100, payload: bytes(1));
    assert_eq!(t.sf.snd_una().0, S + 100);
    assert_eq!(t.sf.recv_ready(), BUF);
}

#[test]
fn zero_window_rst_at_rcv_nxt_resets() {
    let mut t = Sf::established();
    let r = t.fill(R, S, BUF);
    send!(t, seq: r, flags: RST, window: 0);
    assert_eq!(t.state(), State::Closed);
}

#[test]
fn ack_of_unsent_data_is_acked_and_the_segment_dropped() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S + 5000, payload: bytes(10));
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S, ack: R);
    recv_nothing!(t);
    assert_eq!(t.read(), b"");
    assert_eq!(t.sf.snd_una().0, S);
}

#[test]
fn ack_older_than_the_max_window_is_challenged_and_dropped() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S.wrapping_sub(70_000), payload: bytes(10));
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv!(t, seq: S, ack: R);
    assert_eq!(t.read(), b"");
    assert_eq!(t.sf.counters().tcp_ext_tcp_challenge_ack, 1);
}

#[test]
fn old_ack_within_the_window_is_ignored_but_the_data_accepted() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S - 1, payload: bytes(10));
    assert_eq!(t.verdict, Some(Verdict::Accepted));
    recv!(t, seq: S, ack: R + 10, window: WIN - 10);
    assert_eq!(t.read(), bytes(10));
    assert_eq!(t.sf.snd_una().0, S);
}

#[test]
fn segment_without_ack_flag_is_dropped() {
    let mut t = Sf::established();
    send!(t, seq: R, flags: PSH, payload: bytes(10));
    assert_eq!(t.verdict, Some(Verdict::Dropped));
    recv_nothing!(t);
    assert_eq!(t.read(), b"");
}

#[test]
fn acceptable_ack_advances_snd_una_and_frees_the_buffer() {
    let mut t = Sf::established();
    t.write(&bytes(100));
    t.recv().unwrap();
    assert_eq!(t.sf.send_queued(), 100);
    send!(t, seq: R, ack: S + 60);
    assert_eq!(t.sf.snd_una().0, S + 60);
    assert_eq!(t.sf.send_queued(), 40);
    send!(t, seq: R, ack: S + 100);
    assert_eq!(t.sf.send_queued(), 0);
    assert_eq!(t.sf.info().bytes_acked, 100);
    assert_eq!(t.sf.poll_timeout(), None, "nothing in flight, no timer");
}

#[test]
fn out_of_order_data_draws_an_immediate_duplicate_ack() {
    let mut t = Sf::established();
    send!(t, seq: R + 100, ack: S, payload: bytes(10));
    // The right edge never moves left: out-of-order bytes do not shrink it.
    recv!(t, seq: S, ack: R);
    assert_eq!(t.sf.counters().tcp_ext_tcp_ofo_queue, 1);
}

#[test]
fn out_of_order_data_is_reassembled() {
    let mut t = Sf::established();
    let d = bytes(200);
    send!(t, seq: R + 100, ack: S, payload: d[100..].to_vec());
    t.recv_all();
    assert_eq!(t.sf.recv_ready(), 0);
    send!(t, seq: R, ack: S, payload: d[..100].to_vec());
    recv!(t, seq: S, ack: R + 200, window: WIN - 200);
    assert_eq!(t.read(), d);
}
