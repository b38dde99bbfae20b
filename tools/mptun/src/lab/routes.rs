//! Multi-link routes on real packets: a scenario file's routes that cross
//! several links (a private link then a shared server link, as the OLIA
//! draft's testbed) become chains of linkem paths joined by router
//! namespaces that forward, nothing more.
//!
//! Each link of the file is one lab path `i` (topo.sh's `c<i>` 10.0.i.1 —
//! linkem — `s<i>` 10.0.i.2). The routes fix where each path's ends live:
//! a route's first link starts at the client, its last ends at the server,
//! and consecutive links meet in one namespace; links that routes share
//! meet where every route sharing them says (a union of their ends). What
//! no route can give a place (a link back into the client, out of the
//! server, or a route through one namespace twice) is refused.
//!
//! Addresses and forwarding, per lab route `r` (1-based) over links
//! `i1 .. in`, in table `1000 + r` of every namespace on it:
//!
//! ```text
//! P-cli:  10.0.i1.(10+r) on c<i1> (the route's own client address, CA);
//!         SA via 10.0.i1.2 src CA; rule from CA and from each mptun
//!         client TUN subnet 10.9.k.0/24 on r: default via 10.0.i1.2
//! router: the same two rules: default via the next link's 10.0.i.2;
//!         CA and each 10.9.k.0/24 of r via the previous link's 10.0.i.1
//! P-srv:  10.0.in.(130+r) on s<in> (the route's server address, SA);
//!         CA and each 10.9.k.0/24 of r via 10.0.in.1
//! ```
//!
//! Forward traffic follows its source (two routes may share a link and
//! part ways after it), backward traffic its destination, so each flow's
//! packets cross the links of its route both ways, as the simulator sends
//! them (B to A over the same links in reverse).

use std::net::Ipv4Addr;

use anyhow::{bail, Result};

/// Where an end of a lab path lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Cli,
    Srv,
    /// A router namespace `P-r<n>` (1-based).
    Router(u8),
}

impl Node {
    /// Its namespace's suffix: `P-cli`, `P-srv`, `P-r<n>`.
    pub(crate) fn suffix(self) -> String {
        match self {
            Node::Cli => "cli".into(),
            Node::Srv => "srv".into(),
            Node::Router(n) => format!("r{n}"),
        }
    }
}

/// topo.sh builds at most this many routers (`r1` .. `r8`).
const MAX_ROUTERS: u8 = 8;
/// Routes the address plan has room for: client addresses 10.0.i.11 ..
/// 10.0.i.130, server addresses 10.0.i.131 .. 10.0.i.250 (apart, so that a
/// one-link route's two ends, both on its link's subnet, differ).
const MAX_ROUTES: usize = 120;

/// The lab's paths joined into the file's routes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Wiring {
    /// Each path's (head, tail): where its `c<i>` and its `s<i>` live.
    pub(crate) ends: Vec<(Node, Node)>,
    /// Each lab route's paths (1-based), the client's side first.
    pub(crate) routes: Vec<Vec<u8>>,
}

/// A union-find over the ends of the paths plus the client and the server.
struct Ends(Vec<usize>);

impl Ends {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        // The client's and the server's classes keep their own roots.
        let (keep, other) = if rb < ra { (rb, ra) } else { (ra, rb) };
        self.0[other] = keep;
    }
}

const CLI: usize = 0;
const SRV: usize = 1;
fn head(path: u8) -> usize {
    2 * usize::from(path)
}
fn tail(path: u8) -> usize {
    2 * usize::from(path) + 1
}

