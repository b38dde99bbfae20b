//! `mptun proxy exit --allow`: the destinations the exit connects to.
//! Nothing is allowed unless a rule says so, so an exit with a leaked key
//! is still not an open relay to everything it can reach.
//!
//! A rule is a network (`10.0.0.0/8`, `fd00::/64`, a single address), with
//! an optional port (`10.0.0.0/8:443`, `[fd00::/64]:443`), or a host name
//! with a port or `*` (`example.org:443`, `example.org:*`). Names are
//! matched as the client sent them (case-insensitively); addresses after
//! the exit resolved them, so a name whose address is allowed works
//! without a name rule, and a name rule allows the addresses the name
//! resolves to.
//!
//! Some addresses are [`Reserved`]: the exit host itself (loopback, the
//! unspecified address that `connect()` sends to loopback, every address
//! of its interfaces and of its stack), link-local (where cloud metadata
//! services hand out credentials), multicast, and the private ranges. A
//! rule reaches one only if its network lies inside that range: a rule
//! written for it, not a catch-all such as `0.0.0.0/0` that happens to
//! cover it. Rules that look open to the web therefore stay out of the
//! exit's own services and its LAN. A name rule reaches private addresses
//! (an internal name resolves to one by design) and, for `localhost`,
//! loopback, but no other reserved address, whatever the resolver answers.

use std::net::{IpAddr, SocketAddr};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Net(IpAddr, u8),
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    target: Target,
    /// None: any port.
    port: Option<u16>,
}

impl std::str::FromStr for Rule {
    type Err = String;

    fn from_str(s: &str) -> Result<Rule, String> {
        let bad = |why: &str| format!("--allow '{s}': {why} (CIDR, CIDR:PORT, [IPv6-CIDR]:PORT, HOST:PORT or HOST:*)");
        let port = |p: &str| -> Result<Option<u16>, String> {
            match p {
                "*" => Ok(None),
                p => p.parse::<u16>().ok().filter(|&p| p != 0).map(Some).ok_or_else(|| bad("bad port")),
            }
        };
        // [v6 or v6/len]:port
        if let Some(rest) = s.strip_prefix('[') {
            let (net, p) = rest.split_once("]:").ok_or_else(|| bad("expected [ADDR]:PORT"))?;
            return Ok(Rule { target: net_of(net).ok_or_else(|| bad("bad network"))?, port: port(p)? });
        }
        if let Some(t) = net_of(s) {
            return Ok(Rule { target: t, port: None });
        }
        let (h, p) = s.rsplit_once(':').ok_or_else(|| bad("a host name needs a port"))?;
        if let Some(t) = net_of(h) {
            if h.contains(':') {
                return Err(bad("write IPv6 with a port as [ADDR]:PORT"));
            }
            return Ok(Rule { target: t, port: port(p)? });
        }
        let ok = !h.is_empty()
            && h.len() <= 255
            && h.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !ok {
            return Err(bad("not an address, network or host name"));
        }
        Ok(Rule { target: Target::Name(h.to_ascii_lowercase()), port: port(p)? })
    }
}

fn net_of(s: &str) -> Option<Target> {
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip.parse::<IpAddr>().ok()?, Some(len.parse::<u8>().ok()?)),
        None => (s.parse::<IpAddr>().ok()?, None),
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    if len > max {
        return None;
    }
    // An IPv4-mapped network of /96 or longer is that IPv4 network.
    match ip {
        IpAddr::V6(v) if len >= 96 => match v.to_ipv4_mapped() {
            Some(v4) => Some(Target::Net(IpAddr::V4(v4), len - 96)),
            None => Some(Target::Net(ip, len)),
        },
        _ => Some(Target::Net(ip, len)),
    }
}

/// An IPv4-mapped IPv6 address is its IPv4 address (a dual-stack socket
/// connects to that).
fn canon(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v) => v.to_ipv4_mapped().map_or(a, IpAddr::V4),
        a => a,
    }
}

