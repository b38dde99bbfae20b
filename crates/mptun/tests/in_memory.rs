//! Two stacks joined by an in-memory link (no root needed): the socket API
//! end to end, over the real driver, departure queue and timer.

use std::sync::Arc;
use std::time::Duration;

use mptun::pattern::Pattern;
use mptun::{MptcpListener, MptcpStream, Stack};
use mptun_io::{ChannelIo, PacketIo};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

fn pair() -> (Stack, Stack) {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let a: Arc<dyn PacketIo> = Arc::new(a);
    let b: Arc<dyn PacketIo> = Arc::new(b);
    let sa = Stack::builder().path("10.0.0.1".parse().unwrap(), a).build().unwrap();
    let sb = Stack::builder().path("10.0.0.2".parse().unwrap(), b).build().unwrap();
    (sa, sb)
}

/// As [`pair`], the first stack recording into `file`.
fn pair_capturing_a(file: &std::path::Path) -> (Stack, Stack) {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 1024);
    let sa = Stack::builder()
        .path("10.0.0.1".parse().unwrap(), Arc::new(a) as Arc<dyn PacketIo>)
        .pcap(file)
        .build()
        .unwrap();
    let sb = Stack::builder().path("10.0.0.2".parse().unwrap(), Arc::new(b) as Arc<dyn PacketIo>).build().unwrap();
    (sa, sb)
}

async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static>(
    s: S,
    data: Vec<u8>,
) -> (Vec<u8>, usize) {
    let (mut r, mut w) = tokio::io::split(s);
    let writer = tokio::spawn(async move {
        for c in data.chunks(50_000) {
            w.write_all(c).await.unwrap();
        }
        w.shutdown().await.unwrap();
        w
    });
    let mut got = Vec::new();
    let n = r.read_to_end(&mut got).await.unwrap();
    let _w = writer.await.unwrap();
    (got, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_both_ways_intact_with_orderly_close() {
    let (sa, sb) = pair();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    assert_eq!(listener.local_addr().unwrap(), "10.0.0.2:5000".parse().unwrap());
    const N: usize = 8 << 20;
    let up = Pattern::bytes(1, N);
    let down = Pattern::bytes(2, N);
    let (up_sum, down_sum) = (Sha256::digest(&up), Sha256::digest(&down));

    let sb2 = sb.clone();
    let server = tokio::spawn(async move {
        let (s, peer) = listener.accept().await.unwrap();
        assert!(sb2.counters().tcp_passive_opens >= 1, "{}", sb2.counters().to_nstat());
        assert!(s.info().unwrap().is_mptcp(), "both ends offer MPTCP");
        assert_eq!(s.peer_addr().unwrap(), peer);
        assert_eq!(s.local_addr().unwrap(), "10.0.0.2:5000".parse().unwrap());
        exchange(s, down).await
    });
    let client = MptcpStream::connect(&sa, "10.0.0.2:5000").await.unwrap();
    assert_eq!(client.local_addr().unwrap().ip(), "10.0.0.1".parse::<std::net::IpAddr>().unwrap());
    let info = client.info().unwrap();
    assert!(info.established);
    assert!(info.is_mptcp(), "{info:?}");
    assert_eq!(info.conn.subflows.len(), 1, "one path, one subflow");
    let (got_down, _) = timeout(Duration::from_secs(30), exchange(client, up)).await.unwrap();
    let (got_up, _) = timeout(Duration::from_secs(30), server).await.unwrap().unwrap();
    assert_eq!(got_up.len(), N);
    assert_eq!(got_down.len(), N);
    assert_eq!(Sha256::digest(&got_up), up_sum);
    assert_eq!(Sha256::digest(&got_down), down_sum);

    let ca = sa.counters();
    assert!(ca.tcp_out_segs > (N / 1500) as u64);
    let rs = sa.runtime_stats();
    assert!(rs.tx_segments >= ca.tcp_out_segs, "{rs:?}");
    assert!(rs.tx_packets <= rs.tx_segments, "{rs:?}");
    assert_eq!(rs.tx_no_route, 0);
    assert!(sa.has_high_resolution_timer());
}

/// Devices that complete checksums and gather (a TUN with offload, here
/// in memory): payloads leave their send buffers by reference, written
/// behind their headers by the device, and arrive intact both ways, in a
/// capture too (the tap writes each one whole, its checksum complete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_gathered_by_the_device_arrive_intact() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let file = std::env::temp_dir().join(format!("mptun-gather-{}.pcap", std::process::id()));
    let sa = Stack::builder()
        .path("10.0.0.1".parse().unwrap(), Arc::new(a.offload(true)) as Arc<dyn PacketIo>)
        .pcap(&file)
        .build()
        .unwrap();
    let sb = Stack::builder()
        .path("10.0.0.2".parse().unwrap(), Arc::new(b.offload(true)) as Arc<dyn PacketIo>)
        .build()
        .unwrap();
    assert!(sa.zero_copy_send() && sb.zero_copy_send());
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    const N: usize = 4 << 20;
    let (up, down) = (Pattern::bytes(3, N), Pattern::bytes(4, N));
    let (up_sum, down_sum) = (Sha256::digest(&up), Sha256::digest(&down));
    let server = tokio::spawn(async move { exchange(listener.accept().await.unwrap().0, down).await });
    let client = MptcpStream::connect(&sa, "10.0.0.2:5000").await.unwrap();
    let (got_down, _) = timeout(Duration::from_secs(30), exchange(client, up)).await.unwrap();
    let (got_up, _) = timeout(Duration::from_secs(30), server).await.unwrap().unwrap();
    assert_eq!(Sha256::digest(&got_up), up_sum);
    assert_eq!(Sha256::digest(&got_down), down_sum);
    for s in [&sa, &sb] {
        let rs = s.runtime_stats();
        assert!(rs.tx_gathered > (N / 65536) as u64, "data packets gathered: {rs:?}");
        assert!(rs.tx_segments > 2 * rs.tx_packets, "super-segments: {rs:?}");
        assert_eq!(rs.tx_tail_copied, 0, "held ones too: {rs:?}");
        assert_eq!((rs.tx_oversize, rs.tx_errors), (0, 0), "{rs:?}");
    }
    // Waits for the capture to be complete (the driver and the writer
    // thread gone, the tap flushed): reading it right after a plain drop
    // races them and may meet a record half written.
    timeout(Duration::from_secs(5), sa.shutdown()).await.expect("the driver stops within its drain");
    // Every captured packet is whole and valid: the payload behind its
    // headers, the checksum completed.
    let mut r = mptun_io::PcapReader::open(&file).unwrap();
    let (mut packets, mut payload) = (0, 0);
    while let Some(rec) = r.next_record().unwrap() {
        let p = mptun_wire::parse_tcp_packet(&rec.data).expect("a whole packet with a valid checksum");
        packets += 1;
        payload += p.payload.len();
    }
    assert!(packets > N / 1500 && payload >= N, "{packets} packets, {payload} payload bytes");
    let _ = std::fs::remove_file(&file);
}

/// Two stacks joined by channel devices without offloads (no TSO), each
/// announcing an MSS of 88 bytes (76 of payload with timestamps).
fn tiny_mss_pair() -> (Stack, Stack) {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let tiny = || mptun::TcpConfig { mss: 88, ..Default::default() };
    let stack = |ip: &str, dev: ChannelIo| {
        Stack::builder().path(ip.parse().unwrap(), Arc::new(dev) as Arc<dyn PacketIo>).tcp_config(tiny()).build()
    };
    (stack("10.0.0.1", a).unwrap(), stack("10.0.0.2", b).unwrap())
}

/// Peers that announce a tiny MSS (88 bytes) and acknowledge promptly, to
/// stacks whose devices cut no super-segments themselves: a window of a few
/// hundred segments must not make a super-segment of more wire segments
/// than a device batch takes, which could never be sent and would keep
/// every later packet of every connection waiting behind it. Both ways (a
/// connection the stack opens, one it accepts), the transfers complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_tiny_mss_on_a_device_without_tso_stalls_nothing() {
    let (sa, sb) = tiny_mss_pair();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    const N: usize = 2 << 20;
    let (up, down) = (Pattern::bytes(5, N), Pattern::bytes(6, N));
    let server = tokio::spawn({
        let down = down.clone();
        async move { exchange(listener.accept().await.unwrap().0, down).await }
    });
    let client = MptcpStream::connect(&sa, "10.0.0.2:5000").await.unwrap();
    let both = async { (exchange(client, up.clone()).await, server.await.unwrap()) };
    let ((got_down, _), (got_up, _)) = timeout(Duration::from_secs(30), both).await.expect("a transfer stalled");
    assert!(got_up == up && got_down == down, "{} and {} of {N} bytes, intact", got_up.len(), got_down.len());
    for s in [&sa, &sb] {
        let rs = s.runtime_stats();
        assert_eq!((rs.tx_oversize, rs.tx_errors), (0, 0), "{rs:?}");
    }
}

