//! mptun leaves TCP checksums to its TUN (checksum offload: the field holds
//! the pseudo-header sum, the packet goes to the kernel `NEEDS_CSUM`). Over
//! a plain veth the kernel would pass such packets on unchecked, so here the
//! veth has `tx off`: the kernel must complete every checksum in software
//! before it leaves, and the kernel at the far end verifies it. IPv4 and
//! IPv6 (the pseudo-header and `csum_start` differ), 16 MiB each way at
//! once, one TUN carrying both families: the data arrives intact and the far
//! kernel counts no checksum error.
//!
//! Needs root: skipped with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpListener, Stack};
use mptun_io::netns::{ip, Netns};
use mptun_io::testutil::{require_netns, unique_name};
use mptun_io::{spawn_tun_in_netns, TunConfig};
use mptun_tests::kernel::{self, Proto};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking};
use tokio::time::timeout;

const N: usize = 16 << 20;

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_verifies_the_checksums_mptun_left_to_its_tun() {
    if require_netns().is_some() {
        return;
    }
    // `a`: the kernel end. `b`: routes between the veth and mptun's TUN.
    let a = Netns::create(&unique_name("csoa", 12)).unwrap();
    let b = Netns::create(&unique_name("csob", 12)).unwrap();
    let (an, bn) = (a.name().to_owned(), b.name().to_owned());
    ip(&an, ["link", "add", "a0", "type", "veth", "peer", "name", "b0", "netns", &bn]).unwrap();
    for (ns, dev, v4, v6) in [(&an, "a0", "10.77.1.1/24", "fd77:1::1/64"), (&bn, "b0", "10.77.1.2/24", "fd77:1::2/64")]
    {
        ip(ns, ["addr", "add", v4, "dev", dev]).unwrap();
        ip(ns, ["-6", "addr", "add", v6, "dev", dev, "nodad"]).unwrap();
        ip(ns, ["link", "set", dev, "up"]).unwrap();
        let off = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-K", dev, "tx", "off"])
            .output()
            .expect("ethtool (the CI installs it)");
        assert!(off.status.success(), "ethtool -K {dev} tx off: {}", String::from_utf8_lossy(&off.stderr));
    }
    b.sysctl("net.ipv4.ip_forward", "1").unwrap();
    b.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    ip(&an, ["route", "add", "10.77.2.0/24", "via", "10.77.1.2"]).unwrap();
    ip(&an, ["-6", "route", "add", "fd77:2::/64", "via", "fd77:1::2"]).unwrap();

    let cfg = TunConfig::new("cso0").address(addr("10.77.2.1"), 24).unwrap().address(addr("fd77:2::1"), 64).unwrap();
    let tun = Arc::new(spawn_tun_in_netns(&bn, &cfg).unwrap());
    assert!(tun.offload(), "the TUN must run with offload for this test to mean anything");
    let (ours4, ours6) = (addr("10.77.2.2"), addr("fd77:2::2"));
    let stack = Stack::builder().path(ours4, tun.clone()).path(ours6, tun).build().unwrap();
    assert!(stack.checksum_offload(), "the stack must leave checksums to an offloading TUN");

    let before = kernel::nstat(&an).unwrap();
    for (i, ours) in [ours4, ours6].into_iter().enumerate() {
        let at = SocketAddr::new(ours, 5401 + i as u16);
        let listener = MptcpListener::bind(&stack, at).await.unwrap();
        let ns = an.clone();
        let k = std::thread::spawn(move || {
            let s = kernel::connect(&ns, at, Proto::Tcp)?;
            exchange_blocking(s, N, 2, Duration::from_secs(30))
        });
        let (s, _) = timeout(Duration::from_secs(10), listener.accept()).await.expect("no connection").unwrap();
        let mine = timeout(Duration::from_secs(60), exchange_async(s, N, 1, Arc::new(AtomicU64::new(0))))
            .await
            .expect("transfer timed out")
            .unwrap_or_else(|e| {
                panic!("{ours}: transfer failed: {e}; mptun counters:\n{}", stack.counters().to_nstat())
            });
        let theirs = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
        assert_intact(&mine, &theirs);
    }
    let after = kernel::nstat(&an).unwrap();
    let delta = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
    println!(
        "kernel end: TcpInSegs +{}, TcpInCsumErrors +{}, TcpRetransSegs +{}",
        delta("TcpInSegs"),
        delta("TcpInCsumErrors"),
        delta("TcpRetransSegs")
    );
    assert!(delta("TcpInSegs") > 2 * (N as u64) / 65_536, "the kernel end saw too few segments to judge");
    assert_eq!(delta("TcpInCsumErrors"), 0, "the far kernel found checksums mptun's TUN left wrong");
}