fn in_net(a: IpAddr, net: IpAddr, len: u8) -> bool {
    let bits = |ip: IpAddr| match ip {
        IpAddr::V4(v) => (u128::from(u32::from(v)), 32u32),
        IpAddr::V6(v) => (u128::from(v), 128),
    };
    let ((x, w), (y, w2)) = (bits(canon(a)), bits(net));
    if w != w2 {
        return false;
    }
    let shift = w - u32::from(len);
    shift >= w || (x >> shift) == (y >> shift)
}

/// The address classes no catch-all rule reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reserved {
    Loopback,
    /// `0.0.0.0/8`, `::`: `connect()` sends these to the host itself.
    Unspecified,
    LinkLocal,
    /// Multicast and the limited broadcast address.
    Multicast,
    /// An address of one of the exit host's interfaces or of its stack.
    Own,
    /// RFC 1918, the shared address space (RFC 6598), unique local and
    /// site-local IPv6.
    Private,
}

impl Reserved {
    pub(crate) fn what(self) -> &'static str {
        match self {
            Reserved::Loopback => "loopback",
            Reserved::Unspecified => "the unspecified address (the exit host itself)",
            Reserved::LinkLocal => "link-local",
            Reserved::Multicast => "multicast or broadcast",
            Reserved::Own => "an address of the exit host",
            Reserved::Private => "a private address",
        }
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d))
}

const fn v6(head: u16) -> IpAddr {
    IpAddr::V6(std::net::Ipv6Addr::new(head, 0, 0, 0, 0, 0, 0, 0))
}

/// The fixed reserved ranges, checked in this order (the exit's own
/// addresses come between the host-internal classes and the private ones).
const RANGES: &[(Reserved, IpAddr, u8)] = &[
    (Reserved::Loopback, v4(127, 0, 0, 0), 8),
    (Reserved::Loopback, IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), 128),
    (Reserved::Unspecified, v4(0, 0, 0, 0), 8),
    (Reserved::Unspecified, IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 128),
    (Reserved::LinkLocal, v4(169, 254, 0, 0), 16),
    (Reserved::LinkLocal, v6(0xfe80), 10),
    (Reserved::Multicast, v4(224, 0, 0, 0), 4),
    (Reserved::Multicast, v4(255, 255, 255, 255), 32),
    (Reserved::Multicast, v6(0xff00), 8),
];

const PRIVATE: &[(IpAddr, u8)] = &[
    (v4(10, 0, 0, 0), 8),
    (v4(172, 16, 0, 0), 12),
    (v4(192, 168, 0, 0), 16),
    (v4(100, 64, 0, 0), 10),
    (v6(0xfc00), 7),
    (v6(0xfec0), 10),
];

/// The exit host's own addresses: those of its interfaces (read when a
/// connection is checked, as addresses come and go) and its stack's.
#[derive(Clone, Debug, Default)]
pub(crate) struct Own(Vec<IpAddr>);

impl Own {
    pub(crate) fn new(addrs: impl IntoIterator<Item = IpAddr>) -> Own {
        Own(addrs.into_iter().map(canon).collect())
    }

    /// The interfaces' addresses now (getifaddrs) plus `extra`.
    pub(crate) fn here(extra: &[IpAddr]) -> std::io::Result<Own> {
        let mut v = interface_addrs()?;
        v.extend_from_slice(extra);
        Ok(Own::new(v))
    }

    fn contains(&self, a: IpAddr) -> bool {
        self.0.contains(&a)
    }
}

/// Every address of every interface of this network namespace.
fn interface_addrs() -> std::io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list it allocated, freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family says how
            // long it is; only the two families read here are cast.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                out.push(IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs above, freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The reserved range `a` falls in, as (class, network, length).
fn reserved(a: IpAddr, own: &Own) -> Option<(Reserved, IpAddr, u8)> {
    let a = canon(a);
    if let Some(&r) = RANGES.iter().find(|(_, net, len)| in_net(a, *net, *len)) {
        return Some(r);
    }
    if own.contains(a) {
        return Some((Reserved::Own, a, if a.is_ipv4() { 32 } else { 128 }));
    }
    PRIVATE.iter().find(|(net, len)| in_net(a, *net, *len)).map(|&(net, len)| (Reserved::Private, net, len))
}

