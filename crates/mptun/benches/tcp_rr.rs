//! netperf `TCP_RR` over TUN, per pacer: the real-packet version of `mptun
//! sim edt-rr` (docs/cc.md section 2), which reproduces Linux's switch to
//! the earliest-departure-time model ("tcp: switch tcp and sch_fq to new
//! earliest departure time model", 4.20: P99 3825 µs with the fq quantum,
//! 63 µs with EDT).
//!
//! `cargo bench -p mptun --bench tcp_rr` (root). Environment:
//! `MPTUN_RR_TRANSACTIONS` (per pacer and round, default 10000),
//! `MPTUN_RR_ROUNDS` (default 5, so 50 000 per pacer as in the simulator),
//! `MPTUN_RR_RATE_MBIT` (`SO_MAX_PACING_RATE` on both ends; default: the
//! rate at which the quantum pacer's throttle is the patch's, see below),
//! `MPTUN_RR_MTU` (veths and TUN, default 4000), `MPTUN_RR_PACERS`
//! (comma-separated runs, default `edt,quantum,none,kernel`),
//! `MPTUN_RR_PEER_CAP` (`0`: the kernel peer unpaced, for diagnosis),
//! `MPTUN_RR_ZC` (`0`: without `StackBuilder::zero_copy_send`),
//! `MPTUN_RR_BOOST` (`1`: run at nice -20, the session's autogroup too, see
//! `Boost`), `MPTUN_RR_RUNTIME` (`multi`: the CLI's two-worker tokio
//! runtime instead of the default single thread, which is netperf's shape),
//! `MPTUN_RR_DUMP` (a file prefix: every latency in ns, one file per run and
//! round).
//!
//! The workload is the simulator's: one plain-TCP connection, the client
//! sends a 100-byte request the moment it has read the whole 100-byte
//! response, and each transaction's latency runs from writing the request to
//! having read the response. mptun is the client, behind a TUN device in the
//! client namespace of `topo.sh up --paths 1 --mtu M`; the peer is the
//! kernel's TCP in the server namespace (netperf's `netserver`), across a
//! routed veth. Both ends have `SO_MAX_PACING_RATE` at the reduced rate, as
//! in the simulator: mptun through `StreamOptions::max_pacing_rate`, the
//! kernel by `setsockopt`, which (this kernel has no `sch_fq`) turns on TCP's
//! internal pacing, EDT since 4.20. Only mptun's pacer changes between runs;
//! the kernel side paces the same way in all of them.
//!
//! What shows the artefact: with the quantum pacer mptun sends its quantum
//! (2 × MTU of credit) 152 bytes at a time and is then throttled for
//! `quantum / rate` (halved by fq's drift credit after the first time), so one
//! request in `quantum / 152` waits that long; at an 8000-byte quantum that
//! is 1.9% of them, enough to reach the P99 (the kernel peer paces by EDT,
//! so only mptun's direction is throttled: a quantum above ~15 KB, MTU 7600,
//! would hide the artefact under the P99). With EDT a request waits at most
//! `152 / rate` after the previous one.
//!
//! The default rate makes the throttle the patch's: its numbers point to a
//! ≈3.75 ms throttle (`quantum / rate / 2`, docs/cc.md), which at MTU 4000
//! is `8000 / (2 × 3.75 ms)` = 1.067 MB/s = 8.53 Mbit/s. A throttle that long
//! also stands far above a real round trip through a TUN device; the
//! simulator's 80 Mbit/s (a 400 µs throttle) would not.
//!
//! The `kernel` run is the baseline measured in the same run: the kernel's
//! TCP as the client too (no TUN, no mptun), same cap, same loop. What it
//! shows above a few tens of µs is the host's scheduling noise (other
//! processes on the same cores), which no pacer causes or removes.
//!
//! The runs are interleaved over the rounds and the statistics pool every
//! round's transactions (a concurrent build on a shared machine then hits
//! every pacer alike). Statistics are the simulator's
//! (`mptun_sim::rr::LatencyStats`, netperf's definitions: nearest-rank P99,
//! population stddev), so the two tables compare directly.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mptun::{MptcpStream, PacerKind, Stack};
use mptun_io::{run_in_netns, spawn_tun_in_netns, PacketIo, TunConfig};
use mptun_sim::rr::LatencyStats;
use socket2::{Domain, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "support/topo.rs"]
mod topo;
use topo::Topo;