/// A peer with a tiny MSS whose reader starts late: the bytes it was
/// offered a window for are held, not dropped. In-order segments are
/// coalesced: charged a chunk of 256 bytes more each, 76-byte segments
/// would overrun the memory budget with the window announced at the start
/// (256 KiB) once the reader lagged, and the connection layer would drop
/// what the subflow had acknowledged (`MPTcpExtRcvPruned`): hundreds of
/// holes, each repaired by a connection-level retransmission timeout, and
/// a transfer of a second taking minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_mss_peer_whose_reader_lags_loses_nothing() {
    let (sa, sb) = tiny_mss_pair();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    const N: usize = 1 << 20;
    let data = Pattern::bytes(7, N);
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        got
    });
    let mut client = MptcpStream::connect(&sa, "10.0.0.2:5000").await.unwrap();
    let sent = data.clone();
    let run = async move {
        client.write_all(&sent).await.unwrap();
        client.shutdown().await.unwrap();
        server.await.unwrap()
    };
    let got = timeout(Duration::from_secs(20), run).await.expect("the transfer stalled");
    assert!(got == data, "{} of {N} bytes, intact", got.len());
    let c = sb.counters();
    assert_eq!((c.mptcp_rcv_pruned, c.mptcp_ofo_pruned, c.mptcp_retrans), (0, 0, 0), "{c:?}");
}

