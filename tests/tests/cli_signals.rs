//! Interrupts and early failures of `mptun send`/`serve`/`lab`, as a user
//! meets them: SIGINT mid-transfer ends the test with its
//! summary and exit 130 and leaves the server ready at once; a connection
//! to an address the server does not own is refused at once; `--json`
//! always prints a document (with `error` on failure). Needs root: skipped
//! with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::time::{Duration, Instant};

use mptun_io::testutil::require_netns;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use support::{run, Running};

fn server(lab: &Lab, port: &str) -> Running {
    Running::start(
        Some(lab.b.name()),
        &["serve", "--topology", "lab-b:1", "-p", port, "--no-progress"],
        "Server listening",
        Duration::from_secs(10),
    )
}

fn parse(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not one JSON document ({e}): {stdout}"))
}

/// The server takes a full 1 MB test from a fresh client right away.
fn next_client_works(lab: &Lab, dst: &str, server: &Running) {
    let t0 = Instant::now();
    let out = run(
        Some(lab.a.name()),
        &["send", dst, "-n", "1M", "--topology", "lab-a:1", "--json", "--connect-timeout", "1"],
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "the next client failed ({}): {} {}; server: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.output()
    );
    let v = parse(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true));
    println!("next client done in {:?}", t0.elapsed());
}

/// SIGINT to a client 2.5 s into its test: it exits 130 within 5 s and
/// prints (JSON) what was measured, iperf3's interrupt `error`, and the
/// digests of a clean end; the report and stderr.
fn interrupt_client(ns: &str, args: &[&str]) -> (Value, String) {
    let client = Running::spawn(Some(ns), args);
    std::thread::sleep(Duration::from_millis(2500));
    let t0 = Instant::now();
    client.signal(libc::SIGINT);
    let (st, out, err) = client.finish(Duration::from_secs(8));
    let took = t0.elapsed();
    assert_eq!(st.code(), Some(130), "{args:?}: exit {st}; stderr {err}; stdout {out}");
    // A stop that waited for a timeout would take the 30 s test's length; 5 s leaves a loaded
    // host room and still tells the two apart.
    assert!(took < Duration::from_secs(5), "{args:?}: took {took:?} to stop");
    let v = parse(&out);
    assert_eq!(v["error"], "interrupt - the client has terminated", "{v:#}");
    assert!(v["end"]["sum_received"]["bytes"].as_u64().unwrap() > 0, "{:#}", v["end"]);
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true), "{args:?}: a clean end, both sides agree");
    (v, err)
}

/// SIGINT to the server `srv` 2.5 s into a client's test: the client ends
/// normally and early with both digests agreeing, the server exits 130.
fn interrupt_server(ns: &str, args: &[&str], srv: Running) {
    let client = Running::spawn(Some(ns), args);
    std::thread::sleep(Duration::from_millis(2500));
    srv.signal(libc::SIGINT);
    let (st, out, err) = client.finish(Duration::from_secs(8));
    assert!(st.success(), "{args:?}: the client ends normally: {st}; {err}; {out}");
    let v = parse(&out);
    assert!(v["end"]["sum_received"]["bytes"].as_u64().unwrap() > 0);
    assert!(v["end"]["sum_received"]["seconds"].as_f64().unwrap() < 10.0, "ended early: {:#}", v["end"]);
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true), "{args:?}");
    assert_eq!(srv.wait(Duration::from_secs(5)).code(), Some(130), "{args:?}");
}

/// SIGINT to a sending client mid-transfer: summary (JSON with what was
/// measured, and iperf3's interrupt `error`), exit 130 within a second or
/// two, and the server takes the next client at once. Then the same for
/// a receiving client (`-R`): it asks the server to stop.
#[test]
fn cli_sigint_to_the_client_ends_the_test_cleanly() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clsgc", 1).unwrap();
    let srv = server(&lab, "5201");
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    for reverse in [false, true] {
        let mut args = vec!["send", &dst, "-t", "30", "--topology", "lab-a:1", "--json"];
        if reverse {
            args.push("-R");
        }
        let (v, err) = interrupt_client(lab.a.name(), &args);
        assert!(!v["intervals"].as_array().unwrap().is_empty(), "intervals measured before the interrupt");
        assert!(err.contains("interrupt"), "{err}");
        next_client_works(&lab, &dst, &srv);
    }
}

