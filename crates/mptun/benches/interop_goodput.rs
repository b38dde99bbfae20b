//! Goodput on unconstrained veth paths: mptun ↔ kernel against kernel ↔
//! kernel MPTCP, on the same two-path topology (`netns-scripts/topo.sh up
//! --paths 2 --kernel-mptcp`), in one run, with their ratio.
//!
//! `cargo bench -p mptun --bench interop_goodput` (root). Environment:
//! `MPTUN_BENCH_MIB` (bytes per direction, default 512), `MPTUN_BENCH_ROUNDS`
//! (default 3), `MPTUN_BENCH_PCAP` (a file prefix: capture the mptun runs),
//! `MPTUN_BENCH_NOPACE` (mptun without pacing, for diagnosis),
//! `MPTUN_BENCH_SNDBUF_MIB` (mptun's send buffer limit, default 4 MiB as
//! Linux's `tcp_wmem`, for diagnosis: whether a run is bound by send buffer
//! over round trip),
//! `MPTUN_BENCH_NSTAT` (print mptun's counters and the kernel peer's
//! `nstat` delta after each mptun run, for diagnosis), `MPTUN_BENCH_ONLY`
//! (run only the runs whose name contains it, e.g. `mptun TCP`, for a
//! profile of one; the others report 0), `MPTUN_BENCH_CC` (the kernel's
//! congestion control on every kernel socket of the bench, e.g. `cubic`;
//! default: the host's `net.ipv4.tcp_congestion_control`, printed; mptun
//! runs the same one when it has it, reno, cubic or bbr, else CUBIC),
//! `MPTUN_BENCH_MPTUN_CC` (mptun's controller instead),
//! `MPTUN_BENCH_WRITER` (`0`: mptun without writer threads, `1`: with,
//! `ab`: both, as separate interleaved runs; default: the stack's default),
//! `MPTUN_BENCH_ZC` (the same for `StackBuilder::zero_copy_send`; `ab`
//! adds "+zero copy" rows), `MPTUN_BENCH_READ` (`1`: mptun's download read
//! with `read_chunk`, the zero-copy read, instead of `read`; `ab` adds
//! "+chunk read" rows), `MPTUN_BENCH_WRITE` (`1`: mptun's upload written
//! with `write_chunk`, the zero-copy write, instead of `write_all`; `ab`
//! adds "+chunk write" rows; the chunks are clones of one `Bytes`, as the
//! other rows write one buffer again and again). One of the four may be
//! `ab` at a time.
//! `MPTUN_BENCH_RT` (the tokio runtime of the mptun runs' application
//! task and stack driver: `current`, the default, one thread for both as
//! in the CLI's `send` and `serve`; `one`, a multi-thread runtime with one
//! worker, the application on the bench's thread; `two`, two workers),
//! to see what wake-ups between threads cost.
//!
//! Each run also reports the host's steal time (`/proc/stat`): the share of
//! the CPUs the hypervisor gave to other guests during the run. On a shared
//! VM it can be large under load, and a run with a lot of it measures the
//! neighbours as much as the stack.
//!
//! The kernel's congestion control decides the baseline: BBR without the fq
//! qdisc paces with its own timers and holds kernel ↔ kernel far below what
//! CUBIC moves on the same paths. Every kernel socket gets the same one, set
//! explicitly and read back, so a ratio names what it was measured against.
//!
//! The runs are interleaved over the rounds and each is reported as best and
//! median of its rounds: on a shared two-core machine a concurrent build
//! steals the CPU from whichever run happens to be going, and interleaving
//! spreads that over all of them instead of biasing one.
//!
//! Each run is one connection from the client namespace to a kernel
//! listener in the server namespace (MPTCP for the MPTCP runs, plain TCP for
//! the TCP runs): first the client uploads N bytes (goodput timed at the
//! receiver, first byte to end of stream), then the server sends N bytes
//! back (timed at the client). mptun runs as the client behind one TUN per
//! path, once offering MPTCP and once as plain TCP; the kernel client runs
//! with `IPPROTO_MPTCP` (its `subflow` endpoint opens the second subflow over
//! path 2) and with plain TCP for reference.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mptun::{MptcpStream, Stack};
use mptun_io::{run_in_netns, spawn_tun_in_netns, PacketIo, TunConfig};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "support/topo.rs"]
mod topo;
use topo::Topo;

