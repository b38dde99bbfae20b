//! Pacing: spreading a window's worth of segments over the RTT instead of
//! sending them in a line-rate burst that overflows shallow queues.
//!
//! Two models of Linux's, so experiments can compare them:
//! * [`EdtPacer`]: the earliest-departure-time model of Linux ≥ 4.20 (TCP
//!   itself stamps every segment with `tcp_wstamp_ns` and advances it by
//!   `len / rate` after each send).
//! * [`QuantumPacer`]: pre-4.20 `sch_fq`, where the qdisc let a flow send a
//!   quantum of credit back to back and then throttled it for
//!   `max(len, quantum) / rate` — the artifact that inflated RPC latencies.
//!
//! Polling contract, identical for every [`Pacer`]: for its next segment the
//! subflow asks `departure(now)`; if that is later than `now` it arms a timer
//! for it and sends nothing; when `now >= departure(now)` it transmits and
//! then calls `on_send(now, len)`. Pure ACKs are not paced and are not
//! reported. The rate is recomputed by the subflow (e.g. with
//! [`PacingRateConfig::rate`]) after every ACK and passed in with `set_rate`.

use core::fmt;
use core::str::FromStr;

use crate::{Duration, Instant, ParseError};

const NSEC_PER_SEC: u128 = 1_000_000_000;

/// A pacing discipline for one subflow.
pub trait Pacer: Send + fmt::Debug {
    /// Earliest time the next data segment may leave (at least `now`).
    fn departure(&self, now: Instant) -> Instant;
    /// A data segment of `len` bytes was sent at `now`.
    fn on_send(&mut self, now: Instant, len: usize);
    /// New pacing rate in bytes per second; `u64::MAX` disables pacing.
    fn set_rate(&mut self, bytes_per_sec: u64);
    /// The pacing rate in force, bytes per second.
    fn rate(&self) -> u64;
}

/// `len` bytes at `rate` bytes/s, in nanoseconds.
fn serialization_ns(len: u64, rate: u64) -> u64 {
    if rate == 0 {
        return u64::MAX;
    }
    u64::try_from(u128::from(len) * NSEC_PER_SEC / u128::from(rate)).unwrap_or(u64::MAX)
}

/// Linux `tcp_update_pacing_rate` parameters (`net.ipv4.tcp_pacing_ss_ratio`,
/// `tcp_pacing_ca_ratio`, `SO_MAX_PACING_RATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacingRateConfig {
    /// Percent of cwnd/srtt while well inside slow start (cwnd < ssthresh/2),
    /// so pacing does not hold back the doubling.
    pub ss_ratio: u32,
    /// Percent of cwnd/srtt otherwise; headroom so pacing does not become the
    /// bottleneck in congestion avoidance.
    pub ca_ratio: u32,
    /// Upper bound in bytes per second (`sk_max_pacing_rate`); `u64::MAX` = none.
    pub max_pacing_rate: u64,
}

impl Default for PacingRateConfig {
    fn default() -> Self {
        PacingRateConfig { ss_ratio: 200, ca_ratio: 120, max_pacing_rate: u64::MAX }
    }
}

impl PacingRateConfig {
    /// Linux `tcp_update_pacing_rate`: `ratio% × mss × max(cwnd, packets_out)
    /// / srtt`, capped at `max_pacing_rate`, in bytes per second. The kernel
    /// divides by `srtt_us` in 1/8 µs; we use the same units so results match
    /// it to the byte. Without an RTT sample there is nothing to pace by:
    /// the result is `max_pacing_rate` (unpaced if unset), as the kernel's
    /// undivided value is effectively infinite.
    pub fn rate(&self, mss: u32, cwnd: u32, ssthresh: u32, packets_out: u32, srtt: Option<Duration>) -> u64 {
        let Some(srtt) = srtt else { return self.max_pacing_rate };
        let ratio = if cwnd < ssthresh / 2 { self.ss_ratio } else { self.ca_ratio };
        // mss × (USEC_PER_SEC / 100) << 3 × ratio × cwnd / srtt_us(×8).
        let rate = u128::from(mss) * ((1_000_000 / 100) << 3) * u128::from(ratio) * u128::from(cwnd.max(packets_out));
        let srtt_us8 = (srtt.as_nanos() * 8 / 1000).max(1);
        u64::try_from(rate / srtt_us8).unwrap_or(u64::MAX).min(self.max_pacing_rate)
    }
}