const OCTET: u8 = 77;
/// netperf `TCP_RR -r 100,100`.
const MSG: usize = 100;
/// IP + TCP + timestamp option headers of one message, as the quantum pacer
/// is charged for it.
const PKT: u64 = MSG as u64 + 52;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `SO_MAX_PACING_RATE` in bytes per second on a kernel socket. The kernel
/// takes an unsigned long (a u32 also works); without `sch_fq` a rate other
/// than ~0 switches the socket to TCP's internal pacing.
fn set_max_pacing_rate(fd: &impl AsRawFd, bytes_per_sec: u64) -> io::Result<()> {
    let v: u64 = bytes_per_sec;
    // SAFETY: a valid fd, a pointer to a live u64 and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&v as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `tcpi_pacing_rate` and `tcpi_max_pacing_rate` (bytes per second) of a
/// kernel socket, read from `TCP_INFO` at their fixed offsets (104, 112).
fn kernel_pacing(fd: &impl AsRawFd) -> io::Result<(u64, u64)> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: a valid fd and a buffer of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, buf.as_mut_ptr().cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if len < 120 {
        return Err(io::Error::other(format!("TCP_INFO of {len} bytes has no pacing rates")));
    }
    let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
    Ok((u64_at(104), u64_at(112)))
}

fn listen(ns: &str, addr: SocketAddr, rate: u64) -> io::Result<TcpListener> {
    run_in_netns(ns, || {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        set_max_pacing_rate(&s, rate)?;
        s.bind(&addr.into())?;
        s.listen(4)?;
        Ok(TcpListener::from(s))
    })?
}

/// What the kernel server saw.
struct ServerEnd {
    transactions: u64,
    pacing_rate: u64,
    max_pacing_rate: u64,
}

impl ServerEnd {
    /// Every request answered, and the peer paced at the rate it was given.
    fn check(&self, n: u64, rate: u64) -> io::Result<()> {
        if self.transactions != n {
            return Err(io::Error::other(format!("the server answered {} of {n}", self.transactions)));
        }
        if self.max_pacing_rate != peer_rate(rate) {
            return Err(io::Error::other(format!(
                "the kernel peer's tcpi_max_pacing_rate is {}, not {}",
                self.max_pacing_rate,
                peer_rate(rate)
            )));
        }
        Ok(())
    }
}

/// netserver: answer each 100-byte request with the same 100 bytes until
/// the client closes.
fn server_thread(l: TcpListener, rate: u64) -> std::thread::JoinHandle<io::Result<ServerEnd>> {
    std::thread::spawn(move || {
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        set_max_pacing_rate(&s, rate)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut buf = [0u8; MSG];
        let mut transactions = 0u64;
        let mut rates = kernel_pacing(&s)?;
        loop {
            match s.read_exact(&mut buf) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            }
            s.write_all(&buf)?;
            transactions += 1;
            if transactions == 1000 {
                rates = kernel_pacing(&s)?;
            }
        }
        Ok(ServerEnd { transactions, pacing_rate: rates.0, max_pacing_rate: rates.1 })
    })
}

/// One pacer's run.
struct Run {
    latencies: Vec<mptun_time::Duration>,
    note: String,
}

/// The kernel peer's `SO_MAX_PACING_RATE`: the same reduced rate, unless
/// `MPTUN_RR_PEER_CAP=0` (then `~0`, unpaced, to tell the peer's pacing
/// from mptun's in a diagnosis).
fn peer_rate(rate: u64) -> u64 {
    if std::env::var("MPTUN_RR_PEER_CAP").is_ok_and(|v| v == "0") {
        u64::MAX
    } else {
        rate
    }
}

