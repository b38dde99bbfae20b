//! Opening: SYN-SENT, LISTEN/accept, SYN-RECEIVED, simultaneous open
//! (RFC 9293 3.5 and 3.10.7.3).

use super::seg::*;

/// A configuration with a receive buffer large enough for window scaling
/// (1 MiB: shift 5).
fn big() -> TcpConfig {
    TcpConfig { recv_buffer: BufferSize::Fixed(1 << 20), ..cfg() }
}

#[test]
fn connect_sends_syn_with_mss_sack_timestamps_and_wscale() {
    let mut t = Sf::connect(cfg());
    assert_eq!(t.state(), State::SynSent);
    let syn = t.our_syn();
    t.recv_exact(syn);
    recv_nothing!(t);
    assert_eq!(t.state(), State::SynSent);
}

#[test]
fn connect_with_options_disabled_sends_mss_only() {
    let c = TcpConfig { timestamps: false, sack: false, window_scaling: false, ..cfg() };
    let mut t = Sf::connect(c);
    recv!(t, seq: ISS, flags: SYN, mss: Some(MSS));
}

#[test]
fn connect_with_big_buffer_offers_its_window_scale_and_an_unscaled_window() {
    let mut t = Sf::connect(big());
    let want = Seg { ws: Some(5), window: 65535, ..t.our_syn() };
    t.recv_exact(want);
}

#[test]
fn syn_sent_syn_ack_establishes_and_acks() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, ack: ISS + 1, flags: SYN | ACK, window: 65535, mss: Some(MSS));
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.events(), vec![Event::Connected]);
    recv!(t, seq: ISS + 1, ack: IRS + 1);
    recv_nothing!(t);
    assert_eq!(t.sf.snd_una().0, ISS + 1);
    assert_eq!(t.sf.irs().0, IRS);
    assert_eq!(t.sf.iss().0, ISS);
}

#[test]
fn syn_sent_syn_ack_with_data_delivers_it() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, ack: ISS + 1, flags: SYN | ACK, mss: Some(MSS), payload: b"hello".to_vec());
    assert_eq!(t.state(), State::Established);
    recv!(t, seq: ISS + 1, ack: IRS + 6, window: WIN - 5);
    assert_eq!(t.read(), b"hello");
}

#[test]
fn syn_sent_syn_ack_acking_beyond_snd_nxt_gets_rst() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, ack: ISS + 5, flags: SYN | ACK, mss: Some(MSS));
    recv!(t, seq: ISS + 5, flags: RST, window: 0);
    assert_eq!(t.state(), State::SynSent);
    assert!(t.events().is_empty());
}

#[test]
fn syn_sent_ack_of_iss_gets_rst() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, ack: ISS, flags: SYN | ACK, mss: Some(MSS));
    recv!(t, seq: ISS, flags: RST, window: 0);
    assert_eq!(t.state(), State::SynSent);
}

#[test]
fn syn_sent_rst_with_acceptable_ack_resets() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: 0, ack: ISS + 1, flags: RST | ACK, window: 0);
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::Reset]);
    recv_nothing!(t);
    assert_eq!(t.sf.poll_timeout(), None);
}

#[test]
fn syn_sent_rst_without_ack_is_dropped() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, flags: RST, window: 0);
    assert_eq!(t.state(), State::SynSent);
    recv_nothing!(t);
}

#[test]
fn syn_sent_rst_with_unacceptable_ack_is_dropped_without_reply() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, ack: ISS + 100, flags: RST | ACK, window: 0);
    assert_eq!(t.state(), State::SynSent);
    recv_nothing!(t);
}

#[test]
fn syn_sent_bare_ack_is_dropped() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, ack: ISS + 1);
    assert_eq!(t.state(), State::SynSent);
    recv_nothing!(t);
}

#[test]
fn syn_sent_syn_is_retransmitted_with_exponential_backoff() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    assert_eq!(t.fire_timer(), Duration::from_secs(1));
    let syn = t.our_syn();
    t.recv_exact(syn);
    assert_eq!(t.fire_timer(), Duration::from_secs(2));
    let syn = t.our_syn();
    t.recv_exact(syn);
    assert_eq!(t.fire_timer(), Duration::from_secs(4));
    assert_eq!(t.sf.counters().tcp_ext_tcp_timeouts, 3);
}

#[test]
fn syn_sent_gives_up_after_syn_retries() {
    let mut t = Sf::connect(TcpConfig { syn_retries: 2, ..cfg() });
    t.recv().unwrap();
    for _ in 0..2 {
        t.fire_timer();
        assert_eq!(t.recv().unwrap().flags, SYN);
    }
    t.fire_timer();
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::TimedOut]);
    recv_nothing!(t);
}

