//! A two-namespace lab with N routed veth paths, built and torn down by
//! each test (names carry the pid and a counter, so concurrent tests and
//! processes never share anything).
//!
//! ```text
//!   namespace A                                         namespace B
//!   mptun A: 10.(100+i).0.2 behind TUN 10.(100+i).0.1    mptun B: 10.(200+i).0.2 behind TUN 10.(200+i).0.1
//!   kernel:  10.0.i.1 on veth a<i>  ═══ path i ═══  veth b<i> 10.0.i.2 (kernel)
//! ```
//!
//! Both kernels forward (the TUN subnets are routed over the veths) with
//! `rp_filter` off. Policy routing pins every source to its path, whatever
//! the destination: mptun A's path-i address, and the kernel's own veth-i
//! address (so the kernel's MPTCP `subflow` endpoint on veth i really uses
//! path i), leave by veth i; replies to them come back by veth i. Each
//! policy table ends in `unreachable`, so when a path is brought down its
//! traffic is dropped instead of leaking onto another path.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use mptun_io::netns::ip;
use mptun_io::testutil::unique_name;
use mptun_io::{spawn_tun_in_netns, Netns, NetnsGuard, TunConfig, TunDevice};

/// Which namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// One path through linkem: `--a2b` applies to frames from A towards B,
/// `--b2a` to the other direction (linkem spec syntax, e.g.
/// `delay=10ms,loss=0.5%`).
#[derive(Clone, Debug)]
pub struct Emulation {
    pub path: u8,
    pub a2b: String,
    pub b2a: String,
    /// linkem's `--seed` (a2b uses it, b2a it + 1).
    pub seed: u64,
}

/// A running linkem; stopped (SIGTERM, then SIGKILL) and its control
/// socket removed on drop.
struct Linkem {
    path: u8,
    child: Child,
    control: PathBuf,
}

impl Drop for Linkem {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.control);
    }
}

/// The lab; dropping it stops linkem and deletes the namespaces (and every
/// interface in them).
pub struct Lab {
    // Field order: linkem stops first; TUN users drop before the namespaces.
    linkem: Vec<Linkem>,
    pub a: NetnsGuard,
    pub b: NetnsGuard,
    /// linkem's namespace, when a path is emulated.
    mid: Option<NetnsGuard>,
    pub paths: u8,
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

impl Lab {
    /// Builds the lab. `case` goes into the namespace names for debugging.
    pub fn new(case: &str, paths: u8) -> io::Result<Lab> {
        assert!((1..=8).contains(&paths));
        let base = unique_name(&format!("mpt-{case}-"), 40);
        let a = Netns::create(&format!("{base}-a"))?;
        let b = Netns::create(&format!("{base}-b"))?;
        let lab = Lab { linkem: Vec::new(), a, b, mid: None, paths };
        lab.setup(&[])?;
        Ok(lab)
    }

    /// As [`Lab::new`], with the paths of `emulated` through `linkem` (the
    /// binary) in a middle namespace. Returns once every linkem forwards.
    pub fn with_linkem(case: &str, paths: u8, linkem: &Path, emulated: &[Emulation]) -> io::Result<Lab> {
        assert!((1..=8).contains(&paths));
        assert!(emulated.iter().all(|e| (1..=paths).contains(&e.path)));
        let base = unique_name(&format!("mpt-{case}-"), 40);
        let a = Netns::create(&format!("{base}-a"))?;
        let b = Netns::create(&format!("{base}-b"))?;
        let mut lab = Lab { linkem: Vec::new(), a, b, mid: None, paths };
        lab.mid = Some(Netns::create(&format!("{base}-m"))?);
        lab.setup(emulated)?;
        let mid = lab.mid.as_ref().expect("just created").name().to_owned();
        for e in emulated {
            let control = std::env::temp_dir().join(format!("{base}-linkem{}.sock", e.path));
            let _ = std::fs::remove_file(&control);
            let le = spawn_linkem(&mid, linkem, e, &control)?;
            lab.linkem.push(le);
        }
        Ok(lab)
    }

