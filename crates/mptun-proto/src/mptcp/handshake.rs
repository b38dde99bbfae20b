//! The handshakes (Linux `subflow.c` and the handshake half of
//! `options.c`): MP_CAPABLE on the initial subflow, which exchanges the keys
//! the whole connection is derived from, and MP_JOIN, which authenticates
//! each further subflow with HMACs of those keys before it may carry data.
//!
//! The handshake options of a segment are looked at once the subflow has
//! accepted it: they decide whether the subflow may go on at all.

use super::fallback::{ConnMode, FallbackReason, Resume};
use super::slot::{JoinState, SubflowMp, SubflowSlot};
use super::timers::Timer;
use super::{ConnConfig, Connection, MPTCP_RST_EMPTCP};
use crate::pm::JoinLimits;
use crate::pm::JoinRequest;
use crate::tcp::{BufferSize, Subflow, TcpConfig};
use core::ops::ControlFlow;
use mptun_time::{Duration, Instant};
use mptun_wire::mptcp::cap_flags;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::{crypto, MptcpOption, TcpHeader};
use std::net::SocketAddr;

/// First retransmission of the MP_JOIN third ACK when the fourth ACK does
/// not come. The third ACK carries no data, so the subflow's own
/// retransmission timer does not cover it (RFC 8684 3.2: it must be
/// retransmitted until acknowledged). No Linux constant: Linux relies on the
/// subflow's RTO; this is a conservative first guess before an RTT is known.
pub(crate) const JOIN_ACK_RTO_INIT: Duration = Duration::from_millis(500);

/// The keys and what each side has shown of them.
#[derive(Debug)]
pub(super) struct Handshake {
    server: bool,
    local_key: u64,
    remote_key: Option<u64>,
    /// We ask for DSS checksums.
    csum_request: bool,
    /// DSS checksums are in use (either side asked).
    csum: bool,
    /// Both keys are known to both sides: joins can be accepted and
    /// addresses announced.
    fully_established: bool,
    /// Client: our MP_CAPABLE third ACK (both keys) has gone out at least
    /// once. Until it has, no other form may replace it: a server that gets
    /// a first ACK without MP_CAPABLE falls back (MPCapableFallbackACK).
    cap_ack_sent: bool,
    /// We have seen a DATA_ACK in the peer's DSS: it holds our key and is
    /// fully established (Linux `check_fully_established`), so a data
    /// segment may leave an unchanged DATA_ACK off. Until then every DSS
    /// carries one: a Linux peer that is not yet fully established falls
    /// back to TCP on a segment with neither MP_CAPABLE nor a DATA_ACK.
    peer_data_ack_seen: bool,
    /// The peer set the MP_CAPABLE C flag: no subflow may be opened to its
    /// initial address (RFC 8684 3.1).
    peer_no_src_addr: bool,
}

impl Handshake {
    pub fn new(server: bool, local_key: u64, csum_request: bool) -> Self {
        Handshake {
            server,
            local_key,
            remote_key: None,
            csum_request,
            csum: csum_request,
            fully_established: false,
            cap_ack_sent: false,
            peer_data_ack_seen: false,
            peer_no_src_addr: false,
        }
    }

    /// We are the server (the side that took the first SYN).
    pub fn server(&self) -> bool {
        self.server
    }

    /// Our key.
    pub fn local_key(&self) -> u64 {
        self.local_key
    }

    /// The peer's key, once it came.
    pub fn remote_key(&self) -> Option<u64> {
        self.remote_key
    }

    /// We ask for DSS checksums.
    pub fn csum_request(&self) -> bool {
        self.csum_request
    }

    /// DSS checksums are in use.
    pub fn csum(&self) -> bool {
        self.csum
    }

    /// Both keys are known to both sides.
    pub fn fully_established(&self) -> bool {
        self.fully_established
    }

    /// Our MP_CAPABLE third ACK has gone out.
    pub fn cap_ack_sent(&self) -> bool {
        self.cap_ack_sent
    }

    /// A DATA_ACK of the peer's came: it holds our key.
    pub fn peer_data_ack_seen(&self) -> bool {
        self.peer_data_ack_seen
    }

    /// No subflow may be opened to the peer's initial address.
    pub fn peer_no_src_addr(&self) -> bool {
        self.peer_no_src_addr
    }