#[test]
fn handshake_rtt_is_sampled_from_the_syn() {
    let t = Sf::established();
    assert_eq!(t.sf.srtt(), Some(Duration::from_millis(10)));
}

#[test]
fn handshake_rtt_is_not_sampled_from_a_retransmitted_syn() {
    // Karn: the SYN-ACK may answer either SYN.
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    t.fire_timer();
    t.recv().unwrap();
    t.advance(Duration::from_millis(10));
    send!(t, seq: IRS, ack: ISS + 1, flags: SYN | ACK, mss: Some(MSS));
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.sf.srtt(), None);
}

#[test]
fn simultaneous_open_answers_syn_with_syn_ack() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, flags: SYN, window: 65535, mss: Some(MSS));
    assert_eq!(t.state(), State::SynReceived);
    t.advance(Duration::ZERO);
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, mss: Some(MSS));
    recv_nothing!(t);
}

#[test]
fn simultaneous_open_syn_ack_is_not_a_retransmission() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, flags: SYN, window: 65535, mss: Some(MSS));
    t.advance(Duration::ZERO);
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, window: WIN, mss: Some(MSS));
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_tcp_timeouts, 0);
    assert_eq!(t.sf.counters().tcp_retrans_segs, 0);
    // Not backed off: the SYN-ACK's own timer is the initial RTO.
    assert_eq!(t.fire_timer(), Duration::from_secs(1));
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, window: WIN, mss: Some(MSS));
    assert_eq!(t.sf.counters().tcp_ext_tcp_timeouts, 1);
}

#[test]
fn simultaneous_open_completes_on_ack() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, flags: SYN, window: 65535, mss: Some(MSS));
    t.advance(Duration::ZERO);
    t.recv().unwrap();
    send!(t, seq: IRS + 1, ack: ISS + 1);
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.events(), vec![Event::Connected]);
    recv_nothing!(t);
}

#[test]
fn simultaneous_open_completes_on_syn_ack() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    send!(t, seq: IRS, flags: SYN, window: 65535, mss: Some(MSS));
    t.advance(Duration::ZERO);
    t.recv().unwrap();
    // The peer's own SYN-ACK (a retransmitted SYN with our SYN acked).
    send!(t, seq: IRS + 1, ack: ISS + 1, payload: b"x".to_vec());
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.read(), b"x");
}

#[test]
fn accept_sends_syn_ack_to_a_plain_syn() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    assert_eq!(t.state(), State::SynReceived);
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, mss: Some(MSS));
    recv_nothing!(t);
}

#[test]
fn accept_answers_every_offered_option() {
    let mut t = Sf::accept(big(), Sf::peer_syn(FULL));
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, window: 65535, mss: Some(MSS), ws: Some(5),
        sack_perm: true, ts: Some((T0 as u32, PEER_TS)));
}

#[test]
fn accept_answers_only_sack_when_only_sack_is_offered() {
    let o = PeerOpts { sack_perm: true, ..PLAIN };
    let mut t = Sf::accept(big(), Sf::peer_syn(o));
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, window: 65535, mss: Some(MSS), sack_perm: true);
}

#[test]
fn accept_answers_only_timestamps_when_only_timestamps_are_offered() {
    let o = PeerOpts { ts: true, ..PLAIN };
    let mut t = Sf::accept(big(), Sf::peer_syn(o));
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, window: 65535, mss: Some(MSS),
        ts: Some((T0 as u32, PEER_TS)));
}

#[test]
fn accept_does_not_offer_options_it_has_disabled() {
    let c = TcpConfig { timestamps: false, sack: false, window_scaling: false, ..big() };
    let mut t = Sf::accept(c, Sf::peer_syn(FULL));
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, window: 65535, mss: Some(MSS));
}

#[test]
fn syn_received_ack_establishes() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    send!(t, seq: IRS + 1, ack: ISS + 1);
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.events(), vec![Event::Connected]);
    recv_nothing!(t);
    assert_eq!(t.sf.poll_timeout(), None);
}

#[test]
fn syn_received_ack_with_data_establishes_and_delivers() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    send!(t, seq: IRS + 1, ack: ISS + 1, payload: b"abc".to_vec());
    assert_eq!(t.state(), State::Established);
    recv!(t, seq: ISS + 1, ack: IRS + 4, window: WIN - 3);
    assert_eq!(t.read(), b"abc");
}

