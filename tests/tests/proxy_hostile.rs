//! The proxy pair under hostile clients, peers and destinations: an exit
//! whose rules look open to the web must not reach its own host's services,
//! idle connections that never finish a handshake must not lock real
//! clients out, a relay that moves nothing must not hold its resources for
//! good, a dial must end when the client has gone, and a memory budget
//! bounds what the relays hold. Same lab as tests/tests/proxy.rs (the exit
//! in B on mptun's stack, the local proxy in A on two paths); needs root
//! and curl, skipped with a reason otherwise, failed when
//! MPTUN_REQUIRE_NETNS=1. Namespaces are named `mpt-pxh...`.

#[path = "proxy_support.rs"]
mod px;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mptun_io::netns::run_in_netns;
use mptun_io::testutil::require_netns;
use mptun_tests::http::{body, HttpServer};
use mptun_tests::lab::{Lab, Side};
use px::*;

/// `/etc/netns/NS/hosts`, which `ip netns exec NS` mounts over /etc/hosts:
/// the names the exit resolves in B (a DNS answer the test controls).
/// Removed on drop.
struct NetnsHosts(std::path::PathBuf);

impl NetnsHosts {
    fn new(ns: &str, hosts: &str) -> NetnsHosts {
        let d = std::path::Path::new("/etc/netns").join(ns);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("hosts"), hosts).unwrap();
        NetnsHosts(d)
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A destination in `ns` that accepts connections and then neither reads
/// nor writes (a tarpit): they are held until the drop.
struct Tarpit {
    stop: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<TcpStream>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tarpit {
    fn start(ns: &str, addr: SocketAddr) -> Tarpit {
        let l = run_in_netns(ns, || TcpListener::bind(addr)).unwrap().unwrap();
        l.set_nonblocking(true).unwrap();
        let (stop, held) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (s2, h2) = (stop.clone(), held.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => h2.lock().unwrap().push(s),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Tarpit { stop, held, thread: Some(thread) }
    }

    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

impl Drop for Tarpit {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A lab, its key, and a [`Tarpit`] in B at 10.0.1.2:9090 (B's own
/// address: the tests allow it by a rule for exactly that address).
fn tarpit_lab(case: &str) -> (Lab, Dir, String, SocketAddr, Tarpit) {
    let (lab, dir, key) = lab_with_key(case, 2);
    let dest: SocketAddr = "10.0.1.2:9090".parse().unwrap();
    let tarpit = Tarpit::start(lab.b.name(), dest);
    (lab, dir, key, dest, tarpit)
}

/// Opens a SOCKS5 connection in A to the local proxy and sends a CONNECT
/// for `dest` (no authentication); the reply is left to the caller.
fn socks_request(lab: &Lab, dest: SocketAddr) -> TcpStream {
    let to: SocketAddr = "127.0.0.1:1080".parse().unwrap();
    let mut s = run_in_netns(lab.a.name(), || TcpStream::connect(to)).unwrap().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b, [5, 0], "no authentication");
    let SocketAddr::V4(d) = dest else { panic!("IPv4 only") };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&d.ip().octets());
    req.extend_from_slice(&d.port().to_be_bytes());
    s.write_all(&req).unwrap();
    s
}

/// The SOCKS reply code to a request sent by [`socks_request`].
fn socks_reply(s: &mut TcpStream) -> u8 {
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).unwrap();
    rep[1]
}

/// Raises this process's open-file limit to its hard limit (the flood
/// tests hold thousands of sockets).
fn raise_nofile() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// `n` TCP connections from namespace `ns` to `to`, opened without
/// waiting (non-blocking connect) and never written to.
fn idle_connections(ns: &str, to: SocketAddr, n: usize) -> Vec<socket2::Socket> {
    use socket2::{Domain, SockAddr, Socket, Type};
    run_in_netns(ns, || {
        (0..n)
            .filter_map(|_| {
                let s = Socket::new(Domain::for_address(to), Type::STREAM, None).ok()?;
                s.set_nonblocking(true).ok()?;
                let _ = s.connect(&SockAddr::from(to)); // EINPROGRESS
                Some(s)
            })
            .collect()
    })
    .unwrap()
}

/// `ss -tno` in `ns` for established connections matching `filter`, once
/// a line shows the keepalive timer (ss shows the retransmission timer
/// instead while data is unacknowledged), or what it showed last after 2 s.
fn ss_keepalive(ns: &str, filter: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "ss", "-tnoH", "state", "established", filter])
            .output()
            .expect("ss");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        if out.contains("keepalive") || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--allow 0.0.0.0/0:8000` (the documented "open to the web" shape) must
/// not reach the exit host itself: loopback, the unspecified address
/// (which connect() sends to loopback), IPv4-mapped loopback, the host's
/// own interface and stack addresses, link-local (cloud metadata), nor, by
/// the catch-all, a private LAN address; a name rule must not reach
/// loopback through what the resolver answers. Rules that name such an
/// address explicitly still reach it.
#[test]
fn hostile_tool_exit_refuses_its_own_services() {
    if require_netns().is_some() || !have("curl") {
        return;
    }
    let (lab, _dir, key) = lab_with_key("pxh-own", 2);
    let _hosts = NetnsHosts::new(
        lab.b.name(),
        "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 rebind.test\n169.254.169.254 metadata.test\n",
    );
    // The exit host's services: every address of B on port 8000, its
    // loopback on 8002; another host's (A's) LAN address on 8000 and 8001.
    let _own = HttpServer::start(lab.b.name(), "[::]:8000".parse().unwrap()).unwrap();
    let _own2 = HttpServer::start(lab.b.name(), "127.0.0.1:8002".parse().unwrap()).unwrap();
    let lan = lab.kernel_addr(Side::A, 1);
    let _lan = HttpServer::start(lab.a.name(), SocketAddr::new(lan, 8000)).unwrap();
    let _lan2 = HttpServer::start(lab.a.name(), SocketAddr::new(lan, 8001)).unwrap();
    let named_lan = format!("{lan}:8001");
    let exit = exit(
        &lab,
        &key,
        &[
            "--allow",
            "0.0.0.0/0:8000",
            "--allow",
            "[::/0]:8000",
            "--allow",
            &named_lan,
            "--allow",
            "127.0.0.1:8002",
            "--allow",
            "rebind.test:8000",
            "--allow",
            "metadata.test:8000",
            "--connect-timeout",
            "2",
        ],
    );
    let local = local(&lab, &key, &exit_addr(&lab), &[]);
    let own_veth = lab.kernel_addr(Side::B, 1);
    let own_stack = lab.mptun_addr(Side::B, 1);
    let refused = [
        "127.0.0.1:8000".to_string(),
        "0.0.0.0:8000".into(),
        "127.1.2.3:8000".into(),
        "[::1]:8000".into(),
        "[::]:8000".into(),
        "[::ffff:127.0.0.1]:8000".into(),
        "[::ffff:0.0.0.0]:8000".into(),
        format!("{own_veth}:8000"),
        format!("{own_stack}:8000"),
        "169.254.169.254:8000".into(),
        format!("{lan}:8000"),
        "localhost:8000".into(),
        "rebind.test:8000".into(),
        "metadata.test:8000".into(),
    ];
    let get = |hostport: &str| {
        curl(
            &lab,
            &["--socks5-hostname", "127.0.0.1:1080", "-o", "/dev/null", &format!("http://{hostport}/bytes/10/1")],
            10,
        )
    };
    let mut reached = Vec::new();
    for d in &refused {
        let o = get(d);
        let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
        println!("{d}: exit status {:?} {err}", o.status.code());
        let not_allowed = o.status.code() == Some(97) && (err.contains("not allowed") || err.ends_with(". (2)"));
        if !not_allowed {
            reached.push(format!("{d} ({:?}: {err})", o.status.code()));
        }
    }
    for d in [named_lan.as_str(), "127.0.0.1:8002"] {
        let o = get(d);
        assert!(o.status.success(), "{d} is named by a rule: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert!(reached.is_empty(), "not refused with reply 2: {reached:?}\nexit: {}", exit.output());
    let ev =
        wait_events(&exit, "the refusals", Duration::from_secs(5), |e| of_kind(e, "refused").len() >= refused.len());
    let why: Vec<&str> = of_kind(&ev, "refused").iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(why.iter().any(|w| w.contains("loopback")), "the reason names the class: {why:?}");
    drop(local);
}

/// 2000 connections to the local proxy that never send a SOCKS greeting,
/// and 2000 to the exit that never send a header: a real client's
/// download still goes through, promptly.
#[test]
fn hostile_tool_idle_connections_do_not_lock_out_a_client() {
    if require_netns().is_some() || !have("curl") {
        return;
    }
    raise_nofile();
    let (lab, dir, key) = lab_with_key("pxh-idle", 2);
    let _http = HttpServer::start(lab.b.name(), SocketAddr::from(([0, 0, 0, 0], HTTP_PORT))).unwrap();
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:8080"]);
    let local = local(&lab, &key, &exit_addr(&lab), &[]);
    let to_exit: SocketAddr = exit_addr(&lab).parse().unwrap();
    let _idle_local = idle_connections(lab.a.name(), "127.0.0.1:1080".parse().unwrap(), 2000);
    let _idle_exit = idle_connections(lab.a.name(), to_exit, 2000);
    std::thread::sleep(Duration::from_millis(1500));
    let out_file = dir.file("got.bin");
    let t0 = Instant::now();
    let o = curl(&lab, &["--socks5-hostname", "127.0.0.1:1080", "-o", &out_file, &url("10.0.1.2", 1 << 20, 4)], 5);
    let secs = t0.elapsed().as_secs_f64();
    assert!(
        o.status.success(),
        "a real client behind 2000 idle connections at each end: curl {:?} after {secs:.1} s: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(std::fs::read(&out_file).unwrap() == body(1 << 20, 4), "content");
    println!("served in {secs:.2} s behind 2000 idle connections at each end");
    let lev = wait_events(&local, "a summary", Duration::from_secs(3), |e| !of_kind(e, "summary").is_empty());
    let last = of_kind(&lev, "summary").last().cloned().cloned().unwrap();
    assert!(last["evicted"].as_u64().unwrap_or(0) > 0, "idle handshakes were evicted at the local: {last}");
    let xev = wait_events(&exit, "a summary", Duration::from_secs(3), |e| !of_kind(e, "summary").is_empty());
    let last = of_kind(&xev, "summary").last().cloned().cloned().unwrap();
    assert!(last["handshakes"].as_u64().unwrap_or(u64::MAX) <= 256, "handshakes in progress are bounded: {last}");
}

/// A relay that moves nothing ends after --idle-timeout, at the exit and
/// at the local proxy, and the kernel sockets have TCP keepalive on (a
/// dead peer is found even before that).
#[test]
fn hostile_tool_idle_relays_end() {
    if require_netns().is_some() {
        return;
    }
    let (lab, _dir, key, dest, tarpit) = tarpit_lab("pxh-tarpit");
    for (idle_end, exit_extra, local_extra) in
        [("exit", vec!["--idle-timeout", "2"], vec![]), ("local", vec![], vec!["--idle-timeout", "2"])]
    {
        let mut xa = vec!["--allow", "10.0.1.2:9090"];
        xa.extend(exit_extra);
        let exit = exit(&lab, &key, &xa);
        let local = local(&lab, &key, &exit_addr(&lab), &local_extra);
        let mut s = socks_request(&lab, dest);
        assert_eq!(socks_reply(&mut s), 0, "connected to the tarpit");
        let t0 = Instant::now();
        let out = ss_keepalive(lab.b.name(), "dport = :9090");
        assert!(out.contains("keepalive"), "the exit's socket to the destination has keepalive: {out:?}");
        let inn = ss_keepalive(lab.a.name(), "sport = :1080");
        assert!(inn.contains("keepalive"), "the local's socket to the client has keepalive: {inn:?}");
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        let mut b = [0u8; 16];
        let r = s.read(&mut b);
        let secs = t0.elapsed().as_secs_f64();
        assert!(
            matches!(r, Ok(0) | Err(_)) && secs < 6.0,
            "the relay to a tarpit ends after 2 s idle at the {idle_end}: read {r:?} after {secs:.1} s"
        );
        let who = if idle_end == "exit" { &exit } else { &local };
        let ev = wait_events(who, "the idle close", Duration::from_secs(5), |e| !of_kind(e, "close").is_empty());
        let c = of_kind(&ev, "close")[0].clone();
        assert!(c["reason"].as_str().unwrap().contains("idle"), "{c}");
        drop(local);
        drop(exit);
    }
    assert!(tarpit.held() >= 2);
}

/// A client that leaves while the exit is still dialling a destination
/// that never answers (its SYNs dropped) ends the dial at once, at the
/// local proxy and at the exit, instead of after --connect-timeout.
#[test]
fn hostile_tool_dial_ends_when_the_client_leaves() {
    if require_netns().is_some() || !have("iptables") {
        return;
    }
    let (lab, _dir, key) = lab_with_key("pxh-dial", 2);
    let dest = SocketAddr::new(lab.kernel_addr(Side::A, 1), 9091);
    let drop_syn = ["-A", "OUTPUT", "-p", "tcp", "-d", &dest.ip().to_string(), "--dport", "9091", "-j", "DROP"];
    let st = std::process::Command::new("ip")
        .args(["netns", "exec", lab.b.name(), "iptables"])
        .args(drop_syn)
        .status()
        .unwrap();
    assert!(st.success(), "iptables {drop_syn:?}");
    let allow = dest.to_string();
    let exit = exit(&lab, &key, &["--allow", &allow, "--connect-timeout", "8"]);
    let local = local(&lab, &key, &exit_addr(&lab), &["--connect-timeout", "8"]);
    let s = socks_request(&lab, dest);
    std::thread::sleep(Duration::from_millis(700));
    let t0 = Instant::now();
    drop(s);
    for (end, r) in [("local", &local), ("exit", &exit)] {
        let ev = wait_events(r, "the end of the dial", Duration::from_secs(3), |e| {
            e.iter().any(|x| x["event"] == "failed" && x["dest"] == allow.as_str())
        });
        let f = ev.iter().find(|x| x["event"] == "failed").unwrap();
        println!("{end} after {:.2} s: {f}", t0.elapsed().as_secs_f64());
        assert!(f["reason"].as_str().unwrap().contains("left"), "{end}: {f}");
    }
}

/// --memory-budget: a relay that would go over it waits for room (and is
/// served when a relay ends), or is refused with a reason that names the
/// budget, counted; the SOCKS client gets reply 1.
#[test]
fn hostile_tool_memory_budget_queues_then_refuses() {
    if require_netns().is_some() {
        return;
    }
    let (lab, _dir, key, dest, tarpit) = tarpit_lab("pxh-budget");
    let exit = exit(&lab, &key, &["--allow", "10.0.1.2:9090"]);
    // Room for one relay of the local proxy (two paths: 512 KiB), not two.
    let local = local(&lab, &key, &exit_addr(&lab), &["--memory-budget", "700K"]);
    let mut first = socks_request(&lab, dest);
    assert_eq!(socks_reply(&mut first), 0);
    let mut second = socks_request(&lab, dest);
    std::thread::sleep(Duration::from_millis(1000));
    // A reset, so the relay ends at once (a FIN would leave it half-open
    // towards the silent destination).
    socket2::SockRef::from(&first).set_linger(Some(Duration::ZERO)).unwrap();
    drop(first);
    assert_eq!(socks_reply(&mut second), 0, "queued, then served once the first relay ended");
    let t0 = Instant::now();
    let mut third = socks_request(&lab, dest);
    assert_eq!(socks_reply(&mut third), 1, "over the budget: general failure");
    println!("refused after {:.1} s in the queue", t0.elapsed().as_secs_f64());
    let ev = wait_events(&local, "the refusal", Duration::from_secs(3), |e| !of_kind(e, "refused").is_empty());
    let r = of_kind(&ev, "refused")[0].clone();
    assert!(r["reason"].as_str().unwrap().contains("--memory-budget"), "{r}");
    assert!(tarpit.held() >= 2, "the relays reached the destination");
    drop(second);
    let end = interrupt(local);
    assert_eq!(end["over_budget"].as_u64(), Some(1), "{end}");
    drop(exit);
}
