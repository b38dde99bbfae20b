//! Path MTU of one subflow: the device MTU bounds the MSS announced and
//! used; ICMP "too big" reports are checked against `snd_una..=snd_nxt`
//! (RFC 5927) before they lower it, and what is in flight is cut again.

use super::*;

fn syn_mss(sf: &mut Subflow, now: Instant) -> Option<u16> {
    let syn = drain(sf, now);
    header(&syn[0]).options.summary().mss
}

#[test]
fn pmtu_device_mtu_bounds_announced_mss() {
    let now = Instant::from_millis(1);
    for (local, remote, mtu, want) in [
        (A, B, 1500, 1460),
        (A, B, 1280, 1240),
        (A, B, 9000, 1460), // the configured MSS still caps it
        ("[fd00::1]:40000", "[fd00::2]:5000", 1500, 1440),
        ("[fd00::1]:40000", "[fd00::2]:5000", 1280, 1220),
    ] {
        let mut sf = Subflow::connect(now, TcpConfig::default(), sa(local), sa(remote), 1, 1);
        sf.set_device_mtu(mtu);
        assert_eq!(syn_mss(&mut sf, now), Some(want), "{local} mtu {mtu}");
    }
    // Without a device MTU: the configured MSS, untouched.
    let mut sf = Subflow::connect(now, TcpConfig::default(), sa(A), sa(B), 1, 1);
    assert_eq!(syn_mss(&mut sf, now), Some(1460));
    assert_eq!(sf.path_mtu(), None);
}

/// A pair where A's device has `mtu`; B's MSS comes from A's SYN.
fn pair_with_mtu(mtu: u32) -> Pair {
    let now = Instant::from_millis(1);
    let mut a = Subflow::connect(now, TcpConfig::default(), sa(A), sa(B), 1_000, 7);
    a.set_device_mtu(mtu);
    let syn = drain(&mut a, now);
    let p = parse_tcp_packet(&syn[0]).unwrap();
    let opts = p.tcp.options.summary();
    let mut b = Subflow::accept(now, TcpConfig::default(), sa(B), sa(A), &p.tcp, &opts, 5_000, 9);
    b.set_device_mtu(1500);
    let mut pair = Pair::new(a, b, now);
    run(&mut pair);
    assert_eq!(pair.a.state(), State::Established);
    pair
}

#[test]
fn pmtu_small_device_mtu_bounds_both_directions() {
    let mut p = pair_with_mtu(1280);
    assert_eq!(p.a.mss(0), 1240 - 12);
    assert_eq!(p.b.mss(0), 1240 - 12, "B is clamped by A's MSS option");
    let data = pattern(200_000);
    let room = p.a.send_space();
    assert_eq!(p.a.send(&data), data.len().min(room));
    let sent_a = p.a.send_queued();
    p.b.send(&data[..50_000]);
    let mut largest = 0;
    p.run_for(Duration::from_secs(5), &mut |_, pkt| {
        largest = largest.max(pkt.len());
        Some(pkt)
    });
    assert_eq!(largest, 1280);
    assert_eq!(read_all(&mut p.b, p.now), data[..sent_a]);
    assert_eq!(read_all(&mut p.a, p.now), data[..50_000]);
}

#[test]
fn pmtu_too_big_outside_snd_una_snd_nxt_is_ignored() {
    let mut p = pair_with_mtu(1500);
    p.a.send(&pattern(60_000));
    // Let a window go out, unacknowledged.
    let _ = drain(&mut p.a, p.now);
    let (una, nxt) = (p.a.snd_una(), p.a.snd_nxt());
    assert!(nxt.gt(una));
    for seq in [nxt + 1, una - 1, nxt + 0x8000_0000, una - 70_000] {
        assert!(!p.a.handle_too_big(p.now, seq, 1280));
    }
    assert_eq!(p.a.counters().tcp_ext_out_of_window_icmps, 4);
    assert_eq!(p.a.path_mtu(), Some(1500));
    // In window but not lower: ignored, not counted as out of window.
    assert!(!p.a.handle_too_big(p.now, una, 1500));
    assert!(!p.a.handle_too_big(p.now, una, 9000));
    // IPv4 reports below 552 are raised to it (Linux ip_rt_min_pmtu).
    assert!(p.a.handle_too_big(p.now, nxt, 100));
    assert_eq!(p.a.path_mtu(), Some(552));
    assert_eq!(p.a.counters().tcp_ext_out_of_window_icmps, 4);
    assert_eq!(p.a.counters().mptun_pmtu_reduced, 1);
}

#[test]
fn pmtu_too_big_recuts_what_is_in_flight() {
    let mut p = pair_with_mtu(1500);
    let data = pattern(100_000);
    let n = p.a.send(&data);
    // Everything A sends now is dropped by a 1280-byte hop.
    let first = drain(&mut p.a, p.now);
    assert!(first.iter().all(|q| q.len() == 1500 || q.len() < 1280));
    let seq = header(&first[0]).seq;
    assert!(p.a.handle_too_big(p.now, Seq(seq), 1280));
    let mut largest = 0;
    p.run_for(Duration::from_secs(5), &mut |from_a, pkt| {
        if from_a {
            largest = largest.max(pkt.len());
        }
        (pkt.len() <= 1280).then_some(pkt)
    });
    assert_eq!(largest, 1280);
    assert_eq!(read_all(&mut p.b, p.now), data[..n]);
    assert_eq!(p.a.counters().tcp_ext_tcp_timeouts, 0, "recut at once, no RTO");
}

#[test]
fn pmtu_black_hole_detection_then_probing() {
    let mut p = pair_with_mtu(1500);
    let data = pattern(3_000_000);
    let mut off = 0;
    let mut got = Vec::new();
    for _ in 0..4000 {
        off += p.a.send(&data[off..]);
        p.run(Duration::from_millis(50), &mut |_, pkt| (pkt.len() <= 1280).then_some(pkt));
        got.extend(read_all(&mut p.b, p.now));
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data, "got {} of {}: {:?} {:?}", got.len(), data.len(), p.a, p.a.info());
    let c = p.a.counters();
    // Three seconds of RTOs (Linux tcp_retries1 timing), then the rest.
    assert!(p.now < Instant::from_millis(8_000), "{:?}", p.now);
    assert_eq!(c.mptun_pmtu_black_hole, 1);
    assert!(c.tcp_ext_tcp_mtup_success >= 1 && c.tcp_ext_tcp_mtup_fail >= 1, "{c:?}");
    let pmtu = p.a.path_mtu().unwrap();
    assert!((1264..=1280).contains(&pmtu), "{pmtu}");
}