impl Wiring {
    /// Places `paths` lab paths so that every route of `routes` (paths,
    /// 1-based, client side first) runs client to server; paths on no
    /// route stay client to server.
    pub(crate) fn build(paths: u8, routes: &[Vec<u8>]) -> Result<Wiring> {
        if routes.len() > MAX_ROUTES {
            bail!("the lab's address plan has room for {MAX_ROUTES} routes; the flows use {}", routes.len());
        }
        let mut u = Ends((0..2 * usize::from(paths) + 2).collect());
        let mut used = vec![false; usize::from(paths) + 1];
        for r in routes {
            let (Some(&first), Some(&last)) = (r.first(), r.last()) else { bail!("a route through no link") };
            if r.iter().any(|&p| p == 0 || p > paths) {
                bail!("a route through a link the lab does not build");
            }
            u.union(head(first), CLI);
            u.union(tail(last), SRV);
            for w in r.windows(2) {
                u.union(tail(w[0]), head(w[1]));
            }
            r.iter().for_each(|&p| used[usize::from(p)] = true);
        }
        if u.find(CLI) == u.find(SRV) {
            bail!("the routes join the client to the server without a link between them");
        }
        let mut roots = Vec::new();
        let mut node = |u: &mut Ends, x: usize| -> Result<Node> {
            let root = u.find(x);
            Ok(match root {
                CLI => Node::Cli,
                SRV => Node::Srv,
                _ => {
                    let n = match roots.iter().position(|&r| r == root) {
                        Some(n) => n,
                        None => {
                            roots.push(root);
                            roots.len() - 1
                        }
                    };
                    if n >= usize::from(MAX_ROUTERS) {
                        bail!("the routes need more than {MAX_ROUTERS} routers between the links");
                    }
                    Node::Router(n as u8 + 1)
                }
            })
        };
        let mut ends = Vec::new();
        for p in 1..=paths {
            if !used[usize::from(p)] {
                ends.push((Node::Cli, Node::Srv));
                continue;
            }
            let (h, t) = (node(&mut u, head(p))?, node(&mut u, tail(p))?);
            if h == t || h == Node::Srv || t == Node::Cli {
                bail!(
                    "link {p} would run from {} to {}: the routes sharing it disagree on where it is",
                    h.suffix(),
                    t.suffix()
                );
            }
            ends.push((h, t));
        }
        let w = Wiring { ends, routes: routes.to_vec() };
        for r in &w.routes {
            let nodes = w.nodes(r);
            if (1..nodes.len()).any(|i| nodes[..i].contains(&nodes[i])) {
                bail!("a route through links {r:?} passes one namespace twice");
            }
        }
        Ok(w)
    }

    /// The namespaces route `r` crosses, client first.
    fn nodes(&self, r: &[u8]) -> Vec<Node> {
        let mut v = vec![Node::Cli];
        v.extend(r.iter().map(|&p| self.ends[usize::from(p) - 1].1));
        v
    }

    /// topo.sh's `--ends`.
    pub(crate) fn ends_arg(&self) -> String {
        self.ends.iter().map(|(h, t)| format!("{}-{}", h.suffix(), t.suffix())).collect::<Vec<_>>().join(",")
    }

    fn route(&self, r: u8) -> &[u8] {
        &self.routes[usize::from(r) - 1]
    }

