//! Long transfers against the Linux kernel's MPTCP over ONE path (one
//! subflow): 5 GiB kernel → mptun and 5 GiB mptun → kernel, each checked
//! with a running SHA-256. Past 4 GiB the relative subflow sequence numbers
//! of the mappings wrap (RFC 8684 3.3.1): the receive-mapping lookup and the
//! send-side mapping arithmetic must be modular on real packets. Each
//! direction is bounded in time and prints its rate.
//!
//! Needs root: skipped with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.
#![cfg(feature = "mptcp-interop")]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mptun::{MptcpStream, Stack};
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking};
use tokio::time::timeout;

/// 5 GiB: more than 2^32 bytes on one subflow.
const N: usize = 5 << 30;
/// Many times what a direction takes on an idle machine: this bounds a
/// loaded one.
const CASE_LIMIT: Duration = Duration::from_secs(300);

/// mptun (path 1 only, in A) connects to a kernel MPTCP listener in B;
/// mptun sends `to_kernel`, the kernel `to_mptun`.
async fn long_case(case: &str, to_kernel: usize, to_mptun: usize) {
    let lab = Lab::new(case, 1).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let tun = lab.tun(Side::A, "mpt1", &[1]).unwrap();
    let stack = Stack::builder().path(lab.mptun_addr(Side::A, 1), tun).build().unwrap();
    let server = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5321);
    let l = kernel::listen(lab.b.name(), server, Proto::Mptcp).unwrap();
    let k = std::thread::spawn(move || {
        let s = kernel::accept_within(&l, Duration::from_secs(10))?;
        let mptcp = kernel::is_mptcp(&s);
        exchange_blocking(s, to_mptun, 2, Duration::from_secs(40)).map(|r| (r, mptcp))
    });
    let s = timeout(Duration::from_secs(10), MptcpStream::connect(&stack, server)).await.unwrap().unwrap();
    assert!(s.info().unwrap().is_mptcp(), "MP_CAPABLE must be established with the kernel");
    let progress = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let xfer = tokio::spawn(exchange_async(s, to_kernel, 1, progress.clone()));
    // One subflow all along: the path has one address on each side.
    let mut subflows = 0;
    let ours = timeout(CASE_LIMIT, async {
        while !xfer.is_finished() {
            for c in stack.connections() {
                subflows = subflows.max(c.conn.subflows.len());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        xfer.await
    })
    .await
    .unwrap_or_else(|_| {
        panic!("{case}: not done within {CASE_LIMIT:?} (mptun received {} B)", progress.load(Ordering::Relaxed))
    })
    .unwrap()
    .unwrap_or_else(|e| panic!("{case}: transfer failed: {e}; mptun counters:\n{}", stack.counters().to_nstat()));
    let (theirs, kernel_mptcp) = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let moved = (to_kernel + to_mptun) as f64;
    println!(
        "{case}: {to_kernel} B mptun → kernel, {to_mptun} B kernel → mptun in {secs:.1} s ({:.2} Gbit/s); \
         receive side: mptun {:.2} Gbit/s, kernel {:.2} Gbit/s",
        moved * 8.0 / secs / 1e9,
        ours.recv_gbps(),
        theirs.recv_gbps(),
    );
    assert_intact(&ours, &theirs);
    assert!(kernel_mptcp, "the kernel socket must run MPTCP, not a fallback");
    assert_eq!(subflows, 1, "one path, one subflow");
    assert_eq!(stack.counters().iter().find(|(n, _)| *n == "MPTcpExtMPRstTx").map_or(0, |(_, v)| v), 0);
}

/// 5 GiB kernel → mptun on one subflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_long_5gib_kernel_to_mptun() {
    if require_netns().is_some() {
        return;
    }
    long_case("lkm", 0, N).await;
}

/// 5 GiB mptun → kernel on one subflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_long_5gib_mptun_to_kernel() {
    if require_netns().is_some() {
        return;
    }
    long_case("lmk", N, 0).await;
}
