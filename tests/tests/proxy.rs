//! `mptun proxy local` and `mptun proxy exit` as users run them: the local
//! proxy in namespace A over mptun's TUN paths (`--topology lab-a:2`), the
//! exit in namespace B (mptun's stack, or the kernel's MPTCP with
//! `--kernel`), an HTTP server in B (tests/src/http.rs) and `curl` in A
//! through SOCKS5 or an iptables REDIRECT. Needs root, curl and iptables
//! (`.ci/run` installs them); skipped with a reason otherwise, failed when
//! MPTUN_REQUIRE_NETNS=1. Namespaces are named `mpt-px...`.

#[path = "proxy_support.rs"]
mod px;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use mptun_io::testutil::require_netns;
use mptun_tests::http::{body, HttpServer};
use mptun_tests::lab::{Emulation, Lab, Side};
use px::*;
use serde_json::Value;
use sha2::Sha256;

/// The main test: curl through SOCKS5 (the name resolved at the exit, as
/// socks5h) over two linkem paths of 10 and 3 Mbit/s. 16 MiB (64 MiB would
/// take ~45 s at 13 Mbit/s; the benchmark moves bulk): SHA-256 equal, both
/// subflows carried data.
#[test]
fn proxy_curl_socks5_over_two_linkem_paths() {
    if require_netns().is_some() || !have("curl") {
        return;
    }
    let Some(linkem) = linkem_bin() else { return };
    let em = |path, rate: &str| Emulation {
        path,
        a2b: format!("rate={rate},delay=5ms"),
        b2a: format!("rate={rate},delay=5ms"),
        seed: u64::from(path),
    };
    let lab = Lab::with_linkem("px-curl", 2, &linkem, &[em(1, "10mbit"), em(2, "3mbit")]).unwrap();
    let dir = Dir::new("curl");
    let key = dir.key("key", KEY);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let exit = exit(&lab, &key, &["--allow", "localhost:8080"]);
    let local = local(&lab, &key, &exit_addr(&lab), &[]);
    const N: u64 = 16 << 20;
    let out_file = dir.file("got.bin");
    let t0 = Instant::now();
    let o = curl(&lab, &["--socks5-hostname", "127.0.0.1:1080", "-o", &out_file, &url("localhost", N, 1)], 40);
    let secs = t0.elapsed().as_secs_f64();
    assert!(
        o.status.success(),
        "curl failed: {}; local: {}; exit: {}",
        String::from_utf8_lossy(&o.stderr),
        local.output(),
        exit.output()
    );
    let got = std::fs::read(&out_file).unwrap();
    assert_eq!(got.len() as u64, N);
    assert_eq!(sha(&got), sha(&body(N, 1)), "SHA-256 of the download");
    println!(
        "16 MiB through the proxy pair over 10 + 3 Mbit/s: {secs:.1} s, {:.2} Mbit/s",
        N as f64 * 8.0 / secs / 1e6
    );
    let ev = wait_events(&local, "the local close event", Duration::from_secs(10), |e| !of_kind(e, "close").is_empty());
    let close = of_kind(&ev, "close")[0].clone();
    assert_eq!(close["reason"], "closed", "{close}");
    assert_eq!(close["dest"], "localhost:8080");
    assert_eq!(close["mode"], "mptcp");
    assert!(close["bytes_down"].as_u64().unwrap() > N, "{close}");
    let sf = close["subflows"].as_array().unwrap();
    let rx: Vec<u64> = sf.iter().map(|s| s["bytes_received"].as_u64().unwrap()).collect();
    println!("local's subflows received {rx:?}");
    assert!(rx.len() >= 2 && rx.iter().all(|&b| b > 0), "both subflows carry data: {close}");
    assert!(close["subflows_used"].as_u64().unwrap() >= 2);
    let xev = wait_events(&exit, "the exit close event", Duration::from_secs(10), |e| !of_kind(e, "close").is_empty());
    let xc = of_kind(&xev, "close")[0].clone();
    assert_eq!(xc["bytes_down"], close["bytes_down"], "both ends count the same bytes: {xc}");
    assert!(!of_kind(&xev, "summary").is_empty(), "periodic summaries");
    let end = interrupt(exit);
    assert_eq!(
        (end["closed"].as_u64(), end["refused"].as_u64(), end["failed"].as_u64()),
        (Some(1), Some(0), Some(0)),
        "{end}"
    );
    drop(local);
}