    fn setup(&self, emulated: &[Emulation]) -> io::Result<()> {
        let (a, b) = (self.a.name(), self.b.name());
        for ns in [&self.a, &self.b] {
            ns.sysctl("net.ipv4.ip_forward", "1")?;
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0")?;
        }
        for i in 1..=self.paths {
            let (ai, bi) = (format!("a{i}"), format!("b{i}"));
            if emulated.iter().any(|e| e.path == i) {
                let m = self.mid.as_ref().expect("a middle namespace for linkem").name();
                let (li, ri) = (format!("l{i}"), format!("r{i}"));
                ip(a, ["link", "add", &ai, "type", "veth", "peer", "name", &li, "netns", m])?;
                ip(m, ["link", "add", &ri, "type", "veth", "peer", "name", &bi, "netns", b])?;
                for dev in [&li, &ri] {
                    // A wire: no addresses, no IPv6 chatter of its own.
                    mptun_io::netns::sysctl(m, &format!("net.ipv6.conf.{dev}.disable_ipv6"), "1")?;
                    ip(m, ["link", "set", dev, "up"])?;
                }
                for (ns, dev) in [(a, &ai), (m, &li), (m, &ri), (b, &bi)] {
                    offloads_off(ns, dev)?;
                }
            } else {
                ip(a, ["link", "add", &ai, "type", "veth", "peer", "name", &bi, "netns", b])?;
            }
            for (ns, dev) in [(a, &ai), (b, &bi)] {
                ns_sysctl_dev(ns, dev)?;
            }
            ip(a, ["addr", "add", &format!("10.0.{i}.1/24"), "dev", &ai])?;
            ip(b, ["addr", "add", &format!("10.0.{i}.2/24"), "dev", &bi])?;
            ip(a, ["link", "set", &ai, "up"])?;
            ip(b, ["link", "set", &bi, "up"])?;
        }
        for i in 1..=self.paths {
            let (ai, bi) = (format!("a{i}"), format!("b{i}"));
            let (gw_b, gw_a) = (format!("10.0.{i}.2"), format!("10.0.{i}.1"));
            // mptun A's path-i subnet: B reaches it over path i.
            ip(b, ["route", "add", &format!("10.{}.0.0/24", 100 + i), "via", &gw_a, "dev", &bi])?;
            // mptun B's path-i subnet: A reaches it over path i.
            ip(a, ["route", "add", &format!("10.{}.0.0/24", 200 + i), "via", &gw_b, "dev", &ai])?;
            // Sources pinned to path i, in A: mptun A's path-i subnet and the kernel's a<i> address.
            for (src, table) in
                [(format!("10.{}.0.0/24", 100 + i), 100 + u32::from(i)), (gw_a.clone(), 50 + u32::from(i))]
            {
                let t = table.to_string();
                ip(a, ["route", "add", "default", "via", &gw_b, "dev", &ai, "table", &t])?;
                ip(a, ["route", "add", "unreachable", "default", "metric", "4000", "table", &t])?;
                ip(a, ["rule", "add", "pref", &t, "from", &src, "lookup", &t])?;
            }
            // The same in B: mptun B's path-i subnet and the kernel's b<i> address.
            for (src, table) in
                [(format!("10.{}.0.0/24", 200 + i), 200 + u32::from(i)), (gw_b.clone(), 60 + u32::from(i))]
            {
                let t = table.to_string();
                // Replies to A's per-path addresses (kernel or mptun) go back on their path...
                for j in 1..=self.paths {
                    let bj = format!("b{j}");
                    ip(b, ["route", "add", &format!("10.0.{j}.0/24"), "dev", &bj, "table", &t])?;
                    let via = format!("10.0.{j}.1");
                    ip(b, ["route", "add", &format!("10.{}.0.0/24", 100 + j), "via", &via, "dev", &bj, "table", &t])?;
                }
                // ...anything else leaves by path i.
                ip(b, ["route", "add", "default", "via", &gw_a, "dev", &bi, "table", &t])?;
                ip(b, ["route", "add", "unreachable", "default", "metric", "4000", "table", &t])?;
                ip(b, ["rule", "add", "pref", &t, "from", &src, "lookup", &t])?;
            }
        }
        Ok(())
    }

