//! Connection settings: what Linux spreads over `net.mptcp.*` sysctls,
//! the msk's socket options and the path manager's endpoints.

use crate::pm::PmConfig;
use crate::sched::{PenaltyConfig, Policy};
use crate::seq::DataSeq;
use crate::tcp::{BufferSize, TcpConfig};
use mptun_time::Duration;
use mptun_wire::crypto;

/// Connection-level MPTCP settings.
#[derive(Clone, Debug)]
pub struct MptcpConfig {
    /// Offer MP_CAPABLE on connect and accept it on listen (`net.mptcp.enabled`).
    pub enabled: bool,
    /// Path manager: which addresses to announce and which subflows to
    /// open or accept (Linux's in-kernel PM limits and endpoints).
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
    /// Tuning of the penalising policies (how often, how much, guards).
    pub penalty: PenaltyConfig,
    /// Tests only, both ends must agree: `Some(n)` starts every sequence
    /// counter of a connection close to its wrap, so that a transfer of a
    /// few times `n` bytes crosses them all: relative subflow sequence
    /// numbers (what DSS mappings carry) start at `1 - n` modulo 2^32
    /// instead of 1, each IDSN lies within `2n` (plus a key-dependent few
    /// KiB) before 2^64, and the initial subflow's ISS within about `n / 2`
    /// before 2^32. Not a protocol: a peer without it misreads mappings.
    #[doc(hidden)]
    pub wrap_early: Option<u32>,
}

impl Default for MptcpConfig {
    fn default() -> Self {
        MptcpConfig {
            enabled: true,
            pm: PmConfig::default(),
            send_buffer: BufferSize::Auto { initial: 64 * 1024, max: 4 * 1024 * 1024 },
            // Twice Linux's tcp_rmem[1]: the connection's window must hold what
            // the fast path delivers while the slow one's data is in flight
            // from the first round trips on, before DRS has measured a round
            // of either. DRS grows it from there as Linux does.
            recv_buffer: BufferSize::Auto { initial: 256 * 1024, max: 6 * 1024 * 1024 },
            stale_rto_streak: 2,
            add_addr_timeout: Duration::from_secs(120),
            checksum: false,
            scheduler: Policy::Default,
            penalty: PenaltyConfig::default(),
            wrap_early: None,
        }
    }
}

/// Everything a connection needs to know about how to behave.
#[derive(Clone, Debug, Default)]
pub struct ConnConfig {
    /// Per-subflow TCP settings.
    pub tcp: TcpConfig,
    /// Connection-level MPTCP settings.
    pub mptcp: MptcpConfig,
}

/// Where a connection's sequence spaces start: as the protocol says, or in
/// tests just before they wrap ([`MptcpConfig::wrap_early`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SeqSpace {
    wrap_early: Option<u32>,
}

impl SeqSpace {
    pub fn new(cfg: &MptcpConfig) -> Self {
        SeqSpace { wrap_early: cfg.wrap_early }
    }

    /// What relative subflow sequence numbers are offset by (0 but in tests).
    pub fn ssn_off(self) -> u32 {
        self.wrap_early.map_or(0, |n| 0u32.wrapping_sub(n))
    }

    /// The IDSN of `key`'s owner: the low 64 bits of SHA-256 of the key
    /// (RFC 8684 3.1), or in tests a number just before 2^64.
    pub fn idsn(self, key: u64) -> DataSeq {
        let idsn = crypto::idsn(key);
        DataSeq(match self.wrap_early {
            Some(n) => 0u64.wrapping_sub(2 * n as u64 + idsn % 4096),
            None => idsn,
        })
    }
}
