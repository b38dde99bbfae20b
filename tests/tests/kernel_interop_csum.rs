//! DSS checksums against the Linux kernel: `net.mptcp.checksum_enabled=1`
//! in the kernel's namespace (the kernel asks for checksums with the
//! MP_CAPABLE A flag, mptun agrees), mptun as client and as server, data
//! kernel → mptun, mptun → kernel and both at once, 64 MiB each way.
//! SHA-256 equal, and no checksum error on either end (mptun's
//! `MPTcpExtDataCsumErr`, the kernel's from `nstat`), no reset.
//!
//! Needs root: skipped with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.
#![cfg(feature = "mptcp-interop")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpListener, MptcpStream, Stack};
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking};
use tokio::time::timeout;

const N: usize = 64 << 20;
const CASE_LIMIT: Duration = Duration::from_secs(60);

fn counter(map: &BTreeMap<String, u64>, name: &str) -> u64 {
    map.get(name).copied().unwrap_or(0)
}

/// Who opens the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    MptunClient,
    MptunServer,
}

/// One case over two paths (the second joined by whoever is the client):
/// mptun sends `to_kernel` bytes and the kernel `to_mptun` bytes at once.
async fn csum_case(case: &str, role: Role, to_kernel: usize, to_mptun: usize) {
    let lab = Lab::new(case, 2).unwrap();
    let (ks, ms) = match role {
        Role::MptunClient => (Side::B, Side::A),
        Role::MptunServer => (Side::A, Side::B),
    };
    lab.kernel_mptcp(ks, role == Role::MptunServer).unwrap();
    lab.ns(ks).sysctl("net.mptcp.checksum_enabled", "1").unwrap();
    let tun1 = lab.tun(ms, "mpt1", &[1]).unwrap();
    let mut b = Stack::builder().path(lab.mptun_addr(ms, 1), tun1);
    if role == Role::MptunClient {
        b = b.path(lab.mptun_addr(ms, 2), lab.tun(ms, "mpt2", &[2]).unwrap());
    }
    let stack = b.build().unwrap();
    let idle = Duration::from_secs(40);
    let (s, k) = match role {
        Role::MptunClient => {
            let server = SocketAddr::new(lab.kernel_addr(ks, 1), 5311);
            let l = kernel::listen(lab.ns(ks).name(), server, Proto::Mptcp).unwrap();
            let k = std::thread::spawn(move || {
                let s = kernel::accept_within(&l, Duration::from_secs(10))?;
                let mptcp = kernel::is_mptcp(&s);
                exchange_blocking(s, to_mptun, 2, idle).map(|r| (r, mptcp))
            });
            let s = timeout(Duration::from_secs(10), MptcpStream::connect(&stack, server)).await.unwrap().unwrap();
            (s, k)
        }
        Role::MptunServer => {
            let addr = SocketAddr::new(lab.mptun_addr(ms, 1), 5312);
            let listener = MptcpListener::bind(&stack, addr).await.unwrap();
            let ns = lab.ns(ks).name().to_owned();
            let k = std::thread::spawn(move || {
                let s = kernel::connect(&ns, addr, Proto::Mptcp)?;
                let mptcp = kernel::is_mptcp(&s);
                exchange_blocking(s, to_mptun, 2, idle).map(|r| (r, mptcp))
            });
            let (s, _) = timeout(Duration::from_secs(10), listener.accept()).await.expect("no connection").unwrap();
            (s, k)
        }
    };
    assert!(s.info().unwrap().is_mptcp(), "MP_CAPABLE must be established with the kernel");
    let t0 = std::time::Instant::now();
    let ours = timeout(CASE_LIMIT, exchange_async(s, to_kernel, 1, Arc::new(AtomicU64::new(0))))
        .await
        .expect("transfer timed out")
        .unwrap_or_else(|e| panic!("{case}: transfer failed: {e}; mptun counters:\n{}", stack.counters().to_nstat()));
    let (theirs, kernel_mptcp) = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let kc = kernel::nstat(lab.ns(ks).name()).unwrap();
    let mc = stack.counters();
    let ours_err = mc.iter().find(|(n, _)| *n == "MPTcpExtDataCsumErr").map_or(0, |(_, v)| v);
    println!(
        "{case}: {to_kernel} B → kernel, {to_mptun} B → mptun in {secs:.2} s; mptun DataCsumErr {ours_err}, \
         kernel DataCsumErr {}, kernel MPJoinAckRx {} MPJoinSynAckRx {}",
        counter(&kc, "MPTcpExtDataCsumErr"),
        counter(&kc, "MPTcpExtMPJoinAckRx"),
        counter(&kc, "MPTcpExtMPJoinSynAckRx"),
    );
    assert_intact(&ours, &theirs);
    assert!(kernel_mptcp, "the kernel socket must run MPTCP, not a fallback");
    assert_eq!(ours_err, 0, "mptun counted checksum errors:\n{}", mc.to_nstat());
    assert_eq!(counter(&kc, "MPTcpExtDataCsumErr"), 0, "the kernel counted checksum errors: {kc:?}");
    assert_eq!(counter(&kc, "MPTcpExtMPFailRx"), 0, "the kernel got an MP_FAIL");
    assert_eq!(counter(&kc, "MPTcpExtMPRstRx"), 0, "the kernel got an MP_TCPRST");
    assert_eq!(counter(&kc, "MPTcpExtInfiniteMapRx"), 0, "the kernel got an infinite mapping");
    let ours = |name: &str| mc.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| v);
    assert_eq!(ours("MPTcpExtDSSNotMatching"), 0, "mptun found a mapping invalid:\n{}", mc.to_nstat());
    // A join the kernel begins as the transfer ends may find the connection
    // gone when its third ACK arrives: that ACK meets no socket and is
    // answered with RST and MP_TCPRST (Linux resets such a join too). Only
    // those resets are allowed; any other is a failure of the data path.
    let half_open_joins = ours("MPTcpExtMPJoinSynRx").saturating_sub(ours("MPTcpExtMPJoinAckRx"));
    let late_join_rsts = half_open_joins.min(ours("MptunNoSocket"));
    assert!(
        ours("MPTcpExtMPRstTx") <= late_join_rsts,
        "mptun reset a subflow ({late_join_rsts} reset(s) allowed for joins that outlived the connection):\n{}",
        mc.to_nstat()
    );
}

/// mptun client, the kernel server sends 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_csum_mptun_client_receives() {
    if require_netns().is_some() {
        return;
    }
    csum_case("cscr", Role::MptunClient, 0, N).await;
}

/// mptun client sends 64 MiB to the kernel server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_csum_mptun_client_sends() {
    if require_netns().is_some() {
        return;
    }
    csum_case("cscs", Role::MptunClient, N, 0).await;
}

/// mptun client, 64 MiB each way at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_csum_mptun_client_both_ways() {
    if require_netns().is_some() {
        return;
    }
    csum_case("cscb", Role::MptunClient, N, N).await;
}

/// Kernel client, the mptun server receives 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_csum_mptun_server_receives() {
    if require_netns().is_some() {
        return;
    }
    csum_case("cssr", Role::MptunServer, 0, N).await;
}

/// The mptun server sends 64 MiB to the kernel client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_csum_mptun_server_sends() {
    if require_netns().is_some() {
        return;
    }
    csum_case("csss", Role::MptunServer, N, 0).await;
}

/// Kernel client and mptun server, 64 MiB each way at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_csum_mptun_server_both_ways() {
    if require_netns().is_some() {
        return;
    }
    csum_case("cssb", Role::MptunServer, N, N).await;
}
