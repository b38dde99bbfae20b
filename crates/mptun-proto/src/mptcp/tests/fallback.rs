//! Fallback to TCP when a middlebox strips the MPTCP options: mid-stream
//! (an infinite mapping), and at every point of a transfer, with loss or
//! reordering at that point.

use super::*;

#[test]
fn options_stripped_mid_stream_fall_back_to_an_infinite_mapping() {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    n.run(Duration::from_millis(50), &mut pass());
    let sh = n.b.accept().unwrap();
    let data: Vec<u8> = (0..400_000u32).map(|i| (i % 241) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut step = 0;
    let mut reasons = (None, None);
    for _ in 0..400 {
        step += 1;
        // A slow writer, so the options disappear in the middle of the stream.
        let upto = (sent + 8192).min(data.len());
        sent += n.a.send(h, &data[sent..upto]).unwrap_or(0);
        if sent == data.len() {
            n.a.close(h);
        }
        // After 100 ms of MPTCP, a middlebox starts stripping the options both ways.
        let strip = step > 5;
        n.run(Duration::from_millis(20), &mut |_, p| Some(if strip { strip_mptcp(&p) } else { p }));
        got.extend(n.read_b(sh, &mut buf));
        reasons.0 = reasons.0.or(n.a.conn(h).and_then(|c| c.fallback_reason()));
        reasons.1 = reasons.1.or(n.b.conn(sh).and_then(|c| c.fallback_reason()));
        if n.b.recv_finished(sh) {
            break;
        }
    }
    let stripped = Some(FallbackReason::StrippedOptions);
    assert_eq!(reasons, (stripped, stripped), "both ends took the options as stripped");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "stream corrupted across the fallback");
    assert!(n.b.recv_finished(sh), "the FIN must end the stream after the fallback");
    assert_eq!(n.a.counters().mptcp_dss_fallback, 1);
    assert_eq!(n.b.counters().mptcp_dss_fallback, 1);
}

/// How a stream ended for the application at B.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Every byte, then the end of stream.
    Whole,
    /// An explicit error (reset) after a prefix of the stream.
    Error,
}

/// Where in A's stream the stripping began: the first stripped packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum StripPoint {
    /// A SYN, SYN-ACK or third ACK.
    Handshake,
    /// A packet without data (either way) after the handshake.
    PureAck,
    /// A data segment of A that starts a DSS mapping.
    MappingStart,
    /// A data segment of A strictly inside a mapping (a partial mapping is
    /// in place at the receiver when the options stop).
    MappingInside,
    /// A data segment of A that ends a mapping it did not start.
    MappingEnd,
}

/// Classifies the first stripped packet by its options before stripping.
fn strip_point(p: &[u8], from_a: bool, iss: u32) -> StripPoint {
    let pkt = parse_tcp_packet(p).unwrap();
    if pkt.tcp.flags.syn() || mptcp_opts(p).iter().any(|o| matches!(o, MptcpOption::MpCapable { .. })) {
        return StripPoint::Handshake;
    }
    if !from_a || pkt.payload.is_empty() {
        return StripPoint::PureAck;
    }
    let rel = pkt.tcp.seq.wrapping_sub(iss);
    let end = rel.wrapping_add(pkt.payload.len() as u32);
    let map = mptcp_opts(p).into_iter().find_map(|o| match o {
        MptcpOption::Dss { mapping: Some(m), .. } => Some(m),
        _ => None,
    });
    match map {
        Some(m) if m.ssn == rel => StripPoint::MappingStart,
        Some(m) if m.ssn.wrapping_add(u32::from(m.len)) == end => StripPoint::MappingEnd,
        _ => StripPoint::MappingInside,
    }
}

