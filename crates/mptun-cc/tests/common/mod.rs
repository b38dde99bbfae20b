//! A controller-only test sender in the style of quiche's `TestSender`: a
//! bulk flow over one FIFO bottleneck, driven event by event with a virtual
//! clock, calling the controller the way Linux's `tcp_ack` does. No wall
//! clock, no randomness: every run is identical.
#![allow(dead_code)]

use std::collections::VecDeque;

use mptun_cc::{AckSample, CaEvent, CaState, CcState, CongestionControl, Duration, Instant};

/// The network the flow runs over.
#[derive(Clone, Copy, Debug)]
pub struct Path {
    /// Propagation delay there and back, without queueing or serialization.
    pub base_rtt: Duration,
    /// Bottleneck serialization time per packet; zero for an infinitely fast link.
    pub serialization: Duration,
}

impl Path {
    /// A path with a bottleneck of `mbit` Mbit/s for `packet_bytes`-byte packets.
    pub fn with_bottleneck(base_rtt: Duration, mbit: u64, packet_bytes: u64) -> Path {
        Path { base_rtt, serialization: Duration::from_nanos(packet_bytes * 8 * 1000 / mbit) }
    }
    /// No bottleneck: every ACK returns exactly `base_rtt` after its packet left.
    pub fn fixed(base_rtt: Duration) -> Path {
        Path { base_rtt, serialization: Duration::ZERO }
    }
}

struct InFlight {
    seq: u32,
    sent: Instant,
    acked_at: Instant,
}

/// One bulk sender (always cwnd-limited), sequence numbers in packets.
pub struct TestSender<C: CongestionControl = Box<dyn CongestionControl>> {
    pub cc: C,
    pub state: CcState,
    pub now: Instant,
    pub path: Path,
    pub snd_una: u32,
    pub snd_nxt: u32,
    flight: VecDeque<InFlight>,
    link_free: Instant,
    /// (time of each ACK, cwnd after it).
    pub log: Vec<(Instant, u32)>,
}

impl<C: CongestionControl> TestSender<C> {
    pub fn new(cc: C, initial_cwnd: u32, path: Path) -> TestSender<C> {
        let mut s = TestSender {
            cc,
            state: CcState::new(initial_cwnd),
            now: Instant::from_millis(1),
            path,
            snd_una: 0,
            snd_nxt: 0,
            flight: VecDeque::new(),
            link_free: Instant::ZERO,
            log: Vec::new(),
        };
        let now = s.now;
        s.cc.init(&mut s.state, now);
        s
    }

    fn in_flight(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }

    /// Send as much as cwnd allows at `now`.
    pub fn send(&mut self) {
        while self.in_flight() < self.state.cwnd {
            let depart = self.now.max(self.link_free) + self.path.serialization;
            self.link_free = depart;
            let acked_at = depart + self.path.base_rtt;
            self.cc.data_sent(self.now);
            self.flight.push_back(InFlight { seq: self.snd_nxt, sent: self.now, acked_at });
            self.snd_nxt = self.snd_nxt.wrapping_add(1);
        }
    }

    /// Process the next ACK (advancing the clock to it) and refill the window.
    /// Returns false if nothing is in flight.
    pub fn step(&mut self) -> bool {
        self.send();
        let Some(p) = self.flight.pop_front() else { return false };
        self.now = self.now.max(p.acked_at);
        let in_flight = self.in_flight();
        self.snd_una = p.seq.wrapping_add(1);
        let sample = AckSample {
            pkts_acked: 1,
            rtt: Some(self.now - p.sent),
            snd_una: self.snd_una,
            snd_nxt: self.snd_nxt,
            in_flight,
        };
        let now = self.now;
        self.cc.pkts_acked(&mut self.state, &sample, now);
        self.cc.cong_avoid(&mut self.state, self.snd_una, 1, now);
        self.log.push((now, self.state.cwnd));
        self.send();
        true
    }

    /// Process ACKs until `cond` holds or the next ACK would come after
    /// `deadline` (then the clock stops at `deadline`).
    pub fn run_until(&mut self, deadline: Instant, mut cond: impl FnMut(&TestSender<C>) -> bool) {
        loop {
            if cond(self) {
                return;
            }
            self.send();
            let next = self.flight.front().expect("bulk sender always has data in flight").acked_at;
            if next > deadline {
                self.now = self.now.max(deadline);
                return;
            }
            self.step();
        }
    }

    /// Run for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let deadline = self.now + d;
        self.run_until(deadline, |_| false);
    }

    /// A fast-retransmit loss episode as Linux resolves it: ssthresh from
    /// the controller, cwnd reduced to it when recovery completes (PRR ends
    /// at ssthresh), back to Open.
    pub fn loss(&mut self) {
        let now = self.now;
        self.cc.set_state(&mut self.state, CaState::Recovery, now);
        self.state.ssthresh = self.cc.ssthresh(&self.state);
        self.state.cwnd = self.state.ssthresh;
        self.state.cwnd_cnt = 0;
        self.cc.set_state(&mut self.state, CaState::Open, now);
    }

    /// A retransmission timeout as Linux's `tcp_enter_loss` orders it:
    /// ssthresh from the controller first, then `CA_EVENT_LOSS`, cwnd to one
    /// packet and the switch to `CA_Loss` (which resets CUBIC). The flow goes
    /// back to Open right away (no real loss in this model).
    pub fn rto(&mut self) {
        let now = self.now;
        self.state.ssthresh = self.cc.ssthresh(&self.state);
        self.cc.cwnd_event(&mut self.state, CaEvent::Loss, now);
        self.state.cwnd = 1;
        self.state.cwnd_cnt = 0;
        self.cc.set_state(&mut self.state, CaState::Loss, now);
        self.cc.set_state(&mut self.state, CaState::Open, now);
    }

    /// The cwnd in force at time `t` according to the log.
    pub fn cwnd_at(&self, t: Instant) -> u32 {
        let i = self.log.partition_point(|&(at, _)| at <= t);
        assert!(i > 0, "no ACK before {t:?}");
        self.log[i - 1].1
    }
}
