//! The MPTCP connection (RFC 8684 v1): the "msk" that owns the subflows.
//!
//! It keeps the connection-level send buffer (bytes from the oldest
//! unacknowledged data sequence number on) and the connection-level
//! reassembly queue, pushes bursts of data to subflows as the
//! [scheduler](crate::sched) picks them (each burst one DSS mapping), maps
//! what each subflow delivers back to data sequence numbers, and runs the
//! handshakes (MP_CAPABLE, MP_JOIN), DATA_ACK, DATA_FIN, ADD_ADDR and
//! reinjection. A connection whose peer does not speak MPTCP falls back to
//! plain TCP over its single subflow; the application sees no difference.
//!
//! The subflows stay plain [`Subflow`]s: this layer reaches them only through
//! their public API and the [`SegmentHook`] it passes to `poll_transmit`,
//! which adds the MPTCP option to each segment and advertises the
//! connection-level receive window.

mod close;
mod config;
mod handshake;
mod hook;
mod info;
mod rx;
mod signal;
mod stream;
mod tx;

pub use config::{ConnConfig, MptcpConfig};
pub(crate) use handshake::usable_cap_flags;
pub use info::{ConnectionInfo, SubflowInfo};

use crate::buf::{RecvBuf, SendBuf};
use crate::counters::Counters;
use crate::pm::{JoinRequest, PmState};
use crate::sched::{new_scheduler, Scheduler};
use crate::seq::{DataSeq, Seq};
use crate::tcp::autotune::RcvSpace;
use crate::tcp::{Event, Subflow, Transmit, Verdict};
use hook::Hook;
use mptun_time::{Duration, Instant};
use mptun_wire::checksum::dss_checksum;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::{crypto, TcpHeader};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

// What `tests.rs` (`use super::*`) reaches through this module.
#[cfg(test)]
use {mptun_wire::MptcpOption, rx::expand32};

/// MP_TCPRST reason "MPTCP-specific error" (RFC 8684 3.6), what Linux sends
/// for a join it refuses (`MPTCP_RST_EMPTCP`).
pub const MPTCP_RST_EMPTCP: u8 = 1;

/// MP_TCPRST reason "middlebox interference" (RFC 8684 3.6): a DSS checksum failed.
pub const MPTCP_RST_EMIDDLEBOX: u8 = 6;

/// Whether the connection speaks MPTCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Client that offered MP_CAPABLE and awaits the SYN-ACK.
    Pending,
    /// Both sides speak MPTCP: data goes through DSS mappings over any
    /// subflow.
    Mptcp,
    /// Plain TCP: never offered, refused by the peer, or fallen back.
    Plain,
}

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

/// A DSS mapping we created: `len` bytes at data sequence `dsn` sit at
/// relative subflow sequence `ssn` (1 = first data byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxMap {
    pub ssn: u32,
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

/// A DSS mapping received on a subflow: `len` bytes from relative subflow
/// sequence `ssn` (1 = first data byte, modulo 2^32) carry data sequence
/// `dsn` on. Linux keeps the same in the subflow context (`map_seq`,
/// `map_subflow_seq`, `map_data_len`, `map_csum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxMap {
    pub ssn: Seq,
    pub dsn: DataSeq,
    pub len: u32,
    /// DSS checksum of the mapping, when the peer sent one.
    pub csum: Option<u16>,
    /// The mapping carried the DATA_FIN: its data-level length on the wire,
    /// which the checksum's pseudo-header holds, is `len + 1` (Linux
    /// `map_data_fin`, added back in `validate_data_csum`).
    pub fin: bool,
}

impl RxMap {
    /// The relative subflow sequence just past the mapping.
    pub fn end(&self) -> Seq {
        self.ssn + self.len
    }
    /// The data sequence just past the mapping.
    pub fn dsn_end(&self) -> DataSeq {
        self.dsn + self.len as u64
    }
    /// Whether relative subflow sequence `ssn` lies inside the mapping.
    pub fn contains(&self, ssn: Seq) -> bool {
        ssn - self.ssn < self.len
    }
    /// Whether the two mappings share a subflow byte.
    pub fn overlaps(&self, o: &RxMap) -> bool {
        self.contains(o.ssn) || o.contains(self.ssn)
    }
}

