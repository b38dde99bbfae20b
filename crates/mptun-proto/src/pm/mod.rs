//! The path manager, modelled on Linux's in-kernel PM (`net/mptcp/pm_netlink.c`):
//! endpoints (`ip mptcp endpoint add ADDR [signal] [subflow] [backup]`) and
//! limits (`ip mptcp limits set subflows N add_addr_accepted M`).
//!
//! Once a connection is fully established the PM announces `signal`
//! endpoints with ADD_ADDR, opens a subflow from every `subflow` endpoint to
//! the peer's initial address, and opens a subflow to each address the peer
//! announces — within the limits. It only decides; the connection carries
//! the decisions out.

mod announce;
mod command;
mod event;
mod paths;
mod reopen;

pub use command::PmError;
pub use event::{PmEvent, PmEventKind, ECONNRESET, ETIMEDOUT};
pub(crate) use paths::{JoinLimits, Paths};

use std::net::IpAddr;

/// Endpoint flags, as `ip mptcp endpoint` spells them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EndpointFlags {
    /// Announce this address to the peer (ADD_ADDR).
    pub signal: bool,
    /// Open a subflow from this address.
    pub subflow: bool,
    /// Subflows over it are backup (MP_PRIO B flag / MP_JOIN B flag).
    pub backup: bool,
    /// Open subflows from it to every address the peer announces, not one
    /// per announcement from a matching source (`fullmesh`).
    pub fullmesh: bool,
    /// The source of a join to an address the peer announces, each such
    /// endpoint used once (`laminar`, Linux 6.18): C(b)–S(b) beside
    /// C(a)–S(a) without a route per announced address.
    pub laminar: bool,
}

/// One local address the PM may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PmEndpoint {
    /// Address id (1..=255; 0 is the initial subflow's).
    pub id: u8,
    /// The local address.
    pub addr: IpAddr,
    /// What the PM does with it (announce, open subflows from it, backup).
    pub flags: EndpointFlags,
    /// A port endpoint (`ip mptcp endpoint add ADDR port P signal`): its
    /// announcement carries the port, where the peer joins instead of the
    /// connection's port.
    pub port: Option<u16>,
}

/// Path-manager configuration of one endpoint (host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmConfig {
    /// Local addresses besides the initial subflow's (`ip mptcp endpoint`).
    pub endpoints: Vec<PmEndpoint>,
    /// `subflows`: additional subflows per connection (Linux default 2).
    pub max_subflows: u8,
    /// `add_addr_accepted`: peer announcements acted upon (Linux default 0).
    pub max_add_addr_accepted: u8,
    /// Subflows per address pair the PM opens, each from its own source
    /// port (ndiffports; 1, as Linux): with N, the initial pair gets N-1
    /// more and every pair the PM opens gets N. What single-homed, ECMP
    /// and shared-bottleneck experiments need.
    pub subflows_per_pair: u8,
}

impl Default for PmConfig {
    fn default() -> Self {
        PmConfig { endpoints: Vec::new(), max_subflows: 2, max_add_addr_accepted: 0, subflows_per_pair: 1 }
    }
}

/// A subflow the PM wants opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinRequest {
    /// Local address to open it from.
    pub local: IpAddr,
    /// Our address id for it (0 if the address is not an endpoint).
    pub local_id: u8,
    /// Peer address to join to.
    pub remote: IpAddr,
    /// Port on the peer (the initial subflow's port unless announced otherwise).
    pub remote_port: u16,
    /// Open it as a backup subflow (MP_JOIN B flag).
    pub backup: bool,
}

/// Per-connection PM state.
#[derive(Clone, Debug, Default)]
pub struct PmState {
    /// Subflows opened so far, against [`PmConfig::max_subflows`].
    pub subflows_opened: u8,
    /// Peer announcements acted on, against [`PmConfig::max_add_addr_accepted`].
    pub add_addr_accepted: u8,
    /// Our endpoints were announced (done once, when fully established).
    pub announced: bool,
    /// Laminar endpoints already the source of a join (each is used once).
    pub laminar_used: Vec<u8>,
}