/// Earliest-departure-time pacer (Linux `tcp_wstamp_ns`,
/// `tcp_update_skb_after_send`).
///
/// Each send moves the next departure `len / rate` past the *current*
/// segment's departure, which is `max(next, now)`: an idle flow does not
/// bank credit for a burst later. Like the kernel (and the original
/// `sch_fq`), the first 10 data segments of a connection are not paced, and a
/// send that happens late (timer or scheduling jitter) gets up to half a
/// segment's gap back, so average throughput is not lost to OS latency.
#[derive(Clone, Copy, Debug)]
pub struct EdtPacer {
    rate: u64,
    next: Instant,
    data_segs_out: u64,
    unpaced_segments: u64,
}

impl Default for EdtPacer {
    fn default() -> Self {
        EdtPacer::new()
    }
}

impl EdtPacer {
    /// Unpaced until `set_rate`; first 10 segments unpaced as in Linux.
    pub fn new() -> Self {
        EdtPacer { rate: u64::MAX, next: Instant::ZERO, data_segs_out: 0, unpaced_segments: 10 }
    }

    /// Change how many initial data segments go out unpaced (Linux: 10).
    pub fn with_unpaced_segments(mut self, n: u64) -> Self {
        self.unpaced_segments = n;
        self
    }

    /// `tcp_wstamp_ns`: departure time of the next segment if sent no earlier.
    pub fn next_departure(&self) -> Instant {
        self.next
    }

    /// The pacing rate, bytes per second.
    pub fn rate_bytes_per_sec(&self) -> u64 {
        self.rate
    }

    /// Data segments sent so far (`tp->data_segs_out`).
    pub fn data_segs_out(&self) -> u64 {
        self.data_segs_out
    }
}

impl Pacer for EdtPacer {
    fn departure(&self, now: Instant) -> Instant {
        self.next.max(now)
    }

    fn on_send(&mut self, now: Instant, len: usize) {
        let prior = self.next;
        // tcp_transmit_skb: tcp_wstamp_ns = max(tcp_wstamp_ns, tcp_clock_cache).
        self.next = self.next.max(now);
        self.data_segs_out += 1;
        if self.rate != u64::MAX && self.rate != 0 && self.data_segs_out >= self.unpaced_segments {
            let mut len_ns = serialization_ns(len as u64, self.rate);
            // "take into account OS jitter": we sent late by `credit`.
            let credit = (self.next - prior).as_nanos();
            len_ns -= (len_ns / 2).min(u64::try_from(credit).unwrap_or(u64::MAX));
            self.next += Duration::from_nanos(len_ns);
        }
    }

    fn set_rate(&mut self, bytes_per_sec: u64) {
        self.rate = bytes_per_sec;
    }

    fn rate(&self) -> u64 {
        self.rate
    }
}

/// `sch_fq` parameters for [`QuantumPacer`]; `for_mtu` gives fq's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantumConfig {
    /// `quantum`: credit refilled per round, 2 × MTU.
    pub quantum: u32,
    /// `initial_quantum`: credit of a new flow, 10 × MTU.
    pub initial_quantum: u32,
    /// `low_rate_threshold` in bytes/s (fq: 550 kbit/s): below it every
    /// packet is paced individually, without quantum bursts.
    pub low_rate_threshold: u64,
    /// `flow_refill_delay` (40 ms): a flow idle this long gets at least one
    /// quantum of credit back.
    pub flow_refill_delay: Duration,
    /// Longest throttle for one packet (fq clamps at 1 s: the rate may change).
    pub max_delay: Duration,
}

impl QuantumConfig {
    /// fq defaults for a device MTU (`psched_mtu` = MTU + link header; pass
    /// that if it matters).
    pub fn for_mtu(mtu: u32) -> Self {
        QuantumConfig {
            quantum: 2 * mtu,
            initial_quantum: 10 * mtu,
            low_rate_threshold: 550_000 / 8,
            flow_refill_delay: Duration::from_millis(40),
            max_delay: Duration::from_secs(1),
        }
    }
}

/// Pre-EDT `sch_fq` flow pacing (Linux ≤ 4.19 `fq_dequeue`), one flow.
///
/// Per dequeue of a packet of length L: a flow whose credit is exhausted
/// first gets `quantum` more (fq does this when the round-robin returns to
/// it; with one flow that is immediately); it then waits for
/// `time_next_packet`, is charged L, and — above the low-rate threshold —
/// is only throttled once its credit is gone, for `max(L, quantum) / rate`
/// (so it sends in bursts of a quantum); below the threshold credit is
/// zeroed and every packet waits `L / rate`. Late dequeues get up to half the
/// gap back (fq's "account for schedule/timers drifts", Linux 4.13).
#[derive(Clone, Copy, Debug)]
pub struct QuantumPacer {
    cfg: QuantumConfig,
    rate: u64,
    credit: i64,
    time_next_packet: Option<Instant>,
    last_send: Option<Instant>,
}