/// Why an address is not allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Denied {
    /// No rule covers it.
    NoRule,
    /// Only rules broader than its reserved range (or a name rule) cover it.
    Reserved(Reserved),
}

/// The list of rules; empty allows nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Allow(Vec<Rule>);

impl Allow {
    pub(crate) fn new(rules: Vec<Rule>) -> Allow {
        Allow(rules)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn port_ok(r: &Rule, port: u16) -> bool {
        r.port.is_none_or(|p| p == port)
    }

    /// Whether a name rule covers `name:port` (its addresses are then
    /// checked with [`Allow::permits`]).
    pub(crate) fn permits_name(&self, name: &str, port: u16) -> bool {
        self.0
            .iter()
            .any(|r| matches!(&r.target, Target::Name(n) if n.eq_ignore_ascii_case(name)) && Self::port_ok(r, port))
    }

    /// Whether the exit may connect to `a`, which the client named as
    /// `name` (a host name it resolved to) or as the address itself.
    pub(crate) fn permits(&self, name: Option<&str>, a: SocketAddr, own: &Own) -> Result<(), Denied> {
        let res = reserved(a.ip(), own);
        let mut covered = false;
        for r in self.0.iter().filter(|r| Self::port_ok(r, a.port())) {
            let ok = match (&r.target, res) {
                (Target::Net(net, len), _) if !in_net(a.ip(), *net, *len) => false,
                (Target::Net(..), None) => true,
                // Inside the reserved range: a rule written for it.
                (Target::Net(net, len), Some((_, rnet, rlen))) => {
                    covered = true;
                    *len >= rlen && in_net(*net, rnet, rlen)
                }
                (Target::Name(n), res) if name.is_some_and(|m| n.eq_ignore_ascii_case(m)) => {
                    covered = true;
                    match res {
                        None | Some((Reserved::Private, ..)) => true,
                        Some((Reserved::Loopback, ..)) => n == "localhost" || n.ends_with(".localhost"),
                        Some(_) => false,
                    }
                }
                (Target::Name(_), _) => false,
            };
            if ok {
                return Ok(());
            }
        }
        match res {
            Some((class, ..)) if covered => Err(Denied::Reserved(class)),
            _ => Err(Denied::NoRule),
        }
    }

    /// Whether any rule is a network rule (a name without a name rule can
    /// then still be allowed by its addresses; otherwise it is refused
    /// without asking the resolver).
    pub(crate) fn has_networks(&self) -> bool {
        self.0.iter().any(|r| matches!(r.target, Target::Net(..)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::sa;

    fn allow(rules: &[&str]) -> Allow {
        Allow::new(rules.iter().map(|r| r.parse().unwrap()).collect())
    }

    impl Allow {
        /// For an address the client sent, on a host with no addresses of its own.
        fn permits_addr(&self, a: SocketAddr) -> bool {
            self.permits(None, a, &Own::default()).is_ok()
        }
    }

    #[test]
    fn networks_and_ports() {
        let a = allow(&["10.0.0.0/8", "192.168.1.5:443", "[fd00::/64]:80", "2001:db8::1"]);
        assert!(a.permits_addr(sa("10.200.0.1:22")));
        assert!(!a.permits_addr(sa("11.0.0.1:22")));
        assert!(a.permits_addr(sa("192.168.1.5:443")) && !a.permits_addr(sa("192.168.1.5:80")));
        assert!(a.permits_addr(sa("[fd00::1234]:80")) && !a.permits_addr(sa("[fd00::1234]:81")));
        assert!(!a.permits_addr(sa("[fd00:0:0:1::1]:80")));
        assert!(a.permits_addr(sa("[2001:db8::1]:9")) && !a.permits_addr(sa("[2001:db8::2]:9")));
        assert!(a.permits_addr(sa("[::ffff:10.1.2.3]:80")), "IPv4-mapped is IPv4");
        let all = allow(&["0.0.0.0/0", "::/0"]);
        assert!(all.permits_addr(sa("1.2.3.4:1")) && all.permits_addr(sa("[2001:db8::9]:1")));
        assert!(!all.permits_addr(sa("[::1]:1")), "loopback only by a rule that names it");
        assert!(!Allow::default().permits_addr(sa("1.2.3.4:1")), "empty allows nothing");
        assert!(!allow(&["10.0.0.0/8"]).permits_addr(sa("[fd00::1]:1")));
    }

    /// The documented "open to the web" rules reach neither the exit host
    /// (loopback, the unspecified address connect() sends to loopback,
    /// IPv4-mapped forms) nor link-local (cloud metadata) nor multicast,
    /// nor by the catch-all the private LAN.
    #[test]
    fn hostile_catch_all_reaches_no_internal_address() {
        let web = allow(&["0.0.0.0/0:8000", "[::/0]:8000"]);
        for a in [
            "127.0.0.1:8000",
            "127.9.9.9:8000",
            "0.0.0.0:8000",
            "0.1.2.3:8000",
            "[::1]:8000",
            "[::]:8000",
            "[::ffff:127.0.0.1]:8000",
            "[::ffff:0.0.0.0]:8000",
            "169.254.169.254:8000",
            "[fe80::1]:8000",
            "224.0.0.1:8000",
            "255.255.255.255:8000",
            "[ff02::1]:8000",
            "10.1.2.3:8000",
            "172.16.0.1:8000",
            "192.168.1.1:8000",
            "[fd00::1]:8000",
            "[::ffff:192.168.1.1]:8000",
        ] {
            assert!(!web.permits_addr(sa(a)), "{a} through 0.0.0.0/0");
        }
        assert!(web.permits_addr(sa("93.184.215.14:8000")) && web.permits_addr(sa("[2001:db8::1]:8000")));
        assert!(!web.permits_addr(sa("93.184.215.14:8001")), "ports still apply");
        let why = web.permits(None, sa("127.0.0.1:8000"), &Own::default());
        assert_eq!(why, Err(Denied::Reserved(Reserved::Loopback)));
        assert_eq!(web.permits(None, sa("127.0.0.1:22"), &Own::default()), Err(Denied::NoRule), "no rule at all");
    }

    /// A rule inside a reserved range reaches it; one merely covering it
    /// does not (`0.0.0.0/1` covers loopback, `8.0.0.0/5` covers 10/8).
    #[test]
    fn hostile_only_a_rule_written_for_a_reserved_range_reaches_it() {
        let a =
            allow(&["127.0.0.1:8002", "10.0.0.0/8:80", "[fd00::/64]:80", "169.254.169.254:80", "[::ffff:127.0.0.2]:9"]);
        assert!(a.permits_addr(sa("127.0.0.1:8002")) && !a.permits_addr(sa("127.0.0.2:8002")));
        assert!(a.permits_addr(sa("[::ffff:127.0.0.1]:8002")), "the mapped form of a named address");
        assert!(a.permits_addr(sa("127.0.0.2:9")), "a mapped rule is its IPv4 rule");
        assert!(a.permits_addr(sa("10.9.9.9:80")) && a.permits_addr(sa("[fd00::5]:80")));
        assert!(a.permits_addr(sa("169.254.169.254:80")), "named explicitly");
        let broad = allow(&["0.0.0.0/1", "8.0.0.0/5", "fc00::/6", "224.0.0.0/3"]);
        for r in ["127.0.0.1:1", "10.0.0.1:1", "[fd00::1]:1", "239.1.1.1:1"] {
            assert!(!broad.permits_addr(sa(r)), "{r} by a broader rule");
        }
        assert!(broad.permits_addr(sa("11.0.0.1:1")));
    }

    /// The exit host's own addresses (interfaces, stack) need a rule for
    /// exactly that address, even inside an allowed LAN.
    #[test]
    fn hostile_own_addresses_need_their_own_rule() {
        let own = Own::new(["10.0.1.2".parse().unwrap(), "2001:db8::7".parse().unwrap()]);
        let lan = allow(&["10.0.1.0/24", "0.0.0.0/0", "::/0", "10.0.1.2:8080"]);
        assert_eq!(lan.permits(None, sa("10.0.1.2:22"), &own), Err(Denied::Reserved(Reserved::Own)));
        assert_eq!(lan.permits(None, sa("[::ffff:10.0.1.2]:22"), &own), Err(Denied::Reserved(Reserved::Own)));
        assert_eq!(lan.permits(None, sa("[2001:db8::7]:443"), &own), Err(Denied::Reserved(Reserved::Own)));
        assert!(lan.permits(None, sa("10.0.1.2:8080"), &own).is_ok(), "named");
        assert!(lan.permits(None, sa("10.0.1.3:22"), &own).is_ok(), "another host of the LAN");
        assert!(lan.permits(None, sa("[2001:db8::8]:443"), &own).is_ok());
        let here = Own::here(&[]).unwrap();
        assert!(here.contains("127.0.0.1".parse().unwrap()) || here.0.is_empty(), "getifaddrs lists lo");
    }

    /// A name rule allows what its name resolves to, except the exit host
    /// and the host-internal classes (a resolver answering 127.0.0.1 or
    /// 169.254.169.254 for a public name); `localhost` names loopback.
    #[test]
    fn hostile_name_rules_do_not_follow_the_resolver_inside() {
        let own = Own::new(["192.0.2.1".parse().unwrap()]);
        let a = allow(&["rebind.example:443", "files.lan:*", "localhost:8080"]);
        let p = |n: &str, addr: &str| a.permits(Some(n), sa(addr), &own);
        assert!(p("rebind.example", "93.184.215.14:443").is_ok());
        assert_eq!(p("rebind.example", "127.0.0.1:443"), Err(Denied::Reserved(Reserved::Loopback)));
        assert_eq!(p("rebind.example", "169.254.169.254:443"), Err(Denied::Reserved(Reserved::LinkLocal)));
        assert_eq!(p("rebind.example", "0.0.0.0:443"), Err(Denied::Reserved(Reserved::Unspecified)));
        assert_eq!(p("rebind.example", "192.0.2.1:443"), Err(Denied::Reserved(Reserved::Own)));
        assert_eq!(p("rebind.example", "[::ffff:127.0.0.1]:443"), Err(Denied::Reserved(Reserved::Loopback)));
        assert!(p("files.lan", "192.168.1.20:445").is_ok(), "a private address by its name rule");
        assert!(p("localhost", "127.0.0.1:8080").is_ok() && p("localhost", "[::1]:8080").is_ok());
        assert_eq!(p("localhost", "169.254.1.1:8080"), Err(Denied::Reserved(Reserved::LinkLocal)));
        assert_eq!(p("other", "127.0.0.1:8080"), Err(Denied::NoRule));
    }

    #[test]
    fn names() {
        let a = allow(&["Example.org:443", "files.lan:*"]);
        assert!(a.permits_name("example.ORG", 443) && !a.permits_name("example.org", 80));
        assert!(a.permits_name("files.lan", 8080));
        assert!(!a.permits_name("evil.example.org", 443));
        assert!(!a.has_networks() && allow(&["10.0.0.1"]).has_networks());
    }

    #[test]
    fn bad_rules_say_why() {
        for (r, why) in [
            ("example.org", "needs a port"),
            ("10.0.0.0/33", "needs a port"),
            ("10.0.0.1/8/9:80", "not an address"),
            ("[fd00::1]80", "[ADDR]:PORT"),
            ("a b:80", "not an address"),
            ("host:0", "bad port"),
            ("host:http", "bad port"),
            ("[nope]:80", "bad network"),
        ] {
            let e = r.parse::<Rule>().unwrap_err();
            assert!(e.contains(why), "{r}: {e}");
        }
    }
}
