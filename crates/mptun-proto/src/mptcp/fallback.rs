//! Whether the connection's bytes travel as MPTCP data or as one TCP
//! stream, and the one way from the first to the second (Linux
//! `__mptcp_try_fallback(msk, fb_mib)`): at the handshake, when the peer
//! does not speak MPTCP, the connection is plain TCP; later, when a
//! middlebox interferes, the single subflow's bytes continue the data
//! sequence as an infinite mapping (RFC 8684 3.7) and no MPTCP option goes
//! out any more. Every way into a fallback is here: options stripped
//! mid-stream, the peer's MP_FAIL or infinite mapping, a data-level copy
//! refused where the peer may read the subflow as the stream; and what it
//! changes: the subflow's ACK as the DATA_ACK, its FIN as the DATA_FIN.

use super::slot::{JoinState, RxMap, SubflowSlot};
use super::{Connection, MPTCP_RST_EMIDDLEBOX, MPTCP_RST_EMPTCP};
use crate::seq::{DataSeq, Seq};
use crate::tcp::State;
use mptun_wire::mptcp::DssMapping;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::TcpHeader;

/// ACKs of new data in a row without MPTCP options after which a sender
/// takes the peer's options as stripped (three, like the duplicate-ACK
/// threshold: a middlebox strips every one, a forged ACK is a single one).
const OPTLESS_ACKS_FALLBACK: u8 = 3;

/// Whether the connection speaks MPTCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Client that offered MP_CAPABLE and awaits the SYN-ACK.
    Pending,
    /// Both sides speak MPTCP: data goes through DSS mappings over any
    /// subflow (or, after a fallback mid-stream, as an infinite mapping over
    /// the only one).
    Mptcp,
    /// Plain TCP: never offered, refused by the peer, or fallen back.
    Plain,
}

/// Why a connection fell back to TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FallbackReason {
    /// The server's SYN-ACK had no usable MP_CAPABLE
    /// (`MPTcpExtMPCapableFallbackSYNACK`).
    SynAck,
    /// The client's third ACK had no MP_CAPABLE (`MPTcpExtMPCapableFallbackACK`).
    ThirdAck,
    /// A middlebox stripped the MPTCP options mid-stream (`MPTcpExtDSSFallback`).
    StrippedOptions,
    /// A DSS checksum failed on the only subflow: we sent MP_FAIL
    /// (`MPTcpExtDataCsumErr`, then `MPTcpExtDSSFallback`).
    ChecksumFailed,
    /// The peer's DSS checksum failed on the only subflow: it sent MP_FAIL
    /// (`MPTcpExtMPFailRx`).
    MpFailReceived,
    /// The peer fell back and said so with an infinite mapping
    /// (`MPTcpExtInfiniteMapRx`).
    InfiniteMapping,
}

/// The connection's mode, with what a fallback needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnMode {
    /// Client that offered MP_CAPABLE and awaits the SYN-ACK.
    Pending,
    /// Both sides speak MPTCP. `infinite_ok` (Linux
    /// `allow_infinite_fallback`): no data-level retransmission or window
    /// probe went onto a subflow yet. Such a copy sits in the subflow's byte
    /// stream after the original, so once that stream is read as the data
    /// stream it would be delivered twice: from then on what would fall back
    /// resets the subflow instead.
    Mptcp { infinite_ok: bool },
    /// Fell back mid-stream: the single subflow's byte stream continues the
    /// data sequence space as an infinite mapping.
    Infinite(FallbackReason),
    /// Plain TCP from the handshake on: never offered or accepted
    /// (`None`), or refused.
    Plain(Option<FallbackReason>),
}

impl ConnMode {
    /// The mode the application sees: an infinite mapping is still MPTCP
    /// on the wire until its end.
    pub fn public(self) -> Mode {
        match self {
            ConnMode::Pending => Mode::Pending,
            ConnMode::Mptcp { .. } | ConnMode::Infinite(_) => Mode::Mptcp,
            ConnMode::Plain(_) => Mode::Plain,
        }
    }

