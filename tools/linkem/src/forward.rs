//! One emulated link direction: read frames, ask the link model when they leave, send them then.
//!
//! Each direction runs on its own thread with a min-heap of pending frames keyed by release
//! instant. The thread sleeps on an absolute-deadline timer armed a little before the next release
//! (or until a frame arrives), then spins to the exact instant: a millisecond timer wheel would
//! turn a 20 ms delay into 20-21 ms and add jitter the experiment did not ask for. Receiving and
//! releasing on the same thread keeps the heap unshared and the arrival stamps honest.

use crate::clock::{self, DeadlineTimer};
use crate::hist::{summary_us, HistSummary, Histogram};
use crate::packet::{PacketSocket, Recv};
use crate::spec::format_spec;
use mptun_link::{DropCause, Link, LinkConfig, Verdict};
use mptun_time::{Duration, Instant};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Largest frame read; anything longer is a GRO/TSO super-frame that no veth would accept back.
pub const RX_BUF: usize = 65_536 + 64;
/// Frames drained per wake-up before pending releases are looked at again.
const RX_BATCH: usize = 32;
/// The spin margin never shrinks below this, whatever the packet rate.
const MIN_SPIN: Duration = Duration::from_micros(30);
/// Longest sleep without re-checking the shutdown flag.
const IDLE_WAKE: Duration = Duration::from_millis(50);

/// Counters beyond the link model's own: what the real interfaces did.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct IoCounters {
    /// Frames read from the ingress interface.
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Frames written to the egress interface (duplicates included).
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames larger than the egress MTU allows (offloads left on): dropped before the model.
    pub dropped_oversize: u64,
    /// Frames the egress refused.
    pub dropped_tx_error: u64,
    /// Frames the kernel dropped because linkem did not read them fast enough.
    pub dropped_rx_kernel: u64,
}

/// Everything a direction's thread shares with the control socket and the stats printer.
pub struct DirState {
    pub link: Link,
    pub io: IoCounters,
    /// Actual transmit instant minus scheduled release.
    pub release_error: Histogram,
    /// Actual transmit instant minus arrival: the one-way delay linkem added.
    pub delay: Histogram,
    /// Frames held in the heap now, and at most.
    pub held: usize,
    pub held_max: usize,
}

/// A direction's shared handle.
pub struct Direction {
    pub name: &'static str,
    state: Mutex<DirState>,
}

/// Drops by cause, named after what dropped them.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct DropReport {
    pub loss: u64,
    pub queue_full: u64,
    pub link_down: u64,
    /// Dropped by CoDel.
    pub aqm: u64,
    pub oversize: u64,
    pub tx_error: u64,
    pub rx_kernel: u64,
}

/// A JSON-ready snapshot of one direction.
#[derive(Clone, Debug, Serialize)]
pub struct DirReport {
    pub name: &'static str,
    pub config: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub forwarded_packets: u64,
    pub forwarded_bytes: u64,
    pub dropped: DropReport,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Largest queue occupancy in the configured limit scope (packets).
    pub queue_max_packets: u64,
    pub held_now: usize,
    pub held_max: usize,
    pub release_error_us: HistSummary,
    pub delay_us: HistSummary,
}

impl Direction {
    pub fn new(name: &'static str, config: LinkConfig) -> Arc<Self> {
        Arc::new(Direction {
            name,
            state: Mutex::new(DirState {
                link: Link::new(config),
                io: IoCounters::default(),
                release_error: Histogram::new(),
                delay: Histogram::new(),
                held: 0,
                held_max: 0,
            }),
        })
    }