/// 100 connections at once through one proxy pair (curl --parallel), IPv4
/// and IPv6 destinations, each body distinct: all intact, all closed
/// cleanly at both ends.
#[test]
fn proxy_100_concurrent_connections() {
    if require_netns().is_some() || !have("curl") {
        return;
    }
    let lab = Lab::new("px-conc", 2).unwrap();
    let dir = Dir::new("conc");
    let key = dir.key("key", KEY);
    let _http = HttpServer::start(lab.b.name(), "[::]:8080".parse().unwrap()).unwrap();
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:8080", "--allow", "[::1]:8080"]);
    let local = local(&lab, &key, &exit_addr(&lab), &[]);
    let mut args: Vec<String> =
        ["--parallel", "--parallel-immediate", "--parallel-max", "100", "--socks5-hostname", "127.0.0.1:1080"]
            .map(String::from)
            .to_vec();
    let size = |i: u64| 100_000 + i * 1_237;
    for i in 0..100u64 {
        let host = if i % 2 == 0 { "10.0.1.2" } else { "[::1]" };
        args.extend([url(host, size(i), 1000 + i), "-o".into(), dir.file(&format!("f{i}"))]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = curl(&lab, &a, 40);
    assert!(o.status.success(), "curl: {}; exit: {}", String::from_utf8_lossy(&o.stderr), exit.output());
    for i in 0..100u64 {
        let got = std::fs::read(dir.file(&format!("f{i}"))).unwrap();
        assert!(got == body(size(i), 1000 + i), "connection {i}: {} bytes, content differs", got.len());
    }
    for (end, r) in [("local", &local), ("exit", &exit)] {
        let ev = wait_events(r, "100 close events", Duration::from_secs(15), |e| of_kind(e, "close").len() >= 100);
        let closes = of_kind(&ev, "close");
        assert_eq!(closes.len(), 100, "{end}");
        assert!(closes.iter().all(|c| c["reason"] == "closed"), "{end}: {closes:?}");
    }
    // They really overlapped: the most connections open at one instant
    // (from each close event's time and duration).
    let closes: Vec<(f64, f64)> = of_kind(&events(&local), "close")
        .iter()
        .map(|c| {
            let end = c["time"].as_f64().unwrap();
            (end - c["duration_s"].as_f64().unwrap(), end)
        })
        .collect();
    let overlap =
        closes.iter().map(|&(t, _)| closes.iter().filter(|&&(a, b)| a <= t && t < b).count()).max().unwrap_or(0);
    println!("at most {overlap} connections open at once");
    assert!(overlap >= 10, "curl --parallel opened them together: at most {overlap} at once");
    let v6 = of_kind(&events(&exit), "close")
        .iter()
        .filter(|c| c["dest"].as_str().unwrap_or("").starts_with("[::1]"))
        .count();
    assert_eq!(v6, 50, "IPv6 destinations");
}

/// How many downloads `proxy_1000_concurrent_downloads` runs at once.
const MANY: usize = 1000;

/// 1,000 downloads at once through one proxy pair (the local proxy on two
/// paths, the exit on one; unconstrained veths), each a distinct object of
/// 256 KiB to 1 MiB: every one completes with its SHA-256, both ends close
/// all 1,000 relays cleanly and refuse, fail or evict nothing, and both
/// still serve afterwards. Both ends run with the bounds 1,000 connections
/// opened at once need ([`MANY_LIMITS`]: with the defaults the local proxy
/// evicted 744 of them in their SOCKS handshake, docs/proxy.md). Prints
/// the aggregate goodput against one 64 MiB download through the same pair
/// (median of 3, before), and both ends' peak and final RSS. The client is
/// [`fetch_all`] in this process, one task per download (curl 7.88 runs at
/// most 300 transfers at once).
#[test]
fn proxy_1000_concurrent_downloads() {
    if require_netns().is_some() {
        return;
    }
    // This process holds the clients' sockets and the HTTP server's.
    let nofile = raise_nofile();
    assert!(
        nofile >= 3 * MANY as u64,
        "RLIMIT_NOFILE: a hard limit of {nofile}, {} descriptors needed (the clients' sockets and the server's)",
        3 * MANY
    );
    let (lab, _dir, key) = lab_with_key("px-1k", 2);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let limits = many_limits(MANY_BUDGET);
    let limits: Vec<&str> = limits.iter().map(String::as_str).collect();
    let exit = exit(&lab, &key, &[&["--allow", "10.0.1.2:8080"], &limits[..]].concat());
    let local = local(&lab, &key, &exit_addr(&lab), &limits);
    let (lpid, xpid) = (local.pid(), exit.pid());
    let fetch = |wants: &[Want], secs| fetch_all(lab.a.name(), SOCKS, http_dest(), wants, Duration::from_secs(secs));
    let check = |what: &str, wants: &[Want], got: &[Got]| {
        let bad: Vec<String> = bad_downloads(wants, got).into_iter().map(|(_, why)| why).collect();
        assert!(
            bad.is_empty(),
            "{what}: {} of {} downloads failed or differ, e.g. {:?}\nlocal (its first failures): {}\n\
             exit (its first failures): {}\nlocal (last lines): {}\nexit (last lines): {}",
            bad.len(),
            wants.len(),
            &bad[..bad.len().min(10)],
            failures(&local.output(), 10),
            failures(&exit.output(), 10),
            tail(&local.output(), 30),
            tail(&exit.output(), 30)
        );
    };
    // One download at a time through the same pair.
    let mut alone = Vec::new();
    for seed in 1..=3 {
        let one = [Want { n: 64 << 20, seed }];
        let (got, _) = fetch(&one, 60);
        check("a download alone", &one, &got);
        alone.push(goodput(&one, got[0].end - got[0].start));
    }
    let single = median(&alone);
    // The 1,000, all begun at once.
    let wants = many_wants(MANY, 1 << 20);
    let total: u64 = wants.iter().map(|w| w.n).sum();
    let rss_before = [proc_kib(lpid, "VmRSS"), proc_kib(xpid, "VmRSS")];
    let cpu0 = [cpu_secs(lpid), cpu_secs(xpid)];
    let (got, wall) = fetch(&wants, 60);
    let cpu = [cpu_secs(lpid) - cpu0[0], cpu_secs(xpid) - cpu0[1]];
    check("the 1,000 downloads", &wants, &got);
    let aggregate = goodput(&wants, wall);
    let (_, times) = completion(&got);
    let at_once = most_at_once(&got);
    let peak = [proc_kib(lpid, "VmHWM"), proc_kib(xpid, "VmHWM")];
    // Every relay ends cleanly at both ends.
    let ended = 3 + MANY;
    for (end, r) in [("local", &local), ("exit", &exit)] {
        let ev = wait_events(r, "every close event", Duration::from_secs(30), |e| of_kind(e, "close").len() >= ended);
        let closes = of_kind(&ev, "close");
        let unclean: Vec<&&Value> = closes.iter().filter(|c| c["reason"] != "closed").collect();
        assert!(unclean.is_empty(), "{end}: {} not closed cleanly, e.g. {:?}", unclean.len(), unclean.first());
    }
    std::thread::sleep(Duration::from_secs(2));
    let after = [proc_kib(lpid, "VmRSS"), proc_kib(xpid, "VmRSS")];
    let most = |r: &px::support::Running| {
        of_kind(&events(r), "summary").iter().filter_map(|s| s["active"].as_u64()).max().unwrap_or(0)
    };
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "{MANY} concurrent downloads ({} MiB, 256 KiB to 1 MiB each) through the proxy pair in {:.2} s: \
         {:.0} Mbit/s in all; one 64 MiB download alone {:.0} Mbit/s (median of {:.0?}); ratio {:.2}",
        total >> 20,
        wall.as_secs_f64(),
        aggregate / 1e6,
        single / 1e6,
        alone.iter().map(|b| b / 1e6).collect::<Vec<_>>(),
        aggregate / single
    );
    println!(
        "  each download took {:.2} s at least, {:.2} s median, {:.2} s at most; {at_once} were receiving at \
         once (first to last byte); most relays at once (1 s summaries): local {}, exit {}; CPU local {:.0} %, exit {:.0} % \
         of one core",
        times[0],
        times[times.len() / 2],
        times[times.len() - 1],
        most(&local),
        most(&exit),
        100.0 * cpu[0] / wall.as_secs_f64(),
        100.0 * cpu[1] / wall.as_secs_f64()
    );
    println!(
        "  RSS local / exit: {:.1} / {:.1} MiB before, peak (VmHWM) {:.1} / {:.1} MiB, {:.1} / {:.1} MiB 2 s after",
        mib(rss_before[0]),
        mib(rss_before[1]),
        mib(peak[0]),
        mib(peak[1]),
        mib(after[0]),
        mib(after[1])
    );
    // The point of the test: the relays carried data at the same time, not
    // one after another (counted from each download's first response byte,
    // when its relay through both ends was up).
    assert!(at_once >= MANY / 2, "only {at_once} downloads were receiving at once");
    // Healthy afterwards: both run, a new download goes through, and both
    // end on Ctrl-C with nothing refused, failed or evicted.
    assert!(alive(lpid) && alive(xpid), "both proxy ends still run");
    let one = [Want { n: 1 << 20, seed: 4 }];
    let (got, _) = fetch(&one, 20);
    check("a download afterwards", &one, &got);
    for (end, r) in [("local", local), ("exit", exit)] {
        let e = interrupt(r);
        assert_eq!(e["closed"].as_u64(), Some(ended as u64 + 1), "{end}: {e}");
        for k in ["refused", "failed", "evicted", "over_budget", "wrong_key", "replayed", "stale"] {
            assert_eq!(e[k].as_u64(), Some(0), "{end}: {k}: {e}");
        }
    }
}

/// The first `n` relays a proxy failed, refused or evicted, with their reasons.
fn failures(s: &str, n: usize) -> String {
    let kinds = ["\"event\":\"failed\"", "\"event\":\"refused\"", "\"event\":\"evicted\""];
    let v: Vec<&str> = s.lines().filter(|l| kinds.iter().any(|k| l.contains(k))).take(n).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join("\n")
    }
}