async fn mptun_rr(topo: &Topo, pacer: PacerKind, rate: u64, mtu: u16, n: u64, port: u16, tag: &str) -> io::Result<Run> {
    let server = SocketAddr::new(IpAddr::from([10, OCTET, 1, 2]), port);
    let srv = server_thread(listen(&topo.srv(), server, peer_rate(rate))?, peer_rate(rate));
    let cfg = TunConfig::new(tag).address(IpAddr::from([10, OCTET, 101, 1]), 24)?.mtu(mtu).tx_queue_len(10_000);
    let tun: Arc<dyn PacketIo> = Arc::new(spawn_tun_in_netns(&topo.cli(), &cfg)?);
    // `MPTUN_RR_ZC=0`: payloads copied into their packets (for an A/B of
    // `StackBuilder::zero_copy_send`).
    let zero_copy = !std::env::var("MPTUN_RR_ZC").is_ok_and(|v| v == "0");
    let stack = Stack::builder().path(IpAddr::from([10, OCTET, 101, 2]), tun).zero_copy_send(zero_copy).build()?;
    let opts = stack.stream_options().mptcp(false).pacer(pacer).max_pacing_rate(Some(rate));
    let mut s = tokio::time::timeout(Duration::from_secs(10), MptcpStream::connect_with(&stack, server, opts))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect"))??;
    let mut latencies = Vec::with_capacity(n as usize);
    let (mut req, mut resp) = ([0u8; MSG], [0u8; MSG]);
    let mut sample = String::new();
    for i in 0..n {
        fill_request(&mut req, i);
        let t0 = Instant::now();
        s.write_all(&req).await?;
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut resp))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("response {i}")))??;
        latencies.push(mptun_time::Duration::from_nanos(t0.elapsed().as_nanos() as u64));
        if resp != req {
            return Err(io::Error::other(format!("response {i} is not its request's echo")));
        }
        if i == n / 2 {
            if let Some(c) = stack.connections().first() {
                for sf in &c.conn.subflows {
                    let t = &sf.tcp;
                    if t.pacing_rate != rate {
                        return Err(io::Error::other(format!(
                            "mptun's pacing rate is {} B/s, not the cap {rate}",
                            t.pacing_rate
                        )));
                    }
                    sample += &format!(
                        " [mptun cwnd={} srtt={:?} pacing={:.1}Mb/s]",
                        t.cwnd,
                        t.srtt,
                        t.pacing_rate as f64 * 8e-6
                    );
                }
            }
        }
    }
    s.shutdown().await?;
    let end =
        tokio::task::spawn_blocking(move || srv.join()).await?.map_err(|_| io::Error::other("server panicked"))??;
    end.check(n, rate)?;
    let rs = stack.runtime_stats();
    let c = stack.counters();
    Ok(Run {
        latencies,
        note: format!(
            "retrans={} tx_packets={} held={} timer_wakeups={} kernel pacing={:.1}Mb/s max={:.1}Mb/s{sample}",
            c.tcp_retrans_segs,
            rs.tx_packets,
            rs.tx_held,
            rs.timer_wakeups,
            end.pacing_rate as f64 * 8e-6,
            end.max_pacing_rate as f64 * 8e-6,
        ),
    })
}

/// The baseline: the kernel's TCP as the client too (from the client
/// namespace's veth, no TUN), same cap, same loop. What it shows beyond a
/// few tens of µs is the host's scheduling noise, not a pacer.
fn kernel_rr(topo: &Topo, rate: u64, n: u64, port: u16) -> io::Result<Run> {
    let server = SocketAddr::new(IpAddr::from([10, OCTET, 1, 2]), port);
    let srv = server_thread(listen(&topo.srv(), server, peer_rate(rate))?, peer_rate(rate));
    let latencies = run_in_netns(&topo.cli(), || -> io::Result<Vec<mptun_time::Duration>> {
        let sock = Socket::new(Domain::for_address(server), Type::STREAM, None)?;
        set_max_pacing_rate(&sock, rate)?;
        sock.set_tcp_nodelay(true)?;
        sock.connect_timeout(&server.into(), Duration::from_secs(10))?;
        let mut s = std::net::TcpStream::from(sock);
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut latencies = Vec::with_capacity(n as usize);
        let (mut req, mut resp) = ([0u8; MSG], [0u8; MSG]);
        for i in 0..n {
            fill_request(&mut req, i);
            let t0 = Instant::now();
            s.write_all(&req)?;
            s.read_exact(&mut resp)?;
            latencies.push(mptun_time::Duration::from_nanos(t0.elapsed().as_nanos() as u64));
            if resp != req {
                return Err(io::Error::other(format!("response {i} is not its request's echo")));
            }
        }
        Ok(latencies)
    })??;
    let end = srv.join().map_err(|_| io::Error::other("server panicked"))??;
    end.check(n, rate)?;
    Ok(Run {
        latencies,
        note: format!(
            "kernel pacing={:.1}Mb/s max={:.1}Mb/s",
            end.pacing_rate as f64 * 8e-6,
            end.max_pacing_rate as f64 * 8e-6
        ),
    })
}

