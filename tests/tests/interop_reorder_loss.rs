//! Reorder-and-loss interop with the Linux kernel's MPTCP.
//!
//! Two paths between namespace A (client side) and B (server side): path 1
//! through linkem, delayed 10 ms each way with 0.5 % loss toward the server
//! and 10 % reordering toward the client; path 2 a plain veth. The MPTCP
//! connection starts on path 1 (so its handshake, the first DSS mappings and
//! the DATA_ACKs that make the peer fully established cross the lossy,
//! reordering link) and joins a subflow on path 2. Each role runs 20 seeds:
//!
//! - `kernel_client_to_mptun_server_under_reorder_and_loss`: the kernel
//!   client in A (a `subflow` endpoint on path 2) connects to mptun in B;
//! - `mptun_client_to_kernel_server_under_reorder_and_loss`: mptun in A
//!   (one TUN per path) connects to a kernel listener in B.
//!
//! Every run sends a seeded random size (256 KiB – 4 MiB) each way at once,
//! in writes of seeded random sizes (1 B – 16 KiB: many small DSS mappings,
//! the ones whose DATA_ACK a sender may elide); the client writes one
//! request and the rest once the answer began; the server answers once the
//! client's first bytes arrived plus a seeded 0–15 ms
//! (so its first data may follow its own pure ACKs with an unchanged
//! DATA_ACK, and overtake them on the reordering link); both ends close, and both streams are compared by length and SHA-256.
//! A run must finish within 20 s. Fallbacks to TCP are counted at both ends
//! (mptun's counters and the kernel's `nstat` with "Fallback" or
//! "InfiniteMap" in the name) and must be zero; both paths must carry data.
//! Every run builds and removes its own namespaces and linkem.
//!
//! Needs root, ethtool and the linkem binary (`cargo test --workspace`
//! builds it; or `cargo build -p linkem`, or `LINKEM_BIN`): skipped with a
//! reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.
//!
//! Knobs for investigation: `MPTUN_REORDER_RUNS=N` (seeds 1..=N),
//! `MPTUN_REORDER_SEED=S` (that seed only), `MPTUN_REORDER_PCAP=DIR`
//! (mptun's packets of each run to `DIR/<role>-<seed>.pcap`),
//! `MPTUN_REORDER_VERBOSE=1` (both ends' MPTCP and TcpExt counters per run).
#![cfg(feature = "mptcp-interop")]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mptun::{MptcpListener, MptcpStream, Stack};
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Emulation, Lab, Side};
use mptun_tests::xfer::{exchange_async_with, exchange_blocking_with, FirstWrite, Report, Writes};
use tokio::time::timeout_at;

/// Seeds per role.
const RUNS: u64 = 20;
/// Bound on one run's transfer (connect to both ends closed).
const RUN_LIMIT: Duration = Duration::from_secs(20);
/// linkem on path 1, A→B (toward the server).
const TOWARD_SERVER: &str = "delay=10ms,loss=0.5%";
/// linkem on path 1, B→A (toward the client).
const TOWARD_CLIENT: &str = "delay=10ms,reorder=10%";
const MIN_SIZE: u64 = 256 << 10;
const MAX_SIZE: u64 = 4 << 20;
/// Each path must carry at least this much (bytes on the wire, both
/// directions) in every run for it to count as used.
const MIN_PATH_BYTES: u64 = 8 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Kernel client in A → mptun server in B.
    KernelClient,
    /// mptun client in A → kernel server in B.
    KernelServer,
}

impl Role {
    fn tag(self) -> &'static str {
        match self {
            Role::KernelClient => "kcli",
            Role::KernelServer => "ksrv",
        }
    }
}

/// The seed's sizes, (client → server, server → client), and how long the
/// server waits after the client's first bytes before it answers (0–15 ms).
fn sizes(seed: u64) -> (usize, usize, u64) {
    let mut x = seed;
    let mut next = || {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut size = || (MIN_SIZE + next() % (MAX_SIZE - MIN_SIZE + 1)) as usize;
    let (up, down) = (size(), size());
    (up, down, next() % 16)
}

/// What one successful run saw.
struct RunStats {
    up: usize,
    down: usize,
    elapsed: Duration,
    /// Bytes on path 1 (linkem, both directions) and path 2 (veth b2, both directions).
    path_bytes: [u64; 2],
    /// linkem on path 1: frames lost toward the server, reordered toward the client.
    lost: u64,
    reordered: u64,
}

/// Counters that mean a fallback to plain TCP (or an infinite mapping).
fn fallback_counters<'a>(it: impl Iterator<Item = (&'a str, u64)>) -> Vec<String> {
    it.filter(|(n, v)| *v > 0 && n.starts_with("MPTcpExt") && (n.contains("Fallback") || n.contains("InfiniteMap")))
        .map(|(n, v)| format!("{n}={v}"))
        .collect()
}