/// As the `mptun` CLI (see its `main.rs`): glibc's malloc hands the receive
/// path's 64 KiB buffers back to the kernel and faults them in again,
/// zeroed, where mimalloc keeps them.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const IPPROTO_MPTCP: i32 = 262;
const CHUNK: usize = 256 * 1024;
const OCTET: u8 = 66;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Tcp,
    Mptcp,
}

fn socket(addr: SocketAddr, proto: Proto) -> io::Result<Socket> {
    let p = if proto == Proto::Mptcp { Protocol::from(IPPROTO_MPTCP) } else { Protocol::TCP };
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(p))?;
    set_cc(&s)?;
    Ok(s)
}

/// The kernel congestion control every kernel socket of the run uses:
/// `MPTUN_BENCH_CC`, or the host's default (which a namespace inherits at
/// its creation).
fn kernel_cc() -> &'static str {
    static CC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CC.get_or_init(|| {
        std::env::var("MPTUN_BENCH_CC").unwrap_or_else(|_| {
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "cubic".into())
        })
    })
}

/// mptun's controller: `MPTUN_BENCH_MPTUN_CC`, else the kernel's when mptun
/// has it (so BBR meets BBR), else CUBIC.
fn mptun_cc() -> mptun_cc::Algorithm {
    let name = std::env::var("MPTUN_BENCH_MPTUN_CC").unwrap_or_else(|_| kernel_cc().to_string());
    match name.parse::<mptun_cc::Algorithm>() {
        Ok(a) if !a.is_coupled() || std::env::var("MPTUN_BENCH_MPTUN_CC").is_ok() => a,
        _ => mptun_cc::Algorithm::Cubic,
    }
}

/// Sets [`kernel_cc`] on a kernel socket (a listener's accepted sockets
/// inherit it; an MPTCP socket passes it to its subflows).
fn set_cc(s: &Socket) -> io::Result<()> {
    s.set_tcp_congestion(kernel_cc().as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("TCP_CONGESTION {}: {e}", kernel_cc())))
}

/// The congestion control a connected kernel socket reports.
fn cc_of(s: &TcpStream) -> String {
    socket2::SockRef::from(s)
        .tcp_congestion()
        .map(|v| String::from_utf8_lossy(&v).trim_end_matches('\0').to_string())
        .unwrap_or_else(|e| format!("? ({e})"))
}

fn listen(ns: &str, addr: SocketAddr, proto: Proto) -> io::Result<TcpListener> {
    run_in_netns(ns, || {
        let s = socket(addr, proto)?;
        s.set_reuse_address(true)?;
        s.bind(&addr.into())?;
        s.listen(4)?;
        Ok(TcpListener::from(s))
    })?
}

/// Reads to end of stream; returns bytes and time from first byte to EOF.
fn drain(s: &mut TcpStream) -> io::Result<(u64, Duration)> {
    let mut buf = vec![0u8; CHUNK];
    let mut n = 0u64;
    let mut start = None;
    loop {
        let k = s.read(&mut buf)?;
        if k == 0 {
            break;
        }
        start.get_or_insert_with(Instant::now);
        n += k as u64;
    }
    Ok((n, start.map_or(Duration::ZERO, |t| t.elapsed())))
}

fn blast(s: &mut TcpStream, bytes: u64, buf: &[u8]) -> io::Result<()> {
    let mut left = bytes;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        s.write_all(&buf[..k])?;
        left -= k as u64;
    }
    Ok(())
}