/// Request `i`: its number in the first 8 bytes, a pattern after, so each
/// echo is checked against its own request.
fn fill_request(req: &mut [u8; MSG], i: u64) {
    for (k, b) in req.iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(k as u8);
    }
    req[..8].copy_from_slice(&i.to_le_bytes());
}

/// `MPTUN_RR_BOOST=1`: the bench's threads at nice -20, and its session's
/// autogroup too (with `sched_autogroup_enabled`, thread nice only orders
/// threads inside their session; sessions compete as equals), restored on
/// drop. On a machine whose cores other sessions keep busy, a woken thread
/// otherwise often waits for the next scheduler tick (4 ms at HZ=250), and
/// that noise, not a pacer, sets the P99 of every run, the kernel's too.
struct Boost {
    autogroup_nice: Option<i32>,
}

impl Boost {
    fn new() -> io::Result<Boost> {
        const AUTOGROUP: &str = "/proc/self/autogroup";
        // "/autogroup-216 nice 0"
        let old = std::fs::read_to_string(AUTOGROUP)
            .ok()
            .and_then(|s| s.split_whitespace().last().and_then(|n| n.parse::<i32>().ok()));
        if old.is_some() {
            std::fs::write(AUTOGROUP, "-20")?;
        }
        // SAFETY: setpriority has no memory effects; threads created later inherit it.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Boost { autogroup_nice: old })
    }
}