/// SIGINT to the server mid-test: the client learns at once (the server
/// stops sending, or asks the client to stop), both print a summary, the
/// server exits 130.
#[test]
fn cli_sigint_to_the_server_ends_the_test_at_both_ends() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clsgs", 1).unwrap();
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    for reverse in [false, true] {
        let mut args = vec!["send", &dst, "-t", "30", "--topology", "lab-a:1", "--json"];
        if reverse {
            args.push("-R");
        }
        interrupt_server(lab.a.name(), &args, server(&lab, "5201"));
    }
    // An idle server exits at once.
    let srv = server(&lab, "5201");
    srv.signal(libc::SIGTERM);
    assert_eq!(srv.wait(Duration::from_secs(2)).code(), Some(143));
}

/// The same interrupts over kernel sockets at both ends (`--kernel`), with
/// `--hash xxh3`, whose data is made and hashed on the I/O task itself
/// (no data thread): SIGINT to a sending and to a receiving client, then to
/// the server in both directions, and a timed test that ends on time. Each
/// ends cleanly with both digests agreeing.
#[test]
fn cli_sigint_with_kernel_sockets_ends_the_test_cleanly() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clsgk", 1).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    lab.kernel_mptcp(Side::A, false).unwrap();
    let dst = lab.kernel_addr(Side::B, 1).to_string();
    let kserver = || {
        Running::start(
            Some(lab.b.name()),
            &["serve", "--kernel", "-p", "5201", "--no-progress"],
            "Server listening",
            Duration::from_secs(10),
        )
    };
    let args = |reverse: bool, secs: &'static str| {
        let mut args = vec!["send", dst.as_str(), "--kernel", "-t", secs, "--json", "--hash", "xxh3"];
        if reverse {
            args.push("-R");
        }
        args
    };
    let srv = kserver();
    for reverse in [false, true] {
        let (v, _) = interrupt_client(lab.a.name(), &args(reverse, "30"));
        assert_eq!(v["end"]["mptcp"]["hash"], "xxh3");
    }
    // A timed test ends on time, every byte accounted for.
    let out = run(Some(lab.a.name()), &args(false, "2"), Duration::from_secs(15));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = parse(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true));
    // The sender enforces -t on its own clock; the receiver's span starts at its first read,
    // which a loaded host may delay, so it is only bounded by the sender's.
    let sent = v["end"]["sum_sent"]["seconds"].as_f64().unwrap();
    let received = v["end"]["sum_received"]["seconds"].as_f64().unwrap();
    assert!((2.0..5.0).contains(&sent), "a 2 s test sent for {sent} s");
    assert!(received > 0.5 && received <= sent + 1.0, "received for {received} s, sent for {sent} s");
    drop(srv);
    for reverse in [false, true] {
        interrupt_server(lab.a.name(), &args(reverse, "30"), kserver());
    }
}

/// An address routed into the server's TUN that is not the server's own:
/// refused at once (RST), with the cause; `--json` prints a document with
/// `error`. And a second client while a test runs is told "busy".
#[test]
fn cli_refused_and_busy_are_reported_at_once() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clsgr", 1).unwrap();
    let srv = server(&lab, "5201");
    // mptun B owns 10.201.0.2 on a TUN whose subnet is 10.201.0.0/24.
    let other = "10.201.0.99";
    for json in [false, true] {
        let mut args = vec!["send", other, "-n", "1M", "--topology", "lab-a:1", "--connect-timeout", "30"];
        if json {
            args.push("--json");
        }
        let t0 = Instant::now();
        let out = run(Some(lab.a.name()), &args, Duration::from_secs(15));
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("connection refused"), "{err}");
        assert!(took < Duration::from_secs(10), "refused at once, not after the 30 s connect timeout: {took:?}");
        if json {
            let v = parse(&String::from_utf8_lossy(&out.stdout));
            let e = v["error"].as_str().expect("error");
            assert!(e.contains("connection refused"), "{v:#}");
            assert!(v["start"].is_object() && v["intervals"].is_array() && v["end"].is_object(), "{v:#}");
        } else {
            assert!(out.stdout.is_empty());
        }
    }
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    // Connected (iperf3's "connected to" line) before the second client starts, and long enough
    // that the second one's start-up on a loaded host still meets it running.
    let first = Running::spawn_ready(
        Some(lab.a.name()),
        &["send", &dst, "-t", "8", "--topology", "lab-a:1"],
        "connected to",
        Duration::from_secs(15),
    );
    let out = run(Some(lab.a.name()), &["send", &dst, "-n", "1M", "--topology", "lab-a:1"], Duration::from_secs(15));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("busy"), "{err}");
    let (st, _, err) = first.finish(Duration::from_secs(15));
    assert!(st.success(), "the running test was not disturbed: {err}");
    drop(srv);
}

