//! Path-manager control of `mptun send`/`mptun serve` against the kernel's
//! in-kernel path manager: `mptun send --add-addr-accepted 1`
//! joins the address a kernel server announces (`ip mptcp endpoint add ADDR
//! signal`), and not without it (Linux's default limit is 0); a kernel
//! client (`ip mptcp limits set add_addr_accepted 1 subflows 1`) joins the
//! address `mptun serve` announces from a `signal` path. Both checked with
//! the counters of both ends (nstat's, from /proc/net/netstat, and mptun's)
//! and the subflows the connection reports. Needs root: skipped with a
//! reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::time::Duration;

use mptun_io::testutil::require_netns;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use support::{json_document as parse, run, Running};

fn counter(v: &Value, map: &str, name: &str) -> u64 {
    v["end"]["mptcp"][map][name].as_u64().unwrap_or(0)
}

/// The established subflows of the report whose remote address is `ip`.
fn subflows_to<'a>(v: &'a Value, ip: &str) -> Vec<&'a Value> {
    v["end"]["streams"][0]["subflows"]
        .as_array()
        .expect("subflows[]")
        .iter()
        .filter(|s| s["remote"].as_str().is_some_and(|r| r.starts_with(&format!("{ip}:"))))
        .filter(|s| !s["state"].as_str().unwrap_or("").starts_with("never"))
        .collect()
}

/// A kernel server on path 1 announcing its path-2 address; mptun sends
/// from path 1 (its path 2 is an address with no flags, so nothing but the
/// announcement can make a second subflow).
#[test]
fn cli_send_joins_what_a_kernel_server_announces_when_allowed() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clpma", 2).unwrap();
    lab.b.sysctl("net.mptcp.enabled", "1").unwrap();
    let announced = lab.kernel_addr(Side::B, 2).to_string();
    lab.mptcp(Side::B, &["limits", "set", "subflows", "2", "add_addr_accepted", "0"]).unwrap();
    lab.mptcp(Side::B, &["endpoint", "add", &announced, "dev", "b2", "signal"]).unwrap();
    let srv_addr = lab.kernel_addr(Side::B, 1).to_string();
    let paths = ["--path", "dev=mpta1,addr=10.101.0.2/24", "--path", "dev=mpta2,addr=10.102.0.2/24,flags=none"];
    for accepted in [None, Some("1")] {
        let server = Running::start(
            Some(lab.b.name()),
            // Every address: the kernel looks up a listener for each MP_JOIN's destination.
            &["serve", "--kernel", "-1", "--no-progress"],
            "Server listening",
            Duration::from_secs(10),
        );
        let mut args = vec!["send", srv_addr.as_str(), "-n", "24M", "--json"];
        args.extend_from_slice(&paths);
        if let Some(n) = accepted {
            args.extend_from_slice(&["--add-addr-accepted", n]);
        }
        let out = run(Some(lab.a.name()), &args, Duration::from_secs(30));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v = parse("mptun send", &out.stdout);
        assert_eq!(v["end"]["mptcp"]["sha256_match"], true);
        let pm = &v["start"]["mptun"]["path_manager"];
        assert_eq!(pm["add_addr_accepted"], if accepted.is_some() { 1 } else { 0 }, "{pm}");
        assert_eq!(pm["subflows"], 2, "Linux's default limit: {pm}");
        // Announced either way: the kernel sent it, mptun received it.
        assert!(counter(&v, "peer_counters", "MPTcpExtAddAddrTx") >= 1, "{:#}", v["end"]["mptcp"]);
        assert!(counter(&v, "counters", "MPTcpExtAddAddr") >= 1, "{:#}", v["end"]["mptcp"]);
        let joined = subflows_to(&v, &announced);
        if accepted.is_some() {
            assert_eq!(joined.len(), 1, "one subflow to {announced}: {:#}", v["end"]);
            assert!(counter(&v, "counters", "MPTcpExtMPJoinSynAckRx") >= 1, "{:#}", v["end"]["mptcp"]);
            assert!(counter(&v, "peer_counters", "MPTcpExtMPJoinAckRx") >= 1, "{:#}", v["end"]["mptcp"]);
            assert_eq!(v["end"]["mptcp"]["subflows_max"], 2);
        } else {
            assert!(joined.is_empty(), "add_addr_accepted 0 joins nothing: {:#}", v["end"]["streams"][0]["subflows"]);
            assert_eq!(counter(&v, "counters", "MPTcpExtMPJoinSynAckRx"), 0);
            assert_eq!(v["end"]["mptcp"]["subflows_max"], 1);
        }
        drop(server);
    }
}

/// `mptun serve` with a `signal` path; a kernel client allowed one
/// announcement and one subflow joins it.
#[test]
fn cli_kernel_client_joins_what_serve_announces() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clpmb", 2).unwrap();
    lab.a.sysctl("net.mptcp.enabled", "1").unwrap();
    lab.mptcp(Side::A, &["limits", "set", "add_addr_accepted", "1", "subflows", "1"]).unwrap();
    let announced = lab.mptun_addr(Side::B, 2).to_string();
    let server = Running::spawn_ready(
        Some(lab.b.name()),
        &[
            "serve",
            "-1",
            "--json",
            "--no-progress",
            "--path",
            "dev=mptb1,addr=10.201.0.2/24",
            "--path",
            "dev=mptb2,addr=10.202.0.2/24,signal",
        ],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let out = run(Some(lab.a.name()), &["send", "--kernel", &dst, "-n", "24M", "--json"], Duration::from_secs(30));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = parse("mptun send --kernel", &out.stdout);
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true);
    // The kernel client's nstat counters, and mptun's (the server's) as it reported them.
    assert!(counter(&v, "counters", "MPTcpExtAddAddr") >= 1, "{:#}", v["end"]["mptcp"]);
    assert!(counter(&v, "counters", "MPTcpExtMPJoinSynAckRx") >= 1, "{:#}", v["end"]["mptcp"]);
    assert!(counter(&v, "peer_counters", "MPTcpExtAddAddrTx") >= 1, "{:#}", v["end"]["mptcp"]);
    assert!(counter(&v, "peer_counters", "MPTcpExtMPJoinAckRx") >= 1, "{:#}", v["end"]["mptcp"]);
    assert_eq!(subflows_to(&v, &announced).len(), 1, "{:#}", v["end"]["streams"][0]["subflows"]);
    let (st, stdout, stderr) = server.finish(Duration::from_secs(15));
    assert!(st.success(), "mptun serve: {st}: {stderr}");
    let s = parse("mptun serve", stdout.as_bytes());
    let eps = &s["start"]["mptun"]["path_manager"]["endpoints"];
    assert_eq!(eps[1], format!("{announced} id 2 signal"), "{eps}");
    assert_eq!(subflows_to(&s, "10.0.2.1").len(), 1, "mptun's view: {:#}", s["end"]["streams"][0]["subflows"]);
}
