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
    rst_reason: Option<u8>,
    /// Put MP_FASTCLOSE on our RST.
    fastclose: bool,
    /// MP_FAIL to send (RFC 8684 3.7): the data sequence number of the
    /// mapping whose checksum failed, on the next ACK of the only subflow
    /// (which then falls back) or on the RST with MP_TCPRST.
    mp_fail: Option<DataSeq>,
    /// The infinite mapping that answers the peer's MP_FAIL.
    infinite_map: InfiniteMapTx,
    /// MP_PRIO to send on the next pure ACK.
    prio: Option<bool>,
}

impl SubflowSignals {
    /// The MP_TCPRST reason our RST carries.
    pub fn rst_reason(&self) -> Option<u8> {
        self.rst_reason
    }

    /// Our RST carries MP_FASTCLOSE.
    pub fn fastclose(&self) -> bool {
        self.fastclose
    }

    /// The MP_FAIL owed: the failed mapping's data sequence number.
    pub fn mp_fail(&self) -> Option<DataSeq> {
        self.mp_fail
    }

    /// Where our infinite mapping stands.
    pub fn infinite_map(&self) -> InfiniteMapTx {
        self.infinite_map
    }

    /// The MP_PRIO owed.
    pub fn prio(&self) -> Option<bool> {
        self.prio
    }

    /// Our RST is to carry MP_TCPRST `reason`.
    pub fn reset_reason(&mut self, reason: u8) {
        self.rst_reason = Some(reason);
    }

    /// Our RST is to carry MP_FASTCLOSE (or not).
    pub fn set_fastclose(&mut self, on: bool) {
        self.fastclose = on;
    }

    /// MP_FAIL for the mapping at `dsn` is owed.
    pub fn owe_mp_fail(&mut self, dsn: DataSeq) {
        self.mp_fail = Some(dsn);
    }

    /// The MP_FAIL went out.
    pub fn mp_fail_sent(&mut self) {
        self.mp_fail = None;
    }

    /// The infinite mapping is owed on the next new data segment.
    pub fn owe_infinite_map(&mut self) {
        self.infinite_map = InfiniteMapTx::Due;
    }

    /// The infinite mapping owed went on the segment at `ssn` (`dsn`).
    pub fn infinite_map_sent(&mut self, ssn: Seq, dsn: DataSeq) {
        if self.infinite_map == InfiniteMapTx::Due {
            self.infinite_map = InfiniteMapTx::Sent { ssn, dsn };
        }
    }

    /// MP_PRIO with `backup` is owed on the next pure ACK.
    pub fn owe_prio(&mut self, backup: bool) {
        self.prio = Some(backup);
    }

    /// The MP_PRIO went out.
    pub fn prio_sent(&mut self) {
        self.prio = None;
    }
}

/// MPTCP state of one subflow.
#[derive(Debug)]
pub(crate) struct SubflowMp {
    join: JoinState,
    local_id: u8,
    remote_id: u8,
    backup: bool,
    /// An RTO streak: the scheduler avoids it, its data went elsewhere.
    stale: bool,
    /// What relative subflow sequence numbers are offset by (see
    /// [`super::MptcpConfig::wrap_early`]; 0 but in tests).
    ssn_off: u32,
    pub tx: SubflowTx,
    pub rx: SubflowRx,
    pub signals: SubflowSignals,
    /// A window cut the scheduler asked for, applied in the subflow's own
    /// push path.
    cut: Option<WindowCut>,
    /// Cuts applied to this subflow.
    penalized: u64,
    /// Its `sub-established` event went out (`created` for the initial
    /// subflow): its `sub-closed` is owed.
    up_reported: bool,
    /// Its `sub-closed` event went out: nothing more is reported of it.
    down_reported: bool,
    /// The (reason, flags) of the MP_TCPRST the peer reset it with.
    rst_reason: Option<(u8, u8)>,
    /// Closed by the path manager before the connection's end (an address
    /// withdrawn, a subflow destroyed): its path may be gone, and nothing
    /// of the connection waits for its close to complete.
    withdrawn: bool,
    /// The join this subflow was opened as (ours only), and how many
    /// failures in a row came before it: what a re-open repeats.
    opened_as: Option<(crate::pm::JoinRequest, u32)>,
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
    /// How the subflow came to be, and where its join handshake is.
    pub fn join(&self) -> JoinState {
        self.join
    }

    /// Our address id for it.
    pub fn local_id(&self) -> u8 {
        self.local_id
    }

