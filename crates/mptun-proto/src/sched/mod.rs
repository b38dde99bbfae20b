//! The MPTCP packet scheduler: which subflow gets the next burst of data.
//!
//! The default is Linux's `mptcp_subflow_get_send` (net/mptcp/protocol.c):
//! among the subflows that can take data, pick the one whose queue would
//! drain soonest — the smallest *linger time*, queued bytes divided by the
//! subflow's average pacing rate — preferring active subflows over backup
//! ones, and hand it a burst of at most 64 KiB. After each burst the chosen
//! subflow's `avg_pacing_rate` moves towards its current pacing rate,
//! weighted by bytes, exactly as the kernel does.
//!
//! Schedulers see [`SubflowView`]s, not subflows, so they are unit-testable
//! with synthetic states and cannot reach into protocol state. Besides a
//! pick, a scheduler may ask the connection for [`Request`]s (a window cut,
//! a reinjection), which is how the penalty policies of [`penalise`] are
//! written. [`minrtt`] is the out-of-tree multipath-tcp.org kernel's
//! default; [`roundrobin`], [`redundant`], [`blest`] and [`ecf`] are its
//! other schedulers, [`bpf_selftest`] upstream's BPF test schedulers.
//! [`registry`] builds the shipped ones by name.

pub mod blest;
pub mod bpf_selftest;
mod default;
pub mod ecf;
pub mod minrtt;
pub mod penalise;
pub mod rbuf_opt;
pub mod redundant;
pub mod registry;
pub mod roundrobin;

pub use blest::BlestScheduler;
pub use bpf_selftest::{Pin, PinScheduler};
pub use default::DefaultScheduler;
pub use ecf::EcfScheduler;
pub use minrtt::MinRttScheduler;
pub use penalise::{PenaltyConfig, PenaltyScheduler};
pub use redundant::RedundantScheduler;
pub use registry::{new_scheduler, Policy};
pub use roundrobin::RoundRobinScheduler;

use crate::counters::Counters;
use mptun_cc::{CaState, WindowCut};
use mptun_time::{Duration, Instant};

/// What a scheduler may know about one subflow.
///
/// `Default` is an available subflow with nothing queued, no samples and
/// zero windows, for schedulers' unit tests (set what a test needs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SubflowView {
    /// Stable index of the subflow within its connection.
    pub id: usize,
    /// Can carry data now: established (and, for a join, fully established), not stale, not closing.
    pub available: bool,
    /// MP_PRIO / endpoint `backup` flag.
    pub backup: bool,
    /// Bytes queued in the subflow (sent and unacknowledged, plus unsent): `sk_wmem_queued`.
    pub queued: usize,
    /// Room left in the subflow's send buffer.
    pub send_space: usize,
    /// `sk_pacing_rate`, bytes per second.
    pub pacing_rate: u64,
    /// Congestion window, segments: with `ssthresh`, tells a penalising
    /// policy whether a halving would matter (slow start or not).
    pub cwnd: u32,
    /// Slow-start threshold, segments (`u32::MAX` until the first loss).
    pub ssthresh: u32,
    /// Smoothed RTT, `None` before the first sample: the default scheduler
    /// ranks by pacing rate, the penalising ones compare RTTs.
    pub srtt: Option<Duration>,
    /// Loss-recovery state: a subflow in recovery is not penalised again.
    pub ca_state: CaState,
    /// Linux `tcp_is_cwnd_limited`.
    pub cwnd_limited: bool,
    /// Packets in flight (`tcp_packets_in_flight`): with `cwnd`, the room
    /// a scheduler that pushes only what the window can send at once
    /// (minRTT) hands over.
    pub in_flight: u32,
    /// Bytes handed to the subflow and not sent once yet
    /// (`write_seq - snd_nxt`), part of `queued`.
    pub unsent: usize,
    /// Payload bytes of a data segment that carries a DSS mapping (the
    /// subflow's `mss_cache` less the option): a burst of whole multiples
    /// of it leaves no short segment behind.
    pub mss: u32,
    /// RTT variation as RFC 6298 defines RTTVAR (Linux keeps four times
    /// it in `rttvar_us`): ECF's margin `delta` is built from it.
    pub rttvar: Option<Duration>,
    /// Lowest RTT seen on the subflow (Linux `tcp_min_rtt`).
    pub min_rtt: Option<Duration>,
    /// Segments marked lost and not yet retransmitted (`lost_out`).
    pub lost: u32,
    /// Retransmitted segments still in flight (`retrans_out`).
    pub retrans: u32,
    /// The subflow's delivery rate, bytes per second (Linux
    /// `tcpi_delivery_rate` from `tcp_rate.c`'s samples: the last one not
    /// app-limited, or the best app-limited); 0 before the first (see
    /// [`crate::tcp::TcpInfo::delivery_rate`]).
    pub delivery_rate: u64,
    /// When the subflow last sent data (Linux `lsndtime`).
    pub last_send: Option<Instant>,
    /// When an ACK last acknowledged new data on it.
    pub last_ack: Option<Instant>,
    /// The data sequence range mapped on this subflow that the peer has not
    /// DATA_ACKed, `(from, to)`: what a reinjection of this subflow's data
    /// ([`Request::Reinject`]) may take. `None` when it holds none.
    pub unacked_data: Option<(u64, u64)>,
    /// End of the highest data sequence number ever mapped on this
    /// subflow: a redundant scheduler sends a subflow that is behind the
    /// connection's `nxt` what it missed.
    pub data_end: Option<u64>,
}

