//! `mptun proxy exit --allow`: the destinations the exit connects to.
//! Nothing is allowed unless a rule says so, so an exit with a leaked key
//! is still not an open relay to everything it can reach.
//!
//! A rule is a network (`10.0.0.0/8`, `fd00::/64`, a single address), with
//! an optional port (`10.0.0.0/8:443`, `[fd00::/64]:443`), or a host name
//! with a port or `*` (`example.org:443`, `example.org:*`). Names are
//! matched as the client sent them (case-insensitively); addresses after
//! the exit resolved them, so a name whose address is allowed works
//! without a name rule, and a name rule allows every address the name
//! resolves to.

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
    (len <= max).then_some(Target::Net(ip, len))
}

fn in_net(a: IpAddr, net: IpAddr, len: u8) -> bool {
    let bits = |ip: IpAddr| match ip {
        IpAddr::V4(v) => (u128::from(u32::from(v)), 32u32),
        IpAddr::V6(v) => (u128::from(v), 128),
    };
    // An IPv4-mapped IPv6 address is its IPv4 address.
    let a = match a {
        IpAddr::V6(v) => v.to_ipv4_mapped().map_or(a, IpAddr::V4),
        a => a,
    };
    let ((x, w), (y, w2)) = (bits(a), bits(net));
    if w != w2 {
        return false;
    }
    let shift = w - u32::from(len);
    shift >= w || (x >> shift) == (y >> shift)
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

    /// Whether a name rule allows `name:port` (all its addresses).
    pub(crate) fn permits_name(&self, name: &str, port: u16) -> bool {
        self.0
            .iter()
            .any(|r| matches!(&r.target, Target::Name(n) if n.eq_ignore_ascii_case(name)) && Self::port_ok(r, port))
    }

    /// Whether a network rule allows the address.
    pub(crate) fn permits_addr(&self, a: SocketAddr) -> bool {
        self.0.iter().any(|r| match r.target {
            Target::Net(net, len) => in_net(a.ip(), net, len) && Self::port_ok(r, a.port()),
            Target::Name(_) => false,
        })
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

    fn allow(rules: &[&str]) -> Allow {
        Allow::new(rules.iter().map(|r| r.parse().unwrap()).collect())
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
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
        assert!(all.permits_addr(sa("1.2.3.4:1")) && all.permits_addr(sa("[::1]:1")));
        assert!(!Allow::default().permits_addr(sa("1.2.3.4:1")), "empty allows nothing");
        assert!(!allow(&["10.0.0.0/8"]).permits_addr(sa("[fd00::1]:1")));
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
