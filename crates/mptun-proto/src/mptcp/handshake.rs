//! The handshakes (Linux `subflow.c` and the handshake half of
//! `options.c`): MP_CAPABLE on the initial subflow, which exchanges the keys
//! the whole connection is derived from, and MP_JOIN, which authenticates
//! each further subflow with HMACs of those keys before it may carry data.
//!
//! The handshake options of a segment are looked at *before* the subflow
//! processes it: they decide whether the subflow may go on at all.

use super::{ConnConfig, Connection, JoinState, Mode, Shared, SubflowExt, MPTCP_RST_EMPTCP};
use crate::endpoint::JoinLimits;
use crate::pm::JoinRequest;
use crate::seq::DataSeq;
use crate::tcp::config::TCP_RTO_MIN;
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
        let mut c = Connection::new(cfg, if mptcp { Mode::Pending } else { Mode::Plain }, false, key, now);
        let sf = Subflow::connect(now, sfcfg, local, remote, iss, ts_offset);
        c.subflows.push(Some((sf, SubflowExt::new(JoinState::Initial, 0, 0, false))));
        if mptcp {
            c.shared.counters.mptcp_mp_capable_syn_tx += 1;
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
        let mut c = Connection::new(cfg, if mptcp { Mode::Mptcp } else { Mode::Plain }, true, key, now);
        if mpc {
            c.shared.counters.mptcp_mp_capable_syn_rx += 1;
        }
        if !mptcp && mpc {
            c.shared.counters.mptcp_mp_capable_fallback_ack += 1;
        }
        let sf = Subflow::accept(now, sfcfg, local, remote, syn, opts, iss, ts_offset);
        c.subflows.push(Some((sf, SubflowExt::new(JoinState::Initial, 0, 0, false))));
        // Checksums are on if the client asked (A flag) or we do; the C flag
        // keeps our path manager from joining to the client's address.
        let flags = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpCapable { flags, .. } => Some(*flags),
            _ => None,
        });
        if let Some(flags) = flags.filter(|_| mptcp) {
            c.shared.csum |= flags & cap_flags::CHECKSUM != 0;
            c.shared.peer_no_src_addr = flags & cap_flags::NO_SRC_ADDR != 0;
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
        // Rate first: a flood of joins costs a comparison each, not a scan.
        if now.saturating_duration_since(self.join_window.0) >= Duration::from_secs(1) {
            self.join_window = (now, 0);
        }
        if self.join_window.1 >= lim.max_syn_per_sec {
            self.shared.counters.mptun_mp_join_rate_limited += 1;
            return None;
        }
        self.join_window.1 += 1;
        let live = self.subflows.iter().flatten().count();
        let sh = &self.shared;
        if live > self.cfg.mptcp.pm.max_subflows as usize || !sh.fully_established || sh.joins_closed() {
            self.shared.counters.mptcp_mp_join_rejected += 1;
            return None;
        }
        let half_open =
            self.subflows.iter().flatten().filter(|(_, e)| matches!(e.join, JoinState::ServerSynRcvd { .. })).count();
        if half_open >= lim.max_half_open as usize {
            self.shared.counters.mptun_mp_join_half_open_limit += 1;
            return None;
        }
        self.shared.counters.mptcp_mp_join_syn_rx += 1;
        let sfcfg = Self::subflow_cfg(&self.cfg, true);
        let sf = Subflow::accept(now, sfcfg, local, remote, syn, opts, iss, ts_offset);
        // Backup if the peer asks (its SYN's B flag) or our endpoint for
        // the address joined is a `backup` one (Linux: `request_bkup`,
        // sent in the SYN/ACK's B flag).
        let ours = self.cfg.mptcp.pm.endpoints.iter().any(|e| e.addr == local.ip() && e.flags.backup);
        let ext = SubflowExt::new(JoinState::ServerSynRcvd { nonce, peer_nonce }, 0, addr_id, backup || ours);
        Some(self.place_subflow(sf, ext))
    }

    /// Puts a new subflow in the lowest free slot after the initial
    /// subflow's (slot 0 stays the initial subflow's: plain mode and
    /// `addresses` read it), so the slots of a connection are bounded by the
    /// subflows it has at once, not by every join ever tried. A slot is free
    /// only once its subflow was taken out and the scheduler forgot it; the
    /// endpoint checks a pair's subflow before it delivers to a slot, so a
    /// reused slot never gets its predecessor's packets.
    fn place_subflow(&mut self, sf: Subflow, ext: SubflowExt) -> usize {
        match self.subflows.iter().skip(1).position(Option::is_none) {
            Some(i) => {
                self.subflows[i + 1] = Some((sf, ext));
                i + 1
            }
            None => {
                self.subflows.push(Some((sf, ext)));
                self.subflows.len() - 1
            }
        }
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
        let sf = Subflow::connect(now, sfcfg, local, SocketAddr::new(req.remote, req.remote_port), iss, ts_offset);
        let ext = SubflowExt::new(JoinState::ClientSynSent { nonce }, req.local_id, 0, req.backup);
        self.place_subflow(sf, ext)
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
        let Some((_, ext)) = self.subflows.get(idx).and_then(|s| s.as_ref()) else { return ControlFlow::Break(()) };
        let sh = &self.shared;
        let f = hdr.flags;
        match ext.join {
            JoinState::Initial if sh.mode == Mode::Pending && f.syn() && f.ack() => {
                self.on_mp_capable_synack(idx, hdr, opts);
            }
            JoinState::Initial if sh.mode == Mode::Mptcp && sh.server && sh.remote_key.is_none() && f.ack() => {
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
        let Some((sf, _)) = self.subflows.get(idx).and_then(|s| s.as_ref()) else { return };
        let sh = &mut self.shared;
        let own = sh.local_key;
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
        match key {
            Some((k, flags)) => {
                sh.csum |= flags & cap_flags::CHECKSUM != 0;
                sh.peer_no_src_addr = flags & cap_flags::NO_SRC_ADDR != 0;
                sh.mode = Mode::Mptcp;
                sh.remote_key = Some(k);
                sh.set_rx_base(k, sf.syn_window());
                // Until the first DATA_ACK, the window is relative to our IDSN + 1.
                sh.wnd_end = sh.tx_base + hdr.window as u64;
                sh.counters.mptcp_mp_capable_synack_rx += 1;
            }
            None => {
                sh.mode = Mode::Plain;
                sh.counters.mptcp_mp_capable_fallback_synack += 1;
            }
        }
    }

    /// Server: the third ACK echoes our key with the client's; from it on the
    /// connection is fully established. A third ACK without MP_CAPABLE makes
    /// the connection plain TCP (Linux: `MPCapableFallbackACK`).
    fn on_mp_capable_ack(&mut self, idx: usize, hdr: &TcpHeader, opts: &OptionSummary) {
        let Some((sf, _)) = self.subflows.get(idx).and_then(|s| s.as_ref()) else { return };
        let sh = &mut self.shared;
        let has_mpc = opts.mptcp.iter().any(
            |o| matches!(o, MptcpOption::MpCapable { sender_key: Some(_), flags, .. } if usable_cap_flags(*flags)),
        );
        if !has_mpc {
            sh.mode = Mode::Plain;
            sh.counters.mptcp_mp_capable_fallback_ack += 1;
            return;
        }
        for o in &opts.mptcp {
            if let MptcpOption::MpCapable { receiver_key: Some(rk), sender_key: Some(k), .. } = o {
                // The client's key must not be ours (see on_mp_capable_synack):
                // a forged third ACK claiming it made the connection join itself.
                if *rk == sh.local_key && *k != sh.local_key {
                    sh.remote_key = Some(*k);
                    sh.set_rx_base(*k, sf.syn_window());
                    sh.fully_established = true;
                    sh.wnd_end = sh.wnd_end.max(sh.tx_base + ((hdr.window as u64) << sf.snd_wscale()));
                    sh.counters.mptcp_mp_capable_ack_rx += 1;
                }
            }
        }
    }

    /// Client of a join: the SYN-ACK's HMAC proves the server knows both
    /// keys; without it the subflow is reset (MP_TCPRST "MPTCP error").
    fn on_join_synack(&mut self, now: Instant, idx: usize, nonce: u32, opts: &OptionSummary) -> ControlFlow<()> {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else {
            return ControlFlow::Break(());
        };
        let sh = &mut self.shared;
        let ok = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpJoinSynAck { backup, addr_id, hmac, nonce: peer_nonce } => {
                Some((*backup, *addr_id, *hmac, *peer_nonce))
            }
            _ => None,
        });
        let expect = |pn| sh.remote_key.map(|rk| crypto::join_synack_hmac(rk, sh.local_key, pn, nonce));
        match ok {
            Some((backup, addr_id, hmac, pn)) if expect(pn) == Some(hmac) => {
                ext.remote_id = addr_id;
                ext.backup |= backup;
                ext.join = JoinState::ClientAwaitAck { nonce, peer_nonce: pn };
                ext.join_ack_retx = Some(now + JOIN_ACK_RTO_INIT);
                sh.counters.mptcp_mp_join_synack_rx += 1;
                ControlFlow::Continue(())
            }
            _ => {
                if ok.is_some() {
                    sh.counters.mptcp_mp_join_synack_hmac_failure += 1;
                }
                sh.counters.mptcp_mp_rst_tx += 1;
                ext.rst_reason = Some(MPTCP_RST_EMPTCP);
                // The subflow has taken the SYN-ACK: reset it.
                sf.abort();
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
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else {
            return ControlFlow::Break(());
        };
        let sh = &mut self.shared;
        let hmac = opts.mptcp.iter().find_map(|o| match o {
            MptcpOption::MpJoinAck { hmac } => Some(*hmac),
            _ => None,
        });
        let expect = sh.remote_key.map(|rk| crypto::join_ack_hmac(rk, sh.local_key, peer_nonce, nonce));
        if hmac.is_some() && hmac == expect {
            ext.join = JoinState::Joined;
            sh.counters.mptcp_mp_join_ack_rx += 1;
            sf.request_ack(); // the fourth ACK
            self.after_input(now, idx);
            return ControlFlow::Break(());
        }
        if hmac.is_some() {
            sh.counters.mptcp_mp_join_ack_hmac_failure += 1;
        }
        sh.counters.mptcp_mp_rst_tx += 1;
        ext.rst_reason = Some(MPTCP_RST_EMPTCP);
        sf.abort();
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
        let Some((_, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        ext.join = JoinState::Joined;
        ext.join_ack_retx = None;
    }

    /// Resends the MP_JOIN third ACK of subflow `idx` if its timer expired.
    pub(super) fn join_ack_retransmit(sf: &mut Subflow, ext: &mut SubflowExt, now: Instant) {
        if ext.join_ack_retx.is_some_and(|t| t <= now) {
            ext.join_ack_retx = Some(now + sf.info().rto.max(TCP_RTO_MIN));
            sf.request_ack();
        }
    }
}

/// An MP_CAPABLE's flags we can accept: H (HMAC-SHA256) set and B
/// (extensibility) clear.
pub(crate) fn usable_cap_flags(flags: u8) -> bool {
    flags & cap_flags::HMAC_SHA256 != 0 && flags & cap_flags::EXTENSIBILITY == 0
}

impl Shared {
    /// The peer's key is known: its data starts at its IDSN + 1, and it may
    /// send the `syn_window` bytes our SYN (or SYN-ACK) offered before any
    /// connection-level window of ours reaches it.
    fn set_rx_base(&mut self, remote_key: u64, syn_window: u64) {
        let base = self.idsn(remote_key) + 1;
        self.rx_base = Some(base);
        self.rcv_nxt = base;
        // Until now `rcv_wnd_end` was 0 or a window edge counted from 0 (a
        // segment sent before the key came): it enters the data sequence
        // space as the later of the two in plain order, so that the modular
        // order from here on never sees a number 2^63 away.
        self.rcv_wnd_end = DataSeq(self.rcv_wnd_end.0.max(base.0)).max(base + syn_window);
    }
}
