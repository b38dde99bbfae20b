//! Closing: FIN-WAIT-1/2, CLOSING, TIME-WAIT, CLOSE-WAIT, LAST-ACK, CLOSED,
//! half-close and abort (RFC 9293 3.6 and 3.10.4, 3.10.7.4 eighth).

use super::seg::*;

const S: u32 = ISS + 1;
const R: u32 = IRS + 1;

#[test]
fn close_in_established_sends_fin_and_enters_fin_wait_1() {
    let mut t = Sf::established();
    t.sf.close();
    assert_eq!(t.state(), State::FinWait1);
    recv!(t, seq: S, ack: R, flags: FIN | ACK);
    recv_nothing!(t);
}

#[test]
fn fin_follows_queued_data_in_the_same_segment() {
    let mut t = Sf::established();
    t.write(b"abc");
    t.sf.close();
    recv!(t, seq: S, ack: R, flags: FIN | PSH | ACK, payload: b"abc".to_vec());
    recv_nothing!(t);
}

#[test]
fn fin_wait_1_ack_of_fin_enters_fin_wait_2() {
    let (mut t, s, r) = Sf::in_state(State::FinWait1);
    send!(t, seq: r, ack: s);
    assert_eq!(t.state(), State::FinWait2);
    recv_nothing!(t);
    assert_eq!(t.sf.poll_timeout(), None, "no timer in FIN-WAIT-2 without data");
}

#[test]
fn fin_wait_1_ack_short_of_fin_stays() {
    let mut t = Sf::established();
    t.write(b"abc");
    t.sf.close();
    t.recv().unwrap();
    send!(t, seq: R, ack: S + 3);
    assert_eq!(t.state(), State::FinWait1);
}

#[test]
fn fin_wait_1_fin_is_retransmitted_on_rto() {
    let (mut t, s, r) = Sf::in_state(State::FinWait1);
    let rto = t.sf.info().rto;
    assert_eq!(t.fire_timer(), rto);
    recv!(t, seq: s - 1, ack: r, flags: FIN | ACK);
    assert_eq!(t.sf.counters().tcp_retrans_segs, 1);
}

#[test]
fn fin_wait_1_fin_ack_enters_time_wait() {
    let (mut t, s, r) = Sf::in_state(State::FinWait1);
    send!(t, seq: r, ack: s, flags: FIN | ACK);
    assert_eq!(t.state(), State::TimeWait);
    recv!(t, seq: s, ack: r + 1);
    assert_eq!(t.events(), vec![Event::PeerFin]);
}

#[test]
fn fin_wait_1_fin_without_ack_of_ours_enters_closing() {
    let (mut t, s, r) = Sf::in_state(State::FinWait1);
    send!(t, seq: r, ack: s - 1, flags: FIN | ACK);
    assert_eq!(t.state(), State::Closing);
    recv!(t, seq: s, ack: r + 1);
}

#[test]
fn closing_ack_of_fin_enters_time_wait() {
    let (mut t, s, r) = Sf::in_state(State::Closing);
    send!(t, seq: r, ack: s);
    assert_eq!(t.state(), State::TimeWait);
    recv_nothing!(t);
}

#[test]
fn closing_fin_is_retransmitted_on_rto() {
    let (mut t, s, r) = Sf::in_state(State::Closing);
    t.fire_timer();
    recv!(t, seq: s - 1, ack: r, flags: FIN | ACK);
}

#[test]
fn fin_wait_2_fin_enters_time_wait_and_is_acked() {
    let (mut t, s, r) = Sf::in_state(State::FinWait2);
    send!(t, seq: r, ack: s, flags: FIN | ACK);
    assert_eq!(t.state(), State::TimeWait);
    recv!(t, seq: s, ack: r + 1);
    assert_eq!(t.events(), vec![Event::PeerFin]);
}

