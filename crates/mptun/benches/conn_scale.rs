//! Connection scale over TUN: mptun against the kernel's
//! TCP at 1, 10, 100, 1,000 and 10,000 concurrent connections, the kernel
//! measured beside it in the same run.
//!
//! `cargo bench -p mptun --bench conn_scale` (root; without root it prints
//! why and exits 0; it exits 1 if a run failed, after deleting its
//! namespaces). Environment: `MPTUN_SCALE_N` (connection counts, default
//! `1,10,100,1000,10000`), `MPTUN_SCALE_STACKS` (default `kernel,mptun`),
//! `MPTUN_SCALE_MBIT` (the fixed total rate all connections move together,
//! default 1000), `MPTUN_SCALE_SECS` (the measured window of the active
//! phase, default 5), `MPTUN_SCALE_WARMUP` (seconds of the active phase
//! before the window, at least; default 2), `MPTUN_SCALE_CRR_SECS` (the
//! connect/request/response/close loop, default 3), `MPTUN_SCALE_RR_US`
//! (the latency probe's spacing, default 1000), `MPTUN_SCALE_CONNECTS`
//! (connects in flight while the N are opened, default 128),
//! `MPTUN_SCALE_CC` (congestion control of both stacks, default `cubic`),
//! `MPTUN_SCALE_MPTCP` (`1`: both clients speak MPTCP to an
//! `IPPROTO_MPTCP` listener, one path; default plain TCP),
//! `MPTUN_SCALE_ROUNDS` (each (N, stack) run that many times, interleaved;
//! the table takes medians), `MPTUN_SCALE_VERBOSE` (`1`, for diagnosis: the
//! slab caches and heap block sizes that moved per connection, CPU per
//! thread, `nstat` drops and losses in both namespaces, mptun's counters
//! and runtime counters per MiB, its connections' median cwnd, srtt and
//! pacing rate).
//!
//! Topology: `netns-scripts/topo.sh up --paths 1` (one routed veth between
//! a client and a server namespace, MTU 1500, no rate limit). The server is
//! this binary again, started as a child process inside the server
//! namespace (so that its CPU and heap are not the client's): kernel TCP
//! sockets on a single-threaded tokio runtime, a sink on four ports (reads
//! and counts, the bulk connections spread over them), an echo port (the
//! latency probe) and a CRR port (read 100 bytes, answer 100, close). The
//! client runs on one thread in the client namespace (a current-thread
//! tokio runtime, as the CLI's `send`), either with kernel sockets from the
//! veth's address (`kernel`) or with an mptun `Stack` behind a TUN device
//! (`mptun`, the stack's defaults: writer thread, GRO, zero-copy send).
//! Both use the same congestion control and `TCP_NODELAY`.
//!
//! Each run (one N, one stack):
//!
//! 1. The server starts; the client opens the probe connection, makes a
//!    burst of 256 connect-request-close exchanges at once (so that buffers
//!    a stack keeps for bursts have their size before the baseline), and
//!    reads its heap (`H0`) and `/proc/slabinfo`.
//! 2. **Setup**: N connections, `MPTUN_SCALE_CONNECTS` in flight: N over
//!    the time they took.
//! 3. **Idle**, 1 s after the last handshake: heap per connection,
//!    `(H - H0) / N`, where H is the live bytes of this process's allocator
//!    (a counting wrapper around mimalloc, the CLI's allocator): everything
//!    mptun keeps per connection, and for the kernel client tokio's
//!    registration. The kernel's own memory for its sockets comes from
//!    `/proc/slabinfo` (`active_objs x objsize` of the caches a socket
//!    allocates from, see `is_socket_cache`), which also holds the server's
//!    sockets: the kernel client's share is the kernel run's delta less the
//!    mptun run's (the same server sockets; mptun's live in userspace),
//!    shown from 1,000 connections on (below, other processes' slab churn
//!    is larger). `ss -tm`'s skmem of the client sockets (r+w+f+o+bl) is
//!    added: for idle sockets it is 0, the socket structures are what they
//!    cost.
//! 4. **CRR**, like netperf's `TCP_CRR`, while the N stay open: one at a
//!    time, connect, write 100 bytes, read the 100-byte answer, read the
//!    server's FIN, close. Transactions per second, and the heap after them
//!    per transaction (a leak would show). The server closes first and
//!    keeps no TIME_WAIT (`tcp_max_tw_buckets=0` in both namespaces, so that
//!    ports recycled by either client never meet an old TIME_WAIT and no
//!    TIME_WAIT of one run expires into the slab figures of the next).
//! 5. **Active**: each of the N writes at `MBIT / N` (a token bucket, 16 KiB
//!    writes, spread evenly over time), for the warm-up (at least 8 writes
//!    of every connection: 10.5 s at 10,000, whose first writes still open
//!    their windows) and then the window. Over the window: the bytes the
//!    server received, the packets on the veth (both directions, a GSO
//!    packet counts one), the host's steal time, the CPU seconds
//!    (`getrusage`, user + system) of the client process and of the server
//!    process, per GiB received; the heap per connection (mean of samples
//!    every 250 ms, less `H0`; it includes the writer task each connection
//!    has, the same for both stacks); for the kernel, the client sockets'
//!    skmem at the end of the window is added to its idle kernel figure.
//!    Meanwhile the probe connection does a 100-byte request/response every
//!    `MPTUN_SCALE_RR_US`: p50/p99 latency, write to the whole answer read.
//!
//! What the CPU figures hold: the client process's CPU is the stack under
//! test, its application and the kernel work its system calls do (a write
//! into the TUN, or the kernel client's `send`, carries the forwarding and
//! the server's TCP receive on the writer's CPU); the server's is its reads
//! and the ACKs it sends, which for the kernel client includes the client's
//! ACK processing (softirq on the server's CPU). So the client column
//! compares mptun with itself across N, and client + server compares the
//! two stacks.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write as _};
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpStream, PacketIo, Stack, StreamOptions};
use mptun_io::{spawn_tun_in_netns, TunConfig};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio::time::Instant;

#[path = "support/topo.rs"]
mod topo;
use topo::Topo;

/// mimalloc (the CLI's allocator), counting the bytes live, in all and per
/// power-of-two block size (for `MPTUN_SCALE_VERBOSE`: what a connection's
/// heap is made of).
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static CLASSES: [AtomicUsize; 33] = [const { AtomicUsize::new(0) }; 33];
static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn class(size: usize) -> usize {
    (usize::BITS - size.leading_zeros()).min(32) as usize
}

