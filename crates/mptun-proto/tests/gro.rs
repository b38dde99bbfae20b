//! Receiving super-segments whole: a TUN with offload hands the runtime a
//! sender's TSO skb (or the kernel's GRO of a train) as one packet of up to
//! 64 KiB, with the TCP checksum left partial, and the core takes it as one
//! segment, as Linux takes a GRO skb. Two `Endpoint`s in virtual time
//! exchange MPTCP data both ways over a wire that carries the sender's TSO
//! super-segments uncut, as a TUN read delivers them.

mod common;

use bytes::Bytes;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::{Duration, Instant};
use mptun_wire::gso::{set_partial_checksum, Layout};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const N: usize = 4 << 20;

/// How super-segments reach the receiver.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rx {
    /// Complete checksum, fed to `handle_packet` (it verifies it).
    Verified,
    /// Partial checksum (pseudo-header only, as a TUN read with
    /// `NEEDS_CSUM` gives it), fed to `handle_packet_checksum_verified`.
    Partial,
    /// Partial checksum fed to `handle_packet`: every super-segment fails
    /// its checksum and is dropped.
    PartialUnflagged,
    /// Partial checksum, the packet lent as it is to `handle_packet_bytes`
    /// (as the runtime lends a GRO read's buffer).
    Lent,
}

/// A lent packet's buffer that counts itself while alive.
struct Counted {
    buf: Vec<u8>,
    alive: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Net {
    ep: [Endpoint; 2],
    h: [Option<ConnectionHandle>; 2],
    now: Instant,
    wire: VecDeque<(Instant, usize, Vec<u8>)>,
    tx: [Vec<u8>; 2],
    sent: [usize; 2],
    got: [Vec<u8>; 2],
    closed: [bool; 2],
    rx: Rx,
    rng: ChaCha8Rng,
    /// Probability of dropping a data-carrying packet.
    loss: f64,
    /// Per receiver: packets handed in, of which super-segments, and the
    /// wire segments they stood for.
    packets: [u64; 2],
    supers: [u64; 2],
    wire_segments: [u64; 2],
    /// Lent packets still held by an endpoint, and how many were kept
    /// (still held when `handle_packet_bytes` returned).
    alive: Arc<AtomicUsize>,
    kept: usize,
}

fn pattern(seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; N];
    ChaCha8Rng::seed_from_u64(seed).fill(&mut v[..]);
    v
}

impl Net {
    fn new(rx: Rx, loss: f64) -> Net {
        let (ca, sa) = (common::sa("10.1.0.1:0"), common::sa("10.1.0.2:80"));
        let mut c = Endpoint::new(EndpointConfig::default(), [1; 32]);
        let mut s = Endpoint::new(EndpointConfig::default(), [2; 32]);
        c.set_device_mtu(ca.ip(), 1500);
        s.set_device_mtu(sa.ip(), 1500);
        s.listen(sa);
        let ch = c.connect(Instant::ZERO, ca, sa).expect("connect");
        Net {
            ep: [c, s],
            h: [Some(ch), None],
            now: Instant::ZERO,
            wire: VecDeque::new(),
            tx: [pattern(1), pattern(2)],
            sent: [0; 2],
            got: [Vec::new(), Vec::new()],
            closed: [false; 2],
            rx,
            rng: ChaCha8Rng::seed_from_u64(7),
            loss,
            packets: [0; 2],
            supers: [0; 2],
            wire_segments: [0; 2],
            alive: Arc::new(AtomicUsize::new(0)),
            kept: 0,
        }
    }

    fn pump(&mut self) {
        if self.h[1].is_none() {
            self.h[1] = self.ep[1].accept();
        }
        let mut buf = vec![0u8; 1 << 18];
        for i in 0..2 {
            let Some(h) = self.h[i] else { continue };
            let ep = &mut self.ep[i];
            while self.sent[i] < N {
                match ep.send(h, &self.tx[i][self.sent[i]..]) {
                    Ok(n) if n > 0 => self.sent[i] += n,
                    _ => break,
                }
            }
            if self.sent[i] == N && !self.closed[i] && ep.is_established(h) {
                ep.close(h);
                self.closed[i] = true;
            }
            while let Ok(n @ 1..) = ep.recv(h, self.now, &mut buf) {
                self.got[i].extend_from_slice(&buf[..n]);
            }
            while ep.poll_event().is_some() {}
        }
        let mut out = vec![0u8; 65536];
        for i in 0..2 {
            while let Some(t) = self.ep[i].poll_transmit(self.now, &mut out) {
                let n = t.assemble(&mut out);
                let mut p = out[..n].to_vec();
                let l = Layout::parse(&p).expect("the stack emits valid packets");
                let segs = match t.segment_size {
                    Some(size) => l.segment_count(size) as u64,
                    None => 1,
                };
                if self.rx != Rx::Verified {
                    // What a TUN read with offload hands over: the checksum
                    // left to the hardware.
                    set_partial_checksum(&mut p, &l);
                }
                if l.payload_len() > 0 && self.rng.random_bool(self.loss) {
                    continue;
                }
                self.wire_segments[1 - i] += segs;
                self.wire.push_back((self.now + Duration::from_micros(500), 1 - i, p));
            }
        }
    }

