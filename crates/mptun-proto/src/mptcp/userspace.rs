//! The connection's side of a path manager driven from outside (Linux's
//! userspace PM, `net/mptcp/pm_userspace.c`, and the in-kernel PM's
//! endpoint changes, `pm_kernel.c`): the events it reports and the
//! commands it takes. A command checks everything before it changes
//! anything, so a refused one leaves the connection as it was.

use super::slot::JoinState;
use super::Connection;
use crate::pm::usable_unicast;
use crate::pm::{JoinRequest, PmConfig, PmEndpoint, PmError, PmEvent, PmEventKind};
use crate::tcp::State;
use mptun_wire::crypto;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

/// Events a connection keeps for a listener that has not read them; the
/// oldest go first (`MptunPmEventsDropped`), as a netlink socket whose
/// buffer is full drops (`ENOBUFS`).
pub const MAX_PM_EVENTS: usize = 256;

/// What the connection reported so far.
#[derive(Debug, Default)]
pub(super) struct PmEvents {
    /// `None` until someone listens: a connection nobody watches keeps nothing.
    queue: Option<VecDeque<PmEvent>>,
    created: bool,
    established: bool,
    closed: bool,
    /// Announcements seen in a segment that also made the connection fully
    /// established: reported after `established`, as Linux orders them.
    deferred: Vec<PmEvent>,
}

impl Connection {
    // ------------------------------------------------------------------
    // Events
    // ------------------------------------------------------------------

    /// Starts keeping path-manager events (the endpoint does it for every
    /// connection once its owner listens).
    pub(crate) fn listen_pm_events(&mut self) {
        self.pm_events.queue.get_or_insert_with(VecDeque::new);
    }

    /// The next path-manager event, once [`crate::Endpoint::listen_pm_events`]
    /// turned them on.
    pub fn poll_pm_event(&mut self) -> Option<PmEvent> {
        self.pm_events.queue.as_mut()?.pop_front()
    }

    fn watched(&self) -> bool {
        self.pm_events.queue.is_some()
    }

    fn push_pm_event(&mut self, ev: PmEvent) {
        let Some(q) = self.pm_events.queue.as_mut() else { return };
        if q.len() >= MAX_PM_EVENTS {
            q.pop_front();
            self.counters.mptun_pm_events_dropped += 1;
        }
        q.push_back(ev);
    }

    fn token_for_events(&self) -> u32 {
        crypto::token(self.hs.local_key())
    }

    /// An event about subflow `idx` (its addresses, ids and backup flag).
    fn sub_event(&self, kind: PmEventKind, idx: usize) -> Option<PmEvent> {
        let s = self.subflows.get(idx)?;
        let mut ev = PmEvent::new(kind, self.token_for_events());
        ev.local = Some(s.tcp.local());
        ev.remote = Some(s.tcp.remote());
        ev.local_id = Some(s.mp.local_id());
        ev.remote_id = Some(s.mp.remote_id());
        ev.backup = s.mp.backup();
        Some(ev)
    }

    /// `sub-priority` and the like: an event about subflow `idx` now.
    pub(super) fn report_sub(&mut self, kind: PmEventKind, idx: usize) {
        if let Some(ev) = self.watched().then(|| self.sub_event(kind, idx)).flatten() {
            self.push_pm_event(ev);
        }
    }

