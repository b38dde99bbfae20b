//! The per-segment MPTCP option writer: what each segment of a subflow
//! carries (MP_CAPABLE, MP_JOIN, DSS with DATA_ACK and mapping, DATA_FIN,
//! ADD_ADDR) and the connection-level window it advertises.

use super::{dss_checksum, JoinState, Mode, Shared, SubflowExt};
use crate::seq::{DataSeq, Seq};
use crate::tcp::{SegmentHook, SegmentMeta};
use mptun_time::{Duration, Instant};
use mptun_wire::mptcp::{cap_flags, DataAck, DssMapping};
use mptun_wire::{crypto, MptcpOption, TcpOption, TcpOptions};

/// MP_CAPABLE version we speak.
const VERSION: u8 = 1;
/// DSS with a 64-bit DATA_ACK and a 64-bit mapping: 26 bytes, 28 aligned.
pub(super) const DSS_FULL: usize = 28;
/// DSS with a 64-bit DATA_ACK only.
const DSS_ACK: usize = 12;
/// DSS with a 64-bit mapping only (18 bytes, 20 aligned; 20 exactly with a checksum).
pub(super) const DSS_MAP: usize = 20;
/// MP_FAIL (RFC 8684 3.7).
const MP_FAIL_LEN: usize = 12;
/// Retransmissions of an unechoed ADD_ADDR before it is given up (Linux
/// `ADD_ADDR_RETRANS_MAX`), each `MptcpConfig::add_addr_timeout` apart.
pub(crate) const ADD_ADDR_RETRANS_MAX: u8 = 3;
/// Retry of an ADD_ADDR that found no option room on a segment.
const ADD_ADDR_NO_ROOM_RETRY: Duration = Duration::from_millis(10);
/// An unchanged DATA_ACK is still repeated on every this many mappings, so
/// a lost segment cannot hide it for long.
const ACK_REFRESH_MAPS: u32 = 4;

pub(crate) struct Hook<'a> {
    pub sh: &'a mut Shared,
    pub ext: &'a mut SubflowExt,
    pub now: Instant,
    pub iss: Seq,
    /// Relative subflow sequence number of the next new data byte.
    pub next_ssn: u32,
    /// Free space of the connection receive buffer.
    pub recv_window: u64,
}

fn push(opts: &mut TcpOptions, o: MptcpOption) -> bool {
    opts.push_aligned(&TcpOption::Mptcp(o)).is_ok()
}

