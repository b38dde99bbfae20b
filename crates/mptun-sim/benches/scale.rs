//! Connection scale, mptun against mptun in the simulator: 1 to 10,000
//! concurrent connections (`mptun_sim::scenarios::scale` says what runs).
//!
//! ```sh
//! cargo bench -p mptun-sim --bench scale                       # 1,10,100,1000,10000
//! cargo bench -p mptun-sim --bench scale -- --conns 10,10000 --mptcp
//! ```
//!
//! Per connection count, in one process, one thread:
//! - **setup**: the wall time to open every connection (both ends
//!   simulated), as connections per wall second;
//! - **heap per connection**, idle (after the handshakes) and at the end
//!   of the active phase (data in the send buffers): the bytes the
//!   allocator gets back when an endpoint is freed (a counting global
//!   allocator), over the connection count, the client's and the server's;
//!   an endpoint's fixed part is in it, which the rows for 1 and 10 show;
//! - **CPU seconds per GiB** moved in the active phase (the thread's CPU
//!   time, `/proc/thread-self/schedstat`: both ends and the links), at a
//!   fixed total rate (`--rate`, default 1 Gbit/s) split over the
//!   connections;
//! - **TCP_RR** p50/p99 (virtual time) of one more connection during it;
//! - **TCP_CRR** (connect, request, response, close) with the connections
//!   idle: lifecycles per CPU second, and their p50 (virtual).
//!
//! A figure that grows faster than the connection count shows here as a
//! per-connection cost that grows down the column.

use mptun_sim::scenarios::scale::{quantile, Params, Scale, ScaleHost};
use mptun_time::Duration;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting the bytes it holds.
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only a counter
// is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            HELD.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            HELD.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        HELD.fetch_sub(l.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            HELD.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn held() -> isize {
    HELD.load(Ordering::Relaxed)
}

/// CPU time of this thread (ns): the first field of schedstat. Without it
/// the bench stops rather than print a CPU figure of zero.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (the thread's CPU time) is unreadable")
}

fn arg(name: &str) -> Option<String> {
    let a: Vec<String> = std::env::args().collect();
    a.iter().position(|x| x == name).and_then(|i| a.get(i + 1).cloned())
}

#[derive(Debug, Default)]
struct Row {
    n: usize,
    setup_per_s: f64,
    idle_client: f64,
    idle_server: f64,
    active_client: f64,
    active_server: f64,
    cpu_s_per_gib: f64,
    moved_gib: f64,
    stalls: u64,
    rr_p50_us: f64,
    rr_p99_us: f64,
    crr_per_cpu_s: f64,
    crr_p50_ms: f64,
    failed: u64,
}

fn per(bytes: isize, n: usize) -> f64 {
    bytes as f64 / n.max(1) as f64
}

/// Frees the server's endpoint, then the client's (each replaced by an
/// empty one made beforehand): the heap each held, per connection.
fn free_endpoints(s: &mut Scale, n: usize) -> (f64, f64) {
    let (ea, eb) = (ScaleHost::empty_endpoint(), ScaleHost::empty_endpoint());
    let h0 = held();
    drop(std::mem::replace(&mut s.sim.b.ep, eb));
    let h1 = held();
    drop(std::mem::replace(&mut s.sim.a.ep, ea));
    let h2 = held();
    (per(h1 - h2, n), per(h0 - h1, n))
}

/// A run with its `n` connections open and settled, and the wall time the
/// opening took.
fn opened(p: &Params) -> (Scale, std::time::Duration) {
    let mut s = Scale::new(p);
    let w0 = std::time::Instant::now();
    assert!(s.open_all(), "{}: not every connection opened", p.n);
    let took = w0.elapsed();
    s.settle();
    (s, took)
}

