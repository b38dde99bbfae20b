//! Long transfers over a single subflow: every sequence counter wraps
//! (relative subflow sequence numbers in the DSS mappings, the 64-bit data
//! sequence, the connection's 32-bit send buffer index, the subflow's TCP
//! sequence), in both directions at once, with overflow checks on (the
//! test profile), so any non-modular arithmetic panics.

use mptun_sim::scenarios::{tcp_single, transfer};
use mptun_time::Duration;

fn run(size: u64, wrap_early: Option<u32>) {
    let p = tcp_single::Params {
        size,
        rate_bps: 40_000_000_000,
        delay: Duration::from_micros(100),
        mptcp: true,
        cc: mptun_cc::Algorithm::Cubic,
        ..Default::default()
    };
    let mut t = tcp_single::spec(&p, None);
    t.reverse_size = size;
    t.client.mptcp.wrap_early = wrap_early;
    t.server.mptcp.wrap_early = wrap_early;
    let wall = std::time::Instant::now();
    let r = transfer::run(&t);
    eprintln!(
        "{size} bytes each way: completed {} sha256 {} simulated {:.3} s, wall {:.1} s, {:.2} Gbit/s, retransmits {}, mode {}",
        r.completed,
        r.sha256_match,
        r.duration_s,
        wall.elapsed().as_secs_f64(),
        r.goodput_bps / 1e9,
        r.retransmits,
        r.client_mode
    );
    assert_eq!(r.client_mode, "mptcp");
    assert!(r.completed && r.sha256_match, "{r:?}");
    assert_eq!(r.bytes_received, size);
    assert_eq!(r.reverse_bytes_received, size);
    for c in [&r.client_counters, &r.server_counters] {
        assert_eq!(c.get("MPTcpExtDSSNotMatching").copied().unwrap_or(0), 0);
        assert_eq!(c.get("MPTcpExtDSSFallback").copied().unwrap_or(0), 0);
    }
}

/// 96 MiB each way with every counter started near its wrap
/// (`MptcpConfig::wrap_early`): relative ssn wraps after 32 MiB, the TCP
/// sequence after about 16 MiB, the data sequence (and the send buffer's
/// 32-bit index) after about 64 MiB.
#[test]
fn long_transfer_wraps_every_sequence_counter_both_directions() {
    run(96 << 20, Some(32 << 20));
}

/// The real thing: more than 4 GiB each way over one subflow, no hook for
/// the subflow sequence (about 5 minutes of wall time at opt-level 2: run
/// with `--ignored`).
#[test]
#[ignore]
fn long_transfer_over_4_gib_each_way() {
    run((4 << 30) + (256 << 20), Some(0));
}
