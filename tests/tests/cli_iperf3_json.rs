//! `mptun send --json` and `mptun serve --json` against real `iperf3 -J`
//! on the same namespaces: every key iperf3 prints is in
//! mptun's document with a value of the same JSON type (mptun may add keys,
//! none may be missing), at the client and at the server, forward and
//! reverse (`-R`); the `sender` flags are iperf3's; `-t 3` gives three
//! intervals; both ends of an mptun test carry the same cookie. And
//! `netns-scripts/send-vs-iperf3.sh` (BENCH.md's default-check table) runs
//! and cleans up. Needs root
//! (namespaces) and `iperf3` (installed by `.ci/run`): skipped with a reason
//! otherwise, failed when MPTUN_REQUIRE_NETNS=1.

#[path = "cli_support.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mptun_io::testutil::require_netns;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use support::{json_document as parse, run, Running};

/// JSON's types (numbers are one type: iperf3 prints `0` and `1.5` alike).
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Where `ours` lacks a key of `reference` or has another type there.
/// Arrays: the first element of each (iperf3's elements share a shape).
fn missing(reference: &Value, ours: &Value, at: &str, out: &mut Vec<String>) {
    if kind(reference) != kind(ours) {
        out.push(format!("{at}: iperf3 has a {}, mptun a {} ({ours})", kind(reference), kind(ours)));
        return;
    }
    match (reference, ours) {
        (Value::Object(r), Value::Object(o)) => {
            for (k, rv) in r {
                match o.get(k) {
                    Some(ov) => missing(rv, ov, &format!("{at}.{k}"), out),
                    None => out.push(format!("{at}.{k} missing (iperf3: {rv})")),
                }
            }
        }
        (Value::Array(r), Value::Array(o)) => match (r.first(), o.first()) {
            (Some(rv), Some(ov)) => missing(rv, ov, &format!("{at}[0]"), out),
            (Some(_), None) => out.push(format!("{at}: empty, iperf3's is not")),
            _ => {}
        },
        _ => {}
    }
}