    /// The handshake agreed on MPTCP (data-level mappings from here on, or
    /// after a fallback an infinite one).
    pub fn is_mptcp(self) -> bool {
        self.public() == Mode::Mptcp
    }

    /// MPTCP with mappings: not fallen back.
    pub fn is_mapped(self) -> bool {
        matches!(self, ConnMode::Mptcp { .. })
    }

    /// Fallen back mid-stream to an infinite mapping.
    pub fn infinite(self) -> bool {
        matches!(self, ConnMode::Infinite(_))
    }

    /// Plain TCP from the handshake on.
    pub fn plain(self) -> bool {
        matches!(self, ConnMode::Plain(_))
    }

    /// A fallback to an infinite mapping is still possible.
    pub fn infinite_ok(self) -> bool {
        matches!(self, ConnMode::Mptcp { infinite_ok: true } | ConnMode::Pending)
    }

    /// Why the connection fell back, if it did.
    pub fn fallback_reason(self) -> Option<FallbackReason> {
        match self {
            ConnMode::Infinite(r) => Some(r),
            ConnMode::Plain(r) => r,
            _ => None,
        }
    }

    /// The SYN-ACK (client) or the SYN (server) agreed on MPTCP.
    pub fn confirm_mptcp(&mut self) {
        *self = ConnMode::Mptcp { infinite_ok: true };
    }

    /// A data-level copy went onto a subflow: no infinite fallback from now on.
    pub fn forbid_infinite(&mut self) {
        if let ConnMode::Mptcp { infinite_ok } = self {
            *infinite_ok = false;
        }
    }
}

/// Where the subflow's bytes continue the data sequence after a fallback
/// mid-stream.
pub(super) enum Resume {
    /// After the mappings already received, honoured to their end: the last
    /// one known, else the last one read, else the subflow's next byte at
    /// the connection's next data sequence number.
    AfterMapped,
    /// At the start of this mapping, whose checksum failed: its bytes are
    /// delivered as the TCP stream carried them, and those after it follow.
    FailedMapping(RxMap),
    /// At relative ssn and data sequence, as the peer's infinite mapping says;
    /// mappings before it still hold.
    At(Seq, DataSeq),
}

impl Connection {
    /// Falls back to TCP for `reason`, the only writer of the fallback: at
    /// the handshake the connection becomes plain TCP; mid-stream the
    /// subflow `idx` (the only one) carries the rest of the data sequence
    /// from where `resume` says. Counted as Linux counts each reason.
    pub(super) fn fall_back(&mut self, idx: usize, reason: FallbackReason, resume: Resume) {
        let c = &mut self.counters;
        match reason {
            FallbackReason::SynAck => {
                c.mptcp_mp_capable_fallback_synack += 1;
                self.mode = ConnMode::Plain(Some(reason));
                return;
            }
            FallbackReason::ThirdAck => {
                c.mptcp_mp_capable_fallback_ack += 1;
                self.mode = ConnMode::Plain(Some(reason));
                return;
            }
            FallbackReason::StrippedOptions | FallbackReason::ChecksumFailed | FallbackReason::InfiniteMapping => {
                c.mptcp_dss_fallback += 1;
            }
            // Counted as the MP_FAIL it is (`MPTcpExtMPFailRx`) where it arrives.
            FallbackReason::MpFailReceived => {}
        }
        self.mode = ConnMode::Infinite(reason);
        let rcv_nxt = self.rx.nxt();
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        let next = slot.next_rx_ssn();
        match resume {
            Resume::AfterMapped => slot.mp.rx.resume_after_mapped(next, rcv_nxt),
            Resume::FailedMapping(m) => slot.mp.rx.resume_at_failed(m),
            Resume::At(ssn, dsn) => slot.mp.rx.resume_at(ssn, dsn),
        }
    }