fn measure(p: &Params) -> Row {
    let n = p.n;
    let mut row = Row { n, ..Row::default() };
    // Run 1: setup, then each end's idle heap (the experiment's own books,
    // its maps of connections, are not in it).
    let (mut s, took) = opened(p);
    row.setup_per_s = n as f64 / took.as_secs_f64();
    (row.idle_client, row.idle_server) = free_endpoints(&mut s, n);
    drop(s);
    // Run 2: the active phase; each end's heap at its end.
    let (mut s, _) = opened(p);
    let c0 = cpu_ns();
    let b0 = s.sim.b.bulk_bytes;
    s.run_active();
    let c1 = cpu_ns();
    let moved = (s.sim.b.bulk_bytes - b0) as f64 / (1u64 << 30) as f64;
    row.moved_gib = moved;
    row.cpu_s_per_gib = (c1 - c0) as f64 / 1e9 / moved.max(1e-12);
    row.stalls = s.sim.a.write_stalls;
    row.rr_p50_us = quantile(&mut s.sim.a.rr_ns, 0.5).unwrap_or(0) as f64 / 1e3;
    row.rr_p99_us = quantile(&mut s.sim.a.rr_ns, 0.99).unwrap_or(0) as f64 / 1e3;
    row.failed = s.sim.a.failed + s.sim.b.failed;
    (row.active_client, row.active_server) = free_endpoints(&mut s, n);
    drop(s);
    // Run 3: TCP_CRR beside the idle connections.
    let (mut s, _) = opened(p);
    let c2 = cpu_ns();
    s.run_crr();
    let c3 = cpu_ns();
    row.crr_per_cpu_s = s.sim.a.crr_done as f64 / ((c3 - c2) as f64 / 1e9);
    row.crr_p50_ms = quantile(&mut s.sim.a.crr_ns, 0.5).unwrap_or(0) as f64 / 1e6;
    row.failed += s.sim.a.failed + s.sim.b.failed;
    row
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is expected.
    let conns: Vec<usize> = arg("--conns")
        .unwrap_or_else(|| "1,10,100,1000,10000".into())
        .split(',')
        .map(|x| x.trim().parse().expect("--conns: numbers"))
        .collect();
    let mut p = Params { mptcp: std::env::args().any(|a| a == "--mptcp"), ..Params::default() };
    if let Some(r) = arg("--rate") {
        p.rate_bps = r.parse().expect("--rate: bit/s");
    }
    if let Some(a) = arg("--active") {
        p.active = Duration::from_secs_f64(a.parse().expect("--active: seconds"));
    }
    println!(
        "mptun against mptun in the simulator, {}: total rate {} Mbit/s in {} KiB writes over a {} Mbit/s, {} ms \
         link each way; active {} s; TCP_CRR {} loops for {} s",
        if p.mptcp { "MPTCP" } else { "plain TCP" },
        p.rate_bps / 1_000_000,
        p.write / 1024,
        p.link_bps / 1_000_000,
        p.delay.as_millis(),
        p.active.as_secs_f64(),
        p.crr_loops,
        p.crr.as_secs_f64()
    );
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>7} {:>9} {:>9} {:>10} {:>8} {:>6}",
        "conns",
        "setup/s",
        "idle cli",
        "idle srv",
        "act cli",
        "act srv",
        "CPU s/GiB",
        "GiB",
        "stalls",
        "RR p50us",
        "RR p99us",
        "CRR/CPU-s",
        "CRR p50",
        "failed"
    );
    for &n in &conns {
        let r = measure(&Params { n, ..p.clone() });
        println!(
            "{:>6} {:>10.0} {:>9.0}B {:>9.0}B {:>9.0}B {:>9.0}B {:>9.3} {:>7.3} {:>7} {:>9.0} {:>9.0} {:>10.0} {:>6.1}ms {:>6}",
            r.n,
            r.setup_per_s,
            r.idle_client,
            r.idle_server,
            r.active_client,
            r.active_server,
            r.cpu_s_per_gib,
            r.moved_gib,
            r.stalls,
            r.rr_p50_us,
            r.rr_p99_us,
            r.crr_per_cpu_s,
            r.crr_p50_ms,
            r.failed
        );
    }
}
