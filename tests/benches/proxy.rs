//! Throughput of one proxied bulk connection: curl downloading through `mptun proxy local` -> `mptun proxy exit` over two
//! unconstrained veth paths, against the same bytes moved by `mptun send -R`
//! directly (the same stack without the proxy), by the kernel's MPTCP
//! (`mptcpize run curl` from an IPPROTO_MPTCP HTTP server, and `mptun send
//! --kernel -R`), and plain curl over one kernel TCP path. Every figure is
//! measured in the same run, the median of `--runs`; the ratios are the
//! proxy's overhead. Needs root (two namespaces `mpt-px-bench...`, deleted
//! at exit), curl, and release builds of the tools:
//!
//! ```sh
//! cargo build --release -p mptun-cli -p linkem
//! cargo bench -p mptun-tests --bench proxy -- --bytes 512M --runs 3
//! ```
//!
//! Prints figures, asserts nothing about speed; it fails only when a
//! transfer does (wrong size, a tool erroring).
//!
//! `--flood` measures instead what hostile clients cost a real one: the
//! same download through one proxy pair over two paths of `--rate` each
//! (100mbit: a tbf shaper both ways; `--rate 0`: unconstrained), alone and
//! while `--idle` (2000) connections at each end never send a SOCKS
//! greeting or an exit header and `--slow` (100) SOCKS5 clients send
//! theirs a byte a second, each reconnecting when the proxy ends it, at
//! most once per `--renew` seconds (10), alternating, `--runs` times; then
//! the goodput ratio and the largest RSS of each proxy seen in each phase:
//!
//! ```sh
//! cargo bench -p mptun-tests --bench proxy -- --flood --bytes 512M --runs 3
//! ```
//!
//! `--concurrent N` (1000) measures the proxy at scale: N downloads begun
//! at once through one proxy pair over two unconstrained veth paths, of
//! `--bytes`/4 to `--bytes` each (4M: 1 to 4 MiB, distinct objects, every
//! SHA-256 checked), against one download of `--single` (512M) alone
//! through the same pair, alternating, `--runs` times (3); both ends run
//! with `--max-handshakes 1024 --max-handshakes-per-source 1024` and
//! `--memory-budget` (24G; the default is 1G). Prints both goodputs
//! (medians), their ratio, each download's completion time (min, median,
//! max), and both ends' RSS: before, peak (VmHWM), 2 s after the last
//! download and after `--settle` seconds more (65: past TIME_WAIT):
//!
//! ```sh
//! cargo bench -p mptun-tests --bench proxy -- --concurrent 1000 --bytes 4M --runs 3
//! ```

#[path = "../tests/proxy_support.rs"]
mod px;
use px::support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use mptun_io::testutil::require_netns;
use mptun_tests::http::HttpServer;
use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use support::{run, Running};

const KEY: &str = "px-bench-key-0123456789abcdef\n";

#[path = "proxy/flood.rs"]
mod flood;
#[path = "proxy/many.rs"]
mod many;

fn arg(name: &str) -> Option<String> {
    let a: Vec<String> = std::env::args().collect();
    a.iter().position(|x| x == name).and_then(|i| a.get(i + 1).cloned())
}

