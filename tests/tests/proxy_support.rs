//! Shared by the proxy tests and the proxy benchmark (each includes it
//! with `#[path]`); compiled alone it has no tests. The proxy pair as the
//! tests run it: a lab (tests/src/lab.rs), the exit in namespace B on
//! mptun's stack, the local proxy in A on two paths, curl in A, and the
//! JSON events both ends print; and for the 1,000-download test and the
//! benchmark's `--concurrent`, a SOCKS5 client that runs many downloads at
//! once ([`fetch_all`]) and the processes' RSS and CPU time.
#![allow(dead_code)]

#[path = "cli_support.rs"]
pub mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mptun_tests::lab::{Lab, Side};
use serde_json::Value;
use sha2::{Digest, Sha256};
use support::Running;

pub const HTTP_PORT: u16 = 8080;

/// A scratch directory (key files, downloads), removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(case: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("mptun-px-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    pub fn key(&self, name: &str, content: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p.display().to_string()
    }

    pub fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const KEY: &str = "px-test-key: 9f2c1e77a0b34d55c1\n";

/// Whether `tool` is installed; when not, the test is skipped with a
/// reason, or fails under MPTUN_REQUIRE_NETNS=1 (CI installs it).
pub fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        assert!(
            std::env::var("MPTUN_REQUIRE_NETNS").as_deref() != Ok("1"),
            "{tool} is not installed (apt-get install {tool})"
        );
        println!("skipped: {tool} is not installed");
    }
    ok
}

/// linkem next to mptun, or None (skipped with a reason; a failure under
/// MPTUN_REQUIRE_NETNS=1).
pub fn linkem_bin() -> Option<PathBuf> {
    support::linkem_built().then(|| support::mptun_bin().with_file_name("linkem"))
}

/// A lab of `paths` paths (namespaces `mpt-CASE...`), a scratch directory
/// and the key file in it, as most proxy tests begin.
pub fn lab_with_key(case: &str, paths: u8) -> (Lab, Dir, String) {
    let lab = Lab::new(case, paths).unwrap();
    let dir = Dir::new(case);
    let key = dir.key("key", KEY);
    (lab, dir, key)
}

pub fn start(lab: &Lab, side: Side, args: &[&str]) -> Running {
    let mut v = vec!["proxy"];
    v.extend_from_slice(args);
    v.extend_from_slice(&["--json", "-i", "1"]);
    Running::start(Some(lab.ns(side).name()), &v, "\"listening\"", Duration::from_secs(15))
}

/// The exit in B on mptun's stack (path 1), allowing the test server.
pub fn exit(lab: &Lab, key: &str, extra: &[&str]) -> Running {
    let mut v = vec!["exit", "--topology", "lab-b:1", "--key-file", key];
    v.extend_from_slice(extra);
    start(lab, Side::B, &v)
}

/// The local proxy in A on mptun's two paths, to the exit at `exit_addr`.
pub fn local(lab: &Lab, key: &str, exit_addr: &str, extra: &[&str]) -> Running {
    let mut v = vec!["local", "--topology", "lab-a:2", "--exit", exit_addr, "--key-file", key];
    v.extend_from_slice(extra);
    start(lab, Side::A, &v)
}

pub fn exit_addr(lab: &Lab) -> String {
    format!("{}:1081", lab.mptun_addr(Side::B, 1))
}

/// `curl ARGS` in namespace A, bounded by `--max-time`.
pub fn curl(lab: &Lab, args: &[&str], max_secs: u32) -> Output {
    Command::new("ip")
        .args(["netns", "exec", lab.a.name(), "curl", "-sS", "--max-time", &max_secs.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run curl")
}

pub fn url(host: &str, n: u64, seed: u64) -> String {
    format!("http://{host}:{HTTP_PORT}/bytes/{n}/{seed}")
}

pub fn sha(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

/// The JSON event lines a proxy end printed so far.
pub fn events(r: &Running) -> Vec<Value> {
    r.output().lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

/// Waits (bounded) until `pred` holds for the events of `r`; returns them.
pub fn wait_events(r: &Running, what: &str, limit: Duration, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let ev = events(r);
        if pred(&ev) {
            return ev;
        }
        assert!(Instant::now() < deadline, "{what} not seen within {limit:?}; output:\n{}", r.output());
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn of_kind<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["event"] == kind).collect()
}

/// Ends a proxy end with SIGINT as a user's Ctrl-C: exit code 130 and a
/// final `end` line with the counters, which is returned.
pub fn interrupt(r: Running) -> Value {
    r.signal(libc::SIGINT);
    let (st, out, err) = r.finish(Duration::from_secs(10));
    assert_eq!(st.code(), Some(130), "SIGINT ends the proxy with 130: {st}; {err}");
    let end = out.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|e| e["event"] == "end");
    end.unwrap_or_else(|| panic!("no end line after SIGINT: {out}"))
}

/// curl's verdict on SOCKS5 reply 2, "connection not allowed by ruleset"
/// (RFC 1928): exit status 97 (CURLE_PROXY) and the reply code, which curl
/// 7.88 (Debian 12) prints as "Can't complete SOCKS5 connection to HOST. (2)"
/// and later versions may spell out.
pub fn assert_not_allowed(o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(97), "curl: {err}");
    assert!(err.contains("not allowed by ruleset") || err.trim_end().ends_with(". (2)"), "curl said: {err}");
}

/// One download of [`fetch_all`]: `/bytes/N/SEED` of the test server.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    pub n: u64,
    pub seed: u64,
}

