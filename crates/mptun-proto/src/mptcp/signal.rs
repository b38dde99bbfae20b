//! Connection-level signalling (the signalling half of Linux `options.c`
//! and `pm.c`): DATA_ACK, ADD_ADDR, RM_ADDR, MP_PRIO, MP_FASTCLOSE, MP_FAIL
//! and MP_TCPRST as they arrive, one function per option's effect, and the
//! path manager's announcements once the connection is fully established.

use super::fallback::{FallbackReason, Resume};
use super::paths::{Reopen, REOPEN_BACKOFF, REOPEN_BACKOFF_MAX};
use super::slot::{InfiniteMapTx, JoinState, SubflowSlot};
use super::{Connection, MPTCP_RST_EMPTCP};
use crate::seq::{DataSeq, Seq};
use crate::tcp::Event;
use core::ops::ControlFlow;
use mptun_time::{Duration, Instant};
use mptun_wire::mptcp::DssMapping;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::{crypto, MptcpOption};
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

    /// The MPTCP options of a segment the subflow `idx` has processed, in
    /// the order they came, then what they imply together: subflows to
    /// withdrawn addresses close, and a client learns it is fully
    /// established. `Break` when MP_FASTCLOSE tore the connection down.
    pub(super) fn incoming_options(
        &mut self,
        now: Instant,
        idx: usize,
        opts: &OptionSummary,
        wnd: u64,
    ) -> ControlFlow<()> {
        let mut rm_ids: Vec<u8> = Vec::new();
        for o in &opts.mptcp {
            self.incoming_option(now, idx, o, wnd, &mut rm_ids)?;
        }
        self.close_removed(&rm_ids);
        // A client becomes fully established when the server shows it saw our
        // key: a DSS (sent only once it has our key), or an ADD_ADDR whose
        // HMAC, computed with our key, verifies. Not any other option: one
        // forged ADD_ADDR would make a client whose third ACK was lost (its
        // server fell back to TCP) take a plain-TCP peer for an MPTCP one.
        let hs = &mut self.hs;
        let proves = |o: &MptcpOption| match *o {
            MptcpOption::Dss { .. } => true,
            MptcpOption::AddAddr { echo: false, addr_id, addr, port, hmac } => hs
                .remote_key()
                .is_some_and(|rk| hmac == Some(crypto::add_addr_hmac(rk, hs.local_key(), addr_id, addr, port))),
            _ => false,
        };
        if !hs.server() && !hs.fully_established() && opts.mptcp.iter().any(proves) {
            hs.establish_fully();
        }
        ControlFlow::Continue(())
    }

    /// One MPTCP option's effect. RM_ADDR ids are collected into `rm_ids`
    /// and acted on once all options are seen.
    fn incoming_option(
        &mut self,
        now: Instant,
        idx: usize,
        o: &MptcpOption,
        wnd: u64,
        rm_ids: &mut Vec<u8>,
    ) -> ControlFlow<()> {
        let Some(slot) = self.subflows.get_mut(idx) else { return ControlFlow::Continue(()) };
        match o {
            MptcpOption::Dss { data_ack, mapping, data_fin } => {
                if let Some(a) = data_ack {
                    self.hs.on_peer_data_ack();
                    self.on_data_ack(a, wnd);
                }
                if let Some(m) = mapping {
                    return self.on_dss_mapping(idx, m, *data_fin);
                }
            }
            MptcpOption::MpCapable { sender_key: Some(_), data_len: Some(len), checksum, .. }
                if self.hs.server() && slot.mp.join == JoinState::Initial =>
            {
                self.on_capable_mapping(idx, *len, *checksum);
            }
            MptcpOption::AddAddr { echo, addr_id, addr, port, hmac } => {
                let (local0, port0) = (slot.tcp.local().ip(), slot.tcp.remote().port());
                self.on_add_addr(now, local0, port0, (*echo, *addr_id, *addr, *port, *hmac));
            }
            MptcpOption::RmAddr { ids } => {
                self.counters.mptcp_rm_addr += 1;
                rm_ids.extend(ids.iter().copied());
                self.paths.peer_announced.retain(|(i, _, _)| !ids.contains(i));
                for &id in ids {
                    self.report_removed(id);
                }
            }
            MptcpOption::MpPrio { backup } => {
                self.counters.mptcp_mp_prio_rx += 1;
                // Reported when it changes: a peer repeating MP_PRIO on
                // every ACK must not flood the event queue.
                if slot.mp.backup != *backup {
                    slot.mp.backup = *backup;
                    self.report_sub(crate::pm::PmEventKind::SubPriority, idx);
                }
            }
            MptcpOption::MpFastclose { receiver_key } if *receiver_key == self.hs.local_key() => {
                self.on_fastclose();
                return ControlFlow::Break(());
            }
            MptcpOption::MpTcpRst { reason, flags } => {
                self.counters.mptcp_mp_rst_rx += 1;
                slot.mp.rst_reason = Some((*reason, *flags));
            }
            MptcpOption::MpFail { dsn } => self.on_mp_fail(idx, DataSeq(*dsn)),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// The mapping of a received DSS. `Break` when it reset the subflow
    /// before anything of the segment is read.
    fn on_dss_mapping(&mut self, idx: usize, m: &DssMapping, data_fin: bool) -> ControlFlow<()> {
        let dsn = self.rx.expand(m);
        let Some(slot) = self.subflows.get_mut(idx) else { return ControlFlow::Continue(()) };
        if self.hs.csum() && m.checksum.is_none() {
            // Checksums were negotiated: a mapping without one is invalid
            // (RFC 8684 3.3; Linux's get_mapping_status resets the subflow).
            self.counters.mptcp_dss_not_matching += 1;
            self.counters.mptcp_mp_rst_tx += 1;
            slot.reset_with(MPTCP_RST_EMPTCP);
            // Handled like a refused join: the RST (with its reason) leaves
            // before the subflow is reaped.
            return ControlFlow::Break(());
        }
        if self.mode.infinite() && slot.contradicts_infinite(dsn, m, data_fin) {
            // Reset before the drain reads the copy as the stream.
            slot.mapping_error(&mut self.counters);
            return ControlFlow::Break(());
        }
        if m.len == 0 && !data_fin {
            self.on_infinite_mapping(idx, m);
        } else {
            self.on_mapping(idx, m, data_fin);
        }
        ControlFlow::Continue(())
    }

    /// MP_FAIL: the peer's checksum failed on our only subflow and it fell
    /// back (RFC 8684 3.7): so do we, and answer as Linux's
    /// `mptcp_pm_mp_fail_received` does: MP_FAIL echoed on the next ACK (a
    /// Linux receiver resets the subflow when no answer comes) and the
    /// infinite mapping on the next new data segment. An MP_FAIL after our
    /// own fallback is the peer's answer to ours. With other subflows the
    /// peer resets this one instead, and the MP_FAIL is only counted.
    fn on_mp_fail(&mut self, idx: usize, dsn: DataSeq) {
        self.counters.mptcp_mp_fail_rx += 1;
        let alone = self.subflows.count() == 1;
        let Some(slot) = self.subflows.get(idx) else { return };
        if !(alone && self.hs.csum() && self.mode.is_mapped() && self.mode.infinite_ok())
            || slot.mp.join != JoinState::Initial
        {
            return;
        }
        self.fall_back(idx, FallbackReason::MpFailReceived, Resume::AfterMapped);
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        slot.mp.signals.mp_fail = Some(dsn);
        slot.mp.signals.infinite_map = InfiniteMapTx::Due;
        slot.tcp.request_ack();
    }

    /// The options of an acceptable RST: its reason is counted, and an
    /// MP_FASTCLOSE with our key tears the connection down (RFC 8684 3.5
    /// lets it ride on a RST). `Break` when it did.
    pub(super) fn reset_options(&mut self, idx: usize, opts: &OptionSummary) -> ControlFlow<()> {
        for o in &opts.mptcp {
            match o {
                MptcpOption::MpTcpRst { reason, flags } => {
                    self.counters.mptcp_mp_rst_rx += 1;
                    if let Some(s) = self.subflows.get_mut(idx) {
                        s.mp.rst_reason = Some((*reason, *flags));
                    }
                }
                MptcpOption::MpFastclose { receiver_key } if *receiver_key == self.hs.local_key() => {
                    self.on_fastclose();
                    return ControlFlow::Break(());
                }
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }

    /// ADD_ADDR: an echo stops our retransmissions of that announcement; a
    /// genuine one (HMAC with both keys) is echoed and handed to the path
    /// manager, which may open a subflow to it (not once joins are closed).
    fn on_add_addr(
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
            paths.announce.retain(|a| a.echo || a.remove || a.id != id);
            return;
        }
        let Some(rk) = self.hs.remote_key() else { return };
        if hmac != Some(crypto::add_addr_hmac(rk, self.hs.local_key(), id, addr, port)) {
            c.mptcp_add_addr_drop += 1;
            return;
        }
        c.mptcp_add_addr += 1;
        if !paths.announce.iter().any(|a| a.echo && a.id == id) {
            paths.queue(id, addr, port, true, now);
        }
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
        if self.paths.peer_announced.contains(&(id, addr, port))
            || self.subflows.live().any(|s| s.is_open() && s.tcp.remote() == to)
        {
            return;
        }
        self.paths.remember_peer_announcement(id, addr, port);
        self.sync_subflow_count();
        let joins = self.paths.pm.on_add_addr(&self.cfg.mptcp.pm, local0, addr, port, false);
        if joins.is_empty() {
            self.counters.mptcp_add_addr_drop += 1;
        } else if joins_allowed {
            self.paths.pending_joins.extend(joins);
        }
    }

    /// A DSS mapping with data-level length 0: the infinite mapping of a
    /// peer that fell back to TCP (RFC 8684 3.7). On the only subflow the
    /// connection falls back too: the subflow's bytes from the mapping's
    /// subflow sequence on continue the data sequence at its DSN, and no
    /// MPTCP option is sent any more. With other subflows alive it is a
    /// protocol error that resets this subflow (Linux: an infinite mapping is
    /// valid only when the connection can fall back).
    fn on_infinite_mapping(&mut self, idx: usize, m: &DssMapping) {
        let single = self.subflows.count() == 1;
        let dsn = self.rx.expand(m);
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        self.counters.mptcp_infinite_map_rx += 1;
        if self.mode.infinite() {
            // The answer to our MP_FAIL: we fell back at the failed mapping
            // already, and the mapping agrees with it (checked before).
            return;
        }
        if !single || slot.mp.join != JoinState::Initial || self.rx.base().is_none() || !self.mode.infinite_ok() {
            self.counters.mptcp_mp_rst_tx += 1;
            slot.reset_with(MPTCP_RST_EMPTCP);
            return;
        }
        // The mapping starts at its subflow sequence number (0 when the
        // sender left it out: then at the subflow's next unread byte).
        let ssn = if m.ssn != 0 { Seq(m.ssn) } else { slot.next_rx_ssn() };
        self.fall_back(idx, FallbackReason::InfiniteMapping, Resume::At(ssn, dsn));
    }

    /// MP_FASTCLOSE with our key: the peer aborted the whole connection;
    /// reset every subflow at once (RFC 8684 3.5).
    fn on_fastclose(&mut self) {
        self.counters.mptcp_mp_fastclose_rx += 1;
        for s in self.subflows.live_mut() {
            s.tcp.abort();
        }
        self.events.push_back(Event::Reset);
    }

    /// The peer withdrew addresses: close our subflows to them (Linux
    /// `mptcp_pm_rm_addr_or_subflow`); their data is reinjected. Id 0 is
    /// the address of the peer's initial subflow (a handover away from the
    /// interface the connection started on, Linux 6.x): that subflow closes
    /// too, while another subflow is open to carry the connection.
    fn close_removed(&mut self, rm_ids: &[u8]) {
        if rm_ids.is_empty() {
            return;
        }
        if rm_ids.contains(&0) {
            self.paths.peer_initial_removed = true;
        }
        // A join still waiting for its SYN-ACK has no remote id yet (0 is a
        // placeholder): it is not the address withdrawn.
        let removed = |s: &SubflowSlot| {
            s.is_open() && !matches!(s.mp.join, JoinState::ClientSynSent { .. }) && rm_ids.contains(&s.mp.remote_id)
        };
        let kept = self.subflows.live().any(|s| s.is_open() && s.mp.join.usable() && !removed(s));
        self.close_subflows_where(|s| removed(s) && (s.mp.join != JoinState::Initial || kept));
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
            s.mp.withdrawn = true;
            closed += 1;
            if self.subflows.live().any(|o| o.is_open() && o.mp.join.usable()) {
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
        if self.paths.initial.is_none() {
            self.paths.initial = self.addresses();
        }
        if self.own_joins_closed() {
            self.paths.pending_joins.clear();
            self.paths.reopen.clear();
        }
        self.sync_subflow_count();
        if self.hs.fully_established() && !self.paths.pm.announced {
            if let Some((l, r)) = self.addresses() {
                let (ann, mut joins) = self.paths.pm.on_established(&self.cfg.mptcp.pm, l.ip(), r.ip(), r.port());
                if self.own_joins_closed() || self.hs.peer_no_src_addr() {
                    joins.clear();
                }
                for e in ann {
                    self.paths.queue(e.id, e.addr, e.port, false, now);
                    self.paths.announced.push((e.id, e.addr));
                }
                self.paths.pending_joins.extend(joins);
            }
        }
        if !self.mode.is_mapped() {
            // No options go out any more: nothing can carry them.
            self.paths.announce.clear();
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
        let Some((req, attempt)) = slot.mp.opened_as else { return };
        // A peer that reset it with MP_TCPRST without the T (transient) flag
        // asks not to be tried again (RFC 8684 3.6).
        let permanent = slot.mp.rst_reason.is_some_and(|(_, flags)| flags & 0x1 == 0);
        if slot.mp.withdrawn || permanent || self.own_joins_closed() {
            return;
        }
        // A subflow that had been up starts the count again.
        let attempt = if slot.mp.join == JoinState::Joined { 0 } else { attempt.saturating_add(1) };
        if !self.join_still_stands(&req) {
            return;
        }
        let wait = (REOPEN_BACKOFF * (1u32 << attempt.min(6))).min(REOPEN_BACKOFF_MAX);
        let at = self.last_now + wait;
        self.paths.reopen.push(Reopen { at, req, attempt });
        self.timers.set_opt(super::timers::Timer::Reopen, self.paths.next_reopen());
    }

    /// The re-opens due at `now` become joins, within the `subflows`
    /// limit (one that finds no room now is tried again a backoff later),
    /// and only while what they join still stands (checked again: an
    /// endpoint may have gone meanwhile).
    pub(super) fn reopen_due(&mut self, now: Instant) {
        if self.own_joins_closed() {
            self.paths.reopen.clear();
            return;
        }
        // What an earlier batch handed over has been placed (or refused) by now.
        self.paths.reopening.clear();
        let (due, later): (Vec<Reopen>, Vec<Reopen>) = self.paths.reopen.drain(..).partition(|r| r.at <= now);
        self.paths.reopen = later;
        for mut r in due {
            if !self.join_still_stands(&r.req) {
                continue;
            }
            // Not if the pair has its subflows again (the endpoint added back,
            // the address announced again) or is already asked for.
            let same = |l: IpAddr, a: std::net::SocketAddr| {
                l == r.req.local && a.ip() == r.req.remote && a.port() == r.req.remote_port
            };
            let open = self.subflows.live().filter(|s| s.is_open() && same(s.tcp.local().ip(), s.tcp.remote())).count();
            let asked = self.paths.pending_joins.iter().any(|j| j.local == r.req.local && j.remote == r.req.remote);
            if asked || open >= usize::from(self.cfg.mptcp.pm.subflows_per_pair.max(1)) {
                continue;
            }
            // The id the address has now (it may have been deleted and added again).
            r.req.local_id = self.known_local_id(r.req.local).unwrap_or(r.req.local_id);
            if self.additional_subflows() >= self.cfg.mptcp.pm.max_subflows as usize {
                let wait = (REOPEN_BACKOFF * (1u32 << r.attempt.min(6))).min(REOPEN_BACKOFF_MAX);
                self.paths.reopen.push(Reopen { at: now + wait, ..r });
                continue;
            }
            self.counters.mptun_pm_subflow_reopen += 1;
            self.paths.reopening.push((r.req, r.attempt));
            self.paths.pending_joins.push(r.req);
        }
    }

    /// Whether a join of ours may be made again: its source is still an
    /// endpoint (or the initial subflow's address) and its destination
    /// still the peer's (its initial address, or an announcement not
    /// withdrawn).
    fn join_still_stands(&self, req: &crate::pm::JoinRequest) -> bool {
        let initial = self.paths.initial.or_else(|| self.addresses());
        let from = (initial.is_some_and(|(l, _)| l.ip() == req.local) && !self.paths.initial_local_withdrawn)
            || self.cfg.mptcp.pm.endpoints.iter().any(|e| e.addr == req.local);
        let to = (initial.is_some_and(|(_, r)| r.ip() == req.remote) && !self.paths.peer_initial_removed)
            || self.paths.peer_announced.iter().any(|&(_, a, _)| a == req.remote);
        from && to
    }

    /// The subflows that count against the `subflows` limit, as Linux's
    /// `msk->pm.subflows` (given back when a subflow closes, and by joins
    /// the path manager drops): every subflow but the initial one still in
    /// its handshake or established, and the joins asked for and not yet
    /// started. A subflow closing or in TIME_WAIT holds no place.
    pub(super) fn additional_subflows(&self) -> usize {
        let open = self.subflows.live().filter(|s| s.mp.join != JoinState::Initial && s.is_open()).count();
        open + self.paths.pending_joins.len()
    }

    /// Brings the path manager's count of opened subflows up to date
    /// before it decides anything.
    pub(super) fn sync_subflow_count(&mut self) {
        self.paths.pm.subflows_opened = u8::try_from(self.additional_subflows()).unwrap_or(u8::MAX);
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