fn parse_bytes(s: &str) -> u64 {
    let (n, m) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (
            &s[..i],
            match &s[i..] {
                "K" => 1u64 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                u => panic!("--bytes unit {u}"),
            },
        ),
        None => (s, 1),
    };
    n.parse::<u64>().expect("--bytes N[K|M|G]") * m
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `curl` (optionally under `mptcpize run`) in A: the goodput in bit/s of
/// downloading `url`, checked to be `n` bytes.
fn curl(lab: &Lab, pre: &[&str], args: &[&str], n: u64) -> f64 {
    let o = Command::new("ip")
        .args(["netns", "exec", lab.a.name()])
        .args(pre)
        .args(["curl", "-sS", "--max-time", "120", "-o", "/dev/null", "-w", "%{size_download} %{time_total}"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("curl");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let mut it = out.split_whitespace();
    let size: u64 = it.next().and_then(|x| x.parse().ok()).expect("size_download");
    let secs: f64 = it.next().and_then(|x| x.parse().ok()).expect("time_total");
    assert_eq!(size, n, "curl {args:?} got {size} bytes");
    n as f64 * 8.0 / secs
}

/// A scratch directory (removed by the caller) with the key file in it.
fn key_file(case: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("mptun-px-{case}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key");
    std::fs::write(&key, KEY).unwrap();
    (dir, key.display().to_string())
}

/// The exit in B on mptun's stack (path 1), allowing the HTTP server, and
/// the local proxy in A on two paths; `extra` goes to both. (exit, local)
fn start_pair(lab: &Lab, key: &str, extra: &[&str]) -> (Running, Running) {
    let exit_addr = exit_addr(lab);
    let mut xa =
        vec!["proxy", "exit", "--topology", "lab-b:1", "--key-file", key, "--allow", "10.0.1.2:8080", "--json"];
    let mut la = vec!["proxy", "local", "--topology", "lab-a:2", "--exit", &exit_addr, "--key-file", key, "--json"];
    xa.extend_from_slice(extra);
    la.extend_from_slice(extra);
    let exit = Running::start(Some(lab.b.name()), &xa, "\"listening\"", Duration::from_secs(15));
    let local = Running::start(Some(lab.a.name()), &la, "\"listening\"", Duration::from_secs(15));
    (exit, local)
}

/// Where the local proxy reaches the exit.
fn exit_addr(lab: &Lab) -> String {
    format!("{}:1081", lab.mptun_addr(Side::B, 1))
}

fn proxy_run(lab: &Lab, key: &str, url: &str, n: u64) -> (f64, Vec<u64>) {
    let (exit, local) = start_pair(lab, key, &[]);
    let bps = curl(lab, &[], &["--socks5", "127.0.0.1:1080", url], n);
    let mut sf = Vec::new();
    for _ in 0..100 {
        let close = local
            .output()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["event"] == "close");
        if let Some(c) = close {
            sf = c["subflows"].as_array().unwrap().iter().map(|s| s["bytes_received"].as_u64().unwrap_or(0)).collect();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(local);
    drop(exit);
    (bps, sf)
}

fn send_run(lab: &Lab, kernel: bool, n: u64) -> f64 {
    let (srv_args, dst, topo): (Vec<&str>, String, Vec<&str>) = if kernel {
        (
            vec!["serve", "--kernel", "-1", "-p", "5202"],
            format!("{}:5202", lab.kernel_addr(Side::B, 1)),
            vec!["--kernel"],
        )
    } else {
        (
            vec!["serve", "--topology", "lab-b:1", "-1", "-p", "5201"],
            lab.mptun_addr(Side::B, 1).to_string(),
            vec!["--topology", "lab-a:2"],
        )
    };
    let server = Running::start(Some(lab.b.name()), &srv_args, "Server listening", Duration::from_secs(10));
    let ns = n.to_string();
    let mut args = vec!["send", dst.as_str(), "-R", "-n", ns.as_str(), "--json"];
    args.extend(topo);
    let out = run(Some(lab.a.name()), &args, Duration::from_secs(120));
    assert!(out.status.success(), "mptun {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("send --json");
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(n));
    let _ = server.wait(Duration::from_secs(15));
    v["end"]["sum_received"]["bits_per_second"].as_f64().expect("bits_per_second")
}

fn main() {
    if require_netns().is_some() {
        return;
    }
    let have = |t: &str| Command::new(t).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !have("curl") {
        println!("skipped: curl is not installed");
        return;
    }
    if std::env::args().any(|a| a == "--flood") {
        return flood::main();
    }
    if std::env::args().any(|a| a == "--concurrent") {
        return many::main();
    }
    let n = parse_bytes(&arg("--bytes").unwrap_or_else(|| "512M".into()));
    let runs: usize = arg("--runs").map_or(3, |r| r.parse().expect("--runs N"));
    let mptcpize = Command::new("mptcpize").arg("--help").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    let lab = Lab::new("px-bench", 2).unwrap();
    lab.kernel_mptcp(Side::A, true).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let (dir, key) = key_file("bench");
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], 8080))).unwrap();
    let _http_mptcp = HttpServer::start_mptcp(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], 8081))).unwrap();
    let url = |port: u16, seed: usize| format!("http://10.0.1.2:{port}/bytes/{n}/{seed}");
    let (mut proxy, mut send, mut kcurl, mut ksend, mut tcp) = (vec![], vec![], vec![], vec![], vec![]);
    let mut subflows = Vec::new();
    for r in 0..runs {
        let (bps, sf) = proxy_run(&lab, &key, &url(8080, r), n);
        proxy.push(bps);
        subflows.push(sf);
        send.push(send_run(&lab, false, n));
        if mptcpize {
            kcurl.push(curl(&lab, &["mptcpize", "run"], &[&url(8081, r)], n));
        }
        ksend.push(send_run(&lab, true, n));
        tcp.push(curl(&lab, &[], &[&url(8080, r)], n));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let m = |v: &[f64]| if v.is_empty() { f64::NAN } else { median(v.to_vec()) };
    let (p, s, kc, ks, t) = (m(&proxy), m(&send), m(&kcurl), m(&ksend), m(&tcp));
    println!(
        "one bulk download of {} MiB over two unconstrained veth paths, median of {runs} run(s), Mbit/s:",
        n >> 20
    );
    println!("  {:<58} {:>9.0}", "curl via mptun proxy local -> exit (mptun, 2 paths)", p / 1e6);
    println!("  {:<58} {:>9.0}", "mptun send -R (mptun, 2 paths, no proxy)", s / 1e6);
    if mptcpize {
        println!("  {:<58} {:>9.0}", "mptcpize run curl <- IPPROTO_MPTCP server (kernel, 2 paths)", kc / 1e6);
    } else {
        println!("  (mptcpize not installed: no `mptcpize run curl` row)");
    }
    println!("  {:<58} {:>9.0}", "mptun send --kernel -R (kernel MPTCP, 2 paths)", ks / 1e6);
    println!("  {:<58} {:>9.0}", "curl, plain kernel TCP over path 1", t / 1e6);
    println!("ratios: proxy / mptun send = {:.2}", p / s);
    if mptcpize {
        println!("        proxy / kernel (mptcpize curl) = {:.2}", p / kc);
    }
    println!("        proxy / kernel (mptun send --kernel) = {:.2}", p / ks);
    println!("per-run Mbit/s: proxy {:?}", proxy.iter().map(|x| (x / 1e6).round()).collect::<Vec<_>>());
    println!("                mptun send {:?}", send.iter().map(|x| (x / 1e6).round()).collect::<Vec<_>>());
    println!("                kernel curl {:?}", kcurl.iter().map(|x| (x / 1e6).round()).collect::<Vec<_>>());
    println!("                kernel send {:?}", ksend.iter().map(|x| (x / 1e6).round()).collect::<Vec<_>>());
    println!("proxy's subflow bytes received per run: {subflows:?}");
}