/// The kernel server: receive the upload (timed), send the download, close.
fn server_thread(l: TcpListener, bytes: u64, buf: Arc<Vec<u8>>) -> std::thread::JoinHandle<io::Result<Duration>> {
    std::thread::spawn(move || {
        let (mut s, _) = l.accept()?;
        // An accepted MPTCP socket does not take its listener's choice.
        set_cc(&socket2::SockRef::from(&s))?;
        if cc_of(&s) != kernel_cc() {
            return Err(io::Error::other(format!("server socket runs {}, not {}", cc_of(&s), kernel_cc())));
        }
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        let (n, t) = drain(&mut s)?;
        if n != bytes {
            return Err(io::Error::other(format!("upload short: {n} of {bytes}")));
        }
        blast(&mut s, bytes, &buf)?;
        s.shutdown(Shutdown::Write)?;
        let _ = s.read(&mut [0u8; 1]);
        Ok(t)
    })
}

struct Result {
    name: &'static str,
    up: f64,
    down: f64,
    /// CPU seconds (user + system, this process: both ends of the
    /// connection, mptun's stack or the kernel's working in its threads)
    /// per GiB moved, both directions together.
    cpu_per_gib: f64,
    /// Host steal time over the run, percent of all CPU time.
    steal: f64,
    note: String,
}

/// The host's total and stolen CPU time so far (`/proc/stat` `cpu` line, in
/// clock ticks).
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> =
        stat.lines().next().unwrap_or("").split_whitespace().skip(1).take(8).filter_map(|x| x.parse().ok()).collect();
    (v.iter().sum(), v.get(7).copied().unwrap_or(0))
}

/// Steal time since `t0` (from [`cpu_ticks`]), percent.
fn steal_since(t0: (u64, u64)) -> f64 {
    let t1 = cpu_ticks();
    let total = t1.0.saturating_sub(t0.0).max(1);
    100.0 * t1.1.saturating_sub(t0.1) as f64 / total as f64
}

/// User plus system CPU seconds of this process so far (`getrusage`).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn per_gib(cpu: f64, bytes: u64) -> f64 {
    cpu / (2.0 * bytes as f64 / (1u64 << 30) as f64)
}

fn gbps(bytes: u64, t: Duration) -> f64 {
    bytes as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9
}

fn kernel_run(topo: &Topo, name: &'static str, proto: Proto, port: u16, bytes: u64, buf: &Arc<Vec<u8>>) -> Result {
    let cpu0 = cpu_seconds();
    let ticks0 = cpu_ticks();
    let server = SocketAddr::new(IpAddr::from([10, OCTET, 1, 2]), port);
    let l = listen(&topo.srv(), server, proto).expect("listen");
    let srv = server_thread(l, bytes, buf.clone());
    let mut c = run_in_netns(&topo.cli(), || -> io::Result<TcpStream> {
        let s = socket(server, proto)?;
        s.connect(&server.into())?;
        Ok(TcpStream::from(s))
    })
    .unwrap()
    .expect("connect");
    assert_eq!(cc_of(&c), kernel_cc(), "the kernel client's congestion control");
    blast(&mut c, bytes, buf).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let (n, down_t) = drain(&mut c).unwrap();
    assert_eq!(n, bytes);
    let up_t = srv.join().unwrap().unwrap();
    let ns = nstat(&topo.srv());
    Result {
        name,
        up: gbps(bytes, up_t),
        down: gbps(bytes, down_t),
        cpu_per_gib: per_gib(cpu_seconds() - cpu0, bytes),
        steal: steal_since(ticks0),
        note: format!("server MPJoinAckRx total {}", ns.unwrap_or(0)),
    }
}

fn nstat(ns: &str) -> Option<u64> {
    run_in_netns(ns, mptun_io::netstat::read).ok()?.ok()?.get("MPTcpExtMPJoinAckRx").copied()
}

/// Stack options of one mptun run (`None`: the stack's default).
#[derive(Clone, Copy)]
struct Variant {
    writer: Option<bool>,
    zero_copy: Option<bool>,
    chunk_read: Option<bool>,
    chunk_write: Option<bool>,
}

