//! The path manager carried out on this connection (the connection half
//! of Linux `pm.c` and `pm_kernel.c`): what the PM state in `crate::pm`
//! ([`crate::pm::Paths`]) decides becomes joins, announcements and closed
//! subflows here. The userspace PM's commands are `userspace.rs`.

use super::slot::{JoinState, SubflowSlot};
use super::Connection;
use mptun_time::{Duration, Instant};
use mptun_wire::crypto;
use std::net::IpAddr;

impl Connection {
    /// No subflow may be added: the connection fell back to TCP (or never
    /// spoke MPTCP), or it is closing in both directions (both DATA_FINs
    /// sent or received), when a new path has nothing left to carry. A
    /// half-closed connection still takes joins: one direction may have much
    /// to send (Linux refuses joins outside ESTABLISHED, which would keep a
    /// receiver that shut its sending side down on one path).
    pub(super) fn joins_closed(&self) -> bool {
        !self.mode.is_mapped() || (self.tx.fin().seq().is_some() && self.rx.peer_fin().is_some())
    }

    /// We open no subflow of our own: joins are closed, or our DATA_FIN
    /// is out. Linux refuses a join once its connection received a
    /// DATA_FIN (`mptcp_finish_join` wants the msk ESTABLISHED): a join of
    /// ours racing our DATA_FIN would get its SYN-ACK and then a reset
    /// (`MPTcpExtMPJoinRejected` there). Before it leaves, a join may still
    /// carry what the application wrote before closing. Joins the peer
    /// opens are still taken (see above).
    pub(super) fn own_joins_closed(&self) -> bool {
        self.joins_closed() || self.tx.fin().sent()
    }

    /// ADD_ADDR: an echo stops our retransmissions of that announcement; a
    /// genuine one (HMAC with both keys) is echoed and handed to the path
    /// manager, which may open a subflow to it (not once joins are closed).
    pub(super) fn on_add_addr(
        &mut self,
        now: Instant,
        local0: IpAddr,
        port0: u16,
        (echo, id, addr, port, hmac): (bool, u8, IpAddr, Option<u16>, Option<u64>),
    ) {
        let joins_allowed = !self.own_joins_closed();
        let c = &mut self.counters;
        let paths = &mut self.paths;
        if echo {
            c.mptcp_echo_add += 1;
            paths.announcements_mut().echoed(id);
            return;
        }
        let Some(rk) = self.hs.remote_key() else { return };
        if hmac != Some(crypto::add_addr_hmac(rk, self.hs.local_key(), id, addr, port)) {
            c.mptcp_add_addr_drop += 1;
            return;
        }
        c.mptcp_add_addr += 1;
        paths.announcements_mut().queue_echo(id, addr, port, now);
        self.report_announced(id, addr, port);
        if !crate::pm::joinable(&self.cfg.mptcp.pm, local0, addr) {
            self.counters.mptcp_add_addr_drop += 1;
            return;
        }
        let port = port.unwrap_or(port0);
        // A retransmission (our echo was lost) or a repeat of an address we
        // already have a subflow to is echoed, not joined again (Linux
        // `lookup_subflow_by_daddr` before `mptcp_pm_nl_add_addr_received`).
        let to = std::net::SocketAddr::new(addr, port);
        if self.paths.peer_announcement_known(id, addr, port)
            || self.subflows.live().any(|s| s.is_open() && s.tcp.remote() == to)
        {
            return;
        }
        self.paths.remember_peer_announcement(id, addr, port);
        self.sync_subflow_count();
        let joins = self.paths.on_add_addr(&self.cfg.mptcp.pm, local0, addr, port);
        if joins.is_empty() {
            self.counters.mptcp_add_addr_drop += 1;
        } else if joins_allowed {
            self.paths.request_joins(joins);
        }
    }

