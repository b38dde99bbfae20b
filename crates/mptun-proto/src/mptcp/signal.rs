//! Connection-level signalling (the signalling half of Linux `options.c`
//! and `pm.c`): DATA_ACK, ADD_ADDR, RM_ADDR, MP_PRIO, MP_FASTCLOSE and
//! MP_TCPRST as they arrive, one function per option's effect, and the path
//! manager's announcements once the connection is fully established.

use super::SubflowExt;
use super::{AddrAnnounce, Connection, JoinState, Shared};
use crate::pm::{JoinRequest, PmConfig, PmState};
use crate::tcp::{Event, Subflow};
use core::ops::ControlFlow;
use mptun_time::{Duration, Instant};
use mptun_wire::mptcp::DataAck;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::{crypto, MptcpOption};
use std::net::IpAddr;

use super::rx::expand32;
use crate::seq::{DataSeq, Seq};

impl Shared {
    /// No subflow may be added: the connection fell back to TCP (or never
    /// spoke MPTCP), or it is closing in both directions (both DATA_FINs
    /// sent or received), when a new path has nothing left to carry. A
    /// half-closed connection still takes joins: one direction may have much
    /// to send (Linux refuses joins outside ESTABLISHED, which would keep a
    /// receiver that shut its sending side down on one path).
    pub(super) fn joins_closed(&self) -> bool {
        self.infinite
            || self.mode != super::Mode::Mptcp
            || (self.data_fin_seq.is_some() && self.peer_data_fin.is_some())
    }
}

/// How long a due announcement waits when no subflow can carry it.
const ANNOUNCE_NO_SUBFLOW_RETRY: Duration = Duration::from_millis(200);