    /// After every step: `created` once the initial subflow is up in MPTCP
    /// mode, `established` once fully established, `sub-established` for
    /// each join through its handshake.
    pub(super) fn report_progress(&mut self) {
        if !self.watched() || !self.mode.is_mptcp() {
            return;
        }
        let conn_event = |c: &Connection, kind| {
            let mut ev = PmEvent::new(kind, c.token_for_events());
            if let Some((l, r)) = c.addresses() {
                (ev.local, ev.remote) = (Some(l), Some(r));
            }
            ev.server_side = c.hs.server();
            ev
        };
        if !self.pm_events.created && self.is_established() {
            self.pm_events.created = true;
            self.push_pm_event(conn_event(self, PmEventKind::Created));
            if let Some(s) = self.subflows.get_mut(0) {
                s.mp.report_up();
            }
        }
        if self.pm_events.created && !self.pm_events.established && self.hs.fully_established() {
            self.pm_events.established = true;
            self.push_pm_event(conn_event(self, PmEventKind::Established));
        }
        // Walked in place: this runs after every packet of a watched endpoint.
        // A subflow closing (our FIN out or the peer's in) is gone for the
        // connection, whatever TIME_WAIT keeps of it (Linux reports it at
        // `__mptcp_close_ssk`).
        for i in 0..self.subflows.slot_count() {
            if self.subflows.get(i).is_some_and(|s| s.mp.up_reported() && !matches!(s.tcp.state(), State::Established))
            {
                self.report_sub_closed(i, 0);
            }
        }
        if self.pm_events.created && !self.pm_events.closed && self.tx.fin().acked() && self.rx.peer_fin_done() {
            self.report_closed();
        }
        if self.pm_events.established {
            for ev in std::mem::take(&mut self.pm_events.deferred) {
                self.push_pm_event(ev);
            }
        }
        for i in 0..self.subflows.slot_count() {
            let up = |s: &super::slot::SubflowSlot| {
                s.mp.join() == JoinState::Joined
                    && !s.mp.up_reported()
                    && !s.mp.down_reported()
                    && matches!(s.tcp.state(), State::Established)
            };
            if let Some(s) = self.subflows.get_mut(i).filter(|s| up(s)) {
                s.mp.report_up();
                self.report_sub(PmEventKind::SubEstablished, i);
            }
        }
    }

    /// Subflow `idx` is going, with `error` (an errno, 0 for an orderly
    /// close) and the peer's MP_TCPRST reason if it sent one. Only a
    /// subflow that was reported up is reported gone, as Linux.
    pub(super) fn report_sub_closed(&mut self, idx: usize, error: u32) {
        if !self.watched() || !self.subflows.get(idx).is_some_and(|s| s.mp.up_reported()) {
            return;
        }
        let Some(mut ev) = self.sub_event(PmEventKind::SubClosed, idx) else { return };
        ev.error = Some(error);
        if let Some((reason, flags)) = self.subflows.get(idx).and_then(|s| s.mp.rst_reason()) {
            (ev.reset_reason, ev.reset_flags) = (Some(reason), Some(flags));
        }
        if let Some(s) = self.subflows.get_mut(idx) {
            s.mp.report_down();
        }
        self.push_pm_event(ev);
    }

    /// The connection is gone.
    pub(crate) fn report_closed(&mut self) {
        if self.watched() && self.pm_events.created && !self.pm_events.closed {
            self.pm_events.closed = true;
            self.push_pm_event(PmEvent::new(PmEventKind::Closed, self.token_for_events()));
        }
    }

    /// The peer announced `addr` (HMAC verified).
    pub(super) fn report_announced(&mut self, id: u8, addr: IpAddr, port: Option<u16>) {
        if self.watched() {
            let mut ev = PmEvent::new(PmEventKind::Announced, self.token_for_events());
            ev.remote_id = Some(id);
            ev.remote = Some(SocketAddr::new(addr, port.unwrap_or(0)));
            if self.pm_events.established {
                self.push_pm_event(ev);
            } else if self.pm_events.deferred.len() < MAX_PM_EVENTS {
                self.pm_events.deferred.push(ev);
            }
        }
    }

    /// The peer withdrew its address `id`.
    pub(super) fn report_removed(&mut self, id: u8) {
        if self.watched() {
            let mut ev = PmEvent::new(PmEventKind::Removed, self.token_for_events());
            ev.remote_id = Some(id);
            self.push_pm_event(ev);
        }
    }

    // ------------------------------------------------------------------
    // Commands
    // ------------------------------------------------------------------

    /// The connection can take a command at all: it speaks MPTCP.
    fn pm_usable(&self) -> Result<(), PmError> {
        if !self.mode.is_mapped() {
            return Err(PmError::Fallback);
        }
        Ok(())
    }

