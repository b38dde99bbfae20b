//! Every shipped scheduler, and one written outside mptun, against the
//! Linux kernel's MPTCP: an mptun client with two TUN paths
//! uploads to a kernel MPTCP server with that scheduler on the connection,
//! SHA-256 checked; both paths carry data, except under `first` and
//! `backup`, which pin the initial subflow by design.
//!
//! Needs root: skipped with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.
#![cfg(feature = "mptcp-interop")]

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpStream, Scheduler, Stack};
use mptun_example_scheduler::WeightedScheduler;
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async_with, exchange_blocking_with, FirstWrite, Writes};
use tokio::time::timeout;

/// Long enough for the join (which follows the first DATA_ACK) to carry a share.
const N: usize = 32 << 20;

/// The local addresses of connection `token`'s subflows that had data
/// acknowledged, sampled every millisecond until `stop`.
fn carried(stack: Stack, token: Option<u32>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<BTreeSet<IpAddr>> {
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        loop {
            let last = stop.load(Ordering::Relaxed);
            for c in stack.connections().into_iter().filter(|c| c.conn.local_token == token) {
                seen.extend(c.conn.subflows.iter().filter(|s| s.tcp.bytes_acked > 0).map(|s| s.local.ip()));
            }
            if last {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_every_scheduler_uploads_intact() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("msc", 2).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let tun1 = lab.tun(Side::A, "mpt1", &[1]).unwrap();
    let tun2 = lab.tun(Side::A, "mpt2", &[2]).unwrap();
    let stack =
        Stack::builder().path(lab.mptun_addr(Side::A, 1), tun1).path(lab.mptun_addr(Side::A, 2), tun2).build().unwrap();
    let server = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5303);
    let l = Arc::new(kernel::listen(lab.b.name(), server, Proto::Mptcp).unwrap());
    let (path1, path2) = (lab.mptun_addr(Side::A, 1), lab.mptun_addr(Side::A, 2));
    type Make = Box<dyn Fn() -> Box<dyn Scheduler> + Send + Sync>;
    let mut cases: Vec<(String, Make)> =
        ["default", "minrtt", "roundrobin", "redundant", "blest", "ecf", "first", "backup"]
            .into_iter()
            .map(|n| (n.to_string(), Box::new(mptun::scheduler_by_name(n).unwrap()) as Make))
            .collect();
    cases.push(("weighted".into(), Box::new(|| Box::new(WeightedScheduler::new(vec![1, 1])) as Box<dyn Scheduler>)));
    let mut table = Vec::new();
    for (i, (name, make)) in cases.into_iter().enumerate() {
        let l2 = l.clone();
        let k = std::thread::spawn(move || {
            let s = kernel::accept_within(&l2, Duration::from_secs(10))?;
            // The client's first chunk gets it fully established (the
            // kernel's DATA_ACK) and its join goes out; the server answers
            // with a kilobyte 100 ms later, when the join is up, and only
            // then does the client send the rest: every scheduler has both
            // paths to choose from (over veth the whole upload takes tens of
            // milliseconds, and a join after the client's DATA_FIN is refused).
            let first = FirstWrite::AfterFirstRead(Duration::from_millis(100));
            exchange_blocking_with(s, 1024, 100 + i as u64, Duration::from_secs(30), Writes::Chunks, first)
        });
        let options = stack.stream_options().scheduler(make);
        let s = timeout(Duration::from_secs(10), MptcpStream::connect_with(&stack, server, options))
            .await
            .unwrap()
            .unwrap();
        let info = s.info().unwrap();
        assert!(info.is_mptcp(), "{name}: MP_CAPABLE with the kernel");
        assert_eq!(info.conn.scheduler, name);
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = carried(stack.clone(), info.conn.local_token, stop.clone());
        let t0 = std::time::Instant::now();
        let first = FirstWrite::RequestFirst;
        let upload = exchange_async_with(s, N, i as u64, Writes::Chunks, first, Arc::new(AtomicU64::new(0)));
        let ours = timeout(Duration::from_secs(40), upload)
            .await
            .unwrap_or_else(|_| panic!("{name}: transfer stalled"))
            .unwrap();
        let secs = t0.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let seen = watcher.await.unwrap();
        let theirs = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
        assert_intact(&ours, &theirs);
        table.push(format!("{name}: {:.2} Gbit/s, carried by {seen:?}", N as f64 * 8.0 / secs / 1e9));
        if name == "first" || name == "backup" {
            assert_eq!(seen, BTreeSet::from([path1]), "{name} pins the initial subflow");
        } else {
            assert_eq!(seen, BTreeSet::from([path1, path2]), "{name} uses both paths");
        }
    }
    for line in table {
        println!("{line}");
    }
}
