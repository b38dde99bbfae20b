//! What a capture (`StackBuilder::pcap`, the CLI's `--pcap`) records of a
//! transfer with the kernel's MPTCP over TUN devices, read back with the
//! repo's own pcap reader: every TCP checksum in it verifies, those of the
//! packets the kernel handed up with the checksum left to the device
//! (virtio `NEEDS_CSUM`) and of its super-packets (one read of up to 64 KiB)
//! included, so a reader who looks for damaged segments finds only real
//! damage; and a connection both ends closed in order ends without a reset
//! from mptun, though the stack is shut down (as a tool's exit does) the
//! moment the application has read the peer's end of stream, with the
//! subflows' FIN exchanges still under way. mptun as client (two paths)
//! and as server.
//!
//! Needs root: skipped with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpListener, MptcpStream, Stack};
use mptun_io::testutil::require_netns;
use mptun_io::PcapReader;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking, Report};
use mptun_wire::checksum;
use tokio::time::timeout;

const N: usize = 16 << 20;
const LIMIT: Duration = Duration::from_secs(60);
const MTU: usize = 1500;
const TCP_FIN: u8 = 0x01;
const TCP_RST: u8 = 0x04;

/// A capture file, removed when the test passes and kept for a look when
/// it fails.
struct Capture(PathBuf);

impl Capture {
    fn new(case: &str) -> Capture {
        Capture(std::env::temp_dir().join(format!("mptun-pcap-{case}-{}.pcap", std::process::id())))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("capture kept: {}", self.0.display());
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// What the capture holds, as far as the assertions go.
#[derive(Debug, Default)]
struct Seen {
    records: usize,
    tcp: usize,
    /// Segments mptun received that were longer than the MTU.
    received_super: usize,
    fin_from_mptun: usize,
    fin_to_mptun: usize,
    /// Every record that fails a check, with the reason.
    bad: Vec<String>,
    resets_from_mptun: Vec<String>,
}

/// Reads `file` and checks every record: the IP header's length and (IPv4)
/// checksum, and the TCP checksum over the pseudo-header, as a dissector
/// that verifies checksums does.
fn inspect(file: &Path, ours: &[IpAddr]) -> Seen {
    let mut r = PcapReader::open(file).expect("the capture opens");
    let mut seen = Seen::default();
    let mut i = 0usize;
    while let Some(rec) = r.next_record().expect("the capture reads to its end") {
        i += 1;
        seen.records += 1;
        let Some(p) = r.ip_packet(&rec) else {
            seen.bad.push(format!("record {i}: not an IP packet"));
            continue;
        };
        if rec.orig_len as usize != p.len() {
            seen.bad.push(format!("record {i}: cut ({} of {} bytes)", p.len(), rec.orig_len));
            continue;
        }
        let (src, dst, proto, hlen, total) = match p[0] >> 4 {
            4 if p.len() >= 20 => {
                let ihl = usize::from(p[0] & 0x0f) * 4;
                if ihl < 20 || p.len() < ihl || !checksum::verify(&p[..ihl]) {
                    seen.bad.push(format!("record {i}: IPv4 header checksum"));
                    continue;
                }
                let s = IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15]));
                let d = IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19]));
                (s, d, p[9], ihl, usize::from(u16::from_be_bytes([p[2], p[3]])))
            }
            6 if p.len() >= 40 => {
                let s: [u8; 16] = p[8..24].try_into().unwrap();
                let d: [u8; 16] = p[24..40].try_into().unwrap();
                let total = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
                (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)), p[6], 40, total)
            }
            _ => {
                seen.bad.push(format!("record {i}: malformed IP header"));
                continue;
            }
        };
        let from_mptun = ours.contains(&src);
        let way = if from_mptun { "sent" } else { "received" };
        if total != p.len() {
            seen.bad.push(format!("record {i} ({way}): IP length {total}, {} bytes recorded", p.len()));
            continue;
        }
        if proto != checksum::IPPROTO_TCP {
            continue;
        }
        seen.tcp += 1;
        let tcp = &p[hlen..];
        if tcp.len() < 20 {
            seen.bad.push(format!("record {i} ({way}): TCP header cut"));
            continue;
        }
        if !checksum::verify_tcp(src, dst, tcp) {
            seen.bad.push(format!("record {i} ({way}, {} bytes): bad TCP checksum", p.len()));
        }
        if !from_mptun && p.len() > MTU {
            seen.received_super += 1;
        }
        let flags = tcp[13];
        let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
        if flags & TCP_FIN != 0 {
            *if from_mptun { &mut seen.fin_from_mptun } else { &mut seen.fin_to_mptun } += 1;
        }
        if flags & TCP_RST != 0 && from_mptun {
            seen.resets_from_mptun.push(format!("record {i}: {src}:{sport} -> {dst}"));
        }
    }
    seen
}

