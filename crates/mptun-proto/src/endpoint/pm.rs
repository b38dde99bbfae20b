//! The endpoint's path-manager interface: what `ip mptcp endpoint`,
//! `ip mptcp limits` and `ip mptcp monitor` do to the kernel, and the
//! userspace PM's commands (`mptcp_pm.yaml`), addressed by token as there.
//! Endpoint and limit changes apply to new connections and, as the
//! in-kernel PM applies them, to the live ones.

use super::{ConnectionHandle, Endpoint};
use crate::mptcp::Connection;
use crate::pm::{EndpointFlags, PmConfig, PmEndpoint, PmError, PmEvent, PmEventKind};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

/// Events the endpoint keeps for a listener that has not read them (the
/// oldest go first, `MptunPmEventsDropped`).
pub const MAX_ENDPOINT_PM_EVENTS: usize = 4096;

impl Endpoint {
    /// Starts keeping path-manager events of every connection and
    /// listener (as subscribing to the `mptcp_pm_events` multicast group):
    /// read them with [`Endpoint::poll_pm_event`]. Off by default, so an
    /// endpoint nobody watches keeps nothing.
    pub fn listen_pm_events(&mut self) {
        if self.pm_events.is_some() {
            return;
        }
        self.pm_events = Some(VecDeque::new());
        for s in self.conns.iter_mut().flatten() {
            s.conn.listen_pm_events();
        }
    }

    /// The next path-manager event and the connection it is about (for
    /// listener events, the handle is `usize::MAX`).
    pub fn poll_pm_event(&mut self) -> Option<(ConnectionHandle, PmEvent)> {
        self.pm_events.as_mut()?.pop_front()
    }

    pub(super) fn push_pm_event(&mut self, h: ConnectionHandle, ev: PmEvent) {
        let Some(q) = self.pm_events.as_mut() else { return };
        if q.len() >= MAX_ENDPOINT_PM_EVENTS {
            q.pop_front();
            self.counters.mptun_pm_events_dropped += 1;
        }
        q.push_back((h, ev));
    }

    /// Moves the events connection `h` reported to the endpoint's queue.
    pub(super) fn collect_pm_events(&mut self, h: ConnectionHandle) {
        if self.pm_events.is_none() {
            return;
        }
        while let Some(ev) = self.slot_mut(h).and_then(|s| s.conn.poll_pm_event()) {
            self.push_pm_event(h, ev);
        }
    }

    /// A listener event about `addr`.
    pub(super) fn listener_event(&mut self, kind: PmEventKind, addr: SocketAddr) {
        let mut ev = PmEvent::new(kind, 0);
        ev.local = Some(addr);
        self.push_pm_event(ConnectionHandle(usize::MAX), ev);
    }

    /// Declares `addr` one of this host's addresses: commands that name a
    /// local address must name one of these (once any is declared).
    pub fn add_local_address(&mut self, addr: IpAddr) {
        self.local_addrs.insert(addr);
    }

    fn check_local(&self, addr: IpAddr) -> Result<(), PmError> {
        if self.local_addrs.is_empty() || self.local_addrs.contains(&addr) {
            Ok(())
        } else {
            Err(PmError::AddrNotLocal)
        }
    }

    /// The connection whose token (ours) is `token`.
    pub fn by_token(&self, token: u32) -> Option<ConnectionHandle> {
        self.tokens.get(&token).copied()
    }

    /// Runs a command on the connection with `token`, then lets the
    /// endpoint carry out what it asked for (joins, announcements).
    fn command<R>(&mut self, token: u32, f: impl FnOnce(&mut Connection) -> Result<R, PmError>) -> Result<R, PmError> {
        let h = self.by_token(token).ok_or(PmError::UnknownToken)?;
        let c = self.conn_mut(h).ok_or(PmError::UnknownToken)?;
        let r = f(c)?;
        self.after_app(h);
        Ok(r)
    }

    /// `announce`: see [`Connection::pm_announce`]; `addr` must be local.
    pub fn pm_announce(&mut self, token: u32, id: u8, addr: IpAddr, port: Option<u16>) -> Result<(), PmError> {
        self.check_local(addr)?;
        self.command(token, |c| c.pm_announce(id, addr, port))
    }

    /// `remove`: see [`Connection::pm_remove`].
    pub fn pm_remove(&mut self, token: u32, id: u8) -> Result<(), PmError> {
        self.command(token, |c| c.pm_remove(id))
    }