impl TxMap {
    /// Whether relative subflow sequence `ssn` lies inside the mapping (modulo 2^32).
    pub fn contains(&self, ssn: u32) -> bool {
        Seq(ssn) - Seq(self.ssn) < self.len
    }
}

/// MPTCP state of one subflow.
#[derive(Debug)]
pub(crate) struct SubflowExt {
    pub join: JoinState,
    pub local_id: u8,
    pub remote_id: u8,
    pub backup: bool,
    pub tx_maps: VecDeque<TxMap>,
    /// The receive mapping the subflow's next bytes are read under (Linux
    /// keeps exactly one per subflow).
    pub rx_map: Option<RxMap>,
    /// Mappings that came with data beyond the current mapping (on
    /// out-of-order segments, or on a segment that starts inside the current
    /// mapping): Linux keeps them on the skb that carried them until that
    /// skb reaches the head of the queue. In subflow sequence order, never
    /// overlapping, all inside the subflow's receive window.
    pub rx_ahead: VecDeque<RxMap>,
    /// (relative ssn, data sequence) just past the last mapping taken:
    /// where an infinite mapping continues after a fallback.
    pub rx_last_end: Option<(Seq, DataSeq)>,
    /// Where the infinite mapping starts after a fallback (relative ssn and
    /// its data sequence): a mapping the peer still sends must agree with it
    /// (see [`Connection::contradicts_infinite`]).
    pub rx_infinite_at: Option<(Seq, DataSeq)>,
    /// Relative ssn and payload length of the segment being processed (the
    /// one whose options are read).
    pub rx_seg: (Seq, u32),
    pub stale: bool,
    /// Accepted segments in a row that acknowledged new data without any
    /// MPTCP option: the evidence a sender has that a middlebox strips its
    /// peer's options (one forged ACK is not enough to fall back).
    pub optless_acks: u8,
    /// Data sequence up to which this subflow's data was reinjected
    /// elsewhere; `None` before its first reinjection.
    pub reinjected_to: Option<DataSeq>,
    /// Resend the MP_JOIN third ACK at this time if the fourth has not come.
    pub join_ack_retx: Option<Instant>,
    /// A scheduler policy flagged this subflow for a cwnd halving; applied in
    /// its own push path (`true`: halve ssthresh unconditionally, mptcp-org style).
    pub penalty: Option<bool>,
    /// Halvings applied to this subflow.
    pub penalized: u64,
    /// MP_TCPRST reason to put on our RST (RFC 8684 3.6).
    pub rst_reason: Option<u8>,
    /// Put MP_FASTCLOSE on our RST.
    pub fastclose: bool,
    /// MP_FAIL to send (RFC 8684 3.7): the data sequence number of the
    /// mapping whose checksum failed, on the next ACK of the only subflow
    /// (which then falls back) or on the RST with MP_TCPRST.
    pub mp_fail: Option<DataSeq>,
    /// The peer's MP_FAIL made us fall back and the infinite mapping (a DSS
    /// with data-level length 0, RFC 8684 3.7; Linux `send_infinite_map`)
    /// that tells the peer where the subflow's bytes continue the data
    /// sequence is not out yet: the first new data segment takes it.
    pub infinite_map_due: bool,
    /// Where our infinite mapping went (relative ssn, DSN): repeated on
    /// every copy of the segment that starts there.
    pub infinite_map_at: Option<(u32, u64)>,
    /// MP_PRIO to send on the next pure ACK.
    pub prio_pending: Option<bool>,
    /// (DATA_ACK, window edge) last sent on this subflow, and mappings sent
    /// since without it: unchanged acknowledgement information is left off
    /// data segments to give their payload the 8 bytes.
    pub last_ack_sent: Option<(DataSeq, DataSeq)>,
    pub maps_without_ack: u32,
}