impl Default for SubflowView {
    fn default() -> Self {
        SubflowView {
            id: 0,
            available: true,
            backup: false,
            queued: 0,
            send_space: 0,
            pacing_rate: 0,
            cwnd: 0,
            ssthresh: u32::MAX,
            srtt: None,
            ca_state: CaState::Open,
            cwnd_limited: false,
            in_flight: 0,
            unsent: 0,
            mss: 1,
            rttvar: None,
            min_rtt: None,
            lost: 0,
            retrans: 0,
            delivery_rate: 0,
            last_send: None,
            last_ack: None,
            unacked_data: None,
            data_end: None,
        }
    }
}

/// The connection-level context of a scheduling decision.
///
/// Data sequence numbers are the low 64 bits as the connection counts
/// them, relative to nothing: compare them with each other only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnView {
    /// The application queued past the send-window edge (`write_seq > wnd_end`):
    /// the receiver's window, not our cwnd, limits the connection.
    pub rwnd_limited: bool,
    /// Time of the decision, for policies rate-limited per RTT.
    pub now: Instant,
    /// Oldest data the peer has not DATA_ACKed (`snd_una`).
    pub una: u64,
    /// Next new data to hand to a subflow (`snd_nxt` of the msk).
    pub nxt: u64,
    /// Just past the last byte the application wrote (`write_seq`).
    pub write_seq: u64,
    /// Right edge of the peer's connection-level window (`wnd_end`).
    pub wnd_end: u64,
    /// Size of the connection's send buffer (`sk_sndbuf`), bytes.
    pub send_buffer: usize,
    /// Bytes queued for reinjection, ahead of new data.
    pub reinject_queued: u64,
}

impl ConnView {
    /// Bytes the application wrote that no subflow carries yet.
    pub fn unsent(&self) -> u64 {
        self.write_seq.saturating_sub(self.nxt)
    }

    /// The peer's connection-level window from `una` (the msk's `snd_wnd`).
    pub fn window(&self) -> u64 {
        self.wnd_end.saturating_sub(self.una)
    }

    /// Send-buffer occupancy: written and not DATA_ACKed.
    pub fn buffered(&self) -> u64 {
        self.write_seq.saturating_sub(self.una)
    }
}

/// One subflow of a pick and the most bytes to push to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The subflow's index in the connection.
    pub id: usize,
    /// Most bytes to push to it in one go.
    pub max_burst: usize,
}

/// A pick: the subflow and the most bytes to push to it in one go, and
/// the subflows that carry a copy of the same data (a redundant scheduler).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pick {
    /// The subflow's index in the connection.
    pub id: usize,
    /// Most bytes to push to it in one go (one DSS mapping), so that the
    /// next burst is scheduled again with fresh subflow state.
    pub max_burst: usize,
    /// Further subflows that get a copy of what `id` gets, each at most
    /// its own burst (the data ACK decides which copy counts).
    pub copies: Vec<Target>,
}

