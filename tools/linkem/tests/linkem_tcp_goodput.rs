//! Kernel TCP through a 10 Mbit/s linkem link reaches 93-100% of the rate as goodput: the
//! serializer is byte-accurate and adds no loss of its own.
//!
//! A shortfall is only excused when linkem itself reports that the host held it back (a
//! release more than [`HELD_BACK_US`] late: a shared VM's stall, during which the link sits
//! idle): that attempt is repeated, up to [`ATTEMPTS`] times, and the best of them must still
//! reach [`HELD_BACK_FLOOR`]. A shortfall with linkem on time, a rate above the link's, or an
//! oversize drop (offloads left on) fails at once.

mod common;
use common::{in_netns, netns_available, Topo};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Attempts before a run that linkem reports as held back every time is called inconclusive.
const ATTEMPTS: usize = 3;
/// A release this late (µs) means the emulator, not the serializer, lost link time: at 10
/// Mbit/s 5 ms is four full-size packets' worth, more than a 0.7 % shortfall on a 6 s run
/// needs. On a quiet host linkem's maximum is a few hundred µs.
const HELD_BACK_US: f64 = 5_000.0;
/// What the best of the held-back attempts must still reach (Mbit/s): about what a serializer at
/// 93 % of its rate would make (at 90 %, about 8.7), so a slow serializer cannot pass as a
/// stalled host, while the host's stalls alone leave a correct one above it.
const HELD_BACK_FLOOR: f64 = 9.0;

/// One 6-second bulk transfer; goodput in Mbit/s and linkem's statistics of the path.
fn transfer() -> (f64, serde_json::Value) {
    let topo = Topo::up("g", &["rate=10mbit,delay=5ms,limit=100"]);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = in_netns(&topo.srv(), move || {
        let l = TcpListener::bind("10.0.1.2:7200").unwrap();
        ready_tx.send(()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        let mut first = None;
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            total += n as u64;
        }
        (total, first.unwrap().elapsed())
    });
    ready_rx.recv().unwrap();
    in_netns(&topo.cli(), || {
        let mut s = TcpStream::connect("10.0.1.2:7200").unwrap();
        let buf = vec![0x5au8; 1 << 16];
        let end = Instant::now() + Duration::from_secs(6);
        while Instant::now() < end {
            s.write_all(&buf).unwrap();
        }
    })
    .join()
    .unwrap();
    let (bytes, elapsed) = server.join().unwrap();
    let mbps = bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e6;
    let st = topo.stats(1);
    eprintln!(
        "goodput {mbps:.3} Mbit/s ({bytes} B in {:.2} s); a2b: {} B forwarded, drops {}, release error {}",
        elapsed.as_secs_f64(),
        st["a2b"]["forwarded_bytes"],
        st["a2b"]["dropped"],
        st["a2b"]["release_error_us"]
    );
    (mbps, st)
}

#[test]
fn linkem_tcp_goodput_at_10mbit() {
    if !netns_available("linkem_tcp_goodput") {
        return;
    }
    let mut best = 0f64;
    for attempt in 1..=ATTEMPTS {
        let (mbps, st) = transfer();
        assert_eq!(st["a2b"]["dropped"]["oversize"], 0, "offloads were not turned off");
        assert!(mbps <= 10.0, "goodput {mbps} Mbit/s: faster than the link");
        if mbps >= 9.3 {
            return;
        }
        let late_max = st["a2b"]["release_error_us"]["max"].as_f64().expect("release error max");
        assert!(
            late_max > HELD_BACK_US,
            "goodput {mbps} Mbit/s with linkem on time (latest release {late_max:.0} µs after its due time)"
        );
        eprintln!("attempt {attempt}: goodput {mbps:.3} Mbit/s, linkem held back up to {late_max:.0} µs: again");
        best = best.max(mbps);
    }
    // The excuse is bounded: a serializer 7 % slow or worse stays under this in every attempt.
    assert!(best >= HELD_BACK_FLOOR, "best goodput {best} Mbit/s in {ATTEMPTS} held-back attempts");
    eprintln!("inconclusive: linkem was held back by the host in all {ATTEMPTS} attempts (best {best:.3} Mbit/s)");
}