impl SubflowExt {
    fn new(join: JoinState, local_id: u8, remote_id: u8, backup: bool) -> Self {
        SubflowExt {
            join,
            local_id,
            remote_id,
            backup,
            tx_maps: VecDeque::new(),
            rx_map: None,
            rx_ahead: VecDeque::new(),
            rx_last_end: None,
            rx_infinite_at: None,
            rx_seg: (Seq(0), 0),
            stale: false,
            optless_acks: 0,
            reinjected_to: None,
            join_ack_retx: None,
            penalty: None,
            penalized: 0,
            rst_reason: None,
            fastclose: false,
            mp_fail: None,
            infinite_map_due: false,
            infinite_map_at: None,
            prio_pending: None,
            last_ack_sent: None,
            maps_without_ack: 0,
        }
    }
}

/// An announcement we owe the peer, or an echo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AddrAnnounce {
    pub id: u8,
    pub addr: IpAddr,
    pub port: Option<u16>,
    pub echo: bool,
    /// Next (re)transmission.
    pub at: Instant,
    /// Transmissions so far: the first and at most `ADD_ADDR_RETRANS_MAX`
    /// retransmissions, as Linux.
    pub sent: u8,
}

/// Connection-level state read by the per-segment option hook.
#[derive(Debug)]
pub(crate) struct Shared {
    pub mode: Mode,
    /// The connection fell back to TCP mid-stream (options stripped): the
    /// single subflow's byte stream continues the data sequence space as an
    /// infinite mapping (RFC 8684 3.7); no MPTCP option is sent any more.
    pub infinite: bool,
    /// A fallback is still possible (Linux `allow_infinite_fallback`): no
    /// data-level retransmission or window probe went onto a subflow. Such
    /// a copy sits in the subflow's byte stream after the original, so once
    /// that stream is read as the data stream it would be delivered twice:
    /// from then on what would fall back resets the subflow instead.
    pub allow_infinite_fallback: bool,
    /// We ask for DSS checksums.
    pub csum_request: bool,
    /// DSS checksums are in use (either side asked).
    pub csum: bool,
    pub server: bool,
    pub local_key: u64,
    pub remote_key: Option<u64>,
    pub fully_established: bool,
    /// First DSN of our data (IDSN + 1).
    pub tx_base: DataSeq,
    pub snd_una: DataSeq,
    pub snd_nxt: DataSeq,
    pub write_seq: DataSeq,
    pub wnd_end: DataSeq,
    pub data_fin_seq: Option<DataSeq>,
    pub data_fin_acked: bool,
    /// Send the DATA_FIN (again) on the next pure ACK.
    pub data_fin_due: bool,
    /// We have seen a DATA_ACK in the peer's DSS: it holds our key and is
    /// fully established (Linux `check_fully_established`), so a data
    /// segment may leave an unchanged DATA_ACK off. Until then every DSS
    /// carries one: a Linux peer that is not yet fully established falls
    /// back to TCP on a segment with neither MP_CAPABLE nor a DATA_ACK.
    pub peer_data_ack_seen: bool,
    /// Client: our MP_CAPABLE third ACK (both keys) has gone out at least
    /// once. Until it has, no other form may replace it: a server that gets
    /// a first ACK without MP_CAPABLE falls back (MPCapableFallbackACK).
    pub cap_ack_sent: bool,
    /// The peer set the MP_CAPABLE C flag: no subflow may be opened to its
    /// initial address (RFC 8684 3.1).
    pub peer_no_src_addr: bool,
    /// Retransmission interval of an unechoed ADD_ADDR (`add_addr_timeout`).
    pub add_addr_timeout: Duration,
    /// First DSN of the peer's data (IDSN + 1), once known.
    pub rx_base: Option<DataSeq>,
    pub rcv_nxt: DataSeq,
    pub rcv_wnd_end: DataSeq,
    pub recv_limit: usize,
    pub peer_data_fin: Option<DataSeq>,
    pub peer_data_fin_done: bool,
    pub announce: Vec<AddrAnnounce>,
    pub counters: Counters,
    /// [`MptcpConfig::wrap_early`].
    pub wrap_early: Option<u32>,
}