    /// `announce`: ADD_ADDR of our address `addr` (with `port`, where the
    /// peer should join instead of the initial subflow's port) under `id`,
    /// retransmitted until echoed. Id 0 is the initial subflow's; an id
    /// already announced for another address is refused, the same one
    /// announced again is sent again.
    pub fn pm_announce(&mut self, id: u8, addr: IpAddr, port: Option<u16>) -> Result<(), PmError> {
        self.pm_usable()?;
        if self.joins_closed() {
            return Err(PmError::Closing);
        }
        if !usable_unicast(addr) || port == Some(0) {
            return Err(PmError::BadAddress);
        }
        let cfg_clash = self.cfg.mptcp.pm.endpoints.iter().any(|e| e.id == id && e.addr != addr);
        if id == 0 || self.paths.announced_other(id, addr) || cfg_clash {
            return Err(PmError::IdInUse);
        }
        let now = self.last_now;
        // An RM_ADDR of the same id still queued goes first: the peer
        // drops the old address before it hears of the new one.
        self.paths.announce_again(id, addr, port, now);
        self.sync_announce_timer();
        Ok(())
    }

    /// `remove`: RM_ADDR of our address `id`, and our subflows from it
    /// close (their data goes to the others), as the peer's PM expects of
    /// a withdrawn address. Id 0 names the initial subflow's address.
    pub fn pm_remove(&mut self, id: u8) -> Result<(), PmError> {
        self.pm_usable()?;
        let used = self.subflows.live().any(|s| s.mp.local_id() == id && s.is_open());
        let announced = self.paths.is_announced(id);
        if !used && !announced {
            return Err(PmError::NoSuchId);
        }
        let now = self.last_now;
        self.paths.withdraw(id, now);
        self.close_subflows_where(|s| s.mp.local_id() == id);
        self.sync_announce_timer();
        Ok(())
    }

    /// The initial subflow's (local, remote) pair, also once it is gone.
    fn initial_addresses(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.paths.initial().or_else(|| self.addresses())
    }

    /// The address id our address `addr` has for the peer: 0 for the
    /// initial subflow's, the id we announced it under, or the id of the
    /// endpoint it is; `None` when the peer knows no id of it.
    pub(super) fn known_local_id(&self, addr: IpAddr) -> Option<u8> {
        if self.initial_addresses().is_some_and(|(l, _)| l.ip() == addr) {
            return Some(0);
        }
        // A port endpoint's id names joins at its port only, not the address.
        let port_ep = |i: u8| self.cfg.mptcp.pm.endpoints.iter().any(|e| e.id == i && e.port.is_some());
        let announced = self.paths.announced_id(addr, port_ep);
        announced
            .or_else(|| self.cfg.mptcp.pm.endpoints.iter().find(|e| e.addr == addr && e.port.is_none()).map(|e| e.id))
    }

    /// Whether id `id` already names an address other than `addr`.
    fn id_taken(&self, id: u8, addr: IpAddr) -> bool {
        let initial = id == 0 && self.initial_addresses().is_some_and(|(l, _)| l.ip() != addr);
        initial
            || self.paths.announced_other(id, addr)
            || self.cfg.mptcp.pm.endpoints.iter().any(|e| e.id == id && e.addr != addr)
            || self.subflows.live().any(|s| s.mp.local_id() == id && s.is_open() && s.tcp.local().ip() != addr)
    }

    /// `subflow-create`: a join from our address `local` (address id
    /// `local_id`) to `remote`, a backup one if asked; the endpoint picks
    /// a source port, so several subflows may share an address pair.
    /// Within the `subflows` limit, which counts the subflows up, in their
    /// handshake, and asked for.
    pub fn pm_subflow_create(
        &mut self,
        local: IpAddr,
        local_id: u8,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<(), PmError> {
        self.pm_usable()?;
        if self.own_joins_closed() {
            return Err(PmError::Closing);
        }
        if !self.hs.fully_established() || self.hs.remote_key().is_none() {
            return Err(PmError::NotEstablished);
        }
        if !usable_unicast(local) || !usable_unicast(remote.ip()) || remote.port() == 0 {
            return Err(PmError::BadAddress);
        }
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(PmError::BadAddress);
        }
        // The join carries the id the peer knows the address by: the
        // initial subflow's is 0, an announced one its announcement's. A
        // given id that names another address is refused, as Linux's
        // `mptcp_userspace_pm_append_new_local_addr`.
        let local_id = match self.known_local_id(local) {
            Some(known) if local_id == known || (local_id == 0 && known != 0) => known,
            Some(_) => return Err(PmError::IdInUse),
            None if local_id == 0 || self.id_taken(local_id, local) => return Err(PmError::IdInUse),
            None => local_id,
        };
        if self.additional_subflows() >= self.cfg.mptcp.pm.max_subflows as usize {
            return Err(PmError::LimitReached);
        }
        self.paths.request_join(JoinRequest {
            local,
            local_id,
            remote: remote.ip(),
            remote_port: remote.port(),
            backup,
        });
        Ok(())
    }

