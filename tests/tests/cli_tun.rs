//! `mptun serve` and `mptun send` as users run them: each process inside its
//! own namespace of a two-path lab (tests/src/lab.rs), creating its own TUN
//! devices there (`--topology lab-a` / `lab-b`), and the kernel's MPTCP at
//! either end with `--kernel`. Needs root: skipped with a reason otherwise,
//! failed when MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::time::Duration;

use mptun_io::testutil::require_netns;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use sha2::{Digest, Sha256};
use support::{run, Running};

const LIMIT: Duration = Duration::from_secs(45);

fn json(out: &std::process::Output, server: &Running) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mptun send failed ({}): stderr {}; stdout {text}; server output: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.output()
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("send --json is not JSON ({e}): {text}"))
}

fn f64_at(v: &Value, ptr: &str) -> f64 {
    v.pointer(ptr).and_then(Value::as_f64).unwrap_or_else(|| panic!("{ptr} missing in {v:#}"))
}

/// Checks the iperf3 shape and returns the per-subflow bytes of end.streams[0].
fn check_iperf3_shape(v: &Value) -> Vec<u64> {
    for ptr in ["/start/connected/0/local_host", "/start/test_start/protocol", "/start/timestamp/timesecs"] {
        assert!(v.pointer(ptr).is_some(), "{ptr} missing");
    }
    let intervals = v["intervals"].as_array().expect("intervals[]");
    assert!(!intervals.is_empty(), "no intervals");
    for i in intervals {
        let s = &i["streams"][0];
        for k in ["start", "end", "seconds", "bytes", "bits_per_second", "sender"] {
            assert!(s.get(k).is_some(), "intervals[].streams[].{k} missing in {s}");
        }
    }
    for side in ["sum_sent", "sum_received"] {
        for k in ["start", "end", "seconds", "bytes", "bits_per_second"] {
            assert!(v["end"][side].get(k).is_some(), "end.{side}.{k} missing");
        }
    }
    assert!(v["end"]["streams"][0]["sender"]["bytes"].is_u64());
    assert!(v["end"]["streams"][0]["receiver"]["bytes"].is_u64());
    for k in ["host_total", "host_user", "host_system", "remote_total", "remote_user", "remote_system"] {
        assert!(v["end"]["cpu_utilization_percent"][k].is_f64(), "cpu_utilization_percent.{k}");
    }
    v["end"]["streams"][0]["subflows"]
        .as_array()
        .expect("end.streams[0].subflows[]")
        .iter()
        .map(|s| s["bytes"].as_u64().expect("subflow bytes"))
        .collect()
}

/// `mptun serve` in B, `mptun send -n 64M --json` in A, two paths (one TUN
/// per path in A), SHA-256 verified, goodput > 0, both subflows carried data.
#[test]
fn cli_send_64m_two_paths_over_tun() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("cli", 2).unwrap();
    let server = Running::start(
        Some(lab.b.name()),
        &["serve", "--topology", "lab-b:1", "-1", "-p", "5201"],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let out = run(Some(lab.a.name()), &["send", &dst, "-n", "64M", "--topology", "lab-a:2", "--json"], LIMIT);
    let v = json(&out, &server);
    let sf = check_iperf3_shape(&v);
    let st = server.wait(Duration::from_secs(15));
    assert!(st.success(), "server failed");
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true));
    assert_eq!(v["end"]["mptcp"]["mode"], "mptcp");
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(64 << 20));
    assert_eq!(v["end"]["mptcp"]["sha256_sent"], v["end"]["mptcp"]["sha256_received"]);
    // The default check is XXH3-128 (SHA-256 would measure itself, not the path), and the report says so.
    assert_eq!(v["end"]["mptcp"]["hash"], "xxh3");
    let goodput = f64_at(&v, "/end/sum_received/bits_per_second");
    println!("mptun -> mptun, 64 MiB over two TUN paths: {:.1} Mbit/s, subflow bytes {sf:?}", goodput / 1e6);
    assert!(goodput > 0.0);
    assert!(
        sf.len() >= 2 && sf.iter().take(2).all(|&b| b > 0),
        "both subflows must carry data: {sf:?} in {:#}",
        v["end"]
    );
    assert!(v["end"]["mptcp"]["peer_counters"]["MPTcpExtMPJoinSynRx"].as_u64().unwrap_or(0) >= 1, "{v:#}");
}

