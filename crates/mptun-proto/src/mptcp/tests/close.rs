//! Ending a connection: DATA_FIN in both directions, and MP_FASTCLOSE on abort.

use super::*;

#[test]
fn data_fin_closes_both_directions() {
    use crate::tcp::State;
    let state = |e: &crate::endpoint::Endpoint, c| e.conn(c).unwrap().info().state;
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(100), &mut pass());
    let sh = n.b.accept().unwrap();
    assert_eq!(state(&n.a, h), State::Established);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let reply = b"thanks, bye";
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..200 {
        sent += n.a.send(h, &data[sent..]).unwrap_or(0);
        if sent == data.len() {
            n.a.close(h);
        }
        n.run(Duration::from_millis(20), &mut pass());
        got.extend(n.read_b(sh, &mut buf));
        if n.b.recv_finished(sh) {
            break;
        }
    }
    assert_eq!(got, data);
    assert!(n.b.recv_finished(sh));
    assert!(!n.a.recv_finished(h));
    assert_eq!((state(&n.a, h), state(&n.b, sh)), (State::FinWait2, State::CloseWait));
    // The server answers and closes its direction.
    assert_eq!(n.b.send(sh, reply).unwrap_or(0), reply.len());
    n.b.close(sh);
    n.run(Duration::from_millis(500), &mut pass());
    let k = n.a.recv(h, n.now, &mut buf).unwrap_or(0);
    assert_eq!(&buf[..k], reply);
    assert!(n.a.recv_finished(h));
    // Both DATA_FINs acknowledged: the connection is over while its
    // subflows close (FIN) and linger in TIME_WAIT.
    n.run(Duration::from_secs(1), &mut pass());
    let a = n.a.conn(h).unwrap().info();
    assert!(a.subflows.iter().any(|s| s.tcp.state == State::TimeWait), "{:?}", a.subflows);
    assert_eq!((a.state, state(&n.b, sh)), (State::Closed, State::Closed));
    n.run(Duration::from_secs(70), &mut pass());
    assert!(n.a.is_closed(h) && n.b.is_closed(sh));
    let evs: Vec<_> = std::iter::from_fn(|| n.a.poll_event()).filter(|(c, _)| *c == h).map(|(_, e)| e).collect();
    assert!(evs.contains(&Event::PeerFin), "{evs:?}");
}

#[test]
fn abort_sends_mp_fastclose_and_the_peer_drops_the_whole_connection() {
    let mut n = two_path();
    let h = n.connect();
    n.run(Duration::from_millis(200), &mut pass());
    let sh = n.b.accept().unwrap();
    assert_eq!(n.b.conn(sh).unwrap().subflows().count(), 2);
    n.a.abort(h);
    let mut fastcloses = 0;
    n.run(Duration::from_millis(50), &mut |from_a, p| {
        if from_a && mptcp_opts(&p).iter().any(|o| matches!(o, MptcpOption::MpFastclose { .. })) {
            fastcloses += 1;
        }
        Some(p)
    });
    assert!(fastcloses >= 1);
    assert_eq!(n.b.counters().mptcp_mp_fastclose_rx, 1);
    assert!(n.b.is_closed(sh));
    let evs: Vec<_> = std::iter::from_fn(|| n.b.poll_event()).filter(|(c, _)| *c == sh).map(|(_, e)| e).collect();
    assert!(evs.contains(&Event::Reset), "{evs:?}");
}