/// `read_chunk`, the zero-copy read, carries whole streams (MPTCP and
/// plain), alone or mixed with `read`: pieces of at most the size asked,
/// the bytes in order, `None` at the end and after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_chunk_carries_the_stream() {
    for (mptcp, port) in [(true, 5010), (false, 5011)] {
        let (sa, sb) = pair();
        let l = MptcpListener::bind(&sb, ("10.0.0.2", port)).await.unwrap();
        let opts = sa.stream_options().mptcp(mptcp);
        let mut c = MptcpStream::connect_with(&sa, ("10.0.0.2", port), opts).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        assert_eq!(s.info().unwrap().is_mptcp(), mptcp);
        const N: usize = 4 << 20;
        const MAX: usize = 32 * 1024;
        let data = Pattern::bytes(5, N);
        let sum = Sha256::digest(&data);
        let writer = tokio::spawn(async move {
            for ch in data.chunks(100_000) {
                c.write_all(ch).await.unwrap();
            }
            c.shutdown().await.unwrap();
            c
        });
        let (mut r, _w) = s.into_split();
        let mut h = Sha256::new();
        let (mut n, mut turn) = (0, 0);
        loop {
            turn += 1;
            let piece = if turn % 3 == 0 {
                let mut buf = [0u8; 3000];
                let m = timeout(Duration::from_secs(10), r.read(&mut buf)).await.unwrap().unwrap();
                (m > 0).then(|| bytes::Bytes::copy_from_slice(&buf[..m]))
            } else {
                let p = timeout(Duration::from_secs(10), r.read_chunk(MAX)).await.unwrap().unwrap();
                assert!(p.as_ref().is_none_or(|p| !p.is_empty() && p.len() <= MAX), "{:?}", p.map(|p| p.len()));
                p
            };
            let Some(p) = piece else { break };
            h.update(&p);
            n += p.len();
        }
        assert_eq!(n, N, "mptcp {mptcp}");
        assert_eq!(h.finalize(), sum, "mptcp {mptcp}");
        assert_eq!(r.read_chunk(MAX).await.unwrap(), None, "still the end");
        assert_eq!(r.read_chunk(0).await.unwrap(), None);
        writer.await.unwrap();
    }
}

/// `write_chunk`, the zero-copy write, carries whole streams (MPTCP and
/// plain), alone or mixed with `write_all`, from the stream and from its
/// write half: chunks larger than the send buffer are taken in parts, and
/// the peer reads every byte in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_chunk_carries_the_stream() {
    for (mptcp, port, split) in [(true, 5012, false), (false, 5013, true)] {
        let (sa, sb) = pair();
        let l = MptcpListener::bind(&sb, ("10.0.0.2", port)).await.unwrap();
        let opts = sa.stream_options().mptcp(mptcp);
        let c = MptcpStream::connect_with(&sa, ("10.0.0.2", port), opts).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        const N: usize = 12 << 20;
        let data = bytes::Bytes::from(Pattern::bytes(6, N));
        let sum = Sha256::digest(&data);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            got
        });
        // 5 MiB pieces (above the 4 MiB send buffer), with small copied
        // writes between them.
        let pieces: Vec<(usize, usize)> = (0..N).step_by(5 << 20).map(|a| (a, (a + (5 << 20)).min(N))).collect();
        let write = async {
            if split {
                let (_r, mut w) = c.into_split();
                for &(a, b) in &pieces {
                    w.write_all(&data[a..a + 1000]).await.unwrap();
                    w.write_chunk(data.slice(a + 1000..b)).await.unwrap();
                }
                w.shutdown().await.unwrap();
            } else {
                let mut c = c;
                let mut empty = bytes::Bytes::new();
                let n = std::future::poll_fn(|cx| c.poll_write_chunk(cx, &mut empty)).await.unwrap();
                assert_eq!(n, 0, "an empty chunk");
                for &(a, b) in &pieces {
                    c.write_chunk(data.slice(a..b - 1000)).await.unwrap();
                    c.write_all(&data[b - 1000..b]).await.unwrap();
                }
                c.shutdown().await.unwrap();
            }
        };
        timeout(Duration::from_secs(30), write).await.expect("the writes stalled");
        let got = timeout(Duration::from_secs(30), reader).await.expect("the transfer stalled").unwrap();
        assert_eq!(got.len(), N, "mptcp {mptcp}");
        assert_eq!(Sha256::digest(&got), sum, "mptcp {mptcp}");
    }
}

#[tokio::test]
async fn connect_to_a_closed_port_is_refused() {
    let (sa, _sb) = pair();
    let plain = sa.stream_options().mptcp(false);
    let e = timeout(Duration::from_secs(10), MptcpStream::connect_with(&sa, "10.0.0.2:1", plain))
        .await
        .expect("a RST must end the connect")
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    // Offering MPTCP: refused just the same, and the message says why.
    let e = timeout(Duration::from_secs(10), MptcpStream::connect(&sa, "10.0.0.2:1"))
        .await
        .expect("a RST must end the connect")
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    assert!(e.to_string().contains("refused"), "{e}");
}

/// A listener on the unspecified address takes the stack's own addresses
/// only: a SYN to another address routed into the device is refused at
/// once (RST, as a closed port), and a dropped listener stops listening.
#[tokio::test]
async fn a_listener_accepts_only_its_own_addresses() {
    let (sa, sb) = pair();
    let l = MptcpListener::bind(&sb, "0.0.0.0:5000").await.unwrap();
    let t0 = std::time::Instant::now();
    let e = timeout(Duration::from_secs(5), MptcpStream::connect(&sa, "10.0.0.99:5000"))
        .await
        .expect("refused at once, not timed out")
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    assert!(t0.elapsed() < Duration::from_secs(1), "took {:?}", t0.elapsed());
    assert_eq!(sb.connection_count(), 0, "nothing accepted for 10.0.0.99");
    let accept = tokio::spawn(async move {
        let r = l.accept().await.map(|(s, _)| s.local_addr().unwrap());
        (l, r)
    });
    let s = timeout(Duration::from_secs(5), MptcpStream::connect(&sa, "10.0.0.2:5000")).await.unwrap().unwrap();
    let (l, local) = accept.await.unwrap();
    assert_eq!(local.unwrap(), "10.0.0.2:5000".parse().unwrap());
    drop((s, l));
    let e = timeout(Duration::from_secs(5), MptcpStream::connect(&sa, "10.0.0.2:5000")).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "a dropped listener no longer listens: {e}");
}

