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

use std::net::SocketAddr;
use std::time::Duration;

use mptun_io::testutil::require_netns;
use mptun_tests::http::HttpServer;
use mptun_tests::lab::Side;
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
