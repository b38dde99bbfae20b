//! The two simplest schedulers of upstream Linux's BPF scheduler
//! selftests (`tools/testing/selftests/bpf/progs/mptcp_bpf_first.c` and
//! `mptcp_bpf_bkup.c`): they pin the data on one subflow, which is what
//! their tests check, and make a baseline a scheduler comparison needs.
//!
//! * `first` sends everything on the connection's first subflow
//!   (`msk->first`; here the lowest index, which is the initial subflow
//!   while it lives) and waits while that one cannot send.
//! * `backup` sends on the first subflow, in opening order, that is not a
//!   backup; with none, nothing is sent.

use super::{ConnView, Pick, Scheduler, SubflowView, SEND_BURST_SIZE};

/// Which subflow the BPF test scheduler pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// `bpf_first`.
    First,
    /// `bpf_bkup`.
    FirstNonBackup,
}

/// `bpf_first` or `bpf_bkup`.
#[derive(Clone, Debug)]
pub struct PinScheduler {
    pin: Pin,
}

impl PinScheduler {
    /// A scheduler that pins `pin`.
    pub fn new(pin: Pin) -> Self {
        PinScheduler { pin }
    }
}

impl Scheduler for PinScheduler {
    fn name(&self) -> &'static str {
        match self.pin {
            Pin::First => "first",
            Pin::FirstNonBackup => "backup",
        }
    }

    fn select(&mut self, subflows: &[SubflowView], _conn: &ConnView) -> Option<Pick> {
        let v = match self.pin {
            Pin::First => subflows.iter().min_by_key(|v| v.id)?,
            Pin::FirstNonBackup => subflows.iter().filter(|v| v.available && !v.backup).min_by_key(|v| v.id)?,
        };
        (v.available && v.send_space > 0).then(|| Pick::one(v.id, SEND_BURST_SIZE))
    }

    fn on_pushed(&mut self, _id: usize, _bytes: usize, _subflows: &[SubflowView]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sf(id: usize, backup: bool) -> SubflowView {
        SubflowView { id, backup, send_space: 1000, ..SubflowView::default() }
    }

    #[test]
    fn first_pins_the_lowest_index_and_waits_for_it() {
        let mut s = PinScheduler::new(Pin::First);
        let mut v = [sf(3, false), sf(1, true), sf(2, false)];
        assert_eq!(s.select(&v, &ConnView::default()).map(|p| p.id), Some(1));
        v[1].send_space = 0;
        assert_eq!(s.select(&v, &ConnView::default()), None);
    }

    #[test]
    fn backup_pins_the_first_non_backup_subflow() {
        let mut s = PinScheduler::new(Pin::FirstNonBackup);
        let mut v = [sf(0, true), sf(1, false), sf(2, false)];
        assert_eq!(s.select(&v, &ConnView::default()).map(|p| p.id), Some(1));
        v[1].available = false;
        assert_eq!(s.select(&v, &ConnView::default()).map(|p| p.id), Some(2));
        v[2].backup = true;
        assert_eq!(s.select(&v, &ConnView::default()), None);
    }
}