#[tokio::test]
async fn bind_rules() {
    let (sa, _sb) = pair();
    let l = MptcpListener::bind(&sa, "0.0.0.0:7000").await.unwrap();
    let e = MptcpListener::bind(&sa, "10.0.0.1:7000").await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    let e = MptcpListener::bind(&sa, "10.9.9.9:7001").await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrNotAvailable);
    let eph = MptcpListener::bind(&sa, "10.0.0.1:0").await.unwrap();
    assert_ne!(eph.local_addr().unwrap().port(), 0);
    drop(l);
    MptcpListener::bind(&sa, "10.0.0.1:7000").await.expect("port free again after drop");
    let e = MptcpStream::connect_with(&sa, "10.0.0.2:1", sa.stream_options().bind("10.7.7.7:0".parse().unwrap()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrNotAvailable);
}

#[tokio::test]
async fn peer_reset_surfaces_as_connection_reset() {
    let (sa, sb) = pair();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5001").await.unwrap();
    let mut c = MptcpStream::connect(&sa, "10.0.0.2:5001").await.unwrap();
    let (mut s, _) = listener.accept().await.unwrap();
    c.write_all(b"unread").await.unwrap();
    // Wait until the server has the bytes, then drop it unread: Linux resets.
    let mut one = [0u8; 1];
    s.read_exact(&mut one).await.unwrap();
    drop(s);
    let mut buf = [0u8; 16];
    let r = timeout(Duration::from_secs(10), async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) => return Ok(0),
                Ok(_) => continue,
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset);
    let e = c.write_all(b"more").await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
}

