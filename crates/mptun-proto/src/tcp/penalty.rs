//! Penalising a subflow for an MPTCP scheduler.
//!
//! The connection decides that this subflow holds the others up; the subflow
//! applies the cut through its congestion controller (not by writing its
//! window state behind the controller's back), from its own push path: the
//! equivalent of Linux doing it under the subflow socket lock.

use super::Subflow;
use mptun_cc::CongestionControl;

impl Subflow {
    /// Halves cwnd (and ssthresh past slow start, or always with
    /// `always_ssthresh`) through the controller's
    /// [`CongestionControl::penalise`].
    pub(crate) fn penalise(&mut self, always_ssthresh: bool) {
        self.cc.penalise(&mut self.ccs, always_ssthresh);
    }
}