    /// The peer's key came (in its SYN-ACK, or echoed in the third ACK).
    fn take_remote_key(&mut self, key: u64) {
        self.remote_key = Some(key);
    }

    /// Both sides know both keys: joins and announcements may start.
    pub fn establish_fully(&mut self) {
        self.fully_established = true;
    }

    /// The peer DATA_ACKed: it is fully established too.
    pub fn on_peer_data_ack(&mut self) {
        self.peer_data_ack_seen = true;
    }

    /// Our MP_CAPABLE third ACK went out.
    pub fn cap_ack_went_out(&mut self) {
        self.cap_ack_sent = true;
    }

    /// The peer's MP_CAPABLE flags, in its SYN (server) or SYN-ACK (client).
    fn take_peer_flags(&mut self, flags: u8) {
        self.csum |= flags & cap_flags::CHECKSUM != 0;
        self.peer_no_src_addr = flags & cap_flags::NO_SRC_ADDR != 0;
    }
}

impl Connection {
    pub(super) fn subflow_cfg(cfg: &ConnConfig, mptcp: bool) -> TcpConfig {
        let mut t = cfg.tcp.clone();
        if mptcp {
            t.segment_at_write_boundaries = true;
            // The connection owns the shared receive window; the subflow's
            // own buffer only bridges a segment's arrival and its mapping.
            t.recv_buffer = BufferSize::Fixed(cfg.mptcp.recv_buffer.max().max(t.recv_buffer.max()));
        }
        t
    }

    /// MPTCP state of a new subflow of this connection.
    fn subflow_mp(&self, join: JoinState, local_id: u8, remote_id: u8, backup: bool) -> SubflowMp {
        SubflowMp::new(join, local_id, remote_id, backup, self.space.ssn_off())
    }

    /// Active open. `mptcp` offers MP_CAPABLE.
    pub(crate) fn connect(
        now: Instant,
        cfg: ConnConfig,
        local: SocketAddr,
        remote: SocketAddr,
        key: u64,
        iss: u32,
        ts_offset: u32,
    ) -> Self {
        let mptcp = cfg.mptcp.enabled;
        let sfcfg = Self::subflow_cfg(&cfg, mptcp);
        let mut c =
            Connection::new(cfg, if mptcp { ConnMode::Pending } else { ConnMode::Plain(None) }, false, key, now);
        let tcp = Subflow::connect(now, sfcfg, local, remote, iss, ts_offset);
        let mp = c.subflow_mp(JoinState::Initial, 0, 0, false);
        c.subflows.place(SubflowSlot { tcp, mp });
        if mptcp {
            c.counters.mptcp_mp_capable_syn_tx += 1;
        }
        c
    }

