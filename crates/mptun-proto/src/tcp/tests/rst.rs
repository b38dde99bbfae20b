//! RST and SYN in every synchronized state (RFC 9293 3.10.7.4 second and
//! fourth, RFC 5961 3.2 and 4.2): an RST at exactly RCV.NXT resets, one
//! elsewhere in the window draws a challenge ACK, one outside the window is
//! dropped silently; a SYN draws a challenge ACK.

use super::seg::*;

macro_rules! per_state {
    ($($m:ident: $state:expr;)*) => {$(
        mod $m {
            use super::*;

            #[test]
            fn rst_at_rcv_nxt_resets() {
                let (mut t, _, r) = Sf::in_state($state);
                send!(t, seq: r, flags: RST, window: 0);
                assert_eq!(t.state(), State::Closed);
                assert_eq!(t.events(), vec![Event::Reset]);
                recv_nothing!(t);
                assert_eq!(t.sf.poll_timeout(), None);
            }

            #[test]
            fn rst_ack_at_rcv_nxt_resets() {
                let (mut t, s, r) = Sf::in_state($state);
                send!(t, seq: r, ack: s, flags: RST | ACK, window: 0);
                assert_eq!(t.state(), State::Closed);
                assert_eq!(t.events(), vec![Event::Reset]);
            }

            #[test]
            fn rst_in_window_draws_a_challenge_ack() {
                let (mut t, s, r) = Sf::in_state($state);
                send!(t, seq: r + 1000, flags: RST, window: 0);
                assert_eq!(t.state(), $state);
                recv!(t, seq: s, ack: r);
                recv_nothing!(t);
                assert_eq!(t.sf.counters().tcp_ext_tcp_challenge_ack, 1);
                assert!(t.events().is_empty());
            }

            #[test]
            fn rst_beyond_window_is_dropped() {
                let (mut t, _, r) = Sf::in_state($state);
                send!(t, seq: r + BUF as u32, flags: RST, window: 0);
                assert_eq!(t.state(), $state);
                recv_nothing!(t);
            }

            #[test]
            fn rst_before_rcv_nxt_is_dropped() {
                let (mut t, _, r) = Sf::in_state($state);
                send!(t, seq: r - 1, flags: RST, window: 0);
                assert_eq!(t.state(), $state);
                recv_nothing!(t);
            }

            #[test]
            fn syn_in_window_draws_a_challenge_ack() {
                let (mut t, s, r) = Sf::in_state($state);
                send!(t, seq: r + 10, flags: SYN, window: 65535, mss: Some(MSS));
                assert_eq!(t.state(), $state);
                recv!(t, seq: s, ack: r);
                recv_nothing!(t);
                assert_eq!(t.sf.counters().tcp_ext_tcp_syn_challenge, 1);
            }

            #[test]
            fn syn_at_rcv_nxt_draws_a_challenge_ack() {
                let (mut t, s, r) = Sf::in_state($state);
                send!(t, seq: r, flags: SYN, window: 65535, mss: Some(MSS));
                assert_eq!(t.state(), $state);
                recv!(t, seq: s, ack: r);
                assert!(t.events().is_empty());
            }
        }
    )*};
}

per_state! {
    established: State::Established;
    fin_wait_1: State::FinWait1;
    fin_wait_2: State::FinWait2;
    close_wait: State::CloseWait;
    closing: State::Closing;
    last_ack: State::LastAck;
    time_wait: State::TimeWait;
}

#[test]
fn syn_outside_the_window_is_answered_with_an_ack() {
    // RFC 5961 4.2: whatever its sequence number.
    let (mut t, s, r) = Sf::in_state(State::Established);
    send!(t, seq: r.wrapping_sub(1_000_000), flags: SYN, window: 65535, mss: Some(MSS));
    recv!(t, seq: s, ack: r);
    assert_eq!(t.state(), State::Established);
}

