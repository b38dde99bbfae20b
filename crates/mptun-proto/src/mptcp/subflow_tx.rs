//! What a subflow sent at the data level (Linux keeps it on the skbs of
//! the subflow's write queue and in `mptcp_subflow_context`): the DSS
//! mappings it carries until the peer DATA_ACKed them and the subflow
//! acknowledged them, how far its data was reinjected elsewhere, and the
//! per-subflow DATA_ACK policy that decides which segments carry the
//! DATA_ACK. The fields are private: the push (`tx.rs`), the window probe
//! and the segment hook (`hook.rs`) change it through the methods below.

use super::data_rx::DataRx;
use super::handshake::Handshake;
use crate::seq::{DataSeq, Seq};
use std::collections::VecDeque;

/// A DSS mapping we created: `len` bytes at data sequence `dsn` sit at
/// relative subflow sequence `ssn` (1 = first data byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxMap {
    pub ssn: Seq,
    pub dsn: DataSeq,
    pub len: u32,
    /// DSS checksum of the mapping (computed only when checksums are on).
    pub csum: u16,
    /// Whether this mapping's segments carry the DATA_ACK, decided at its
    /// first segment so that all its segments have identical options (TSO
    /// on a TUN merges only byte-identical headers) and a retransmission
    /// fits the size the original was cut to.
    pub with_ack: Option<bool>,
}

impl TxMap {
    /// Whether relative subflow sequence `ssn` lies inside the mapping (modulo 2^32).
    pub fn contains(&self, ssn: Seq) -> bool {
        ssn - self.ssn < self.len
    }
    /// The relative subflow sequence just past the mapping.
    pub fn end(&self) -> Seq {
        self.ssn + self.len
    }
    /// The data sequence just past the mapping.
    pub fn dsn_end(&self) -> DataSeq {
        self.dsn + self.len as u64
    }
}

/// The send side of a subflow at the data level: the mappings it carries
/// and the DATA_ACK decisions that go with them (the DATA_ACK policy is here too).
#[derive(Debug, Default)]
pub(crate) struct SubflowTx {
    /// Mappings sent and not yet both DATA_ACKed and acknowledged by the subflow.
    maps: VecDeque<TxMap>,
    /// Data sequence up to which this subflow's data was reinjected
    /// elsewhere; `None` before its first reinjection.
    reinjected_to: Option<DataSeq>,
    /// End of the highest data sequence ever mapped on this subflow.
    data_end: Option<DataSeq>,
    /// (DATA_ACK, window edge) last sent on this subflow, and mappings sent
    /// since without it: unchanged acknowledgement information is left off
    /// data segments to give their payload the 8 bytes.
    last_ack_sent: Option<(DataSeq, DataSeq)>,
    maps_without_ack: u32,
}

/// An unchanged DATA_ACK is still repeated on every this many mappings, so
/// a lost segment cannot hide it for long.
const ACK_REFRESH_MAPS: u32 = 4;

/// What decides whether a data segment carries the DATA_ACK: the
/// acknowledgement a segment sent now would announce, and what the peer
/// has shown.
#[derive(Clone, Copy, Debug)]
pub(super) struct AckView {
    /// (DATA_ACK, window edge) a segment sent now would announce.
    info: (DataSeq, DataSeq),
    /// The peer's key is known: there is a DATA_ACK to send at all.
    keyed: bool,
    /// The peer sent a DATA_ACK of its own (see `Handshake::peer_data_ack_seen`).
    peer_seen: bool,
}

impl AckView {
    /// The view with `recv_window` bytes free in the receive buffer.
    pub fn new(rx: &DataRx, hs: &Handshake, recv_window: u64) -> Self {
        AckView {
            info: (rx.nxt(), rx.wnd_end().max(rx.nxt() + recv_window)),
            keyed: rx.base().is_some(),
            peer_seen: hs.peer_data_ack_seen(),
        }
    }
}

impl SubflowTx {
    // --- the DATA_ACK policy ---

    /// Whether a data segment must carry the DATA_ACK: it (or the window
    /// edge) changed since this subflow last sent it, or it is time to repeat
    /// it. RFC 8684 3.3 makes the DATA_ACK optional per segment; with a one-way
    /// transfer this frees 8 bytes of every data segment for payload.
    /// Until the peer has shown with a DATA_ACK of its own that it is fully
    /// established, every DSS carries the DATA_ACK (a Linux peer falls back
    /// on a first segment with neither MP_CAPABLE nor a DATA_ACK).
    fn data_ack_due(&self, v: &AckView) -> bool {
        v.keyed && (!v.peer_seen || self.last_ack_sent != Some(v.info) || self.maps_without_ack >= ACK_REFRESH_MAPS)
    }

    /// The mapping holding relative subflow sequence `ssn`.
    fn map_index(&self, ssn: Seq) -> Option<usize> {
        self.maps.iter().position(|m| m.contains(ssn))
    }

    /// Whether mapping `i`, not decided yet, must carry the DATA_ACK. The
    /// segment at the subflow's first sequence number is the one a peer not
    /// yet fully established judges (Linux `check_fully_established` falls
    /// back, or resets a join, when it has neither MP_CAPABLE nor a
    /// DATA_ACK): the first mapping always carries it, whatever the peer
    /// showed before. A peer's own DATA_ACK does not prove it is fully
    /// established (a Linux client sends one from its second data segment on).
    fn ack_needed(&self, i: usize, first: Seq, v: &AckView) -> bool {
        self.maps[i].contains(first) || self.data_ack_due(v)
    }