    /// Passive open from a SYN; `mpc` says whether it carried a usable MP_CAPABLE.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        now: Instant,
        cfg: ConnConfig,
        local: SocketAddr,
        remote: SocketAddr,
        syn: &TcpHeader,
        opts: &OptionSummary,
        mpc: bool,
        key: u64,
        iss: u32,
        ts_offset: u32,
    ) -> Self {
        let mptcp = mpc && cfg.mptcp.enabled;
        let sfcfg = Self::subflow_cfg(&cfg, mptcp);
        let mode = if mptcp { ConnMode::Mptcp { infinite_ok: true } } else { ConnMode::Plain(None) };
        let mut c = Connection::new(cfg, mode, true, key, now);
        if mpc {
            c.counters.mptcp_mp_capable_syn_rx += 1;
        }
        if !mptcp && mpc {
            c.counters.mptcp_mp_capable_fallback_ack += 1;
        }
        let tcp = Subflow::accept(now, sfcfg, local, remote, syn, opts, iss, ts_offset);
        let mp = c.subflow_mp(JoinState::Initial, 0, 0, false);
        c.subflows.place(SubflowSlot { tcp, mp });
        // Checksums are on if the client asked (A flag) or we do; the C flag
        // keeps our path manager from joining to the client's address.
        let flags = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpCapable { flags, .. } => Some(*flags),
            _ => None,
        });
        if let Some(flags) = flags.filter(|_| mptcp) {
            c.hs.take_peer_flags(flags);
        }
        c
    }

    /// Adds a subflow answering an MP_JOIN SYN whose token matched ours.
    /// Returns its index.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept_join(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        syn: &TcpHeader,
        opts: &OptionSummary,
        (backup, addr_id, peer_nonce): (bool, u8, u32),
        nonce: u32,
        iss: u32,
        ts_offset: u32,
        lim: JoinLimits,
    ) -> Option<usize> {
        if !self.paths.take_join_syn(now, &lim) {
            self.counters.mptun_mp_join_rate_limited += 1;
            return None;
        }
        let live = self.subflows.count();
        if live > self.cfg.mptcp.pm.max_subflows as usize || !self.hs.fully_established() || self.joins_closed() {
            self.counters.mptcp_mp_join_rejected += 1;
            return None;
        }
        let half_open = self.subflows.live().filter(|s| matches!(s.mp.join(), JoinState::ServerSynRcvd { .. })).count();
        if lim.max_half_open.is_some_and(|m| half_open >= m as usize) {
            self.counters.mptun_mp_join_half_open_limit += 1;
            return None;
        }
        self.counters.mptcp_mp_join_syn_rx += 1;
        let sfcfg = Self::subflow_cfg(&self.cfg, true);
        let tcp = Subflow::accept(now, sfcfg, local, remote, syn, opts, iss, ts_offset);
        // Backup if the peer asks (its SYN's B flag) or our endpoint for
        // the address joined is a `backup` one (Linux: `request_bkup`,
        // sent in the SYN/ACK's B flag).
        // Our address id in the SYN-ACK is the one the peer knows the
        // address joined by (Linux `mptcp_pm_get_local_id`): 0 for the
        // initial subflow's, an announcement's id, or the endpoint's, so
        // that its RM_ADDR handling and events name the address as we
        // announced it.
        let ep = self.cfg.mptcp.pm.endpoints.iter().find(|e| e.addr == local.ip());
        let ours = ep.is_some_and(|e| e.flags.backup);
        let local_id = self.known_local_id(local.ip()).unwrap_or(0);
        let mp = self.subflow_mp(JoinState::ServerSynRcvd { nonce, peer_nonce }, local_id, addr_id, backup || ours);
        Some(self.place_subflow(SubflowSlot { tcp, mp }))
    }

    /// Puts a new subflow in the table, its slot's timers clear.
    fn place_subflow(&mut self, slot: SubflowSlot) -> usize {
        let i = self.subflows.place(slot);
        self.timers.stop(Timer::JoinAck(i));
        i
    }

    /// Adds a subflow we open with MP_JOIN (the endpoint picked its port).
    pub(crate) fn add_join(
        &mut self,
        now: Instant,
        req: &JoinRequest,
        local: SocketAddr,
        nonce: u32,
        iss: u32,
        ts_offset: u32,
    ) -> usize {
        let sfcfg = Self::subflow_cfg(&self.cfg, true);
        let tcp = Subflow::connect(now, sfcfg, local, SocketAddr::new(req.remote, req.remote_port), iss, ts_offset);
        let mut mp = self.subflow_mp(JoinState::ClientSynSent { nonce }, req.local_id, 0, req.backup);
        let attempt = self.paths.reopens_mut().take_attempt(req);
        mp.set_opened_as(*req, attempt);
        self.place_subflow(SubflowSlot { tcp, mp })
    }

    /// The handshake options of a segment the subflow `idx` has accepted (a
    /// SYN-ACK's MP_CAPABLE or its absence counts only once the SYN-ACK
    /// acknowledged our SYN; an HMAC failure in a segment an attacker could
    /// not get accepted never aborts a subflow). `Break` when the segment is
    /// fully handled here (the subflow was reset, or the join completed and
    /// the input was run).
    pub(super) fn handshake_input(
        &mut self,
        now: Instant,
        idx: usize,
        hdr: &TcpHeader,
        opts: &OptionSummary,
    ) -> ControlFlow<()> {
        let Some(slot) = self.subflows.get(idx) else { return ControlFlow::Break(()) };
        let f = hdr.flags;
        match slot.mp.join() {
            JoinState::Initial if self.mode == ConnMode::Pending && f.syn() && f.ack() => {
                self.on_mp_capable_synack(idx, hdr, opts);
            }
            JoinState::Initial
                if self.mode.is_mptcp() && self.hs.server() && self.hs.remote_key().is_none() && f.ack() =>
            {
                self.on_mp_capable_ack(idx, hdr, opts);
            }
            JoinState::ClientSynSent { nonce } if f.syn() && f.ack() => {
                return self.on_join_synack(now, idx, nonce, opts);
            }
            JoinState::ServerSynRcvd { nonce, peer_nonce } if f.ack() && !f.syn() => {
                return self.on_join_ack(now, idx, (nonce, peer_nonce), opts);
            }
            JoinState::ClientAwaitAck { .. } if f.ack() && !f.syn() => self.on_join_fourth_ack(idx, opts),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// Client: the SYN-ACK says whether the server speaks MPTCP (its key in
    /// MP_CAPABLE) or not (then the connection is plain TCP from here on).
    fn on_mp_capable_synack(&mut self, idx: usize, hdr: &TcpHeader, opts: &OptionSummary) {
        let Some(slot) = self.subflows.get(idx) else { return };
        let own = self.hs.local_key();
        // An MP_CAPABLE without H (HMAC-SHA256) or with B (an extension we
        // do not know) is ignored (RFC 8684 3.1, Linux mptcp_parse_option).
        // So is one that claims our own key: no peer picks it (one chance
        // in 2^64), and taking it would give the connection our own token
        // as the peer's, so that our own joins would come back to it.
        let key = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpCapable { version: 1, flags, sender_key: Some(k), receiver_key: None, .. }
                if usable_cap_flags(*flags) && *k != own =>
            {
                Some((*k, *flags))
            }
            _ => None,
        });
        let Some((k, flags)) = key else {
            self.fall_back(idx, FallbackReason::SynAck, Resume::AfterMapped);
            return;
        };
        let syn_window = slot.tcp.syn_window();
        self.hs.take_peer_flags(flags);
        self.mode.confirm_mptcp();
        self.hs.take_remote_key(k);
        self.rx.set_base(self.space.idsn(k) + 1, syn_window);
        // Until the first DATA_ACK, the window is relative to our IDSN + 1.
        self.tx.open_window(self.tx.base() + hdr.window as u64);
        self.counters.mptcp_mp_capable_synack_rx += 1;
    }

    /// Server: the third ACK echoes our key with the client's; from it on the
    /// connection is fully established. A third ACK without MP_CAPABLE makes
    /// the connection plain TCP (Linux: `MPCapableFallbackACK`).
    fn on_mp_capable_ack(&mut self, idx: usize, hdr: &TcpHeader, opts: &OptionSummary) {
        let Some(slot) = self.subflows.get(idx) else { return };
        let has_mpc = opts.mptcp.iter().any(
            |o| matches!(o, MptcpOption::MpCapable { sender_key: Some(_), flags, .. } if usable_cap_flags(*flags)),
        );
        if !has_mpc {
            self.fall_back(idx, FallbackReason::ThirdAck, Resume::AfterMapped);
            return;
        }
        let (syn_window, wscale) = (slot.tcp.syn_window(), slot.tcp.snd_wscale());
        for o in &opts.mptcp {
            if let MptcpOption::MpCapable { receiver_key: Some(rk), sender_key: Some(k), .. } = o {
                // The client's key must not be ours (see on_mp_capable_synack):
                // a forged third ACK claiming it made the connection join itself.
                if *rk == self.hs.local_key() && *k != self.hs.local_key() {
                    self.hs.take_remote_key(*k);
                    self.rx.set_base(self.space.idsn(*k) + 1, syn_window);
                    self.hs.establish_fully();
                    self.tx.open_window(self.tx.base() + ((hdr.window as u64) << wscale));
                    self.counters.mptcp_mp_capable_ack_rx += 1;
                }
            }
        }
    }

    /// Client of a join: the SYN-ACK's HMAC proves the server knows both
    /// keys; without it the subflow is reset (MP_TCPRST "MPTCP error").
    fn on_join_synack(&mut self, now: Instant, idx: usize, nonce: u32, opts: &OptionSummary) -> ControlFlow<()> {
        let Some(slot) = self.subflows.get_mut(idx) else { return ControlFlow::Break(()) };
        let hs = &self.hs;
        let ok = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpJoinSynAck { backup, addr_id, hmac, nonce: peer_nonce } => {
                Some((*backup, *addr_id, *hmac, *peer_nonce))
            }
            _ => None,
        });
        let expect = |pn| hs.remote_key().map(|rk| crypto::join_synack_hmac(rk, hs.local_key(), pn, nonce));
        if ok.is_some() && self.tx.fin().sent() {
            // Our DATA_FIN may be at the peer before our third ACK: a Linux
            // peer would take the join's HMAC and then refuse it. A RST now
            // lets its request go without a rejection.
            self.counters.mptun_mp_join_after_data_fin += 1;
            slot.tcp.abort();
            return ControlFlow::Break(());
        }
        match ok {
            Some((backup, addr_id, hmac, pn)) if expect(pn) == Some(hmac) => {
                slot.mp.set_remote_id(addr_id);
                if backup {
                    slot.mp.set_backup(true);
                }
                slot.mp.advance_join(JoinState::ClientAwaitAck { nonce, peer_nonce: pn });
                self.timers.set(Timer::JoinAck(idx), now + JOIN_ACK_RTO_INIT);
                self.counters.mptcp_mp_join_synack_rx += 1;
                ControlFlow::Continue(())
            }
            _ => {
                if ok.is_some() {
                    self.counters.mptcp_mp_join_synack_hmac_failure += 1;
                }
                self.counters.mptcp_mp_rst_tx += 1;
                // The subflow has taken the SYN-ACK: reset it.
                slot.reset_with(MPTCP_RST_EMPTCP);
                ControlFlow::Break(())
            }
        }
    }

    /// Server of a join: the third ACK's HMAC proves the client knows both
    /// keys. Then the subflow joins and answers with the fourth ACK;
    /// otherwise it is reset.
    fn on_join_ack(
        &mut self,
        now: Instant,
        idx: usize,
        (nonce, peer_nonce): (u32, u32),
        opts: &OptionSummary,
    ) -> ControlFlow<()> {
        let Some(slot) = self.subflows.get_mut(idx) else { return ControlFlow::Break(()) };
        let hmac = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpJoinAck { hmac } => Some(*hmac),
            _ => None,
        });
        let expect = self.hs.remote_key().map(|rk| crypto::join_ack_hmac(rk, self.hs.local_key(), peer_nonce, nonce));
        if hmac.is_some() && hmac == expect {
            slot.mp.advance_join(JoinState::Joined);
            self.counters.mptcp_mp_join_ack_rx += 1;
            slot.tcp.request_ack(); // the fourth ACK
            self.after_input(now, idx);
            return ControlFlow::Break(());
        }
        if hmac.is_some() {
            self.counters.mptcp_mp_join_ack_hmac_failure += 1;
        }
        self.counters.mptcp_mp_rst_tx += 1;
        slot.reset_with(MPTCP_RST_EMPTCP);
        ControlFlow::Break(())
    }

    /// Client of a join: an ACK after our third one that carries a DATA_ACK
    /// (or an ADD_ADDR) is the fourth ACK; the subflow may carry data. A bare
    /// ACK is not: a server still in SYN-RECEIVED sends one for any
    /// out-of-window segment (a spoofed one too), and taking it would skip
    /// our third ACK, whose HMAC the server still waits for (Linux
    /// `check_fully_established` asks for a DSS with `use_ack` or an ADD_ADDR).
    fn on_join_fourth_ack(&mut self, idx: usize, opts: &OptionSummary) {
        let fourth = opts
            .mptcp
            .iter()
            .any(|o| matches!(o, MptcpOption::Dss { data_ack: Some(_), .. } | MptcpOption::AddAddr { .. }));
        if !fourth {
            return;
        }
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        slot.mp.advance_join(JoinState::Joined);
        self.timers.stop(Timer::JoinAck(idx));
    }
}

/// An MP_CAPABLE's flags we can accept: H (HMAC-SHA256) set and B
/// (extensibility) clear.
pub(crate) fn usable_cap_flags(flags: u8) -> bool {
    flags & cap_flags::HMAC_SHA256 != 0 && flags & cap_flags::EXTENSIBILITY == 0
}
