//! The path manager of a running stack, driven from the program that owns
//! it as Linux's is driven through the `mptcp_pm` generic-netlink family
//! (`Documentation/netlink/specs/mptcp_pm.yaml`, what mptcpd and
//! `ip mptcp` speak): the in-kernel PM's endpoints and limits, the
//! userspace PM's commands by token, and its events as an async stream.
//!
//! Handover, mobility and failover experiments change paths in the middle
//! of a connection: an operator deletes the endpoint of an interface that
//! went down, adds it back when it returns, or marks a path backup, and a
//! program watching the events sees what the connections made of it.

use std::net::{IpAddr, SocketAddr};

use mptun_proto::pm::{EndpointFlags, PmEndpoint, PmError, PmEvent};
use tokio::sync::broadcast;

use crate::state::State;
pub use crate::state::PM_EVENT_BACKLOG;
use crate::Stack;

/// The path manager of a [`Stack`] ([`Stack::path_manager`]). Cheap to
/// clone; every method takes the stack's lock for a few calls into the
/// protocol core and wakes its driver, which sends what the change asked
/// for (ADD_ADDR, RM_ADDR, MP_PRIO, join SYNs).
#[derive(Clone, Debug)]
pub struct PathManager {
    stack: Stack,
}

/// The `subflows` and `add_addr_accepted` limits (`ip mptcp limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmLimits {
    /// Additional subflows per connection, opened or accepted.
    pub subflows: u8,
    /// Peer announcements acted on per connection.
    pub add_addr_accepted: u8,
}

impl Stack {
    /// The stack's path manager: endpoints, limits, commands and events.
    pub fn path_manager(&self) -> PathManager {
        PathManager { stack: self.clone() }
    }
}

impl PathManager {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.stack.shared().update(|st| {
            let r = f(st);
            st.flush_pm_events();
            r
        })
    }

    /// Subscribes to the events of every connection and listener from now
    /// on (`ip mptcp monitor`). The stack keeps none until someone
    /// subscribes, so a stack nobody watches pays nothing for them.
    pub fn events(&self) -> PmEvents {
        self.with(|st| PmEvents { rx: st.pm_events_sender().subscribe(), lost: 0 })
    }

    /// `announce`: ADD_ADDR of our address `addr` under `id` on the
    /// connection with our token `token`, with `port` where the peer should
    /// join instead of the connection's port.
    pub fn announce(&self, token: u32, id: u8, addr: IpAddr, port: Option<u16>) -> Result<(), PmError> {
        self.with(|st| st.ep.pm_announce(token, id, addr, port))
    }

    /// `remove`: RM_ADDR of our address `id`; our subflows from it close.
    pub fn remove(&self, token: u32, id: u8) -> Result<(), PmError> {
        self.with(|st| st.ep.pm_remove(token, id))
    }

    /// `subflow-create`: a join from our `local` address (id `local_id`, 0
    /// to take the id the peer already knows it by) to `remote`.
    pub fn subflow_create(
        &self,
        token: u32,
        local: IpAddr,
        local_id: u8,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<(), PmError> {
        self.with(|st| st.ep.pm_subflow_create(token, local, local_id, remote, backup))
    }

    /// `subflow-destroy`: closes the subflow between `local` and `remote`
    /// (port 0 matches any); its data goes to the others.
    pub fn subflow_destroy(&self, token: u32, local: SocketAddr, remote: SocketAddr) -> Result<(), PmError> {
        self.with(|st| st.ep.pm_subflow_destroy(token, local, remote))
    }

    /// `set-flags`: backup or not for the subflows from `local` (to
    /// `remote` only, if given), each told to the peer with MP_PRIO.
    /// Returns how many subflows changed hands.
    pub fn set_flags(
        &self,
        token: u32,
        local: IpAddr,
        remote: Option<SocketAddr>,
        backup: bool,
    ) -> Result<usize, PmError> {
        self.with(|st| st.ep.pm_set_flags(token, local, remote, backup))
    }

    /// `ip mptcp endpoint add`: `ep.addr` must be one of the stack's path
    /// addresses; id 0 takes the lowest free one. Returns the id. Live
    /// connections announce a `signal` endpoint and open a subflow from a
    /// `subflow` one, as new connections do.
    pub fn endpoint_add(&self, ep: PmEndpoint) -> Result<u8, PmError> {
        self.with(|st| {
            if !st.local_ips.contains(&ep.addr) {
                return Err(PmError::AddrNotLocal);
            }
            st.ep.pm_endpoint_add(ep)
        })
    }

    /// `ip mptcp endpoint delete id ID`: RM_ADDR where it was announced,
    /// and the subflows from the address close.
    pub fn endpoint_delete(&self, id: u8) -> Result<PmEndpoint, PmError> {
        self.with(|st| st.ep.pm_endpoint_delete(id))
    }

    /// `ip mptcp endpoint change id ID [backup|nobackup] [fullmesh|nofullmesh]`:
    /// a change of `backup` sends MP_PRIO on the subflows from the address.
    pub fn endpoint_change(&self, id: u8, flags: EndpointFlags) -> Result<(), PmError> {
        self.with(|st| st.ep.pm_endpoint_change(id, flags))
    }

    /// `ip mptcp endpoint flush`: every endpoint deleted; returns them.
    pub fn endpoint_flush(&self) -> Vec<PmEndpoint> {
        self.with(|st| st.ep.pm_endpoint_flush())
    }

    /// `ip mptcp endpoint show`.
    pub fn endpoints(&self) -> Vec<PmEndpoint> {
        self.stack.shared().lock().ep.pm_config().endpoints.clone()
    }

    /// `ip mptcp limits set`: `None` leaves a limit as it is. Live
    /// connections take the new limits too.
    pub fn set_limits(&self, subflows: Option<u8>, add_addr_accepted: Option<u8>) {
        self.with(|st| st.ep.pm_limits_set(subflows, add_addr_accepted));
    }

    /// `ip mptcp limits show`.
    pub fn limits(&self) -> PmLimits {
        let st = self.stack.shared().lock();
        let pm = st.ep.pm_config();
        PmLimits { subflows: pm.max_subflows, add_addr_accepted: pm.max_add_addr_accepted }
    }
}