#[tokio::test]
async fn split_halves_and_write_half_drop_sends_fin() {
    let (sa, sb) = pair();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5002").await.unwrap();
    let c = MptcpStream::connect(&sa, "10.0.0.2:5002").await.unwrap();
    let (s, _) = listener.accept().await.unwrap();
    let (mut cr, mut cw) = c.into_split();
    assert_eq!(cw.peer_addr().unwrap(), "10.0.0.2:5002".parse().unwrap());
    cw.write_all(b"hello").await.unwrap();
    drop(cw);
    let (mut sr, mut sw) = s.into_split();
    let mut got = Vec::new();
    timeout(Duration::from_secs(10), sr.read_to_end(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, b"hello");
    sw.write_all(b"world").await.unwrap();
    sw.shutdown().await.unwrap();
    let mut back = Vec::new();
    timeout(Duration::from_secs(10), cr.read_to_end(&mut back)).await.unwrap().unwrap();
    assert_eq!(back, b"world");
}

#[tokio::test]
async fn dropping_the_stack_fails_pending_operations() {
    let (sa, sb) = pair();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5003").await.unwrap();
    let mut c = MptcpStream::connect(&sa, "10.0.0.2:5003").await.unwrap();
    let (s, _) = listener.accept().await.unwrap();
    drop(sa);
    // The stream keeps the stack alive: still usable.
    c.write_all(b"x").await.unwrap();
    drop(s);
    drop(listener);
    drop(sb);
    let mut buf = [0u8; 4];
    let r = timeout(Duration::from_secs(10), c.read(&mut buf)).await.expect("must not hang");
    // The server stack is gone: it reset the connection on the way out.
    assert!(matches!(r, Err(_) | Ok(0)), "{r:?}");
}

/// A device whose writes stall (Pending) while the test holds it closed, as a NIC
/// whose ring is full.
struct Stalling {
    inner: ChannelIo,
    /// Closed: every send batch is refused (Pending) until the test opens it.
    closed: std::sync::Mutex<(bool, Vec<std::task::Waker>)>,
}

impl Stalling {
    fn new(inner: ChannelIo) -> Arc<Self> {
        Arc::new(Stalling { inner, closed: std::sync::Mutex::new((false, Vec::new())) })
    }
    fn close(&self) {
        self.closed.lock().unwrap().0 = true;
    }
    /// Opens the gate and wakes whoever a closed gate sent away.
    fn open(&self) {
        let wakers = {
            let mut g = self.closed.lock().unwrap();
            g.0 = false;
            std::mem::take(&mut g.1)
        };
        wakers.into_iter().for_each(|w| w.wake());
    }
}

impl PacketIo for Stalling {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn poll_recv_batch(
        &self,
        cx: &mut std::task::Context<'_>,
        b: &mut mptun_io::RxBatch,
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.inner.poll_recv_batch(cx, b)
    }
    fn poll_send_batch(
        &self,
        cx: &mut std::task::Context<'_>,
        b: &mut mptun_io::TxBatch,
    ) -> std::task::Poll<std::io::Result<usize>> {
        {
            let mut g = self.closed.lock().unwrap();
            if g.0 {
                if !g.1.iter().any(|w| w.will_wake(cx.waker())) {
                    g.1.push(cx.waker().clone());
                }
                return std::task::Poll::Pending;
            }
        }
        self.inner.poll_send_batch(cx, b)
    }
    fn poll_send(&self, cx: &mut std::task::Context<'_>, p: &[u8]) -> std::task::Poll<std::io::Result<()>> {
        self.inner.poll_send(cx, p)
    }
    fn stats(&self) -> mptun_io::IoStats {
        self.inner.stats()
    }
}

/// A stack dropped while its device is still busy with a batch (the
/// writer thread holding it) waits for the device before it ends, so the
/// resets it sends every connection reach the peer: the peer's stream
/// ends at once instead of hanging half-open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_dropped_while_its_device_is_busy_still_resets_its_connections() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let a = Stalling::new(a);
    let sa = Stack::builder().path("10.0.0.1".parse().unwrap(), a.clone() as Arc<dyn PacketIo>).build().unwrap();
    let sb = Stack::builder().path("10.0.0.2".parse().unwrap(), Arc::new(b) as Arc<dyn PacketIo>).build().unwrap();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5004").await.unwrap();
    let mut c = MptcpStream::connect(&sa, "10.0.0.2:5004").await.unwrap();
    let (mut s, _) = listener.accept().await.unwrap();
    // The device stalls and data goes into the stall (less than the send
    // buffer takes, so the write returns at once): the device is still busy
    // with it when the stack goes, and takes it again within the drain.
    a.close();
    c.write_all(&[7u8; 32 * 1024]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(c);
    drop(sa);
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.open();
    let mut buf = vec![0u8; 64 * 1024];
    let ended = timeout(Duration::from_secs(3), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the peer's stream hangs: the stack's last packets were dropped with it");
}

#[tokio::test]
async fn pcap_capture_is_flushed_while_the_stack_runs() {
    let file = std::env::temp_dir().join(format!("mptun-capture-{}.pcap", std::process::id()));
    let (sa, sb) = pair_capturing_a(&file);
    let l = MptcpListener::bind(&sb, "10.0.0.2:9").await.unwrap();
    let mut c = MptcpStream::connect(&sa, "10.0.0.2:9").await.unwrap();
    let (mut s, _) = l.accept().await.unwrap();
    c.write_all(b"captured").await.unwrap();
    let mut got = [0u8; 8];
    s.read_exact(&mut got).await.unwrap();
    // Idle now; the driver must still flush (about once a second) while the
    // stack runs: the capture is read, not waited for with a drop. A record
    // read mid-write is not counted, only whole ones (nor a header not yet
    // written out).
    let read = || {
        let Ok(mut r) = mptun_io::PcapReader::open(&file) else { return (0, false) };
        let (mut packets, mut saw_payload) = (0, false);
        while let Ok(Some(rec)) = r.next_record() {
            packets += 1;
            saw_payload |= rec.data.windows(8).any(|w| w == b"captured");
        }
        (packets, saw_payload)
    };
    let t0 = std::time::Instant::now();
    let (packets, saw_payload) = loop {
        let (packets, saw) = read();
        if (packets >= 4 && saw) || t0.elapsed() > Duration::from_secs(10) {
            break (packets, saw);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(packets >= 4, "handshake and data in the capture, got {packets}");
    assert!(saw_payload, "the payload in the capture within 10 s");
    drop((c, s, sa));
    let _ = std::fs::remove_file(&file);
}

/// `Stack::shutdown` returns only once the stack has ended: the reset of
/// a connection it still had is on the wire and in the capture, on disk,
/// although the driver flushes captures only once a second and a writer
/// thread stands between it and the device (a plain drop and an immediate
/// read of the capture find no reset). The peer accepts the reset and its
/// stream ends although the fq still held data when the stack went (the
/// device stalled, its batch full): that data leaves first, or the reset's
/// sequence number would be past what the peer has seen and draw only a
/// challenge ACK, the peer left half-open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_with_the_last_packets_sent_and_captured() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let a = Stalling::new(a);
    let file = std::env::temp_dir().join(format!("mptun-shutdown-{}.pcap", std::process::id()));
    let sa =
        Stack::builder().path("10.0.0.1".parse().unwrap(), a.clone() as Arc<dyn PacketIo>).pcap(&file).build().unwrap();
    let sb = Stack::builder().path("10.0.0.2".parse().unwrap(), Arc::new(b) as Arc<dyn PacketIo>).build().unwrap();
    let l = MptcpListener::bind(&sb, "10.0.0.2:9").await.unwrap();
    let mut c = MptcpStream::connect(&sa, "10.0.0.2:9").await.unwrap();
    let (mut s, _) = l.accept().await.unwrap();
    let got = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reader = tokio::spawn({
        let got = got.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) => return Ok(()),
                    Err(e) => return Err(e),
                    Ok(n) => got.fetch_add(n, std::sync::atomic::Ordering::Relaxed),
                };
            }
        }
    });
    // A window's worth first, so the sender's cwnd is wide open.
    const WARM: usize = 8 << 20;
    c.write_all(&vec![5u8; WARM]).await.unwrap();
    timeout(Duration::from_secs(10), async {
        while got.load(std::sync::atomic::Ordering::Relaxed) < WARM {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    // Then the device stalls: the batch fills and the fq holds the rest.
    // Written until the send buffer is full (no ACK comes back now), so
    // data the window never let out is left unsent: such a connection is
    // reset at the shutdown, not let linger.
    a.close();
    let _ = timeout(Duration::from_millis(300), c.write_all(&vec![6u8; 256 << 20])).await;
    timeout(Duration::from_secs(10), async {
        while sa.runtime_stats().held_packets == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the fq holds packets behind the stalled device");
    // The connection still has data to send when the stack goes, so it
    // ends with a reset, not a FIN. The device takes packets again inside
    // the shutdown's 200 ms drain.
    drop(c);
    let opener = {
        let a = a.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            a.open();
        })
    };
    timeout(Duration::from_secs(5), sa.shutdown()).await.expect("the driver stops within its drain");
    opener.join().unwrap();
    let mut r = mptun_io::PcapReader::open(&file).unwrap();
    let mut resets = 0;
    while let Some(rec) = r.next_record().unwrap() {
        let p = mptun_wire::parse_tcp_packet(&rec.data).expect("a whole packet");
        resets += (p.src == "10.0.0.1".parse::<std::net::IpAddr>().unwrap() && p.tcp.flags.rst()) as usize;
    }
    let _ = std::fs::remove_file(&file);
    assert!(resets > 0, "the shutdown's reset is in the capture");
    let ended = timeout(Duration::from_secs(3), reader).await.expect("the peer's stream ends").unwrap();
    assert_eq!(ended.expect_err("a reset, not an end of stream").kind(), std::io::ErrorKind::ConnectionReset);
    let nstat = sb.counters().to_nstat();
    assert!(!nstat.contains("TcpExtTCPChallengeACK"), "{nstat}");
}

/// A tool that exits the moment it has its answer: the request written and
/// the stream shut down, the answer read (to the end of stream, or just
/// its bytes while the peer's close is still to come), the stream dropped
/// and the stack shut down at once. The close both ends make in order is
/// finished, not cut short: the capture holds FINs both ways and no reset
/// from the stack that went, MPTCP or plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_stack_shut_down_right_after_an_orderly_close_sends_no_reset() {
    for (mptcp, to_eof, port) in [(true, true, 5020), (true, false, 5021), (false, true, 5022), (false, false, 5023)] {
        let what = format!("mptcp {mptcp}, read to the end {to_eof}");
        let file = std::env::temp_dir().join(format!("mptun-close-{}-{port}.pcap", std::process::id()));
        let (sa, sb) = pair_capturing_a(&file);
        let l = MptcpListener::bind(&sb, ("10.0.0.2", port)).await.unwrap();
        let opts = sa.stream_options().mptcp(mptcp);
        let mut c = MptcpStream::connect_with(&sa, ("10.0.0.2", port), opts).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        let server = tokio::spawn(async move {
            let mut request = Vec::new();
            s.read_to_end(&mut request).await.unwrap();
            s.write_all(b"answer").await.unwrap();
            // The end of stream a moment after the answer, as a server
            // that writes its answer and then closes: the other stack is
            // shut down in between when it does not read to the end.
            tokio::time::sleep(Duration::from_millis(20)).await;
            s.shutdown().await.unwrap();
            request
        });
        c.write_all(b"request").await.unwrap();
        c.shutdown().await.unwrap();
        let mut answer = vec![0u8; 6];
        timeout(Duration::from_secs(5), c.read_exact(&mut answer)).await.unwrap().unwrap();
        if to_eof {
            assert_eq!(timeout(Duration::from_secs(5), c.read(&mut [0u8; 8])).await.unwrap().unwrap(), 0, "{what}");
        }
        drop(c);
        timeout(Duration::from_secs(5), sa.shutdown()).await.expect("the driver stops within its linger and drain");
        assert_eq!(timeout(Duration::from_secs(5), server).await.unwrap().unwrap(), b"request");
        let ours: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let (mut resets, mut fins_out, mut fins_in) = (0, 0, 0);
        let mut r = mptun_io::PcapReader::open(&file).unwrap();
        while let Some(rec) = r.next_record().unwrap() {
            let p = mptun_wire::parse_tcp_packet(&rec.data).expect("a whole packet");
            resets += (p.src == ours && p.tcp.flags.rst()) as usize;
            fins_out += (p.src == ours && p.tcp.flags.fin()) as usize;
            fins_in += (p.dst == ours && p.tcp.flags.fin()) as usize;
        }
        let _ = std::fs::remove_file(&file);
        assert_eq!(resets, 0, "{what}: the stack reset a connection both ends closed in order");
        assert!(fins_out > 0 && fins_in > 0, "{what}: FINs both ways ({fins_out} out, {fins_in} in)");
    }
}

/// A stream still held when its stack is shut down reads an error, never
/// an end of stream that would pass a cut-off transfer for a whole one;
/// the zero-copy read too, MPTCP or plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_held_across_shutdown_reads_an_error() {
    for (mptcp, port) in [(true, 5012), (false, 5013)] {
        let (sa, sb) = pair();
        let l = MptcpListener::bind(&sb, ("10.0.0.2", port)).await.unwrap();
        let opts = sa.stream_options().mptcp(mptcp);
        let c = MptcpStream::connect_with(&sa, ("10.0.0.2", port), opts).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"first").await.unwrap();
        let (mut r, _w) = c.into_split();
        let mut buf = [0u8; 5];
        r.read_exact(&mut buf).await.unwrap();
        let parked = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let read = r.read(&mut buf).await;
            let chunk = r.read_chunk(16).await;
            (read.map_err(|e| e.to_string()), chunk.map_err(|e| e.to_string()))
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        timeout(Duration::from_secs(5), sa.clone().shutdown()).await.unwrap();
        let (read, chunk) = timeout(Duration::from_secs(5), parked).await.unwrap().unwrap();
        assert!(read.is_err(), "mptcp {mptcp}: read gave {read:?}");
        assert!(chunk.is_err(), "mptcp {mptcp}: read_chunk gave {chunk:?}");
        // The peer was reset.
        let e = timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "mptcp {mptcp}");
    }
}

