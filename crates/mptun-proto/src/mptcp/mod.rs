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

mod hook;

use crate::buf::{RecvBuf, SendBuf};
use crate::counters::Counters;
use crate::pm::{JoinRequest, PmConfig, PmState};
use crate::sched::{new_scheduler, ConnView, PenaltyConfig, Policy, Scheduler, SubflowView};
use crate::seq::Seq;
use crate::tcp::{BufferSize, Event, State, Subflow, TcpConfig, Transmit};
use bytes::Bytes;
use hook::Hook;
use mptun_time::{Duration, Instant};
use mptun_wire::mptcp::{DataAck, DssMapping};
use mptun_wire::{crypto, MptcpOption, TcpHeader};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// MP_TCPRST reason "MPTCP-specific error" (RFC 8684 3.6), what Linux sends
/// for a join it refuses (`MPTCP_RST_EMPTCP`).
pub const MPTCP_RST_EMPTCP: u8 = 1;

/// MP_TCPRST reason "middlebox interference" (RFC 8684 3.6): a DSS checksum failed.
pub const MPTCP_RST_EMIDDLEBOX: u8 = 6;

/// The DSS checksum (RFC 8684 3.3.1): ones' complement of the sum of a
/// pseudo-header (64-bit DSN, 32-bit relative subflow sequence, 16-bit
/// data-level length, 16 zero bits) and the mapping's payload.
pub fn dss_checksum(dsn: u64, ssn: u32, len: u16, payload: &[u8]) -> u16 {
    let mut ph = [0u8; 16];
    ph[..8].copy_from_slice(&dsn.to_be_bytes());
    ph[8..12].copy_from_slice(&ssn.to_be_bytes());
    ph[12..14].copy_from_slice(&len.to_be_bytes());
    let mut acc = mptun_wire::checksum::sum(&ph) as u32 + mptun_wire::checksum::sum(payload) as u32;
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Connection-level MPTCP settings.
#[derive(Clone, Debug)]
pub struct MptcpConfig {
    /// Offer MP_CAPABLE on connect and accept it on listen (`net.mptcp.enabled`).
    pub enabled: bool,
    pub pm: PmConfig,
    /// Connection send buffer (the msk's `SO_SNDBUF`).
    pub send_buffer: BufferSize,
    /// Connection receive buffer (the msk's `SO_RCVBUF`): the shared window.
    pub recv_buffer: BufferSize,
    /// Consecutive RTOs after which a subflow is stale: the scheduler avoids
    /// it and its unacknowledged data is reinjected elsewhere.
    pub stale_rto_streak: u32,
    /// Retransmission interval of an unechoed ADD_ADDR (`net.mptcp.add_addr_timeout`).
    pub add_addr_timeout: Duration,
    /// Ask for DSS checksums (`net.mptcp.checksum_enabled`, the MP_CAPABLE A
    /// flag). They are used when either side asks.
    pub checksum: bool,
    /// Scheduler policy (`default`, `penalise`, `penalise-guarded`, `mptcp-org`).
    pub scheduler: Policy,
    pub penalty: PenaltyConfig,
}

impl Default for MptcpConfig {
    fn default() -> Self {
        MptcpConfig {
            enabled: true,
            pm: PmConfig::default(),
            send_buffer: BufferSize::Auto { initial: 64 * 1024, max: 4 * 1024 * 1024 },
            // Twice Linux's tcp_rmem[1]: the connection's window must hold what
            // the fast path delivers while the slow one's data is in flight
            // from the first round trips on; with 128 KiB the `aggregate`
            // scenario starves early (efficiency 0.879 vs 0.936) although DRS
            // catches up within ~1.3 s. DRS grows it from there as Linux does.
            recv_buffer: BufferSize::Auto { initial: 256 * 1024, max: 6 * 1024 * 1024 },
            stale_rto_streak: 2,
            add_addr_timeout: Duration::from_secs(120),
            checksum: false,
            scheduler: Policy::Default,
            penalty: PenaltyConfig::default(),
        }
    }
}

/// Everything a connection needs to know about how to behave.
#[derive(Clone, Debug, Default)]
pub struct ConnConfig {
    /// Per-subflow TCP settings.
    pub tcp: TcpConfig,
    pub mptcp: MptcpConfig,
}

/// Whether the connection speaks MPTCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Client that offered MP_CAPABLE and awaits the SYN-ACK.
    Pending,
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
    pub dsn: u64,
    pub len: u32,
    /// DSS checksum of the mapping (computed only when checksums are on).
    pub csum: u16,
    /// Whether this mapping's segments carry the DATA_ACK, decided at its
    /// first segment so that all its segments have identical options (TSO
    /// on a TUN merges only byte-identical headers) and a retransmission
    /// fits the size the original was cut to.
    pub with_ack: Option<bool>,
}

/// MPTCP state of one subflow.
#[derive(Debug)]
pub(crate) struct SubflowExt {
    pub join: JoinState,
    pub local_id: u8,
    pub remote_id: u8,
    pub backup: bool,
    pub tx_maps: VecDeque<TxMap>,
    /// Received mappings: relative ssn → (dsn, len, DSS checksum).
    pub rx_maps: BTreeMap<u32, (u64, u32, Option<u16>)>,
    pub stale: bool,
    /// Data sequence up to which this subflow's data was reinjected elsewhere.
    pub reinjected_to: u64,
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
    /// MP_PRIO to send on the next pure ACK.
    pub prio_pending: Option<bool>,
    /// (DATA_ACK, window edge) last sent on this subflow, and mappings sent
    /// since without it: unchanged acknowledgement information is left off
    /// data segments to give their payload the 8 bytes.
    pub last_ack_sent: Option<(u64, u64)>,
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
            rx_maps: BTreeMap::new(),
            stale: false,
            reinjected_to: 0,
            join_ack_retx: None,
            penalty: None,
            penalized: 0,
            rst_reason: None,
            fastclose: false,
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
}