impl QuantumPacer {
    /// A new flow with `initial_quantum` of credit; unpaced until `set_rate`.
    pub fn new(cfg: QuantumConfig) -> Self {
        QuantumPacer {
            cfg,
            rate: u64::MAX,
            credit: i64::from(cfg.initial_quantum),
            time_next_packet: None,
            last_send: None,
        }
    }

    /// Remaining credit in bytes (may be negative).
    pub fn credit(&self) -> i64 {
        self.credit
    }
}

impl Pacer for QuantumPacer {
    fn departure(&self, now: Instant) -> Instant {
        match self.time_next_packet {
            Some(t) => t.max(now),
            None => now,
        }
    }

    fn on_send(&mut self, now: Instant, len: usize) {
        // fq_enqueue on a detached flow: refill after flow_refill_delay idle.
        if let Some(last) = self.last_send {
            // Idle since the later of the last send and the end of its throttle.
            if now - self.departure(last) > self.cfg.flow_refill_delay {
                self.credit = self.credit.max(i64::from(self.cfg.quantum));
            }
        }
        self.last_send = Some(now);
        // fq_dequeue: an exhausted flow goes to the back of old_flows with
        // another quantum; alone, it comes straight back.
        if self.credit <= 0 {
            let q = i64::from(self.cfg.quantum.max(1));
            self.credit += (-self.credit / q + 1) * q;
        }
        // No real packet is 4 GiB; clamping keeps the credit arithmetic exact.
        let len = (len as u64).min(u64::from(u32::MAX));
        self.credit -= len as i64;
        if self.rate == u64::MAX {
            return;
        }
        let plen = if self.rate <= self.cfg.low_rate_threshold {
            self.credit = 0;
            len
        } else {
            if self.credit > 0 {
                return;
            }
            len.max(u64::from(self.cfg.quantum))
        };
        let max = u64::try_from(self.cfg.max_delay.as_nanos()).unwrap_or(u64::MAX);
        let mut delay = serialization_ns(plen, self.rate).min(max);
        if let Some(t) = self.time_next_packet {
            let late = u64::try_from((now - t).as_nanos()).unwrap_or(u64::MAX);
            delay -= (delay / 2).min(late);
        }
        self.time_next_packet = Some(now + Duration::from_nanos(delay));
    }

    fn set_rate(&mut self, bytes_per_sec: u64) {
        self.rate = bytes_per_sec;
    }

    fn rate(&self) -> u64 {
        self.rate
    }
}

/// No pacing: every segment may leave as soon as cwnd allows.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPacer {
    rate: u64,
}

impl Pacer for NoPacer {
    fn departure(&self, now: Instant) -> Instant {
        now
    }
    fn on_send(&mut self, _now: Instant, _len: usize) {}
    fn set_rate(&mut self, bytes_per_sec: u64) {
        self.rate = bytes_per_sec;
    }
    fn rate(&self) -> u64 {
        self.rate
    }
}

/// Which pacer a subflow uses (command-line and config name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PacerKind {
    /// [`EdtPacer`], the Linux ≥ 4.20 model.
    #[default]
    Edt,
    /// [`QuantumPacer`], pre-4.20 `sch_fq`.
    Quantum,
    /// [`NoPacer`].
    None,
}

impl FromStr for PacerKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.to_ascii_lowercase().as_str() {
            "edt" => Ok(PacerKind::Edt),
            "quantum" | "fq" => Ok(PacerKind::Quantum),
            "none" | "off" => Ok(PacerKind::None),
            _ => Err(ParseError::new("pacer", s, &["edt", "quantum", "none"])),
        }
    }
}

impl fmt::Display for PacerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PacerKind::Edt => "edt",
            PacerKind::Quantum => "quantum",
            PacerKind::None => "none",
        })
    }
}

/// Build a pacer; `mtu` sizes the quantum pacer's credits.
pub fn new_pacer(kind: PacerKind, mtu: u32) -> Box<dyn Pacer> {
    match kind {
        PacerKind::Edt => Box::new(EdtPacer::new()),
        PacerKind::Quantum => Box::new(QuantumPacer::new(QuantumConfig::for_mtu(mtu))),
        PacerKind::None => Box::new(NoPacer::default()),
    }
}
