//! The per-segment MPTCP option writer: what each segment of a subflow
//! carries (MP_CAPABLE, MP_JOIN, DSS with DATA_ACK and mapping, DATA_FIN,
//! ADD_ADDR) and the connection-level window it advertises; and the policy
//! that decides which data segments may leave an unchanged DATA_ACK off.

use super::data_rx::DataRx;
use super::data_tx::DataTx;
use super::fallback::ConnMode;
use super::handshake::Handshake;
use super::slot::{InfiniteMapTx, JoinState, SubflowMp};
use super::subflow_tx::AckView;
use crate::counters::Counters;
use crate::pm::Paths;
use crate::seq::Seq;
use crate::tcp::{SegmentHook, SegmentMeta};
use mptun_time::Instant;
use mptun_wire::checksum::dss_checksum;
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
/// The [`SegmentHook`] of one subflow for one `poll_transmit`: the parts of
/// the connection its options are made of.
pub(crate) struct Hook<'a> {
    pub mode: ConnMode,
    pub hs: &'a mut Handshake,
    pub tx: &'a mut DataTx,
    pub rx: &'a mut DataRx,
    pub paths: &'a mut Paths,
    pub counters: &'a mut Counters,
    pub mp: &'a mut SubflowMp,
    pub now: Instant,
    /// What the subflow's absolute sequence numbers are counted from.
    pub base: Seq,
    /// Relative subflow sequence number of the next new data byte.
    pub next_ssn: Seq,
    /// Free space of the connection receive buffer.
    pub recv_window: u64,
    /// The subflow is open (not closing): it may carry ADD_ADDR and
    /// RM_ADDR, which are sent once or rarely; a closing one's FIN may be
    /// lost with its path (the very path an RM_ADDR withdraws).
    pub announces: bool,
}

fn push(opts: &mut TcpOptions, o: MptcpOption) -> bool {
    opts.push_aligned(&TcpOption::Mptcp(o)).is_ok()
}