/// Connection-level state read by the per-segment option hook.
#[derive(Debug)]
pub(crate) struct Shared {
    pub mode: Mode,
    /// The connection fell back to TCP mid-stream (options stripped): the
    /// single subflow's byte stream continues the data sequence space as an
    /// infinite mapping (RFC 8684 3.7); no MPTCP option is sent any more.
    pub infinite: bool,
    /// We ask for DSS checksums.
    pub csum_request: bool,
    /// DSS checksums are in use (either side asked).
    pub csum: bool,
    pub server: bool,
    pub local_key: u64,
    pub remote_key: Option<u64>,
    pub fully_established: bool,
    /// First DSN of our data (IDSN + 1).
    pub tx_base: u64,
    pub snd_una: u64,
    pub snd_nxt: u64,
    pub write_seq: u64,
    pub wnd_end: u64,
    pub data_fin_seq: Option<u64>,
    pub data_fin_acked: bool,
    /// Send the DATA_FIN (again) on the next pure ACK.
    pub data_fin_due: bool,
    /// First DSN of the peer's data (IDSN + 1), once known.
    pub rx_base: Option<u64>,
    pub rcv_nxt: u64,
    pub rcv_wnd_end: u64,
    pub recv_limit: usize,
    pub peer_data_fin: Option<u64>,
    pub peer_data_fin_done: bool,
    pub announce: Vec<AddrAnnounce>,
    pub counters: Counters,
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
    reinject: VecDeque<(u64, u64)>,
    events: VecDeque<Event>,
    /// Subflows the PM wants opened; the endpoint creates them.
    pub(crate) pending_joins: Vec<JoinRequest>,
    data_fin_rto: Option<Instant>,
    data_fin_backoff: u32,
    closed_event_sent: bool,
    rcvq_copied_at: u64,
    rcvq_space: usize,
    rcvq_time: Instant,
    app_read: u64,
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

/// A snapshot like Linux's `MPTCP_INFO` plus per-subflow `TCP_INFO`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionInfo {
    pub mode: Mode,
    pub fully_established: bool,
    pub local_token: Option<u32>,
    pub remote_token: Option<u32>,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub subflows: Vec<SubflowInfo>,
}

/// One subflow in [`ConnectionInfo`].
#[derive(Clone, Debug, PartialEq)]
pub struct SubflowInfo {
    pub id: usize,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub backup: bool,
    pub stale: bool,
    pub joined: bool,
    pub tcp: crate::tcp::TcpInfo,
    /// Scheduler's `avg_pacing_rate`, bytes/s.
    pub avg_pacing_rate: Option<u64>,
    /// Slow-subflow cwnd halvings applied to it.
    pub penalized: u64,
}

/// 32-bit DSN or data-ACK expansion against a 64-bit reference (RFC 8684 3.3.1).
fn expand32(v: u64, reference: u64) -> u64 {
    let low = v & 0xffff_ffff;
    let cand = (reference & !0xffff_ffff) | low;
    // Pick the candidate closest to the reference.
    [cand.wrapping_sub(1 << 32), cand, cand.wrapping_add(1 << 32)]
        .into_iter()
        .min_by_key(|c| c.abs_diff(reference))
        .expect("three candidates")
}