/// The last `n` lines of `s`.
fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

/// A destination outside --allow: the exit refuses with SOCKS reply 2,
/// which curl reports as "connection not allowed by ruleset"; counted at
/// both ends.
#[test]
fn proxy_refused_destination() {
    if require_netns().is_some() || !have("curl") {
        return;
    }
    let lab = Lab::new("px-deny", 2).unwrap();
    let dir = Dir::new("deny");
    let key = dir.key("key", KEY);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:8080"]);
    let local = local(&lab, &key, &exit_addr(&lab), &[]);
    let o = curl(&lab, &["--socks5-hostname", "127.0.0.1:1080", "-o", "/dev/null", &url("10.0.2.2", 10, 1)], 20);
    assert_not_allowed(&o);
    // A name with no rule is refused without being resolved.
    let o = curl(&lab, &["--socks5-hostname", "127.0.0.1:1080", "-o", "/dev/null", &url("localhost", 10, 1)], 20);
    assert_not_allowed(&o);
    // The allowed one still works.
    let o = curl(&lab, &["--socks5-hostname", "127.0.0.1:1080", "-o", "/dev/null", &url("10.0.1.2", 10, 1)], 20);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ev = wait_events(&exit, "two refusals", Duration::from_secs(5), |e| of_kind(e, "refused").len() >= 2);
    assert!(of_kind(&ev, "refused")[0]["reason"].as_str().unwrap().contains("not allowed"), "{ev:?}");
    let end = interrupt(exit);
    assert_eq!(
        (end["refused"].as_u64(), end["closed"].as_u64(), end["wrong_key"].as_u64()),
        (Some(2), Some(1), Some(0)),
        "{end}"
    );
    let end = interrupt(local);
    assert_eq!(end["refused"].as_u64(), Some(2), "{end}");
}