/// A 120 kB transfer A → B (8 KiB writes, so several mappings) where a
/// middlebox strips every MPTCP option from the `strip_from`-th packet on
/// (counting both directions), optionally dropping the packet just after
/// that point (`loss`) or holding one back behind the next (`reorder`).
/// The application at B gets the whole stream and its end, or an explicit
/// error: never a short stream that looks complete, never a silent stall.
/// Also returns where the stripping began.
fn fallback_case(strip_from: usize, loss: bool, reorder: bool) -> (Outcome, StripPoint) {
    let mut n = net(EndpointConfig::default(), EndpointConfig::default());
    let h = n.connect();
    let (mut iss, mut point) = (0u32, None);
    let data: Vec<u8> = (0..120_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let (mut sent, mut got, mut buf) = (0, Vec::new(), vec![0u8; 65536]);
    let (mut seen, mut held): (usize, Option<Vec<u8>>) = (0, None);
    let mut sh = None;
    let mut error = false;
    for _ in 0..1500 {
        let upto = (sent + 8192).min(data.len());
        sent += n.a.send(h, &data[sent..upto]).unwrap_or(0);
        if sent == data.len() {
            n.a.close(h);
        }
        n.run(Duration::from_millis(5), &mut |from_a, p| {
            let k = seen;
            seen += 1;
            if k == 0 {
                iss = parse_tcp_packet(&p).unwrap().tcp.seq;
            }
            if k == strip_from {
                point = Some(strip_point(&p, from_a, iss));
            }
            let p = if k >= strip_from { strip_mptcp(&p) } else { p };
            if loss && k == strip_from + 1 {
                return None;
            }
            if reorder && k == strip_from && held.is_none() {
                held = Some(p);
                return None;
            }
            if let Some(q) = held.take() {
                // Released behind the packet that followed it.
                n_push_later(q);
            }
            Some(p)
        });
        for q in take_later() {
            // The held packet arrives last, at the next step.
            n.b.handle_packet(n.now, &q);
            n.a.handle_packet(n.now, &q);
        }
        sh = sh.or_else(|| n.b.accept());
        while let Some((c, ev)) = n.b.poll_event() {
            if Some(c) == sh && matches!(ev, crate::tcp::Event::Reset | crate::tcp::Event::TimedOut) {
                error = true;
            }
        }
        if let Some(sh) = sh {
            got.extend(n.read_b(sh, &mut buf));
            assert!(data.starts_with(&got), "strip at {strip_from}: corrupted stream");
            if error {
                return (Outcome::Error, point.expect("stripping began"));
            }
            if n.b.recv_finished(sh) {
                assert_eq!(got.len(), data.len(), "strip at {strip_from}: the stream ended short");
                return (Outcome::Whole, point.expect("stripping began"));
            }
        }
    }
    panic!(
        "strip at {strip_from} (loss {loss}, reorder {reorder}): stalled with {} of {} bytes",
        got.len(),
        data.len()
    );
}

thread_local! {
    static LATER: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}
fn n_push_later(p: Vec<u8>) {
    LATER.with(|l| l.borrow_mut().push(p));
}
fn take_later() -> Vec<Vec<u8>> {
    LATER.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

#[test]
fn fallback_at_every_point_delivers_every_byte_or_fails_loudly() {
    let mut points = std::collections::HashMap::new();
    for strip_from in (0..2).chain(3..70) {
        for (loss, reorder) in [(false, false), (true, false), (false, true)] {
            let (o, at) = fallback_case(strip_from, loss, reorder);
            *points.entry(at).or_insert(0) += 1;
            // With one subflow and every byte still held by TCP, a fallback
            // at any point is transparent: the whole stream, then its end
            // (fallback_case has already checked every byte read).
            assert_eq!(o, Outcome::Whole, "strip at {strip_from} ({at:?}), loss {loss}, reorder {reorder}");
        }
    }
    // The sweep covers the handshake, pure ACKs, and each position in a
    // mapping: before (at its start), inside and at its end.
    for at in [
        StripPoint::Handshake,
        StripPoint::PureAck,
        StripPoint::MappingStart,
        StripPoint::MappingInside,
        StripPoint::MappingEnd,
    ] {
        assert!(points.get(&at).copied().unwrap_or(0) > 0, "no case starts at {at:?}: {points:?}");
    }
}

/// Options stripped from the third ACK on: the server falls back when the
/// third ACK has no MP_CAPABLE (Linux MPCapableFallbackACK).
#[test]
fn fallback_when_the_third_ack_is_stripped() {
    assert_eq!(fallback_case(2, false, false), (Outcome::Whole, StripPoint::Handshake));
}