/// A file, forward (the server stores it) and back (reverse: the server
/// sends its --file), SHA-256 checked by the tool and by this test; and
/// forward again with `--hash blake3`, the digests BLAKE3's.
#[test]
fn cli_file_both_directions() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clf", 2).unwrap();
    let dir = std::env::temp_dir().join(format!("mptun-cli-file-{}", std::process::id()));
    let _cleanup = DirGuard(dir.clone());
    std::fs::create_dir_all(dir.join("in")).unwrap();
    let src = dir.join("payload.bin");
    let data = mptun_tests::xfer::Pattern::bytes(0x1234_5678_9abc_def0, 5_000_003);
    std::fs::write(&src, &data).unwrap();
    let (in_dir, src_s) = (dir.join("in").display().to_string(), src.display().to_string());
    let server = Running::start(
        Some(lab.b.name()),
        &["serve", "--topology", "lab-b:1", "--output-dir", &in_dir, "--file", &src_s],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let v = json(
        &run(
            Some(lab.a.name()),
            &["send", &dst, "--file", &src_s, "--hash", "sha256", "--topology", "lab-a:2", "--json"],
            LIMIT,
        ),
        &server,
    );
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true));
    let stored = std::fs::read(dir.join("in/payload.bin")).unwrap();
    assert!(stored == data, "the stored file differs from the original");
    let want = format!("{:x}", Sha256::digest(&data));
    assert_eq!(v["end"]["mptcp"]["sha256_received"], Value::String(want.clone()));
    // Reverse: the server's --file comes back into a new path.
    let back = dir.join("back.bin").display().to_string();
    let v = json(
        &run(
            Some(lab.a.name()),
            &["send", &dst, "--reverse", "--file", &back, "--hash", "sha256", "--topology", "lab-a:2", "--json"],
            LIMIT,
        ),
        &server,
    );
    assert_eq!(v["end"]["mptcp"]["sha256_received"], Value::String(want));
    assert!(std::fs::read(&back).unwrap() == data, "the received file differs");
    assert_eq!(v["start"]["test_start"]["reverse"], 1);
    // The same file checked with BLAKE3 instead, both ends computing it;
    // the first copy goes first (the server stores only new files).
    std::fs::remove_file(dir.join("in/payload.bin")).unwrap();
    let v = json(
        &run(
            Some(lab.a.name()),
            &["send", &dst, "--file", &src_s, "--hash", "blake3", "--topology", "lab-a:2", "--json"],
            LIMIT,
        ),
        &server,
    );
    assert_eq!(v["end"]["mptcp"]["hash"], "blake3");
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true));
    let want = blake3::hash(&data).to_hex().to_string();
    assert_eq!(v["end"]["mptcp"]["sha256_sent"], Value::String(want.clone()));
    assert_eq!(v["end"]["mptcp"]["sha256_received"], Value::String(want));
    assert!(std::fs::read(dir.join("in/payload.bin")).unwrap() == data, "stored again, it differs");
    drop(server);
}

struct DirGuard(std::path::PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One tool, both stacks: an mptun sender to a kernel receiver
/// (`serve --kernel`), and a kernel sender (`send --kernel`) to an mptun
/// receiver, a duration test in reverse.
#[test]
fn cli_mptun_and_kernel_interwork() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("clk", 2).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let kaddr = lab.kernel_addr(Side::B, 1).to_string();
    let server = Running::start(
        Some(lab.b.name()),
        &["serve", "--kernel", "-1", "-p", "5202"],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = format!("{kaddr}:5202");
    let v =
        json(&run(Some(lab.a.name()), &["send", &dst, "-n", "16M", "--topology", "lab-a:2", "--json"], LIMIT), &server);
    assert!(server.wait(Duration::from_secs(15)).success());
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true));
    assert_eq!(v["end"]["mptcp"]["mode"], "mptcp", "MP_CAPABLE with the kernel");
    assert_eq!(v["start"]["mptun"]["stack"], "mptun");
    assert!(v["end"]["mptcp"]["peer_counters"]["MPTcpExtMPCapableSYNRX"].as_u64().unwrap_or(0) >= 1, "{v:#}");
    let sf = check_iperf3_shape(&v);
    assert!(sf.iter().filter(|&&b| b > 0).count() >= 2, "mptun joined a second subflow to the kernel: {sf:?}");

    // Kernel client in A (a `subflow` endpoint on path 2) -> mptun server in B, reverse, 2 s.
    lab.kernel_mptcp(Side::A, true).unwrap();
    let server = Running::start(
        Some(lab.b.name()),
        &["serve", "--topology", "lab-b:1", "-1", "-p", "5203"],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = format!("{}:5203", lab.mptun_addr(Side::B, 1));
    let v = json(&run(Some(lab.a.name()), &["send", &dst, "--kernel", "-t", "2", "-R", "--json"], LIMIT), &server);
    assert!(server.wait(Duration::from_secs(15)).success());
    assert_eq!(v["end"]["mptcp"]["sha256_match"], Value::Bool(true));
    assert_eq!(v["start"]["mptun"]["stack"], "kernel");
    assert_eq!(v["end"]["mptcp"]["mode"], "mptcp");
    assert!(f64_at(&v, "/end/sum_received/bits_per_second") > 0.0);
    // The receiver's span starts at its first read, which a loaded host may delay: bounded
    // loosely, the sender's -t is what ends the test.
    let secs = f64_at(&v, "/end/sum_received/seconds");
    assert!((1.0..5.0).contains(&secs), "a 2 s test lasts about 2 s: {secs} s");
}