impl Drop for Boost {
    fn drop(&mut self) {
        if let Some(n) = self.autogroup_nice {
            let _ = std::fs::write("/proc/self/autogroup", n.to_string());
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "?".into(), |s| s.trim().to_owned())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if mptun_io::testutil::require_netns().is_some() {
        return;
    }
    let n: u64 = env("MPTUN_RR_TRANSACTIONS", 10_000u64).max(1);
    let rounds: usize = env("MPTUN_RR_ROUNDS", 5usize).max(1);
    let mtu: u16 = env("MPTUN_RR_MTU", 4000u16).clamp(1280, 65_000);
    let quantum = 2 * u64::from(mtu);
    // The patch's throttle, quantum / rate / 2 = 3.75 ms.
    let mbit: f64 = env("MPTUN_RR_RATE_MBIT", quantum as f64 / (2.0 * 3.75e-3) * 8.0 / 1e6);
    // `None`: the kernel-client baseline.
    let runs: Vec<Option<PacerKind>> = std::env::var("MPTUN_RR_PACERS")
        .unwrap_or_else(|_| "edt,quantum,none,kernel".into())
        .split(',')
        .map(|p| match p.trim() {
            "kernel" => None,
            p => Some(p.parse().expect("MPTUN_RR_PACERS: edt, quantum, none, kernel")),
        })
        .collect();
    let name = |r: Option<PacerKind>| r.map_or_else(|| "kernel".to_string(), |p| p.to_string());
    let rate = ((mbit * 1e6 / 8.0) as u64).max(1);
    let prefix = mptun_io::testutil::unique_name("rrb", 12);
    let topo = Topo::up(&prefix, &["--paths", "1", "--octet", &OCTET.to_string(), "--mtu", &mtu.to_string()])
        .expect("topo.sh up");
    println!(
        "tcp_rr: mptun (TUN, MTU {mtu}) <-> kernel TCP over a veth, {MSG}-byte request/response, \
         SO_MAX_PACING_RATE {mbit:.3} Mbit/s both ends, {n} transactions x {rounds} rounds per pacer"
    );
    println!(
        "expected: quantum {quantum} B throttles 1 request in {} ({:.1}%) for {:.0} us (first {:.0} us); EDT spacing {:.0} us",
        quantum / PKT,
        100.0 * PKT as f64 / quantum as f64,
        quantum as f64 / rate as f64 * 1e6 / 2.0,
        quantum as f64 / rate as f64 * 1e6,
        PKT as f64 / rate as f64 * 1e6
    );
    let _boost = std::env::var("MPTUN_RR_BOOST").is_ok_and(|v| v == "1").then(|| Boost::new().expect("MPTUN_RR_BOOST"));
    println!("load average at start: {}; priority boost {}", loadavg(), if _boost.is_some() { "on" } else { "off" });
    let rt = if std::env::var("MPTUN_RR_RUNTIME").is_ok_and(|v| v == "multi") {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    };
    let mut pooled: Vec<Vec<mptun_time::Duration>> = vec![Vec::new(); runs.len()];
    for round in 0..rounds {
        for (i, &run) in runs.iter().enumerate() {
            let port = 6000 + (round * runs.len() + i) as u16;
            let p = name(run);
            let result = match run {
                Some(pacer) => rt.block_on(mptun_rr(&topo, pacer, rate, mtu, n, port, &format!("rr{round}{p}"))),
                None => kernel_rr(&topo, rate, n, port),
            };
            match result {
                Ok(r) => {
                    let s = LatencyStats::from_latencies(&r.latencies);
                    println!(
                        "round {round}: {p:<8} P99 {:>8.1} max {:>8.1} mean {:>7.1} us  {}",
                        s.p99_us, s.max_us, s.mean_us, r.note
                    );
                    if let Ok(dump) = std::env::var("MPTUN_RR_DUMP") {
                        let text: String = r.latencies.iter().map(|l| format!("{}\n", l.as_nanos())).collect();
                        std::fs::write(format!("{dump}.{p}.{round}"), text).expect("MPTUN_RR_DUMP");
                    }
                    pooled[i].extend(r.latencies);
                }
                Err(e) => panic!("round {round}, pacer {p}: {e}"),
            }
        }
    }
    drop(rt);
    println!("load average at end: {}", loadavg());
    println!(
        "{:<8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>13}",
        "pacer", "min", "mean", "P99", "max", "stddev", "trans/s", "over 1 ms"
    );
    let mut stats = Vec::new();
    for (&run, lat) in runs.iter().zip(&pooled) {
        let s = LatencyStats::from_latencies(lat);
        let total: f64 = lat.iter().map(|d| d.as_secs_f64()).sum();
        // The quantum's throttles and the machine's scheduling hiccups.
        let slow = lat.iter().filter(|&&l| l > mptun_time::Duration::from_millis(1)).count();
        println!(
            "{:<8} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.0} {:>13}",
            name(run),
            s.min_us,
            s.mean_us,
            s.p99_us,
            s.max_us,
            s.stddev_us,
            s.transactions as f64 / total.max(1e-9),
            slow
        );
        stats.push((run, s));
    }
    let get = |k: Option<PacerKind>| stats.iter().find(|(p, _)| *p == k).map(|(_, s)| s);
    if let (Some(q), Some(e)) = (get(Some(PacerKind::Quantum)), get(Some(PacerKind::Edt))) {
        println!(
            "ratio quantum / edt: P99 {:.1}x, max {:.1}x, mean {:.2}x (goal: P99 and max >= 10x)",
            q.p99_us / e.p99_us,
            q.max_us / e.max_us,
            q.mean_us / e.mean_us
        );
    }
    for other in [Some(PacerKind::None), None] {
        if let (Some(x), Some(e)) = (get(other), get(Some(PacerKind::Edt))) {
            println!(
                "ratio {} / edt: P99 {:.2}x, max {:.2}x, mean {:.2}x",
                name(other),
                x.p99_us / e.p99_us,
                x.max_us / e.max_us,
                x.mean_us / e.mean_us
            );
        }
    }
}