/// `iperf3 -s -1 -J` in B and `iperf3 -c ... -J` in A: (client, server) documents.
fn iperf3(lab: &Lab, args: &[&str]) -> (Value, Value) {
    let srv_addr = lab.kernel_addr(Side::B, 1).to_string();
    let mut server = Command::new("ip")
        .args(["netns", "exec", lab.b.name(), "iperf3", "-s", "-1", "-J", "-B", &srv_addr, "-p", "5301"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iperf3 -s");
    let deadline = Instant::now() + Duration::from_secs(20);
    // The server prints nothing before its test ends: retry until it listens.
    let client = loop {
        let out = Command::new("ip")
            .args(["netns", "exec", lab.a.name(), "iperf3", "-c", &srv_addr, "-p", "5301", "-J"])
            .args(args)
            .output()
            .expect("run iperf3 -c");
        let v = parse("iperf3 client", &out.stdout);
        if v.get("error").is_none() {
            break v;
        }
        if Instant::now() > deadline {
            let _ = server.kill();
            panic!("iperf3 client: {v:#}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    while server.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = server.kill();
            panic!("iperf3 -s -1 did not exit after its test");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = server.wait_with_output().expect("iperf3 -s output");
    (client, parse("iperf3 server", &out.stdout))
}

/// `mptun serve -1 --json` in B and `mptun send --json` in A: (client, server).
fn mptun(lab: &Lab, args: &[&str]) -> (Value, Value) {
    let server = Running::spawn_ready(
        Some(lab.b.name()),
        &["serve", "--topology", "lab-b:1", "-1", "--json", "--no-progress"],
        "Server listening",
        Duration::from_secs(10),
    );
    let dst = lab.mptun_addr(Side::B, 1).to_string();
    let mut send = vec!["send", &dst, "--topology", "lab-a:1", "--json"];
    send.extend_from_slice(args);
    let out = run(Some(lab.a.name()), &send, Duration::from_secs(30));
    assert!(out.status.success(), "mptun send: {}", String::from_utf8_lossy(&out.stderr));
    let client = parse("mptun send", &out.stdout);
    let (st, stdout, stderr) = server.finish(Duration::from_secs(15));
    assert!(st.success(), "mptun serve: {st}: {stderr}");
    (client, parse("mptun serve", stdout.as_bytes()))
}

/// Whether these tests can run here: namespaces (root) and iperf3 (`.ci/run` installs it); prints why not.
fn ready() -> bool {
    if require_netns().is_some() {
        return false;
    }
    if Command::new("iperf3").arg("--version").output().is_err() {
        assert!(std::env::var("MPTUN_REQUIRE_NETNS").as_deref() != Ok("1"), "iperf3 is not installed");
        println!("skipped: iperf3 is not installed (apt-get install iperf3)");
        return false;
    }
    true
}

#[test]
fn cli_json_has_every_iperf3_key_with_its_type() {
    if !ready() {
        return;
    }
    let lab = Lab::new("cljson", 1).unwrap();
    for reverse in [false, true] {
        let mut args = vec!["-t", "3"];
        if reverse {
            args.push("-R");
        }
        let (ic, is) = iperf3(&lab, &args);
        let (mc, ms) = mptun(&lab, &args);
        for (side, reference, ours) in [("client", &ic, &mc), ("server", &is, &ms)] {
            let mut gaps = Vec::new();
            missing(reference, ours, "", &mut gaps);
            assert!(gaps.is_empty(), "reverse {reverse}, {side}: {}\nmptun's document: {ours:#}", gaps.join("\n"));
            // iperf3's meaning of `sender`: whether this side sent the data.
            for ptr in ["/end/sum_sent/sender", "/end/sum_received/sender", "/intervals/0/sum/sender"] {
                assert_eq!(reference.pointer(ptr), ours.pointer(ptr), "reverse {reverse}, {side}: {ptr}");
            }
            assert_eq!(ours["start"]["test_start"]["protocol"], "TCP");
            assert_eq!(ours["start"]["mptun"]["mode"], "mptcp", "MPTCP under mptun's own keys");
            assert_eq!(ours["start"]["test_start"]["reverse"], u8::from(reverse));
            let n = ours["intervals"].as_array().unwrap().len();
            assert_eq!(n, 3, "reverse {reverse}, {side}: -t 3 gives three intervals: {:#}", ours["intervals"]);
            let sender = ours["end"]["sum_sent"]["sender"] == true;
            let es = &ours["end"]["streams"][0]["sender"];
            if sender {
                // The sender's extremes come from its interval samples.
                assert!(es["max_snd_cwnd"].as_u64().unwrap() > 0, "{es}");
                assert!(es["max_snd_wnd"].as_u64().unwrap() > 0, "{es}");
                let (lo, mean, hi) = (es["min_rtt"].as_u64(), es["mean_rtt"].as_u64(), es["max_rtt"].as_u64());
                assert!(lo > Some(0) && lo <= mean && mean <= hi, "{es}");
                assert!(ours["intervals"][0]["streams"][0]["pmtu"].as_u64().unwrap() >= 1280);
            }
        }
        assert_eq!(mc["start"]["cookie"].as_str().map(str::len), Some(36));
        assert_eq!(mc["start"]["cookie"], ms["start"]["cookie"], "one test, one cookie at both ends");
        assert_eq!(
            ms["start"]["accepted_connection"]["port"], mc["start"]["connected"][0]["local_port"],
            "the server names the client's port"
        );
    }
}

/// `netns-scripts/send-vs-iperf3.sh`, the script behind BENCH.md's table of
/// the CLI's default check against iperf3, in one short round: a figure for
/// iperf3 and for each check (each named as the report names it), their
/// medians, and no namespace left behind; a run that fails half-way (a
/// check mptun does not know) exits non-zero and also cleans up.
#[test]
fn send_vs_iperf3_script_reports_and_cleans_up() {
    if !ready() {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../netns-scripts/send-vs-iperf3.sh");
    let bin = support::mptun_bin();
    let prefix = format!("svi{}", std::process::id() % 100_000);
    // `timeout` sends TERM: the script's trap deletes its namespaces then too.
    let script_run = |hashes: &[&str]| {
        let mut c = Command::new("timeout");
        c.args(["120", "bash", script, "--rounds", "1", "--size", "64M", "--prefix", &prefix, "--mptun"]);
        c.arg(&bin);
        for h in hashes {
            c.args(["--hash", h]);
        }
        support::own_control_dir(&mut c);
        let out = c.stdin(Stdio::null()).output().expect("run the script");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            support::namespaces_named(&prefix).is_empty(),
            "namespaces left: {:?}",
            support::namespaces_named(&prefix)
        );
        (out.status, text, err)
    };

    let (st, text, err) = script_run(&["sha256", "blake3"]);
    assert!(st.success(), "the script failed ({st}): {text}\n{err}");
    let gbps = |line: &str| -> f64 {
        let w: Vec<&str> = line.split_whitespace().collect();
        let at = w.iter().position(|&x| x == "Gbit/s").unwrap_or_else(|| panic!("no figure in {line:?}"));
        w[at - 1].parse().unwrap_or_else(|_| panic!("no figure in {line:?}"))
    };
    for (start, check) in [
        ("round 1 iperf3 ", None),
        ("round 1 mptun default ", Some("(check: xxh3)")),
        ("round 1 mptun sha256 ", Some("(check: sha256)")),
        ("round 1 mptun blake3 ", Some("(check: blake3)")),
        ("median iperf3 ", None),
        ("median default ", None),
        ("median sha256 ", None),
        ("median blake3 ", None),
    ] {
        let line = text.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no {start:?} in {text}"));
        assert!(gbps(line) > 0.0, "{line}");
        if let Some(check) = check {
            assert!(line.contains(check), "{line} should name {check}");
        }
    }
    println!("{text}");

    let (st, text, err) = script_run(&["no-such-hash"]);
    assert!(!st.success(), "a failing mptun send must fail the script: {text}\n{err}");
    assert!(err.contains("no-such-hash") && err.contains("no JSON report"), "failed for another reason: {err}");
}
