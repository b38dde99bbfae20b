//! Kernel TCP through a 10 Mbit/s linkem link reaches 93-100% of the rate as goodput: the
//! serializer is byte-accurate and adds no loss of its own.

mod common;
use common::{in_netns, netns_available, Topo};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[test]
fn linkem_tcp_goodput_at_10mbit() {
    if !netns_available("linkem_tcp_goodput") {
        return;
    }
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
    assert!((9.3..=10.0).contains(&mbps), "goodput {mbps} Mbit/s");
    assert_eq!(st["a2b"]["dropped"]["oversize"], 0, "offloads were not turned off");
}