    /// Route `r`'s own address at the client (on its first link).
    pub(crate) fn client_addr(&self, r: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, self.route(r)[0], 10 + r)
    }

    /// Route `r`'s own address at the server (on its last link).
    pub(crate) fn server_addr(&self, r: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, *self.route(r).last().expect("a route has links"), 130 + r)
    }

    /// The `ip` commands, namespace by namespace, that route every lab
    /// route (see the module comment): `client` gives mptun's client TUN
    /// subnets `10.9.k.0/24` as (k, route), `server` its server TUN
    /// subnets `10.8.f.0/24` as (f, route of the first subflow).
    pub(crate) fn commands(&self, client: &[(u8, u8)], server: &[(u8, u8)]) -> Vec<(Node, Vec<String>)> {
        let mut out: Vec<(Node, Vec<String>)> = Vec::new();
        let mut cmd = |n: Node, args: &[&str]| out.push((n, args.iter().map(|s| s.to_string()).collect()));
        for r in 1..=self.routes.len() as u8 {
            let links = self.route(r);
            let nodes = self.nodes(links);
            let (ca, sa) = (self.client_addr(r).to_string(), self.server_addr(r).to_string());
            let (first, last) = (links[0], *links.last().expect("links"));
            let table = (1000 + u32::from(r)).to_string();
            // mptun's client TUN subnets on this route: (k, 10.9.k.0/24).
            let nets: Vec<(u8, String)> =
                client.iter().filter(|&&(_, cr)| cr == r).map(|&(k, _)| (k, format!("10.9.{k}.0/24"))).collect();
            cmd(Node::Cli, &["addr", "add", &format!("{ca}/24"), "dev", &format!("c{first}")]);
            cmd(Node::Srv, &["addr", "add", &format!("{sa}/24"), "dev", &format!("s{last}")]);
            let first_hop = format!("10.0.{first}.2");
            cmd(Node::Cli, &["route", "add", &sa, "via", &first_hop, "dev", &format!("c{first}"), "src", &ca]);
            // Forward, by source, at the client and every router.
            for (j, &n) in nodes[..nodes.len() - 1].iter().enumerate() {
                let out_link = links[j];
                let via = format!("10.0.{out_link}.2");
                cmd(n, &["route", "add", "default", "via", &via, "dev", &format!("c{out_link}"), "table", &table]);
                let pref = (20000 + u32::from(r)).to_string();
                cmd(n, &["rule", "add", "from", &ca, "lookup", &table, "pref", &pref]);
                for (k, net) in &nets {
                    let pref = (10000 + u32::from(*k)).to_string();
                    cmd(n, &["rule", "add", "from", net, "lookup", &table, "pref", &pref]);
                }
            }
            // Backward, by destination, at every router and the server.
            for (j, &n) in nodes.iter().enumerate().skip(1) {
                let in_link = links[j - 1];
                let (via, dev) = (format!("10.0.{in_link}.1"), format!("s{in_link}"));
                cmd(n, &["route", "add", &format!("{ca}/32"), "via", &via, "dev", &dev]);
                for (_, net) in &nets {
                    cmd(n, &["route", "add", net, "via", &via, "dev", &dev]);
                }
            }
        }
        for &(f, r) in server {
            let first = self.route(r)[0];
            let net = format!("10.8.{f}.0/24");
            cmd(Node::Cli, &["route", "add", &net, "via", &format!("10.0.{first}.2"), "dev", &format!("c{first}")]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_private_links_into_one_server_link_meet_in_one_router() {
        // Links: 1 private, 2 server, 3 ap; routes private+server, ap+server.
        let w = Wiring::build(3, &[vec![1, 2], vec![3, 2]]).unwrap();
        assert_eq!(w.ends, [(Node::Cli, Node::Router(1)), (Node::Router(1), Node::Srv), (Node::Cli, Node::Router(1))]);
        assert_eq!(w.ends_arg(), "cli-r1,r1-srv,cli-r1");
        assert_eq!((w.client_addr(1), w.server_addr(1)), (Ipv4Addr::new(10, 0, 1, 11), Ipv4Addr::new(10, 0, 2, 131)));
        assert_eq!((w.client_addr(2), w.server_addr(2)), (Ipv4Addr::new(10, 0, 3, 12), Ipv4Addr::new(10, 0, 2, 132)));
        let c = w.commands(&[(1, 1), (2, 2)], &[(1, 1)]);
        let has = |n: Node, s: &str| c.iter().any(|(m, a)| *m == n && a.join(" ") == s);
        // Route 2 leaves the client by the AP link and the router by the server link.
        assert!(has(Node::Cli, "rule add from 10.9.2.0/24 lookup 1002 pref 10002"));
        assert!(has(Node::Cli, "route add default via 10.0.3.2 dev c3 table 1002"));
        assert!(has(Node::Router(1), "route add default via 10.0.2.2 dev c2 table 1002"));
        assert!(has(Node::Router(1), "rule add from 10.0.3.12 lookup 1002 pref 20002"));
        // And comes back the same way: server to router over link 2, router to client over link 3.
        assert!(has(Node::Srv, "route add 10.9.2.0/24 via 10.0.2.1 dev s2"));
        assert!(has(Node::Router(1), "route add 10.9.2.0/24 via 10.0.3.1 dev s3"));
        assert!(has(Node::Router(1), "route add 10.0.3.12/32 via 10.0.3.1 dev s3"));
        assert!(has(Node::Cli, "route add 10.0.2.132 via 10.0.3.2 dev c3 src 10.0.3.12"));
        assert!(has(Node::Cli, "route add 10.8.1.0/24 via 10.0.1.2 dev c1"));
        // The server never forwards by source: nothing of a route's forward table there.
        assert!(!c.iter().any(|(m, a)| *m == Node::Srv && a.contains(&"table".to_string())));
    }

    #[test]
    fn one_link_routes_stay_flat_and_chains_get_a_router_per_joint() {
        let flat = Wiring::build(2, &[vec![1], vec![2], vec![1]]).unwrap();
        assert_eq!(flat.ends_arg(), "cli-srv,cli-srv");
        let chain = Wiring::build(3, &[vec![1, 2, 3]]).unwrap();
        assert_eq!(chain.ends_arg(), "cli-r1,r1-r2,r2-srv");
        // A link nobody routes over stays client to server.
        let spare = Wiring::build(3, &[vec![1, 2]]).unwrap();
        assert_eq!(spare.ends[2], (Node::Cli, Node::Srv));
        // A one-link route beside a chain: its two ends share the link's
        // subnet and must not share an address.
        let mixed = Wiring::build(3, &[vec![1], vec![2, 3]]).unwrap();
        assert_eq!(mixed.ends_arg(), "cli-srv,cli-r1,r1-srv");
        assert_ne!(mixed.client_addr(1), mixed.server_addr(1));
        assert_eq!(mixed.server_addr(1).octets()[..3], mixed.client_addr(1).octets()[..3]);
    }

    #[test]
    fn routes_that_cannot_be_wired_are_refused() {
        // Link 1 first on one route and second on another: its head is both the client and a router.
        assert!(Wiring::build(2, &[vec![1], vec![2, 1]]).is_err());
        // The same link twice on one route.
        assert!(Wiring::build(2, &[vec![1, 1]]).is_err());
        // A route back through its own start: 1 then 2 then 1's head again.
        assert!(Wiring::build(3, &[vec![1, 2, 3], vec![2]]).is_err());
        assert!(Wiring::build(2, &[vec![]]).is_err());
        assert!(Wiring::build(2, &[vec![3]]).is_err());
    }
}