impl Connection {
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
        let sh = &mut self.shared;
        let proves = |o: &MptcpOption| match *o {
            MptcpOption::Dss { .. } => true,
            MptcpOption::AddAddr { echo: false, addr_id, addr, port, hmac } => sh
                .remote_key
                .is_some_and(|rk| hmac == Some(crypto::add_addr_hmac(rk, sh.local_key, addr_id, addr, port))),
            _ => false,
        };
        if !sh.server && !sh.fully_established && opts.mptcp.iter().any(proves) {
            sh.fully_established = true;
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
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else {
            return ControlFlow::Continue(());
        };
        let sh = &mut self.shared;
        match o {
            MptcpOption::Dss { data_ack, mapping, data_fin } => {
                if let Some(a) = data_ack {
                    sh.peer_data_ack_seen = true;
                    Self::on_data_ack(sh, a, wnd);
                }
                if let Some(m) = mapping {
                    if sh.csum && m.checksum.is_none() {
                        // Checksums were negotiated: a mapping without one
                        // is invalid (RFC 8684 3.3; Linux's get_mapping_status
                        // resets the subflow).
                        sh.counters.mptcp_dss_not_matching += 1;
                        sh.counters.mptcp_mp_rst_tx += 1;
                        ext.rst_reason = Some(super::MPTCP_RST_EMPTCP);
                        sf.abort();
                        // Handled like a refused join: the RST (with its
                        // reason) leaves before the subflow is reaped.
                        return ControlFlow::Break(());
                    } else if sh.infinite && Self::contradicts_infinite(sh, ext, m, *data_fin) {
                        // Reset before the drain reads the copy as the stream.
                        Self::mapping_error(sh, sf, ext);
                        return ControlFlow::Break(());
                    } else if m.len == 0 && !*data_fin {
                        self.on_infinite_mapping(idx, m);
                    } else {
                        Self::on_mapping(sh, sf, ext, m, *data_fin);
                    }
                }
            }
            MptcpOption::MpCapable { sender_key: Some(_), data_len: Some(len), checksum, .. }
                if sh.server && ext.join == JoinState::Initial =>
            {
                Self::on_capable_mapping(sh, sf, ext, *len, *checksum);
            }
            MptcpOption::AddAddr { echo, addr_id, addr, port, hmac } => {
                let (local0, port0) = (sf.local().ip(), sf.remote().port());
                let joins_allowed = !sh.joins_closed();
                let mut joins = Vec::new();
                Self::on_add_addr(
                    sh,
                    &mut self.pm,
                    &self.cfg.mptcp.pm,
                    &mut joins,
                    now,
                    local0,
                    port0,
                    (*echo, *addr_id, *addr, *port, *hmac),
                );
                if joins_allowed {
                    self.pending_joins.extend(joins);
                }
            }
            MptcpOption::RmAddr { ids } => {
                sh.counters.mptcp_rm_addr += 1;
                rm_ids.extend(ids.iter().copied());
            }
            MptcpOption::MpPrio { backup } => Self::on_mp_prio(sh, ext, *backup),
            MptcpOption::MpFastclose { receiver_key } if *receiver_key == sh.local_key => {
                self.on_fastclose();
                return ControlFlow::Break(());
            }
            MptcpOption::MpTcpRst { .. } => sh.counters.mptcp_mp_rst_rx += 1,
            MptcpOption::MpFail { dsn } => {
                sh.counters.mptcp_mp_fail_rx += 1;
                // The peer's checksum failed on our only subflow and it fell
                // back (RFC 8684 3.7): so do we, and answer as Linux's
                // `mptcp_pm_mp_fail_received` does: MP_FAIL echoed on the next
                // ACK (a Linux receiver resets the subflow when no answer
                // comes) and the infinite mapping on the next new data segment.
                // An MP_FAIL after our own fallback is the peer's answer to
                // ours. With other subflows the peer resets this one
                // instead, and the MP_FAIL is only counted.
                let alone = self.subflows.iter().flatten().count() == 1;
                let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else {
                    return ControlFlow::Continue(());
                };
                let sh = &mut self.shared;
                if alone
                    && sh.csum
                    && !sh.infinite
                    && sh.allow_infinite_fallback
                    && sh.mode == super::Mode::Mptcp
                    && ext.join == JoinState::Initial
                {
                    Self::fall_back(sh, sf, ext);
                    ext.mp_fail = Some(DataSeq(*dsn));
                    ext.infinite_map_due = true;
                    sf.request_ack();
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// The options of an acceptable RST: its reason is counted, and an
    /// MP_FASTCLOSE with our key tears the connection down (RFC 8684 3.5
    /// lets it ride on a RST). `Break` when it did.
    pub(super) fn reset_options(&mut self, opts: &OptionSummary) -> ControlFlow<()> {
        for o in &opts.mptcp {
            match o {
                MptcpOption::MpTcpRst { .. } => self.shared.counters.mptcp_mp_rst_rx += 1,
                MptcpOption::MpFastclose { receiver_key } if *receiver_key == self.shared.local_key => {
                    self.on_fastclose();
                    return ControlFlow::Break(());
                }
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }

    /// DATA_ACK: the peer holds our data up to it (in its receive buffer,
    /// not just some subflow's), so it can be released; it also moves the
    /// connection-level send window's right edge.
    pub(super) fn on_data_ack(sh: &mut Shared, a: &DataAck, wnd: u64) {
        let ack = DataSeq(if a.ack64 { a.ack } else { expand32(a.ack, sh.snd_una.0) });
        let max = sh.snd_nxt + sh.data_fin_seq.is_some_and(|f| f == sh.snd_nxt) as u64;
        if ack.lt(sh.snd_una) || ack.gt(max) {
            return;
        }
        sh.snd_una = ack;
        sh.wnd_end = sh.wnd_end.max(ack + wnd);
        if sh.data_fin_seq.is_some_and(|f| ack.gt(f)) {
            sh.data_fin_acked = true;
            sh.data_fin_due = false;
        }
    }

    /// ADD_ADDR: an echo stops our retransmissions of that announcement; a
    /// genuine one (HMAC with both keys) is echoed and handed to the path
    /// manager, which may open a subflow to it.
    #[allow(clippy::too_many_arguments)]
    fn on_add_addr(
        sh: &mut Shared,
        pm: &mut PmState,
        pmcfg: &PmConfig,
        joins: &mut Vec<JoinRequest>,
        now: Instant,
        local0: IpAddr,
        port0: u16,
        (echo, id, addr, port, hmac): (bool, u8, IpAddr, Option<u16>, Option<u64>),
    ) {
        if echo {
            sh.counters.mptcp_echo_add += 1;
            sh.announce.retain(|a| a.echo || a.id != id);
            return;
        }
        let Some(rk) = sh.remote_key else { return };
        if hmac != Some(crypto::add_addr_hmac(rk, sh.local_key, id, addr, port)) {
            sh.counters.mptcp_add_addr_drop += 1;
            return;
        }
        sh.counters.mptcp_add_addr += 1;
        if !sh.announce.iter().any(|a| a.echo && a.id == id) {
            sh.announce.push(AddrAnnounce { id, addr, port, echo: true, at: now, sent: 0 });
        }
        if !crate::pm::joinable(pmcfg, local0, addr) {
            sh.counters.mptcp_add_addr_drop += 1;
            return;
        }
        match pm.on_add_addr(pmcfg, local0, addr, port.unwrap_or(port0), false) {
            Some(j) => joins.push(j),
            None => sh.counters.mptcp_add_addr_drop += 1,
        }
    }

    /// A DSS mapping with data-level length 0: the infinite mapping of a
    /// peer that fell back to TCP (RFC 8684 3.7). On the only subflow the
    /// connection falls back too: the subflow's bytes from the mapping's
    /// subflow sequence on continue the data sequence at its DSN, and no
    /// MPTCP option is sent any more. With other subflows alive it is a
    /// protocol error that resets this subflow (Linux: an infinite mapping is
    /// valid only when the connection can fall back).
    fn on_infinite_mapping(&mut self, idx: usize, m: &mptun_wire::mptcp::DssMapping) {
        let single = self.subflows.iter().flatten().count() == 1;
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        sh.counters.mptcp_infinite_map_rx += 1;
        if sh.infinite {
            // The answer to our MP_FAIL: we fell back at the failed mapping
            // already, and the mapping agrees with it (checked before).
            return;
        }
        if !single || ext.join != JoinState::Initial || sh.rx_base.is_none() || !sh.allow_infinite_fallback {
            sh.counters.mptcp_mp_rst_tx += 1;
            ext.rst_reason = Some(super::MPTCP_RST_EMPTCP);
            sf.abort();
            return;
        }
        let dsn = DataSeq(if m.dsn64 { m.dsn } else { expand32(m.dsn, sh.rcv_nxt.0) });
        // The mapping starts at its subflow sequence number (0 when the
        // sender left it out: then at the subflow's next unread byte).
        let next = Self::next_ssn(sh, sf);
        let ssn = if m.ssn != 0 { Seq(m.ssn) } else { next };
        sh.infinite = true;
        sh.counters.mptcp_dss_fallback += 1;
        // Mappings before it still hold; from `ssn` on, the subflow's bytes
        // continue the data sequence at `dsn` (what `current_map` reads in
        // fallback mode once the known mappings are used up).
        ext.rx_ahead.retain(|x| x.ssn.lt(ssn));
        ext.rx_last_end = Some((ssn, dsn));
        ext.rx_infinite_at = Some((ssn, dsn));
    }

    /// MP_PRIO: the peer marks the subflow it arrived on backup (or not).
    fn on_mp_prio(sh: &mut Shared, ext: &mut SubflowExt, backup: bool) {
        sh.counters.mptcp_mp_prio_rx += 1;
        ext.backup = backup;
    }

    /// MP_FASTCLOSE with our key: the peer aborted the whole connection;
    /// reset every subflow at once (RFC 8684 3.5).
    fn on_fastclose(&mut self) {
        self.shared.counters.mptcp_mp_fastclose_rx += 1;
        for (s, _) in self.subflows.iter_mut().flatten() {
            s.abort();
        }
        self.events.push_back(Event::Reset);
    }

    /// The peer withdrew addresses: close our subflows to them (Linux
    /// mptcp_pm_nl_rm_subflow_received); their data is reinjected.
    fn close_removed(&mut self, rm_ids: &[u8]) {
        for (s2, e2) in self.subflows.iter_mut().flatten() {
            if e2.join != JoinState::Initial && rm_ids.contains(&e2.remote_id) {
                s2.close();
            }
        }
    }

    /// Path manager, once fully established: announce our addresses and
    /// open the subflows it wants; then ask for a pure ACK to carry an
    /// ADD_ADDR that is due.
    ///
    /// No subflow is opened once the connection fell back or is closing
    /// (see [`Shared::joins_closed`]), nor to the peer's initial address
    /// when its MP_CAPABLE had the C flag.
    pub(super) fn pm_progress(&mut self, now: Instant) {
        if self.shared.joins_closed() {
            self.pending_joins.clear();
        }
        if self.shared.fully_established && !self.pm.announced {
            if let Some((l, r)) = self.addresses() {
                let (ann, mut joins) = self.pm.on_established(&self.cfg.mptcp.pm, l.ip(), r.ip(), r.port());
                let sh = &self.shared;
                if sh.joins_closed() || sh.peer_no_src_addr {
                    joins.clear();
                }
                for e in ann {
                    self.shared.announce.push(AddrAnnounce {
                        id: e.id,
                        addr: e.addr,
                        port: None,
                        echo: false,
                        at: now,
                        sent: 0,
                    });
                }
                self.pending_joins.extend(joins);
            }
        }
        if self.shared.infinite || self.shared.mode != super::Mode::Mptcp {
            // No options go out any more: nothing can carry them.
            self.shared.announce.clear();
        }
        if self.shared.announce.iter().any(|a| a.at <= now) {
            if let Some((sf, _)) = self.best_ack_subflow() {
                sf.request_ack();
            } else {
                // No subflow can carry them now: look again later instead of
                // leaving a due deadline that a driver would poll forever.
                for a in self.shared.announce.iter_mut().filter(|a| a.at <= now) {
                    a.at = now + ANNOUNCE_NO_SUBFLOW_RETRY;
                }
            }
        }
    }

    /// The subflow to carry a connection-level signal (window update,
    /// DATA_FIN, ADD_ADDR): a usable one with the lowest RTT.
    pub(super) fn best_ack_subflow(&mut self) -> Option<&mut (Subflow, SubflowExt)> {
        self.subflows
            .iter_mut()
            .flatten()
            .filter(|(s, e)| {
                s.state().is_synchronized()
                    && !s.is_closed()
                    && !e.stale
                    && matches!(e.join, JoinState::Initial | JoinState::Joined)
            })
            .min_by_key(|(s, _)| s.srtt().unwrap_or(Duration::MAX))
    }
}