impl Pick {
    /// A pick of one subflow.
    pub fn one(id: usize, max_burst: usize) -> Self {
        Pick { id, max_burst, copies: Vec::new() }
    }

    /// The same pick with a copy on subflow `id` too.
    pub fn with_copy(mut self, id: usize, max_burst: usize) -> Self {
        self.copies.push(Target { id, max_burst });
        self
    }
}

/// What a scheduler asks of the connection besides its pick, carried out
/// before the picked burst is pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Shrink subflow `id`'s congestion window, through its controller,
    /// from the subflow's own push path (counted as `MPTcpExtCwndPenalized`).
    ReduceWindow {
        /// The subflow's index in the connection.
        id: usize,
        /// How far.
        cut: WindowCut,
    },
    /// Send the oldest data of subflow `id` that the peer has not
    /// DATA_ACKed again, at most one MSS, on whichever subflow is picked
    /// next (opportunistic retransmission), ahead of new data.
    ReinjectHead {
        /// The subflow whose data goes again.
        id: usize,
    },
    /// Send data `[from, to)` on subflow `on` now, as a mapping of its
    /// own: data already sent on another subflow (a reinjection chosen by
    /// the scheduler, or a redundant copy that catches a subflow up). The
    /// connection clips it to what was sent once and is not DATA_ACKed,
    /// and to what `on` can queue; counted as `MptunSchedCopyBytes`.
    Reinject {
        /// The subflow that sends it.
        on: usize,
        /// First data sequence number.
        from: u64,
        /// Just past the last.
        to: u64,
    },
}

/// Linux `MPTCP_SEND_BURST_SIZE`.
pub const SEND_BURST_SIZE: usize = 64 * 1024;

/// A scheduler policy.
///
/// The connection calls [`Scheduler::select`] whenever new data (or a
/// queued reinjection) can go and the peer's window allows it, carries out
/// what [`Scheduler::poll_request`] yields, pushes the pick, and reports it
/// with [`Scheduler::on_pushed`]. When nothing new can go, it calls
/// [`Scheduler::on_blocked`] once, where a scheduler may still ask for
/// copies of data in flight.
pub trait Scheduler: Send + core::fmt::Debug {
    /// Name as `net.mptcp.scheduler` would print it.
    fn name(&self) -> &'static str;
    /// Chooses the subflow for the next burst, if any can take data.
    fn select(&mut self, subflows: &[SubflowView], conn: &ConnView) -> Option<Pick>;
    /// `bytes` were pushed to subflow `id` (Linux updates `avg_pacing_rate` here).
    fn on_pushed(&mut self, id: usize, bytes: usize, subflows: &[SubflowView]);
    /// No new data can go now (all of it is on subflows, or the peer's
    /// window is full): the requests queued here (a [`Request::Reinject`]
    /// onto an idle subflow) are carried out at once.
    fn on_blocked(&mut self, _subflows: &[SubflowView], _conn: &ConnView) {}
    /// Whether [`Scheduler::on_blocked`] does anything: the connection
    /// builds the views for it only then, as that path runs on every ACK.
    fn acts_when_blocked(&self) -> bool {
        false
    }
    /// Subflow `id` is gone and its id may name a new subflow: drop what
    /// is kept about it.
    fn forget(&mut self, _id: usize) {}
    /// Average pacing rate the scheduler keeps for subflow `id`, bytes/s.
    fn avg_pacing_rate(&self, _id: usize) -> Option<u64> {
        None
    }
    /// The next request the last [`Scheduler::select`] (or
    /// [`Scheduler::on_blocked`]) made besides its pick; the connection
    /// takes them all right after.
    fn poll_request(&mut self) -> Option<Request> {
        None
    }
    /// Adds what the scheduler counted (with the kernel's names) into `c`,
    /// the connection's counters.
    fn add_counters(&self, _c: &mut Counters) {}
}