/// An address a subflow may use: not unspecified, multicast or broadcast.
pub(crate) fn usable_unicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => !a.is_unspecified() && !a.is_multicast() && !a.is_broadcast(),
        IpAddr::V6(a) => !a.is_unspecified() && !a.is_multicast(),
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// Picks the local address to reach `remote`, like the kernel's source address
/// selection on connected routes: an endpoint on the same /24 (v4) or /64 (v6),
/// else one of the same family, else the initial subflow's address if it is of
/// that family; `None` when no local address has the family.
pub fn source_for(cfg: &PmConfig, remote: IpAddr, fallback: IpAddr) -> Option<(IpAddr, u8, bool)> {
    let same_net = |a: &IpAddr| match (a, remote) {
        (IpAddr::V4(a), IpAddr::V4(r)) => a.octets()[..3] == r.octets()[..3],
        (IpAddr::V6(a), IpAddr::V6(r)) => a.segments()[..4] == r.segments()[..4],
        _ => false,
    };
    // The initial subflow's address is id 0 to the peer (see `on_add_addr`).
    let pick = |e: &PmEndpoint| (e.addr, if e.addr == fallback { 0 } else { e.id }, e.flags.backup);
    cfg.endpoints
        .iter()
        .find(|e| same_net(&e.addr))
        .map(pick)
        .or_else(|| same_family(fallback, remote).then_some((fallback, 0, false)))
        .or_else(|| cfg.endpoints.iter().find(|e| same_family(e.addr, remote)).map(pick))
}

/// Whether a subflow may be opened to an address the peer announced: a
/// unicast address, not one of ours (the initial subflow's or an
/// endpoint's). Either family: a connection may mix IPv4 and IPv6
/// subflows (both kernels allow it), given a local address of the family
/// ([`source_for`]). Linux filters the same way before
/// `mptcp_pm_nl_add_addr_received` creates a subflow.
pub fn joinable(cfg: &PmConfig, local0: IpAddr, addr: IpAddr) -> bool {
    usable_unicast(addr) && addr != local0 && cfg.endpoints.iter().all(|e| e.addr != addr)
}

impl PmState {
    /// Pushes `n` joins of one pair, within the `subflows` limit.
    fn open(&mut self, cfg: &PmConfig, j: JoinRequest, n: u8, out: &mut Vec<JoinRequest>) {
        for _ in 0..n {
            if self.subflows_opened >= cfg.max_subflows {
                return;
            }
            self.subflows_opened += 1;
            out.push(j);
        }
    }

    /// Decisions when the connection becomes fully established: addresses to
    /// announce, subflows to open from `subflow` endpoints to the peer's
    /// initial address, and the initial pair's extra subflows
    /// ([`PmConfig::subflows_per_pair`]).
    pub fn on_established(
        &mut self,
        cfg: &PmConfig,
        local0: IpAddr,
        remote0: IpAddr,
        remote_port: u16,
    ) -> (Vec<PmEndpoint>, Vec<JoinRequest>) {
        let mut announce = Vec::new();
        if !self.announced {
            self.announced = true;
            // The initial address is known to the peer, unless at another port.
            let fresh = |e: &&PmEndpoint| e.addr != local0 || e.port.is_some();
            announce = cfg.endpoints.iter().filter(|e| e.flags.signal).filter(fresh).copied().collect();
        }
        let per_pair = cfg.subflows_per_pair.max(1);
        let mut joins = Vec::new();
        let initial = JoinRequest { local: local0, local_id: 0, remote: remote0, remote_port, backup: false };
        self.open(cfg, initial, per_pair - 1, &mut joins);
        for e in cfg.endpoints.iter().filter(|e| e.flags.subflow && e.addr != local0) {
            if !same_family(e.addr, remote0) {
                continue;
            }
            let j = JoinRequest { local: e.addr, local_id: e.id, remote: remote0, remote_port, backup: e.flags.backup };
            self.open(cfg, j, per_pair, &mut joins);
        }
        (announce, joins)
    }