/// A local proxy with another key: the exit refuses and counts it; the
/// local proxy tells the keys differ and fails the SOCKS request.
#[test]
fn proxy_wrong_key_is_refused_and_counted() {
    if require_netns().is_some() || !have("curl") {
        return;
    }
    let lab = Lab::new("px-key", 2).unwrap();
    let dir = Dir::new("key");
    let (key, other) = (dir.key("key", KEY), dir.key("other", "a-different-key-of-enough-bytes"));
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:8080"]);
    let local = local(&lab, &other, &exit_addr(&lab), &[]);
    let o = curl(&lab, &["--socks5-hostname", "127.0.0.1:1080", "-o", "/dev/null", &url("10.0.1.2", 10, 1)], 20);
    assert!(!o.status.success(), "a wrong key must not get through");
    let ev = wait_events(&local, "the local's refusal", Duration::from_secs(5), |e| !of_kind(e, "refused").is_empty());
    assert!(of_kind(&ev, "refused")[0]["reason"].as_str().unwrap().contains("key files differ"), "{ev:?}");
    let end = interrupt(exit);
    assert_eq!((end["wrong_key"].as_u64(), end["closed"].as_u64()), (Some(1), Some(0)), "{end}");
    assert_eq!(interrupt(local)["wrong_key"].as_u64(), Some(1));
}

