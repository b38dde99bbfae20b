//! The path manager's behaviours against the Linux kernel's MPTCP, each
//! shown by both ends' counters and subflows: `fullmesh` with 2×2
//! addresses opens four subflows; a kernel client with four `subflow`
//! endpoints gets all its joins answered at once by an mptun server that
//! allows them (no `MptunMPJoinHalfOpenLimit`); one connection carries an
//! IPv4 and an IPv6 subflow to the kernel with SHA-256 intact. Needs
//! root: skipped with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::time::Duration;

use mptun_io::netns::Netns;
use mptun_io::testutil::require_netns;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use support::{json_document as parse, run, Running};

fn counter(v: &Value, map: &str, name: &str) -> u64 {
    v["end"]["mptcp"][map][name].as_u64().unwrap_or(0)
}

/// The subflows of a report that completed their handshake, as (local, remote).
fn subflows(v: &Value) -> Vec<(String, String)> {
    v["end"]["streams"][0]["subflows"]
        .as_array()
        .expect("subflows[]")
        .iter()
        .filter(|s| !s["state"].as_str().unwrap_or("").starts_with("never"))
        .map(|s| (s["local"].as_str().unwrap_or("").to_owned(), s["remote"].as_str().unwrap_or("").to_owned()))
        .collect()
}

fn ip_of(sa: &str) -> &str {
    sa.rsplit_once(':').map_or(sa, |(ip, _)| ip.trim_start_matches('[').trim_end_matches(']'))
}