    /// The peer withdrew addresses: close our subflows to them (Linux
    /// `mptcp_pm_rm_addr_or_subflow`); their data is reinjected. Id 0 is
    /// the address of the peer's initial subflow (a handover away from the
    /// interface the connection started on, Linux 6.x): that subflow closes
    /// too, while another subflow is open to carry the connection.
    pub(super) fn close_removed(&mut self, rm_ids: &[u8]) {
        if rm_ids.is_empty() {
            return;
        }
        if rm_ids.contains(&0) {
            self.paths.peer_removed_initial();
        }
        // A join still waiting for its SYN-ACK has no remote id yet (0 is a
        // placeholder): it is not the address withdrawn.
        let removed = |s: &SubflowSlot| {
            s.is_open() && !matches!(s.mp.join(), JoinState::ClientSynSent { .. }) && rm_ids.contains(&s.mp.remote_id())
        };
        let kept = self.subflows.live().any(|s| s.is_open() && s.mp.join().usable() && !removed(s));
        self.close_subflows_where(|s| removed(s) && (s.mp.join() != JoinState::Initial || kept));
    }

    /// Closes the open subflows `which` picks for the path manager (an
    /// address withdrawn, a subflow destroyed) and sends their data not
    /// yet DATA_ACKed on the others at once, as Linux's `__mptcp_close_ssk`
    /// pushes a closed subflow's pending data back to the connection: its
    /// path may be gone with what was in flight on it, and waiting for its
    /// retransmission timeouts to mark it stale stalls the stream.
    /// Returns how many it closed.
    pub(super) fn close_subflows_where(&mut self, which: impl Fn(&SubflowSlot) -> bool) -> usize {
        let mut closed = 0;
        for i in 0..self.subflows.slot_count() {
            let Some(s) = self.subflows.get_mut(i).filter(|s| s.is_open() && which(s)) else { continue };
            s.tcp.close();
            s.mp.withdraw();
            closed += 1;
            if self.subflows.live().any(|o| o.is_open() && o.mp.join().usable()) {
                self.reinject_from(i);
            }
        }
        closed
    }

    /// Path manager, once fully established: announce our addresses and
    /// open the subflows it wants (the announcement timer then asks a pure
    /// ACK to carry them).
    ///
    /// No subflow is opened once the connection fell back or is closing
    /// (see [`Connection::joins_closed`]), nor to the peer's initial address
    /// when its MP_CAPABLE had the C flag.
    pub(super) fn pm_progress(&mut self, now: Instant) {
        self.paths.note_initial(self.addresses());
        if self.own_joins_closed() {
            self.paths.stop_joins();
        }
        self.sync_subflow_count();
        if self.hs.fully_established() && !self.paths.pm_announced() {
            if let Some((l, r)) = self.addresses() {
                let (ann, mut joins) = self.paths.on_established(&self.cfg.mptcp.pm, l.ip(), r.ip(), r.port());
                if self.own_joins_closed() || self.hs.peer_no_src_addr() {
                    joins.clear();
                }
                for e in ann {
                    self.paths.announce_endpoint(e.id, e.addr, e.port, now);
                }
                self.paths.request_joins(joins);
            }
        }
        if !self.mode.is_mapped() {
            // No options go out any more: nothing can carry them.
            self.paths.announcements_mut().clear();
        }
    }

    /// A subflow of ours failed (reset or timed out): the path manager
    /// opens it again after a backoff (1 s, doubled for each failure in a
    /// row, at most 64 s) while what it joined still stands: its source
    /// address is still an endpoint (or the initial subflow's) and its
    /// destination still the peer's (its initial address, or an
    /// announcement not withdrawn). Not after the path manager closed it
    /// itself, nor once our joins are closed.
    pub(super) fn schedule_reopen(&mut self, idx: usize) {
        let Some(slot) = self.subflows.get(idx) else { return };
        let Some((req, attempt)) = slot.mp.opened_as() else { return };
        // A peer that reset it with MP_TCPRST without the T (transient) flag
        // asks not to be tried again (RFC 8684 3.6).
        let permanent = slot.mp.rst_reason().is_some_and(|(_, flags)| flags & 0x1 == 0);
        if slot.mp.withdrawn() || permanent || self.own_joins_closed() {
            return;
        }
        let was_up = slot.mp.join() == JoinState::Joined;
        if !self.join_still_stands(&req) {
            return;
        }
        self.paths.reopens_mut().on_failed(self.last_now, req, attempt, was_up);
        self.timers.set_opt(super::timers::Timer::Reopen, self.paths.next_reopen());
    }