    /// The peer's address id for it.
    pub fn remote_id(&self) -> u8 {
        self.remote_id
    }

    /// It is a backup subflow.
    pub fn backup(&self) -> bool {
        self.backup
    }

    /// An RTO streak made it stale.
    pub fn stale(&self) -> bool {
        self.stale
    }

    /// What relative subflow sequence numbers are offset by.
    pub fn ssn_off(&self) -> u32 {
        self.ssn_off
    }

    /// Window cuts applied to it.
    pub fn penalized(&self) -> u64 {
        self.penalized
    }

    /// Its `sub-established` (or `created`) event went out.
    pub fn up_reported(&self) -> bool {
        self.up_reported
    }

    /// Its `sub-closed` event went out.
    pub fn down_reported(&self) -> bool {
        self.down_reported
    }

    /// The (reason, flags) of the MP_TCPRST the peer reset it with.
    pub fn rst_reason(&self) -> Option<(u8, u8)> {
        self.rst_reason
    }

    /// Closed by the path manager before the connection's end.
    pub fn withdrawn(&self) -> bool {
        self.withdrawn
    }

    /// The join it was opened as (ours only) and the failures before it.
    pub fn opened_as(&self) -> Option<(crate::pm::JoinRequest, u32)> {
        self.opened_as
    }

    /// The join handshake moved on (SYN-ACK verified, fourth ACK, third ACK taken).
    pub fn advance_join(&mut self, to: JoinState) {
        self.join = to;
    }

    /// The peer's address id, from its MP_JOIN SYN-ACK.
    pub fn set_remote_id(&mut self, id: u8) {
        self.remote_id = id;
    }

    /// Makes it backup (or not); `true` when that changed.
    pub fn set_backup(&mut self, backup: bool) -> bool {
        std::mem::replace(&mut self.backup, backup) != backup
    }

    /// It became stale (an RTO streak) or recovered.
    pub fn set_stale(&mut self, stale: bool) {
        self.stale = stale;
    }

    /// The scheduler asks for `cut` of its window.
    pub fn ask_cut(&mut self, cut: WindowCut) {
        self.cut = Some(cut);
    }

    /// The window cut asked for, to apply now; counted as applied.
    pub fn take_cut(&mut self) -> Option<WindowCut> {
        let cut = self.cut.take();
        self.penalized += cut.is_some() as u64;
        cut
    }

    /// Its `sub-established` (or `created`) event went out.
    pub fn report_up(&mut self) {
        self.up_reported = true;
    }

    /// Its `sub-closed` event went out: nothing more is reported of it.
    pub fn report_down(&mut self) {
        (self.up_reported, self.down_reported) = (false, true);
    }

    /// The peer reset it with MP_TCPRST `reason` and `flags`.
    pub fn on_peer_rst(&mut self, reason: u8, flags: u8) {
        self.rst_reason = Some((reason, flags));
    }

    /// The path manager closes it before the connection's end.
    pub fn withdraw(&mut self) {
        self.withdrawn = true;
    }

    /// The join it was opened as, and the failures in a row before it.
    pub fn set_opened_as(&mut self, req: crate::pm::JoinRequest, attempt: u32) {
        self.opened_as = Some((req, attempt));
    }

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
        self.tcp.iss() - self.mp.ssn_off()
    }

    /// The same for the peer's sequence numbers.
    pub fn rcv_base(&self) -> Seq {
        self.tcp.irs() - self.mp.ssn_off()
    }

    /// Relative ssn of the next byte the subflow would hand out.
    pub fn next_rx_ssn(&self) -> Seq {
        Seq(self.tcp.recv_offset() as u32) + 1 + self.mp.ssn_off()
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
        self.mp.join().usable() && matches!(self.tcp.state(), State::Established | State::CloseWait) && !self.mp.stale()
    }

    /// Can carry a connection-level signal (window update, DATA_FIN,
    /// ADD_ADDR) on a pure ACK.
    pub fn can_signal(&self) -> bool {
        self.tcp.state().is_synchronized() && !self.tcp.is_closed() && !self.mp.stale() && self.mp.join().usable()
    }

    /// In its handshake or carrying data both ways: not closing, closed or
    /// in TIME_WAIT. What the path manager counts and its commands act on.
    pub fn is_open(&self) -> bool {
        matches!(self.tcp.state(), State::SynSent | State::SynReceived | State::Established | State::CloseWait)
    }

    /// Resets the subflow with MP_TCPRST `reason` on its RST.
    pub fn reset_with(&mut self, reason: u8) {
        self.mp.signals.reset_reason(reason);
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