impl Shared {
    /// The furthest data sequence number data is accepted up to: the
    /// furthest edge announced ([`Shared::rcv_wnd_end`]) plus one more
    /// buffer's worth. A Linux sender overestimates the window it was given:
    /// it adds a subflow's last window to a DATA_ACK that came later on the
    /// same subflow (`ack_update_msk`), keeps that subflow's window when a
    /// duplicate ACK brings a smaller one, and raises a subflow's window to
    /// the connection's (`MPTcpExtSndWndShared`); data past the edge it was
    /// told is common at high rates. Dropping it (as Linux's receiver does,
    /// `MPTcpExtNoDSSInWindow`) leaves it covered by the subflow's ACK but
    /// not by the DATA_ACK, and only the sender's connection-level
    /// retransmission timer, hundreds of milliseconds later, repairs that.
    /// The memory budget ([`crate::buf::mem_budget`] of the buffer, twice
    /// it) still bounds what is held.
    pub fn accept_edge(&self) -> DataSeq {
        self.rcv_wnd_end + self.recv_limit as u64
    }

    /// What relative subflow sequence numbers are offset by (0 but in
    /// tests, see [`MptcpConfig::wrap_early`]).
    pub fn ssn_off(&self) -> u32 {
        self.wrap_early.map_or(0, |n| 0u32.wrapping_sub(n))
    }

    /// The IDSN of `key`'s owner: the low 64 bits of SHA-256 of the key
    /// (RFC 8684 3.1), or in tests a number just before 2^64.
    pub fn idsn(&self, key: u64) -> DataSeq {
        let idsn = crypto::idsn(key);
        DataSeq(match self.wrap_early {
            Some(n) => 0u64.wrapping_sub(2 * n as u64 + idsn % 4096),
            None => idsn,
        })
    }
}

/// One application-visible connection: MPTCP with its subflows, or plain TCP.
pub struct Connection {
    cfg: ConnConfig,
    pub(crate) shared: Shared,
    pub(crate) subflows: Vec<Option<(Subflow, SubflowExt)>>,
    snd_buf: SendBuf,
    rcv_buf: RecvBuf,
    send_limit: usize,
    sched: Box<dyn Scheduler>,
    pm: PmState,
    reinject: VecDeque<(DataSeq, DataSeq)>,
    events: VecDeque<Event>,
    /// Subflows the PM wants opened; the endpoint creates them.
    pub(crate) pending_joins: Vec<JoinRequest>,
    data_fin_rto: Option<Instant>,
    data_fin_backoff: u32,
    /// When our DATA_FIN was first sent: the connection is given up (reset
    /// with MP_FASTCLOSE) if it is not DATA_ACKed within `MPTCP_CLOSE_TIMEOUT`.
    data_fin_first: Option<Instant>,
    /// MPTCP-level zero-window probe timer and its backoff (Linux's msk-level
    /// zero window handling in `mptcp_sendmsg_frag`).
    wnd_probe_at: Option<Instant>,
    wnd_probe_backoff: u32,
    /// The last byte the peer DATA_ACKed: what a zero-window probe carries
    /// (Linux probes with the byte at `snd_una - 1`, a duplicate at the data
    /// level that the subflow still acknowledges).
    last_acked_byte: Option<u8>,
    /// MPTCP-level retransmission timer (Linux `mptcp_retransmit_timer`):
    /// data a subflow acknowledged but the peer never DATA_ACKed is sent
    /// again when it expires.
    rtx_at: Option<Instant>,
    rtx_backoff: u32,
    /// `snd_una` when the retransmission timer was armed.
    rtx_una: DataSeq,
    closed_event_sent: bool,
    /// MP_JOIN SYNs taken in the current one-second window: (window start, count).
    join_window: (Instant, u32),
    /// Connection-level DRS (`mptcp_rcv_space_adjust`), the subflow's type.
    rcvq_space: RcvSpace,
    /// Time of the last input, timer or output call: what application calls
    /// (which carry no time) act at.
    last_now: Instant,
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("mode", &self.shared.mode)
            .field("subflows", &self.subflows.iter().flatten().count())
            .field("snd_una", &self.shared.snd_una)
            .field("rcv_nxt", &self.shared.rcv_nxt)
            .finish()
    }
}

