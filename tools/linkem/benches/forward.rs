//! linkem's own forwarding capacity: packets per second through an ideal (zero-delay, unlimited)
//! link, against a plain kernel bridge on the same topology as the baseline.
//!
//! `cargo bench -p linkem --bench forward` as root. An unpaced UDP flood runs from the client
//! namespace to the server namespace for a few seconds; the figure is what the server received
//! per second. The machine has few cores, so sender, forwarder and receiver compete: the ratio to
//! the bridge is the meaningful number.

#[path = "../tests/common/mod.rs"]
mod common;
use common::{in_netns, Topo};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Floods for `secs` and returns (sent, received, received per second over the receive window).
fn flood(topo: &Topo, payload: usize, secs: f64, port: u16) -> (u64, u64, f64) {
    flood_paced(topo, payload, secs, port, None)
}

/// As [`flood`], optionally paced at `pps` (a rate-limited link would otherwise just drop).
fn flood_paced(topo: &Topo, payload: usize, secs: f64, port: u16, pps: Option<f64>) -> (u64, u64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = in_netns(&topo.srv(), move || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        let _ = s.set_recv_buffer_size(32 << 20);
        s.bind(&format!("10.0.1.2:{port}").parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
        let s: UdpSocket = s.into();
        tx.send(()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 2048];
        let mut n = 0u64;
        let mut first = None;
        let mut last = Instant::now();
        while s.recv(&mut buf).is_ok() {
            last = Instant::now();
            first.get_or_insert(last);
            n += 1;
            s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        }
        (n, first.map_or(0.0, |f| (last - f).as_secs_f64()))
    });
    rx.recv().unwrap();
    let st = stop.clone();
    let sender = in_netns(&topo.cli(), move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(format!("10.0.1.2:{port}")).unwrap();
        let buf = vec![0u8; payload];
        let mut n = 0u64;
        let start = Instant::now();
        while !st.load(Ordering::Relaxed) {
            if s.send(&buf).is_ok() {
                n += 1;
            }
            if let Some(pps) = pps {
                let due = start + Duration::from_secs_f64(n as f64 / pps);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
        }
        n
    });
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    let (got, window) = receiver.join().unwrap();
    (sent, got, if window > 0.0 { got as f64 / window } else { 0.0 })
}

fn main() {
    // `cargo test --benches` runs this binary too; only a real `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if !common::netns_available("bench forward") {
        return;
    }
    let secs = 4.0;
    // Rate accuracy and added jitter on a shaped link: offered 5% above the rate, a queue deep
    // enough that the serializer never idles; the wire rate the receiver sees must match.
    for mbit in [10u64, 100] {
        let payload = 1400usize;
        let wire = (payload + 42) as f64 * 8.0;
        let topo = Topo::up_with("br", &[&format!("rate={mbit}mbit,limit=1000")], &["--no-mptcp"]);
        let (_, got, pps) = flood_paced(&topo, payload, 3.0, 7302, Some(mbit as f64 * 1e6 / wire * 1.05));
        let st = topo.stats(1);
        drop(topo);
        let measured = pps * wire / 1e6;
        println!(
            "rate/{mbit}mbit  measured {measured:.3} Mbit/s on the wire ({:+.2}% vs configured) over {got} frames; \
             release error p50/p99/max {}/{}/{} us",
            (measured / mbit as f64 - 1.0) * 100.0,
            st["a2b"]["release_error_us"]["p50"],
            st["a2b"]["release_error_us"]["p99"],
            st["a2b"]["release_error_us"]["max"]
        );
    }
    for payload in [64usize, 1400] {
        let bridge = Topo::up_with("bb", &[""], &["--bridge", "--no-mptcp"]);
        let (bs, br, bpps) = flood(&bridge, payload, secs, 7300);
        drop(bridge);
        let topo = Topo::up_with("bf", &[""], &["--no-mptcp"]);
        let (ls, lr, lpps) = flood(&topo, payload, secs, 7301);
        let st = topo.stats(1);
        drop(topo);
        let mbit = |pps: f64| pps * (payload + 42) as f64 * 8.0 / 1e6;
        println!(
            "forward/{payload}B  linkem: {lpps:>9.0} pps ({:>7.1} Mbit/s on the wire), sent {ls}, received {lr}, \
             linkem drops {}, release error p50/p99 {}/{} us",
            mbit(lpps),
            st["a2b"]["dropped"],
            st["a2b"]["release_error_us"]["p50"],
            st["a2b"]["release_error_us"]["p99"]
        );
        println!(
            "forward/{payload}B  bridge: {bpps:>9.0} pps ({:>7.1} Mbit/s on the wire), sent {bs}, received {br}; \
             linkem/bridge = {:.2}",
            mbit(bpps),
            lpps / bpps.max(1.0)
        );
    }
}