    /// Whether the segments of the mapping holding `ssn` carry the DATA_ACK,
    /// without deciding it (`first`: the subflow's first data ssn).
    pub(super) fn peek_with_ack(&self, ssn: Seq, first: Seq, v: &AckView) -> bool {
        match self.map_index(ssn) {
            None => ssn == first || self.data_ack_due(v),
            Some(i) => self.maps[i].with_ack.unwrap_or_else(|| self.ack_needed(i, first, v)),
        }
    }

    /// Decides (once per mapping) whether its segments carry the DATA_ACK.
    pub(super) fn with_ack(&mut self, ssn: Seq, first: Seq, v: &AckView) -> bool {
        let Some(i) = self.map_index(ssn) else { return ssn == first || self.data_ack_due(v) };
        if let Some(d) = self.maps[i].with_ack {
            return d;
        }
        let d = self.ack_needed(i, first, v);
        self.maps[i].with_ack = Some(d);
        self.note_ack_decision(d, v);
        d
    }

    /// Whether a mapping made now from relative subflow sequence `ssn` must
    /// carry the DATA_ACK (`first`: the subflow's first data ssn): the push
    /// decides it as it makes the mapping, so that the mapping is cut to
    /// whole segments of the size the option leaves (8 bytes less with the
    /// DATA_ACK); [`SubflowTx::note_ack_decision`] records it once the
    /// mapping exists.
    pub(super) fn new_map_needs_ack(&self, ssn: Seq, first: Seq, v: &AckView) -> bool {
        ssn == first || self.data_ack_due(v)
    }

    /// A mapping's DATA_ACK decision, for the next one's.
    pub(super) fn note_ack_decision(&mut self, with_ack: bool, v: &AckView) {
        if with_ack {
            self.last_ack_sent = Some(v.info);
            self.maps_without_ack = 0;
        } else {
            self.maps_without_ack += 1;
        }
    }
}

impl SubflowTx {
    /// The mappings sent and not yet released, oldest first.
    pub fn maps(&self) -> &VecDeque<TxMap> {
        &self.maps
    }

    /// The mapping holding relative subflow sequence `ssn`.
    pub fn map_at(&self, ssn: Seq) -> Option<&TxMap> {
        self.maps.iter().find(|m| m.contains(ssn))
    }

    /// End of the highest data sequence ever mapped on this subflow.
    pub fn data_end(&self) -> Option<DataSeq> {
        self.data_end
    }

    /// A new mapping of new or reinjected data.
    pub fn push_map(&mut self, m: TxMap) {
        let end = m.dsn_end();
        self.maps.push_back(m);
        self.data_end = Some(self.data_end.map_or(end, |e| e.max(end)));
    }

    /// A one-byte window-probe mapping of data already DATA_ACKed: it
    /// moves no data end.
    pub fn push_probe(&mut self, m: TxMap) {
        self.maps.push_back(m);
    }

    /// The last mapping, if new data from `start` continues it at relative
    /// ssn `ssn` and none of it has gone out yet (`unsent_from`: the first
    /// relative ssn not sent): its length and DATA_ACK decision.
    pub fn growable_last(&self, start: DataSeq, ssn: Seq, unsent_from: Seq) -> Option<(u32, Option<bool>)> {
        self.maps
            .back()
            .filter(|m| m.dsn_end() == start && m.end() == ssn && unsent_from.le(m.ssn))
            .map(|m| (m.len, m.with_ack))
    }

    /// The last mapping grew by `len` bytes (see [`SubflowTx::growable_last`]).
    pub fn grow_last(&mut self, len: u32) {
        if let Some(m) = self.maps.back_mut() {
            m.len += len;
            self.data_end = Some(m.dsn_end());
        }
    }

    /// Releases the mappings both DATA_ACKed (below `una`) and acknowledged
    /// by the subflow (below relative `sf_una`): until then it may still
    /// retransmit them.
    pub fn release(&mut self, una: DataSeq, sf_una: Seq) {
        while let Some(m) = self.maps.front() {
            if m.dsn_end().le(una) && m.end().le(sf_una) {
                self.maps.pop_front();
            } else {
                break;
            }
        }
    }

    /// The data of this subflow's mappings not DATA_ACKed (from `una`)
    /// and not reinjected before, as ranges to send elsewhere; from now on
    /// all of it counts as reinjected.
    pub fn take_for_reinjection(&mut self, una: DataSeq) -> Vec<(DataSeq, DataSeq)> {
        let mut out = Vec::new();
        for m in &self.maps {
            let mut start = m.dsn.max(una);
            if let Some(r) = self.reinjected_to {
                start = start.max(r);
            }
            let end = m.dsn_end();
            if start.lt(end) {
                out.push((start, end));
            }
        }
        // The highest end, not the last mapping's: a copy or a reinjection
        // maps older data after newer.
        if let Some(end) = self.maps.iter().map(|m| m.dsn_end()).reduce(|a, b| a.max(b)) {
            self.reinjected_to = Some(self.reinjected_to.map_or(end, |r| r.max(end)));
        }
        out
    }
}