/// A device whose drop panics (a user's device) still lets every handle
/// learn that the driver is gone: `shutdown` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_panicking_in_its_drop_does_not_hang_shutdown() {
    struct PanicOnDrop(ChannelIo);
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("a device's drop panicked (on purpose)");
        }
    }
    impl PacketIo for PanicOnDrop {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn mtu(&self) -> usize {
            self.0.mtu()
        }
        fn poll_recv_batch(
            &self,
            cx: &mut std::task::Context<'_>,
            b: &mut mptun_io::RxBatch,
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.poll_recv_batch(cx, b)
        }
        fn poll_send_batch(
            &self,
            cx: &mut std::task::Context<'_>,
            b: &mut mptun_io::TxBatch,
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.poll_send_batch(cx, b)
        }
        fn poll_send(&self, cx: &mut std::task::Context<'_>, p: &[u8]) -> std::task::Poll<std::io::Result<()>> {
            self.0.poll_send(cx, p)
        }
        fn stats(&self) -> mptun_io::IoStats {
            self.0.stats()
        }
    }
    let (a, _b) = ChannelIo::pair("a", "b", 1500, 64);
    let sa = Stack::builder()
        .path("10.0.0.1".parse().unwrap(), Arc::new(PanicOnDrop(a)) as Arc<dyn PacketIo>)
        .build()
        .unwrap();
    timeout(Duration::from_secs(5), sa.shutdown()).await.expect("shutdown returns although the device's drop panicked");
}

