//! Linux's default scheduler (`mptcp_subflow_get_send`,
//! net/mptcp/protocol.c): among the subflows that can take data, the one
//! whose queue would drain soonest (the smallest linger time, queued bytes
//! over the subflow's average pacing rate), active subflows before backup
//! ones, a burst of at most 64 KiB; after each burst the chosen subflow's
//! `avg_pacing_rate` moves towards its current pacing rate, weighted by
//! bytes, as the kernel does.

use super::*;

/// Linux's default scheduler (`mptcp_subflow_get_send`).
#[derive(Clone, Debug, Default)]
pub struct DefaultScheduler {
    /// `subflow->avg_pacing_rate`, indexed by subflow id.
    avg_pacing_rate: Vec<u64>,
}

impl DefaultScheduler {
    /// A scheduler with no pacing-rate history yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn avg(&mut self, v: &SubflowView) -> u64 {
        if self.avg_pacing_rate.len() <= v.id {
            self.avg_pacing_rate.resize(v.id + 1, 0);
        }
        let a = &mut self.avg_pacing_rate[v.id];
        if *a == 0 {
            *a = v.pacing_rate;
        }
        *a
    }
}

impl Scheduler for DefaultScheduler {
    fn name(&self) -> &'static str {
        "default"
    }

    fn select(&mut self, subflows: &[SubflowView], _conn: &ConnView) -> Option<Pick> {
        // Index 0: active subflows, 1: backup ones; (linger, id) of the best.
        let mut best: [Option<(u128, usize)>; 2] = [None, None];
        let mut nr_active = 0;
        for v in subflows.iter().filter(|v| v.available) {
            nr_active += !v.backup as usize;
            let rate = self.avg(v).max(1);
            // Linux: div_u64((u64)ssk->sk_wmem_queued << 32, pace)
            let linger = ((v.queued as u128) << 32) / rate as u128;
            let slot = &mut best[v.backup as usize];
            if slot.is_none_or(|(l, _)| linger < l) {
                *slot = Some((linger, v.id));
            }
        }
        // Backup subflows only when no active one exists at all; a full
        // active subflow means "wait", not "spill onto the backup".
        let (_, id) = if nr_active > 0 { best[0]? } else { best[1]? };
        let chosen = subflows.iter().find(|v| v.id == id)?;
        if chosen.send_space == 0 {
            return None;
        }
        Some(Pick::one(id, SEND_BURST_SIZE))
    }

    fn on_pushed(&mut self, id: usize, bytes: usize, subflows: &[SubflowView]) {
        let Some(v) = subflows.iter().find(|v| v.id == id) else { return };
        let avg = self.avg(v) as u128;
        let wmem = v.queued as u128;
        let burst = bytes as u128;
        if burst + wmem == 0 {
            return;
        }
        // Linux: avg = (avg * wmem + pacing_rate * burst) / (burst + wmem)
        let new = (avg * wmem + v.pacing_rate as u128 * burst) / (burst + wmem);
        self.avg_pacing_rate[id] = new.min(u64::MAX as u128) as u64;
    }

    fn avg_pacing_rate(&self, id: usize) -> Option<u64> {
        self.avg_pacing_rate.get(id).copied()
    }

    fn forget(&mut self, id: usize) {
        // 0: the next subflow with this id starts from its own pacing rate.
        if let Some(a) = self.avg_pacing_rate.get_mut(id) {
            *a = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: usize, queued: usize, rate: u64) -> SubflowView {
        SubflowView {
            id,
            queued,
            send_space: 100_000,
            pacing_rate: rate,
            cwnd: 10,
            cwnd_limited: true,
            mss: 1000,
            ..SubflowView::default()
        }
    }

    #[test]
    fn picks_the_smallest_linger_time_not_the_emptiest_queue() {
        let mut s = DefaultScheduler::new();
        // 100 kB at 10 MB/s lingers 10 ms; 20 kB at 1 MB/s lingers 20 ms.
        let v = [view(0, 100_000, 10_000_000), view(1, 20_000, 1_000_000)];
        assert_eq!(s.select(&v, &ConnView::default()).unwrap().id, 0);
    }

    #[test]
    fn backup_only_when_no_active_subflow_exists() {
        let mut s = DefaultScheduler::new();
        let mut b = view(1, 0, 10_000_000);
        b.backup = true;
        let mut a = view(0, 1_000_000, 1_000);
        assert_eq!(s.select(&[a, b], &ConnView::default()).unwrap().id, 0);
        // A full active subflow means wait, as in Linux: no spill onto the backup.
        a.send_space = 0;
        assert!(s.select(&[a, b], &ConnView::default()).is_none());
        a.available = false;
        assert_eq!(s.select(&[a, b], &ConnView::default()).unwrap().id, 1);
        b.available = false;
        assert!(s.select(&[a, b], &ConnView::default()).is_none());
    }

    #[test]
    fn avg_pacing_rate_is_the_byte_weighted_mean() {
        let mut s = DefaultScheduler::new();
        let v = [view(0, 30_000, 1_000_000)];
        s.select(&v, &ConnView::default());
        assert_eq!(s.avg_pacing_rate(0), Some(1_000_000));
        let v2 = [view(0, 30_000, 4_000_000)];
        s.on_pushed(0, 10_000, &v2);
        // (1e6 * 30000 + 4e6 * 10000) / 40000 = 1.75e6
        assert_eq!(s.avg_pacing_rate(0), Some(1_750_000));
    }
}
