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

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use mptun_io::netns::ip;
use mptun_io::testutil::unique_name;
use mptun_io::{spawn_tun_in_netns, Netns, NetnsGuard, TunConfig, TunDevice};

/// Which namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// The lab; dropping it deletes both namespaces (and every interface in them).
pub struct Lab {
    // Field order: TUN users drop before the namespaces.
    pub a: NetnsGuard,
    pub b: NetnsGuard,
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
        let lab = Lab { a, b, paths };
        lab.setup()?;
        Ok(lab)
    }

    fn setup(&self) -> io::Result<()> {
        let (a, b) = (self.a.name(), self.b.name());
        for ns in [&self.a, &self.b] {
            ns.sysctl("net.ipv4.ip_forward", "1")?;
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0")?;
        }
        for i in 1..=self.paths {
            let (ai, bi) = (format!("a{i}"), format!("b{i}"));
            ip(a, ["link", "add", &ai, "type", "veth", "peer", "name", &bi, "netns", b])?;
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

/// Per-device sysctls: rp_filter off (the policy routing is asymmetric per
/// design when paths cross).
fn ns_sysctl_dev(ns: &str, dev: &str) -> io::Result<()> {
    mptun_io::netns::sysctl(ns, &format!("net.ipv4.conf.{dev}.rp_filter"), "0")
}