#[allow(clippy::too_many_arguments)]
async fn mptun_run(
    topo: &Topo,
    name: &'static str,
    mptcp: bool,
    port: u16,
    bytes: u64,
    buf: &Arc<Vec<u8>>,
    tag: &str,
    variant: Variant,
) -> io::Result<Result> {
    let cpu0 = cpu_seconds();
    let ticks0 = cpu_ticks();
    let nstat_diag = std::env::var("MPTUN_BENCH_NSTAT").is_ok();
    let peer0 = if nstat_diag { run_in_netns(&topo.srv(), mptun_io::netstat::read)?? } else { Default::default() };
    let server = SocketAddr::new(IpAddr::from([10, OCTET, 1, 2]), port);
    // Like against like: plain TCP against the kernel's plain TCP (a kernel
    // MPTCP listener falling back costs its sender the MPTCP socket layer).
    let l = listen(&topo.srv(), server, if mptcp { Proto::Mptcp } else { Proto::Tcp })?;
    let srv = server_thread(l, bytes, buf.clone());
    let mut b = Stack::builder();
    for i in 1..=2u8 {
        let cfg = TunConfig::new(&format!("{tag}{i}"))
            .address(IpAddr::from([10, OCTET, 100 + i, 1]), 24)?
            .tx_queue_len(10_000);
        let tun: Arc<dyn PacketIo> = Arc::new(spawn_tun_in_netns(&topo.cli(), &cfg)?);
        b = b.path(IpAddr::from([10, OCTET, 100 + i, 2]), tun);
    }
    if let Ok(p) = std::env::var("MPTUN_BENCH_PCAP") {
        b = b.pcap(format!("{p}.{tag}"));
    }
    if let Some(on) = variant.writer {
        b = b.writer_threads(on);
    }
    if let Some(on) = variant.zero_copy {
        b = b.zero_copy_send(on);
    }
    let stack = b.build()?;
    let mut opts = stack.stream_options().mptcp(mptcp);
    opts.config_mut().tcp.congestion_control = mptun_cc();
    if std::env::var("MPTUN_BENCH_NOPACE").is_ok() {
        opts.config_mut().tcp.pacer = mptun_cc::PacerKind::None;
    }
    if let Some(m) = std::env::var("MPTUN_BENCH_SNDBUF_MIB").ok().and_then(|v| v.parse::<usize>().ok()) {
        opts.config_mut().tcp.send_buffer = mptun_proto::tcp::BufferSize::Auto { initial: 64 * 1024, max: m << 20 };
    }
    let s = tokio::time::timeout(Duration::from_secs(10), MptcpStream::connect_with(&stack, server, opts))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect"))??;
    let is_mptcp = s.info()?.is_mptcp();
    let (mut r, mut w) = s.into_split();
    let mut left = bytes;
    let mut sample = String::new();
    let chunk = bytes::Bytes::from(buf.to_vec());
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        if variant.chunk_write == Some(true) {
            w.write_chunk(chunk.slice(..k)).await?;
        } else {
            w.write_all(&buf[..k]).await?;
        }
        left -= k as u64;
        if sample.is_empty() && left < bytes / 2 {
            // Mid-upload: what limits the sender (cwnd, rtt, pacing, peer window)?
            if let Some(c) = stack.connections().first() {
                for sf in &c.conn.subflows {
                    let t = &sf.tcp;
                    sample += &format!(
                        " [{} cwnd={} srtt={:?} pacing={:.2}Gb/s snd_wnd={} inflight={} sndbuf={}]",
                        sf.local.ip(),
                        t.cwnd,
                        t.srtt,
                        t.pacing_rate as f64 * 8e-9,
                        t.snd_wnd,
                        t.packets_out,
                        t.send_buffer
                    );
                }
            }
        }
    }
    let subflows = stack.connections().first().map_or(0, |c| c.conn.subflows.iter().filter(|s| s.joined).count());
    w.shutdown().await?;
    let mut rb = vec![0u8; CHUNK];
    let mut n = 0u64;
    let mut start = None;
    let stalled = |_| io::Error::new(io::ErrorKind::TimedOut, "download stalled");
    loop {
        // The byte count is the check either way: the kernel client's
        // `read` delivers the bytes into its memory once, and so does
        // mptun's device read under `read_chunk`.
        let k = if variant.chunk_read == Some(true) {
            let p = tokio::time::timeout(Duration::from_secs(30), r.read_chunk(CHUNK)).await.map_err(stalled)??;
            p.map_or(0, |p| p.len())
        } else {
            tokio::time::timeout(Duration::from_secs(30), r.read(&mut rb)).await.map_err(stalled)??
        };
        if k == 0 {
            break;
        }
        start.get_or_insert_with(Instant::now);
        n += k as u64;
    }
    let down_t = start.map_or(Duration::ZERO, |t| t.elapsed());
    if n != bytes {
        if nstat_diag {
            println!("{name}: short download; mptun counters:\n{}", stack.counters().to_nstat());
            for c in stack.connections() {
                println!("{name}: connection {:?}", c.conn);
            }
        }
        return Err(io::Error::other(format!("download short: {n} of {bytes}")));
    }
    let up_t =
        tokio::task::spawn_blocking(move || srv.join()).await?.map_err(|_| io::Error::other("server panicked"))??;
    // What the kernel saw arrive on the TUNs: fewer packets than we wrote
    // means our writes were coalesced into TSO super-packets.
    let mut kernel_rx = 0u64;
    for i in 1..=2u8 {
        let out = mptun_io::netns::ip(&topo.cli(), ["-s", "-o", "link", "show", &format!("{tag}{i}")])?;
        if let Some(after) = out.split("RX:").nth(1) {
            let nums: Vec<u64> = after.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            kernel_rx += nums.get(1).copied().unwrap_or(0);
        }
    }
    let rs = stack.runtime_stats();
    let c = stack.counters();
    if nstat_diag {
        let peer1 = run_in_netns(&topo.srv(), mptun_io::netstat::read)??;
        let delta: Vec<String> = peer1
            .iter()
            .filter_map(|(k, v)| {
                let d = v.saturating_sub(peer0.get(k).copied().unwrap_or(0));
                (d != 0 && (k.starts_with("Tcp") || k.starts_with("MPTcp"))).then(|| format!("{k}={d}"))
            })
            .collect();
        println!("{name}: mptun counters:\n{}", c.to_nstat());
        println!("{name}: kernel peer nstat delta: {}", delta.join(" "));
    }
    // Until its driver has stopped the stack holds its TUN devices, and on
    // a current-thread runtime nothing polls that driver once this
    // `block_on` returns: end it here.
    drop((r, w));
    stack.shutdown().await;
    Ok(Result {
        name,
        up: gbps(bytes, up_t),
        down: gbps(bytes, down_t),
        cpu_per_gib: per_gib(cpu_seconds() - cpu0, bytes),
        steal: steal_since(ticks0),
        note: format!(
            "mptcp={is_mptcp} subflows={subflows} retrans={} tun_kernel_rx={kernel_rx} tx_packets={} tx_segments={} tx_gathered={} tx_tail_copied={} tx_batches={} pkts/batch={:.1} rx_packets={} rx_gro={} polls={} timer_wakeups={} app_wakeups={} iterations={}{sample}",
            c.tcp_retrans_segs,
            rs.tx_packets,
            rs.tx_segments,
            rs.tx_gathered,
            rs.tx_tail_copied,
            rs.tx_batches,
            rs.tx_packets as f64 / rs.tx_batches.max(1) as f64,
            rs.rx_packets,
            rs.rx_gro_packets,
            rs.polls,
            rs.timer_wakeups,
            rs.app_wakeups,
            rs.iterations
        ),
    })
}