    /// `subflow-destroy`: closes the subflow between `local` and `remote`
    /// (a port 0 matches any port); its data goes to the others.
    pub fn pm_subflow_destroy(&mut self, local: SocketAddr, remote: SocketAddr) -> Result<(), PmError> {
        self.pm_usable()?;
        let m = |want: SocketAddr, got: SocketAddr| {
            want.ip() == got.ip() && (want.port() == 0 || want.port() == got.port())
        };
        let hit = |s: &super::slot::SubflowSlot| s.is_open() && m(local, s.tcp.local()) && m(remote, s.tcp.remote());
        let Some(first) = self.subflows.iter().find(|(_, s)| hit(s)).map(|(i, _)| i) else {
            return Err(PmError::NoSuchSubflow);
        };
        let (l, r) = self.subflows.get(first).map(|s| (s.tcp.local(), s.tcp.remote())).expect("found above");
        self.close_subflows_where(|s| s.tcp.local() == l && s.tcp.remote() == r);
        Ok(())
    }

    /// `set-flags`: backup or not for every open subflow from our address
    /// `local` (to `remote` only, if given; its port 0 matches any), each
    /// told to the peer with MP_PRIO. Returns how many subflows it touched.
    pub fn pm_set_flags(&mut self, local: IpAddr, remote: Option<SocketAddr>, backup: bool) -> Result<usize, PmError> {
        self.pm_usable()?;
        let to = |r: SocketAddr, got: SocketAddr| r.ip() == got.ip() && (r.port() == 0 || r.port() == got.port());
        let ids: Vec<usize> = self
            .subflows
            .iter()
            .filter(|(_, s)| s.is_open() && s.tcp.local().ip() == local && remote.is_none_or(|r| to(r, s.tcp.remote())))
            .map(|(i, _)| i)
            .collect();
        if ids.is_empty() {
            return Err(PmError::NoSuchSubflow);
        }
        for &i in &ids {
            let changed = self.subflows.get(i).is_some_and(|s| s.mp.backup() != backup);
            self.set_backup(i, backup);
            if changed {
                self.report_sub(PmEventKind::SubPriority, i);
            }
        }
        Ok(ids.len())
    }

    // ------------------------------------------------------------------
    // The in-kernel PM's endpoints, changed while the connection lives
    // ------------------------------------------------------------------

    /// `ip mptcp endpoint add`: the connection's PM knows the endpoint
    /// from now on; once fully established it announces a `signal` one
    /// and opens a subflow from a `subflow` one to the peer's initial
    /// address, within its limits (`mptcp_nl_add_subflow_or_signal_addr`).
    pub(crate) fn pm_endpoint_added(&mut self, ep: PmEndpoint) {
        self.cfg.mptcp.pm.endpoints.retain(|e| e.id != ep.id);
        self.cfg.mptcp.pm.endpoints.push(ep);
        if self.paths.initial().is_some_and(|(l, _)| l.ip() == ep.addr) {
            self.paths.set_initial_local_withdrawn(false);
        }
        if !self.mode.is_mapped() || !self.hs.fully_established() || !self.paths.pm_announced() {
            // Not yet established: the PM takes it when it is.
            return;
        }
        let Some((l0, r0)) = self.initial_addresses() else { return };
        if ep.flags.signal && (ep.addr != l0.ip() || ep.port.is_some()) {
            let _ = self.pm_announce(ep.id, ep.addr, ep.port);
        }
        // A subflow from it, unless one is open already: the initial
        // subflow's address too once that subflow is gone (the interface
        // the connection started on came back), with id 0 as the peer
        // knows it.
        let from_it = self.subflows.live().any(|s| s.is_open() && s.tcp.local().ip() == ep.addr);
        if ep.flags.subflow && !from_it && ep.addr.is_ipv4() == r0.is_ipv4() && !self.hs.peer_no_src_addr() {
            // Within the limit: `pm_subflow_create` refuses beyond it.
            let id = self.known_local_id(ep.addr).unwrap_or(ep.id);
            let _ = self.pm_subflow_create(ep.addr, id, r0, ep.flags.backup);
            self.sync_subflow_count();
        }
    }