/// How one download of [`fetch_all`] went.
#[derive(Debug)]
pub struct Got {
    /// The body's length and SHA-256 (hex), or what went wrong.
    pub result: Result<(u64, String), String>,
    /// When it began (its connect to the SOCKS port), when the first byte
    /// of the response arrived (the relay through both ends was up) and
    /// when its last byte did, after the common start.
    pub start: Duration,
    pub first_byte: Option<Duration>,
    pub end: Duration,
}

/// The most downloads that were receiving at once: between their first
/// response byte and their last.
pub fn most_at_once(got: &[Got]) -> usize {
    let mut edges: Vec<(Duration, i32)> =
        got.iter().filter_map(|g| g.first_byte.map(|f| [(f, 1), (g.end, -1)])).flatten().collect();
    // An end before a start at the same instant: touching is not overlapping.
    edges.sort();
    edges
        .iter()
        .scan(0i32, |n, &(_, d)| {
            *n += d;
            Some(*n)
        })
        .max()
        .unwrap_or(0) as usize
}

/// Downloads every `wants` at once through the SOCKS5 proxy at `socks`
/// (CONNECT to `dest`, the test server), from namespace `ns`: one task per
/// download on one thread, all begun together, each hashing its body as it
/// arrives; each bounded by `limit`. In the order of `wants`, with the time
/// from the start to the last download's end. (curl 7.88, Debian 12's,
/// runs at most 300 transfers at once: `--parallel-max` is capped there.)
pub fn fetch_all(
    ns: &str,
    socks: SocketAddr,
    dest: SocketAddr,
    wants: &[Want],
    limit: Duration,
) -> (Vec<Got>, Duration) {
    mptun_io::run_in_netns(ns, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let t0 = tokio::time::Instant::now();
            let mut set = tokio::task::JoinSet::new();
            for (i, &w) in wants.iter().enumerate() {
                set.spawn(async move {
                    let start = t0.elapsed();
                    let first = std::sync::OnceLock::new();
                    let fetch = fetch_one(socks, dest, w, || {
                        let _ = first.set(t0.elapsed());
                    });
                    let result = match tokio::time::timeout(limit, fetch).await {
                        Ok(r) => r,
                        Err(_) => Err(format!("not done within {limit:?}")),
                    };
                    (i, Got { result, start, first_byte: first.get().copied(), end: t0.elapsed() })
                });
            }
            let mut got: Vec<Option<Got>> = wants.iter().map(|_| None).collect();
            while let Some(r) = set.join_next().await {
                let (i, g) = r.expect("download task");
                got[i] = Some(g);
            }
            (got.into_iter().map(|g| g.expect("every download reported")).collect(), t0.elapsed())
        })
    })
    .expect("enter the client's namespace")
}

/// SOCKS5 CONNECT (no authentication) to `dest` through `socks`, then
/// `GET /bytes/N/SEED`: the body's length and SHA-256.
async fn fetch_one(
    socks: SocketAddr,
    dest: SocketAddr,
    w: Want,
    first_byte: impl FnOnce(),
) -> Result<(u64, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = |what: &'static str| move |e: std::io::Error| format!("{what}: {e}");
    let mut s = tokio::net::TcpStream::connect(socks).await.map_err(io("connect to the SOCKS port"))?;
    s.set_nodelay(true).ok();
    s.write_all(&[5, 1, 0]).await.map_err(io("greeting"))?;
    let mut b = [0u8; 4];
    s.read_exact(&mut b[..2]).await.map_err(io("method"))?;
    if b[..2] != [5, 0] {
        return Err(format!("method answer {:?}", &b[..2]));
    }
    let mut req = vec![5, 1, 0];
    match dest.ip() {
        std::net::IpAddr::V4(a) => req.extend([1].iter().chain(&a.octets())),
        std::net::IpAddr::V6(a) => req.extend([4].iter().chain(&a.octets())),
    }
    req.extend_from_slice(&dest.port().to_be_bytes());
    s.write_all(&req).await.map_err(io("CONNECT"))?;
    s.read_exact(&mut b).await.map_err(io("SOCKS reply"))?;
    if b[1] != 0 {
        return Err(format!("SOCKS reply {}", b[1]));
    }
    let bound = match b[3] {
        1 => 4,
        4 => 16,
        t => return Err(format!("SOCKS reply address type {t}")),
    };
    let mut skip = [0u8; 18];
    s.read_exact(&mut skip[..bound + 2]).await.map_err(io("SOCKS reply"))?;
    let get = format!("GET /bytes/{}/{} HTTP/1.1\r\nHost: {dest}\r\nConnection: close\r\n\r\n", w.n, w.seed);
    s.write_all(get.as_bytes()).await.map_err(io("request"))?;
    let mut buf = vec![0u8; 32 * 1024];
    let mut head = Vec::new();
    let mut first_byte = Some(first_byte);
    let body_at = loop {
        let k = s.read(&mut buf).await.map_err(io("response head"))?;
        if k == 0 {
            return Err(format!("end of stream in the response head after {} bytes", head.len()));
        }
        if let Some(f) = first_byte.take() {
            f();
        }
        head.extend_from_slice(&buf[..k]);
        if let Some(p) = head.windows(4).position(|x| x == b"\r\n\r\n") {
            break p + 4;
        }
        if head.len() > 8192 {
            return Err("response head over 8 KiB".into());
        }
    };
    if !head.starts_with(b"HTTP/1.1 200 ") {
        return Err(format!("response {:?}", String::from_utf8_lossy(&head[..body_at.min(40)])));
    }
    let mut h = Sha256::new();
    h.update(&head[body_at..]);
    let mut len = (head.len() - body_at) as u64;
    loop {
        let k = s.read(&mut buf).await.map_err(|e| format!("body after {len} bytes: {e}"))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        len += k as u64;
    }
    Ok((len, format!("{:x}", h.finalize())))
}

