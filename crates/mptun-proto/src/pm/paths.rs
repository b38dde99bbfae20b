//! One connection's path-manager state (Linux keeps it in `mptcp_pm_data`):
//! what the PM decided so far, the announcements we owe the peer, the
//! subflows the PM wants opened or opened again, the addresses each side
//! announced, and the bounds on the joins the connection takes. Its fields
//! are private; the connection (`mptcp/pm.rs`, `mptcp/userspace.rs`)
//! carries out what these methods decide.

use super::announce::Announcements;
use super::reopen::Reopens;
use super::{JoinRequest, PmConfig, PmEndpoint, PmState};
use mptun_time::{Duration, Instant};
use std::net::{IpAddr, SocketAddr};

/// How many joins a connection takes at once and per second (from the
/// endpoint's [`crate::Limits`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct JoinLimits {
    /// MP_JOIN SYNs answered and not yet completed, at most (`None`: as
    /// many as the `subflows` limit has room for).
    pub max_half_open: Option<u8>,
    /// MP_JOIN SYNs taken per second, at most.
    pub max_syn_per_sec: u32,
}

/// Path-manager state of one connection.
#[derive(Debug)]
pub(crate) struct Paths {
    /// What the PM decided so far (subflows opened, announcements accepted).
    pm: PmState,
    /// ADD_ADDRs, echoes and RM_ADDRs owed.
    announce: Announcements,
    /// Subflows the PM wants opened; the endpoint creates them.
    pending_joins: Vec<JoinRequest>,
    /// MP_JOIN SYNs taken in the current one-second window: (window start, count).
    join_window: (Instant, u32),
    /// Our addresses announced to the peer (by the PM or a command), by
    /// id: what an RM_ADDR withdraws and a new announcement must not clash with.
    announced: Vec<(u8, IpAddr)>,
    /// The peer's announcements acted on, by (id, address, port): a
    /// retransmitted one is not joined again. One entry per id (a new
    /// address under an id replaces the old), so at most 256.
    peer_announced: Vec<(u8, IpAddr, u16)>,
    /// The initial subflow's (local, remote) pair, kept after that subflow
    /// is gone: the addresses the peer knows as id 0, and where a subflow
    /// endpoint added later joins to (a handover back to the interface the
    /// connection started on).
    initial: Option<(SocketAddr, SocketAddr)>,
    /// Failed subflows to open again.
    reopens: Reopens,
    /// Our initial address was withdrawn (its endpoint deleted): nothing is
    /// opened from it again until it is an endpoint again.
    initial_local_withdrawn: bool,
    /// The peer withdrew its initial address (RM_ADDR id 0).
    peer_initial_removed: bool,
}

impl Paths {
    pub fn new(now: Instant, add_addr_timeout: Duration) -> Self {
        Paths {
            pm: PmState::default(),
            announce: Announcements::new(add_addr_timeout),
            pending_joins: Vec::new(),
            join_window: (now, 0),
            announced: Vec::new(),
            peer_announced: Vec::new(),
            initial: None,
            reopens: Reopens::default(),
            initial_local_withdrawn: false,
            peer_initial_removed: false,
        }
    }

    // ------------------------------------------------------------------
    // The PM's decisions
    // ------------------------------------------------------------------

    /// Our endpoints were announced (done once, when fully established).
    pub fn pm_announced(&self) -> bool {
        self.pm.announced
    }

    /// The connection became fully established: see [`PmState::on_established`].
    pub fn on_established(
        &mut self,
        cfg: &PmConfig,
        local0: IpAddr,
        remote0: IpAddr,
        remote_port: u16,
    ) -> (Vec<PmEndpoint>, Vec<JoinRequest>) {
        self.pm.on_established(cfg, local0, remote0, remote_port)
    }

    /// The peer announced `addr`: see [`PmState::on_add_addr`].
    pub fn on_add_addr(&mut self, cfg: &PmConfig, local0: IpAddr, addr: IpAddr, port: u16) -> Vec<JoinRequest> {
        self.pm.on_add_addr(cfg, local0, addr, port, false)
    }

    /// The subflows that count against the `subflows` limit now.
    pub fn set_subflows_opened(&mut self, n: usize) {
        self.pm.subflows_opened = u8::try_from(n).unwrap_or(u8::MAX);
    }