#[test]
fn challenge_acks_are_rate_limited() {
    let (mut t, s, r) = Sf::in_state(State::Established);
    let mut sent = 0;
    for i in 0..1000 {
        send!(t, seq: r + 1 + i, flags: RST, window: 0);
        sent += t.recv_all().len();
    }
    assert!(sent < 1000, "{sent} challenge ACKs for 1000 RSTs within one second");
    // One per tcp_invalid_ratelimit (500 ms), counted as Linux counts them.
    assert_eq!(sent, 1);
    let c = t.sf.counters();
    assert_eq!((c.tcp_ext_tcp_challenge_ack, c.tcp_ext_tcp_ack_skipped_challenge), (1, 999));
    t.advance(Duration::from_millis(499));
    send!(t, seq: r + 1, flags: RST, window: 0);
    recv_nothing!(t);
    t.advance(Duration::from_millis(1));
    send!(t, seq: r + 1, flags: RST, window: 0);
    recv!(t, seq: s, ack: r);
    assert_eq!(t.sf.counters().tcp_ext_tcp_challenge_ack, 2);
}

#[test]
fn challenge_acks_per_second_are_limited() {
    // Without the spacing, the per-second budget (tcp_challenge_ack_limit) holds.
    let c = TcpConfig { invalid_ratelimit: Duration::ZERO, challenge_ack_limit: 3, ..cfg() };
    let mut t = Sf::client(c, PLAIN);
    let (s, r) = (ISS + 1, IRS + 1);
    let mut sent = 0;
    for i in 0..10 {
        send!(t, seq: r + 1 + i, flags: RST, window: 0);
        sent += t.recv_all().len();
    }
    assert_eq!(sent, 3);
    assert_eq!(t.sf.counters().tcp_ext_tcp_challenge_ack, 3);
    // A new second, a new budget.
    t.advance(Duration::from_millis(1000));
    send!(t, seq: r + 1, flags: RST, window: 0);
    recv!(t, seq: s, ack: r);
}

#[test]
fn duplicate_acks_for_bare_out_of_window_segments_are_rate_limited() {
    let (mut t, s, r) = Sf::in_state(State::Established);
    send!(t, seq: r - 1, ack: s);
    recv!(t, seq: s, ack: r);
    send!(t, seq: r - 1, ack: s);
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_tcp_ack_skipped_seq, 1);
    // Out-of-window data is no ACK loop: always answered.
    send!(t, seq: r - 10, ack: s, payload: bytes(10));
    recv!(t, seq: s, ack: r);
    // The spacing is shared with challenge ACKs.
    send!(t, seq: r + 1, flags: RST, window: 0);
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_tcp_ack_skipped_challenge, 1);
    t.advance(Duration::from_millis(500));
    send!(t, seq: r - 1, ack: s);
    recv!(t, seq: s, ack: r);
}

#[test]
fn rst_in_syn_sent_counts_as_attempt_fail() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: 0, ack: ISS + 1, flags: RST | ACK, window: 0);
    assert_eq!(t.verdict, Some(Verdict::Reset));
    assert_eq!(t.state(), State::Closed);
    let c = t.sf.counters();
    assert_eq!((c.tcp_attempt_fails, c.tcp_estab_resets), (1, 0));
}

#[test]
fn rst_in_syn_received_counts_as_attempt_fail() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    send!(t, seq: IRS + 1, flags: RST, window: 0);
    assert_eq!(t.state(), State::Closed);
    let c = t.sf.counters();
    assert_eq!((c.tcp_attempt_fails, c.tcp_estab_resets), (1, 0));
}

#[test]
fn syn_timeout_counts_as_attempt_fail() {
    let mut t = Sf::connect(TcpConfig { syn_retries: 1, ..cfg() });
    t.recv().unwrap();
    t.fire_timer();
    t.recv().unwrap();
    t.fire_timer();
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::TimedOut]);
    assert_eq!(t.sf.counters().tcp_attempt_fails, 1);
}

#[test]
fn rst_with_data_in_flight_resets_and_stops_retransmission() {
    let mut t = Sf::established();
    t.write(b"data");
    t.recv().unwrap();
    send!(t, seq: IRS + 1, flags: RST, window: 0);
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.sf.poll_timeout(), None);
    recv_nothing!(t);
}

#[test]
fn rst_counts_as_estab_reset() {
    let (mut t, _, r) = Sf::in_state(State::Established);
    send!(t, seq: r, flags: RST, window: 0);
    assert_eq!(t.sf.counters().tcp_estab_resets, 1);
}