    /// Why the connection fell back to TCP, if it did (plain from the
    /// start because MPTCP was never offered or accepted is `None`).
    pub fn fallback_reason(&self) -> Option<FallbackReason> {
        self.mode.fallback_reason()
    }

    /// MP_FAIL: the peer's checksum failed on our only subflow and it fell
    /// back (RFC 8684 3.7): so do we, and answer as Linux's
    /// `mptcp_pm_mp_fail_received` does: MP_FAIL echoed on the next ACK (a
    /// Linux receiver resets the subflow when no answer comes) and the
    /// infinite mapping on the next new data segment. An MP_FAIL after our
    /// own fallback is the peer's answer to ours. With other subflows the
    /// peer resets this one instead, and the MP_FAIL is only counted.
    pub(super) fn on_mp_fail(&mut self, idx: usize, dsn: DataSeq) {
        self.counters.mptcp_mp_fail_rx += 1;
        let alone = self.subflows.count() == 1;
        let Some(slot) = self.subflows.get(idx) else { return };
        if !(alone && self.hs.csum() && self.mode.is_mapped() && self.mode.infinite_ok())
            || slot.mp.join() != JoinState::Initial
        {
            return;
        }
        self.fall_back(idx, FallbackReason::MpFailReceived, Resume::AfterMapped);
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        slot.mp.signals.owe_mp_fail(dsn);
        slot.mp.signals.owe_infinite_map();
        slot.tcp.request_ack();
    }

    /// A DSS mapping with data-level length 0: the infinite mapping of a
    /// peer that fell back to TCP (RFC 8684 3.7). On the only subflow the
    /// connection falls back too: the subflow's bytes from the mapping's
    /// subflow sequence on continue the data sequence at its DSN, and no
    /// MPTCP option is sent any more. With other subflows alive it is a
    /// protocol error that resets this subflow (Linux: an infinite mapping is
    /// valid only when the connection can fall back).
    pub(super) fn on_infinite_mapping(&mut self, idx: usize, m: &DssMapping) {
        let single = self.subflows.count() == 1;
        let dsn = self.rx.expand(m);
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        self.counters.mptcp_infinite_map_rx += 1;
        if self.mode.infinite() {
            // The answer to our MP_FAIL: we fell back at the failed mapping
            // already, and the mapping agrees with it (checked before).
            return;
        }
        if !single || slot.mp.join() != JoinState::Initial || self.rx.base().is_none() || !self.mode.infinite_ok() {
            self.counters.mptcp_mp_rst_tx += 1;
            slot.reset_with(MPTCP_RST_EMPTCP);
            return;
        }
        // The mapping starts at its subflow sequence number (0 when the
        // sender left it out: then at the subflow's next unread byte).
        let ssn = if m.ssn != 0 { Seq(m.ssn) } else { slot.next_rx_ssn() };
        self.fall_back(idx, FallbackReason::InfiniteMapping, Resume::At(ssn, dsn));
    }

