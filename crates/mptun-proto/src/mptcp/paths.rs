//! The connection's path-manager state (Linux keeps it in `mptcp_pm_data`):
//! the addresses we owe the peer an ADD_ADDR (or an echo) for, the
//! subflows the path manager wants opened, and the bounds on the joins the
//! connection takes. The decisions themselves are the [`crate::pm`]
//! module's; `signal.rs` carries them out.

use crate::pm::{JoinRequest, PmState};
use mptun_time::{Duration, Instant};
use std::net::IpAddr;

/// Retransmissions of an unechoed ADD_ADDR before it is given up (Linux
/// `ADD_ADDR_RETRANS_MAX`), each `MptcpConfig::add_addr_timeout` apart.
pub(crate) const ADD_ADDR_RETRANS_MAX: u8 = 3;

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

/// The first wait before a failed subflow is opened again; doubled for
/// each failure in a row (a re-opened subflow that never came up), up to
/// [`REOPEN_BACKOFF_MAX`].
pub(crate) const REOPEN_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two re-opens of one subflow.
pub(crate) const REOPEN_BACKOFF_MAX: Duration = Duration::from_secs(64);

/// A subflow of the path manager's that failed (reset or timed out), to be
/// opened again while its endpoint exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reopen {
    pub at: Instant,
    pub req: JoinRequest,
    /// Failures in a row before this one opens (0: the subflow had been up).
    pub attempt: u32,
}

/// An announcement we owe the peer, or an echo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AddrAnnounce {
    pub id: u8,
    pub addr: IpAddr,
    pub port: Option<u16>,
    pub echo: bool,
    /// An RM_ADDR for `id` instead (sent once, as Linux sends it).
    pub remove: bool,
    /// Next (re)transmission.
    pub at: Instant,
    /// Transmissions so far: the first and at most `ADD_ADDR_RETRANS_MAX`
    /// retransmissions, as Linux.
    pub sent: u8,
}

/// Path-manager state of one connection.
#[derive(Debug)]
pub(super) struct Paths {
    /// What the PM decided so far (subflows opened, announcements accepted).
    pub pm: PmState,
    /// ADD_ADDRs and echoes owed, each with its next (re)transmission.
    pub announce: Vec<AddrAnnounce>,
    /// Retransmission interval of an unechoed ADD_ADDR (`add_addr_timeout`).
    pub add_addr_timeout: Duration,
    /// Subflows the PM wants opened; the endpoint creates them.
    pub pending_joins: Vec<JoinRequest>,
    /// MP_JOIN SYNs taken in the current one-second window: (window start, count).
    pub join_window: (Instant, u32),
    /// Our addresses announced to the peer (by the PM or a command), by
    /// id: what an RM_ADDR withdraws and a new announcement must not clash with.
    pub announced: Vec<(u8, IpAddr)>,
    /// The peer's announcements acted on, by (id, address, port): a
    /// retransmitted one is not joined again. One entry per id (a new
    /// address under an id replaces the old), so at most 256.
    pub peer_announced: Vec<(u8, IpAddr, u16)>,
    /// The initial subflow's (local, remote) pair, kept after that subflow
    /// is gone: the addresses the peer knows as id 0, and where a subflow
    /// endpoint added later joins to (a handover back to the interface the
    /// connection started on).
    pub initial: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    /// Failed subflows to open again, each at its time; at most one per
    /// failed subflow, so bounded by the `subflows` limit.
    pub reopen: Vec<Reopen>,
    /// Re-opens handed to the endpoint as joins, with their attempt
    /// number, until their subflow is placed (it takes the number).
    pub reopening: Vec<(JoinRequest, u32)>,
    /// Our initial address was withdrawn (its endpoint deleted): nothing is
    /// opened from it again until it is an endpoint again.
    pub initial_local_withdrawn: bool,
    /// The peer withdrew its initial address (RM_ADDR id 0).
    pub peer_initial_removed: bool,
}

impl Paths {
    pub fn new(now: Instant, add_addr_timeout: Duration) -> Self {
        Paths {
            pm: PmState::default(),
            announce: Vec::new(),
            add_addr_timeout,
            pending_joins: Vec::new(),
            join_window: (now, 0),
            announced: Vec::new(),
            peer_announced: Vec::new(),
            initial: None,
            reopen: Vec::new(),
            reopening: Vec::new(),
            initial_local_withdrawn: false,
            peer_initial_removed: false,
        }
    }

    /// Notes the peer's announcement of `addr` under `id`.
    pub fn remember_peer_announcement(&mut self, id: u8, addr: IpAddr, port: u16) {
        self.peer_announced.retain(|&(i, _, _)| i != id);
        self.peer_announced.push((id, addr, port));
    }

    /// When the earliest re-open is due.
    pub fn next_reopen(&self) -> Option<Instant> {
        self.reopen.iter().map(|r| r.at).min()
    }

    /// When the earliest announcement is due.
    pub fn next_announce(&self) -> Option<Instant> {
        self.announce.iter().map(|a| a.at).min()
    }

    /// Queues an announcement (or echo) due at `now`.
    pub fn queue(&mut self, id: u8, addr: IpAddr, port: Option<u16>, echo: bool, now: Instant) {
        self.announce.push(AddrAnnounce { id, addr, port, echo, remove: false, at: now, sent: 0 });
    }

    /// Queues an RM_ADDR for our address `id`, due at `now`; an
    /// announcement of it not yet sent or echoed is dropped.
    pub fn queue_remove(&mut self, id: u8, now: Instant) {
        self.announce.retain(|a| a.echo || a.id != id);
        let addr = IpAddr::from([0, 0, 0, 0]);
        self.announce.push(AddrAnnounce { id, addr, port: None, echo: false, remove: true, at: now, sent: 0 });
    }

    /// Moves every announcement due at `now` out by `by`.
    pub fn postpone_due(&mut self, now: Instant, by: Duration) {
        for a in self.announce.iter_mut().filter(|a| a.at <= now) {
            a.at = now + by;
        }
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
}
