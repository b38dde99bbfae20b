//! The path manager, modelled on Linux's in-kernel PM (`net/mptcp/pm_netlink.c`):
//! endpoints (`ip mptcp endpoint add ADDR [signal] [subflow] [backup]`) and
//! limits (`ip mptcp limits set subflows N add_addr_accepted M`).
//!
//! Once a connection is fully established the PM announces `signal`
//! endpoints with ADD_ADDR, opens a subflow from every `subflow` endpoint to
//! the peer's initial address, and opens a subflow to each address the peer
//! announces — within the limits. It only decides; the connection carries
//! the decisions out.

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
}

impl Default for PmConfig {
    fn default() -> Self {
        PmConfig { endpoints: Vec::new(), max_subflows: 2, max_add_addr_accepted: 0 }
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
}

/// Picks the local address to reach `remote`, like the kernel's source address
/// selection on connected routes: an endpoint on the same /24 (v4) or /64 (v6),
/// else the initial subflow's address.
pub fn source_for(cfg: &PmConfig, remote: IpAddr, fallback: IpAddr) -> (IpAddr, u8, bool) {
    let same_net = |a: &IpAddr| match (a, remote) {
        (IpAddr::V4(a), IpAddr::V4(r)) => a.octets()[..3] == r.octets()[..3],
        (IpAddr::V6(a), IpAddr::V6(r)) => a.segments()[..4] == r.segments()[..4],
        _ => false,
    };
    cfg.endpoints
        .iter()
        .find(|e| same_net(&e.addr))
        .map(|e| (e.addr, e.id, e.flags.backup))
        .unwrap_or((fallback, 0, false))
}

/// Whether a subflow may be opened from `local0`'s family to an address the
/// peer announced: same family, a unicast address, and not one of ours (the
/// initial subflow's or an endpoint's). Linux filters the same way before
/// `mptcp_pm_nl_add_addr_received` creates a subflow.
pub fn joinable(cfg: &PmConfig, local0: IpAddr, addr: IpAddr) -> bool {
    let unicast = match addr {
        IpAddr::V4(a) => !a.is_unspecified() && !a.is_multicast() && !a.is_broadcast(),
        IpAddr::V6(a) => !a.is_unspecified() && !a.is_multicast(),
    };
    unicast && addr.is_ipv4() == local0.is_ipv4() && addr != local0 && cfg.endpoints.iter().all(|e| e.addr != addr)
}

impl PmState {
    /// Decisions when the connection becomes fully established: addresses to
    /// announce and subflows to open from `subflow` endpoints.
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
            announce = cfg.endpoints.iter().filter(|e| e.flags.signal && e.addr != local0).copied().collect();
        }
        let mut joins = Vec::new();
        for e in cfg.endpoints.iter().filter(|e| e.flags.subflow && e.addr != local0) {
            if self.subflows_opened >= cfg.max_subflows {
                break;
            }
            if e.addr.is_ipv4() != remote0.is_ipv4() {
                continue;
            }
            self.subflows_opened += 1;
            joins.push(JoinRequest {
                local: e.addr,
                local_id: e.id,
                remote: remote0,
                remote_port,
                backup: e.flags.backup,
            });
        }
        (announce, joins)
    }

    /// The peer announced `addr`: open a subflow to it if the limits allow.
    pub fn on_add_addr(
        &mut self,
        cfg: &PmConfig,
        local0: IpAddr,
        addr: IpAddr,
        port: u16,
        already_connected: bool,
    ) -> Option<JoinRequest> {
        if already_connected
            || self.add_addr_accepted >= cfg.max_add_addr_accepted
            || self.subflows_opened >= cfg.max_subflows
        {
            return None;
        }
        self.add_addr_accepted += 1;
        self.subflows_opened += 1;
        let (local, local_id, backup) = source_for(cfg, addr, local0);
        Some(JoinRequest { local, local_id, remote: addr, remote_port: port, backup })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(id: u8, a: &str, signal: bool, subflow: bool) -> PmEndpoint {
        PmEndpoint { id, addr: a.parse().unwrap(), flags: EndpointFlags { signal, subflow, backup: false } }
    }

    #[test]
    fn subflow_endpoints_join_the_initial_address_within_limits() {
        let cfg = PmConfig {
            endpoints: vec![ep(1, "10.0.2.1", false, true), ep(2, "10.0.3.1", false, true)],
            max_subflows: 1,
            max_add_addr_accepted: 0,
        };
        let mut st = PmState::default();
        let (ann, joins) = st.on_established(&cfg, "10.0.1.1".parse().unwrap(), "10.0.1.2".parse().unwrap(), 5000);
        assert!(ann.is_empty());
        assert_eq!(joins.len(), 1);
        assert_eq!(joins[0].local, "10.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(joins[0].remote, "10.0.1.2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn announcements_are_accepted_up_to_the_limit_from_a_matching_source() {
        let cfg =
            PmConfig { endpoints: vec![ep(1, "10.0.2.1", false, false)], max_subflows: 2, max_add_addr_accepted: 1 };
        let mut st = PmState::default();
        let l0 = "10.0.1.1".parse().unwrap();
        let j = st.on_add_addr(&cfg, l0, "10.0.2.2".parse().unwrap(), 5000, false).unwrap();
        assert_eq!(j.local, "10.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(j.local_id, 1);
        assert!(st.on_add_addr(&cfg, l0, "10.0.3.2".parse().unwrap(), 5000, false).is_none());
    }

    #[test]
    fn announced_addresses_are_filtered_before_joining() {
        let cfg = PmConfig { endpoints: vec![ep(1, "10.0.2.1", false, false)], ..PmConfig::default() };
        let l0: IpAddr = "10.0.1.1".parse().unwrap();
        for bad in ["0.0.0.0", "224.0.0.1", "255.255.255.255", "10.0.1.1", "10.0.2.1", "fd00::2", "::"] {
            assert!(!joinable(&cfg, l0, bad.parse().unwrap()), "{bad}");
        }
        assert!(joinable(&cfg, l0, "10.0.2.2".parse().unwrap()));
        let l6: IpAddr = "fd00::1".parse().unwrap();
        assert!(joinable(&cfg, l6, "fd00::2".parse().unwrap()));
        assert!(!joinable(&cfg, l6, "ff02::1".parse().unwrap()));
        assert!(!joinable(&cfg, l6, "10.0.2.2".parse().unwrap()));
    }

    #[test]
    fn signal_endpoints_are_announced_once() {
        let cfg = PmConfig { endpoints: vec![ep(1, "10.0.2.2", true, false)], ..PmConfig::default() };
        let mut st = PmState::default();
        let l0: IpAddr = "10.0.1.2".parse().unwrap();
        let (a, _) = st.on_established(&cfg, l0, "10.0.1.1".parse().unwrap(), 40000);
        assert_eq!(a.len(), 1);
        let (a, _) = st.on_established(&cfg, l0, "10.0.1.1".parse().unwrap(), 40000);
        assert!(a.is_empty());
    }
}