#[test]
fn syn_received_unacceptable_ack_gets_rst() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    send!(t, seq: IRS + 1, ack: ISS + 10);
    recv!(t, seq: ISS + 10, flags: RST, window: 0);
    assert_eq!(t.state(), State::SynReceived);
}

#[test]
fn syn_received_retransmitted_syn_repeats_the_syn_ack() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    t.advance(Duration::from_millis(100));
    t.send(Sf::peer_syn(PLAIN));
    t.advance(Duration::ZERO);
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, mss: Some(MSS));
    assert_eq!(t.state(), State::SynReceived);
}

#[test]
fn syn_received_syn_ack_is_retransmitted_on_rto() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    assert_eq!(t.fire_timer(), Duration::from_secs(1));
    recv!(t, seq: ISS, ack: IRS + 1, flags: SYN | ACK, mss: Some(MSS));
    assert_eq!(t.fire_timer(), Duration::from_secs(2));
}

/// The RTO fired (the SYN-ACK is to go again) but the retransmission has
/// not left when the peer's ACK of the first one arrives: it acknowledges
/// what we sent and completes the handshake (it was reset, as an ACK beyond
/// a `snd_nxt` the timer had moved back: a loaded exit proxy reset 128
/// connections at once this way). Linux checks against `snt_isn + 1`.
#[test]
fn syn_received_ack_between_the_rto_and_the_retransmission_establishes() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    assert_eq!(t.fire_timer(), Duration::from_secs(1));
    send!(t, seq: IRS + 1, ack: ISS + 1);
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.events(), vec![Event::Connected]);
    recv_nothing!(t);
    assert_eq!(t.sf.snd_una().0, ISS + 1);
    assert_eq!(t.sf.send(b"after"), 5);
    recv!(t, seq: ISS + 1, ack: IRS + 1, flags: PSH | ACK, payload: b"after".to_vec());
}

/// The same in SYN-SENT: the SYN-ACK of our first SYN, arriving after the
/// RTO but before the SYN went again, establishes the connection.
#[test]
fn syn_sent_syn_ack_between_the_rto_and_the_retransmission_establishes() {
    let mut t = Sf::connect(cfg());
    t.recv().unwrap();
    assert_eq!(t.fire_timer(), Duration::from_secs(1));
    send!(t, seq: IRS, ack: ISS + 1, flags: SYN | ACK, window: 65535, mss: Some(MSS));
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.events(), vec![Event::Connected]);
    recv!(t, seq: ISS + 1, ack: IRS + 1);
    recv_nothing!(t);
}

#[test]
fn syn_received_rst_in_sequence_closes() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    send!(t, seq: IRS + 1, flags: RST, window: 0);
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.events(), vec![Event::Reset]);
    recv_nothing!(t);
}

#[test]
fn syn_received_rst_in_window_gets_challenge_ack() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(PLAIN));
    t.recv().unwrap();
    send!(t, seq: IRS + 100, flags: RST, window: 0);
    assert_eq!(t.state(), State::SynReceived);
    recv!(t, seq: ISS + 1, ack: IRS + 1);
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_tcp_challenge_ack, 1);
}

#[test]
fn peer_mss_bounds_our_segments() {
    let mut t = Sf::client(cfg(), PeerOpts { mss: Some(1000), ..PLAIN });
    assert_eq!(t.sf.mss(0), 1000);
    t.write(&bytes(2500));
    let d = bytes(2500);
    recv!(t, seq: ISS + 1, ack: IRS + 1, payload: d[..1000].to_vec());
    recv!(t, seq: ISS + 1001, ack: IRS + 1, payload: d[1000..2000].to_vec());
    recv!(t, seq: ISS + 2001, ack: IRS + 1, flags: ACK | PSH, payload: d[2000..].to_vec());
}

#[test]
fn missing_mss_option_means_536() {
    let t = Sf::client(cfg(), PeerOpts { mss: None, ..PLAIN });
    assert_eq!(t.sf.mss(0), 536);
}

#[test]
fn our_mss_bounds_segments_when_the_peer_offers_more() {
    let t = Sf::client(TcpConfig { mss: 1200, ..cfg() }, PeerOpts { mss: Some(9000), ..PLAIN });
    assert_eq!(t.sf.mss(0), 1200);
}

#[test]
fn passive_open_with_every_option_then_data_carries_timestamps() {
    let mut t = Sf::server(cfg(), FULL);
    assert_eq!(t.sf.mss(0), 1448);
    t.write(b"hi");
    recv!(t, seq: ISS + 1, ack: IRS + 1, flags: ACK | PSH, ts: Some((t.ms(), PEER_TS)), payload: b"hi".to_vec());
}