    /// Locks the state; a panicked forwarding thread must not take the stats down with it.
    pub fn lock(&self) -> MutexGuard<'_, DirState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn config(&self) -> LinkConfig {
        *self.lock().link.config()
    }

    pub fn set_config(&self, c: LinkConfig) {
        self.lock().link.set_config(c);
    }

    pub fn report(&self) -> DirReport {
        let s = self.lock();
        let l = s.link.stats();
        DirReport {
            name: self.name,
            config: format_spec(s.link.config()),
            rx_packets: s.io.rx_packets,
            rx_bytes: s.io.rx_bytes,
            forwarded_packets: s.io.tx_packets,
            forwarded_bytes: s.io.tx_bytes,
            dropped: DropReport {
                loss: l.dropped_loss,
                queue_full: l.dropped_queue,
                link_down: l.dropped_down,
                aqm: l.dropped_aqm,
                oversize: s.io.dropped_oversize,
                tx_error: s.io.dropped_tx_error,
                rx_kernel: s.io.dropped_rx_kernel,
            },
            duplicated: l.duplicated,
            corrupted: l.corrupted,
            reordered: l.reordered,
            queue_max_packets: l.max_queue_packets,
            held_now: s.held,
            held_max: s.held_max,
            release_error_us: summary_us(&s.release_error),
            delay_us: summary_us(&s.delay),
        }
    }
}

/// A frame waiting for its release instant.
struct Pending {
    release: Instant,
    /// Arrival order, so equal release instants leave in arrival order.
    seq: u64,
    arrival: Instant,
    frame: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.release, self.seq) == (o.release, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.release, self.seq).cmp(&(o.release, o.seq))
    }
}

/// Flips bit `bit` of a frame, outside the Ethernet header when the frame has a payload: a
/// corrupted MAC address makes a frame vanish at the wrong layer instead of exercising the
/// receiver's checksum handling, which is what `corrupt` is for.
pub fn corrupt(frame: &mut [u8], bit: u32) {
    const ETH_HLEN: usize = 14;
    if frame.is_empty() {
        return;
    }
    let (start, span) = if frame.len() > ETH_HLEN { (ETH_HLEN, frame.len() - ETH_HLEN) } else { (0, frame.len()) };
    let b = bit as usize % (span * 8);
    frame[start + b / 8] ^= 1 << (b % 8);
}

/// Tunables of the forwarding loop.
#[derive(Clone, Copy, Debug)]
pub struct LoopOptions {
    /// How long before a release the thread stops sleeping and spins (at most; see `run`).
    pub spin: Duration,
    /// SCHED_FIFO priority for the thread, if any.
    pub fifo_priority: Option<i32>,
    pub seed: u64,
    /// Largest frame the egress takes (MTU plus link header).
    pub max_frame: usize,
}

