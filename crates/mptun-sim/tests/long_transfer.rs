//! Long transfers over a single subflow: every sequence counter wraps
//! (relative subflow sequence numbers in the DSS mappings, the 64-bit data
//! sequence, the connection's 32-bit send buffer index, the subflow's TCP
//! sequence), in both directions at once, with overflow checks on (the
//! test profile), so any non-modular arithmetic panics.

use mptun_sim::scenarios::{tcp_single, transfer};
use mptun_time::Duration;

fn run(size: u64, reverse_size: u64, wrap_early: Option<u32>) {
    let p = tcp_single::Params {
        size,
        rate_bps: 40_000_000_000,
        delay: Duration::from_micros(100),
        mptcp: true,
        cc: mptun_cc::Algorithm::Cubic,
        ..Default::default()
    };
    let mut t = tcp_single::spec(&p, None);
    t.reverse_size = reverse_size;
    t.client.mptcp.wrap_early = wrap_early;
    t.server.mptcp.wrap_early = wrap_early;
    let wall = std::time::Instant::now();
    let r = transfer::run(&t);
    eprintln!(
        "{size} bytes forward, {reverse_size} back: completed {} sha256 {} simulated {:.3} s, wall {:.1} s, {:.2} Gbit/s, retransmits {}, mode {}",
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
    assert_eq!(r.reverse_bytes_received, reverse_size);
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
    run(96 << 20, 96 << 20, Some(32 << 20));
}

/// The real thing, client to server: more than 4 GiB over one subflow with
/// no shift of the relative subflow sequence (it wraps after 4 GiB on its
/// own); the data sequence starts just below 2^64 and the TCP sequence just
/// below 2^32 (`wrap_early: Some(0)`). About 20-30 s of wall time at the
/// test profile's opt-level 2.
#[test]
fn long_transfer_over_4_gib_client_to_server() {
    run((4 << 30) + (128 << 20), 0, Some(0));
}

/// The same, server to client.
#[test]
fn long_transfer_over_4_gib_server_to_client() {
    run(0, (4 << 30) + (128 << 20), Some(0));
}

/// A client that sends nothing closes at once: its DATA_FIN must not take
/// the place of the MP_CAPABLE third ACK (the server would fall back to TCP
/// on a first ACK without MP_CAPABLE), with and without the wrap hooks.
#[test]
fn a_client_that_closes_at_once_does_not_make_the_server_fall_back() {
    run(0, 1 << 20, None);
    run(0, 1 << 20, Some(0));
}