    pub fn ns(&self, side: Side) -> &NetnsGuard {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }

    /// The kernel's address on path `i` of `side` (veth a<i> / b<i>).
    pub fn kernel_addr(&self, side: Side, i: u8) -> IpAddr {
        v4(10, 0, i, if side == Side::A { 1 } else { 2 })
    }

    /// mptun's own address on path `i` of `side` (behind its TUN).
    pub fn mptun_addr(&self, side: Side, i: u8) -> IpAddr {
        v4(10, if side == Side::A { 100 } else { 200 } + i, 0, 2)
    }

    /// The TUN-side (kernel) address of mptun's path-`i` subnet.
    fn tun_gateway(&self, side: Side, i: u8) -> IpAddr {
        v4(10, if side == Side::A { 100 } else { 200 } + i, 0, 1)
    }

    /// One TUN in `side` carrying the subnets of `paths` (one TUN per path:
    /// call once per path; one TUN for several: pass them all).
    pub fn tun(&self, side: Side, name: &str, paths: &[u8]) -> io::Result<Arc<TunDevice>> {
        self.tun_mtu(side, name, paths, 1500)
    }

    /// As [`Lab::tun`], with the TUN's MTU.
    pub fn tun_mtu(&self, side: Side, name: &str, paths: &[u8], mtu: u16) -> io::Result<Arc<TunDevice>> {
        let mut cfg = TunConfig::new(name).tx_queue_len(10_000).mtu(mtu);
        for &i in paths {
            cfg = cfg.address(self.tun_gateway(side, i), 24)?;
        }
        Ok(Arc::new(spawn_tun_in_netns(self.ns(side).name(), &cfg)?))
    }

    /// Makes namespace A a router with a smaller next hop on path `i`: veth
    /// a<i> gets MTU `mtu`, so A's kernel, forwarding mptun A's larger
    /// packets onto it, drops them and sends ICMP "fragmentation needed"
    /// (unless [`Lab::drop_icmp`]). B's end keeps 1500 and B's routes back
    /// to mptun A's path-`i` subnet get `mtu M advmss 1460`: B sends at most
    /// `mtu` bytes that way yet announces a full-size MSS, so mptun A has to
    /// discover the hop itself.
    pub fn narrow_hop(&self, i: u8, mtu: u16) -> io::Result<()> {
        let (a, b) = (self.a.name(), self.b.name());
        ip(a, ["link", "set", &format!("a{i}"), "mtu", &mtu.to_string()])?;
        let subnet = format!("10.{}.0.0/24", 100 + i);
        let (via, dev, m) = (format!("10.0.{i}.1"), format!("b{i}"), mtu.to_string());
        let mut tables = vec!["main".to_owned()];
        for j in 1..=self.paths {
            tables.push((200 + u32::from(j)).to_string());
            tables.push((60 + u32::from(j)).to_string());
        }
        for t in &tables {
            ip(b, ["route", "replace", &subnet, "via", &via, "dev", &dev, "table", t, "mtu", &m, "advmss", "1460"])?;
        }
        Ok(())
    }

    /// No ICMP error leaves namespace A's kernel (a policy rule sends every
    /// locally generated ICMP to a blackhole table): a router hop that
    /// drops too-big packets silently, a PMTUD black hole.
    pub fn drop_icmp(&self) -> io::Result<()> {
        let a = self.a.name();
        ip(a, ["route", "add", "blackhole", "default", "table", "77"])?;
        ip(a, ["rule", "add", "pref", "10", "ipproto", "icmp", "lookup", "77"]).map(drop)
    }