    /// Whether a join of ours may be made again: its source is still an
    /// endpoint (or the initial subflow's address, `current` while that
    /// subflow lives) and its destination still the peer's (its initial
    /// address, or an announcement not withdrawn).
    pub fn join_still_stands(
        &self,
        cfg: &PmConfig,
        req: &JoinRequest,
        current: Option<(SocketAddr, SocketAddr)>,
    ) -> bool {
        let initial = self.initial.or(current);
        let from = (initial.is_some_and(|(l, _)| l.ip() == req.local) && !self.initial_local_withdrawn)
            || cfg.endpoints.iter().any(|e| e.addr == req.local);
        let to = (initial.is_some_and(|(_, r)| r.ip() == req.remote) && !self.peer_initial_removed)
            || self.peer_announced.iter().any(|&(_, a, _)| a == req.remote);
        from && to
    }

    // ------------------------------------------------------------------
    // Joins
    // ------------------------------------------------------------------

    /// Asks for a join.
    pub fn request_join(&mut self, j: JoinRequest) {
        self.pending_joins.push(j);
    }

    /// Asks for the joins the PM decided.
    pub fn request_joins(&mut self, joins: Vec<JoinRequest>) {
        self.pending_joins.extend(joins);
    }

    /// The joins asked for, for the endpoint to start.
    pub fn take_joins(&mut self) -> Vec<JoinRequest> {
        std::mem::take(&mut self.pending_joins)
    }

    /// Joins asked for and not yet started.
    pub fn joins_pending(&self) -> usize {
        self.pending_joins.len()
    }

    /// A join from `local` to `remote` is asked for already.
    pub fn join_asked(&self, local: IpAddr, remote: IpAddr) -> bool {
        self.pending_joins.iter().any(|j| j.local == local && j.remote == remote)
    }

    /// Our joins are closed: none is started or opened again.
    pub fn stop_joins(&mut self) {
        self.pending_joins.clear();
        self.reopens.clear();
    }

    /// The failed subflows to open again, to schedule and take them.
    pub fn reopens_mut(&mut self) -> &mut Reopens {
        &mut self.reopens
    }

    /// When the earliest re-open is due.
    pub fn next_reopen(&self) -> Option<Instant> {
        self.reopens.next_due()
    }

    /// Counts an MP_JOIN SYN against the per-second bound; `false` when it
    /// is over it.
    pub fn take_join_syn(&mut self, now: Instant, lim: &JoinLimits) -> bool {
        // Rate first: a flood of joins costs a comparison each, not a scan.
        if now.saturating_duration_since(self.join_window.0) >= Duration::from_secs(1) {
            self.join_window = (now, 0);
        }
        if self.join_window.1 >= lim.max_syn_per_sec {
            return false;
        }
        self.join_window.1 += 1;
        true
    }

    // ------------------------------------------------------------------
    // Announcements
    // ------------------------------------------------------------------

    /// The announcements owed.
    pub fn announcements(&self) -> &Announcements {
        &self.announce
    }

    /// The announcements owed, to queue and send them.
    pub fn announcements_mut(&mut self) -> &mut Announcements {
        &mut self.announce
    }

    /// When the earliest announcement is due.
    pub fn next_announce(&self) -> Option<Instant> {
        self.announce.next_due()
    }

    /// The PM announces endpoint `id` at `addr` (when fully established).
    pub fn announce_endpoint(&mut self, id: u8, addr: IpAddr, port: Option<u16>, now: Instant) {
        self.announce.queue(id, addr, port, false, now);
        self.announced.push((id, addr));
    }

    /// A command announces `addr` under `id` (again: an announcement of
    /// the id still owed is replaced).
    pub fn announce_again(&mut self, id: u8, addr: IpAddr, port: Option<u16>, now: Instant) {
        self.announce.requeue(id, addr, port, now);
        if !self.announced.contains(&(id, addr)) {
            self.announced.push((id, addr));
        }
    }

    /// Our address `id` is withdrawn: RM_ADDR of it.
    pub fn withdraw(&mut self, id: u8, now: Instant) {
        self.announced.retain(|&(i, _)| i != id);
        self.announce.queue_remove(id, now);
    }

    /// We announced an address under `id`.
    pub fn is_announced(&self, id: u8) -> bool {
        self.announced.iter().any(|&(i, _)| i == id)
    }

    /// We announced another address than `addr` under `id`.
    pub fn announced_other(&self, id: u8, addr: IpAddr) -> bool {
        self.announced.iter().any(|&(i, a)| i == id && a != addr)
    }

    /// The id we announced `addr` under, among those `skip` leaves.
    pub fn announced_id(&self, addr: IpAddr, skip: impl Fn(u8) -> bool) -> Option<u8> {
        self.announced.iter().find(|&&(i, a)| a == addr && !skip(i)).map(|&(i, _)| i)
    }

    // ------------------------------------------------------------------
    // The peer's addresses, and the initial pair
    // ------------------------------------------------------------------