impl Connection {
    fn new(cfg: ConnConfig, mode: Mode, server: bool, local_key: u64, now: Instant) -> Self {
        let wrap_early = cfg.mptcp.wrap_early;
        let recv_limit = cfg.mptcp.recv_buffer.initial();
        let mut c = Connection {
            send_limit: cfg.mptcp.send_buffer.initial(),
            shared: Shared {
                mode,
                infinite: false,
                allow_infinite_fallback: true,
                csum_request: cfg.mptcp.checksum,
                csum: cfg.mptcp.checksum,
                server,
                local_key,
                remote_key: None,
                fully_established: false,
                tx_base: DataSeq(0),
                snd_una: DataSeq(0),
                snd_nxt: DataSeq(0),
                write_seq: DataSeq(0),
                wnd_end: DataSeq(0),
                data_fin_seq: None,
                data_fin_acked: false,
                data_fin_due: false,
                peer_data_ack_seen: false,
                cap_ack_sent: false,
                peer_no_src_addr: false,
                add_addr_timeout: cfg.mptcp.add_addr_timeout,
                rx_base: None,
                rcv_nxt: DataSeq(0),
                rcv_wnd_end: DataSeq(0),
                recv_limit,
                peer_data_fin: None,
                peer_data_fin_done: false,
                announce: Vec::new(),
                counters: Counters::default(),
                wrap_early,
            },
            subflows: Vec::new(),
            snd_buf: SendBuf::new(Seq(0)),
            rcv_buf: RecvBuf::default(),
            sched: new_scheduler(cfg.mptcp.scheduler, cfg.mptcp.penalty),
            pm: PmState::default(),
            reinject: VecDeque::new(),
            events: VecDeque::new(),
            pending_joins: Vec::new(),
            data_fin_rto: None,
            data_fin_backoff: 0,
            data_fin_first: None,
            wnd_probe_at: None,
            wnd_probe_backoff: 0,
            last_acked_byte: None,
            rtx_at: None,
            rtx_backoff: 0,
            rtx_una: DataSeq(0),
            closed_event_sent: false,
            join_window: (now, 0),
            // As the subflow does (Linux starts at TCP_INIT_CWND × advmss).
            rcvq_space: RcvSpace::new(now, RcvSpace::initial_space(rx::DEFAULT_ADVMSS, recv_limit)),
            last_now: now,
            cfg,
        };
        let tx_base = c.shared.idsn(local_key) + 1;
        let sh = &mut c.shared;
        (sh.tx_base, sh.snd_una, sh.snd_nxt, sh.write_seq, sh.wnd_end) = (tx_base, tx_base, tx_base, tx_base, tx_base);
        c.rtx_una = tx_base;
        // The send buffer is indexed by the low 32 bits of the data sequence.
        c.snd_buf = SendBuf::new(Seq(tx_base.0 as u32));
        c
    }

    // ------------------------------------------------------------------
    // Accessors
    // ------------------------------------------------------------------

    /// Whether the connection speaks MPTCP; [`Mode::Plain`] when the peer
    /// refused or a middlebox forced a fallback at the handshake.
    pub fn mode(&self) -> Mode {
        self.shared.mode
    }

    /// Our token (first 32 bits of SHA-256 of our key), in MPTCP mode.
    pub fn local_token(&self) -> Option<u32> {
        (self.shared.mode != Mode::Plain).then(|| crypto::token(self.shared.local_key))
    }

    /// The peer's token, once its key is known (logs and diagnostics: it
    /// names the connection on the peer's side).
    pub fn remote_token(&self) -> Option<u32> {
        self.shared.remote_key.map(crypto::token)
    }

