//! State-machine tests: two subflows wired back to back through the real
//! codec, with a hand on every packet in between.

mod seg;

mod acceptability;
mod close;
mod data;
mod edt;
mod handshake;
mod options;
mod pmtu;
mod rst;
mod tso;
mod window;

use super::*;
use crate::test_util::{keep, pass, sa, Host};
use mptun_wire::parse_tcp_packet;

const A: &str = "10.0.0.1:40000";
const B: &str = "10.0.0.2:5000";

type Pair = crate::test_util::Pair<Subflow>;

/// Drains every packet `sf` wants to send at `now`.
fn drain(sf: &mut Subflow, now: Instant) -> Vec<Vec<u8>> {
    Pair::drain(sf, now)
}

fn deliver(sf: &mut Subflow, now: Instant, pkt: &[u8]) {
    sf.receive(now, pkt);
}

fn header(pkt: &[u8]) -> TcpHeader {
    parse_tcp_packet(pkt).unwrap().tcp
}

fn events(sf: &mut Subflow) -> Vec<Event> {
    std::iter::from_fn(|| sf.poll_event()).collect()
}

fn read_all(sf: &mut Subflow, now: Instant) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = sf.recv(now, &mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// A client and a server, connected; also returns the handshake as it
/// crossed the wire (SYN, SYN-ACK, ACK).
fn connect_traced(cfg_a: TcpConfig, cfg_b: TcpConfig) -> (Pair, Vec<TcpHeader>) {
    let now = Instant::from_millis(1);
    let mut a = Subflow::connect(now, cfg_a, sa(A), sa(B), 1_000, 7);
    let syn = drain(&mut a, now);
    assert_eq!(syn.len(), 1);
    let p = parse_tcp_packet(&syn[0]).unwrap();
    assert!(p.tcp.flags.syn() && !p.tcp.flags.ack());
    let opts = p.tcp.options.summary();
    let b = Subflow::accept(now, cfg_b, sa(B), sa(A), &p.tcp, &opts, u32::MAX - 10, 9);
    let mut trace = vec![p.tcp.clone()];
    let mut pair = Pair::new(a, b, now);
    pair.run_for(Duration::from_secs(5), &mut |_, p| {
        trace.push(header(&p));
        Some(p)
    });
    assert_eq!(pair.a.state(), State::Established);
    assert_eq!(pair.b.state(), State::Established);
    assert_eq!(events(&mut pair.a), vec![Event::Connected]);
    assert_eq!(events(&mut pair.b), vec![Event::Connected]);
    (pair, trace)
}

fn connect(cfg_a: TcpConfig, cfg_b: TcpConfig) -> Pair {
    connect_traced(cfg_a, cfg_b).0
}

/// Runs the pair for up to 5 s with every packet passing.
fn run(p: &mut Pair) {
    p.run_for(Duration::from_secs(5), &mut pass());
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn handshake_negotiates_options_and_data_flows() {
    let (mut p, trace) = connect_traced(TcpConfig::default(), TcpConfig::default());
    // Both ends agreed on timestamps, SACK and window scaling: the SYN-ACK
    // carries all three back, and the ACK that completes the handshake
    // already carries a timestamp.
    let (syn, synack, ack) = (trace[0].options.summary(), trace[1].options.summary(), trace[2].options.summary());
    assert!(syn.sack_permitted && syn.timestamp.is_some() && syn.window_scale.is_some());
    assert!(synack.sack_permitted && synack.timestamp.is_some());
    assert!(ack.timestamp.is_some());
    assert_eq!(Some(p.a.snd_wscale()), synack.window_scale);
    assert_eq!(p.b.snd_wscale(), syn.window_scale.unwrap());
    assert_eq!(p.a.mss(0), 1448);
    let data = pattern(300_000);
    let mut off = 0;
    let mut got = Vec::new();
    for _ in 0..1000 {
        off += p.a.send(&data[off..]);
        p.run_for(Duration::from_millis(50), &mut pass());
        got.extend(read_all(&mut p.b, p.now));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
    assert_eq!(p.a.counters().tcp_retrans_segs, 0);
}

#[test]
fn without_timestamps_sack_or_wscale_the_peer_still_talks() {
    let cfg = TcpConfig { timestamps: false, sack: false, window_scaling: false, ..TcpConfig::default() };
    let (mut p, trace) = connect_traced(cfg, TcpConfig::default());
    let synack = trace[1].options.summary();
    assert!(synack.timestamp.is_none() && !synack.sack_permitted && synack.window_scale.is_none());
    assert_eq!(p.b.snd_wscale(), 0);
    let data = pattern(50_000);
    assert_eq!(p.b.send(&data), data.len());
    run(&mut p);
    assert_eq!(read_all(&mut p.a, p.now), data);
}

#[test]
fn simultaneous_open() {
    let now = Instant::from_millis(1);
    let mut a = Subflow::connect(now, TcpConfig::default(), sa(A), sa(B), 100, 1);
    let mut b = Subflow::connect(now, TcpConfig::default(), sa(B), sa(A), 9_000, 2);
    let sa = drain(&mut a, now);
    let sb = drain(&mut b, now);
    deliver(&mut a, now, &sb[0]);
    deliver(&mut b, now, &sa[0]);
    assert_eq!(a.state(), State::SynReceived);
    assert_eq!(b.state(), State::SynReceived);
    let mut p = Pair::new(a, b, now);
    run(&mut p);
    assert_eq!(p.a.state(), State::Established);
    assert_eq!(p.b.state(), State::Established);
    assert_eq!(events(&mut p.a), vec![Event::Connected]);
}

#[test]
fn orderly_close_walks_fin_wait_and_time_wait() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    p.a.send(b"bye");
    p.a.close();
    assert_eq!(p.a.state(), State::FinWait1);
    p.run_for(Duration::from_millis(100), &mut pass());
    assert_eq!(p.a.state(), State::FinWait2);
    assert_eq!(p.b.state(), State::CloseWait);
    assert_eq!(read_all(&mut p.b, p.now), b"bye");
    assert!(p.b.recv_finished());
    p.b.close();
    p.run_for(Duration::from_millis(100), &mut pass());
    assert_eq!(p.a.state(), State::TimeWait);
    assert_eq!(p.b.state(), State::Closed);
    p.run_for(Duration::from_secs(61), &mut pass());
    assert_eq!(p.a.state(), State::Closed);
}

#[test]
fn simultaneous_close() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    p.a.close();
    p.b.close();
    // Both FINs cross on the wire.
    let fa = drain(&mut p.a, p.now);
    let fb = drain(&mut p.b, p.now);
    assert!(header(&fa[0]).flags.fin() && header(&fb[0]).flags.fin());
    deliver(&mut p.a, p.now, &fb[0]);
    deliver(&mut p.b, p.now, &fa[0]);
    assert_eq!(p.a.state(), State::Closing);
    assert_eq!(p.b.state(), State::Closing);
    p.run_for(Duration::from_millis(100), &mut pass());
    assert_eq!(p.a.state(), State::TimeWait);
    assert_eq!(p.b.state(), State::TimeWait);
    p.run_for(Duration::from_secs(61), &mut pass());
    assert_eq!(p.a.state(), State::Closed);
    assert_eq!(p.b.state(), State::Closed);
}

fn crafted(from: &Subflow, seq: Seq, ack: Seq, flags: TcpFlags) -> Vec<u8> {
    // A segment as `from`'s peer would send it.
    let hdr = TcpHeader::new(from.remote().port(), from.local().port(), seq.0, ack.0, flags, 1000);
    let mut buf = vec![0u8; 100];
    let n = mptun_wire::emit_tcp_packet(from.remote().ip(), from.local().ip(), 64, &hdr, &[], &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn rst_exact_resets_in_window_challenges_out_of_window_is_ignored() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    let now = p.now;
    let rcv_nxt = p.a.snd_nxt(); // B's rcv_nxt

    // Out of window: silently dropped.
    let far = crafted(&p.b, rcv_nxt + 10_000_000, Seq(0), TcpFlags::RST);
    deliver(&mut p.b, now, &far);
    assert!(drain(&mut p.b, now).is_empty());
    assert_eq!(p.b.state(), State::Established);

    // In window but not exact: challenge ACK, connection lives (RFC 5961 3.2).
    let near = crafted(&p.b, rcv_nxt + 100, Seq(0), TcpFlags::RST);
    deliver(&mut p.b, now, &near);
    let out = drain(&mut p.b, now);
    assert_eq!(out.len(), 1);
    let h = header(&out[0]);
    assert!(h.flags.ack() && !h.flags.rst());
    assert_eq!(h.ack, rcv_nxt.0);
    assert_eq!(p.b.state(), State::Established);
    assert_eq!(p.b.counters().tcp_ext_tcp_challenge_ack, 1);

    // Exact: reset.
    let exact = crafted(&p.b, rcv_nxt, Seq(0), TcpFlags::RST);
    deliver(&mut p.b, now, &exact);
    assert_eq!(p.b.state(), State::Closed);
    assert_eq!(events(&mut p.b), vec![Event::Reset]);
}

#[test]
fn syn_on_established_connection_gets_a_challenge_ack() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    let syn = crafted(&p.b, p.a.snd_nxt() + 5, Seq(0), TcpFlags::SYN);
    deliver(&mut p.b, p.now, &syn);
    let out = drain(&mut p.b, p.now);
    assert_eq!(out.len(), 1);
    assert!(header(&out[0]).flags.ack());
    assert_eq!(p.b.state(), State::Established);
    assert_eq!(p.b.counters().tcp_ext_tcp_syn_challenge, 1);
}

#[test]
fn ack_for_unsent_data_is_challenged() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    let bad = crafted(&p.b, p.a.snd_nxt(), p.b.snd_nxt() + 5000, TcpFlags::ACK);
    deliver(&mut p.b, p.now, &bad);
    assert_eq!(drain(&mut p.b, p.now).len(), 1);
    assert_eq!(p.b.snd_una(), p.b.snd_nxt());
}