    /// The peer announced `addr`: the subflows to open to it, if the
    /// limits allow. From every `fullmesh` endpoint of its family when
    /// there are any (Linux `fill_local_addresses_vec`), else from an
    /// unused `laminar` one, else from the address the routing would pick
    /// ([`source_for`]); each pair [`PmConfig::subflows_per_pair`] times.
    pub fn on_add_addr(
        &mut self,
        cfg: &PmConfig,
        local0: IpAddr,
        addr: IpAddr,
        port: u16,
        already_connected: bool,
    ) -> Vec<JoinRequest> {
        let mut joins = Vec::new();
        if already_connected
            || self.add_addr_accepted >= cfg.max_add_addr_accepted
            || self.subflows_opened >= cfg.max_subflows
        {
            return joins;
        }
        // The peer knows the initial subflow's address as id 0, whatever
        // endpoint id it also has here: a join from it carries 0.
        let source = |e: &PmEndpoint| (e.addr, if e.addr == local0 { 0 } else { e.id }, e.flags.backup);
        let of_family = |f: fn(&EndpointFlags) -> bool| {
            cfg.endpoints.iter().filter(move |e| f(&e.flags) && same_family(e.addr, addr))
        };
        let mut sources: Vec<(IpAddr, u8, bool)> = of_family(|f| f.fullmesh).map(source).collect();
        if sources.is_empty() {
            if let Some(e) = of_family(|f| f.laminar).find(|e| !self.laminar_used.contains(&e.id)) {
                self.laminar_used.push(e.id);
                sources.push(source(e));
            } else if let Some(s) = source_for(cfg, addr, local0) {
                sources.push(s);
            }
        }
        if sources.is_empty() {
            return joins;
        }
        self.add_addr_accepted += 1;
        let per_pair = cfg.subflows_per_pair.max(1);
        for (local, local_id, backup) in sources {
            let j = JoinRequest { local, local_id, remote: addr, remote_port: port, backup };
            self.open(cfg, j, per_pair, &mut joins);
        }
        joins
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::ip;

    fn ep(id: u8, a: &str, signal: bool, subflow: bool) -> PmEndpoint {
        PmEndpoint { id, addr: ip(a), flags: EndpointFlags { signal, subflow, ..Default::default() }, port: None }
    }

    #[test]
    fn subflow_endpoints_join_the_initial_address_within_limits() {
        let cfg = PmConfig {
            endpoints: vec![ep(1, "10.0.2.1", false, true), ep(2, "10.0.3.1", false, true)],
            max_subflows: 1,
            ..PmConfig::default()
        };
        let mut st = PmState::default();
        let (ann, joins) = st.on_established(&cfg, ip("10.0.1.1"), ip("10.0.1.2"), 5000);
        assert!(ann.is_empty());
        assert_eq!(joins.len(), 1);
        assert_eq!(joins[0].local, ip("10.0.2.1"));
        assert_eq!(joins[0].remote, ip("10.0.1.2"));
    }

    #[test]
    fn announcements_are_accepted_up_to_the_limit_from_a_matching_source() {
        let cfg = PmConfig {
            endpoints: vec![ep(1, "10.0.2.1", false, false)],
            max_add_addr_accepted: 1,
            ..PmConfig::default()
        };
        let mut st = PmState::default();
        let l0 = ip("10.0.1.1");
        let j = st.on_add_addr(&cfg, l0, ip("10.0.2.2"), 5000, false);
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].local, ip("10.0.2.1"));
        assert_eq!(j[0].local_id, 1);
        assert!(st.on_add_addr(&cfg, l0, ip("10.0.3.2"), 5000, false).is_empty());
    }

    #[test]
    fn announced_addresses_are_filtered_before_joining() {
        let cfg = PmConfig { endpoints: vec![ep(1, "10.0.2.1", false, false)], ..PmConfig::default() };
        let l0 = ip("10.0.1.1");
        for bad in ["0.0.0.0", "224.0.0.1", "255.255.255.255", "10.0.1.1", "10.0.2.1", "::"] {
            assert!(!joinable(&cfg, l0, ip(bad)), "{bad}");
        }
        assert!(joinable(&cfg, l0, ip("10.0.2.2")));
        let l6 = ip("fd00::1");
        assert!(joinable(&cfg, l6, ip("fd00::2")));
        assert!(!joinable(&cfg, l6, ip("ff02::1")));
        // Mixed families are joinable; whether a source exists is source_for's.
        assert!(joinable(&cfg, l6, ip("10.0.2.2")));
        assert!(joinable(&cfg, l0, ip("fd00::2")));
        assert_eq!(source_for(&cfg, ip("fd00::2"), l0), None, "no IPv6 address here");
    }

    #[test]
    fn signal_endpoints_are_announced_once() {
        let cfg = PmConfig { endpoints: vec![ep(1, "10.0.2.2", true, false)], ..PmConfig::default() };
        let mut st = PmState::default();
        let l0 = ip("10.0.1.2");
        let (a, _) = st.on_established(&cfg, l0, ip("10.0.1.1"), 40000);
        assert_eq!(a.len(), 1);
        let (a, _) = st.on_established(&cfg, l0, ip("10.0.1.1"), 40000);
        assert!(a.is_empty());
    }

    fn flags(f: &str) -> EndpointFlags {
        EndpointFlags {
            signal: f.contains('s'),
            subflow: f.contains('f'),
            backup: f.contains('b'),
            fullmesh: f.contains('m'),
            laminar: f.contains('l'),
        }
    }

    #[test]
    fn fullmesh_two_by_two_opens_four_subflows() {
        // Both client addresses are `subflow fullmesh` endpoints (the first
        // is the initial subflow's); the server announces its second.
        let cfg = PmConfig {
            endpoints: vec![
                PmEndpoint { id: 1, addr: ip("10.0.1.1"), flags: flags("fm"), port: None },
                PmEndpoint { id: 2, addr: ip("10.0.2.1"), flags: flags("fm"), port: None },
            ],
            max_subflows: 4,
            max_add_addr_accepted: 1,
            ..PmConfig::default()
        };
        let mut st = PmState::default();
        let (_, j) = st.on_established(&cfg, ip("10.0.1.1"), ip("10.0.1.2"), 80);
        let pairs = |j: &[JoinRequest]| j.iter().map(|j| (j.local, j.remote)).collect::<Vec<_>>();
        assert_eq!(pairs(&j), [(ip("10.0.2.1"), ip("10.0.1.2"))]);
        let j = st.on_add_addr(&cfg, ip("10.0.1.1"), ip("10.0.2.2"), 80, false);
        assert_eq!(pairs(&j), [(ip("10.0.1.1"), ip("10.0.2.2")), (ip("10.0.2.1"), ip("10.0.2.2"))]);
        assert_eq!(st.subflows_opened, 3, "with the initial one, four");
        // The join from the initial subflow's address carries id 0, as the peer knows it.
        assert_eq!(j.iter().map(|j| j.local_id).collect::<Vec<_>>(), [0, 2]);
        // Without fullmesh, one join to the announcement.
        let mut plain = cfg.clone();
        plain.endpoints.iter_mut().for_each(|e| e.flags.fullmesh = false);
        let mut st = PmState::default();
        st.on_established(&plain, ip("10.0.1.1"), ip("10.0.1.2"), 80);
        assert_eq!(st.on_add_addr(&plain, ip("10.0.1.1"), ip("10.0.2.2"), 80, false).len(), 1);
    }

    #[test]
    fn subflows_per_pair_opens_that_many_on_each_pair_within_the_limit() {
        let cfg = PmConfig { subflows_per_pair: 4, max_subflows: 8, ..PmConfig::default() };
        let mut st = PmState::default();
        let (_, j) = st.on_established(&cfg, ip("10.0.1.1"), ip("10.0.1.2"), 80);
        assert_eq!(j.len(), 3, "the initial pair gets three more");
        assert!(j.iter().all(|j| j.local == ip("10.0.1.1") && j.remote == ip("10.0.1.2") && j.local_id == 0));
        let cfg = PmConfig {
            endpoints: vec![PmEndpoint { id: 1, addr: ip("10.0.2.1"), flags: flags("f"), port: None }],
            subflows_per_pair: 2,
            max_subflows: 2,
            ..PmConfig::default()
        };
        let mut st = PmState::default();
        let (_, j) = st.on_established(&cfg, ip("10.0.1.1"), ip("10.0.1.2"), 80);
        assert_eq!(j.len(), 2, "the limit stops it: {j:?}");
    }

    #[test]
    fn laminar_endpoints_are_each_used_once_for_announcements() {
        let cfg = PmConfig {
            endpoints: vec![
                PmEndpoint { id: 1, addr: ip("10.9.2.1"), flags: flags("l"), port: None },
                PmEndpoint { id: 2, addr: ip("10.9.3.1"), flags: flags("l"), port: None },
            ],
            max_subflows: 4,
            max_add_addr_accepted: 4,
            ..PmConfig::default()
        };
        let mut st = PmState::default();
        let l0 = ip("10.0.1.1");
        let a = st.on_add_addr(&cfg, l0, ip("10.0.2.2"), 80, false);
        let b = st.on_add_addr(&cfg, l0, ip("10.0.3.2"), 80, false);
        let c = st.on_add_addr(&cfg, l0, ip("10.0.4.2"), 80, false);
        assert_eq!((a[0].local, b[0].local, c[0].local), (ip("10.9.2.1"), ip("10.9.3.1"), l0));
    }

    #[test]
    fn an_announced_address_of_the_other_family_is_joined_from_a_local_one_of_its_family() {
        let cfg = PmConfig {
            endpoints: vec![PmEndpoint { id: 1, addr: ip("fd00:2::1"), flags: flags(""), port: None }],
            max_add_addr_accepted: 1,
            ..PmConfig::default()
        };
        let mut st = PmState::default();
        let j = st.on_add_addr(&cfg, ip("10.0.1.1"), ip("fd00:2::2"), 80, false);
        assert_eq!((j[0].local, j[0].local_id, j[0].remote), (ip("fd00:2::1"), 1, ip("fd00:2::2")));
        // No local IPv6 address: nothing, and the announcement is not counted.
        let mut st = PmState::default();
        assert!(st
            .on_add_addr(
                &PmConfig { max_add_addr_accepted: 1, ..PmConfig::default() },
                ip("10.0.1.1"),
                ip("fd00:2::2"),
                80,
                false
            )
            .is_empty());
        assert_eq!(st.add_addr_accepted, 0);
    }
}