/// mptun sends from two `subflow fullmesh` addresses to a kernel server
/// that announces its second address: every pair gets a subflow.
#[test]
fn fullmesh_two_by_two_opens_four_subflows_to_the_kernel() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("kpmfm", 2).unwrap();
    lab.b.sysctl("net.mptcp.enabled", "1").unwrap();
    lab.mptcp(Side::B, &["limits", "set", "subflows", "4", "add_addr_accepted", "0"]).unwrap();
    let announced = lab.kernel_addr(Side::B, 2).to_string();
    lab.mptcp(Side::B, &["endpoint", "add", &announced, "dev", "b2", "signal"]).unwrap();
    let server = Running::start(
        Some(lab.b.name()),
        &["serve", "--kernel", "-1", "--no-progress"],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = lab.kernel_addr(Side::B, 1).to_string();
    let out = run(
        Some(lab.a.name()),
        &[
            "send",
            &dst,
            "-n",
            "16M",
            "--json",
            "--subflows",
            "4",
            "--add-addr-accepted",
            "1",
            "--path",
            "dev=mpta1,addr=10.101.0.2/24,subflow,fullmesh",
            "--path",
            "dev=mpta2,addr=10.102.0.2/24,subflow,fullmesh",
        ],
        Duration::from_secs(45),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = parse("mptun send", &out.stdout);
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true);
    let mut pairs: Vec<(String, String)> =
        subflows(&v).iter().map(|(l, r)| (ip_of(l).to_owned(), ip_of(r).to_owned())).collect();
    pairs.sort();
    let want: Vec<(String, String)> = [
        ("10.101.0.2", "10.0.1.2"),
        ("10.101.0.2", "10.0.2.2"),
        ("10.102.0.2", "10.0.1.2"),
        ("10.102.0.2", "10.0.2.2"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(pairs, want, "{:#}", v["end"]["streams"][0]["subflows"]);
    assert_eq!(counter(&v, "peer_counters", "MPTcpExtMPJoinAckRx"), 3, "{:#}", v["end"]["mptcp"]);
    assert_eq!(counter(&v, "peer_counters", "MPTcpExtMPJoinRejected"), 0, "{:#}", v["end"]["mptcp"]);
    drop(server);
}

/// A kernel client with a `subflow` endpoint on each of four paths sends
/// its three join SYNs at once; mptun allowing eight subflows answers all
/// of them (Linux retries a dropped join SYN only after a second).
#[test]
fn a_kernel_client_s_four_subflow_endpoints_are_all_answered_at_once() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("kpm4j", 4).unwrap();
    lab.a.sysctl("net.mptcp.enabled", "1").unwrap();
    lab.mptcp(Side::A, &["limits", "set", "subflows", "4", "add_addr_accepted", "0"]).unwrap();
    for i in 1..=4u8 {
        let addr = lab.kernel_addr(Side::A, i).to_string();
        lab.mptcp(Side::A, &["endpoint", "add", &addr, "dev", &format!("a{i}"), "subflow"]).unwrap();
    }
    let server = Running::spawn_ready(
        Some(lab.b.name()),
        &["serve", "-1", "--json", "--no-progress", "--subflows", "8", "--topology", "lab-b:1"],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    // Source address pinned to path 1: the endpoint of 10.0.1.1 is the initial subflow's.
    let out = run(Some(lab.a.name()), &["send", "--kernel", &dst, "-n", "32M", "--json"], Duration::from_secs(45));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = parse("mptun send --kernel", &out.stdout);
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true);
    let (st, stdout, stderr) = server.finish(Duration::from_secs(15));
    assert!(st.success(), "mptun serve: {stderr}");
    let s = parse("mptun serve", stdout.as_bytes());
    let joins = counter(&s, "counters", "MPTcpExtMPJoinAckRx");
    assert_eq!(counter(&s, "counters", "MptunMPJoinHalfOpenLimit"), 0, "{:#}", s["end"]["mptcp"]);
    assert_eq!(counter(&s, "counters", "MPTcpExtMPJoinRejected"), 0, "{:#}", s["end"]["mptcp"]);
    assert_eq!(joins, 3, "every join answered: {:#}", s["end"]["mptcp"]);
    assert_eq!(counter(&v, "counters", "MPTcpExtMPJoinSynTx"), 3, "the kernel sent three: {:#}", v["end"]["mptcp"]);
    assert_eq!(subflows(&s).len(), 4, "{:#}", s["end"]["streams"][0]["subflows"]);
}

/// One namespace: the kernel's MPTCP serves on a dual-stack socket and
/// announces its IPv6 address; mptun connects over IPv4 and joins the
/// IPv6 address from its own, so one connection has a subflow of each
/// family.
#[test]
fn one_connection_carries_an_ipv4_and_an_ipv6_subflow_to_the_kernel() {
    if require_netns().is_some() {
        return;
    }
    let ns = Netns::create(&format!("kpm46-{}", std::process::id())).unwrap();
    ns.sysctl("net.mptcp.enabled", "1").unwrap();
    // TUN addresses usable at once (no duplicate address detection wait).
    ns.sysctl("net.ipv6.conf.all.accept_dad", "0").unwrap();
    ns.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
    ns.ip(["mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "0"]).unwrap();
    ns.ip(["mptcp", "endpoint", "add", "fd00:9:2::1", "signal"]).unwrap();
    let server = Running::start(
        Some(ns.name()),
        &["serve", "--kernel", "-1", "--no-progress"],
        "Server listening",
        Duration::from_secs(10),
    );
    let out = run(
        Some(ns.name()),
        &[
            "send",
            "10.9.1.1",
            "-n",
            "16M",
            "--json",
            "--add-addr-accepted",
            "1",
            "--path",
            "dev=mptc1,addr=10.9.1.2/24,peer=10.9.1.1",
            "--path",
            "dev=mptc2,addr=fd00:9:2::2/64,peer=fd00:9:2::1,flags=none",
        ],
        Duration::from_secs(45),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = parse("mptun send", &out.stdout);
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true);
    let subs = subflows(&v);
    assert!(subs.iter().any(|(l, r)| ip_of(l) == "10.9.1.2" && ip_of(r) == "10.9.1.1"), "{subs:?}");
    assert!(subs.iter().any(|(l, r)| ip_of(l) == "fd00:9:2::2" && ip_of(r) == "fd00:9:2::1"), "{subs:?}");
    let v6 = v["end"]["streams"][0]["subflows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["remote"].as_str().is_some_and(|r| r.contains("fd00:9:2::1")))
        .unwrap();
    assert!(v6["bytes"].as_u64().unwrap_or(0) > 0, "the IPv6 subflow carried data: {v6}");
    drop(server);
}