    /// `subflow-create`: see [`Connection::pm_subflow_create`]; `local`
    /// must be local.
    pub fn pm_subflow_create(
        &mut self,
        token: u32,
        local: IpAddr,
        local_id: u8,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<(), PmError> {
        self.check_local(local)?;
        self.command(token, |c| c.pm_subflow_create(local, local_id, remote, backup))
    }

    /// `subflow-destroy`: see [`Connection::pm_subflow_destroy`].
    pub fn pm_subflow_destroy(&mut self, token: u32, local: SocketAddr, remote: SocketAddr) -> Result<(), PmError> {
        self.command(token, |c| c.pm_subflow_destroy(local, remote))
    }

    /// `set-flags`: see [`Connection::pm_set_flags`].
    pub fn pm_set_flags(
        &mut self,
        token: u32,
        local: IpAddr,
        remote: Option<SocketAddr>,
        backup: bool,
    ) -> Result<usize, PmError> {
        self.command(token, |c| c.pm_set_flags(local, remote, backup))
    }

    /// The path manager's endpoints and limits, as new connections get them.
    pub fn pm_config(&self) -> &PmConfig {
        &self.config.mptcp.pm
    }

    /// Every live MPTCP connection, for a change to apply to.
    fn each_conn(&mut self, mut f: impl FnMut(&mut Connection)) {
        let hs: Vec<ConnectionHandle> = self.handles().collect();
        for h in hs {
            if let Some(c) = self.conn_mut(h) {
                f(c);
            }
            self.after_app(h);
        }
    }

    /// `ip mptcp endpoint add`: a new endpoint (id 0: the lowest free one,
    /// as `ip` numbers them). Returns its id. Refused: an id or address
    /// already an endpoint, an address not local or not usable.
    pub fn pm_endpoint_add(&mut self, mut ep: PmEndpoint) -> Result<u8, PmError> {
        if !crate::pm::usable_unicast(ep.addr) {
            return Err(PmError::BadAddress);
        }
        self.check_local(ep.addr)?;
        // A port endpoint is announced for joins at its port (Linux wants
        // `signal` with a port) and may share its address with a plain one.
        if ep.port == Some(0) || (ep.port.is_some() && (!ep.flags.signal || ep.flags.subflow || ep.flags.fullmesh)) {
            return Err(PmError::BadAddress);
        }
        let eps = &self.config.mptcp.pm.endpoints;
        if eps.iter().any(|e| e.addr == ep.addr && e.port == ep.port)
            || (ep.id != 0 && eps.iter().any(|e| e.id == ep.id))
        {
            return Err(PmError::IdInUse);
        }
        if ep.id == 0 {
            ep.id = (1..=255u8).find(|i| eps.iter().all(|e| e.id != *i)).ok_or(PmError::LimitReached)?;
        }
        self.config.mptcp.pm.endpoints.push(ep);
        self.each_conn(|c| c.pm_endpoint_added(ep));
        Ok(ep.id)
    }

    /// `ip mptcp endpoint delete id ID`: RM_ADDR on every connection that
    /// announced it, and their subflows from it close.
    pub fn pm_endpoint_delete(&mut self, id: u8) -> Result<PmEndpoint, PmError> {
        let eps = &mut self.config.mptcp.pm.endpoints;
        let i = eps.iter().position(|e| e.id == id).ok_or(PmError::NoSuchId)?;
        let ep = eps.remove(i);
        self.each_conn(|c| c.pm_endpoint_deleted(id));
        Ok(ep)
    }

    /// `ip mptcp endpoint change id ID backup|nobackup [fullmesh|nofullmesh]`:
    /// subflows from the address change priority (MP_PRIO).
    pub fn pm_endpoint_change(&mut self, id: u8, flags: EndpointFlags) -> Result<(), PmError> {
        let ep = self.config.mptcp.pm.endpoints.iter_mut().find(|e| e.id == id).ok_or(PmError::NoSuchId)?;
        let prio_changed = ep.flags.backup != flags.backup;
        ep.flags.backup = flags.backup;
        ep.flags.fullmesh = flags.fullmesh;
        let ep = *ep;
        if prio_changed {
            self.each_conn(|c| c.pm_endpoint_changed(ep));
        }
        Ok(())
    }

    /// `ip mptcp endpoint flush`: every endpoint deleted.
    pub fn pm_endpoint_flush(&mut self) -> Vec<PmEndpoint> {
        let ids: Vec<u8> = self.config.mptcp.pm.endpoints.iter().map(|e| e.id).collect();
        ids.into_iter().filter_map(|id| self.pm_endpoint_delete(id).ok()).collect()
    }

    /// `ip mptcp limits set [subflows N] [add_addr_accepted M]`.
    pub fn pm_limits_set(&mut self, subflows: Option<u8>, add_addr_accepted: Option<u8>) {
        let pm = &mut self.config.mptcp.pm;
        if let Some(n) = subflows {
            pm.max_subflows = n;
        }
        if let Some(n) = add_addr_accepted {
            pm.max_add_addr_accepted = n;
        }
        let pm = pm.clone();
        self.each_conn(|c| c.pm_limits_changed(&pm));
    }
}