fn linkem_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LINKEM_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/<this test> → target/<profile>/linkem
    Some(exe.parent()?.parent()?.join("linkem"))
}

/// The linkem binary when the test can run here; `None` (after printing
/// why) when it is skipped. Panics instead under MPTUN_REQUIRE_NETNS=1.
fn prerequisites(test: &str) -> Option<PathBuf> {
    if require_netns().is_some() {
        return None;
    }
    let have_ethtool =
        std::process::Command::new("ethtool").arg("--version").output().is_ok_and(|o| o.status.success());
    let linkem = linkem_bin().filter(|p| p.is_file());
    let why = match (&linkem, have_ethtool) {
        (_, false) => "ethtool not installed (linkem needs offloads off)".to_string(),
        (None, _) => format!(
            "{} not built (`cargo test --workspace` builds it; or `cargo build -p linkem`, or set LINKEM_BIN)",
            linkem_bin().map_or_else(|| "linkem".into(), |p| p.display().to_string())
        ),
        (Some(p), true) => return Some(p.clone()),
    };
    assert!(std::env::var("MPTUN_REQUIRE_NETNS").as_deref() != Ok("1"), "{test}: MPTUN_REQUIRE_NETNS=1 but {why}");
    println!("{test}: skipped: {why}");
    None
}

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("MPTUN_REORDER_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let n = std::env::var("MPTUN_REORDER_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(RUNS);
    (1..=n).collect()
}

/// Compares both directions of an exchange: lengths and SHA-256.
fn check_intact(mptun: &Report, kernel: &Report) -> Result<(), String> {
    let mut err = String::new();
    if mptun.received != kernel.sent || mptun.received_sha != kernel.sent_sha {
        let _ = write!(err, "kernel→mptun: received {} of {} bytes, SHA-256 {}; ", mptun.received, kernel.sent, {
            if mptun.received_sha == kernel.sent_sha {
                "equal"
            } else {
                "differs"
            }
        });
    }
    if kernel.received != mptun.sent || kernel.received_sha != mptun.sent_sha {
        let _ = write!(err, "mptun→kernel: received {} of {} bytes, SHA-256 {}", kernel.received, mptun.sent, {
            if kernel.received_sha == mptun.sent_sha {
                "equal"
            } else {
                "differs"
            }
        });
    }
    if err.is_empty() {
        Ok(())
    } else {
        Err(err)
    }
}

/// The kernel's side of a run: a thread that hands back a clone of its
/// socket (to cut it short on a timeout) and then the exchange's report.
struct KernelSide {
    thread: JoinHandle<std::io::Result<(Report, bool)>>,
    socket: mpsc::Receiver<TcpStream>,
}