/// SIGINT to `mptun lab` mid-run: it exits 130 and leaves none of its
/// namespaces, processes or state directory behind.
#[test]
fn cli_sigint_to_lab_tears_everything_down() {
    if require_netns().is_some() {
        return;
    }
    if !support::linkem_built() {
        return;
    }
    let name = format!("clsgl{}", std::process::id() % 100_000);
    let scripts = concat!(env!("CARGO_MANIFEST_DIR"), "/../netns-scripts");
    for wait_ms in [1500, 6000] {
        let lab = Running::spawn(None, &["lab", "aggregate", "-n", "1G", "--name", &name, "--scripts", scripts]);
        std::thread::sleep(Duration::from_millis(wait_ms));
        lab.signal(libc::SIGINT);
        let (st, out, err) = lab.finish(Duration::from_secs(30));
        assert_eq!(st.code(), Some(130), "after {wait_ms} ms: {st}; {err}; {out}");
        let ns = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
        let ns = String::from_utf8_lossy(&ns.stdout);
        assert!(!ns.contains(&format!("{name}-")), "namespaces left after {wait_ms} ms: {ns}");
        let state = std::env::temp_dir().join(format!("mptun-lab-{name}"));
        assert!(!state.exists(), "{} left behind", state.display());
    }
}

/// The figures add up: the total Retr is the sum of the subflows', and a
/// subflow whose path is down (its MP_JOIN never answered) is listed with
/// its state but not counted as in use. Counters are the test's own: a
/// second test on the same server reports the same order of packets, not
/// the server's lifetime.
#[test]
fn cli_totals_are_sums_and_dead_subflows_do_not_count() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clsgt", 2).unwrap();
    let srv = server(&lab, "5201");
    lab.link_down(Side::A, 2).unwrap();
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let mut rx_segs = Vec::new();
    for size in ["8M", "64K"] {
        let out = run(
            Some(lab.a.name()),
            &["send", &dst, "-n", size, "--topology", "lab-a:2", "--json"],
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v = parse(&String::from_utf8_lossy(&out.stdout));
        let sfs = v["end"]["streams"][0]["subflows"].as_array().unwrap().clone();
        let sum: u64 = sfs.iter().map(|s| s["retransmits"].as_u64().unwrap()).sum();
        assert_eq!(v["end"]["sum_sent"]["retransmits"].as_u64(), Some(sum), "{:#}", v["end"]);
        assert_eq!(v["end"]["mptcp"]["subflows_max"], 1, "the dead path's subflow is not in use: {sfs:#?}");
        let dead: Vec<_> = sfs.iter().filter(|s| s["state"].as_str().unwrap_or("").starts_with("never")).collect();
        println!("subflows: {sfs:?}");
        assert!(dead.iter().all(|s| s["bytes"] == 0), "{dead:?}");
        rx_segs.push(v["end"]["mptcp"]["peer_counters"]["TcpInSegs"].as_u64().unwrap_or(0));
    }
    // Per-test deltas: the second test's counters are not the first's plus its own. The server
    // takes GRO super-packets of up to 64 KiB, so 8 MiB is at least 128 received segments however
    // the data batched, and 64 KiB well under 128 (at most 45 wire segments and the handshakes);
    // lifetime counters would make the second figure the larger.
    assert!(rx_segs[0] >= 128 && rx_segs[1] < rx_segs[0], "server counters per test: {rx_segs:?}");
    drop(srv);
}
