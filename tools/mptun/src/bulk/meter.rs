//! Metering of a running test: the connection sampled every interval into
//! iperf3's interval records (per subflow bytes, retransmits, cwnd, srtt),
//! printed as they close, and the progress bar.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Settings;
use crate::conn::{Conn, SubflowProbe};
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
    pub(super) fn new(settings: Settings, sender: bool, total: Option<u64>, conn: &Conn) -> Meter {
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
            start: Instant::now(),
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

    /// The last sample, when the data has ended: a remainder shorter than
    /// a tenth of the interval is not reported as an interval of its own
    /// (as iperf3: `-t 3` gives three), its bytes are in the end sums.
    pub(super) fn finish(&mut self, conn: &Conn, bytes: u64) {
        let t = self.elapsed();
        if t - self.last_t >= self.settings.interval.as_secs_f64() / 10.0 || self.intervals.is_empty() {
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
        self.print(&report::interval_lines(&iv));
        self.intervals.push(iv);
        self.last_t = t;
        self.last_bytes = bytes;
        self.progress(bytes);
    }
}
