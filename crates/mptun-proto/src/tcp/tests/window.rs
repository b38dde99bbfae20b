//! Windows: what we advertise, what we obey, zero windows and probes,
//! window updates (SND.WL1/WL2) and window scaling (RFC 7323 2).

use super::seg::*;

const S: u32 = ISS + 1;
const R: u32 = IRS + 1;

fn big() -> TcpConfig {
    TcpConfig { recv_buffer: BufferSize::Fixed(1 << 20), ..cfg() }
}

#[test]
fn advertised_window_shrinks_with_unread_data() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, payload: bytes(1000));
    recv!(t, seq: S, ack: R + 1000, window: WIN - 1000);
}

#[test]
fn full_buffer_advertises_zero_window() {
    let mut t = Sf::established();
    let d = BUF - 1000;
    let r = t.fill(R, S, d);
    send!(t, seq: r, ack: S, payload: bytes(1000));
    recv!(t, seq: S, ack: r + 1000, window: 0);
    assert!(t.sf.counters().tcp_ext_tcp_to_zero_window_adv >= 1);
}

#[test]
fn reading_reopens_the_window_with_an_update() {
    let mut t = Sf::established();
    let r = t.fill(R, S, BUF);
    assert_eq!(t.read().len(), BUF);
    recv!(t, seq: S, ack: r);
    recv_nothing!(t);
}

#[test]
fn a_small_read_sends_no_window_update() {
    // Receiver-side silly window syndrome avoidance (RFC 9293 3.8.6.2.2).
    let mut t = Sf::established();
    t.fill(R, S, BUF);
    let mut buf = [0u8; 100];
    assert_eq!(t.sf.recv(t.now, &mut buf), 100);
    recv_nothing!(t);
}

#[test]
fn sender_obeys_the_peer_window() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, window: 1000);
    t.write(&bytes(3000));
    recv!(t, seq: S, ack: R, payload: bytes(1000));
    recv_nothing!(t);
}

#[test]
fn window_update_releases_the_rest() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, window: 1000);
    let d = bytes(3000);
    t.write(&d);
    t.recv().unwrap();
    send!(t, seq: R, ack: S + 1000, window: 2000);
    recv!(t, seq: S + 1000, ack: R, payload: d[1000..2460].to_vec());
    recv!(t, seq: S + 2460, ack: R, payload: d[2460..3000].to_vec(), flags: ACK | PSH);
    recv_nothing!(t);
}

#[test]
fn zero_window_arms_the_persist_timer_and_probes() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, window: 0);
    t.write(&bytes(100));
    recv_nothing!(t);
    let rto = t.sf.info().rto;
    assert_eq!(t.fire_timer(), rto);
    // Linux tcp_xmit_probe_skb: an old sequence number draws an ACK.
    recv!(t, seq: S - 1, ack: R);
    recv_nothing!(t);
    assert_eq!(t.sf.counters().tcp_ext_tcp_win_probe, 1);
}

#[test]
fn zero_window_probes_back_off() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, window: 0);
    t.write(&bytes(100));
    recv_nothing!(t);
    let d1 = t.fire_timer();
    t.recv().unwrap();
    let d2 = t.fire_timer();
    t.recv().unwrap();
    assert_eq!(d2, d1 * 2);
}

#[test]
fn window_reopening_ends_the_probes_and_sends_data() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, window: 0);
    t.write(&bytes(100));
    recv_nothing!(t);
    t.fire_timer();
    t.recv().unwrap();
    send!(t, seq: R, ack: S, window: 65535);
    recv!(t, seq: S, ack: R, flags: ACK | PSH, payload: bytes(100));
    recv_nothing!(t);
}

#[test]
fn no_persist_timer_without_data_to_send() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, window: 0);
    assert_eq!(t.sf.poll_timeout(), None);
}