impl Hook<'_> {
    /// Relative subflow sequence number of absolute `seq`.
    fn rel(&self, seq: Seq) -> Seq {
        Seq(seq - self.base)
    }

    fn acks(&self) -> AckView {
        AckView::new(self.rx, self.hs, self.recv_window)
    }

    fn first(&self) -> Seq {
        self.mp.first_data_ssn()
    }

    /// MP_CAPABLE flags: HMAC-SHA256, plus A when we ask for or agreed to checksums.
    fn cap_flags(&self, agreed: bool) -> u8 {
        let a = if (agreed && self.hs.csum()) || self.hs.csum_request() { cap_flags::CHECKSUM } else { 0 };
        cap_flags::HMAC_SHA256 | a
    }

    /// MP_CAPABLE in the form the handshake step needs: no key (SYN), our
    /// key (SYN-ACK), both keys (third ACK), and a data length (first data).
    fn mp_capable(&self, syn: bool, receiver_key: Option<u64>, data: Option<&DssMapping>) -> MptcpOption {
        MptcpOption::MpCapable {
            version: VERSION,
            flags: self.cap_flags(!syn),
            sender_key: (!syn).then_some(self.hs.local_key()),
            receiver_key,
            data_len: data.map(|m| m.len),
            checksum: data.and_then(|m| m.checksum),
        }
    }

    fn data_ack(&self) -> Option<DataAck> {
        self.rx.data_ack()
    }

    /// The connection-level window, relative to the DATA_ACK, never shrinking.
    fn window(&mut self) -> u64 {
        self.rx.announce_window(self.recv_window)
    }

    fn mapping_for(&self, meta: &SegmentMeta) -> Option<DssMapping> {
        let ssn = self.rel(meta.seq);
        self.mp.tx.map_at(ssn).map(|m| DssMapping {
            dsn: m.dsn.0,
            dsn64: true,
            ssn: m.ssn.0,
            len: m.len as u16,
            checksum: self.hs.csum().then_some(m.csum),
        })
    }

    /// Whether the data segment at relative `ssn` carries the DATA_ACK, decided once per mapping.
    fn with_ack(&mut self, ssn: Seq) -> bool {
        let (first, acks) = (self.first(), self.acks());
        self.mp.tx.with_ack(ssn, first, &acks)
    }

    fn peek_with_ack(&self, ssn: Seq) -> bool {
        self.mp.tx.peek_with_ack(ssn, self.first(), &self.acks())
    }

    fn dss(&mut self, meta: &SegmentMeta, opts: &mut TcpOptions) {
        let data_ack = self.data_ack();
        if meta.len > 0 {
            let mapping = self.mapping_for(meta);
            let with_ack = self.with_ack(self.rel(meta.seq));
            push(opts, MptcpOption::Dss { data_ack: data_ack.filter(|_| with_ack), mapping, data_fin: false });
            return;
        }
        let acks = self.acks();
        self.mp.tx.note_ack_decision(true, &acks);
        if let Some(fin) = self.tx.data_fin_due() {
            let checksum = self.hs.csum().then(|| dss_checksum(fin.0, 0, 1, &[]));
            let m = DssMapping { dsn: fin.0, dsn64: true, ssn: 0, len: 1, checksum };
            if push(opts, MptcpOption::Dss { data_ack, mapping: Some(m), data_fin: true }) {
                self.tx.data_fin_sent();
            }
            return;
        }
        // ADD_ADDR first: an IPv6 one with its HMAC (28 bytes) leaves no room
        // for the DSS, which Linux then leaves off that ACK too.
        self.announce(opts);
        if data_ack.is_some() {
            push(opts, MptcpOption::Dss { data_ack, mapping: None, data_fin: false });
        }
        if let Some(backup) = self.mp.signals.prio() {
            if push(opts, MptcpOption::MpPrio { backup }) {
                self.mp.signals.prio_sent();
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
        let ssn = self.rel(meta.seq);
        let at = match self.mp.signals.infinite_map() {
            InfiniteMapTx::Sent { ssn: at_ssn, dsn } if at_ssn == ssn => Some((ssn, dsn)),
            InfiniteMapTx::Sent { .. } | InfiniteMapTx::None => None,
            InfiniteMapTx::Due if meta.retransmit => None,
            InfiniteMapTx::Due => self.mp.tx.map_at(ssn).map(|m| (ssn, m.dsn + u64::from(ssn - m.ssn))),
        };
        let Some((ssn, dsn)) = at else { return false };
        let mapping = DssMapping { dsn: dsn.0, dsn64: true, ssn: ssn.0, len: 0, checksum: self.hs.csum().then_some(0) };
        if !push(opts, MptcpOption::Dss { data_ack: self.data_ack(), mapping: Some(mapping), data_fin: false }) {
            return false;
        }
        if self.mp.signals.infinite_map() == InfiniteMapTx::Due {
            self.mp.signals.infinite_map_sent(ssn, dsn);
            self.counters.mptcp_infinite_map_tx += 1;
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
        let fail = self.mp.signals.mp_fail().map_or(0, |_| MP_FAIL_LEN);
        let due = self.mp.signals.infinite_map() == InfiniteMapTx::Due;
        if data {
            if due {
                DSS_FULL
            } else {
                fail
            }
        } else {
            fail + if due { DSS_ACK } else { 0 }
        }
    }

    /// ADD_ADDR (or its echo) on a pure ACK, when one is due and fits.
    fn announce(&mut self, opts: &mut TcpOptions) {
        if !self.announces {
            return;
        }
        let now = self.now;
        let Some(a) = self.paths.announcements().due(now) else { return };
        let carried = if a.remove {
            let mut ids = arrayvec::ArrayVec::new();
            ids.push(a.id);
            let carried = push(opts, MptcpOption::RmAddr { ids });
            self.counters.mptcp_rm_addr_tx += carried as u64;
            carried
        } else {
            let Some(rk) = self.hs.remote_key() else { return };
            let hmac = (!a.echo).then(|| crypto::add_addr_hmac(self.hs.local_key(), rk, a.id, a.addr, a.port));
            let o = MptcpOption::AddAddr { echo: a.echo, addr_id: a.id, addr: a.addr, port: a.port, hmac };
            let carried = push(opts, o);
            self.counters.mptcp_add_addr_tx += (carried && !a.echo) as u64;
            carried
        };
        // What comes next (done, retransmitted later, or tried again
        // shortly for want of room) is the queue's decision.
        self.paths.announcements_mut().on_due_sent(now, carried);
    }

    /// Whether this subflow's handshake (the connection's, or its join) is over.
    fn joined(&self) -> bool {
        self.hs.fully_established() && self.mp.join().usable()
    }
}

impl SegmentHook for Hook<'_> {
    fn option_space(&self, data: bool) -> usize {
        match self.mode {
            ConnMode::Plain(_) => 0,
            ConnMode::Infinite(_) => self.fallback_option_space(data),
            ConnMode::Mptcp { .. } if data && self.joined() && !self.peek_with_ack(self.next_ssn) => DSS_MAP,
            _ if data => DSS_FULL,
            _ => {
                if !self.joined() || !self.paths.announcements().is_empty() || self.tx.fin().due() {
                    DSS_FULL
                } else {
                    DSS_ACK
                }
            }
        }
    }

    fn option_space_at(&self, seq: Seq) -> usize {
        match self.mode {
            ConnMode::Plain(_) => 0,
            // A copy of the segment that carried the infinite mapping carries it again.
            ConnMode::Infinite(_) => match self.mp.signals.infinite_map() {
                InfiniteMapTx::Sent { ssn, .. } if ssn == self.rel(seq) => DSS_FULL,
                _ => 0,
            },
            ConnMode::Mptcp { .. } if self.joined() && !self.peek_with_ack(self.rel(seq)) => DSS_MAP,
            _ => DSS_FULL,
        }
    }

    fn on_emit(&mut self, meta: &SegmentMeta, opts: &mut TcpOptions) -> Option<u64> {
        let (syn, ack) = (meta.flags.syn(), meta.flags.ack());
        if meta.flags.rst() {
            let sig = &self.mp.signals;
            if sig.fastclose() {
                if let Some(rk) = self.hs.remote_key() {
                    push(opts, MptcpOption::MpFastclose { receiver_key: rk });
                }
            }
            if let Some(reason) = sig.rst_reason() {
                push(opts, MptcpOption::MpTcpRst { flags: 0, reason });
            }
            if let Some(dsn) = sig.mp_fail() {
                push(opts, MptcpOption::MpFail { dsn: dsn.0 });
            }
            return None;
        }
        match self.mode {
            ConnMode::Plain(_) => return None,
            ConnMode::Infinite(_) => {
                if !ack {
                    return None;
                }
                // What `fallback_option_space` made room for: on data, the
                // infinite mapping, else the MP_FAIL on new data only (a copy
                // was cut before, without room for it); on a pure ACK the
                // MP_FAIL and, until the infinite mapping is out, the DATA_ACK.
                let mapped = meta.len > 0 && self.infinite_mapping(meta, opts);
                let fail = self.mp.signals.mp_fail().filter(|_| !mapped && (meta.len == 0 || !meta.retransmit));
                if let Some(dsn) = fail {
                    if push(opts, MptcpOption::MpFail { dsn: dsn.0 }) {
                        self.mp.signals.mp_fail_sent();
                    }
                }
                if meta.len == 0 && self.mp.signals.infinite_map() == InfiniteMapTx::Due {
                    if let Some(data_ack) = self.data_ack() {
                        push(opts, MptcpOption::Dss { data_ack: Some(data_ack), mapping: None, data_fin: false });
                    }
                }
                return None;
            }
            ConnMode::Pending | ConnMode::Mptcp { .. } => {}
        }
        match self.mp.join() {
            JoinState::Initial => {
                if syn && !ack {
                    push(opts, self.mp_capable(true, None, None));
                    return None;
                }
                if syn {
                    push(opts, self.mp_capable(false, None, None));
                    return None;
                }
                if !self.mode.is_mptcp() {
                    return None;
                }
                if !self.hs.server() && !self.hs.fully_established() {
                    // Third ACK and first data: repeat our key until the server shows it has it.
                    let first =
                        self.mapping_for(meta).filter(|m| m.dsn == self.tx.base().0 && Seq(m.ssn) == self.first());
                    // A due DATA_FIN goes in a DSS at once (Linux leaves
                    // MP_CAPABLE off once `snd_data_fin_enable` is set).
                    // Never before the third ACK itself has gone out.
                    let data_fin = meta.len == 0 && self.tx.fin().due() && self.hs.cap_ack_sent();
                    if (meta.len > 0 && first.is_none()) || data_fin {
                        self.dss(meta, opts);
                    } else {
                        push(opts, self.mp_capable(false, self.hs.remote_key(), first.as_ref()));
                        self.hs.cap_ack_went_out();
                    }
                } else {
                    self.dss(meta, opts);
                }
            }
            JoinState::ClientSynSent { nonce } => {
                if syn {
                    let token = self.hs.remote_key().map(crypto::token).unwrap_or(0);
                    let (backup, addr_id) = (self.mp.backup(), self.mp.local_id());
                    push(opts, MptcpOption::MpJoinSyn { backup, addr_id, token, nonce });
                }
                return None;
            }
            JoinState::ServerSynRcvd { nonce, peer_nonce } => {
                if syn {
                    let rk = self.hs.remote_key().unwrap_or(0);
                    let hmac = crypto::join_synack_hmac(self.hs.local_key(), rk, nonce, peer_nonce);
                    let (backup, addr_id) = (self.mp.backup(), self.mp.local_id());
                    push(opts, MptcpOption::MpJoinSynAck { backup, addr_id, hmac, nonce });
                    return None;
                }
            }
            JoinState::ClientAwaitAck { nonce, peer_nonce } => {
                if !syn && meta.len == 0 {
                    let rk = self.hs.remote_key().unwrap_or(0);
                    let hmac = crypto::join_ack_hmac(self.hs.local_key(), rk, nonce, peer_nonce);
                    push(opts, MptcpOption::MpJoinAck { hmac });
                }
            }
            JoinState::Joined => self.dss(meta, opts),
        }
        Some(self.window())
    }
}