/// `mptun serve --scheduler blest` sends its downloads with BLEST: the
/// server's report names the scheduler its accepted connection ran (read
/// from the connection, not from the flag), the client's its own default,
/// and the download over two paths arrives intact.
#[test]
fn cli_serve_scheduler_runs_the_downloads() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("csb", 2).unwrap();
    let server = Running::start(
        Some(lab.b.name()),
        &["serve", "--topology", "lab-b:1", "-1", "-p", "5203", "--scheduler", "blest", "--json"],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let out = run(
        Some(lab.a.name()),
        &["send", &dst, "-p", "5203", "-R", "-n", "16M", "--topology", "lab-a:2", "--json"],
        LIMIT,
    );
    let v = json(&out, &server);
    let (st, text, err) = server.finish(Duration::from_secs(15));
    assert!(st.success(), "server failed: {err}");
    let s: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("serve --json is not JSON ({e}): {text}"));
    assert_eq!(s["start"]["mptun"]["sender"], true, "{s:#}");
    assert_eq!(s["start"]["mptun"]["scheduler"], "blest", "{:#}", s["start"]);
    assert_eq!(v["start"]["mptun"]["scheduler"], "default", "{:#}", v["start"]);
    assert_eq!(v["end"]["mptcp"]["sha256_match"], true);
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(16 << 20));
    check_sending_figures_are_the_senders(&v, &s);
}

/// The receiving client's per-subflow retransmissions and cwnd are the
/// sending server's (from its trailer), not the receiver's own: every
/// subflow's are reported, they add up to the sender's total, and each cwnd
/// is the one the server's own report shows, or an earlier sample of it
/// (the server's report ends later than its trailer). A receiver sends
/// nothing but ACKs: its own cwnd would stay at the initial window.
fn check_sending_figures_are_the_senders(client: &Value, server: &Value) {
    let sf = |v: &Value| v["end"]["streams"][0]["subflows"].as_array().expect("subflows[]").clone();
    let (mine, theirs) = (sf(client), sf(server));
    assert!(!mine.is_empty());
    let mut retr = 0;
    for c in &mine {
        let s = theirs
            .iter()
            .find(|s| s["local"] == c["remote"] && s["remote"] == c["local"])
            .unwrap_or_else(|| panic!("the server does not list {c}: {theirs:#?}"));
        assert_eq!(c["sender_figures"], true, "{c}");
        let (cw, sw) = (c["max_snd_cwnd"].as_u64().unwrap(), s["max_snd_cwnd"].as_u64().unwrap());
        assert!(cw <= sw, "client shows cwnd {cw}, above the server's own maximum {sw}: {c} / {s}");
        assert_eq!(c["rtt"].as_u64().map(|r| r > 0), Some(true), "{c}");
        retr += c["retransmits"].as_u64().unwrap();
    }
    let most = mine.iter().map(|c| c["max_snd_cwnd"].as_u64().unwrap()).max().unwrap();
    assert!(most > 20 * 1460, "largest sender cwnd {most} B: still the initial window, a receiver's");
    assert_eq!(Some(retr), client["end"]["sum_sent"]["retransmits"].as_u64(), "{:#}", client["end"]);
}

/// A send to a network the namespace has no route to fails at once with
/// the kernel's answer, as kernel TCP's `connect` does ("Network is
/// unreachable"), instead of waiting out the connect timeout: the kernel
/// routing the TUN's packets answers the SYN with ICMP net unreachable.
/// The same with `--kernel` is the baseline the message is compared with.
#[test]
fn cli_send_to_an_unreachable_network_fails_at_once() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("unr", 2).unwrap();
    for kernel in [false, true] {
        let mut args = vec!["send", "10.77.0.1", "-n", "1M"];
        args.extend(if kernel { &["--kernel"][..] } else { &["--topology", "lab-a:2"][..] });
        let t0 = std::time::Instant::now();
        let out = run(Some(lab.a.name()), &args, LIMIT);
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        println!("kernel={kernel}: {took:?} exit {:?}: {err}", out.status.code());
        assert_eq!(out.status.code(), Some(1), "kernel={kernel}: {err}");
        assert!(err.contains("network unreachable"), "kernel={kernel}: {err}");
        assert!(took < Duration::from_secs(3), "kernel={kernel}: took {took:?}, not at once: {err}");
    }
}