/// `set_nodelay` works at any time, as on a kernel socket: `nodelay()` reads
/// the connection's own setting back, tiny writes under Nagle are delivered
/// (held only while data is in flight, never stalled), and switching it off
/// again delivers the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nagle_can_be_switched_on_and_off_on_a_live_stream() {
    const WRITES: usize = 400;
    const PIECE: usize = 10;
    let (sa, sb) = pair();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5005").await.unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        got
    });
    let mut client = MptcpStream::connect(&sa, "10.0.0.2:5005").await.unwrap();
    assert!(client.nodelay().unwrap(), "nodelay is the default");

    client.set_nodelay(false).unwrap();
    assert!(!client.nodelay().unwrap());
    for i in 0..WRITES {
        client.write_all(&[i as u8; PIECE]).await.unwrap();
    }

    client.set_nodelay(true).unwrap();
    assert!(client.nodelay().unwrap());
    client.write_all(b"end").await.unwrap();
    client.shutdown().await.unwrap();
    let got = timeout(Duration::from_secs(10), server).await.unwrap().unwrap();
    let mut want: Vec<u8> = (0..WRITES).flat_map(|i| [i as u8; PIECE]).collect();
    want.extend_from_slice(b"end");
    assert_eq!(got, want);
}

/// The server side of a scheduler experiment: a listener's scheduler runs
/// the connections it hands out (their info names it), the stack's
/// (`net.mptcp.scheduler`) runs those of a listener without one, and a
/// download under BLEST arrives intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_chooses_the_scheduler_of_accepted_connections() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let sa = Stack::builder().path("10.0.0.1".parse().unwrap(), Arc::new(a) as Arc<dyn PacketIo>).build().unwrap();
    let mptcp = mptun::MptcpConfig { scheduler: mptun::Policy::Ecf, ..mptun::MptcpConfig::default() };
    let sb = Stack::builder()
        .path("10.0.0.2".parse().unwrap(), Arc::new(b) as Arc<dyn PacketIo>)
        .mptcp_config(mptcp)
        .build()
        .unwrap();
    let blest = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    blest.set_scheduler(mptun::scheduler_by_name("blest").unwrap());
    let plain = MptcpListener::bind(&sb, "10.0.0.2:5001").await.unwrap();
    assert!(mptun::scheduler_by_name("fastest").is_err());
    const N: usize = 2 << 20;
    let server = tokio::spawn(async move {
        let (s, _) = blest.accept().await.unwrap();
        let name = s.info().unwrap().conn.scheduler;
        let (mut r, mut w) = tokio::io::split(s);
        w.write_all(&Pattern::bytes(7, N)).await.unwrap();
        w.shutdown().await.unwrap();
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        let (s2, _) = plain.accept().await.unwrap();
        (name, s2.info().unwrap().conn.scheduler)
    });
    let c = MptcpStream::connect(&sa, "10.0.0.2:5000").await.unwrap();
    let (got, n) = timeout(Duration::from_secs(60), exchange(c, Vec::new())).await.unwrap();
    assert_eq!(n, N);
    assert_eq!(Sha256::digest(&got), Sha256::digest(Pattern::bytes(7, N)));
    let _c2 = MptcpStream::connect(&sa, "10.0.0.2:5001").await.unwrap();
    let (listener_choice, stack_choice) = timeout(Duration::from_secs(30), server).await.unwrap().unwrap();
    assert_eq!(listener_choice, "blest");
    assert_eq!(stack_choice, "ecf");
}

