//! Reassembly cost per segment: 10^5 segments of 1448 bytes arriving in
//! order, in reverse order and in a random order (fixed seed) into the
//! receive queue, everything read out at the end (64 KiB reads, as an
//! application does), for the queue in `src/buf` and for the copying queue
//! kept as its oracle (`src/buf/recv_oracle.rs`), in the same run.
//!
//! Run: `cargo bench -p mptun-proto --bench reassembly`. `REASM_N` sets the
//! segment count (default 100000); the old queue is quadratic out of order,
//! so it runs those orders with `REASM_OLD_N` segments (default 4000: enough
//! for the quadratic cost to show, few enough to wait for) and the new one is
//! also run at that count for the ratio. Prints figures; asserts nothing about speed.

// The queues are crate-private: compile their sources into this bench.
#[allow(dead_code)]
#[path = "../src/buf/ofo.rs"]
mod ofo;
#[allow(dead_code)]
#[path = "../src/buf/recv.rs"]
mod recv;
#[allow(dead_code)]
#[path = "../src/buf/recv_oracle.rs"]
mod recv_oracle;

use bytes::Bytes;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::hint::black_box;
use std::time::{Duration, Instant};

const MSS: usize = 1448;

trait Queue: Default {
    fn insert(&mut self, off: u64, data: &[u8]);
    fn insert_bytes(&mut self, off: u64, data: Bytes);
    fn read(&mut self, out: &mut [u8]) -> usize;
}

impl Queue for recv::RecvBuf {
    fn insert(&mut self, off: u64, data: &[u8]) {
        black_box(recv::RecvBuf::insert(self, off, data));
    }
    fn insert_bytes(&mut self, off: u64, data: Bytes) {
        black_box(recv::RecvBuf::insert_bytes(self, off, data));
    }
    fn read(&mut self, out: &mut [u8]) -> usize {
        recv::RecvBuf::read(self, out)
    }
}

impl Queue for recv_oracle::RecvBuf {
    fn insert(&mut self, off: u64, data: &[u8]) {
        black_box(recv_oracle::RecvBuf::insert(self, off, data));
    }
    fn insert_bytes(&mut self, off: u64, data: Bytes) {
        black_box(recv_oracle::RecvBuf::insert_bytes(self, off, data));
    }
    fn read(&mut self, out: &mut [u8]) -> usize {
        recv_oracle::RecvBuf::read(self, out)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Order {
    Sequential,
    Reverse,
    Random,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Sequential => "in-order",
            Order::Reverse => "reverse",
            Order::Random => "random",
        }
    }
    fn indices(self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        match self {
            Order::Sequential => {}
            Order::Reverse => v.reverse(),
            Order::Random => v.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(13)),
        }
        v
    }
}

/// One run: insert every segment, then read everything. Returns its duration.
fn run<Q: Queue>(order: &[usize], shared: bool, seg: &Bytes) -> Duration {
    let mut out = vec![0u8; 64 * 1024];
    let start = Instant::now();
    let mut q = Q::default();
    for &i in order {
        let off = (i * MSS) as u64;
        if shared {
            q.insert_bytes(off, seg.clone());
        } else {
            q.insert(off, seg);
        }
    }
    let mut total = 0;
    loop {
        let n = q.read(&mut out);
        if n == 0 {
            break;
        }
        total += n;
        black_box(&out[..n]);
    }
    drop(black_box(q));
    let el = start.elapsed();
    assert_eq!(total, order.len() * MSS);
    el
}

/// Best of several runs (at least one, about `budget` in all), in ns per segment.
fn ns_per_segment<Q: Queue>(order: &[usize], shared: bool, budget: Duration) -> f64 {
    let seg = Bytes::from((0..MSS).map(|i| i as u8).collect::<Vec<_>>());
    let start = Instant::now();
    let mut best = Duration::MAX;
    for _ in 0..20 {
        best = best.min(run::<Q>(order, shared, &seg));
        if start.elapsed() >= budget {
            break;
        }
    }
    best.as_nanos() as f64 / order.len() as f64
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let n = env("REASM_N", 100_000);
    let old_n = env("REASM_OLD_N", 4000);
    let budget = Duration::from_secs(2);
    println!("reassembly: {MSS}-byte segments, ns per segment (insert + read out), best of runs within {budget:?}");
    println!(
        "{:<9} {:<18} {:>8} {:>12} {:>12} {:>9}",
        "order", "path", "segments", "old ns/seg", "new ns/seg", "old/new"
    );
    for order in [Order::Sequential, Order::Reverse, Order::Random] {
        for (shared, path) in [(false, "insert(&[u8])"), (true, "insert_bytes")] {
            // The old queue at the full count only where it is not quadratic.
            let counts = if order == Order::Sequential { vec![n] } else { vec![old_n, n] };
            for &count in counts.iter().filter(|&&c| c > 0) {
                let idx = order.indices(count);
                let new = ns_per_segment::<recv::RecvBuf>(&idx, shared, budget);
                let old = (count <= old_n || order == Order::Sequential)
                    .then(|| ns_per_segment::<recv_oracle::RecvBuf>(&idx, shared, budget));
                let (old_s, ratio) = match old {
                    Some(o) => (format!("{o:.0}"), format!("{:.1}x", o / new)),
                    None => ("-".into(), "-".into()),
                };
                println!("{:<9} {:<18} {:>8} {:>12} {:>12.0} {:>9}", order.name(), path, count, old_s, new, ratio);
            }
        }
    }
}
