//! One subflow as the connection holds it: the TCP state machine
//! ([`Subflow`]) beside what MPTCP keeps about it (Linux's
//! `mptcp_subflow_context`): how it joined, its address ids and priority,
//! the mappings it sent and received (`subflow_tx.rs`, `subflow_rx.rs`,
//! each with private fields), and the signals it owes the peer.
//!
//! [`Subflows`] is the connection's table of them, by index; an index is
//! stable for a subflow's life and may be reused once it is gone.

use crate::seq::{DataSeq, Seq};
use crate::tcp::{State, Subflow};
use mptun_cc::WindowCut;

pub(crate) use super::subflow_rx::{RxMap, SubflowRx};
pub(crate) use super::subflow_tx::{SubflowTx, TxMap};

/// How a subflow came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinState {
    /// The initial subflow (MP_CAPABLE).
    Initial,
    /// We sent MP_JOIN SYN with `nonce`.
    ClientSynSent { nonce: u32 },
    /// We verified the SYN-ACK and send the third ACK until the fourth arrives.
    ClientAwaitAck { nonce: u32, peer_nonce: u32 },
    /// We answered an MP_JOIN SYN.
    ServerSynRcvd { nonce: u32, peer_nonce: u32 },
    /// Usable for data.
    Joined,
}

impl JoinState {
    /// The handshake is over: the subflow may carry data.
    pub fn usable(self) -> bool {
        matches!(self, JoinState::Initial | JoinState::Joined)
    }
}

/// Our infinite mapping (RFC 8684 3.7), owed after the peer's MP_FAIL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum InfiniteMapTx {
    /// None owed.
    #[default]
    None,
    /// The first new data segment takes it.
    Due,
    /// It went on the segment at relative ssn `ssn`, data sequence `dsn`:
    /// repeated on every copy of that segment.
    Sent { ssn: Seq, dsn: DataSeq },
}

/// What a subflow owes the peer besides data and acknowledgements.
#[derive(Debug, Default)]
pub(crate) struct SubflowSignals {
    /// MP_TCPRST reason to put on our RST (RFC 8684 3.6).
    pub rst_reason: Option<u8>,
    /// Put MP_FASTCLOSE on our RST.
    pub fastclose: bool,
    /// MP_FAIL to send (RFC 8684 3.7): the data sequence number of the
    /// mapping whose checksum failed, on the next ACK of the only subflow
    /// (which then falls back) or on the RST with MP_TCPRST.
    pub mp_fail: Option<DataSeq>,
    /// The infinite mapping that answers the peer's MP_FAIL.
    pub infinite_map: InfiniteMapTx,
    /// MP_PRIO to send on the next pure ACK.
    pub prio: Option<bool>,
}

/// MPTCP state of one subflow.
#[derive(Debug)]
pub(crate) struct SubflowMp {
    pub join: JoinState,
    pub local_id: u8,
    pub remote_id: u8,
    pub backup: bool,
    /// An RTO streak: the scheduler avoids it, its data went elsewhere.
    pub stale: bool,
    /// What relative subflow sequence numbers are offset by (see
    /// [`super::MptcpConfig::wrap_early`]; 0 but in tests).
    pub ssn_off: u32,
    pub tx: SubflowTx,
    pub rx: SubflowRx,
    pub signals: SubflowSignals,
    /// A window cut the scheduler asked for, applied in the subflow's own
    /// push path.
    pub cut: Option<WindowCut>,
    /// Cuts applied to this subflow.
    pub penalized: u64,
    /// Its `sub-established` event went out (`created` for the initial
    /// subflow): its `sub-closed` is owed.
    pub up_reported: bool,
    /// Its `sub-closed` event went out: nothing more is reported of it.
    pub down_reported: bool,
    /// The (reason, flags) of the MP_TCPRST the peer reset it with.
    pub rst_reason: Option<(u8, u8)>,
    /// Closed by the path manager before the connection's end (an address
    /// withdrawn, a subflow destroyed): its path may be gone, and nothing
    /// of the connection waits for its close to complete.
    pub withdrawn: bool,
    /// The join this subflow was opened as (ours only), and how many
    /// failures in a row came before it: what a re-open repeats.
    pub opened_as: Option<(crate::pm::JoinRequest, u32)>,
}

impl SubflowMp {
    pub fn new(join: JoinState, local_id: u8, remote_id: u8, backup: bool, ssn_off: u32) -> Self {
        SubflowMp {
            join,
            local_id,
            remote_id,
            backup,
            stale: false,
            ssn_off,
            tx: SubflowTx::default(),
            rx: SubflowRx::default(),
            signals: SubflowSignals::default(),
            cut: None,
            penalized: 0,
            up_reported: false,
            down_reported: false,
            rst_reason: None,
            withdrawn: false,
            opened_as: None,
        }
    }