impl KernelSide {
    fn spawn(
        f: impl FnOnce() -> std::io::Result<TcpStream> + Send + 'static,
        len: usize,
        seed: u64,
        first: FirstWrite,
    ) -> KernelSide {
        let (tx, socket) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let s = f()?;
            if let Ok(c) = s.try_clone() {
                let _ = tx.send(c);
            }
            let mptcp = kernel::is_mptcp(&s);
            exchange_blocking_with(s, len, seed, RUN_LIMIT, Writes::Random { seed: !seed }, first).map(|r| (r, mptcp))
        });
        KernelSide { thread, socket }
    }

    /// Waits for the kernel side until `deadline`; past it, shuts its socket
    /// down so the thread ends, and fails.
    async fn finish(self, deadline: tokio::time::Instant) -> Result<(Report, bool), String> {
        while !self.thread.is_finished() {
            if tokio::time::Instant::now() >= deadline {
                if let Ok(s) = self.socket.try_recv() {
                    let _ = s.shutdown(Shutdown::Both);
                }
                return Err("the kernel side did not finish in time".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match self.thread.join() {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(format!("kernel side: {e}")),
            Err(_) => Err("kernel side panicked".into()),
        }
    }

    /// Ends a failed run: unblocks the kernel thread (it then ends on its own).
    fn abort(self) {
        if let Ok(s) = self.socket.try_recv() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Bytes both ways on `dev` of `side`, from `ip -s -j link`.
fn veth_bytes(lab: &Lab, side: Side, dev: &str) -> Result<u64, String> {
    let j = lab.link_stats(side, dev).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&j).map_err(|e| format!("{dev} stats: {e}"))?;
    let s = &v[0]["stats64"];
    Ok(s["rx"]["bytes"].as_u64().unwrap_or(0) + s["tx"]["bytes"].as_u64().unwrap_or(0))
}

/// One run: a fresh lab, one connection, a duplex exchange, checks.
async fn run_once(role: Role, seed: u64, linkem: &std::path::Path) -> Result<RunStats, String> {
    let emulation =
        Emulation { path: 1, a2b: TOWARD_SERVER.into(), b2a: TOWARD_CLIENT.into(), seed: seed.wrapping_mul(2) };
    let lab = Lab::with_linkem(role.tag(), 2, linkem, &[emulation]).map_err(|e| format!("lab: {e}"))?;
    let (up, down, answer_ms) = sizes(seed);
    let answer = FirstWrite::AfterFirstRead(Duration::from_millis(answer_ms));
    // Pattern seeds: distinct per run and direction.
    let (up_seed, down_seed) = (seed * 2 + 1000, seed * 2 + 1001);
    let pcap =
        std::env::var_os("MPTUN_REORDER_PCAP").map(|d| PathBuf::from(d).join(format!("{}-{seed}.pcap", role.tag())));
    let progress = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + RUN_LIMIT;
    let kernel_ns = match role {
        Role::KernelClient => lab.a.name().to_owned(),
        Role::KernelServer => lab.b.name().to_owned(),
    };

    let (stack, ksock, xfer, _listener) = match role {
        Role::KernelClient => {
            lab.kernel_mptcp(Side::A, true).map_err(|e| format!("kernel MPTCP setup: {e}"))?;
            let tun = lab.tun(Side::B, "mpt1", &[1]).map_err(|e| format!("TUN: {e}"))?;
            let mut b = Stack::builder().path(lab.mptun_addr(Side::B, 1), tun);
            if let Some(p) = &pcap {
                b = b.pcap(p);
            }
            let stack = b.build().map_err(|e| format!("stack: {e}"))?;
            let addr = SocketAddr::new(lab.mptun_addr(Side::B, 1), 5400);
            let listener = MptcpListener::bind(&stack, addr).await.map_err(|e| format!("bind: {e}"))?;
            let ns = kernel_ns.clone();
            let k = KernelSide::spawn(
                move || kernel::connect(&ns, addr, Proto::Mptcp),
                up,
                up_seed,
                FirstWrite::RequestFirst,
            );
            let accepted = timeout_at(deadline, listener.accept()).await;
            let s = match accepted {
                Ok(Ok((s, _))) => s,
                other => {
                    k.abort();
                    return Err(format!("accept: {:?}", other.map(|r| r.map(|_| ()))));
                }
            };
            (stack, k, (s, down, down_seed, answer), None)
        }
        Role::KernelServer => {
            lab.kernel_mptcp(Side::B, false).map_err(|e| format!("kernel MPTCP setup: {e}"))?;
            let tun1 = lab.tun(Side::A, "mpt1", &[1]).map_err(|e| format!("TUN: {e}"))?;
            let tun2 = lab.tun(Side::A, "mpt2", &[2]).map_err(|e| format!("TUN: {e}"))?;
            let mut b = Stack::builder().path(lab.mptun_addr(Side::A, 1), tun1).path(lab.mptun_addr(Side::A, 2), tun2);
            if let Some(p) = &pcap {
                b = b.pcap(p);
            }
            let stack = b.build().map_err(|e| format!("stack: {e}"))?;
            let server = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5401);
            let l = kernel::listen(&kernel_ns, server, Proto::Mptcp).map_err(|e| format!("listen: {e}"))?;
            // Joins arrive at the listener: it stays open for the whole run
            // (a closed one answers the MP_JOIN SYN with a RST, NO_SOCKET).
            let keep = l.try_clone().map_err(|e| format!("listener: {e}"))?;
            let k = KernelSide::spawn(move || kernel::accept_within(&l, RUN_LIMIT), down, down_seed, answer);
            let s = match timeout_at(deadline, MptcpStream::connect(&stack, server)).await {
                Ok(Ok(s)) => s,
                other => {
                    k.abort();
                    return Err(format!("connect: {:?}", other.map(|r| r.map(|_| ()))));
                }
            };
            (stack, k, (s, up, up_seed, FirstWrite::RequestFirst), Some(keep))
        }
    };
    let (s, len, pseed, first) = xfer;
    let mptun_mptcp = s.info().map(|i| i.is_mptcp()).unwrap_or(false);
    let ours = timeout_at(
        deadline,
        exchange_async_with(s, len, pseed, Writes::Random { seed: !pseed }, first, progress.clone()),
    )
    .await;
    let theirs = match &ours {
        Ok(Ok(_)) => ksock.finish(deadline).await,
        _ => {
            ksock.abort();
            Err("not waited for".into())
        }
    };
    let elapsed = start.elapsed();

    // Fallbacks, at both ends, whatever the outcome.
    let mut fallbacks =
        fallback_counters(stack.counters().iter()).into_iter().map(|c| format!("mptun {c}")).collect::<Vec<_>>();
    match kernel::nstat(&kernel_ns) {
        Ok(ns) => fallbacks.extend(
            fallback_counters(ns.iter().map(|(k, v)| (k.as_str(), *v))).into_iter().map(|c| format!("kernel {c}")),
        ),
        Err(e) => fallbacks.push(format!("kernel nstat unreadable: {e}")),
    }
    if std::env::var_os("MPTUN_REORDER_VERBOSE").is_some() {
        let mptcp = |n: &str| n.starts_with("MPTcp") || n.starts_with("TcpExt");
        let m: Vec<String> =
            stack.counters().iter().filter(|(n, v)| *v > 0 && mptcp(n)).map(|(n, v)| format!("{n}={v}")).collect();
        let k: Vec<String> = kernel::nstat(&kernel_ns)
            .map(|ns| ns.iter().filter(|(n, v)| **v > 0 && mptcp(n)).map(|(n, v)| format!("{n}={v}")).collect())
            .unwrap_or_default();
        println!("{} seed {seed}: mptun {m:?}\n  kernel {k:?}", role.tag());
    }
    let linkem: Option<serde_json::Value> = lab.linkem_stats(1).ok().and_then(|j| serde_json::from_str(&j).ok());
    let l = |dir: &str, key: &str| linkem.as_ref().and_then(|v| v[dir][key].as_u64()).unwrap_or(0);
    let lost = linkem.as_ref().and_then(|v| v["a2b"]["dropped"]["loss"].as_u64()).unwrap_or(0);
    let reordered = l("b2a", "reordered");
    let path1 = l("a2b", "forwarded_bytes") + l("b2a", "forwarded_bytes");
    let path2 = veth_bytes(&lab, Side::B, "b2").unwrap_or(0);
    let context = format!(
        "mptun received {} bytes; {:.1} s; path bytes [{path1}, {path2}]; linkem lost {lost} reordered {reordered}; fallbacks {fallbacks:?}",
        progress.load(Ordering::Relaxed),
        elapsed.as_secs_f64()
    );

    let ours = match ours {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(format!("mptun side: {e}; {context}")),
        Err(_) => return Err(format!("no end of stream within {RUN_LIMIT:?}; {context}")),
    };
    let (theirs, kernel_mptcp) = theirs.map_err(|e| format!("{e}; {context}"))?;
    check_intact(&ours, &theirs).map_err(|e| format!("{e}; {context}"))?;
    if !mptun_mptcp || !kernel_mptcp {
        return Err(format!("not MPTCP at connect (mptun {mptun_mptcp}, kernel {kernel_mptcp}); {context}"));
    }
    if !fallbacks.is_empty() {
        return Err(format!("fell back to TCP (data intact); {context}"));
    }
    if path1 < MIN_PATH_BYTES || path2 < MIN_PATH_BYTES {
        return Err(format!("a path carried less than {MIN_PATH_BYTES} bytes; {context}"));
    }
    Ok(RunStats { up, down, elapsed, path_bytes: [path1, path2], lost, reordered })
}

/// Runs every seed of `role`, prints one line per run and a summary, and
/// fails if any run failed.
async fn run_role(test: &str, role: Role) {
    let Some(linkem) = prerequisites(test) else {
        return;
    };
    let t0 = Instant::now();
    let seeds = seeds();
    let mut failures = BTreeMap::new();
    for &seed in &seeds {
        match run_once(role, seed, &linkem).await {
            Ok(r) => println!(
                "{test} seed {seed:>2}: ok   {:>7} B up, {:>7} B down in {:5.2} s; path bytes {:?}; linkem lost {}, reordered {}",
                r.up,
                r.down,
                r.elapsed.as_secs_f64(),
                r.path_bytes,
                r.lost,
                r.reordered
            ),
            Err(e) => {
                let (up, down, answer_ms) = sizes(seed);
                println!("{test} seed {seed:>2}: FAIL {up} B up, {down} B down, answer after {answer_ms} ms: {e}");
                failures.insert(seed, e);
            }
        }
    }
    println!(
        "{test}: {}/{} runs intact, MPTCP end to end, both paths used; {:.1} s",
        seeds.len() - failures.len(),
        seeds.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{test}: {} of {} runs failed: {failures:#?}", failures.len(), seeds.len());
}

/// The kernel as client (a `subflow` endpoint on path 2) → mptun server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_client_to_mptun_server_under_reorder_and_loss() {
    run_role("kernel_client_to_mptun_server_under_reorder_and_loss", Role::KernelClient).await;
}

/// mptun as client (one TUN per path) → kernel server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mptun_client_to_kernel_server_under_reorder_and_loss() {
    run_role("mptun_client_to_kernel_server_under_reorder_and_loss", Role::KernelServer).await;
}
