//! netns-scripts/topo.sh end to end: build the lab, put a TUN in the client
//! namespace as mptun will, and check that a packet from mptun's path-2
//! address leaves by veth 2 even when addressed to the server's path-1
//! address (the policy routing that makes a local address a path), and that
//! the reply comes back into the TUN. Also checks idempotence and cleanup.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mptun_io::netns::ip;
use mptun_io::testutil::{parse_udp, require_netns, udp_packet, unique_name};
use mptun_io::{run_in_netns, spawn_tun_in_netns, Netns, PacketIoExt, RxBatch, TunConfig};
use tokio::time::timeout;

fn topo(args: &[&str]) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netns-scripts/topo.sh");
    let out = Command::new("bash").arg(script).args(args).output().expect("run topo.sh");
    assert!(out.status.success(), "topo.sh {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `topo.sh down` on drop, so a failing assertion leaves nothing behind.
struct Down(String);
impl Drop for Down {
    fn drop(&mut self) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netns-scripts/topo.sh");
        let _ = Command::new("bash").arg(script).args(["down", "--prefix", &self.0]).output();
    }
}

fn rx_packets(ns: &str, dev: &str) -> u64 {
    let s = ip(ns, ["-s", "-o", "link", "show", dev]).unwrap();
    // "... RX: bytes packets ... \    N M ..." in one line with -o.
    let after = s.split("RX:").nth(1).unwrap();
    let nums: Vec<u64> = after.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    nums[1]
}

#[tokio::test]
async fn lab_routes_each_mptun_address_over_its_own_path() {
    if require_netns().is_some() {
        return;
    }
    let prefix = unique_name("mio", 12);
    let _down = Down(prefix.clone());
    let (cli, srv) = (format!("{prefix}-cli"), format!("{prefix}-srv"));
    let plan = topo(&["up", "--prefix", &prefix, "--paths", "2", "--octet", "77", "--ipv6", "--rate", "100mbit"]);
    assert!(plan.contains("10.77.102.2"), "{plan}");
    // Idempotent: a second `up` succeeds and leaves the same state.
    topo(&["up", "--prefix", &prefix, "--paths", "2", "--octet", "77", "--ipv6", "--rate", "100mbit"]);
    assert!(ip(&cli, ["rule"]).unwrap().matches("lookup 102").count() == 1, "no duplicate rules");
    assert!(ip(&srv, ["-o", "link"]).unwrap().contains("s2"));
    let qd = Command::new("tc").args(["-n", &cli, "qdisc", "show", "dev", "c1"]).output().unwrap();
    assert!(String::from_utf8_lossy(&qd.stdout).contains("tbf"), "rate applied on path 1");

    // mptun's side: one TUN carrying both path addresses' subnets.
    let cfg = TunConfig::new("mtun0")
        .address("10.77.101.1".parse().unwrap(), 24)
        .unwrap()
        .address("10.77.102.1".parse().unwrap(), 24)
        .unwrap();
    let tun = spawn_tun_in_netns(&cli, &cfg).unwrap();
    let server = run_in_netns(&srv, || std::net::UdpSocket::bind("10.77.1.2:5000")).unwrap().unwrap();
    server.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

    let s2_before = rx_packets(&srv, "s2");
    let s1_before = rx_packets(&srv, "s1");
    // From mptun's path-2 address to the server's *path-1* address.
    let me: SocketAddr = "10.77.102.2:4000".parse().unwrap();
    let them: SocketAddr = "10.77.1.2:5000".parse().unwrap();
    // A burst, so that the per-device counters tell the route apart from
    // what else a fresh veth receives (IPv6 router solicitations, MLD).
    const BURST: u64 = 20;
    for _ in 0..BURST {
        tun.send(&udp_packet(me, them, b"via path 2")).await.unwrap();
    }
    let (n, from, buf) = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 64];
        let (n, from) = server.recv_from(&mut buf).expect("server got nothing");
        server.send_to(b"reply", from).unwrap();
        (n, from, buf)
    })
    .await
    .unwrap();
    assert_eq!(&buf[..n], b"via path 2");
    assert_eq!(from, me, "forwarded without NAT");
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while rx_packets(&srv, "s2") < s2_before + BURST && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rx_packets(&srv, "s2") >= s2_before + BURST, "left by veth 2");
    assert!(rx_packets(&srv, "s1") < s1_before + BURST, "not by veth 1");

    // The reply comes back into the TUN.
    let mut batch = RxBatch::for_io(&tun);
    let reply = timeout(Duration::from_secs(5), async {
        loop {
            batch.clear();
            tun.recv_batch(&mut batch).await.unwrap();
            if let Some(p) = batch.iter().find_map(parse_udp).filter(|(_, d, _)| *d == me) {
                return (p.0, p.2.to_vec());
            }
        }
    })
    .await
    .expect("reply never reached the TUN");
    assert_eq!(reply, (them, b"reply".to_vec()));

    drop(tun);
    topo(&["down", "--prefix", &prefix]);
    assert!(!Netns::exists(&cli) && !Netns::exists(&srv), "down removes both namespaces");
    topo(&["down", "--prefix", &prefix]); // and is idempotent too
}

#[test]
fn failed_up_cleans_up_what_it_created() {
    if require_netns().is_some() {
        return;
    }
    let prefix = unique_name("mio", 12);
    let _down = Down(prefix.clone());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netns-scripts/topo.sh");
    // A rate tbf refuses (burst too large for u32 bytes) fails after the namespaces exist.
    let out = Command::new("bash")
        .arg(&script)
        .args(["up", "--prefix", &prefix, "--paths", "1", "--rate", "999999999g"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!Netns::exists(&format!("{prefix}-cli")), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!Netns::exists(&format!("{prefix}-srv")));
    // Bad arguments fail before touching anything.
    let out = Command::new("bash").arg(&script).args(["up", "--prefix", "Bad/Name"]).output().unwrap();
    assert!(!out.status.success());
}
