//! Metering of a running test: the connection sampled every interval into
//! iperf3's interval records (per subflow bytes, retransmits, cwnd, srtt),
//! printed as they close, and the progress bar.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Settings;
use crate::conn::Conn;
use crate::probe::SubflowProbe;
use crate::report::{self, Interval, IntervalStream, SubflowInterval, Sum};

/// Samples the connection every interval and keeps the intervals.
pub(super) struct Meter {
    pub(super) settings: Settings,
    pub(super) sender: bool,
    pub(super) start: Instant,
    pub(super) last_t: f64,
    pub(super) last_bytes: u64,
    pub(super) last_retrans: u64,
    pub(super) last_sf: HashMap<usize, u64>,
    pub(super) last_sf_retrans: HashMap<usize, u64>,
    pub(super) max_cwnd: HashMap<usize, u64>,
    pub(super) subflows_max: usize,
    pub(super) intervals: Vec<Interval>,
    pub(super) pb: Option<ProgressBar>,
}

impl Meter {
    /// A meter whose intervals count from `start`.
    pub(super) fn new(settings: Settings, sender: bool, total: Option<u64>, conn: &Conn, start: Instant) -> Meter {
        let pb = match total {
            Some(t) if settings.progress && !settings.json && std::io::stderr().is_terminal() => {
                let pb = ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr());
                if let Ok(style) =
                    ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}")
                {
                    pb.set_style(style);
                }
                Some(pb)
            }
            _ => None,
        };
        let probe = conn.probe();
        Meter {
            settings,
            sender,
            start,
            last_t: 0.0,
            last_bytes: 0,
            last_retrans: probe.retrans_segs,
            last_sf: HashMap::new(),
            last_sf_retrans: probe.subflows.iter().map(|s| (s.id, s.retrans_segs)).collect(),
            max_cwnd: HashMap::new(),
            subflows_max: probe.established(),
            intervals: Vec::new(),
            pb,
        }
    }

    pub(super) fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub(super) fn print(&self, text: &str) {
        if self.settings.json || text.is_empty() {
            return;
        }
        match &self.pb {
            Some(pb) => pb.suspend(|| print!("{text}")),
            None => print!("{text}"),
        }
    }

    pub(super) fn progress(&self, bytes: u64) {
        if let Some(pb) = &self.pb {
            pb.set_position(bytes);
        }
    }

    pub(super) fn sf_bytes(&self, s: &SubflowProbe) -> u64 {
        if self.sender {
            s.bytes_acked
        } else {
            s.bytes_received
        }
    }

    /// Closes the interval ending now with `bytes` moved in total.
    pub(super) fn sample(&mut self, conn: &Conn, bytes: u64) {
        let t = self.elapsed();
        if t - self.last_t < 0.005 {
            return;
        }
        self.close(conn, bytes, t);
    }

    /// How many intervals a timed test has (`-t 3 -i 1`: three, as iperf3).
    fn cap(&self) -> Option<usize> {
        let d = self.settings.duration?;
        Some((d.as_secs_f64() / self.settings.interval.as_secs_f64() - 1e-9).ceil().max(1.0) as usize)
    }

    /// The last sample, when the data has ended. In a timed test it goes
    /// into the last interval (acknowledgements and data still in flight
    /// when the time was up); otherwise a remainder shorter than a tenth
    /// of the interval is not an interval of its own (its bytes are in the
    /// end sums), as iperf3 reports.
    pub(super) fn finish(&mut self, conn: &Conn, bytes: u64) {
        let t = self.elapsed();
        let short = t - self.last_t < self.settings.interval.as_secs_f64() / 10.0;
        if self.cap().is_some() || !short || self.intervals.is_empty() {
            self.sample(conn, bytes);
        }
        if let Some(pb) = &self.pb {
            pb.finish_and_clear();
        }
    }

    fn close(&mut self, conn: &Conn, bytes: u64, t: f64) {
        let probe = conn.probe();
        self.subflows_max = self.subflows_max.max(probe.established());
        let secs = t - self.last_t;
        let mut subflows = Vec::new();
        for s in &probe.subflows {
            let b = self.sf_bytes(s);
            let prev = self.last_sf.insert(s.id, b).unwrap_or(0);
            let cwnd = s.cwnd * s.mss;
            let m = self.max_cwnd.entry(s.id).or_insert(0);
            *m = (*m).max(cwnd);
            let d = b.saturating_sub(prev);
            let prev_r = self.last_sf_retrans.insert(s.id, s.retrans_segs).unwrap_or(0);
            subflows.push(SubflowInterval {
                id: s.id,
                local: s.local.map_or("?".into(), |a| a.to_string()),
                remote: s.remote.map_or("?".into(), |a| a.to_string()),
                bytes: d,
                bits_per_second: d as f64 * 8.0 / secs,
                retransmits: s.retrans_segs.saturating_sub(prev_r),
                snd_cwnd: cwnd,
                snd_cwnd_packets: s.cwnd,
                rtt: s.srtt_us,
                rttvar: s.rttvar_us,
                penalized: s.penalized,
            });
        }
        let retr = probe.retrans_segs.saturating_sub(self.last_retrans);
        self.last_retrans = probe.retrans_segs;
        let sum =
            Sum::new(self.last_t, t, bytes.saturating_sub(self.last_bytes), self.sender.then_some(retr), self.sender);
        let first = probe.subflows.first();
        let stream = IntervalStream {
            socket: 5,
            sum: sum.clone(),
            snd_cwnd: self.sender.then(|| probe.subflows.iter().map(|s| s.cwnd * s.mss).sum()),
            snd_wnd: first.filter(|_| self.sender).map(|s| s.snd_wnd),
            rtt: first.map(|s| s.srtt_us),
            rttvar: first.map(|s| s.rttvar_us),
            pmtu: first.filter(|_| self.sender).map(|s| s.pmtu),
            subflows,
        };
        let iv = Interval { streams: vec![stream], sum };
        let full = self.cap().is_some_and(|n| self.intervals.len() >= n);
        match self.intervals.last_mut() {
            Some(last) if full => merge(last, iv, self.sender),
            _ => {
                self.print(&report::interval_lines(&iv));
                self.intervals.push(iv);
            }
        }
        self.last_t = t;
        self.last_bytes = bytes;
        self.progress(bytes);
    }
}