/// A subscription to a stack's path-manager events ([`PathManager::events`]).
#[derive(Debug)]
pub struct PmEvents {
    rx: broadcast::Receiver<PmEvent>,
    lost: u64,
}

impl PmEvents {
    /// The next event; `None` once the stack is gone. A subscriber that
    /// fell more than [`PM_EVENT_BACKLOG`] events behind skips the oldest
    /// (counted in [`PmEvents::lost`]) rather than hold the stack back.
    pub async fn recv(&mut self) -> Option<PmEvent> {
        loop {
            match self.rx.recv().await {
                Ok(ev) => return Some(ev),
                Err(broadcast::error::RecvError::Lagged(n)) => self.lost += n,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next event if one is waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<PmEvent> {
        loop {
            match self.rx.try_recv() {
                Ok(ev) => return Some(ev),
                Err(broadcast::error::TryRecvError::Lagged(n)) => self.lost += n,
                Err(_) => return None,
            }
        }
    }

    /// The stack is gone: no event will come any more (those waiting are
    /// still read first).
    pub fn closed(&self) -> bool {
        self.rx.is_empty() && self.rx.sender_strong_count() == 0
    }

    /// Events this subscriber lost by falling behind.
    pub fn lost(&self) -> u64 {
        self.lost
    }
}

/// The path-manager commands of one connection
/// ([`crate::MptcpStream::path_manager`]): [`PathManager`]'s, with the
/// connection's token filled in.
#[derive(Clone, Debug)]
pub struct ConnectionPm {
    pm: PathManager,
    token: u32,
}

impl ConnectionPm {
    pub(crate) fn new(stack: Stack, token: u32) -> Self {
        ConnectionPm { pm: stack.path_manager(), token }
    }

    /// The connection's token (ours), as events name it.
    pub fn token(&self) -> u32 {
        self.token
    }

    /// See [`PathManager::announce`].
    pub fn announce(&self, id: u8, addr: IpAddr, port: Option<u16>) -> Result<(), PmError> {
        self.pm.announce(self.token, id, addr, port)
    }

    /// See [`PathManager::remove`].
    pub fn remove(&self, id: u8) -> Result<(), PmError> {
        self.pm.remove(self.token, id)
    }

    /// See [`PathManager::subflow_create`].
    pub fn subflow_create(&self, local: IpAddr, local_id: u8, remote: SocketAddr, backup: bool) -> Result<(), PmError> {
        self.pm.subflow_create(self.token, local, local_id, remote, backup)
    }

    /// See [`PathManager::subflow_destroy`].
    pub fn subflow_destroy(&self, local: SocketAddr, remote: SocketAddr) -> Result<(), PmError> {
        self.pm.subflow_destroy(self.token, local, remote)
    }

    /// See [`PathManager::set_flags`]: the backup flag of the subflows
    /// from `local`, told to the peer with MP_PRIO.
    pub fn set_backup(&self, local: IpAddr, remote: Option<SocketAddr>, backup: bool) -> Result<usize, PmError> {
        self.pm.set_flags(self.token, local, remote, backup)
    }
}