/// Waits until a run's TUN devices are gone. Closing a TUN unregisters
/// it in the background, one device after the other; the next run's
/// devices take the same addresses, and while an old one still holds its
/// /24 the kernel routes that path's packets to it: a second subflow's
/// SYN-ACK goes there and the next MPTCP run has one subflow (runs that
/// follow each other closely, as with CUBIC, meet it).
fn wait_gone(topo: &Topo, tag: &str) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let out = mptun_io::netns::ip(&topo.cli(), ["-o", "link", "show"]).unwrap_or_default();
        if !(1..=2u8).any(|i| out.contains(&format!(": {tag}{i}:"))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("{tag}: TUN devices still present after 5 s");
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if mptun_io::testutil::require_netns().is_some() {
        return;
    }
    let mib: u64 = std::env::var("MPTUN_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(512);
    let bytes = mib << 20;
    let prefix = mptun_io::testutil::unique_name("pfb", 12);
    let topo =
        Topo::up(&prefix, &["--paths", "2", "--octet", &OCTET.to_string(), "--kernel-mptcp"]).expect("topo.sh up");
    let buf = Arc::new(mptun::pattern::Pattern::bytes(0x1234_5678_9abc_def1, CHUNK));
    println!(
        "interop_goodput: {mib} MiB per direction, 2 unconstrained veth paths (topo.sh --kernel-mptcp), kernel congestion control {} ({}), mptun's {}",
        kernel_cc(),
        if std::env::var("MPTUN_BENCH_CC").is_ok() { "MPTUN_BENCH_CC" } else { "the host's default" },
        mptun_cc()
    );
    let rounds: usize = std::env::var("MPTUN_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    // The A/B knobs: `Some(false)` for the base rows when `ab`.
    let knob = |var: &str| {
        let v = std::env::var(var).ok();
        let on = match v.as_deref() {
            Some("0") | Some("ab") => Some(false),
            Some("1") => Some(true),
            _ => None,
        };
        (on, v.as_deref() == Some("ab"))
    };
    let (writer, writer_ab) = knob("MPTUN_BENCH_WRITER");
    let (zero_copy, zc_ab) = knob("MPTUN_BENCH_ZC");
    let (chunk_read, read_ab) = knob("MPTUN_BENCH_READ");
    let (chunk_write, write_ab) = knob("MPTUN_BENCH_WRITE");
    assert!(
        [writer_ab, zc_ab, read_ab, write_ab].iter().filter(|&&x| x).count() <= 1,
        "only one of MPTUN_BENCH_WRITER, MPTUN_BENCH_ZC, MPTUN_BENCH_READ and MPTUN_BENCH_WRITE may be ab"
    );
    let base = Variant { writer, zero_copy, chunk_read, chunk_write };
    let rt_kind = std::env::var("MPTUN_BENCH_RT").unwrap_or_else(|_| "current".into());
    let rt = match rt_kind.as_str() {
        "current" => tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
        "one" => tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap(),
        "two" => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap(),
        other => panic!("MPTUN_BENCH_RT: {other}? (current, one or two)"),
    };
    println!("mptun's application and stack driver on the tokio runtime {rt_kind:?} (MPTUN_BENCH_RT)");
    let mut all: Vec<Vec<Result>> = Vec::new();
    for round in 0..rounds {
        let port = 5400 + (round as u16) * 10;
        let only = std::env::var("MPTUN_BENCH_ONLY").ok();
        let skip = |name: &'static str| {
            only.as_deref().is_some_and(|o| !name.contains(o)).then(|| Result {
                name,
                up: 0.0,
                down: 0.0,
                cpu_per_gib: 0.0,
                steal: 0.0,
                note: "skipped (MPTUN_BENCH_ONLY)".into(),
            })
        };
        let mut r = Vec::new();
        for (name, proto, p) in [
            ("kernel MPTCP <-> kernel MPTCP", Proto::Mptcp, port + 1),
            ("kernel TCP   <-> kernel TCP", Proto::Tcp, port + 2),
        ] {
            r.push(skip(name).unwrap_or_else(|| kernel_run(&topo, name, proto, p, bytes, &buf)));
        }
        let mut runs = vec![
            ("mptun MPTCP  <-> kernel MPTCP", true, port + 3, format!("mb{round}m"), base),
            ("mptun TCP    <-> kernel TCP", false, port + 4, format!("mb{round}t"), base),
        ];
        if writer_ab {
            let v = Variant { writer: Some(true), ..base };
            runs.push(("mptun MPTCP +tx thread", true, port + 5, format!("mb{round}mw"), v));
            runs.push(("mptun TCP   +tx thread", false, port + 6, format!("mb{round}tw"), v));
        }
        if read_ab {
            let v = Variant { chunk_read: Some(true), ..base };
            runs.push(("mptun MPTCP +chunk read", true, port + 5, format!("mb{round}mr"), v));
            runs.push(("mptun TCP   +chunk read", false, port + 6, format!("mb{round}tr"), v));
        }
        if write_ab {
            let v = Variant { chunk_write: Some(true), ..base };
            runs.push(("mptun MPTCP +chunk write", true, port + 5, format!("mb{round}mc"), v));
            runs.push(("mptun TCP   +chunk write", false, port + 6, format!("mb{round}tc"), v));
        }
        if zc_ab {
            let v = Variant { zero_copy: Some(true), ..base };
            runs.push(("mptun MPTCP +zero copy", true, port + 5, format!("mb{round}mz"), v));
            runs.push(("mptun TCP   +zero copy", false, port + 6, format!("mb{round}tz"), v));
        }
        for (name, mptcp, p, tag, variant) in runs {
            if let Some(x) = skip(name) {
                r.push(x);
                continue;
            }
            match rt.block_on(mptun_run(&topo, name, mptcp, p, bytes, &buf, &tag, variant)) {
                Ok(x) => r.push(x),
                Err(e) => {
                    println!("{name}: FAILED: {e}");
                    r.push(Result {
                        name,
                        up: 0.0,
                        down: 0.0,
                        cpu_per_gib: 0.0,
                        steal: 0.0,
                        note: format!("FAILED: {e}"),
                    });
                }
            }
            wait_gone(&topo, &tag);
        }
        for x in &r {
            println!(
                "round {round}: {:<32} up {:>6.2} down {:>6.2} Gbit/s  cpu {:.2} s/GiB  steal {:>4.1} %  {}",
                x.name, x.up, x.down, x.cpu_per_gib, x.steal, x.note
            );
        }
        all.push(r);
    }
    drop(rt);
    let stat = |i: usize, f: fn(&Result) -> f64| {
        let mut v: Vec<f64> = all.iter().map(|r| f(&r[i])).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() - 1], v[v.len() / 2])
    };
    let mut results = Vec::new();
    println!(
        "{:<32} {:>16} {:>16} {:>14} {:>10}",
        "run (best / median)", "up Gbit/s", "down Gbit/s", "CPU s/GiB med", "steal med"
    );
    for (i, first) in all[0].iter().enumerate() {
        let (ub, um) = stat(i, |r| r.up);
        let (db, dm) = stat(i, |r| r.down);
        let (_, cm) = stat(i, |r| r.cpu_per_gib);
        let (_, sm) = stat(i, |r| r.steal);
        println!("{:<32} {:>7.2} / {:>6.2} {:>7.2} / {:>6.2} {:>14.2} {:>8.1} %", first.name, ub, um, db, dm, cm, sm);
        results.push(Result { name: first.name, up: um, down: dm, cpu_per_gib: cm, steal: sm, note: String::new() });
    }
    println!("ratios below use the medians");
    // Each mptun run against the kernel run of its own protocol, with its
    // goals: goodput (MPTCP >= 1.0 of the kernel's MPTCP, plain TCP >= 0.9
    // of the kernel's TCP) and CPU per GiB (<= 1.2 of the kernel's, both).
    let mut pairs = vec![(2, 0, 1.0), (3, 1, 0.9)];
    if writer_ab || zc_ab || read_ab || write_ab {
        pairs.extend([(4, 0, 1.0), (5, 1, 0.9)]);
    }
    for (mine, theirs, goal) in pairs {
        let (m, k) = (&results[mine], &results[theirs]);
        println!(
            "ratio {} / {}: up {:.2}, down {:.2} (goal >= {goal:.1}), CPU per GiB {:.2} (goal <= 1.2)",
            m.name.split("<->").next().unwrap_or("").trim(),
            k.name.split("<->").next().unwrap_or("").trim(),
            m.up / k.up,
            m.down / k.down,
            m.cpu_per_gib / k.cpu_per_gib
        );
    }
}