/// Two paths on one in-memory device per side: A at 10.0.0.1 and
/// 10.0.1.1, B at 10.0.0.2 and 10.0.1.2. Neither side's second address is
/// an endpoint at first, so the connection starts on one path.
fn two_path_pair() -> (Stack, Stack) {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let (a, b): (Arc<dyn PacketIo>, Arc<dyn PacketIo>) = (Arc::new(a), Arc::new(b));
    let none =
        |id, addr: &str| mptun::PmEndpoint { id, addr: addr.parse().unwrap(), flags: Default::default(), port: None };
    let mut ma = mptun::MptcpConfig::default();
    ma.pm.endpoints = vec![none(2, "10.0.1.1")];
    ma.pm.max_add_addr_accepted = 1;
    let mut mb = mptun::MptcpConfig::default();
    mb.pm.endpoints = vec![none(1, "10.0.1.2")];
    let sa = Stack::builder()
        .path("10.0.0.1".parse().unwrap(), a.clone())
        .path("10.0.1.1".parse().unwrap(), a)
        .mptcp_config(ma)
        .build()
        .unwrap();
    let sb = Stack::builder()
        .path("10.0.0.2".parse().unwrap(), b.clone())
        .path("10.0.1.2".parse().unwrap(), b)
        .mptcp_config(mb)
        .build()
        .unwrap();
    (sa, sb)
}

/// Waits (bounded) for an event of `kind`, returning every event seen up to it.
async fn until_event(ev: &mut mptun::PmEvents, kind: mptun::PmEventKind) -> Vec<mptun::PmEvent> {
    let mut seen = Vec::new();
    let wait = async {
        while let Some(e) = ev.recv().await {
            let done = e.kind == kind;
            seen.push(e);
            if done {
                return;
            }
        }
    };
    let r = timeout(Duration::from_secs(10), wait).await;
    assert!(r.is_ok(), "no {kind:?} event; saw {seen:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_manager_changes_paths_of_a_live_connection_and_reports_it() {
    use mptun::{EndpointFlags, PmError, PmEventKind as K};
    let (sa, sb) = two_path_pair();
    let (pa, pb) = (sa.path_manager(), sb.path_manager());
    let (mut ea, mut eb) = (pa.events(), pb.events());
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    assert_eq!(until_event(&mut eb, K::ListenerCreated).await.len(), 1);
    let client = MptcpStream::connect(&sa, "10.0.0.2:5000").await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let token_a = client.token().unwrap().expect("MPTCP");
    let cpm = client.path_manager().unwrap().expect("MPTCP");
    assert_eq!(cpm.token(), token_a);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // Data both ways: the connection is fully established.
    cw.write_all(b"hello").await.unwrap();
    let mut b5 = [0u8; 5];
    sr.read_exact(&mut b5).await.unwrap();
    sw.write_all(b"world").await.unwrap();
    cr.read_exact(&mut b5).await.unwrap();
    let seen = until_event(&mut ea, K::Established).await;
    assert_eq!(seen[0].kind, K::Created);
    assert!(seen.iter().all(|e| e.token == token_a), "{seen:?}");

    // The operator turns B's second address into a `signal` endpoint: the
    // live connection announces it and A, allowed one, joins it.
    let signal = EndpointFlags { signal: true, ..Default::default() };
    let ep = |addr: &str, flags| mptun::PmEndpoint { id: 0, addr: addr.parse().unwrap(), flags, port: None };
    assert_eq!(pb.endpoint_add(ep("10.0.1.2", signal)), Err(PmError::IdInUse), "already an endpoint");
    assert_eq!(pb.endpoint_add(ep("10.0.9.2", signal)), Err(PmError::AddrNotLocal));
    pb.endpoint_delete(1).unwrap();
    assert_eq!(pb.endpoint_add(ep("10.0.1.2", signal)), Ok(1));
    assert_eq!(pb.endpoints().len(), 1);
    let seen = until_event(&mut ea, K::SubEstablished).await;
    assert!(seen.iter().any(|e| e.kind == K::Announced && e.remote_id == Some(1)), "{seen:?}");
    let sub = seen.last().unwrap();
    assert_eq!(sub.remote.map(|r| r.ip()), Some("10.0.1.2".parse().unwrap()));
    assert_eq!(sb.counters().mptcp_add_addr_tx, 1);

    // A makes its new subflow a backup one: MP_PRIO reaches B.
    assert_eq!(cpm.set_backup("10.0.5.1".parse().unwrap(), None, true), Err(PmError::NoSuchSubflow));
    let local = sub.local.unwrap().ip();
    assert_eq!(cpm.set_backup(local, None, true), Ok(1));
    let seen = until_event(&mut eb, K::SubPriority).await;
    assert!(seen.last().unwrap().backup);
    assert_eq!(sb.counters().mptcp_mp_prio_rx, 1);

    // B's operator deletes the endpoint: RM_ADDR, and A's subflow to it closes.
    pb.endpoint_delete(1).unwrap();
    let mut seen = until_event(&mut ea, K::SubClosed).await;
    if !seen.iter().any(|e| e.kind == K::Removed) {
        // The withdrawn subflow's FIN may overtake the RM_ADDR (which rides on the other).
        seen.extend(until_event(&mut ea, K::Removed).await);
    }
    assert!(seen.iter().any(|e| e.kind == K::Removed && e.remote_id == Some(1)), "{seen:?}");
    assert_eq!(sa.counters().mptcp_rm_addr, 1);

    // Limits, and the data still flows over what is left.
    pa.set_limits(Some(4), None);
    assert_eq!(pa.limits(), mptun::PmLimits { subflows: 4, add_addr_accepted: 1 });
    const N: usize = 1 << 20;
    let data = Pattern::bytes(9, N);
    let w = tokio::spawn(async move {
        cw.write_all(&data).await.unwrap();
        cw.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    timeout(Duration::from_secs(30), sr.read_to_end(&mut got)).await.unwrap().unwrap();
    w.await.unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(Pattern::bytes(9, N)));
    assert_eq!(ea.lost(), 0);
}