#[test]
fn window_from_an_older_ack_is_ignored() {
    // RFC 9293 3.10.7.4: update only if SND.WL1 < SEG.SEQ or
    // (SND.WL1 = SEG.SEQ and SND.WL2 =< SEG.ACK).
    let mut t = Sf::established();
    t.write(&bytes(1000));
    t.recv().unwrap();
    send!(t, seq: R, ack: S + 1000, window: 65535);
    send!(t, seq: R, ack: S + 500, window: 0);
    assert_eq!(t.sf.info().snd_wnd, 65535);
    t.write(&bytes(10));
    recv!(t, seq: S + 1000, ack: R, flags: ACK | PSH, payload: bytes(10));
}

#[test]
fn window_from_a_newer_segment_is_taken() {
    let mut t = Sf::established();
    send!(t, seq: R, ack: S, window: 0, payload: bytes(10));
    t.recv_all();
    assert_eq!(t.sf.info().snd_wnd, 0);
    send!(t, seq: R + 10, ack: S, window: 2000);
    assert_eq!(t.sf.info().snd_wnd, 2000);
}

#[test]
fn window_in_syn_ack_is_not_scaled() {
    let t = Sf::client(cfg(), FULL);
    assert_eq!(t.sf.snd_wscale(), 7);
    assert_eq!(t.sf.info().snd_wnd, 65535);
}

#[test]
fn peer_window_is_scaled_after_the_handshake() {
    let mut t = Sf::client(cfg(), FULL);
    send!(t, seq: R, ack: S, window: 100, ts: Some((PEER_TS + 1, T0 as u32)));
    assert_eq!(t.sf.info().snd_wnd, 100 << 7);
}

#[test]
fn peer_window_is_not_scaled_without_its_option() {
    let mut t = Sf::client(big(), PLAIN);
    assert_eq!(t.sf.snd_wscale(), 0);
    send!(t, seq: R, ack: S, window: 100);
    assert_eq!(t.sf.info().snd_wnd, 100);
}

#[test]
fn our_window_is_not_scaled_when_the_peer_has_no_option() {
    let mut t = Sf::client(big(), PLAIN);
    send!(t, seq: R, ack: S, payload: bytes(10));
    recv!(t, seq: S, ack: R + 10, window: 65535);
}

#[test]
fn our_window_is_scaled_when_both_sides_agree() {
    let mut t = Sf::client(big(), FULL);
    let ts = Some((PEER_TS + 1, T0 as u32));
    send!(t, seq: R, ack: S, payload: bytes(10), ts: ts);
    recv!(t, seq: S, ack: R + 10, window: (((1 << 20) - 10) >> 5) as u16, ts: Some((t.ms(), PEER_TS + 1)));
}

#[test]
fn peer_window_scale_is_clamped_to_14() {
    let t = Sf::client(cfg(), PeerOpts { ws: Some(15), ..PLAIN });
    assert_eq!(t.sf.snd_wscale(), 14);
}

#[test]
fn window_scaling_disabled_locally_ignores_the_peer_option() {
    let t = Sf::client(TcpConfig { window_scaling: false, ..cfg() }, FULL);
    assert_eq!(t.sf.snd_wscale(), 0);
}

#[test]
fn server_that_sends_no_window_scale_does_not_scale_the_peer_window() {
    let mut t = Sf::accept(cfg(), Sf::peer_syn(FULL));
    let synack = t.recv().unwrap();
    // Our buffer needs no shift, yet the SYN-ACK says so (shift 0), as Linux:
    // the peer's shift applies only if both SYNs carried the option.
    assert_eq!(synack.ws, Some(0));
    t.advance(Duration::from_millis(10));
    let ts = Some((PEER_TS, T0 as u32));
    send!(t, seq: R, ack: S, window: 100, ts: ts);
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.sf.info().snd_wnd, 100 << 7);
}

#[test]
fn syn_ack_to_a_syn_without_window_scale_carries_none_and_nothing_is_scaled() {
    let mut t = Sf::accept(TcpConfig { recv_buffer: BufferSize::Fixed(1 << 20), ..cfg() }, Sf::peer_syn(PLAIN));
    let synack = t.recv().unwrap();
    assert_eq!(synack.ws, None);
    send!(t, seq: R, ack: S, window: 100);
    assert_eq!(t.state(), State::Established);
    assert_eq!(t.sf.info().snd_wnd, 100);
}