#[test]
fn zero_window_probe_recovers_a_lost_window_update() {
    let small = TcpConfig { recv_buffer: BufferSize::Fixed(8192), ..TcpConfig::default() };
    let mut p = connect(TcpConfig::default(), small);
    let data = pattern(40_000);
    let mut off = p.a.send(&data);
    // Fill the receiver's window; nobody reads.
    p.run_for(Duration::from_millis(200), &mut pass());
    assert_eq!(p.a.info().snd_wnd, 0, "window should be closed");
    assert_eq!(p.b.recv_ready(), 8192);
    // The application reads; the window update that follows is lost.
    let mut got = read_all(&mut p.b, p.now);
    let mut dropped = 0;
    p.run_for(
        Duration::from_millis(100),
        &mut keep(|from_a, h| {
            if !from_a && h.window > 0 && dropped == 0 {
                dropped += 1;
                return false;
            }
            true
        }),
    );
    assert_eq!(dropped, 1);
    assert_eq!(p.a.info().snd_wnd, 0, "sender must not know yet");
    // The persist timer fires, probes, and the reply reopens the window.
    for _ in 0..200 {
        off += p.a.send(&data[off..]);
        p.run_for(Duration::from_millis(500), &mut pass());
        got.extend(read_all(&mut p.b, p.now));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
    assert!(p.a.counters().tcp_ext_tcp_win_probe >= 1);
    assert!(p.b.counters().tcp_ext_tcp_to_zero_window_adv >= 1);
}

#[test]
fn retransmission_after_rto_with_backoff() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    let data = pattern(5000);
    p.a.send(&data);
    let rto0 = p.a.info().rto;
    // Black-hole A→B for 1.5 s: the first RTO and at least one backed-off one fire.
    let t0 = p.now;
    let mut drops = Vec::new();
    p.run_for(
        Duration::from_millis(1500),
        &mut keep(|from_a, h| {
            if from_a {
                drops.push(h.seq);
                false
            } else {
                true
            }
        }),
    );
    // The first transmission and every retransmission start at the same byte.
    let first = p.a.iss().0.wrapping_add(1);
    assert!(drops.len() >= 3, "{drops:?}");
    assert!(drops.contains(&first));
    assert_eq!(drops.iter().filter(|&&s| s == first).count() as u64, 1 + p.a.counters().tcp_ext_tcp_timeouts);
    let timeouts = p.a.counters().tcp_ext_tcp_timeouts;
    assert!(timeouts >= 2, "{timeouts} timeouts in {:?}", p.now - t0);
    let rto = p.a.info().rto;
    assert!(rto >= rto0 * 4, "RTO must back off: {rto:?} vs {rto0:?}");
    assert_eq!(p.a.info().cwnd, 1);
    assert_eq!(p.a.ca_state(), CaState::Loss);
    // Path heals: the data arrives intact and the connection recovers.
    p.run_for(Duration::from_secs(10), &mut pass());
    assert_eq!(read_all(&mut p.b, p.now), data);
    assert!(p.a.counters().tcp_ext_tcp_slow_start_retrans >= 1);
    assert_eq!(p.a.ca_state(), CaState::Open);
    // The backoff is gone: the RTO is back to its unbacked-off value.
    assert_eq!(p.a.rto_streak(), 0);
    assert!(p.a.info().rto < rto0 * 2, "{:?} vs {rto0:?}", p.a.info().rto);
}