    /// The re-opens due at `now` become joins, within the `subflows`
    /// limit (one that finds no room now is tried again a backoff later),
    /// and only while what they join still stands (checked again: an
    /// endpoint may have gone meanwhile).
    pub(super) fn reopen_due(&mut self, now: Instant) {
        if self.own_joins_closed() {
            self.paths.reopens_mut().clear();
            return;
        }
        for mut r in self.paths.reopens_mut().take_due(now) {
            if !self.join_still_stands(&r.req) {
                continue;
            }
            // Not if the pair has its subflows again (the endpoint added back,
            // the address announced again) or is already asked for.
            let same = |l: IpAddr, a: std::net::SocketAddr| {
                l == r.req.local && a.ip() == r.req.remote && a.port() == r.req.remote_port
            };
            let open = self.subflows.live().filter(|s| s.is_open() && same(s.tcp.local().ip(), s.tcp.remote())).count();
            let asked = self.paths.join_asked(r.req.local, r.req.remote);
            if asked || open >= usize::from(self.cfg.mptcp.pm.subflows_per_pair.max(1)) {
                continue;
            }
            // The id the address has now (it may have been deleted and added again).
            r.req.local_id = self.known_local_id(r.req.local).unwrap_or(r.req.local_id);
            if self.additional_subflows() >= self.cfg.mptcp.pm.max_subflows as usize {
                self.paths.reopens_mut().retry_later(now, r);
                continue;
            }
            self.counters.mptun_pm_subflow_reopen += 1;
            self.paths.reopens_mut().hand_over(&r);
            self.paths.request_join(r.req);
        }
    }

    /// Whether a join of ours may be made again ([`crate::pm::Paths::join_still_stands`]).
    fn join_still_stands(&self, req: &crate::pm::JoinRequest) -> bool {
        self.paths.join_still_stands(&self.cfg.mptcp.pm, req, self.addresses())
    }

    /// The subflows that count against the `subflows` limit, as Linux's
    /// `msk->pm.subflows` (given back when a subflow closes, and by joins
    /// the path manager drops): every subflow but the initial one still in
    /// its handshake or established, and the joins asked for and not yet
    /// started. A subflow closing or in TIME_WAIT holds no place.
    pub(super) fn additional_subflows(&self) -> usize {
        let open = self.subflows.live().filter(|s| s.mp.join() != JoinState::Initial && s.is_open()).count();
        open + self.paths.joins_pending()
    }

    /// Brings the path manager's count of opened subflows up to date
    /// before it decides anything.
    pub(super) fn sync_subflow_count(&mut self) {
        self.paths.set_subflows_opened(self.additional_subflows());
    }

    /// The subflow to carry ADD_ADDR or RM_ADDR: as
    /// [`Connection::best_ack_subflow`], among the open ones only (see
    /// `Hook::announces`).
    pub(super) fn announce_subflow(&mut self) -> Option<&mut SubflowSlot> {
        self.subflows
            .live_mut()
            .filter(|s| s.can_signal() && s.is_open())
            .min_by_key(|s| s.tcp.srtt().unwrap_or(Duration::MAX))
    }

    /// The subflow to carry a connection-level signal (window update,
    /// DATA_FIN, ADD_ADDR): a usable one with the lowest RTT.
    pub(super) fn best_ack_subflow(&mut self) -> Option<&mut SubflowSlot> {
        self.subflows.live_mut().filter(|s| s.can_signal()).min_by_key(|s| s.tcp.srtt().unwrap_or(Duration::MAX))
    }
}