    /// A middlebox stripped our options mid-stream: data without any MPTCP
    /// option on the only subflow once fully established, or a run of ACKs
    /// of new data without options (before full establishment, a client
    /// takes the first such ACK). Fall back to an infinite mapping (RFC 8684
    /// 3.7): the mappings already received are honoured to their end, and
    /// the subflow's bytes from there on continue the data sequence exactly
    /// where the last of them ends.
    pub(super) fn detect_fallback(
        &mut self,
        idx: usize,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        (single_subflow, ofo_empty, acked_new): (bool, bool, bool),
    ) {
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        let hs = &self.hs;
        let f = hdr.flags;
        slot.mp.rx.on_ack_options(!opts.mptcp.is_empty(), acked_new);
        let rx = &slot.mp.rx;
        let stripped = self.mode.is_mapped()
            // A client whose first established segments carry no option
            // falls back too (Linux `check_fully_established`).
            && (hs.fully_established() || !hs.server())
            && opts.mptcp.is_empty()
            && !f.syn()
            && !f.rst()
            // Data without a DSS proves the stripping (Linux
            // `get_mapping_status`). A sender that gets only pure ACKs needs
            // OPTLESS_ACKS_FALLBACK of them in a row acknowledging new data,
            // so one forged ACK cannot force a fallback; before it is fully
            // established a client takes the first (`check_fully_established`).
            && (!payload.is_empty()
                || rx.optless_acks() >= OPTLESS_ACKS_FALLBACK
                || (!hs.fully_established() && slot.tcp.snd_una() != slot.tcp.iss() + 1))
            && slot.mp.join() == JoinState::Initial
            && single_subflow
            && ofo_empty;
        if !stripped {
            return;
        }
        if !self.mode.infinite_ok() {
            // Linux `mptcp_subflow_reset` when `mptcp_try_fallback` fails.
            self.counters.mptcp_mp_rst_tx += 1;
            slot.reset_with(MPTCP_RST_EMIDDLEBOX);
            return;
        }
        self.fall_back(idx, FallbackReason::StrippedOptions, Resume::AfterMapped);
    }

    /// The subflow's FIN after a fallback: it is the DATA_FIN only if every
    /// byte the subflow acknowledged made it into the connection and the
    /// stream is contiguous up to it; anything else is an error for the
    /// application, never an end of stream. `true` for a clean end.
    pub(super) fn fallback_fin_in_order(&self, idx: usize) -> bool {
        let Some(slot) = self.subflows.get(idx) else { return false };
        let next = slot.next_rx_ssn();
        let rx = &slot.mp.rx;
        let at = match rx.map() {
            Some(m) if next - m.ssn <= m.len => Some(m.dsn + (next - m.ssn) as u64),
            _ => rx.last_end().filter(|&(ssn, _)| ssn == next).map(|(_, dsn)| dsn),
        };
        slot.tcp.recv_ready() == 0 && self.rx.buf().ofo_is_empty() && at == Some(self.rx.nxt())
    }

    /// Whether a data-level copy (an MPTCP-level retransmission or a window
    /// probe) may go onto the subflows. A peer that fell back to TCP on its
    /// only subflow (a middlebox stripped the options of one of our
    /// segments: a client not yet fully established takes a single one,
    /// Linux `check_fully_established`) reads that subflow's bytes as the
    /// stream, and a copy there, at new subflow sequence numbers, would be
    /// delivered twice. Its ACKs tell: after a fallback they carry no MPTCP
    /// option. So while our only subflow is the initial one and the last ACK
    /// of new data on it came without an option, we fall back too instead of
    /// copying (what the subflow acknowledged is then acknowledged, see
    /// [`Connection::fallback_una`]), or, once a copy already went out and a
    /// fallback would misread it, reset the subflow (MP_TCPRST "middlebox
    /// interference", Linux's answer when `mptcp_try_fallback` fails).
    /// `false` when it did either.
    pub(super) fn copy_allowed(&mut self) -> bool {
        let Some((idx, slot)) = self.subflows.iter().next() else { return true };
        if self.subflows.count() != 1 || slot.mp.join() != JoinState::Initial || slot.mp.rx.optless_acks() == 0 {
            return true;
        }
        if self.mode.infinite_ok() {
            self.fall_back(idx, FallbackReason::StrippedOptions, Resume::AfterMapped);
            self.fallback_una();
        } else if let Some(slot) = self.subflows.get_mut(idx) {
            self.counters.mptcp_mp_rst_tx += 1;
            slot.reset_with(MPTCP_RST_EMIDDLEBOX);
        }
        false
    }

    /// After a fallback no DATA_ACK comes: what the single subflow has
    /// acknowledged is acknowledged at the data level.
    pub(super) fn fallback_una(&mut self) {
        let Some(slot) = self.subflows.live().next() else { return };
        let sf_una = slot.snd_una_rel();
        let mut una = self.tx.una();
        for m in slot.mp.tx.maps() {
            if sf_una.lt(m.ssn) {
                break;
            }
            let into = sf_una - m.ssn;
            una = una.max(m.dsn + (into.min(m.len)) as u64);
            if into < m.len {
                break;
            }
        }
        let wnd = slot.tcp.info().snd_wnd as u64;
        self.tx.acked_by_fallback(una, wnd);
    }