    /// The subflows, by index.
    pub fn subflows(&self) -> impl Iterator<Item = (usize, &Subflow)> {
        self.subflows.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|(sf, _)| (i, sf)))
    }

    /// Subflow `i`, `None` once it closed (a later subflow may take the
    /// index once it is free).
    pub fn subflow(&self, i: usize) -> Option<&Subflow> {
        self.subflows.get(i).and_then(|s| s.as_ref()).map(|(sf, _)| sf)
    }

    /// (local, remote) of the initial subflow.
    pub fn addresses(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.subflows.first().and_then(|s| s.as_ref()).map(|(sf, _)| (sf.local(), sf.remote()))
    }

    /// Replaces the scheduler (per-connection policy).
    pub fn set_scheduler(&mut self, s: Box<dyn Scheduler>) {
        self.sched = s;
    }

    /// Marks subflow `id` backup (or not) and tells the peer with MP_PRIO.
    pub fn set_backup(&mut self, id: usize, backup: bool) -> bool {
        let Some((sf, ext)) = self.subflows.get_mut(id).and_then(|s| s.as_mut()) else { return false };
        ext.backup = backup;
        if self.shared.mode == Mode::Mptcp {
            ext.prio_pending = Some(backup);
            sf.request_ack();
        }
        true
    }

    /// The next connection-level event (connected, peer closed, reset,
    /// closed). Subflow events are digested here: the application sees one
    /// stream, not its subflows coming and going.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn plain(&self) -> bool {
        self.shared.mode == Mode::Plain
    }

    fn initial(&mut self) -> Option<&mut Subflow> {
        self.subflows.first_mut().and_then(|s| s.as_mut()).map(|(sf, _)| sf)
    }

    // ------------------------------------------------------------------
    // Input
    // ------------------------------------------------------------------

    /// A segment for subflow `idx`, in the order Linux takes its steps: the
    /// subflow's own TCP validation and processing first, and only if the
    /// segment was acceptable the handshake options, the fallback check, the
    /// other MPTCP options one by one, and the connection-level consequences
    /// (Linux acts on MPTCP options only after `tcp_validate_incoming`). A
    /// segment the MPTCP layer rejects (bad HMAC, wrong mapping) resets the
    /// subflow; the caller learns of it through the subflow's events.
    pub(crate) fn handle_segment(
        &mut self,
        now: Instant,
        idx: usize,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        packet: Option<&bytes::Bytes>,
    ) {
        self.last_now = self.last_now.max(now);
        let single_subflow = self.subflows.iter().flatten().count() == 1;
        let ofo_empty = self.rcv_buf.ofo_is_empty();
        if self.subflows.get(idx).and_then(|s| s.as_ref()).is_none() {
            return;
        }
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let una_before = sf.snd_una();
        // The peer's sender shares the window across subflows (Linux raises a
        // subflow's snd_wnd to the connection's): data on this subflow may
        // reach past the edge it announced itself, up to the connection's.
        // After a fallback the subflow's own window is the limit again.
        let shared = self.shared.mode == Mode::Mptcp && !self.shared.infinite;
        sf.set_conn_rcv_window(if shared { self.shared.accept_edge().saturating_sub(self.shared.rcv_nxt) } else { 0 });
        let verdict = sf.handle_segment_in(now, hdr, opts, payload, packet);
        let acked_new = sf.snd_una().gt(una_before);
        let wnd = (hdr.window as u64) << sf.snd_wscale();
        // Relative ssn of the payload's first byte (a SYN takes one number).
        let irs = sf.irs() - self.shared.ssn_off();
        ext.rx_seg = (Seq(hdr.seq) + hdr.flags.syn() as u32 - irs.0, payload.len() as u32);
        match verdict {
            Verdict::Accepted => {
                if self.handshake_input(now, idx, hdr, opts).is_break() {
                    return;
                }
                // A SYN's options are the handshake's and nothing else: a
                // SYN taken as a simultaneous open on a join subflow (any
                // sequence number will do) must not move connection state.
                if hdr.flags.syn() {
                    self.after_input(now, idx);
                    return;
                }
                self.detect_fallback(idx, hdr, opts, payload, (single_subflow, ofo_empty, acked_new));
                if self.shared.mode == Mode::Mptcp && self.incoming_options(now, idx, opts, wnd).is_break() {
                    return;
                }
            }
            // An acceptable RST ends the subflow; of its options only the
            // reason (MP_TCPRST) and a keyed MP_FASTCLOSE still mean anything.
            Verdict::Reset => {
                if self.shared.mode == Mode::Mptcp && self.reset_options(opts).is_break() {
                    return;
                }
            }
            Verdict::Dropped => self.shared.counters.mptun_mp_opts_unacceptable += !opts.mptcp.is_empty() as u64,
        }
        self.after_input(now, idx);
    }

    /// Moves what the subflow delivered into the connection, then reacts.
    fn after_input(&mut self, now: Instant, idx: usize) {
        if self.shared.mode == Mode::Mptcp {
            self.drain_subflow(now, idx);
        }
        self.on_subflow_events(idx);
        self.progress(now);
    }

    fn on_subflow_events(&mut self, idx: usize) {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        if self.shared.mode == Mode::Mptcp && sf.rst_pending() {
            // A subflow reset by the MPTCP layer (a bad mapping or checksum
            // found while draining) is reaped only once its RST left with
            // MP_TCPRST (and MP_FAIL): poll_transmit comes back here.
            return;
        }
        let mut failed = false;
        let mut fallback_fin = false;
        while let Some(ev) = sf.poll_event() {
            match (self.shared.mode, ev, ext.join) {
                // Until the SYN-ACK decides, the initial subflow's fate is the connection's.
                (Mode::Plain | Mode::Pending, e, _) => self.events.push_back(e),
                (_, Event::Connected, JoinState::Initial) => self.events.push_back(Event::Connected),
                (_, Event::Connected, _) => {}
                // After a fallback the subflow's FIN is the DATA_FIN, if
                // the stream is whole up to it (checked below).
                (_, Event::PeerFin, _) if self.shared.infinite => fallback_fin = true,
                (_, Event::PeerFin, _) => {
                    // The peer closed this subflow: close ours too.
                    sf.close();
                }
                (_, Event::Reset | Event::TimedOut, _) => failed = true,
                (_, Event::Closed, _) => failed = true,
            }
        }
        if fallback_fin && !self.shared.peer_data_fin_done {
            if self.fallback_fin_in_order(idx) {
                self.shared.peer_data_fin_done = true;
                self.events.push_back(Event::PeerFin);
            } else {
                // Bytes the subflow acknowledged cannot be delivered in
                // order: fail loudly rather than end the stream short.
                for (sf, _) in self.subflows.iter_mut().flatten() {
                    sf.abort();
                }
                failed = true;
            }
        }
        if failed && self.shared.mode == Mode::Mptcp {
            self.reinject_from(idx);
            if let Some((sf, _)) = self.subflows[idx].take() {
                // Keep what the subflow counted.
                self.shared.counters.add(&sf.counters());
                // The slot may be reused: nothing of this subflow may stay
                // attached to its index.
                self.sched.forget(idx);
            }
            if self.subflows.iter().flatten().next().is_none() && !self.closed_event_sent {
                self.closed_event_sent = true;
                let done = self.shared.data_fin_acked && self.shared.peer_data_fin_done;
                self.events.push_back(if done { Event::Closed } else { Event::Reset });
            }
        }
    }

    /// [`Connection::progress`] at the time of the last driver call.
    pub(crate) fn progress_now(&mut self) {
        self.progress(self.last_now);
    }

    pub(crate) fn last_now(&self) -> Instant {
        self.last_now
    }

    /// The driver's clock reached `now` for this connection (what an
    /// application call that carries no time acts at).
    pub(crate) fn saw(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
    }

    /// Housekeeping after any input, timer or application call, in order:
    /// what a fallback acknowledged, releasing acknowledged data, send
    /// buffer growth, stale detection, PM decisions, pushing data, DATA_FIN,
    /// closing.
    pub(crate) fn progress(&mut self, now: Instant) {
        if self.shared.mode != Mode::Mptcp {
            return;
        }
        if self.shared.infinite {
            self.fallback_una();
        }
        self.release_acked();
        self.grow_send_buffer();
        self.detect_stale();
        self.pm_progress(now);
        self.push_pending();
        self.window_probe(now);
        self.retransmit_timer(now);
        self.data_fin_progress(now);
        self.close_when_done();
    }

    // ------------------------------------------------------------------
    // Timers and output
    // ------------------------------------------------------------------

    /// The earliest timer of the connection (subflow timers, MP_JOIN third
    /// ACK, DATA_FIN and ADD_ADDR retransmission): when the driver must call
    /// in again even without input.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = None;
        for (sf, ext) in self.subflows.iter().flatten() {
            t = Instant::min_opt(t, sf.poll_timeout());
            t = Instant::min_opt(t, ext.join_ack_retx);
        }
        t = Instant::min_opt(t, self.data_fin_rto);
        t = Instant::min_opt(t, self.wnd_probe_at);
        t = Instant::min_opt(t, self.rtx_at);
        for a in &self.shared.announce {
            t = Instant::min_opt(t, Some(a.at));
        }
        t
    }

    /// An ICMP "fragmentation needed" / "packet too big" about subflow
    /// `idx` quoting sequence number `seq` (see [`Subflow::handle_too_big`]):
    /// only that subflow's MSS comes down.
    pub(crate) fn handle_too_big(&mut self, now: Instant, idx: usize, seq: Seq, mtu: u32) {
        self.last_now = self.last_now.max(now);
        let Some((sf, _)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        if sf.handle_too_big(now, seq, mtu) {
            self.progress(now);
        }
    }

    /// The MTU of the device subflow `idx` leaves by (see
    /// [`Subflow::set_device_mtu`]); called by the endpoint as it creates it.
    pub(crate) fn set_device_mtu(&mut self, idx: usize, mtu: u32) {
        if let Some((sf, _)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) {
            sf.set_device_mtu(mtu);
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
        for i in 0..self.subflows.len() {
            let Some((sf, ext)) = self.subflows[i].as_mut() else { continue };
            if sf.poll_timeout().is_some_and(|t| t <= now) {
                sf.handle_timeout(now);
            }
            Self::join_ack_retransmit(sf, ext, now);
            self.on_subflow_events(i);
        }
        self.progress(now);
    }

    /// Next packet of any subflow; `start` rotates fairness.
    pub(crate) fn poll_transmit(&mut self, now: Instant, out: &mut [u8], start: usize) -> Option<(usize, Transmit)> {
        self.last_now = self.last_now.max(now);
        let n = self.subflows.len();
        for k in 0..n {
            let i = (start + k) % n;
            let Some((sf, ext)) = self.subflows[i].as_mut() else { continue };
            let t = if self.shared.mode == Mode::Plain {
                sf.poll_transmit(now, &mut (), out)
            } else {
                Self::apply_penalty(sf, ext, &mut self.shared.counters);
                let iss = sf.iss() - self.shared.ssn_off();
                let next_ssn = (sf.snd_nxt() - iss.0).0;
                let cap_before = self.shared.cap_ack_sent;
                let mut hook = Hook { sh: &mut self.shared, ext, now, iss, next_ssn, recv_window: 0 };
                hook.recv_window =
                    hook.sh.recv_limit.saturating_sub(self.rcv_buf.ready_len() + self.rcv_buf.ofo_len()) as u64;
                let before = sf.snd_nxt();
                let t = sf.poll_transmit(now, &mut hook, out);
                // A data segment (or the third ACK, which must carry
                // MP_CAPABLE) took the pure ACK that was asked for to carry a
                // due DATA_FIN: ask again, so that it leaves right after
                // instead of a retransmission timeout later.
                let took_the_ack = sf.snd_nxt() != before || (!cap_before && self.shared.cap_ack_sent);
                if self.shared.data_fin_due && took_the_ack {
                    sf.request_ack();
                }
                t
            };
            if let Some(t) = t {
                self.on_subflow_events(i);
                return Some((i, t));
            }
            self.on_subflow_events(i);
        }
        None
    }
}

#[cfg(test)]
mod tests;
