//! Whether the connection's bytes travel as MPTCP data or as one TCP
//! stream, and the one way from the first to the second (Linux
//! `__mptcp_try_fallback(msk, fb_mib)`): at the handshake, when the peer
//! does not speak MPTCP, the connection is plain TCP; later, when a
//! middlebox interferes, the single subflow's bytes continue the data
//! sequence as an infinite mapping (RFC 8684 3.7) and no MPTCP option goes
//! out any more.

use super::slot::RxMap;
use super::Connection;
use crate::seq::{DataSeq, Seq};

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
        let rx = &mut slot.mp.rx;
        match resume {
            Resume::AfterMapped => {
                let last = rx.ahead.back().or(rx.map.as_ref()).map(|m| (m.end(), m.dsn_end()));
                let cont = last.or(rx.last_end.filter(|&(ssn, _)| ssn.ge(next))).unwrap_or((next, rcv_nxt));
                // (Should bytes lie unmapped between `next` and `cont`,
                // the drain finds them and resets: never a silent gap.)
                rx.last_end = Some(cont);
                rx.infinite_at = Some(cont);
            }
            Resume::FailedMapping(m) => {
                rx.ahead.clear();
                rx.map = Some(RxMap::infinite(m.ssn, m.dsn));
                rx.infinite_at = Some((m.ssn, m.dsn));
            }
            Resume::At(ssn, dsn) => {
                // From `ssn` on the subflow's bytes continue the data sequence
                // at `dsn` (what `current_map` reads once the known mappings
                // are used up).
                rx.ahead.retain(|x| x.ssn.lt(ssn));
                rx.last_end = Some((ssn, dsn));
                rx.infinite_at = Some((ssn, dsn));
            }
        }
    }

    /// Why the connection fell back to TCP, if it did (plain from the
    /// start because MPTCP was never offered or accepted is `None`).
    pub fn fallback_reason(&self) -> Option<FallbackReason> {
        self.mode.fallback_reason()
    }
}