impl Connection {
    fn new(cfg: ConnConfig, mode: Mode, server: bool, local_key: u64, now: Instant) -> Self {
        let tx_base = crypto::idsn(local_key).wrapping_add(1);
        let recv_limit = cfg.mptcp.recv_buffer.initial();
        Connection {
            send_limit: cfg.mptcp.send_buffer.initial(),
            shared: Shared {
                mode,
                infinite: false,
                csum_request: cfg.mptcp.checksum,
                csum: cfg.mptcp.checksum,
                server,
                local_key,
                remote_key: None,
                fully_established: false,
                tx_base,
                snd_una: tx_base,
                snd_nxt: tx_base,
                write_seq: tx_base,
                wnd_end: tx_base,
                data_fin_seq: None,
                data_fin_acked: false,
                data_fin_due: false,
                rx_base: None,
                rcv_nxt: 0,
                rcv_wnd_end: 0,
                recv_limit,
                peer_data_fin: None,
                peer_data_fin_done: false,
                announce: Vec::new(),
                counters: Counters::default(),
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
            closed_event_sent: false,
            rcvq_copied_at: 0,
            // As the subflow does (Linux starts at TCP_INIT_CWND × advmss).
            rcvq_space: (10 * 1448usize).min(recv_limit),
            rcvq_time: now,
            app_read: 0,
            last_now: now,
            cfg,
        }
    }

    fn subflow_cfg(cfg: &ConnConfig, mptcp: bool) -> TcpConfig {
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
        opts: &mptun_wire::tcp::OptionSummary,
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
        // Checksums are on if the client asked (A flag) or we do.
        c.shared.csum |= mptcp
            && opts.mptcp.iter().any(
                |o| matches!(o, MptcpOption::MpCapable { flags, .. } if flags & mptun_wire::mptcp::cap_flags::CHECKSUM != 0),
            );
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
        opts: &mptun_wire::tcp::OptionSummary,
        (backup, addr_id, peer_nonce): (bool, u8, u32),
        nonce: u32,
        iss: u32,
        ts_offset: u32,
    ) -> Option<usize> {
        let live = self.subflows.iter().flatten().count();
        if live > self.cfg.mptcp.pm.max_subflows as usize || !self.shared.fully_established {
            return None;
        }
        self.shared.counters.mptcp_mp_join_syn_rx += 1;
        let sfcfg = Self::subflow_cfg(&self.cfg, true);
        let sf = Subflow::accept(now, sfcfg, local, remote, syn, opts, iss, ts_offset);
        let ext = SubflowExt::new(JoinState::ServerSynRcvd { nonce, peer_nonce }, 0, addr_id, backup);
        self.subflows.push(Some((sf, ext)));
        Some(self.subflows.len() - 1)
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
        self.subflows.push(Some((sf, ext)));
        self.subflows.len() - 1
    }

    // ------------------------------------------------------------------
    // Accessors
    // ------------------------------------------------------------------

    pub fn mode(&self) -> Mode {
        self.shared.mode
    }

    /// Our token (first 32 bits of SHA-256 of our key), in MPTCP mode.
    pub fn local_token(&self) -> Option<u32> {
        (self.shared.mode != Mode::Plain).then(|| crypto::token(self.shared.local_key))
    }

    pub fn remote_token(&self) -> Option<u32> {
        self.shared.remote_key.map(crypto::token)
    }

    /// The subflows, by index.
    pub fn subflows(&self) -> impl Iterator<Item = (usize, &Subflow)> {
        self.subflows.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|(sf, _)| (i, sf)))
    }

    pub fn subflow(&self, i: usize) -> Option<&Subflow> {
        self.subflows.get(i).and_then(|s| s.as_ref()).map(|(sf, _)| sf)
    }

    /// (local, remote) of the initial subflow.
    pub fn addresses(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.subflows.first().and_then(|s| s.as_ref()).map(|(sf, _)| (sf.local(), sf.remote()))
    }

    /// Counters of the connection and all its subflows.
    pub fn counters(&self) -> Counters {
        let mut c = self.shared.counters;
        for (sf, _) in self.subflows.iter().flatten() {
            c.add(&sf.counters());
        }
        c
    }

    pub fn info(&self) -> ConnectionInfo {
        ConnectionInfo {
            mode: self.shared.mode,
            fully_established: self.shared.fully_established,
            local_token: self.local_token(),
            remote_token: self.remote_token(),
            bytes_acked: self.shared.snd_una - self.shared.tx_base,
            bytes_received: self.rcv_buf.next(),
            subflows: self
                .subflows
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
                .map(|(i, (sf, ext))| SubflowInfo {
                    id: i,
                    local: sf.local(),
                    remote: sf.remote(),
                    backup: ext.backup,
                    stale: ext.stale,
                    joined: matches!(ext.join, JoinState::Joined | JoinState::Initial),
                    tcp: sf.info(),
                    avg_pacing_rate: self.sched.avg_pacing_rate(i),
                    penalized: ext.penalized,
                })
                .collect(),
        }
    }

    /// Internal state for debugging a stuck connection.
    pub fn debug_state(&self) -> String {
        let maps: Vec<_> = self
            .subflows
            .iter()
            .flatten()
            .map(|(sf, e)| {
                format!(
                    "join={:?} stale={} tx_maps={} rx_maps={:?} queued={} recv_ready={} recv_off={}",
                    e.join,
                    e.stale,
                    e.tx_maps.len(),
                    e.rx_maps.iter().take(4).collect::<Vec<_>>(),
                    sf.send_queued(),
                    sf.recv_ready(),
                    sf.recv_offset()
                )
            })
            .collect();
        format!(
            "snd_una={} snd_nxt={} write_seq={} wnd_end={} rcv_nxt={} rx_base={:?} ofo={} ready={} recv_limit={} send_limit={} reinject={:?} fin={:?}/{} peer_fin={:?} {:?}",
            self.shared.snd_una - self.shared.tx_base,
            self.shared.snd_nxt - self.shared.tx_base,
            self.shared.write_seq - self.shared.tx_base,
            self.shared.wnd_end.saturating_sub(self.shared.tx_base),
            self.shared.rcv_nxt.wrapping_sub(self.shared.rx_base.unwrap_or(0)),
            self.shared.rx_base.is_some(),
            self.rcv_buf.ofo_len(),
            self.rcv_buf.ready_len(),
            self.shared.recv_limit,
            self.send_limit,
            self.reinject,
            self.shared.data_fin_seq.map(|f| f - self.shared.tx_base),
            self.shared.data_fin_acked,
            self.shared.peer_data_fin,
            maps
        )
    }

    /// Replaces the scheduler (per-connection policy).
    pub fn set_scheduler(&mut self, s: Box<dyn Scheduler>) {
        self.sched = s;
    }

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
    // Stream interface
    // ------------------------------------------------------------------

    pub fn send_space(&self) -> usize {
        if self.plain() {
            return self.subflow(0).map_or(0, |s| s.send_space());
        }
        // Until the SYN-ACK tells whether the peer speaks MPTCP, data has no
        // home: it would go to the connection if MPTCP, to the subflow if not.
        if self.shared.mode == Mode::Pending
            || self.shared.data_fin_seq.is_some()
            || self.subflows.iter().flatten().next().is_none()
        {
            return 0;
        }
        self.send_limit.saturating_sub(self.snd_buf.len())
    }

    pub fn send(&mut self, data: &[u8]) -> usize {
        if self.plain() {
            return self.initial().map_or(0, |s| s.send(data));
        }
        let n = data.len().min(self.send_space());
        if n > 0 {
            self.snd_buf.push(Bytes::copy_from_slice(&data[..n]));
            self.shared.write_seq += n as u64;
            self.progress(self.last_now);
        }
        n
    }

    pub fn recv_ready(&self) -> usize {
        if self.plain() {
            return self.subflow(0).map_or(0, |s| s.recv_ready());
        }
        self.rcv_buf.ready_len()
    }

    pub fn recv(&mut self, now: Instant, out: &mut [u8]) -> usize {
        if self.plain() {
            return self.initial().map_or(0, |s| s.recv(now, out));
        }
        let n = self.rcv_buf.read(out);
        if n > 0 {
            self.app_read += n as u64;
            self.rcv_space_adjust(now);
            self.maybe_window_update();
        }
        n
    }

    pub fn recv_finished(&self) -> bool {
        if self.plain() {
            return self.subflow(0).is_none_or(|s| s.recv_finished() || s.is_closed());
        }
        self.shared.peer_data_fin_done && self.rcv_buf.ready_len() == 0
    }

    /// `TCP_NODELAY` for every subflow, present and future.
    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.cfg.tcp.nagle = !nodelay;
        for (sf, _) in self.subflows.iter_mut().flatten() {
            sf.set_nagle(!nodelay);
        }
    }

    pub fn nodelay(&self) -> bool {
        !self.cfg.tcp.nagle
    }

    /// Orderly close: DATA_FIN after the queued data (FIN in plain mode).
    pub fn close(&mut self) {
        if self.plain() || self.shared.mode == Mode::Pending {
            if let Some(sf) = self.initial() {
                sf.close();
            }
            return;
        }
        if self.shared.data_fin_seq.is_none() {
            self.shared.data_fin_seq = Some(self.shared.write_seq);
            self.progress(self.last_now);
        }
    }

    /// Abortive close. In MPTCP mode every subflow's RST carries
    /// MP_FASTCLOSE with the peer's key (RFC 8684 3.5), so the peer tears
    /// the whole connection down at once, not subflow by subflow.
    pub fn abort(&mut self) {
        let fastclose = self.shared.mode == Mode::Mptcp && self.shared.remote_key.is_some();
        for (sf, ext) in self.subflows.iter_mut().flatten() {
            ext.fastclose = fastclose;
            sf.abort();
        }
        if fastclose {
            self.shared.counters.mptcp_mp_fastclose_tx += 1;
        }
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

    pub fn is_established(&self) -> bool {
        match self.shared.mode {
            Mode::Plain => self.subflow(0).is_some_and(|s| s.state().is_synchronized() && !s.is_closed()),
            Mode::Pending => false,
            Mode::Mptcp => self.subflows.iter().flatten().any(|(s, _)| s.state().is_synchronized()),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.subflows.iter().flatten().all(|(s, _)| s.is_closed())
    }

    /// Linux DRS at the connection level (`mptcp_rcv_space_adjust`).
    fn rcv_space_adjust(&mut self, now: Instant) {
        let BufferSize::Auto { max, .. } = self.cfg.mptcp.recv_buffer else { return };
        // Linux mptcp_rcv_space_adjust: the largest subflow RTT, so the window
        // covers what the fast path delivers while the slow one catches up.
        let rtt = self.subflows.iter().flatten().filter_map(|(s, _)| s.rcv_rtt().or(s.srtt())).max();
        let Some(rtt) = rtt else { return };
        if now - self.rcvq_time < rtt {
            return;
        }
        let copied = (self.app_read - self.rcvq_copied_at) as usize;
        if copied > self.rcvq_space {
            let mss = self.subflow(0).map_or(1448, |s| s.mss(0) as usize);
            let mut rcvwin = 2 * copied + 16 * mss;
            let grow = rcvwin * (copied - self.rcvq_space) / self.rcvq_space.max(1);
            rcvwin += 2 * grow;
            self.shared.recv_limit = self.shared.recv_limit.max(rcvwin.min(max));
            self.rcvq_space = copied;
        }
        self.rcvq_copied_at = self.app_read;
        self.rcvq_time = now;
    }

    fn rcv_window(&self) -> u64 {
        self.shared.recv_limit.saturating_sub(self.rcv_buf.ready_len() + self.rcv_buf.ofo_len()) as u64
    }

    /// After the application read: announce a window that at least doubled.
    fn maybe_window_update(&mut self) {
        let adv = self.shared.rcv_wnd_end.saturating_sub(self.shared.rcv_nxt);
        let now_wnd = self.rcv_window();
        if now_wnd >= 2 * adv.max(1) && now_wnd >= 2 * 1448 {
            if let Some((sf, _)) = self.best_ack_subflow() {
                sf.request_ack();
            }
        }
    }

    fn best_ack_subflow(&mut self) -> Option<&mut (Subflow, SubflowExt)> {
        self.subflows
            .iter_mut()
            .flatten()
            .filter(|(s, e)| {
                s.state().is_synchronized()
                    && !s.is_closed()
                    && !e.stale
                    && matches!(e.join, JoinState::Initial | JoinState::Joined)
            })
            .min_by_key(|(s, _)| s.srtt().unwrap_or(Duration::MAX))
    }

    // ------------------------------------------------------------------
    // Input
    // ------------------------------------------------------------------

    /// A segment for subflow `idx`. Returns false if the subflow rejected the
    /// segment at the MPTCP level (bad HMAC) and was reset.
    pub(crate) fn handle_segment(
        &mut self,
        now: Instant,
        idx: usize,
        hdr: &TcpHeader,
        opts: &mptun_wire::tcp::OptionSummary,
        payload: &[u8],
    ) {
        self.last_now = self.last_now.max(now);
        let single_subflow = self.subflows.iter().flatten().count() == 1;
        let ofo_empty = self.rcv_buf.ofo_is_empty();
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        let f = hdr.flags;
        // --- handshake options, before the subflow sees the segment ---
        match ext.join {
            JoinState::Initial if sh.mode == Mode::Pending && f.syn() && f.ack() => {
                let key = opts.mptcp.iter().find_map(|o| match o {
                    MptcpOption::MpCapable { version: 1, flags, sender_key: Some(k), receiver_key: None, .. } => {
                        Some((*k, flags & mptun_wire::mptcp::cap_flags::CHECKSUM != 0))
                    }
                    _ => None,
                });
                match key {
                    Some((k, csum)) => {
                        sh.csum |= csum;
                        sh.mode = Mode::Mptcp;
                        sh.remote_key = Some(k);
                        sh.rx_base = Some(crypto::idsn(k).wrapping_add(1));
                        sh.rcv_nxt = crypto::idsn(k).wrapping_add(1);
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
            JoinState::Initial if sh.mode == Mode::Mptcp && sh.server && sh.remote_key.is_none() && f.ack() => {
                for o in &opts.mptcp {
                    if let MptcpOption::MpCapable { receiver_key: Some(rk), sender_key: Some(k), .. } = o {
                        if *rk == sh.local_key {
                            sh.remote_key = Some(*k);
                            sh.rx_base = Some(crypto::idsn(*k).wrapping_add(1));
                            sh.rcv_nxt = crypto::idsn(*k).wrapping_add(1);
                            sh.fully_established = true;
                            sh.wnd_end = sh.wnd_end.max(sh.tx_base + ((hdr.window as u64) << sf.snd_wscale()));
                            sh.counters.mptcp_mp_capable_ack_rx += 1;
                        }
                    }
                }
            }
            JoinState::ClientSynSent { nonce } if f.syn() && f.ack() => {
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
                        ext.join_ack_retx = Some(now + Duration::from_millis(500));
                        sh.counters.mptcp_mp_join_synack_rx += 1;
                    }
                    _ => {
                        if ok.is_some() {
                            sh.counters.mptcp_mp_join_synack_hmac_failure += 1;
                        }
                        sh.counters.mptcp_mp_rst_tx += 1;
                        ext.rst_reason = Some(MPTCP_RST_EMPTCP);
                        // Let the subflow complete its view of the SYN-ACK, then reset it.
                        sf.handle_segment(now, hdr, opts, payload);
                        sf.abort();
                        return;
                    }
                }
            }
            JoinState::ServerSynRcvd { nonce, peer_nonce } if f.ack() && !f.syn() => {
                let hmac = opts.mptcp.iter().find_map(|o| match o {
                    MptcpOption::MpJoinAck { hmac } => Some(*hmac),
                    _ => None,
                });
                let expect = sh.remote_key.map(|rk| crypto::join_ack_hmac(rk, sh.local_key, peer_nonce, nonce));
                if hmac.is_some() && hmac == expect {
                    ext.join = JoinState::Joined;
                    sh.counters.mptcp_mp_join_ack_rx += 1;
                    sf.handle_segment(now, hdr, opts, payload);
                    sf.request_ack(); // the fourth ACK
                    self.after_input(now, idx);
                    return;
                }
                if hmac.is_some() {
                    sh.counters.mptcp_mp_join_ack_hmac_failure += 1;
                }
                sh.counters.mptcp_mp_rst_tx += 1;
                ext.rst_reason = Some(MPTCP_RST_EMPTCP);
                sf.abort();
                return;
            }
            JoinState::ClientAwaitAck { .. } if f.ack() && !f.syn() => {
                // Any ACK after our third one is the fourth ACK.
                ext.join = JoinState::Joined;
                ext.join_ack_retx = None;
            }
            _ => {}
        }

        sf.handle_segment(now, hdr, opts, payload);

        // A middlebox stripped our options mid-stream: data (or an ACK of new
        // data) without any MPTCP option on the only subflow, once fully
        // established. Fall back to an infinite mapping (RFC 8684 3.7).
        if sh.mode == Mode::Mptcp
            && !sh.infinite
            && sh.fully_established
            && opts.mptcp.is_empty()
            && !f.syn()
            && !f.rst()
            && (!payload.is_empty() || sf.snd_una() != sf.iss() + 1)
            && ext.join == JoinState::Initial
            && single_subflow
            && ofo_empty
        {
            sh.infinite = true;
            sh.counters.mptcp_dss_fallback += 1;
            // Receive side: everything from the subflow's next byte on continues at rcv_nxt.
            let next_ssn = (sf.recv_offset() as u32).wrapping_add(1);
            ext.rx_maps.retain(|&ssn, &mut (_, len, _)| Seq(ssn + len).gt(Seq(next_ssn)));
            if !ext.rx_maps.keys().any(|&k| Seq(k).le(Seq(next_ssn))) {
                ext.rx_maps.insert(next_ssn, (sh.rcv_nxt, u32::MAX / 2, None));
            }
        }

        let mut rm_ids: Vec<u8> = Vec::new();
        if sh.mode == Mode::Mptcp {
            let wnd = (hdr.window as u64) << sf.snd_wscale();
            for o in &opts.mptcp {
                match o {
                    MptcpOption::Dss { data_ack, mapping, data_fin } => {
                        if let Some(a) = data_ack {
                            Self::on_data_ack(sh, a, wnd);
                        }
                        if let Some(m) = mapping {
                            Self::on_mapping(sh, ext, m, *data_fin);
                        }
                    }
                    MptcpOption::MpCapable { sender_key: Some(_), data_len: Some(len), checksum, .. }
                        if sh.server && ext.join == JoinState::Initial =>
                    {
                        if let Some(base) = sh.rx_base {
                            ext.rx_maps.entry(1).or_insert((base, *len as u32, *checksum));
                        }
                    }
                    MptcpOption::AddAddr { echo, addr_id, addr, port, hmac } => {
                        Self::on_add_addr(
                            sh,
                            &mut self.pm,
                            &self.cfg.mptcp.pm,
                            &mut self.pending_joins,
                            now,
                            sf.local().ip(),
                            sf.remote().port(),
                            (*echo, *addr_id, *addr, *port, *hmac),
                        );
                    }
                    MptcpOption::RmAddr { ids } => {
                        sh.counters.mptcp_rm_addr += 1;
                        rm_ids.extend(ids.iter().copied());
                    }
                    MptcpOption::MpPrio { backup } => {
                        sh.counters.mptcp_mp_prio_rx += 1;
                        ext.backup = *backup;
                    }
                    MptcpOption::MpFastclose { receiver_key } if *receiver_key == sh.local_key => {
                        sh.counters.mptcp_mp_fastclose_rx += 1;
                        for (s, _) in self.subflows.iter_mut().flatten() {
                            s.abort();
                        }
                        self.events.push_back(Event::Reset);
                        return;
                    }
                    MptcpOption::MpTcpRst { .. } => sh.counters.mptcp_mp_rst_rx += 1,
                    _ => {}
                }
            }
            // The peer withdrew addresses: close our subflows to them (Linux
            // mptcp_pm_nl_rm_subflow_received); their data is reinjected.
            for (s2, e2) in self.subflows.iter_mut().flatten() {
                if e2.join != JoinState::Initial && rm_ids.contains(&e2.remote_id) {
                    s2.close();
                }
            }
            // A client becomes fully established when the server shows it saw our key.
            // Any MPTCP option but MP_CAPABLE proves it: the server sends DSS
            // and ADD_ADDR (HMAC'd with our key) only once it has our key.
            if !sh.server
                && !sh.fully_established
                && opts.mptcp.iter().any(|o| !matches!(o, MptcpOption::MpCapable { .. }))
            {
                sh.fully_established = true;
            }
        }
        self.after_input(now, idx);
    }

    fn on_data_ack(sh: &mut Shared, a: &DataAck, wnd: u64) {
        let ack = if a.ack64 { a.ack } else { expand32(a.ack, sh.snd_una) };
        let max = sh.snd_nxt + sh.data_fin_seq.is_some_and(|f| f == sh.snd_nxt) as u64;
        if ack < sh.snd_una || ack > max {
            return;
        }
        sh.snd_una = ack;
        sh.wnd_end = sh.wnd_end.max(ack + wnd);
        if sh.data_fin_seq.is_some_and(|f| ack > f) {
            sh.data_fin_acked = true;
            sh.data_fin_due = false;
        }
    }

    fn on_mapping(sh: &mut Shared, ext: &mut SubflowExt, m: &DssMapping, data_fin: bool) {
        // Nothing can be mapped before the peer's key (and so its IDSN) is known.
        if sh.rx_base.is_none() {
            return;
        }
        let dsn = if m.dsn64 { m.dsn } else { expand32(m.dsn, sh.rcv_nxt) };
        let mut len = m.len as u32;
        if data_fin {
            // The DATA_FIN takes the last data sequence number of the mapping.
            let fin = dsn + len.max(1) as u64 - 1;
            sh.peer_data_fin.get_or_insert(fin);
            len = len.saturating_sub(1);
        }
        if len > 0 && m.ssn != 0 {
            ext.rx_maps.entry(m.ssn).or_insert((dsn, len, m.checksum));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_add_addr(
        sh: &mut Shared,
        pm: &mut PmState,
        pmcfg: &PmConfig,
        joins: &mut Vec<JoinRequest>,
        now: Instant,
        local0: IpAddr,
        port0: u16,
        (echo, id, addr, port, hmac): (bool, u8, IpAddr, Option<u16>, Option<u64>),
    ) {
        if echo {
            sh.counters.mptcp_echo_add += 1;
            sh.announce.retain(|a| a.echo || a.id != id);
            return;
        }
        let Some(rk) = sh.remote_key else { return };
        if hmac != Some(crypto::add_addr_hmac(rk, sh.local_key, id, addr, port)) {
            sh.counters.mptcp_add_addr_drop += 1;
            return;
        }
        sh.counters.mptcp_add_addr += 1;
        if !sh.announce.iter().any(|a| a.echo && a.id == id) {
            sh.announce.push(AddrAnnounce { id, addr, port, echo: true, at: now });
        }
        match pm.on_add_addr(pmcfg, local0, addr, port.unwrap_or(port0), false) {
            Some(j) => joins.push(j),
            None => sh.counters.mptcp_add_addr_drop += 0,
        }
    }

    /// Moves what the subflow delivered into the connection, then reacts.
    fn after_input(&mut self, now: Instant, idx: usize) {
        if self.shared.mode == Mode::Mptcp {
            self.drain_subflow(now, idx);
        }
        self.on_subflow_events(idx);
        self.progress(now);
    }

    fn drain_subflow(&mut self, now: Instant, idx: usize) {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        let Some(base) = sh.rx_base else { return };
        loop {
            // Relative ssn of the next byte the subflow would hand out.
            let ssn = (sf.recv_offset() as u32).wrapping_add(1);
            let Some((&mssn, &(mdsn, mlen, mcsum))) = ext.rx_maps.range(..=ssn).next_back() else { break };
            let into = ssn.wrapping_sub(mssn);
            if into >= mlen {
                // Past this mapping and no later one known yet.
                if ext.rx_maps.range(ssn..).next().is_none() {
                    break;
                }
                ext.rx_maps.remove(&mssn);
                continue;
            }
            let chunk = match mcsum.filter(|_| sh.csum && into == 0) {
                // With DSS checksums a mapping is delivered whole and only once verified.
                Some(expect) => {
                    if sf.recv_ready() < mlen as usize {
                        break;
                    }
                    let mut whole = Vec::with_capacity(mlen as usize);
                    while whole.len() < mlen as usize {
                        let Some(c) = sf.recv_chunk(now, mlen as usize - whole.len()) else { break };
                        whole.extend_from_slice(&c);
                    }
                    if dss_checksum(mdsn, mssn, mlen as u16, &whole) != expect {
                        sh.counters.mptcp_data_csum_err += 1;
                        ext.rx_maps.remove(&mssn);
                        ext.rst_reason = Some(MPTCP_RST_EMIDDLEBOX);
                        sh.counters.mptcp_mp_rst_tx += 1;
                        sf.abort();
                        break;
                    }
                    Bytes::from(whole)
                }
                None => {
                    let Some(c) = sf.recv_chunk(now, (mlen - into) as usize) else { break };
                    c
                }
            };
            let dsn = mdsn.wrapping_add(into as u64);
            let clen = chunk.len() as u32;
            // A mapping that puts data outside the window we offered (or
            // before the data sequence space) is a broken or hostile peer:
            // reset the subflow as Linux does for an invalid mapping, rather
            // than let it park data anywhere in the reassembly queue.
            let edge = sh.rcv_wnd_end.max(sh.rcv_nxt + self.rcv_buf.ofo_len() as u64 + sh.recv_limit as u64);
            if dsn < base || dsn.saturating_add(clen as u64) > edge {
                sh.counters.mptcp_dss_not_matching += 1;
                ext.rx_maps.remove(&mssn);
                ext.rst_reason = Some(MPTCP_RST_EMPTCP);
                sh.counters.mptcp_mp_rst_tx += 1;
                sf.abort();
                break;
            }
            if dsn + clen as u64 <= sh.rcv_nxt {
                sh.counters.mptcp_duplicate_data += 1;
            } else {
                let off = dsn.wrapping_sub(base);
                let ins = self.rcv_buf.insert_bytes(off, chunk);
                if ins.queued_ofo {
                    sh.counters.mptcp_ofo_queue += 1;
                    sh.counters.mptcp_ofo_queue_tail += ins.tail as u64;
                    sh.counters.mptcp_ofo_merge += ins.merged as u64;
                }
                if ins.duplicate {
                    sh.counters.mptcp_duplicate_data += 1;
                }
            }
            sh.rcv_nxt = base + self.rcv_buf.next();
            if into + clen >= mlen {
                ext.rx_maps.remove(&mssn);
            }
        }
        // DATA_FIN in order?
        if let Some(fin) = sh.peer_data_fin {
            if !sh.peer_data_fin_done && sh.rcv_nxt == fin {
                sh.rcv_nxt += 1;
                sh.peer_data_fin_done = true;
                self.events.push_back(Event::PeerFin);
                sf.request_ack();
            }
        }
    }

    fn on_subflow_events(&mut self, idx: usize) {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let mut failed = false;
        while let Some(ev) = sf.poll_event() {
            match (self.shared.mode, ev, ext.join) {
                // Until the SYN-ACK decides, the initial subflow's fate is the connection's.
                (Mode::Plain | Mode::Pending, e, _) => self.events.push_back(e),
                (_, Event::Connected, JoinState::Initial) => self.events.push_back(Event::Connected),
                (_, Event::Connected, _) => {}
                (_, Event::PeerFin, _) if self.shared.infinite => {
                    // After a fallback the subflow's FIN is the DATA_FIN.
                    self.shared.peer_data_fin_done = true;
                    self.events.push_back(Event::PeerFin);
                }
                (_, Event::PeerFin, _) => {
                    // The peer closed this subflow: close ours too.
                    sf.close();
                }
                (_, Event::Reset | Event::TimedOut, _) => failed = true,
                (_, Event::Closed, _) => failed = true,
            }
        }
        if failed && self.shared.mode == Mode::Mptcp {
            self.reinject_from(idx);
            if let Some((sf, _)) = self.subflows[idx].take() {
                // Keep what the subflow counted.
                self.shared.counters.add(&sf.counters());
            }
            if self.subflows.iter().flatten().next().is_none() && !self.closed_event_sent {
                self.closed_event_sent = true;
                let done = self.shared.data_fin_acked && self.shared.peer_data_fin_done;
                self.events.push_back(if done { Event::Closed } else { Event::Reset });
            }
        }
    }

    /// Queues the not yet DATA_ACKed data of subflow `idx` for another subflow.
    fn reinject_from(&mut self, idx: usize) {
        let Some((_, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let una = self.shared.snd_una;
        for m in &ext.tx_maps {
            let start = m.dsn.max(una).max(ext.reinjected_to);
            let end = m.dsn + m.len as u64;
            if start < end {
                self.reinject.push_back((start, end));
                self.shared.counters.mptcp_reinjected_bytes += end - start;
            }
        }
        if let Some(m) = ext.tx_maps.back() {
            ext.reinjected_to = ext.reinjected_to.max(m.dsn + m.len as u64);
        }
    }

    /// [`Connection::progress`] at the time of the last driver call.
    pub(crate) fn progress_now(&mut self) {
        self.progress(self.last_now);
    }

    pub(crate) fn last_now(&self) -> Instant {
        self.last_now
    }

    /// Housekeeping after any input, timer or application call: stale
    /// detection, PM decisions, pushing data, DATA_FIN, closing.
    pub(crate) fn progress(&mut self, now: Instant) {
        if self.shared.mode != Mode::Mptcp {
            return;
        }
        if self.shared.infinite {
            // No DATA_ACK after a fallback: what the subflow has acknowledged is acknowledged.
            if let Some((sf, ext)) = self.subflows.iter().flatten().next() {
                let sf_una = (sf.snd_una() - sf.iss().0).0;
                let mut una = self.shared.snd_una;
                for m in &ext.tx_maps {
                    let into = sf_una.wrapping_sub(m.ssn);
                    una = una.max(m.dsn + (into.min(m.len)) as u64);
                    if into < m.len {
                        break;
                    }
                }
                self.shared.snd_una = una;
                let wnd = sf.info().snd_wnd as u64;
                self.shared.wnd_end = self.shared.wnd_end.max(una + wnd);
            }
        }
        // Release acknowledged data and mappings.
        let una = self.shared.snd_una;
        self.snd_buf.ack_to(Seq((una - self.shared.tx_base) as u32));
        for (sf, ext) in self.subflows.iter_mut().flatten() {
            let sf_una = sf.snd_una() - sf.iss().0;
            while let Some(m) = ext.tx_maps.front() {
                let sf_done = Seq(m.ssn + m.len).le(Seq(sf_una.0));
                if m.dsn + m.len as u64 <= una && sf_done {
                    ext.tx_maps.pop_front();
                } else {
                    break;
                }
            }
        }
        // Linux sizes the msk send buffer as the sum of its subflows'
        // sk_sndbuf. Those count memory: 2 × cwnd × ~4352 bytes of skb per
        // MSS-sized segment (tcp_sndbuf_expand), while the msk's queue is
        // charged about its payload. In payload terms the msk holds ~3× the
        // subflows' payload buffers, room for the data the receiver holds
        // out of order while the slow path catches up.
        if let BufferSize::Auto { max, .. } = self.cfg.mptcp.send_buffer {
            const TRUESIZE_PER_MSS: usize = 4352;
            let sum: usize = self
                .subflows
                .iter()
                .flatten()
                .map(|(sf, _)| sf.info().send_buffer / sf.mss(0).max(1) as usize * TRUESIZE_PER_MSS)
                .sum();
            self.send_limit = self.send_limit.max(sum.min(max));
        }
        // Stale subflows: reinject their data elsewhere, once per streak.
        let streak = self.cfg.mptcp.stale_rto_streak;
        for i in 0..self.subflows.len() {
            let Some((sf, ext)) = self.subflows[i].as_mut() else { continue };
            let stale_now = sf.rto_streak() >= streak;
            if stale_now && !ext.stale {
                ext.stale = true;
                self.shared.counters.mptcp_subflow_stale += 1;
                self.reinject_from(i);
            } else if !stale_now && ext.stale {
                ext.stale = false;
                self.shared.counters.mptcp_subflow_recover += 1;
            }
        }
        // Path manager, once fully established.
        if self.shared.fully_established && !self.pm.announced {
            if let Some((l, r)) = self.addresses() {
                let (ann, joins) = self.pm.on_established(&self.cfg.mptcp.pm, l.ip(), r.ip(), r.port());
                for e in ann {
                    self.shared.announce.push(AddrAnnounce {
                        id: e.id,
                        addr: e.addr,
                        port: None,
                        echo: false,
                        at: now,
                    });
                }
                self.pending_joins.extend(joins);
            }
        }
        if self.shared.announce.iter().any(|a| a.at <= now) {
            if let Some((sf, _)) = self.best_ack_subflow() {
                sf.request_ack();
            }
        }
        self.push_pending();
        self.data_fin_progress(now);
        // Both DATA_FINs done: close the subflows.
        if self.shared.data_fin_acked && self.shared.peer_data_fin_done {
            for (sf, _) in self.subflows.iter_mut().flatten() {
                if matches!(sf.state(), State::Established | State::CloseWait) {
                    sf.close();
                }
            }
        }
    }

    fn data_fin_progress(&mut self, now: Instant) {
        let sh = &mut self.shared;
        let Some(fin) = sh.data_fin_seq else { return };
        if sh.infinite {
            // After a fallback the subflow's FIN carries the DATA_FIN.
            if sh.snd_nxt == fin {
                if let Some((sf, _)) = self.subflows.iter_mut().flatten().next() {
                    if matches!(sf.state(), State::Established | State::CloseWait) {
                        sf.close();
                    }
                }
            }
            return;
        }
        if sh.data_fin_acked || sh.snd_nxt != fin || !self.reinject.is_empty() {
            self.data_fin_rto = None;
            return;
        }
        let due = self.data_fin_rto.is_none_or(|t| t <= now);
        if due {
            sh.data_fin_due = true;
            let rto = self.subflows.iter().flatten().map(|(s, _)| s.info().rto).min().unwrap_or(Duration::from_secs(1));
            self.data_fin_rto = Some(now + rto * (1 << self.data_fin_backoff.min(6)));
            self.data_fin_backoff += 1;
            if let Some((sf, _)) = self.best_ack_subflow() {
                sf.request_ack();
            }
        }
    }

    fn views(&self) -> Vec<SubflowView> {
        self.subflows
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .map(|(i, (sf, ext))| {
                let info = sf.info();
                SubflowView {
                    id: i,
                    available: matches!(ext.join, JoinState::Initial | JoinState::Joined)
                        && matches!(sf.state(), State::Established | State::CloseWait)
                        && !ext.stale,
                    backup: ext.backup,
                    queued: sf.send_queued(),
                    send_space: sf.send_space(),
                    pacing_rate: info.pacing_rate,
                    cwnd: info.cwnd,
                    ssthresh: info.ssthresh,
                    srtt: sf.srtt(),
                    ca_state: info.ca_state,
                    cwnd_limited: info.cwnd_limited,
                }
            })
            .collect()
    }

    /// Hands bursts of data (reinjections first) to the subflows the scheduler picks.
    fn push_pending(&mut self) {
        loop {
            let (start, end, reinj) = match self.reinject.front() {
                Some(&(s, e)) => (s.max(self.shared.snd_una), e, true),
                None => (self.shared.snd_nxt, self.shared.write_seq, false),
            };
            if reinj && start >= end {
                self.reinject.pop_front();
                continue;
            }
            let room = self.shared.wnd_end.saturating_sub(start);
            if start >= end || (room == 0 && !reinj) {
                return;
            }
            let views = self.views();
            let conn = ConnView { rwnd_limited: self.shared.write_seq > self.shared.wnd_end, now: self.last_now };
            let Some(pick) = self.sched.select(&views, &conn) else { return };
            self.apply_decision(pick.id, &views, &conn);
            let Some((sf, ext)) = self.subflows.get_mut(pick.id).and_then(|s| s.as_mut()) else { return };
            let mut len = (end - start).min(pick.max_burst as u64).min(u16::MAX as u64).min(sf.send_space() as u64);
            if !reinj {
                len = len.min(room);
            }
            if len == 0 {
                return;
            }
            let data = self.snd_buf.slice_bytes(Seq((start - self.shared.tx_base) as u32), len as usize);
            let ssn = sf.write_seq() - sf.iss().0;
            let data_for_csum = if self.shared.csum { data.clone() } else { Bytes::new() };
            if sf.send_bytes(data).is_err() {
                return;
            }
            let csum = if self.shared.csum { dss_checksum(start, ssn.0, len as u16, &data_for_csum) } else { 0 };
            ext.tx_maps.push_back(TxMap { ssn: ssn.0, dsn: start, len: len as u32, csum, with_ack: None });
            if reinj {
                let front = self.reinject.front_mut().expect("peeked");
                front.0 = start + len;
            } else {
                self.shared.snd_nxt += len;
            }
            self.sched.on_pushed(pick.id, len as usize, &views);
        }
    }

    /// Records a policy's decision: flag the slow subflow, count, reinject.
    fn apply_decision(&mut self, picked: usize, views: &[SubflowView], conn: &ConnView) {
        let d = self.sched.after_pick(picked, views, conn);
        self.shared.counters.mptcp_penal_candidate += d.candidate as u64;
        if let Some(id) = d.penalise {
            if let Some((_, ext)) = self.subflows.get_mut(id).and_then(|s| s.as_mut()) {
                ext.penalty = Some(self.cfg.mptcp.scheduler == Policy::MptcpOrg);
            }
        }
        if let Some((slow, _fast)) = d.reinject_head {
            // Opportunistic retransmission: the oldest unacknowledged data of
            // the slow subflow goes out again on a fast one.
            let una = self.shared.snd_una;
            let head = self.subflows.get(slow).and_then(|s| s.as_ref()).and_then(|(sf, ext)| {
                let mss = sf.mss(0) as u64;
                ext.tx_maps.iter().find(|m| m.dsn + m.len as u64 > una).map(|m| {
                    let start = m.dsn.max(una);
                    (start, (m.dsn + m.len as u64).min(start + mss))
                })
            });
            if let Some((s, e)) = head {
                if !self.reinject.iter().any(|&(a, b)| a <= s && e <= b) {
                    self.reinject.push_back((s, e));
                    self.shared.counters.mptcp_reinjected_bytes += e - s;
                }
            }
        }
    }

    /// The halving a policy flagged, applied from the subflow's own push path
    /// (the equivalent of doing it under the subflow socket lock).
    fn apply_penalty(sf: &mut Subflow, ext: &mut SubflowExt, counters: &mut Counters) {
        let Some(always_ssthresh) = ext.penalty.take() else { return };
        let st = sf.cc_state_mut();
        let old = st.cwnd;
        st.cwnd = (old / 2).max(1);
        st.cwnd_cnt = 0;
        if always_ssthresh || (st.ssthresh != u32::MAX && old >= st.ssthresh) {
            st.ssthresh = (st.ssthresh.min(old) / 2).max(2);
        }
        counters.mptcp_cwnd_penalized += 1;
        ext.penalized += 1;
    }

    // ------------------------------------------------------------------
    // Timers and output
    // ------------------------------------------------------------------

    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = None;
        for (sf, ext) in self.subflows.iter().flatten() {
            t = Instant::min_opt(t, sf.poll_timeout());
            t = Instant::min_opt(t, ext.join_ack_retx);
        }
        t = Instant::min_opt(t, self.data_fin_rto);
        for a in &self.shared.announce {
            t = Instant::min_opt(t, Some(a.at));
        }
        t
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
        for i in 0..self.subflows.len() {
            let Some((sf, ext)) = self.subflows[i].as_mut() else { continue };
            if sf.poll_timeout().is_some_and(|t| t <= now) {
                sf.handle_timeout(now);
            }
            if ext.join_ack_retx.is_some_and(|t| t <= now) {
                ext.join_ack_retx = Some(now + sf.info().rto.max(Duration::from_millis(200)));
                sf.request_ack();
            }
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
                let next_ssn = (sf.snd_nxt() - sf.iss().0).0;
                let mut hook = Hook { sh: &mut self.shared, ext, now, iss: sf.iss(), next_ssn, recv_window: 0 };
                hook.recv_window =
                    hook.sh.recv_limit.saturating_sub(self.rcv_buf.ready_len() + self.rcv_buf.ofo_len()) as u64;
                sf.poll_transmit(now, &mut hook, out)
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