/// Runs one direction until `stop` is set: frames from `rx` go through `dir`'s link model and
/// out of `tx` at their release instants. Frames still held at shutdown are dropped, as a qdisc
/// being deleted drops them.
pub fn run(
    dir: Arc<Direction>,
    rx: PacketSocket,
    tx: PacketSocket,
    opts: LoopOptions,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    clock::minimise_timer_slack();
    if let Some(p) = opts.fifo_priority {
        if let Err(e) = clock::set_fifo(p) {
            eprintln!("linkem: {}: SCHED_FIFO {p} refused ({e}); running with normal priority", dir.name);
        }
    }
    let timer = DeadlineTimer::new()?;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut heap: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut buf = vec![0u8; RX_BUF];
    let mut seq = 0u64;
    let mut last_drop_poll = clock::now();
    let mut last_send = Instant::ZERO;

    // Offers one received frame to the model; returns whether anything was read.
    let mut receive_one = |heap: &mut BinaryHeap<Reverse<Pending>>, buf: &mut [u8]| -> io::Result<bool> {
        let (len, wire_len) = match rx.recv(buf)? {
            Recv::Empty => return Ok(false),
            Recv::Skipped => return Ok(true),
            Recv::Frame { len, wire_len } => (len, wire_len),
        };
        let now = clock::now();
        let mut s = dir.lock();
        s.io.rx_packets += 1;
        s.io.rx_bytes += wire_len as u64;
        if wire_len > opts.max_frame || wire_len > len {
            s.io.dropped_oversize += 1;
            return Ok(true);
        }
        match s.link.offer(now, len, &mut rng) {
            Verdict::Dropped(DropCause::Loss | DropCause::QueueFull | DropCause::LinkDown | DropCause::Aqm) => {}
            Verdict::Deliver { release, duplicate, corrupt_bit } => {
                let mut frame = buf[..len].to_vec();
                if let Some(bit) = corrupt_bit {
                    corrupt(&mut frame, bit);
                }
                if let Some(dup) = duplicate {
                    seq += 1;
                    heap.push(Reverse(Pending { release: dup, seq, arrival: now, frame: frame.clone() }));
                }
                seq += 1;
                heap.push(Reverse(Pending { release, seq, arrival: now, frame }));
                s.held = heap.len();
                s.held_max = s.held_max.max(s.held);
            }
        }
        Ok(true)
    };

    while !stop.load(AtomicOrdering::Relaxed) {
        // Release everything due.
        let mut now = clock::now();
        while heap.peek().is_some_and(|p| p.0.release <= now) {
            let Reverse(p) = heap.pop().expect("peeked");
            // Stamped before the call: send() on a veth runs the receiver's softirq inline, which
            // is the far end's time, not the wire's.
            let sent = clock::now();
            let r = tx.send(&p.frame);
            let mut s = dir.lock();
            match r {
                Ok(()) => {
                    s.io.tx_packets += 1;
                    s.io.tx_bytes += p.frame.len() as u64;
                    s.release_error.record((sent - p.release).as_nanos() as u64);
                    s.delay.record((sent - p.arrival).as_nanos() as u64);
                }
                Err(_) => s.io.dropped_tx_error += 1,
            }
            s.held = heap.len();
            drop(s);
            last_send = sent;
            now = clock::now();
        }
        // Take in what arrived, a bounded batch so releases are not starved by a flood.
        for _ in 0..RX_BATCH {
            if !receive_one(&mut heap, &mut buf)? {
                break;
            }
            if heap.peek().is_some_and(|p| p.0.release <= clock::now()) {
                break;
            }
        }
        now = clock::now();
        if now - last_drop_poll > Duration::from_millis(100) {
            last_drop_poll = now;
            let d = rx.take_kernel_drops().unwrap_or(0);
            dir.lock().io.dropped_rx_kernel += d;
        }
        // Spin at most half the gap since the previous release: sparse traffic gets the full
        // margin, a saturated 100 Mbit/s link (115 µs gaps) spins about half of each gap, which
        // keeps a SCHED_FIFO thread under the kernel's real-time budget instead of being throttled.
        let spin = match heap.peek() {
            Some(p) => opts.spin.min((p.0.release - last_send) / 2).max(MIN_SPIN.min(opts.spin)),
            None => opts.spin,
        };
        match heap.peek().map(|p| p.0.release) {
            Some(next) if next <= now => continue,
            Some(next) if next - now <= spin => {
                // Spin to the instant, still taking frames in so their arrival stamps stay exact.
                while clock::now() < next {
                    receive_one(&mut heap, &mut buf)?;
                    if heap.peek().is_some_and(|p| p.0.release < next) {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
            next => {
                let wake = next.map_or(now + IDLE_WAKE, |n| (n - spin).min(now + IDLE_WAKE));
                timer.arm(wake)?;
                clock::wait_readable_or_timer(rx.raw_fd(), &timer)?;
            }
        }
    }
    let d = rx.take_kernel_drops().unwrap_or(0);
    dir.lock().io.dropped_rx_kernel += d;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_spares_the_ethernet_header() {
        for bit in [0u32, 7, 8, 111, 112, 1000, u32::MAX] {
            let mut f = vec![0u8; 60];
            corrupt(&mut f, bit);
            assert!(f[..14].iter().all(|&b| b == 0), "bit {bit} hit the header");
            assert_eq!(f.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
        }
        let mut tiny = vec![0u8; 4];
        corrupt(&mut tiny, 9);
        assert_eq!(tiny, [0, 2, 0, 0]);
        corrupt(&mut [], 3);
    }

    #[test]
    fn heap_releases_in_time_order_then_arrival_order() {
        let mk = |r: u64, seq| {
            Reverse(Pending { release: Instant::from_micros(r), seq, arrival: Instant::ZERO, frame: vec![] })
        };
        let mut h = BinaryHeap::new();
        for (r, s) in [(30, 1), (10, 2), (10, 3), (20, 4)] {
            h.push(mk(r, s));
        }
        let order: Vec<u64> = std::iter::from_fn(|| h.pop().map(|p| p.0.seq)).collect();
        assert_eq!(order, [2, 3, 4, 1]);
    }
}