fn classes() -> [usize; 33] {
    std::array::from_fn(|i| CLASSES[i].load(Relaxed))
}

// SAFETY: every call is forwarded to mimalloc with the same arguments; the
// counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { INNER.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Relaxed);
            CLASSES[class(l.size())].fetch_add(l.size(), Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { INNER.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Relaxed);
            CLASSES[class(l.size())].fetch_add(l.size(), Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { INNER.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
        CLASSES[class(l.size())].fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let q = unsafe { INNER.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new, Relaxed);
            LIVE.fetch_sub(l.size(), Relaxed);
            CLASSES[class(new)].fetch_add(new, Relaxed);
            CLASSES[class(l.size())].fetch_sub(l.size(), Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const OCTET: u8 = 88;
const IPPROTO_MPTCP: i32 = 262;
/// The request and answer of the probe and of CRR (netperf `-r 100,100`).
const MSG: usize = 100;
/// A bulk connection's write.
const CHUNK: u64 = 16 * 1024;
/// The longest write a connection that fell behind makes to catch up.
const MAX_WRITE: usize = 1 << 20;
/// Writes of every bulk connection before the measured window, at least.
const WARM_WRITES: f64 = 8.0;
/// Connections of the warm-up burst (see `run_phases`).
const WARM_BURST: usize = 256;
/// Sink ports the bulk connections are spread over.
const SINK_PORTS: u16 = 4;
/// The server child's marker: the namespace it enters.
const SERVE_ENV: &str = "MPTUN_SCALE_SERVE";

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn live() -> usize {
    LIVE.load(Relaxed)
}

/// User plus system CPU seconds of this process (`getrusage`).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU seconds (user, system) of each of this process's threads by name
/// (`/proc/self/task/*/stat`), summed over threads of the same name.
fn thread_cpu() -> HashMap<String, (f64, f64)> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut out: HashMap<String, (f64, f64)> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return out };
    for e in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let name = stat[open + 1..close].to_string();
        let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        // Fields 14 and 15 (utime, stime), counted from the state (field 3).
        let (u, s) = (f.get(11).and_then(|v| v.parse::<f64>().ok()), f.get(12).and_then(|v| v.parse::<f64>().ok()));
        let x = out.entry(name).or_default();
        x.0 += u.unwrap_or(0.0) / hz;
        x.1 += s.unwrap_or(0.0) / hz;
    }
    out
}

/// The client veth's (TX, RX) packets: GSO packets count one.
fn veth_packets(ns: &str) -> (u64, u64) {
    let out = mptun_io::netns::ip(ns, ["-s", "-o", "link", "show", "c1"]).unwrap_or_default();
    let nums = |tag: &str| -> u64 {
        out.split(tag).nth(1).and_then(|a| a.split_whitespace().filter_map(|w| w.parse().ok()).nth(1)).unwrap_or(0)
    };
    (nums("TX:"), nums("RX:"))
}

/// `nstat` counters of namespace `ns`.
fn netstat(ns: &str) -> std::collections::BTreeMap<String, u64> {
    mptun_io::run_in_netns(ns, mptun_io::netstat::read).ok().and_then(|r| r.ok()).unwrap_or_default()
}

/// What moved between two `nstat` snapshots, among the counters that tell
/// of drops, losses and pressure.
fn netstat_delta(a: &std::collections::BTreeMap<String, u64>, b: &std::collections::BTreeMap<String, u64>) -> String {
    let keys = ["Drop", "Overflow", "Prune", "Collapse", "Retrans", "Timeout", "Memory", "Loss", "Errors", "Discard"];
    b.iter()
        .filter(|(k, _)| keys.iter().any(|w| k.contains(w)))
        .filter_map(|(k, &v)| {
            let d = v.saturating_sub(a.get(k).copied().unwrap_or(0));
            (d > 0).then(|| format!("{k} {d}"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every link of `ns` whose drop counters are not zero (`ip -s link`).
fn link_drops(ns: &str) -> String {
    let out = mptun_io::netns::ip(ns, ["-s", "-o", "link", "show"]).unwrap_or_default();
    out.lines()
        .filter_map(|l| {
            let name = l.split(':').nth(1)?.trim().to_string();
            let num = |tag: &str| -> Vec<u64> {
                l.split(tag)
                    .nth(1)
                    .map(|a| a.split_whitespace().filter_map(|w| w.parse().ok()).take(4).collect())
                    .unwrap_or_default()
            };
            let (rx, tx) = (num("RX:"), num("TX:"));
            let (rd, td) = (rx.get(3).copied().unwrap_or(0), tx.get(3).copied().unwrap_or(0));
            (rd + td > 0).then(|| format!("{name} rx_dropped {rd} tx_dropped {td}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The host's total and stolen CPU time so far (`/proc/stat`'s `cpu` line,
/// clock ticks): a VM's neighbours take the steal, and a run with much of
/// it measures them as much as the stack.
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> =
        stat.lines().next().unwrap_or("").split_whitespace().skip(1).take(8).filter_map(|x| x.parse().ok()).collect();
    (v.iter().sum(), v.get(7).copied().unwrap_or(0))
}

/// Raises `RLIMIT_NOFILE` towards `want` (10,000 kernel sockets in the
/// client, as many in the server child, which inherits it): the hard limit
/// too where the process may (`CAP_SYS_RESOURCE`), else the soft one up to
/// the hard one. Returns the soft limit now in force.
fn raise_nofile(want: u64) -> io::Result<u64> {
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return Err(io::Error::last_os_error());
        }
        if r.rlim_cur >= want {
            return Ok(r.rlim_cur);
        }
        let new = libc::rlimit { rlim_cur: want, rlim_max: r.rlim_max.max(want) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &new) == 0 {
            return Ok(want);
        }
        let new = libc::rlimit { rlim_cur: r.rlim_max, rlim_max: r.rlim_max };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &new) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r.rlim_max)
    }
}

/// Moves the calling thread (and the threads and processes it makes from
/// now on) into namespace `ns`.
fn enter_netns(ns: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = mptun_io::Netns::open(ns)?;
    // SAFETY: setns only reads the fd, which stays open for the call.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn kernel_socket(addr: SocketAddr, mptcp: bool, cc: &str) -> io::Result<Socket> {
    let p = if mptcp { Protocol::from(IPPROTO_MPTCP) } else { Protocol::TCP };
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(p))?;
    s.set_tcp_congestion(cc.as_bytes()).map_err(|e| io::Error::new(e.kind(), format!("TCP_CONGESTION {cc}: {e}")))?;
    s.set_tcp_nodelay(true)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

// ---------------------------------------------------------------------
// The server: a child process in the server namespace.
// ---------------------------------------------------------------------

static SRV_BYTES: AtomicU64 = AtomicU64::new(0);
static SRV_OPEN: AtomicU64 = AtomicU64::new(0);
static SRV_ACCEPTED: AtomicU64 = AtomicU64::new(0);

/// The server's ports from its base: sinks, then echo, then CRR.
fn sink_port(base: u16, i: usize) -> u16 {
    base + (i % SINK_PORTS as usize) as u16
}
fn echo_port(base: u16) -> u16 {
    base + SINK_PORTS
}
fn crr_port(base: u16) -> u16 {
    base + SINK_PORTS + 1
}

/// The child's main: `MPTUN_SCALE_SERVE=NS`, `MPTUN_SCALE_SERVE_ADDR`,
/// `MPTUN_SCALE_SERVE_PORT` (the base), `MPTUN_SCALE_SERVE_CC`,
/// `MPTUN_SCALE_SERVE_MPTCP`. Prints `ready`, then answers each `stats`
/// line on stdin with `bytes accepted open cpu_s`; exits at stdin's end
/// (the parent gone).
fn server_main(ns: &str) {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number, no memory.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    enter_netns(ns).expect("server: enter the namespace");
    let ip: IpAddr = std::env::var("MPTUN_SCALE_SERVE_ADDR").expect("addr").parse().expect("addr");
    let base: u16 = env("MPTUN_SCALE_SERVE_PORT", 0);
    let cc = std::env::var("MPTUN_SCALE_SERVE_CC").unwrap_or_else(|_| "cubic".into());
    let mptcp = std::env::var("MPTUN_SCALE_SERVE_MPTCP").is_ok_and(|v| v == "1");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let listen = |port: u16| -> io::Result<tokio::net::TcpListener> {
            let addr = SocketAddr::new(ip, port);
            let s = kernel_socket(addr, mptcp, &cc)?;
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            s.listen(65_535)?;
            tokio::net::TcpListener::from_std(s.into())
        };
        for i in 0..SINK_PORTS as usize {
            let l = listen(sink_port(base, i)).expect("listen sink");
            tokio::spawn(accept_loop(l, Kind::Sink));
        }
        tokio::spawn(accept_loop(listen(echo_port(base)).expect("listen echo"), Kind::Echo));
        tokio::spawn(accept_loop(listen(crr_port(base)).expect("listen crr"), Kind::Crr));
        std::thread::spawn(|| {
            let stdin = io::stdin();
            let mut line = String::new();
            loop {
                line.clear();
                if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 {
                    std::process::exit(0);
                }
                let mut out = io::stdout().lock();
                let _ = writeln!(
                    out,
                    "{} {} {} {:.6}",
                    SRV_BYTES.load(Relaxed),
                    SRV_ACCEPTED.load(Relaxed),
                    SRV_OPEN.load(Relaxed),
                    cpu_seconds()
                );
                let _ = out.flush();
            }
        });
        println!("ready");
        let _ = io::stdout().flush();
        std::future::pending::<()>().await;
    });
}

#[derive(Clone, Copy)]
enum Kind {
    Sink,
    Echo,
    Crr,
}

async fn accept_loop(l: tokio::net::TcpListener, kind: Kind) {
    loop {
        let Ok((s, _)) = l.accept().await else { continue };
        let _ = s.set_nodelay(true);
        SRV_ACCEPTED.fetch_add(1, Relaxed);
        tokio::spawn(async move {
            SRV_OPEN.fetch_add(1, Relaxed);
            let _ = match kind {
                Kind::Sink => sink(s).await,
                Kind::Echo => echo(s).await,
                Kind::Crr => crr(s).await,
            };
            SRV_OPEN.fetch_sub(1, Relaxed);
        });
    }
}

thread_local! {
    /// The sinks' one read buffer (a single-threaded runtime; no task holds
    /// it across an await), so 10,000 sinks do not each keep 64 KiB.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 256 * 1024]);
}

async fn sink(s: tokio::net::TcpStream) -> io::Result<()> {
    loop {
        s.readable().await?;
        let done = SCRATCH.with(|b| -> io::Result<bool> {
            let mut b = b.borrow_mut();
            loop {
                match s.try_read(&mut b) {
                    Ok(0) => return Ok(true),
                    Ok(n) => {
                        SRV_BYTES.fetch_add(n as u64, Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
        })?;
        if done {
            return Ok(());
        }
    }
}

async fn echo(mut s: tokio::net::TcpStream) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n]).await?;
    }
}

async fn crr(mut s: tokio::net::TcpStream) -> io::Result<()> {
    let mut buf = [0u8; MSG];
    s.read_exact(&mut buf).await?;
    s.write_all(&buf).await?;
    // Dropped: the server closes first.
    Ok(())
}

/// The server child, killed on drop.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

#[derive(Clone, Copy, Debug, Default)]
struct ServerStats {
    bytes: u64,
    accepted: u64,
    open: u64,
    cpu: f64,
}

impl Server {
    fn start(ns: &str, ip: IpAddr, base: u16, cc: &str, mptcp: bool) -> io::Result<Server> {
        let mut child = Command::new(std::env::current_exe()?)
            .env(SERVE_ENV, ns)
            .env("MPTUN_SCALE_SERVE_ADDR", ip.to_string())
            .env("MPTUN_SCALE_SERVE_PORT", base.to_string())
            .env("MPTUN_SCALE_SERVE_CC", cc)
            .env("MPTUN_SCALE_SERVE_MPTCP", if mptcp { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let mut s = Server { child, stdin, stdout };
        if line.trim() != "ready" {
            let _ = s.child.kill();
            return Err(io::Error::other(format!("server did not start: {line:?}")));
        }
        Ok(s)
    }

    fn stats(&mut self) -> io::Result<ServerStats> {
        writeln!(self.stdin, "stats")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let v: Vec<&str> = line.split_whitespace().collect();
        let bad = || io::Error::other(format!("server stats: {line:?}"));
        if v.len() != 4 {
            return Err(bad());
        }
        Ok(ServerStats {
            bytes: v[0].parse().map_err(|_| bad())?,
            accepted: v[1].parse().map_err(|_| bad())?,
            open: v[2].parse().map_err(|_| bad())?,
            cpu: v[3].parse().map_err(|_| bad())?,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------
// Kernel-side memory: /proc/slabinfo and ss -tm.
// ---------------------------------------------------------------------

/// Bytes of every slab cache (`active_objs × objsize`).
fn slabinfo() -> HashMap<String, i64> {
    let text = std::fs::read_to_string("/proc/slabinfo").unwrap_or_default();
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let v: Vec<&str> = l.split_whitespace().collect();
            let active: i64 = v.get(1)?.parse().ok()?;
            let size: i64 = v.get(3)?.parse().ok()?;
            Some((v[0].to_string(), active * size))
        })
        .collect()
}

/// The caches a TCP (or MPTCP) socket, its file, inode, dentry, epoll entry
/// and port buckets come from. Not the `kmalloc-*` caches: every process
/// on the machine allocates from them (and `dentry`, `filp` less so), and a
/// socket takes little there.
fn is_socket_cache(name: &str) -> bool {
    matches!(
        name,
        "TCP"
            | "MPTCP"
            | "request_sock_TCP"
            | "sock_inode_cache"
            | "filp"
            | "dentry"
            | "eventpoll_epi"
            | "eventpoll_pwq"
            | "tcp_bind_bucket"
            | "tcp_bind2_bucket"
            | "inet_peer_cache"
    )
}

fn slab_delta(a: &HashMap<String, i64>, b: &HashMap<String, i64>) -> (i64, Vec<(String, i64)>) {
    let mut all: Vec<(String, i64)> =
        b.iter().map(|(k, &v)| (k.clone(), v - a.get(k).copied().unwrap_or(0))).filter(|(_, d)| *d != 0).collect();
    all.sort_by_key(|(_, d)| -d.abs());
    let sock = all.iter().filter(|(k, _)| is_socket_cache(k)).map(|(_, d)| d).sum();
    (sock, all)
}

/// `ss -tm` in namespace `ns`: sockets and the sum of their skmem r + w + f
/// + o + bl (receive queue, send queue, forward allocation, options,
///   backlog), bytes.
fn ss_skmem(ns: &str) -> (u64, u64) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-tanmH"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let (mut n, mut sum) = (0u64, 0u64);
    for part in out.split("skmem:(").skip(1) {
        let Some(body) = part.split(')').next() else { continue };
        n += 1;
        for f in body.split(',') {
            let key: String = f.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
            let val: u64 = f[key.len()..].parse().unwrap_or(0);
            if matches!(key.as_str(), "r" | "w" | "f" | "o" | "bl") {
                sum += val;
            }
        }
    }
    (n, sum)
}

// ---------------------------------------------------------------------
// The client.
// ---------------------------------------------------------------------

trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}
type BoxConn = Box<dyn Conn>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackKind {
    Kernel,
    Mptun,
}

impl std::fmt::Display for StackKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            StackKind::Kernel => "kernel",
            StackKind::Mptun => "mptun",
        })
    }
}

#[derive(Clone)]
enum Client {
    Kernel { cc: String, mptcp: bool },
    Mptun { stack: Stack, opts: Arc<StreamOptions> },
}

impl Client {
    async fn connect(&self, addr: SocketAddr) -> io::Result<BoxConn> {
        match self {
            Client::Kernel { cc, mptcp } => {
                // Created on the client thread: in the client namespace.
                let s = tokio::net::TcpSocket::from_std_stream(kernel_socket(addr, *mptcp, cc)?.into());
                Ok(Box::new(s.connect(addr).await?))
            }
            Client::Mptun { stack, opts } => {
                Ok(Box::new(MptcpStream::connect_with(stack, addr, StreamOptions::clone(opts)).await?))
            }
        }
    }
}

struct Params {
    mbit: f64,
    secs: f64,
    warmup: f64,
    crr_secs: f64,
    rr_every: Duration,
    connects: usize,
    cc: String,
    mptcp: bool,
    verbose: bool,
}

/// One run's figures.
#[derive(Clone, Debug, Default)]
struct Row {
    stack: String,
    n: usize,
    /// Connections that completed their handshake (of n).
    opened: usize,
    setup_rate: f64,
    crr_rate: f64,
    crr_p50_us: f64,
    /// Client-process heap per connection, idle and active (bytes).
    idle_heap: f64,
    active_heap: f64,
    /// Kernel memory per connection: the socket caches' delta (client and
    /// server sockets together), and the client sockets' skmem.
    slab: f64,
    skmem_idle: f64,
    skmem_active: f64,
    gbps: f64,
    /// Packets on the veth (both directions, GSO packets one) per MiB.
    pkts_per_mib: f64,
    /// The active phase's warm-up, seconds.
    warmup: f64,
    /// The host's steal time over the window, percent.
    steal: f64,
    cpu_client: f64,
    cpu_server: f64,
    rr_p50_us: f64,
    rr_p99_us: f64,
    rr_n: usize,
    note: String,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // Nearest rank, as netperf.
    let k = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

/// A bulk connection: writes at `rate` bytes/s from `start` on, `CHUNK` at
/// a time (more to catch up if it fell behind, at most `MAX_WRITE`).
async fn pump(mut c: BoxConn, rate: f64, start: Instant, data: &'static [u8]) -> io::Result<()> {
    let mut sent = 0u64;
    loop {
        let next = start + Duration::from_secs_f64((sent + CHUNK) as f64 / rate);
        tokio::time::sleep_until(next).await;
        let owed = (rate * Instant::now().saturating_duration_since(start).as_secs_f64()) as u64;
        let k = owed.saturating_sub(sent).min(MAX_WRITE as u64) as usize;
        if k > 0 {
            c.write_all(&data[..k]).await?;
            sent += k as u64;
        }
    }
}

/// The probe: a 100-byte request every `every`, until `until`; latencies
/// in µs.
async fn rr_probe(c: &mut BoxConn, every: Duration, until: Instant) -> io::Result<Vec<f64>> {
    let mut lat = Vec::new();
    let (mut req, mut resp) = ([0u8; MSG], [0u8; MSG]);
    let mut next = Instant::now();
    let mut i = 0u64;
    while next < until {
        tokio::time::sleep_until(next).await;
        req[..8].copy_from_slice(&i.to_le_bytes());
        let t0 = std::time::Instant::now();
        c.write_all(&req).await?;
        tokio::time::timeout(Duration::from_secs(10), c.read_exact(&mut resp))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "probe answer"))??;
        lat.push(t0.elapsed().as_nanos() as f64 / 1e3);
        if resp != req {
            return Err(io::Error::other("probe answer is not its request"));
        }
        i += 1;
        next += every;
        let now = Instant::now();
        if next < now {
            next = now;
        }
    }
    Ok(lat)
}

/// One connect, request, answer, close.
async fn crr_once(client: &Client, addr: SocketAddr) -> io::Result<()> {
    let mut c = client.connect(addr).await?;
    let mut buf = [7u8; MSG];
    c.write_all(&buf).await?;
    c.read_exact(&mut buf).await?;
    let mut one = [0u8; 1];
    if c.read(&mut one).await? != 0 {
        return Err(io::Error::other("CRR: more than the answer"));
    }
    Ok(())
}

/// Waits until the run's TUN device is gone (see `interop_goodput`).
fn wait_gone(ns: &str, dev: &str) {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let out = mptun_io::netns::ip(ns, ["-o", "link", "show"]).unwrap_or_default();
        if !out.contains(&format!(": {dev}:")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("{dev}: TUN device still present after 5 s");
}

async fn run(topo: &Topo, kind: StackKind, n: usize, base: u16, p: &Params, data: &'static [u8]) -> io::Result<Row> {
    let srv_ip = IpAddr::from([10, OCTET, 1, 2]);
    let mut server = Server::start(&topo.srv(), srv_ip, base, &p.cc, p.mptcp)?;
    let tun_name = mptun_io::testutil::unique_name("cs", 15);
    let client = match kind {
        StackKind::Kernel => Client::Kernel { cc: p.cc.clone(), mptcp: p.mptcp },
        StackKind::Mptun => {
            let cfg = TunConfig::new(&tun_name).address(IpAddr::from([10, OCTET, 101, 1]), 24)?.tx_queue_len(10_000);
            let tun: Arc<dyn PacketIo> = Arc::new(spawn_tun_in_netns(&topo.cli(), &cfg)?);
            let stack = Stack::builder().path(IpAddr::from([10, OCTET, 101, 2]), tun).build()?;
            let mut opts = stack.stream_options().mptcp(p.mptcp).nodelay(true);
            opts = opts.congestion_control(p.cc.parse().map_err(|e| io::Error::other(format!("cc: {e}")))?);
            Client::Mptun { stack, opts: Arc::new(opts) }
        }
    };
    let result = run_phases(topo, kind, &client, &mut server, n, base, p, data).await;
    if let Client::Mptun { stack, .. } = client {
        if p.verbose {
            let rs = stack.runtime_stats();
            println!("  mptun runtime: {rs:?}");
        }
        stack.shutdown().await;
        wait_gone(&topo.cli(), &tun_name);
    }
    drop(server);
    result
}

#[allow(clippy::too_many_arguments)]
async fn run_phases(
    topo: &Topo,
    kind: StackKind,
    client: &Client,
    server: &mut Server,
    n: usize,
    base: u16,
    p: &Params,
    data: &'static [u8],
) -> io::Result<Row> {
    let srv_ip = IpAddr::from([10, OCTET, 1, 2]);
    let mut row = Row { stack: kind.to_string(), n, ..Row::default() };
    // 1. The probe (the stack warm), the baseline.
    let mut probe =
        tokio::time::timeout(Duration::from_secs(10), client.connect(SocketAddr::new(srv_ip, echo_port(base))))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "probe connect"))??;
    let warm = rr_probe(&mut probe, Duration::from_millis(1), Instant::now() + Duration::from_millis(200)).await?;
    drop(warm);
    // A burst of WARM_BURST connect-request-close exchanges at once: the
    // buffers a stack keeps for bursts (mptun's transmit batches, whose
    // slots grow to 64 KiB, twice with the writer thread) reach their size
    // now, not while the N connect, and are not counted per connection.
    let mut set = JoinSet::new();
    for _ in 0..WARM_BURST {
        let c = client.clone();
        set.spawn(async move { crr_once(&c, SocketAddr::new(srv_ip, crr_port(base))).await });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(io::Error::other)??;
    }
    drop(set);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let heap0 = live();
    let classes0 = classes();
    let slab0 = slabinfo();

    // 2. Setup: N connections.
    let t0 = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(p.connects));
    let mut set = JoinSet::new();
    for i in 0..n {
        let (c, sem) = (client.clone(), sem.clone());
        let addr = SocketAddr::new(srv_ip, sink_port(base, i));
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let r = tokio::time::timeout(Duration::from_secs(30), c.connect(addr)).await;
            (i, r.unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect"))))
        });
    }
    let mut conns: Vec<Option<BoxConn>> = (0..n).map(|_| None).collect();
    let mut errors: HashMap<String, usize> = HashMap::new();
    while let Some(r) = set.join_next().await {
        let (i, r) = r.map_err(io::Error::other)?;
        match r {
            Ok(c) => conns[i] = Some(c),
            Err(e) => *errors.entry(e.to_string()).or_default() += 1,
        }
    }
    drop(set);
    let setup = t0.elapsed().as_secs_f64();
    row.opened = conns.iter().filter(|c| c.is_some()).count();
    row.setup_rate = row.opened as f64 / setup;
    if !errors.is_empty() {
        row.note += &format!(" connect errors: {errors:?};");
    }
    if row.opened == 0 {
        return Err(io::Error::other(format!("no connection opened: {errors:?}")));
    }
    let m = row.opened as f64;

    // 3. Idle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let heap_idle = live();
    row.idle_heap = (heap_idle as f64 - heap0 as f64) / m;
    let slab1 = slabinfo();
    let (sock_slab, all_slab) = slab_delta(&slab0, &slab1);
    row.slab = sock_slab as f64 / m;
    let (ss_n, ss_idle) = ss_skmem(&topo.cli());
    row.skmem_idle = if kind == StackKind::Kernel { ss_idle as f64 / m } else { 0.0 };
    let st = server.stats()?;
    row.note += &format!(" server open {} (accepted {}), client sockets {ss_n};", st.open, st.accepted);
    if p.verbose {
        let top: Vec<String> = all_slab.iter().take(12).map(|(k, d)| format!("{k} {:+.0}", *d as f64 / m)).collect();
        println!("  slab per connection, idle: {}", top.join(", "));
        let c1 = classes();
        let hist: Vec<String> = (0..33)
            .filter(|&i| c1[i] != classes0[i])
            .map(|i| format!("<{}: {:+.0}", 1u64 << i, (c1[i] as f64 - classes0[i] as f64) / m))
            .collect();
        println!("  heap bytes per connection by block size, idle: {}", hist.join(", "));
    }

    // 4. CRR while the N are open.
    let crr_addr = SocketAddr::new(srv_ip, crr_port(base));
    let t_end = Instant::now() + Duration::from_secs_f64(p.crr_secs);
    let mut crr_lat = Vec::new();
    let t_crr = Instant::now();
    while Instant::now() < t_end {
        let t = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(10), crr_once(client, crr_addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "CRR"))??;
        crr_lat.push(t.elapsed().as_nanos() as f64 / 1e3);
    }
    row.crr_rate = crr_lat.len() as f64 / t_crr.elapsed().as_secs_f64();
    crr_lat.sort_by(f64::total_cmp);
    row.crr_p50_us = percentile(&crr_lat, 50.0);
    let crr_n = crr_lat.len();
    drop(crr_lat);
    // The CRR connections must be gone, and their memory with them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    row.note +=
        &format!(" heap after CRR {:+.1} B per transaction;", (live() as f64 - heap_idle as f64) / crr_n.max(1) as f64);
    if let Client::Mptun { stack, .. } = client {
        row.note += &format!(" mptun connections after CRR {};", stack.connection_count());
    }

    // 5. Active.
    let rate = p.mbit * 1e6 / 8.0 / m;
    let period = CHUNK as f64 / rate;
    let start = Instant::now();
    let mut pumps = JoinSet::new();
    for (k, c) in conns.into_iter().flatten().enumerate() {
        // Spread evenly over one write period.
        let s = start + Duration::from_secs_f64(period * k as f64 / m);
        pumps.spawn(pump(c, rate, s, data));
    }
    // Long enough for WARM_WRITES writes of every connection: at 10,000
    // connections one every 1.3 s, and a connection's first writes still
    // open its windows (ours, and the kernel receiver's, which starts at
    // 10 segments), two flights and their ACKs for one write.
    row.warmup = p.warmup.max(WARM_WRITES * period);
    tokio::time::sleep(Duration::from_secs_f64(row.warmup)).await;
    let w0 = Instant::now();
    let (cpu0, srv0, threads0) = (cpu_seconds(), server.stats()?, thread_cpu());
    let veth0 = veth_packets(&topo.cli());
    let ticks0 = cpu_ticks();
    let nstat0 = if p.verbose { Some((netstat(&topo.cli()), netstat(&topo.srv()))) } else { None };
    let rs0 = if let Client::Mptun { stack, .. } = client { Some(stack.runtime_stats()) } else { None };
    let counters0 = match client {
        Client::Mptun { stack, .. } if p.verbose => Some(stack.counters()),
        _ => None,
    };
    let until = w0 + Duration::from_secs_f64(p.secs);
    let sampler = async {
        let mut samples = Vec::new();
        while Instant::now() + Duration::from_millis(250) < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            samples.push(live() as f64);
        }
        samples
    };
    let (lat, samples) = tokio::join!(rr_probe(&mut probe, p.rr_every, until), sampler);
    let mut lat = lat?;
    let (cpu1, srv1, threads1) = (cpu_seconds(), server.stats()?, thread_cpu());
    let veth1 = veth_packets(&topo.cli());
    let ticks1 = cpu_ticks();
    row.steal = 100.0 * ticks1.1.saturating_sub(ticks0.1) as f64 / ticks1.0.saturating_sub(ticks0.0).max(1) as f64;
    let window = w0.elapsed().as_secs_f64();
    if let (true, Client::Mptun { stack, .. }) = (p.verbose, client) {
        // The bulk connections' windows and rates (medians), as `ss -ti`.
        let infos = stack.connections();
        // cwnd, srtt (µs), pacing rate, ssthresh.
        type Sample = (u32, f64, u64, u32);
        let mut v: Vec<Sample> = infos
            .iter()
            .filter_map(|c| c.conn.subflows.first())
            .map(|sf| (sf.tcp.cwnd, sf.tcp.srtt.as_secs_f64() * 1e6, sf.tcp.pacing_rate, sf.tcp.ssthresh))
            .collect();
        let med = |f: &dyn Fn(&Sample) -> f64| {
            let mut x: Vec<f64> = v.iter().map(f).collect();
            x.sort_by(f64::total_cmp);
            x.get(x.len() / 2).copied().unwrap_or(f64::NAN)
        };
        println!(
            "  mptun connections (medians of {}): cwnd {:.0} B, srtt {:.0} us, pacing {:.2} Mbit/s, ssthresh {:.0}",
            v.len(),
            med(&|x| x.0 as f64),
            med(&|x| x.1),
            med(&|x| x.2 as f64 * 8e-6),
            med(&|x| x.3 as f64)
        );
        v.clear();
    }

    let (_, ss_active) = ss_skmem(&topo.cli());
    row.skmem_active = if kind == StackKind::Kernel { ss_active as f64 / m } else { 0.0 };
    // Failed pumps (a connection reset) show here; a running one never ends.
    let mut failed = 0;
    while let Some(r) = pumps.try_join_next() {
        if !matches!(r, Ok(Ok(()))) {
            failed += 1;
        }
    }
    if failed > 0 {
        row.note += &format!(" {failed} bulk connections failed;");
    }
    pumps.abort_all();
    while pumps.join_next().await.is_some() {}
    let bytes = srv1.bytes - srv0.bytes;
    let gib = bytes as f64 / (1u64 << 30) as f64;
    row.gbps = bytes as f64 * 8.0 / window / 1e9;
    row.cpu_client = (cpu1 - cpu0) / gib;
    row.cpu_server = (srv1.cpu - srv0.cpu) / gib;
    let mib = bytes as f64 / (1u64 << 20) as f64;
    row.pkts_per_mib = ((veth1.0 - veth0.0) + (veth1.1 - veth0.1)) as f64 / mib;
    if p.verbose {
        let mut t: Vec<String> = threads1
            .iter()
            .map(|(k, &(u, s))| {
                let (u0, s0) = threads0.get(k).copied().unwrap_or_default();
                (k, (u - u0) / gib, (s - s0) / gib)
            })
            .filter(|(_, u, s)| u + s > 0.0)
            .map(|(k, u, s)| format!("{k} user {u:.2} sys {s:.2}"))
            .collect();
        t.sort();
        println!("  CPU s/GiB by thread: {}", t.join(", "));
        if let Some((c0, s0)) = &nstat0 {
            println!(
                "  nstat over the window: client ns [{}] server ns [{}]; link drops so far: client ns [{}] server ns [{}]",
                netstat_delta(c0, &netstat(&topo.cli())),
                netstat_delta(s0, &netstat(&topo.srv())),
                link_drops(&topo.cli()),
                link_drops(&topo.srv())
            );
        }
        println!(
            "  veth packets per MiB: to the server {:.1}, from it {:.1}",
            (veth1.0 - veth0.0) as f64 / mib,
            (veth1.1 - veth0.1) as f64 / mib
        );
        if let (Some(a), Client::Mptun { stack, .. }) = (counters0, client) {
            let b = stack.counters();
            let d: Vec<String> = b
                .iter()
                .zip(a.iter())
                .filter(|((_, x), (_, y))| x != y)
                .map(|((k, x), (_, y))| format!("{k} {}", x - y))
                .collect();
            println!("  mptun counters over the window: {}", d.join(" "));
        }
        if let (Some(a), Client::Mptun { stack, .. }) = (rs0, client) {
            let b = stack.runtime_stats();
            let mib = bytes as f64 / (1u64 << 20) as f64;
            println!(
                "  mptun per MiB in the window: rx_packets {:.1} tx_packets {:.1} tx_segments {:.1} tx_batches {:.1} \
                 iterations {:.1} polls {:.1} app_wakeups {:.1} timer_wakeups {:.1} tx_held {:.1}",
                (b.rx_packets - a.rx_packets) as f64 / mib,
                (b.tx_packets - a.tx_packets) as f64 / mib,
                (b.tx_segments - a.tx_segments) as f64 / mib,
                (b.tx_batches - a.tx_batches) as f64 / mib,
                (b.iterations - a.iterations) as f64 / mib,
                (b.polls - a.polls) as f64 / mib,
                (b.app_wakeups - a.app_wakeups) as f64 / mib,
                (b.timer_wakeups - a.timer_wakeups) as f64 / mib,
                (b.tx_held - a.tx_held) as f64 / mib,
            );
        }
    }
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    row.active_heap = (mean - heap0 as f64) / m;
    lat.sort_by(f64::total_cmp);
    row.rr_n = lat.len();
    row.rr_p50_us = percentile(&lat, 50.0);
    row.rr_p99_us = percentile(&lat, 99.0);
    drop(probe);
    Ok(row)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Below this many connections the slab deltas are the machine's noise