impl Hook<'_> {
    /// MP_CAPABLE flags: HMAC-SHA256, plus A when we ask for or agreed to checksums.
    fn cap_flags(&self, agreed: bool) -> u8 {
        let a = if (agreed && self.sh.csum) || self.sh.csum_request { cap_flags::CHECKSUM } else { 0 };
        cap_flags::HMAC_SHA256 | a
    }

    /// MP_CAPABLE in the form the handshake step needs: no key (SYN), our
    /// key (SYN-ACK), both keys (third ACK), and a data length (first data).
    fn mp_capable(&self, syn: bool, receiver_key: Option<u64>, data: Option<&DssMapping>) -> MptcpOption {
        MptcpOption::MpCapable {
            version: VERSION,
            flags: self.cap_flags(!syn),
            sender_key: (!syn).then_some(self.sh.local_key),
            receiver_key,
            data_len: data.map(|m| m.len),
            checksum: data.and_then(|m| m.checksum),
        }
    }

    fn data_ack(&self) -> Option<DataAck> {
        self.sh.rx_base.map(|_| DataAck { ack: self.sh.rcv_nxt.0, ack64: true })
    }

    /// The connection-level window, relative to the DATA_ACK, never shrinking.
    fn window(&mut self) -> u64 {
        let edge = self.sh.rcv_nxt + self.recv_window;
        self.sh.rcv_wnd_end = self.sh.rcv_wnd_end.max(edge);
        self.sh.rcv_wnd_end - self.sh.rcv_nxt
    }

    fn mapping_for(&self, meta: &SegmentMeta) -> Option<DssMapping> {
        let ssn = meta.seq - self.iss;
        self.ext.tx_maps.iter().find(|m| m.contains(ssn)).map(|m| DssMapping {
            dsn: m.dsn.0,
            dsn64: true,
            ssn: m.ssn,
            len: m.len as u16,
            checksum: self.sh.csum.then_some(m.csum),
        })
    }

    /// (DATA_ACK, window edge) a segment sent now would announce.
    fn ack_info(&self) -> (DataSeq, DataSeq) {
        let edge = self.sh.rcv_wnd_end.max(self.sh.rcv_nxt + self.recv_window);
        (self.sh.rcv_nxt, edge)
    }

    /// Whether a data segment must carry the DATA_ACK: it (or the window
    /// edge) changed since this subflow last sent it, or it is time to repeat
    /// it. RFC 8684 3.3 makes the DATA_ACK optional per segment; with a one-way
    /// transfer this frees 8 bytes of every data segment for payload.
    /// Until the peer has shown with a DATA_ACK of its own that it is fully
    /// established, every DSS carries the DATA_ACK (a Linux peer falls back
    /// on a first segment with neither MP_CAPABLE nor a DATA_ACK).
    fn data_ack_due(&self) -> bool {
        self.sh.rx_base.is_some()
            && (!self.sh.peer_data_ack_seen
                || self.ext.last_ack_sent != Some(self.ack_info())
                || self.ext.maps_without_ack >= ACK_REFRESH_MAPS)
    }

    /// The mapping holding relative subflow sequence `ssn`.
    fn map_index(&self, ssn: u32) -> Option<usize> {
        self.ext.tx_maps.iter().position(|m| m.contains(ssn))
    }

    /// Whether the segments of the mapping holding `ssn` carry the DATA_ACK,
    /// without deciding it.
    fn peek_with_ack(&self, ssn: u32) -> bool {
        match self.map_index(ssn) {
            None => ssn == self.first_data_ssn() || self.data_ack_due(),
            Some(i) => self.ext.tx_maps[i].with_ack.unwrap_or_else(|| self.ack_needed(i)),
        }
    }

    /// Whether mapping `i`, not decided yet, must carry the DATA_ACK. The
    /// segment at the subflow's first sequence number is the one a peer not
    /// yet fully established judges (Linux `check_fully_established` falls
    /// back, or resets a join, when it has neither MP_CAPABLE nor a
    /// DATA_ACK): the first mapping always carries it, whatever the peer
    /// showed before. A peer's own DATA_ACK does not prove it is fully
    /// established (a Linux client sends one from its second data segment on).
    fn ack_needed(&self, i: usize) -> bool {
        self.ext.tx_maps[i].contains(self.first_data_ssn()) || self.data_ack_due()
    }

    /// Relative subflow sequence number of the subflow's first data byte
    /// (the SYN takes the ISN; tests may shift the relative numbers).
    fn first_data_ssn(&self) -> u32 {
        1u32.wrapping_add(self.sh.ssn_off())
    }

    /// Decides (once per mapping) whether its segments carry the DATA_ACK.
    fn with_ack(&mut self, ssn: u32) -> bool {
        let Some(i) = self.map_index(ssn) else { return ssn == self.first_data_ssn() || self.data_ack_due() };
        if let Some(d) = self.ext.tx_maps[i].with_ack {
            return d;
        }
        let d = self.ack_needed(i);
        self.ext.tx_maps[i].with_ack = Some(d);
        self.note_ack_decision(d);
        d
    }

    /// Whether a mapping made now from relative subflow sequence `ssn` must
    /// carry the DATA_ACK: the push decides it as it makes the mapping, so
    /// that the mapping is cut to whole segments of the size the option
    /// leaves (8 bytes less with the DATA_ACK); [`Hook::note_ack_decision`]
    /// records it once the mapping exists.
    pub(super) fn new_map_needs_ack(&self, ssn: u32) -> bool {
        ssn == self.first_data_ssn() || self.data_ack_due()
    }

    /// A mapping's DATA_ACK decision, for the next one's.
    pub(super) fn note_ack_decision(&mut self, with_ack: bool) {
        if with_ack {
            self.ext.last_ack_sent = Some(self.ack_info());
            self.ext.maps_without_ack = 0;
        } else {
            self.ext.maps_without_ack += 1;
        }
    }

    fn dss(&mut self, meta: &SegmentMeta, opts: &mut TcpOptions) {
        let data_ack = self.data_ack();
        if meta.len > 0 {
            let mapping = self.mapping_for(meta);
            let with_ack = self.with_ack(meta.seq - self.iss);
            push(opts, MptcpOption::Dss { data_ack: data_ack.filter(|_| with_ack), mapping, data_fin: false });
            return;
        }
        self.ext.last_ack_sent = Some(self.ack_info());
        self.ext.maps_without_ack = 0;
        if self.sh.data_fin_due {
            if let Some(fin) = self.sh.data_fin_seq {
                let checksum = self.sh.csum.then(|| dss_checksum(fin.0, 0, 1, &[]));
                let m = DssMapping { dsn: fin.0, dsn64: true, ssn: 0, len: 1, checksum };
                if push(opts, MptcpOption::Dss { data_ack, mapping: Some(m), data_fin: true }) {
                    self.sh.data_fin_due = false;
                }
                return;
            }
        }
        // ADD_ADDR first: an IPv6 one with its HMAC (28 bytes) leaves no room
        // for the DSS, which Linux then leaves off that ACK too.
        self.announce(opts);
        if data_ack.is_some() {
            push(opts, MptcpOption::Dss { data_ack, mapping: None, data_fin: false });
        }
        if let Some(backup) = self.ext.prio_pending {
            if push(opts, MptcpOption::MpPrio { backup }) {
                self.ext.prio_pending = None;
            }
        }
    }

    /// The infinite mapping (RFC 8684 3.7) after the peer's MP_FAIL: a DSS with
    /// data-level length 0 at a data segment's own data and subflow sequence
    /// numbers, from where the subflow's bytes are the stream (Linux
    /// `mptcp_update_infinite_map`, `MPTcpExtInfiniteMapTx`). Placed on the
    /// first new data segment (cut with room for it), and repeated on every
    /// retransmission of that segment, as Linux keeps it in the skb's
    /// extension: a lost one must not leave the peer with unmapped data.
    /// Its checksum field is 0 (Linux writes 0 and checks none).
    fn infinite_mapping(&mut self, meta: &SegmentMeta, opts: &mut TcpOptions) -> bool {
        let ssn = meta.seq - self.iss;
        let at = match self.ext.infinite_map_at {
            Some((at_ssn, dsn)) if at_ssn == ssn => Some((ssn, dsn)),
            Some(_) => None,
            None if self.ext.infinite_map_due && !meta.retransmit => self
                .ext
                .tx_maps
                .iter()
                .find(|m| m.contains(ssn))
                .map(|m| (ssn, (m.dsn + u64::from(Seq(ssn) - Seq(m.ssn))).0)),
            None => None,
        };
        let Some((ssn, dsn)) = at else { return false };
        let mapping = DssMapping { dsn, dsn64: true, ssn, len: 0, checksum: self.sh.csum.then_some(0) };
        if !push(opts, MptcpOption::Dss { data_ack: self.data_ack(), mapping: Some(mapping), data_fin: false }) {
            return false;
        }
        if self.ext.infinite_map_at.is_none() {
            self.ext.infinite_map_at = Some((ssn, dsn));
            self.ext.infinite_map_due = false;
            self.sh.counters.mptcp_infinite_map_tx += 1;
        }
        true
    }

    /// Option bytes after a fallback: the MP_FAIL of a checksum failure (or
    /// its echo) and the infinite mapping that answers one. A data segment
    /// carries the infinite mapping or the MP_FAIL, never both (with
    /// timestamps they would not fit in 40 bytes); until the infinite mapping
    /// is out, pure ACKs keep the DATA_ACK (the peer has not fallen back yet,
    /// Linux falls back when it sends its infinite mapping).
    fn fallback_option_space(&self, data: bool) -> usize {
        let fail = self.ext.mp_fail.map_or(0, |_| MP_FAIL_LEN);
        if data {
            if self.ext.infinite_map_due {
                DSS_FULL
            } else {
                fail
            }
        } else {
            fail + if self.ext.infinite_map_due { DSS_ACK } else { 0 }
        }
    }

    /// ADD_ADDR (or its echo) on a pure ACK, when one is due and fits.
    fn announce(&mut self, opts: &mut TcpOptions) {
        let now = self.now;
        let Some(i) = self.sh.announce.iter().position(|a| a.at <= now) else { return };
        let a = self.sh.announce[i];
        let Some(rk) = self.sh.remote_key else { return };
        let hmac = (!a.echo).then(|| crypto::add_addr_hmac(self.sh.local_key, rk, a.id, a.addr, a.port));
        let o = MptcpOption::AddAddr { echo: a.echo, addr_id: a.id, addr: a.addr, port: a.port, hmac };
        if push(opts, o) {
            if a.echo {
                self.sh.announce.remove(i);
            } else {
                self.sh.counters.mptcp_add_addr_tx += 1;
                // Retransmitted every add_addr_timeout until echoed, at most
                // ADD_ADDR_RETRANS_MAX times (Linux mptcp_pm_add_timer).
                let ann = &mut self.sh.announce[i];
                ann.sent = ann.sent.saturating_add(1);
                if ann.sent > ADD_ADDR_RETRANS_MAX {
                    self.sh.announce.remove(i);
                } else {
                    ann.at = now + self.sh.add_addr_timeout;
                }
            }
        } else {
            // No room on this segment (SACK blocks took it): try again shortly
            // rather than asking for an ACK at once, forever.
            self.sh.announce[i].at = now + ADD_ADDR_NO_ROOM_RETRY;
        }
    }
}