    /// `ip mptcp endpoint delete`: the address `id` is withdrawn (RM_ADDR
    /// if it was announced) and our subflows from it close
    /// (`mptcp_nl_remove_subflow_and_signal_addr`).
    ///
    /// The initial subflow's address is id 0 to the peer, so deleting its
    /// endpoint withdraws id 0 and closes the initial subflow too (Linux
    /// 6.x, `mptcp_pm_nl_rm_addr_or_subflow` with id 0). Subflows from the
    /// address under any id close (a join to an announcement from a
    /// matching source carries the source's), unless none would be left.
    ///
    /// A port endpoint withdraws its own id and closes only the subflows
    /// joined at its port.
    pub(crate) fn pm_endpoint_deleted(&mut self, id: u8) {
        let ep = self.cfg.mptcp.pm.endpoints.iter().find(|e| e.id == id).copied();
        self.cfg.mptcp.pm.endpoints.retain(|e| e.id != id);
        let Some(ep) = ep else { return };
        if !self.mode.is_mapped() {
            return;
        }
        let addr = ep.addr;
        let from_it = |s: &super::slot::SubflowSlot| {
            s.tcp.local().ip() == addr && ep.port.is_none_or(|p| s.tcp.local().port() == p)
        };
        if ep.port.is_some() {
            let _ = self.pm_remove_announced(id);
            self.close_subflows_where(from_it);
            self.sync_subflow_count();
            return;
        }
        let wire_id = self.known_local_id(addr).filter(|&k| k == 0).unwrap_or(id);
        if wire_id == 0 {
            self.paths.set_initial_local_withdrawn(true);
        }
        // A path that carries data, not a join still in its handshake.
        let others = self.subflows.live().any(|s| s.is_open() && s.mp.join().usable() && !from_it(s));
        if !others {
            // The address carries the last path: the connection keeps it
            // (and the peer the address) rather than be left with none,
            // where Linux would close it and wait for a new path.
            return;
        }
        // RM_ADDR of the id, and our subflows from the address close (by
        // address: joins we took at other addresses may carry id 0 too).
        // Only an id the peer knows: announced, or carried by a subflow.
        let known = self.paths.is_announced(wire_id)
            || self.subflows.live().any(|s| s.is_open() && s.mp.local_id() == wire_id && from_it(s));
        if known {
            let now = self.last_now;
            self.paths.withdraw(wire_id, now);
            self.sync_announce_timer();
        }
        self.close_subflows_where(from_it);
        self.sync_subflow_count();
    }

    /// RM_ADDR of an id we announced, without closing anything (a port
    /// endpoint's subflows are closed by port by the caller).
    fn pm_remove_announced(&mut self, id: u8) -> Result<(), PmError> {
        if !self.paths.is_announced(id) {
            return Err(PmError::NoSuchId);
        }
        let now = self.last_now;
        self.paths.withdraw(id, now);
        self.sync_announce_timer();
        Ok(())
    }

    /// `ip mptcp endpoint change ID backup|nobackup`: subflows from the
    /// address change priority (MP_PRIO).
    pub(crate) fn pm_endpoint_changed(&mut self, ep: PmEndpoint) {
        self.cfg.mptcp.pm.endpoints.retain(|e| e.id != ep.id);
        self.cfg.mptcp.pm.endpoints.push(ep);
        if self.mode.is_mapped() {
            let _ = self.pm_set_flags(ep.addr, None, ep.flags.backup);
        }
    }

    /// `ip mptcp limits set`: the connection's limits from now on.
    pub(crate) fn pm_limits_changed(&mut self, cfg: &PmConfig) {
        self.cfg.mptcp.pm.max_subflows = cfg.max_subflows;
        self.cfg.mptcp.pm.max_add_addr_accepted = cfg.max_add_addr_accepted;
    }
}
