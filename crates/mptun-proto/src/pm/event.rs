//! Path-manager events, as Linux's userspace path manager reports them on
//! the `mptcp_pm` generic-netlink family (`Documentation/netlink/specs/
//! mptcp_pm.yaml`, what `ip mptcp monitor` and mptcpd read): the same
//! kinds, names and attributes, so a program written against one reads the
//! other.

use std::net::SocketAddr;

/// What happened (`mptcp_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PmEventKind {
    /// An MPTCP connection exists: its initial subflow is established
    /// (`MPTCP_EVENT_CREATED`).
    Created,
    /// It is fully established: both keys are known, joins may come
    /// (`MPTCP_EVENT_ESTABLISHED`).
    Established,
    /// It is gone (`MPTCP_EVENT_CLOSED`).
    Closed,
    /// The peer announced an address (ADD_ADDR, HMAC verified)
    /// (`MPTCP_EVENT_ANNOUNCED`).
    Announced,
    /// The peer withdrew an address id (RM_ADDR) (`MPTCP_EVENT_REMOVED`).
    Removed,
    /// A joined subflow is up (`MPTCP_EVENT_SUB_ESTABLISHED`).
    SubEstablished,
    /// A subflow is gone, with its error and the peer's MP_TCPRST reason
    /// (`MPTCP_EVENT_SUB_CLOSED`).
    SubClosed,
    /// A subflow's backup flag changed (`MPTCP_EVENT_SUB_PRIORITY`).
    SubPriority,
    /// A listener was opened (`MPTCP_EVENT_LISTENER_CREATED`).
    ListenerCreated,
    /// A listener was closed (`MPTCP_EVENT_LISTENER_CLOSED`).
    ListenerClosed,
}

impl PmEventKind {
    /// Every kind, in `mptcp_event_type` order.
    pub const ALL: [PmEventKind; 10] = [
        PmEventKind::Created,
        PmEventKind::Established,
        PmEventKind::Closed,
        PmEventKind::Announced,
        PmEventKind::Removed,
        PmEventKind::SubEstablished,
        PmEventKind::SubClosed,
        PmEventKind::SubPriority,
        PmEventKind::ListenerCreated,
        PmEventKind::ListenerClosed,
    ];

    /// The name `mptcp_pm.yaml` gives it (and `ip mptcp monitor` prints, upper-cased).
    pub fn name(self) -> &'static str {
        match self {
            PmEventKind::Created => "created",
            PmEventKind::Established => "established",
            PmEventKind::Closed => "closed",
            PmEventKind::Announced => "announced",
            PmEventKind::Removed => "removed",
            PmEventKind::SubEstablished => "sub-established",
            PmEventKind::SubClosed => "sub-closed",
            PmEventKind::SubPriority => "sub-priority",
            PmEventKind::ListenerCreated => "listener-created",
            PmEventKind::ListenerClosed => "listener-closed",
        }
    }
}

/// One event with the attributes the kernel gives it (`mptcp_pm.yaml`,
/// `event-attr`); an attribute the kernel leaves out of that kind is `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmEvent {
    /// What happened.
    pub kind: PmEventKind,
    /// Our token for the connection (0 for listener events).
    pub token: u32,
    /// Local address and port (`saddr4`/`saddr6`, `sport`).
    pub local: Option<SocketAddr>,
    /// Remote address and port (`daddr4`/`daddr6`, `dport`); for
    /// `announced`, the address the peer announced and its port (0: none).
    pub remote: Option<SocketAddr>,
    /// Our address id (`loc-id`).
    pub local_id: Option<u8>,
    /// The peer's address id (`rem-id`).
    pub remote_id: Option<u8>,
    /// The subflow is a backup one (`backup`).
    pub backup: bool,
    /// We accepted the connection (`server-side`).
    pub server_side: bool,
    /// Why a subflow closed, as an errno (`error`): 0 for an orderly close,
    /// `ECONNRESET` (104) for a reset, `ETIMEDOUT` (110) for a timeout, the
    /// errno of an ICMP error (`ENETUNREACH` 101, ...: `Unreachable::errno`)
    /// that ended its handshake or explained its timeout.
    pub error: Option<u32>,
    /// The MP_TCPRST reason the peer sent with its reset (`reset-reason`).
    pub reset_reason: Option<u8>,
    /// The MP_TCPRST flags the peer sent with its reset (`reset-flags`).
    pub reset_flags: Option<u8>,
}

/// `ECONNRESET`: the subflow was reset.
pub const ECONNRESET: u32 = 104;
/// `ETIMEDOUT`: the subflow timed out.
pub const ETIMEDOUT: u32 = 110;

impl PmEvent {
    /// An event of `kind` about connection `token`, every attribute empty.
    pub fn new(kind: PmEventKind, token: u32) -> Self {
        PmEvent {
            kind,
            token,
            local: None,
            remote: None,
            local_id: None,
            remote_id: None,
            backup: false,
            server_side: false,
            error: None,
            reset_reason: None,
            reset_flags: None,
        }
    }
}

impl core::fmt::Display for PmEvent {
    /// One line in the manner of `ip mptcp monitor`:
    /// `[       CREATED] token=0x1234abcd remid=0 locid=0 saddr4=... sport=... dport=...`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "[{:>16}] token={:08x}", self.kind.name().to_uppercase(), self.token)?;
        if let Some(id) = self.remote_id {
            write!(f, " remid={id}")?;
        }
        if let Some(id) = self.local_id {
            write!(f, " locid={id}")?;
        }
        let fam = |a: &SocketAddr| if a.is_ipv4() { '4' } else { '6' };
        if let Some(a) = self.local {
            write!(f, " saddr{}={} sport={}", fam(&a), a.ip(), a.port())?;
        }
        if let Some(a) = self.remote {
            write!(f, " daddr{}={} dport={}", fam(&a), a.ip(), a.port())?;
        }
        if matches!(self.kind, PmEventKind::SubEstablished | PmEventKind::SubClosed | PmEventKind::SubPriority) {
            write!(f, " backup={}", self.backup as u8)?;
        }
        if let Some(e) = self.error {
            write!(f, " error={e}")?;
        }
        if let Some(r) = self.reset_reason {
            write!(f, " reset_reason={r}")?;
        }
        if let Some(r) = self.reset_flags {
            write!(f, " reset_flags={r:#x}")?;
        }
        if matches!(self.kind, PmEventKind::Created | PmEventKind::Established) {
            write!(f, " server_side={}", self.server_side as u8)?;
        }
        Ok(())
    }
}