    /// Brings path `i` down on `side` (`ip link set <veth> down`).
    pub fn link_down(&self, side: Side, i: u8) -> io::Result<()> {
        let dev = format!("{}{i}", if side == Side::A { 'a' } else { 'b' });
        ip(self.ns(side).name(), ["link", "set", &dev, "down"]).map(drop)
    }

    /// `ip -n NS mptcp ARGS…`
    pub fn mptcp(&self, side: Side, args: &[&str]) -> io::Result<String> {
        let mut v = vec!["mptcp"];
        v.extend_from_slice(args);
        ip(self.ns(side).name(), v)
    }

    /// Kernel MPTCP on `side`: enabled, limits, and a `subflow` endpoint on
    /// every path but the first (client role) — `ip mptcp` as a user would.
    pub fn kernel_mptcp(&self, side: Side, subflow_endpoints: bool) -> io::Result<()> {
        self.ns(side).sysctl("net.mptcp.enabled", "1")?;
        let n = self.paths.to_string();
        self.mptcp(side, &["limits", "set", "subflows", &n, "add_addr_accepted", &n])?;
        if subflow_endpoints {
            for i in 2..=self.paths {
                let addr = self.kernel_addr(side, i).to_string();
                let dev = format!("{}{i}", if side == Side::A { 'a' } else { 'b' });
                self.mptcp(side, &["endpoint", "add", &addr, "dev", &dev, "subflow"])?;
            }
        }
        Ok(())
    }
}

impl Lab {
    /// linkem's statistics of emulated path `i` (one line of JSON, see
    /// docs/linkem.md), from its control socket.
    pub fn linkem_stats(&self, i: u8) -> io::Result<String> {
        let le = self
            .linkem
            .iter()
            .find(|l| l.path == i)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("path {i} is not emulated")))?;
        let mut s = UnixStream::connect(&le.control)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"stats\n")?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line)?;
        Ok(line.trim().to_owned())
    }

    /// `ip -s -j link show dev DEV` in `side`: the interface's counters as JSON.
    pub fn link_stats(&self, side: Side, dev: &str) -> io::Result<String> {
        ip(self.ns(side).name(), ["-s", "-j", "link", "show", "dev", dev])
    }
}

/// Starts linkem for `e` in namespace `mid` and waits for its `ready` line.
fn spawn_linkem(mid: &str, bin: &Path, e: &Emulation, control: &Path) -> io::Result<Linkem> {
    let i = e.path;
    let mut child = Command::new("ip")
        .args(["netns", "exec", mid])
        .arg(bin)
        .args(["--a", &format!("l{i}"), "--b", &format!("r{i}")])
        .args(["--a2b", &e.a2b, "--b2a", &e.b2a, "--seed", &e.seed.to_string(), "--quiet", "--control"])
        .arg(control)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|err| io::Error::new(err.kind(), format!("{}: {err}", bin.display())))?;
    let stdout = child.stdout.take().expect("piped");
    let le = Linkem { path: i, child, control: control.to_owned() };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Drains stdout for linkem's whole life; the first line that matters is `ready`.
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.contains("linkem: ready") {
                let _ = tx.send(());
            }
            line.clear();
        }
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(()) => Ok(le),
        Err(_) => Err(io::Error::other(format!("linkem on path {i} did not become ready within 10 s"))),
    }
}

/// Offloads off (wire-sized frames, checksums computed in software), as
/// netns-scripts/lib.sh `lab_offloads_off` does; needs ethtool.
fn offloads_off(ns: &str, dev: &str) -> io::Result<()> {
    let run = |extra: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if run(&["rx", "off"]) || run(&[]) {
        Ok(())
    } else {
        Err(io::Error::other(format!("ethtool -K {dev} (offloads off) failed in {ns}")))
    }
}

/// Per-device sysctls: rp_filter off (the policy routing is asymmetric per
/// design when paths cross).
fn ns_sysctl_dev(ns: &str, dev: &str) -> io::Result<()> {
    mptun_io::netns::sysctl(ns, &format!("net.ipv4.conf.{dev}.rp_filter"), "0")
}