    fn step(&mut self) -> bool {
        self.pump();
        let next = [self.wire.front().map(|w| w.0), self.ep[0].poll_timeout(), self.ep[1].poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        while self.wire.front().is_some_and(|w| w.0 <= self.now) {
            let (_, to, p) = self.wire.pop_front().unwrap();
            self.packets[to] += 1;
            self.supers[to] += (Layout::parse(&p).unwrap().payload_len() > 1460) as u64;
            match self.rx {
                Rx::Verified | Rx::PartialUnflagged => self.ep[to].handle_packet(self.now, &p),
                Rx::Partial => self.ep[to].handle_packet_checksum_verified(self.now, &p),
                Rx::Lent => {
                    let before = self.alive.fetch_add(1, Ordering::Relaxed);
                    let b = Bytes::from_owner(Counted { buf: p, alive: self.alive.clone() });
                    self.ep[to].handle_packet_bytes(self.now, b, true);
                    self.kept += (self.alive.load(Ordering::Relaxed) > before) as usize;
                }
            }
        }
        for ep in &mut self.ep {
            ep.handle_timeout(self.now);
        }
        true
    }

    fn run(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        while self.now < end && self.step() {
            if self.got[0].len() == N && self.got[1].len() == N {
                return true;
            }
        }
        false
    }
}

#[test]
fn whole_super_segments_are_received_as_one_segment_each() {
    for rx in [Rx::Verified, Rx::Partial] {
        let mut net = Net::new(rx, 0.0);
        assert!(net.run(Duration::from_secs(30)), "{rx:?}: {} / {} bytes", net.got[0].len(), net.got[1].len());
        assert!(net.got[1] == net.tx[0] && net.got[0] == net.tx[1], "{rx:?}: bytes differ");
        let c = net.ep[1].conn(net.h[1].unwrap()).unwrap();
        assert_eq!(c.mode(), mptun_proto::mptcp::Mode::Mptcp, "{rx:?}: MPTCP end to end");
        for i in 0..2 {
            // The data came in super-segments, each taken whole (and ACKed
            // once): ten times fewer packets than wire segments. The bounds
            // sit well below what this fixed-seed run delivers.
            assert!(net.supers[i] > 50, "{rx:?} {i}: {} super-segments", net.supers[i]);
            assert!(net.wire_segments[i] > 10 * net.packets[i], "{rx:?} {i}: {:?}", net.wire_segments);
            let k = net.ep[i].counters();
            assert_eq!(k.mptun_malformed, 0, "{rx:?}");
            assert_eq!(k.mptcp_data_csum_err, 0, "{rx:?}");
        }
    }
}

#[test]
fn whole_super_segments_survive_losses_and_reordering_through_the_ofo_queue() {
    let mut net = Net::new(Rx::Partial, 0.03);
    assert!(net.run(Duration::from_secs(120)), "{} / {} bytes", net.got[0].len(), net.got[1].len());
    assert!(net.got[1] == net.tx[0] && net.got[0] == net.tx[1], "bytes differ");
    let k = net.ep[0].counters();
    let r = net.ep[1].counters();
    assert!(k.tcp_retrans_segs > 0 && r.tcp_ext_tcp_ofo_queue > 0, "losses were repaired out of order");
}

/// Super-segments lent to the endpoint are kept as they are (no copy: the
/// receive queue still holds the packet when the call returns), survive
/// losses through the out-of-order queues of both layers, and every one is
/// released once the application has read its data.
#[test]
fn lent_super_segments_are_queued_without_a_copy_and_released_when_read() {
    for loss in [0.0, 0.03] {
        let mut net = Net::new(Rx::Lent, loss);
        assert!(net.run(Duration::from_secs(120)), "{loss}: {} / {} bytes", net.got[0].len(), net.got[1].len());
        assert!(net.got[1] == net.tx[0] && net.got[0] == net.tx[1], "{loss}: bytes differ");
        // Most super-segments are kept (the others are under
        // `RECV_ZERO_COPY_MIN`), with or without losses.
        assert!(net.kept > 50, "{loss}: {} lent packets kept", net.kept);
        if loss > 0.0 {
            assert!(net.ep[1].counters().tcp_ext_tcp_ofo_queue > 0);
        }
        // Everything queued was read: nothing lent is held any more.
        assert_eq!(net.alive.load(Ordering::Relaxed), 0, "{loss}: lent packets still held after the data was read");
    }
}

#[test]
fn a_partial_checksum_without_the_device_s_word_is_dropped() {
    let mut net = Net::new(Rx::PartialUnflagged, 0.0);
    assert!(!net.run(Duration::from_secs(5)));
    assert!(net.got[0].is_empty() && net.got[1].is_empty());
    assert!(net.ep[1].counters().tcp_in_errs > 0, "counted");
}
