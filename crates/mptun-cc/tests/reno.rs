//! NewReno driven alone with synthetic ACKs.

mod common;

use common::{Path, TestSender};
use mptun_cc::{new_controller, Algorithm, Duration};

const RTT: Duration = Duration::from_millis(100);

fn reno(cwnd: u32) -> TestSender {
    TestSender::new(new_controller(Algorithm::Reno), cwnd, Path::fixed(RTT))
}

/// cwnd at the end of each of the first `rounds` RTTs.
fn per_round(s: &mut TestSender, rounds: u32) -> Vec<u32> {
    let start = s.now;
    (1..=rounds)
        .map(|r| {
            let end = start + RTT * r;
            s.run_until(end, |_| false);
            s.cwnd_at(end)
        })
        .collect()
}

#[test]
fn slow_start_doubles_every_rtt() {
    let mut s = reno(10);
    assert_eq!(per_round(&mut s, 5), vec![20, 40, 80, 160, 320]);
}

#[test]
fn slow_start_hands_over_to_additive_increase_at_ssthresh() {
    let mut s = reno(10);
    s.state.ssthresh = 30;
    // 10 -> 20 -> 30 (ssthresh reached after 10 of 20 ACKs; the other 10 go to AI: 10/30).
    let cwnds = per_round(&mut s, 3);
    assert_eq!(cwnds[0], 20);
    assert_eq!(cwnds[1], 30);
    assert_eq!(s.state.ssthresh, 30);
    assert_eq!(cwnds[2], 31);
}

#[test]
fn additive_increase_is_one_packet_per_rtt() {
    let mut s = reno(20);
    s.state.ssthresh = 20;
    let cwnds = per_round(&mut s, 10);
    assert_eq!(cwnds, (21..=30).collect::<Vec<_>>());
}

#[test]
fn loss_halves_the_window() {
    let mut s = reno(10);
    per_round(&mut s, 3);
    assert_eq!(s.state.cwnd, 80);
    s.loss();
    assert_eq!((s.state.cwnd, s.state.ssthresh), (40, 40));
    s.loss();
    assert_eq!(s.state.cwnd, 20);
    // Floor of two packets.
    for _ in 0..10 {
        s.loss();
    }
    assert_eq!(s.state.cwnd, 2);
}