/// (other processes' dentries, inodes, buffers), not the sockets'.
const SLAB_MIN_N: usize = 1000;

fn print_table(rows: &[Row], n_list: &[usize], stacks: &[StackKind]) {
    println!();
    println!(
        "| stack  |      N | setup conn/s | CRR conn/s | idle B/conn (user + kernel) | active B/conn (user + kernel) | CPU s/GiB client / +server | pkts/MiB | Gbit/s | RR p50 / p99 us |"
    );
    println!(
        "| ------ | -----: | -----------: | ---------: | --------------------------- | ----------------------------- | -------------------------- | -------: | -----: | --------------- |"
    );
    for &n in n_list {
        // The server's sockets, from the mptun run (its own live in
        // userspace): what the kernel run's slab delta has beyond them is
        // the kernel client's.
        let server_slab =
            median(rows.iter().filter(|r| r.n == n && r.stack == "mptun").map(|r| r.slab).collect::<Vec<_>>());
        for &s in stacks {
            let rs: Vec<&Row> = rows.iter().filter(|r| r.n == n && r.stack == s.to_string()).collect();
            if rs.is_empty() {
                continue;
            }
            let med = |f: fn(&Row) -> f64| median(rs.iter().map(|r| f(r)).collect());
            let kernel_mem =
                (n >= SLAB_MIN_N && server_slab.is_finite()).then(|| (med(|r| r.slab) - server_slab).max(0.0));
            // "?": too few sockets to tell them from the machine's noise.
            let kernel = |skmem: f64| kernel_mem.map_or_else(|| "?".to_string(), |k| format!("{:.0}", k + skmem));
            let (idle, active) = match s {
                StackKind::Kernel => (
                    format!("{:.0} + {}", med(|r| r.idle_heap), kernel(med(|r| r.skmem_idle))),
                    format!("{:.0} + {}", med(|r| r.active_heap), kernel(med(|r| r.skmem_active))),
                ),
                StackKind::Mptun => (format!("{:.0}", med(|r| r.idle_heap)), format!("{:.0}", med(|r| r.active_heap))),
            };
            println!(
                "| {:<6} | {:>6} | {:>12.0} | {:>10.0} | {:<27} | {:<29} | {:>11.2} / {:<12.2} | {:>8.0} | {:>6.3} | {:>6.0} / {:<6.0} |",
                s,
                n,
                med(|r| r.setup_rate),
                med(|r| r.crr_rate),
                idle,
                active,
                med(|r| r.cpu_client),
                med(|r| r.cpu_client + r.cpu_server),
                med(|r| r.pkts_per_mib),
                med(|r| r.gbps),
                med(|r| r.rr_p50_us),
                med(|r| r.rr_p99_us),
            );
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "?".into(), |s| s.trim().to_owned())
}

fn main() {
    if let Ok(ns) = std::env::var(SERVE_ENV) {
        server_main(&ns);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if mptun_io::testutil::require_netns().is_some() {
        return;
    }
    let n_list: Vec<usize> = std::env::var("MPTUN_SCALE_N")
        .unwrap_or_else(|_| "1,10,100,1000,10000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("MPTUN_SCALE_N: comma-separated counts"))
        .collect();
    let stacks: Vec<StackKind> = std::env::var("MPTUN_SCALE_STACKS")
        .unwrap_or_else(|_| "kernel,mptun".into())
        .split(',')
        .map(|s| match s.trim() {
            "kernel" => StackKind::Kernel,
            "mptun" => StackKind::Mptun,
            other => panic!("MPTUN_SCALE_STACKS: {other}? (kernel, mptun)"),
        })
        .collect();
    let p = Params {
        mbit: env("MPTUN_SCALE_MBIT", 1000.0f64),
        secs: env("MPTUN_SCALE_SECS", 5.0f64),
        warmup: env("MPTUN_SCALE_WARMUP", 2.0f64),
        crr_secs: env("MPTUN_SCALE_CRR_SECS", 3.0f64),
        rr_every: Duration::from_micros(env("MPTUN_SCALE_RR_US", 1000u64).max(1)),
        connects: env("MPTUN_SCALE_CONNECTS", 128usize).max(1),
        cc: std::env::var("MPTUN_SCALE_CC").unwrap_or_else(|_| "cubic".into()),
        mptcp: std::env::var("MPTUN_SCALE_MPTCP").is_ok_and(|v| v == "1"),
        verbose: std::env::var("MPTUN_SCALE_VERBOSE").is_ok_and(|v| v == "1"),
    };
    let rounds: usize = env("MPTUN_SCALE_ROUNDS", 1usize).max(1);
    let max_n = n_list.iter().copied().max().unwrap_or(1);
    let nofile = raise_nofile((2 * max_n as u64 + 4096).max(65_536)).expect("RLIMIT_NOFILE");
    if nofile < max_n as u64 + 1024 {
        println!(
            "RLIMIT_NOFILE is {nofile} and cannot be raised (no CAP_SYS_RESOURCE): \
             the kernel client and the server cannot hold {max_n} sockets each"
        );
    }
    let prefix = mptun_io::testutil::unique_name("csb", 12);
    let topo = Topo::up(&prefix, &["--paths", "1", "--octet", &OCTET.to_string()]).expect("topo.sh up");
    for ns in [topo.cli(), topo.srv()] {
        // No TIME_WAIT (see the module's doc), and room for every handshake.
        for (k, v) in [
            ("net.ipv4.tcp_max_tw_buckets", "0"),
            ("net.core.somaxconn", "65535"),
            ("net.ipv4.tcp_max_syn_backlog", "65535"),
        ] {
            mptun_io::netns::sysctl(&ns, k, v).expect("sysctl");
        }
    }
    if p.mptcp {
        for ns in [topo.cli(), topo.srv()] {
            mptun_io::netns::sysctl(&ns, "net.mptcp.enabled", "1").expect("sysctl");
        }
    }
    println!(
        "conn_scale: N = {n_list:?}, stacks {stacks:?}, {} Mbit/s in all, window {} s after {} s, CRR {} s, \
         probe every {:?}, {} connects in flight, cc {}, {}, RLIMIT_NOFILE {nofile}, {rounds} round(s)",
        p.mbit,
        p.secs,
        p.warmup,
        p.crr_secs,
        p.rr_every,
        p.connects,
        p.cc,
        if p.mptcp { "MPTCP" } else { "plain TCP" }
    );
    println!("load average at start: {}", loadavg());
    let data: &'static [u8] =
        Box::leak(mptun::pattern::Pattern::bytes(0x5ca1_e000_0000_0035, MAX_WRITE).into_boxed_slice());
    let t_all = std::time::Instant::now();
    let cli_ns = topo.cli();
    let (rows, failed) = std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(&cli_ns).expect("enter the client namespace");
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let (mut rows, mut failed) = (Vec::new(), 0usize);
            let mut base = 20_000u16;
            for round in 0..rounds {
                for &n in &n_list {
                    for &kind in &stacks {
                        base += 16;
                        let t = std::time::Instant::now();
                        match rt.block_on(run(&topo, kind, n, base, &p, data)) {
                            Ok(r) => {
                                println!(
                                    "round {round}: {:<6} N={:<6} opened {} setup {:.0}/s CRR {:.0}/s (p50 {:.0} us) \
                                     idle {:.0} B/conn active {:.0} B/conn slab {:.0} B/conn skmem {:.0}/{:.0} B/conn \
                                     {:.3} Gbit/s (after {:.1} s) cpu client {:.2} server {:.2} s/GiB {:.0} pkts/MiB \
                                     steal {:.1} % RR p50 {:.0} p99 {:.0} us ({} samples) [{:.1} s]{}",
                                    r.stack,
                                    r.n,
                                    r.opened,
                                    r.setup_rate,
                                    r.crr_rate,
                                    r.crr_p50_us,
                                    r.idle_heap,
                                    r.active_heap,
                                    r.slab,
                                    r.skmem_idle,
                                    r.skmem_active,
                                    r.gbps,
                                    r.warmup,
                                    r.cpu_client,
                                    r.cpu_server,
                                    r.pkts_per_mib,
                                    r.steal,
                                    r.rr_p50_us,
                                    r.rr_p99_us,
                                    r.rr_n,
                                    t.elapsed().as_secs_f64(),
                                    r.note
                                );
                                rows.push(r);
                            }
                            Err(e) => {
                                println!("round {round}: {kind} N={n}: FAILED: {e}");
                                failed += 1;
                            }
                        }
                    }
                }
            }
            (rows, failed)
        })
        .join()
        .expect("client thread")
    });
    println!("load average at end: {}; {:.0} s in all", loadavg(), t_all.elapsed().as_secs_f64());
    print_table(&rows, &n_list, &stacks);
    let cpu_at = |n: usize| {
        median(rows.iter().filter(|r| r.n == n && r.stack == "mptun").map(|r| r.cpu_client).collect::<Vec<_>>())
    };
    let (c10, c10k) = (cpu_at(10), cpu_at(10_000));
    if c10.is_finite() && c10k.is_finite() {
        println!("mptun client CPU s/GiB at 10,000 / at 10: {:.2} (goal <= 1.5)", c10k / c10);
    }
    // The namespaces go before the exit status says a run failed.
    drop(topo);
    if failed > 0 {
        println!("{failed} run(s) failed");
        std::process::exit(1);
    }
}