/// Extends `last` by `more`, the interval that followed it: bytes and
/// retransmissions add up, rates are over the joined span, the state
/// (cwnd, windows, RTT) is the later one's.
fn merge(last: &mut Interval, more: Interval, sender: bool) {
    let (Some(a), Some(b)) = (last.streams.first_mut(), more.streams.into_iter().next()) else { return };
    let retr = match (a.sum.retransmits, b.sum.retransmits) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    };
    let sum = Sum::new(a.sum.start, b.sum.end, a.sum.bytes + b.sum.bytes, retr, sender);
    let secs = sum.seconds.max(1e-9);
    let mut subflows = b.subflows;
    for s in &mut subflows {
        if let Some(old) = a.subflows.iter().find(|o| o.id == s.id) {
            s.bytes += old.bytes;
            s.retransmits += old.retransmits;
        }
        s.bits_per_second = s.bytes as f64 * 8.0 / secs;
    }
    // A subflow gone by the later sample keeps what it carried earlier.
    subflows.extend(a.subflows.iter().filter(|o| !subflows.iter().any(|s| s.id == o.id)).cloned().collect::<Vec<_>>());
    *a = IntervalStream { sum: sum.clone(), subflows, ..b };
    last.sum = sum;
}
#[cfg(test)]
mod tests {
    use super::*;

    fn iv(start: f64, end: f64, sf: &[(usize, u64)]) -> Interval {
        let bytes = sf.iter().map(|s| s.1).sum();
        let sum = Sum::new(start, end, bytes, Some(1), true);
        let subflows =
            sf.iter().map(|&(id, bytes)| SubflowInterval { id, bytes, retransmits: 1, ..Default::default() }).collect();
        let stream = IntervalStream {
            socket: 5,
            sum: sum.clone(),
            snd_cwnd: Some(end as u64),
            snd_wnd: None,
            rtt: None,
            rttvar: None,
            pmtu: None,
            subflows,
        };
        Interval { streams: vec![stream], sum }
    }

    #[test]
    fn a_merged_tail_adds_up() {
        let mut last = iv(2.0, 3.0, &[(0, 1000), (1, 500)]);
        merge(&mut last, iv(3.0, 3.5, &[(0, 500)]), true);
        let st = &last.streams[0];
        assert_eq!((last.sum.start, last.sum.end, last.sum.bytes, last.sum.retransmits), (2.0, 3.5, 2000, Some(2)));
        assert_eq!(st.sum, last.sum);
        assert_eq!(st.snd_cwnd, Some(3), "the later state");
        let by_id: Vec<(usize, u64, u64)> = st.subflows.iter().map(|s| (s.id, s.bytes, s.retransmits)).collect();
        assert_eq!(by_id, vec![(0, 1500, 2), (1, 500, 1)]);
        assert!((st.subflows[0].bits_per_second - 1500.0 * 8.0 / 1.5).abs() < 1e-6);
    }
}