    /// After a fallback the subflow's FIN carries the DATA_FIN: once all
    /// data is sent, the single subflow closes.
    pub(super) fn fallback_close(&mut self) {
        if !self.mode.infinite() || self.tx.fin().seq() != Some(self.tx.nxt()) {
            return;
        }
        if let Some(slot) = self.subflows.live_mut().next() {
            if matches!(slot.tcp.state(), State::Established | State::CloseWait) {
                slot.tcp.close();
            }
        }
    }

    /// A DSS checksum failed on subflow `idx` for `map` (RFC 8684 3.7,
    /// Linux `subflow_check_data_avail`): on the only subflow (`alone`,
    /// never joined) MP_FAIL with the mapping's DSN and a fallback to TCP
    /// from that mapping on, its bytes delivered as the TCP stream carried
    /// them (`true`); otherwise the subflow is reset with MP_TCPRST
    /// "middlebox interference" and MP_FAIL, and its data is reinjected
    /// elsewhere (`false`: its bytes are not delivered).
    pub(super) fn on_bad_checksum(&mut self, idx: usize, map: RxMap, alone: bool) -> bool {
        let Some(slot) = self.subflows.get_mut(idx) else { return false };
        self.counters.mptcp_data_csum_err += 1;
        self.counters.mptcp_mp_fail_tx += 1;
        slot.mp.signals.owe_mp_fail(map.dsn);
        if alone && slot.mp.join() == JoinState::Initial && self.mode.infinite_ok() {
            // The infinite mapping starts at the failed one: the subflow's
            // bytes continue the data sequence from it.
            slot.tcp.request_ack();
            self.fall_back(idx, FallbackReason::ChecksumFailed, Resume::FailedMapping(map));
            return true;
        }
        slot.mp.rx.drop_current();
        self.counters.mptcp_mp_rst_tx += 1;
        slot.reset_with(MPTCP_RST_EMIDDLEBOX);
        false
    }
}

impl SubflowSlot {
    /// A DSS mapping received after a fallback. Linux ignores them; but a
    /// peer that still sends one has not fallen back (a middlebox stripped
    /// only what made us fall back), and it may put data-level copies (a
    /// retransmission, a window probe) on this subflow at new subflow
    /// sequence numbers. Read as the stream, such a copy would be delivered
    /// twice. So a mapping that puts bytes of the infinite part at another
    /// data sequence number than the infinite mapping does is a protocol
    /// error (the subflow is reset before anything of the segment is read);
    /// one that agrees, or covers only bytes before the fallback, or none of
    /// the segment's, changes nothing.
    /// `dsn` is the mapping's DSN expanded to 64 bits.
    pub(super) fn contradicts_infinite(&self, dsn: DataSeq, m: &DssMapping, data_fin: bool) -> bool {
        let rx = &self.mp.rx;
        let Some((at_ssn, at_dsn)) = rx.infinite_at() else { return false };
        let (seg_ssn, seg_len) = rx.seg();
        let len = (m.len as u32).saturating_sub(data_fin as u32);
        if seg_len == 0 || len == 0 {
            return false;
        }
        let map = RxMap { ssn: Seq(m.ssn), dsn, len, csum: None, fin: false };
        let seg = RxMap { ssn: seg_ssn, dsn: DataSeq(0), len: seg_len, csum: None, fin: false };
        if !map.overlaps(&seg) || map.end().le(at_ssn) {
            return false;
        }
        let from = if map.ssn.ge(at_ssn) { map.ssn } else { at_ssn };
        map.dsn + (from - map.ssn) as u64 != at_dsn + (from - at_ssn) as u64
    }
}