    /// Relative subflow sequence number of the subflow's first data byte
    /// (the SYN takes the ISN; tests may shift the relative numbers).
    pub fn first_data_ssn(&self) -> Seq {
        Seq(1) + self.ssn_off
    }
}

/// One subflow of the connection.
#[derive(Debug)]
pub(crate) struct SubflowSlot {
    pub tcp: Subflow,
    pub mp: SubflowMp,
}

impl SubflowSlot {
    /// What our absolute sequence numbers are counted from to make relative
    /// ones (the ISS, shifted in tests).
    pub fn snd_base(&self) -> Seq {
        self.tcp.iss() - self.mp.ssn_off
    }

    /// The same for the peer's sequence numbers.
    pub fn rcv_base(&self) -> Seq {
        self.tcp.irs() - self.mp.ssn_off
    }

    /// Relative ssn of the next byte the subflow would hand out.
    pub fn next_rx_ssn(&self) -> Seq {
        Seq(self.tcp.recv_offset() as u32) + 1 + self.mp.ssn_off
    }

    /// Relative ssn up to which the peer acknowledged our bytes.
    pub fn snd_una_rel(&self) -> Seq {
        self.tcp.snd_una() - self.snd_base().0
    }

    /// Relative ssn of the next new byte the subflow will send.
    pub fn snd_nxt_rel(&self) -> Seq {
        self.tcp.snd_nxt() - self.snd_base().0
    }

    /// Relative ssn the next byte handed to the subflow will get.
    pub fn write_seq_rel(&self) -> Seq {
        self.tcp.write_seq() - self.snd_base().0
    }

    /// Can carry data now: joined, established (or half-closed by the
    /// peer), not stale.
    pub fn usable(&self) -> bool {
        self.mp.join.usable() && matches!(self.tcp.state(), State::Established | State::CloseWait) && !self.mp.stale
    }

    /// Can carry a connection-level signal (window update, DATA_FIN,
    /// ADD_ADDR) on a pure ACK.
    pub fn can_signal(&self) -> bool {
        self.tcp.state().is_synchronized() && !self.tcp.is_closed() && !self.mp.stale && self.mp.join.usable()
    }

    /// In its handshake or carrying data both ways: not closing, closed or
    /// in TIME_WAIT. What the path manager counts and its commands act on.
    pub fn is_open(&self) -> bool {
        matches!(self.tcp.state(), State::SynSent | State::SynReceived | State::Established | State::CloseWait)
    }

    /// Resets the subflow with MP_TCPRST `reason` on its RST.
    pub fn reset_with(&mut self, reason: u8) {
        self.mp.signals.rst_reason = Some(reason);
        self.tcp.abort();
    }
}

/// The connection's subflows, by index. Slot 0 is the initial subflow's
/// for good (plain mode and `Connection::addresses` read it); a later
/// subflow takes the lowest free slot after it, so the table is bounded by
/// the subflows a connection has at once, not by every join ever tried.
#[derive(Debug, Default)]
pub(crate) struct Subflows {
    slots: Vec<Option<SubflowSlot>>,
}

impl Subflows {
    /// Subflow `i`, if it is alive.
    pub fn get(&self, i: usize) -> Option<&SubflowSlot> {
        self.slots.get(i).and_then(Option::as_ref)
    }

    /// Subflow `i`, if it is alive.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut SubflowSlot> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    /// The live subflows with their indices.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &SubflowSlot)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }

    /// The live subflows.
    pub fn live(&self) -> impl Iterator<Item = &SubflowSlot> {
        self.slots.iter().flatten()
    }

    /// The live subflows, mutably.
    pub fn live_mut(&mut self) -> impl Iterator<Item = &mut SubflowSlot> {
        self.slots.iter_mut().flatten()
    }

    /// How many subflows are alive.
    pub fn count(&self) -> usize {
        self.live().count()
    }

    /// Slots in the table, live or free: the bound on indices.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Puts a subflow in the lowest free slot after the initial one and
    /// returns its index. A slot is free only once its subflow was taken
    /// out and the scheduler forgot it; the endpoint checks a pair's
    /// subflow before it delivers to a slot, so a reused slot never gets its
    /// predecessor's packets.
    pub fn place(&mut self, slot: SubflowSlot) -> usize {
        if self.slots.is_empty() {
            self.slots.push(Some(slot));
            return 0;
        }
        match self.slots.iter().skip(1).position(Option::is_none) {
            Some(i) => {
                self.slots[i + 1] = Some(slot);
                i + 1
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Takes subflow `i` out of the table; its slot becomes free.
    pub fn take(&mut self, i: usize) -> Option<SubflowSlot> {
        self.slots.get_mut(i).and_then(Option::take)
    }
}