/// A captured header opens no second connection: the test speaks the
/// documented header itself (docs/proxy.md) over plain TCP to the exit
/// (mptun accepts a client without MPTCP), then replays the same bytes,
/// and sends one with an old timestamp.
#[test]
fn proxy_replayed_and_stale_headers_are_refused() {
    use hmac::{Hmac, Mac};
    use std::io::{Read, Write};
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("px-replay", 1).unwrap();
    let dir = Dir::new("replay");
    let key = dir.key("key", KEY);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:8080"]);
    let header = |ts_ms: u64, nonce: u8| {
        let mut h = b"MPXQ\x01\x01\x04\x00".to_vec();
        h.extend_from_slice(&ts_ms.to_be_bytes());
        h.extend_from_slice(&[nonce; 16]);
        h.extend_from_slice(&[10, 0, 1, 2]);
        h.extend_from_slice(&HTTP_PORT.to_be_bytes());
        let mut m = Hmac::<Sha256>::new_from_slice(KEY.trim().as_bytes()).unwrap();
        m.update(&h);
        h.extend_from_slice(&m.finalize().into_bytes());
        h
    };
    let to: SocketAddr = exit_addr(&lab).parse().unwrap();
    let try_header = |h: &[u8]| -> (u8, Vec<u8>) {
        let mut s = mptun_io::netns::run_in_netns(lab.a.name(), || {
            std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })
        .unwrap()
        .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(h).unwrap();
        let mut reply = [0u8; 8];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(&reply[..5], b"MPXR\x01");
        let mut rest = vec![0u8; if reply[6] == 1 { 4 } else { 0 } + 2 + 32];
        s.read_exact(&mut rest).unwrap();
        let mut page = Vec::new();
        if reply[5] == 0 {
            s.write_all(b"GET /bytes/1000/7 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            s.read_to_end(&mut page).unwrap();
        }
        (reply[5], page)
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let h = header(now, 1);
    let (code, page) = try_header(&h);
    assert_eq!(code, 0, "a fresh authentic header succeeds");
    assert!(page.ends_with(&body(1000, 7)), "relayed: {} bytes", page.len());
    assert_eq!(try_header(&h).0, 2, "the same header again is refused");
    assert_eq!(try_header(&header(now - 120_000, 2)).0, 2, "a two-minute-old header is refused");
    let end = interrupt(exit);
    assert_eq!(
        (end["replayed"].as_u64(), end["stale"].as_u64(), end["closed"].as_u64()),
        (Some(1), Some(1), Some(1)),
        "{end}"
    );
}

/// Transparent mode: one iptables REDIRECT rule in A and a plain `curl
/// http://...` (no proxy setting) goes through the proxy pair.
#[test]
fn proxy_transparent_redirect() {
    if require_netns().is_some() || !have("curl") || !have("iptables") {
        return;
    }
    let lab = Lab::new("px-tproxy", 2).unwrap();
    let dir = Dir::new("tproxy");
    let key = dir.key("key", KEY);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:8080"]);
    let local = local(&lab, &key, &exit_addr(&lab), &["--transparent"]);
    let rule = [
        "-t",
        "nat",
        "-A",
        "OUTPUT",
        "-p",
        "tcp",
        "-d",
        "10.0.1.2",
        "--dport",
        "8080",
        "-j",
        "REDIRECT",
        "--to-ports",
        "1080",
    ];
    let st = Command::new("ip").args(["netns", "exec", lab.a.name(), "iptables"]).args(rule).status().unwrap();
    assert!(st.success(), "iptables {rule:?}");
    const N: u64 = 3 << 20;
    let out_file = dir.file("got.bin");
    let o = curl(&lab, &["-o", &out_file, &url("10.0.1.2", N, 5)], 30);
    assert!(o.status.success(), "curl: {}; local: {}", String::from_utf8_lossy(&o.stderr), local.output());
    assert!(std::fs::read(&out_file).unwrap() == body(N, 5), "content through the transparent proxy");
    let ev = wait_events(&local, "the connect event", Duration::from_secs(5), |e| !of_kind(e, "close").is_empty());
    let c = of_kind(&ev, "connect")[0].clone();
    assert_eq!((c["mode"].as_str(), c["dest"].as_str()), (Some("transparent"), Some("10.0.1.2:8080")), "{c}");
    let xev = wait_events(&exit, "the exit's close", Duration::from_secs(5), |e| !of_kind(e, "close").is_empty());
    assert!(of_kind(&xev, "close")[0]["bytes_down"].as_u64().unwrap() > N);
    // SOCKS still works on the same port.
    let o = curl(&lab, &["--socks5", "127.0.0.1:1080", "-o", "/dev/null", &url("10.0.1.2", 10, 1)], 20);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The exit over the kernel's MPTCP (`--kernel`): mptun's local proxy
/// joins a second subflow to it, and the exit reports the kernel's
/// subflows (MPTCP_TCPINFO).
#[test]
fn proxy_exit_on_kernel_mptcp() {
    if require_netns().is_some() || !have("curl") {
        return;
    }
    let lab = Lab::new("px-kern", 2).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let dir = Dir::new("kern");
    let key = dir.key("key", KEY);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let kaddr = format!("{}:1081", lab.kernel_addr(Side::B, 1));
    let exit =
        start(&lab, Side::B, &["exit", "--kernel", "--listen", &kaddr, "--key-file", &key, "--allow", "10.0.1.2:8080"]);
    let local = local(&lab, &key, &kaddr, &[]);
    const N: u64 = 8 << 20;
    let out_file = dir.file("got.bin");
    let o = curl(&lab, &["--socks5-hostname", "127.0.0.1:1080", "-o", &out_file, &url("10.0.1.2", N, 9)], 30);
    assert!(o.status.success(), "curl: {}; exit: {}", String::from_utf8_lossy(&o.stderr), exit.output());
    assert_eq!(sha(&std::fs::read(&out_file).unwrap()), sha(&body(N, 9)));
    let xev = wait_events(&exit, "the exit's close", Duration::from_secs(5), |e| !of_kind(e, "close").is_empty());
    let xc = of_kind(&xev, "close")[0].clone();
    assert_eq!((xc["mode"].as_str(), xc["reason"].as_str()), (Some("mptcp"), Some("closed")), "{xc}");
    assert_eq!(of_kind(&xev, "connect")[0]["stack"], "kernel");
    let ev = wait_events(&local, "the local's close", Duration::from_secs(5), |e| !of_kind(e, "close").is_empty());
    let used = of_kind(&ev, "close")[0]["subflows_used"].as_u64().unwrap();
    assert!(used >= 2, "mptun joined a second subflow to the kernel's exit: {:?}", of_kind(&ev, "close"));
}

/// Half-close end to end, with RFC 1929 authentication: a SOCKS5 client
/// written here (user/password) sends 1 MB and shuts its write side down;
/// the destination reads to that end of stream (the client's FIN became
/// the MPTCP DATA_FIN and the exit's FIN) and only then answers with what
/// it counted, which arrives on the half-open connection. BIND is answered
/// "command not supported", a wrong password refused.
#[test]
fn proxy_half_close_and_username_password() {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("px-half", 2).unwrap();
    let dir = Dir::new("half");
    let key = dir.key("key", KEY);
    let users = dir.key("users", "alice:wonder land\n");
    let l = mptun_io::netns::run_in_netns(lab.b.name(), || TcpListener::bind("10.0.1.2:9090")).unwrap().unwrap();
    let dest = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap(); // returns at the client's FIN only
        s.write_all(format!("{} {}", got.len(), sha(&got)).as_bytes()).unwrap();
    });
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:9090"]);
    let local = local(&lab, &key, &exit_addr(&lab), &["--auth-file", &users]);
    let socks = |user: &str, pass: &str, cmd: u8| -> (TcpStream, Vec<u8>) {
        let to: SocketAddr = "127.0.0.1:1080".parse().unwrap();
        let mut s = mptun_io::netns::run_in_netns(lab.a.name(), || TcpStream::connect(to)).unwrap().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(&[5, 1, 2]).unwrap();
        let mut b = [0u8; 2];
        s.read_exact(&mut b).unwrap();
        assert_eq!(b, [5, 2], "username/password required");
        let mut auth = vec![1, user.len() as u8];
        auth.extend_from_slice(user.as_bytes());
        auth.push(pass.len() as u8);
        auth.extend_from_slice(pass.as_bytes());
        s.write_all(&auth).unwrap();
        s.read_exact(&mut b).unwrap();
        if b != [1, 0] {
            return (s, b.to_vec());
        }
        s.write_all(&[5, cmd, 0, 1, 10, 0, 1, 2, 0x23, 0x82]).unwrap();
        let mut rep = [0u8; 10];
        s.read_exact(&mut rep).unwrap();
        (s, rep.to_vec())
    };
    assert_eq!(socks("alice", "wrong", 1).1, [1, 1], "a wrong password is refused");
    assert_eq!(socks("alice", "wonder land", 2).1[..2], [5, 7], "BIND: command not supported");
    let (mut s, rep) = socks("alice", "wonder land", 1);
    assert_eq!(rep[..2], [5, 0], "CONNECT succeeded");
    let data = body(1_000_000, 3);
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, format!("1000000 {}", sha(&data)), "the answer after the client's FIN");
    dest.join().unwrap();
    let ev = wait_events(&local, "the close", Duration::from_secs(5), |e| !of_kind(e, "close").is_empty());
    let c = of_kind(&ev, "close")[0].clone();
    assert_eq!((c["bytes_up"].as_u64(), c["reason"].as_str()), (Some(1_000_000), Some("closed")), "{c}");
    let end = interrupt(local);
    assert_eq!((end["refused"].as_u64(), end["closed"].as_u64()), (Some(2), Some(1)), "{end}");
    drop(exit);
}