#[test]
fn fin_wait_2_still_receives_data() {
    let (mut t, s, r) = Sf::in_state(State::FinWait2);
    send!(t, seq: r, ack: s, payload: b"more".to_vec());
    recv!(t, seq: s, ack: r + 4, window: WIN - 4);
    assert_eq!(t.read(), b"more");
    assert_eq!(t.state(), State::FinWait2);
}

#[test]
fn fin_wait_1_still_receives_data() {
    let (mut t, s, r) = Sf::in_state(State::FinWait1);
    send!(t, seq: r, ack: s - 1, payload: b"more".to_vec());
    recv!(t, seq: s, ack: r + 4, window: WIN - 4);
    assert_eq!(t.read(), b"more");
}

#[test]
fn time_wait_lasts_2msl_then_closes() {
    let (mut t, _, _) = Sf::in_state(State::TimeWait);
    assert_eq!(t.fire_timer(), Duration::from_secs(60));
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::Closed]);
    assert_eq!(t.sf.poll_timeout(), None);
}

#[test]
fn time_wait_retransmitted_fin_is_acked_and_restarts_the_timer() {
    let (mut t, s, r) = Sf::in_state(State::TimeWait);
    t.advance(Duration::from_secs(30));
    send!(t, seq: r - 1, ack: s, flags: FIN | ACK);
    recv!(t, seq: s, ack: r);
    assert_eq!(t.state(), State::TimeWait);
    assert_eq!(t.fire_timer(), Duration::from_secs(60));
    assert_eq!(t.state(), State::Closed);
}

#[test]
fn peer_fin_in_established_enters_close_wait() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, flags: FIN | ACK);
    assert_eq!(t.state(), State::CloseWait);
    recv!(t, seq: S, ack: R + 1);
    assert_eq!(t.events(), vec![Event::PeerFin]);
    assert!(t.sf.recv_finished());
}

#[test]
fn peer_fin_with_data_delivers_the_data_first() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, flags: FIN | PSH | ACK, payload: b"bye".to_vec());
    assert_eq!(t.state(), State::CloseWait);
    recv!(t, seq: S, ack: R + 4, window: WIN - 3);
    assert!(!t.sf.recv_finished());
    assert_eq!(t.read(), b"bye");
    assert!(t.sf.recv_finished());
}

#[test]
fn out_of_order_fin_waits_for_the_hole() {
    let mut t = Sf::established();
    send!(t, seq: R + 10, ack: S, flags: FIN | ACK);
    assert_eq!(t.state(), State::Established);
    t.recv_all();
    send!(t, seq: R, ack: S, payload: bytes(10));
    assert_eq!(t.state(), State::CloseWait);
    recv!(t, seq: S, ack: R + 11, window: WIN - 10);
    assert_eq!(t.read(), bytes(10));
}

#[test]
fn close_wait_still_sends_data() {
    let (mut t, s, r) = Sf::in_state(State::CloseWait);
    t.write(b"reply");
    recv!(t, seq: s, ack: r, flags: PSH | ACK, payload: b"reply".to_vec());
}

#[test]
fn close_wait_ignores_data_after_the_fin() {
    let (mut t, s, r) = Sf::in_state(State::CloseWait);
    send!(t, seq: r, ack: s, payload: b"late".to_vec());
    assert!(t.recv_all().iter().all(|seg| seg.payload.is_empty() && seg.ack == r));
    assert_eq!(t.read(), b"");
    assert_eq!(t.state(), State::CloseWait);
}

#[test]
fn time_wait_ignores_data_after_the_fin() {
    let (mut t, s, r) = Sf::in_state(State::TimeWait);
    send!(t, seq: r, ack: s, payload: b"late".to_vec());
    assert!(t.recv_all().iter().all(|seg| seg.payload.is_empty() && seg.ack == r));
    assert_eq!(t.read(), b"");
    assert_eq!(t.state(), State::TimeWait);
}

#[test]
fn close_wait_close_sends_fin_and_enters_last_ack() {
    let (mut t, s, r) = Sf::in_state(State::CloseWait);
    t.sf.close();
    assert_eq!(t.state(), State::LastAck);
    recv!(t, seq: s, ack: r, flags: FIN | ACK);
}