#[test]
fn sack_recovery_repairs_a_single_loss_without_timeout() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    let data = pattern(60_000);
    p.a.send(&data);
    let mut n = 0;
    p.run_for(
        Duration::from_secs(5),
        &mut keep(|from_a, _| {
            if from_a {
                n += 1;
                return n != 3; // lose the third data segment once
            }
            true
        }),
    );
    assert_eq!(read_all(&mut p.b, p.now), data);
    let c = p.a.counters();
    assert_eq!(c.tcp_ext_tcp_sack_recovery, 1);
    assert_eq!(c.tcp_ext_tcp_timeouts, 0);
    assert_eq!(c.tcp_retrans_segs, 1);
    assert!(p.b.counters().tcp_ext_tcp_ofo_queue >= 1);
}

#[test]
fn persist_is_not_armed_with_data_in_flight() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    p.a.send(&pattern(1000));
    let sent = drain(&mut p.a, p.now);
    assert_eq!(sent.len(), 1);
    // The timer that is armed is the RTO
    // (or the loss probe ahead of it): the data goes again from snd_una, and
    // no window probe goes out.
    let deadline = p.now + p.a.info().rto;
    let mut out = Vec::new();
    while out.is_empty() {
        let t = p.a.poll_timeout().expect("a timer is armed");
        assert!(t <= deadline, "nothing resent by the RTO");
        p.a.handle_timeout(t);
        out = drain(&mut p.a, t);
    }
    let data: Vec<_> = out.iter().map(|p| parse_tcp_packet(p).unwrap()).filter(|p| !p.payload.is_empty()).collect();
    assert_eq!(data.len(), 1);
    for d in &data {
        assert_eq!(d.tcp.seq, p.a.snd_una().0);
        assert_eq!(d.payload.len(), 1000);
    }
    assert!(out.iter().all(|o| header(o).seq != p.a.snd_una().0.wrapping_sub(1)), "no window probe");
    assert_eq!(p.a.counters().tcp_ext_tcp_win_probe, 0);
}