/// Mistakes are named before anything is created (no root needed).
#[test]
fn proxy_arguments_say_what_is_wrong() {
    let dir = Dir::new("args");
    let short = dir.key("short", "tooshort\n");
    let key = dir.key("key", KEY);
    for (args, want) in [
        (vec!["proxy", "exit", "--topology", "lab-b:1", "--key-file", "/nonexistent/k"], "--key-file /nonexistent/k"),
        (vec!["proxy", "exit", "--topology", "lab-b:1", "--key-file", &short], "at least 16"),
        (vec!["proxy", "exit", "--topology", "lab-b:1", "--key-file", &key, "--allow", "example.org"], "needs a port"),
        (vec!["proxy", "exit", "--key-file", &key], "no paths"),
        (vec!["proxy", "exit", "--kernel", "--topology", "lab-b:1", "--key-file", &key], "--kernel"),
        (vec!["proxy", "local", "--exit", "nowhere", "--topology", "lab-a:2", "--key-file", &key], "not ADDR"),
        (vec!["proxy", "local", "--exit", "10.0.0.1"], "--key-file"),
        (
            vec![
                "proxy",
                "local",
                "--exit",
                "10.0.0.1",
                "--topology",
                "lab-a:2",
                "--key-file",
                &key,
                "--memory-budget",
                "64K",
            ],
            "less than one relay costs (512 KiB)",
        ),
    ] {
        let o = px::support::run(None, &args, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    }
}