#[test]
fn last_ack_ack_of_fin_closes() {
    let (mut t, s, r) = Sf::in_state(State::LastAck);
    send!(t, seq: r, ack: s);
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::Closed]);
    recv_nothing!(t);
    assert_eq!(t.sf.poll_timeout(), None);
}

#[test]
fn last_ack_fin_is_retransmitted_on_rto() {
    let (mut t, s, r) = Sf::in_state(State::LastAck);
    t.fire_timer();
    recv!(t, seq: s - 1, ack: r, flags: FIN | ACK);
    assert_eq!(t.state(), State::LastAck);
}

#[test]
fn close_in_syn_sent_closes_at_once() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    t.sf.close();
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::Closed]);
    recv_nothing!(t);
}

#[test]
fn close_twice_sends_one_fin() {
    let (mut t, _, _) = Sf::in_state(State::FinWait1);
    t.sf.close();
    assert_eq!(t.state(), State::FinWait1);
    recv_nothing!(t);
}

#[test]
fn no_writes_after_close() {
    let (mut t, _, _) = Sf::in_state(State::FinWait1);
    assert_eq!(t.sf.send(b"x"), 0);
    assert_eq!(t.sf.send_space(), 0);
}

#[test]
fn abort_sends_rst_and_closes() {
    let mut t = Sf::established();
    t.sf.abort();
    assert_eq!(t.state(), State::Closed);
    recv!(t, seq: S, ack: R, flags: RST | ACK, window: 0);
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_out_rsts, 1);
}

#[test]
fn abort_in_syn_sent_sends_nothing() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    t.sf.abort();
    assert_eq!(t.state(), State::Closed);
    recv_nothing!(t);
}

#[test]
fn closed_subflow_ignores_segments() {
    let mut t = Sf::established();
    t.sf.abort();
    t.recv().unwrap();
    send!(t, seq: R, ack: S, payload: b"x".to_vec());
    send!(t, seq: R, flags: SYN, mss: Some(MSS));
    recv_nothing!(t);
    assert_eq!(t.read(), b"");
}

#[test]
fn out_of_order_fin_draws_an_immediate_duplicate_ack() {
    let mut t = Sf::established();
    send!(t, seq: R + 10, ack: S, flags: FIN | ACK);
    recv!(t, seq: S, ack: R);
    recv_nothing!(t);
    // The hole fills: data and FIN are acknowledged together.
    send!(t, seq: R, ack: S, payload: bytes(10));
    recv!(t, seq: S, ack: R + 11, window: WIN - 10);
    assert_eq!(t.state(), State::CloseWait);
}

/// A FIN that arrives beyond a hole (here a GRO'd last super-segment
/// overtaking the one before it, as a kernel sender's can) is the end of
/// the stream only once the hole is filled: `recv_finished` must not say so
/// as soon as the bytes in order are read, or the application reads end of
/// stream short of the data still missing.
#[test]
fn a_fin_beyond_a_hole_is_not_the_end_until_the_hole_fills() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, payload: bytes(1000));
    send!(t, seq: R + 2000, ack: S, flags: FIN | ACK, payload: bytes(1000));
    assert_eq!(t.read().len(), 1000);
    assert!(!t.sf.recv_finished(), "the bytes between 1000 and 2000 are missing");
    assert_eq!(t.state(), State::Established);
    // Data past the FIN is no data (Linux purges it): it must not carry
    // rcv_nxt past the FIN, which would then never be reached.
    send!(t, seq: R + 3000, ack: S, payload: bytes(500));
    send!(t, seq: R + 1000, ack: S, payload: bytes(1000));
    assert_eq!(t.read().len(), 2000);
    assert!(t.sf.recv_finished());
    assert_eq!(t.state(), State::CloseWait);
    assert!(t.read().is_empty(), "nothing after the FIN");
}