    /// The peer's announcement `(id, addr, port)` was acted on already.
    pub fn peer_announcement_known(&self, id: u8, addr: IpAddr, port: u16) -> bool {
        self.peer_announced.contains(&(id, addr, port))
    }

    /// Notes the peer's announcement of `addr` under `id`.
    pub fn remember_peer_announcement(&mut self, id: u8, addr: IpAddr, port: u16) {
        self.peer_announced.retain(|&(i, _, _)| i != id);
        self.peer_announced.push((id, addr, port));
    }

    /// The peer withdrew the addresses `ids` (RM_ADDR): a new announcement
    /// under one of them is acted on again.
    pub fn forget_peer_announcements(&mut self, ids: &[u8]) {
        self.peer_announced.retain(|(i, _, _)| !ids.contains(i));
    }

    /// The peer withdrew its initial address (RM_ADDR id 0).
    pub fn peer_removed_initial(&mut self) {
        self.peer_initial_removed = true;
    }

    /// The initial subflow's pair, once noted.
    pub fn initial(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.initial
    }

    /// Notes the initial subflow's pair, the first time it is known.
    pub fn note_initial(&mut self, pair: Option<(SocketAddr, SocketAddr)>) {
        if self.initial.is_none() {
            self.initial = pair;
        }
    }

    /// Our initial address is withdrawn (`back`: an endpoint again).
    pub fn set_initial_local_withdrawn(&mut self, withdrawn: bool) {
        self.initial_local_withdrawn = withdrawn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pm::EndpointFlags;
    use crate::test_util::{ip, sa};

    fn req(local: &str, remote: &str) -> JoinRequest {
        JoinRequest { local: ip(local), local_id: 1, remote: ip(remote), remote_port: 80, backup: false }
    }

    fn paths() -> Paths {
        let mut p = Paths::new(Instant::ZERO, Duration::from_secs(2));
        p.note_initial(Some((sa("10.0.0.1:4000"), sa("10.0.1.1:80"))));
        p
    }

    #[test]
    fn a_join_stands_while_its_source_and_destination_do() {
        let cfg = PmConfig::default();
        let mut p = paths();
        let initial_pair = req("10.0.0.1", "10.0.1.1");
        assert!(p.join_still_stands(&cfg, &initial_pair, None));
        p.set_initial_local_withdrawn(true);
        assert!(!p.join_still_stands(&cfg, &initial_pair, None), "our initial address withdrawn");
        p.set_initial_local_withdrawn(false);
        p.peer_removed_initial();
        assert!(!p.join_still_stands(&cfg, &initial_pair, None), "the peer's initial address withdrawn");
    }

    #[test]
    fn a_join_to_an_announced_address_stands_until_it_is_removed() {
        let ep = PmEndpoint { id: 3, addr: ip("10.0.2.1"), flags: EndpointFlags::default(), port: None };
        let cfg = PmConfig { endpoints: vec![ep], ..PmConfig::default() };
        let mut p = paths();
        let j = req("10.0.2.1", "10.0.3.1");
        assert!(!p.join_still_stands(&cfg, &j, None), "never announced");
        p.remember_peer_announcement(5, ip("10.0.3.1"), 80);
        assert!(p.join_still_stands(&cfg, &j, None));
        p.forget_peer_announcements(&[5]);
        assert!(!p.join_still_stands(&cfg, &j, None));
        assert!(!p.join_still_stands(&PmConfig::default(), &req("10.0.2.1", "10.0.1.1"), None), "no endpoint");
    }

    #[test]
    fn join_syns_are_taken_up_to_the_rate_per_second() {
        let mut p = paths();
        let lim = JoinLimits { max_half_open: None, max_syn_per_sec: 2 };
        let t = Instant::from_millis(10);
        assert!(p.take_join_syn(t, &lim) && p.take_join_syn(t, &lim));
        assert!(!p.take_join_syn(t, &lim));
        assert!(p.take_join_syn(t + Duration::from_secs(1), &lim), "a new second");
    }

    #[test]
    fn withdrawing_an_address_forgets_it_and_owes_an_rm_addr() {
        let mut p = paths();
        let a = ip("10.0.2.1");
        p.announce_again(3, a, None, Instant::ZERO);
        assert!(p.is_announced(3) && p.announced_other(3, ip("10.0.9.9")));
        assert_eq!(p.announced_id(a, |_| false), Some(3));
        p.withdraw(3, Instant::ZERO);
        assert!(!p.is_announced(3));
        assert!(p.announcements().due(Instant::ZERO).is_some_and(|x| x.remove && x.id == 3));
    }
}