impl SegmentHook for Hook<'_> {
    fn option_space(&self, data: bool) -> usize {
        match self.sh.mode {
            Mode::Plain => 0,
            _ if self.sh.infinite => self.fallback_option_space(data),
            Mode::Mptcp
                if data
                    && self.sh.fully_established
                    && matches!(self.ext.join, JoinState::Joined | JoinState::Initial)
                    && !self.peek_with_ack(self.next_ssn) =>
            {
                DSS_MAP
            }
            _ if data => DSS_FULL,
            _ => {
                let handshake =
                    !self.sh.fully_established || !matches!(self.ext.join, JoinState::Joined | JoinState::Initial);
                if handshake || !self.sh.announce.is_empty() || self.sh.data_fin_due {
                    DSS_FULL
                } else {
                    DSS_ACK
                }
            }
        }
    }

    fn option_space_at(&self, seq: Seq) -> usize {
        match self.sh.mode {
            Mode::Plain => 0,
            // A copy of the segment that carried the infinite mapping carries it again.
            _ if self.sh.infinite => match self.ext.infinite_map_at {
                Some((ssn, _)) if ssn == seq - self.iss => DSS_FULL,
                _ => 0,
            },
            Mode::Mptcp
                if self.sh.fully_established
                    && matches!(self.ext.join, JoinState::Joined | JoinState::Initial)
                    && !self.peek_with_ack(seq - self.iss) =>
            {
                DSS_MAP
            }
            _ => DSS_FULL,
        }
    }

    fn on_emit(&mut self, meta: &SegmentMeta, opts: &mut TcpOptions) -> Option<u64> {
        let (syn, ack) = (meta.flags.syn(), meta.flags.ack());
        if meta.flags.rst() {
            if self.ext.fastclose {
                if let Some(rk) = self.sh.remote_key {
                    push(opts, MptcpOption::MpFastclose { receiver_key: rk });
                }
            }
            if let Some(reason) = self.ext.rst_reason {
                push(opts, MptcpOption::MpTcpRst { flags: 0, reason });
            }
            if let Some(dsn) = self.ext.mp_fail {
                push(opts, MptcpOption::MpFail { dsn: dsn.0 });
            }
            return None;
        }
        if self.sh.mode == Mode::Plain || self.sh.infinite {
            if self.sh.mode == Mode::Plain || !ack {
                return None;
            }
            // What `fallback_option_space` made room for: on data, the
            // infinite mapping, else the MP_FAIL on new data only (a copy was
            // cut before, without room for it); on a pure ACK the MP_FAIL and,
            // until the infinite mapping is out, the DATA_ACK.
            let mapped = meta.len > 0 && self.infinite_mapping(meta, opts);
            if let Some(dsn) = self.ext.mp_fail.filter(|_| !mapped && (meta.len == 0 || !meta.retransmit)) {
                if push(opts, MptcpOption::MpFail { dsn: dsn.0 }) {
                    self.ext.mp_fail = None;
                }
            }
            if meta.len == 0 && self.ext.infinite_map_due {
                if let Some(data_ack) = self.data_ack() {
                    push(opts, MptcpOption::Dss { data_ack: Some(data_ack), mapping: None, data_fin: false });
                }
            }
            return None;
        }
        match self.ext.join {
            JoinState::Initial => {
                if syn && !ack {
                    push(opts, self.mp_capable(true, None, None));
                    return None;
                }
                if syn {
                    push(opts, self.mp_capable(false, None, None));
                    return None;
                }
                if self.sh.mode != Mode::Mptcp {
                    return None;
                }
                if !self.sh.server && !self.sh.fully_established {
                    // Third ACK and first data: repeat our key until the server shows it has it.
                    let first = self
                        .mapping_for(meta)
                        .filter(|m| m.dsn == self.sh.tx_base.0 && m.ssn == 1u32.wrapping_add(self.sh.ssn_off()));
                    // A due DATA_FIN goes in a DSS at once (Linux leaves
                    // MP_CAPABLE off once `snd_data_fin_enable` is set).
                    // Never before the third ACK itself has gone out.
                    let data_fin = meta.len == 0 && self.sh.data_fin_due && self.sh.cap_ack_sent;
                    if (meta.len > 0 && first.is_none()) || data_fin {
                        self.dss(meta, opts);
                    } else {
                        push(opts, self.mp_capable(false, self.sh.remote_key, first.as_ref()));
                        self.sh.cap_ack_sent = true;
                    }
                } else {
                    self.dss(meta, opts);
                }
            }
            JoinState::ClientSynSent { nonce } => {
                if syn {
                    let token = self.sh.remote_key.map(crypto::token).unwrap_or(0);
                    push(
                        opts,
                        MptcpOption::MpJoinSyn { backup: self.ext.backup, addr_id: self.ext.local_id, token, nonce },
                    );
                }
                return None;
            }
            JoinState::ServerSynRcvd { nonce, peer_nonce } => {
                if syn {
                    let rk = self.sh.remote_key.unwrap_or(0);
                    push(
                        opts,
                        MptcpOption::MpJoinSynAck {
                            backup: self.ext.backup,
                            addr_id: self.ext.local_id,
                            hmac: crypto::join_synack_hmac(self.sh.local_key, rk, nonce, peer_nonce),
                            nonce,
                        },
                    );
                    return None;
                }
            }
            JoinState::ClientAwaitAck { nonce, peer_nonce } => {
                if !syn && meta.len == 0 {
                    let rk = self.sh.remote_key.unwrap_or(0);
                    push(
                        opts,
                        MptcpOption::MpJoinAck {
                            hmac: crypto::join_ack_hmac(self.sh.local_key, rk, nonce, peer_nonce),
                        },
                    );
                }
            }
            JoinState::Joined => self.dss(meta, opts),
        }
        Some(self.window())
    }
}