fn check(case: &str, seen: &Seen) {
    println!(
        "{case}: {} records, {} TCP, {} failing a check, {} received super-packets, FINs {} sent / {} received, \
         resets from mptun {:?}",
        seen.records,
        seen.tcp,
        seen.bad.len(),
        seen.received_super,
        seen.fin_from_mptun,
        seen.fin_to_mptun,
        seen.resets_from_mptun
    );
    assert!(seen.tcp > 2 * N / 65_536, "{case}: too few TCP segments recorded to judge: {seen:?}");
    assert!(
        seen.bad.is_empty(),
        "{case}: {} of {} records fail verification; the first: {:?}",
        seen.bad.len(),
        seen.records,
        &seen.bad[..seen.bad.len().min(8)]
    );
    assert!(seen.received_super > 0, "{case}: no super-packet from the kernel was recorded, so none was checked");
    assert!(seen.fin_from_mptun > 0 && seen.fin_to_mptun > 0, "{case}: both ends close in order: {seen:?}");
    assert!(
        seen.resets_from_mptun.is_empty(),
        "{case}: mptun reset a connection both ends closed in order: {:?}",
        seen.resets_from_mptun
    );
}

/// A two-path lab whose `kernel` side runs MPTCP (with a `subflow` endpoint
/// on path 2 if `subflow_endpoint`), and a capture file for mptun's stack;
/// `None` (the test skipped, with the reason printed) without root.
fn lab_with_capture(case: &str, kernel: Side, subflow_endpoint: bool) -> Option<(Lab, Capture)> {
    if require_netns().is_some() {
        return None;
    }
    let lab = Lab::new(case, 2).unwrap();
    lab.kernel_mptcp(kernel, subflow_endpoint).unwrap();
    Some((lab, Capture::new(case)))
}

/// The kernel's end on a thread of its own: the socket `open` gives sends
/// and reads to the end of the stream.
fn kernel_end(
    open: impl FnOnce() -> io::Result<TcpStream> + Send + 'static,
) -> std::thread::JoinHandle<io::Result<Report>> {
    std::thread::spawn(move || exchange_blocking(open()?, N, 2, Duration::from_secs(40)))
}

/// Sends and reads to the end on `s` while the kernel thread `k` does the
/// same, shuts the stack down as a tool's exit does, and checks what the
/// capture holds.
async fn exchange_then_check(
    case: &str,
    stack: Stack,
    s: MptcpStream,
    k: std::thread::JoinHandle<io::Result<Report>>,
    cap: &Capture,
    ours: &[IpAddr],
) {
    assert!(s.info().unwrap().is_mptcp(), "{case}: MP_CAPABLE with the kernel");
    let mine = timeout(LIMIT, exchange_async(s, N, 1, Arc::new(AtomicU64::new(0))))
        .await
        .expect("transfer timed out")
        .expect("transfer failed");
    let theirs = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    assert_intact(&mine, &theirs);
    timeout(Duration::from_secs(10), stack.shutdown()).await.expect("the stack ends");
    check(case, &inspect(&cap.0, ours));
}

/// mptun in A, a TUN per path, connects to a kernel MPTCP listener in B; both
/// send and read to the end, then the stack is shut down as a tool's exit does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tool_pcap_of_mptun_as_client_verifies_and_ends_without_reset() {
    let case = "pcc";
    let Some((lab, cap)) = lab_with_capture(case, Side::B, false) else { return };
    let ours = [lab.mptun_addr(Side::A, 1), lab.mptun_addr(Side::A, 2)];
    let stack = Stack::builder()
        .path(ours[0], lab.tun(Side::A, "pcc1", &[1]).unwrap())
        .path(ours[1], lab.tun(Side::A, "pcc2", &[2]).unwrap())
        .pcap(&cap.0)
        .build()
        .unwrap();
    let server = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5311);
    let l = kernel::listen(lab.b.name(), server, Proto::Mptcp).unwrap();
    let k = kernel_end(move || kernel::accept_within(&l, Duration::from_secs(10)));
    let s = timeout(Duration::from_secs(10), MptcpStream::connect(&stack, server)).await.unwrap().unwrap();
    exchange_then_check(case, stack, s, k, &cap, &ours).await;
}

/// A kernel MPTCP client in A (a `subflow` endpoint on path 2) connects to
/// mptun listening in B; as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tool_pcap_of_mptun_as_server_verifies_and_ends_without_reset() {
    let case = "pcs";
    let Some((lab, cap)) = lab_with_capture(case, Side::A, true) else { return };
    let ours = [lab.mptun_addr(Side::B, 1)];
    let stack = Stack::builder().path(ours[0], lab.tun(Side::B, "pcs1", &[1]).unwrap()).pcap(&cap.0).build().unwrap();
    let at = SocketAddr::new(ours[0], 5312);
    let listener = MptcpListener::bind(&stack, at).await.unwrap();
    let ns = lab.a.name().to_owned();
    let k = kernel_end(move || kernel::connect(&ns, at, Proto::Mptcp));
    let (s, _) = timeout(Duration::from_secs(10), listener.accept()).await.expect("no connection").unwrap();
    drop(listener);
    exchange_then_check(case, stack, s, k, &cap, &ours).await;
}