/// The SHA-256 (hex) of what the test server sends for `w`
/// ([`mptun_tests::http::body`]), hashed as it is generated.
pub fn expected_sha(w: Want) -> String {
    mptun_tests::xfer::pattern_sha(w.seed, w.n as usize).iter().map(|b| format!("{b:02x}")).collect()
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`: the resident
/// set now, and its peak since the process started); 0 if gone.
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time process `pid` has used so far, all its threads, user and
/// system (`/proc/PID/stat`), in seconds; 0 if gone.
pub fn cpu_secs(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = s.rsplit_once(')').map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Whether process `pid` is alive (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next()))
        .is_some_and(|state| state != Some('Z') && state != Some('X'))
}

/// Raises this process's open-file limit to its hard limit (many sockets
/// at once); the soft limit after.
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur
}

/// The local proxy's SOCKS port.
pub const SOCKS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 1080);

/// The test server as the exit reaches it (namespace B's address on path 1).
pub fn http_dest() -> SocketAddr {
    SocketAddr::from(([10, 0, 1, 2], HTTP_PORT))
}

/// The `--memory-budget` of [`many_limits`] in the 1,000-download test:
/// the budget charges a relay its connection's buffers as autotuning sized
/// them (up to 2 x (4 + 6) MiB with two subflows, plus 128 KiB), not what
/// they hold, so 1,000 fast relays are charged up to ~20 GiB while the
/// process holds well under 1 GiB (docs/proxy.md).
pub const MANY_BUDGET: &str = "24G";

/// The options both proxy ends get for 1,000 connections opened at once
/// from one address (the SOCKS clients all on 127.0.0.1, and at the exit
/// all from the local proxy): every one may be in its handshake at the
/// same instant, and with `budget` all may relay at once.
pub fn many_limits(budget: &str) -> Vec<String> {
    ["--max-handshakes", "1024", "--max-handshakes-per-source", "1024", "--memory-budget", budget]
        .map(String::from)
        .to_vec()
}

/// `n` distinct downloads of `largest / 4` to `largest` bytes (four sizes
/// in turn), seeds 10,000 up.
pub fn many_wants(n: usize, largest: u64) -> Vec<Want> {
    (0..n).map(|i| Want { n: largest / 4 * (1 + (i % 4) as u64), seed: 10_000 + i as u64 }).collect()
}

/// The downloads of [`fetch_all`] that failed or whose length or SHA-256
/// differ from what the server sent: their index in `wants`, described.
pub fn bad_downloads(wants: &[Want], got: &[Got]) -> Vec<(usize, String)> {
    wants
        .iter()
        .zip(got)
        .enumerate()
        .filter(|(_, (w, g))| match &g.result {
            Ok((n, h)) => *n != w.n || *h != expected_sha(**w),
            Err(_) => true,
        })
        .map(|(i, (w, g))| match &g.result {
            Ok((n, _)) => (i, format!("#{i}: {n} of {} bytes or its SHA-256 differs", w.n)),
            Err(e) => (i, format!("#{i} ({} bytes): {e}", w.n)),
        })
        .collect()
}

/// Bits per second of all of `wants` over `wall`.
pub fn goodput(wants: &[Want], wall: Duration) -> f64 {
    wants.iter().map(|w| w.n).sum::<u64>() as f64 * 8.0 / wall.as_secs_f64()
}

/// When the first download ended, and every download's time from its
/// start to its last byte (seconds, sorted).
pub fn completion(got: &[Got]) -> (Duration, Vec<f64>) {
    let first = got.iter().map(|g| g.end).min().unwrap_or_default();
    let mut t: Vec<f64> = got.iter().map(|g| (g.end - g.start).as_secs_f64()).collect();
    t.sort_by(f64::total_cmp);
    (first, t)
}

pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