#[test]
fn lost_retransmission_is_detected_by_rack_without_timeout() {
    let mut p = connect(TcpConfig::default(), TcpConfig::default());
    let data = pattern(200_000);
    let mut off = p.a.send(&data);
    // Lose the 3rd data segment and, once, its retransmission.
    let mut n = 0;
    let mut victim = None;
    let mut dropped_retx = false;
    let mut got = Vec::new();
    for _ in 0..100 {
        p.run_for(
            Duration::from_millis(50),
            &mut keep(|from_a, h| {
                if !from_a || h.flags.syn() {
                    return true;
                }
                n += 1;
                if n == 3 {
                    victim = Some(h.seq);
                    return false;
                }
                if Some(h.seq) == victim && !dropped_retx {
                    dropped_retx = true;
                    return false;
                }
                true
            }),
        );
        got.extend(read_all(&mut p.b, p.now));
        off += p.a.send(&data[off..]);
        if got.len() == data.len() {
            break;
        }
    }
    assert!(dropped_retx);
    assert_eq!(got, data);
    let c = p.a.counters();
    assert_eq!(c.tcp_ext_tcp_timeouts, 0, "{c:?}");
    assert_eq!(c.tcp_ext_tcp_lost_retransmit, 1);
    assert_eq!(c.tcp_retrans_segs, 2);
}
