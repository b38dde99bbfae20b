//! The subflow's side of coupled congestion control: what its siblings'
//! controllers see of it ([`SubflowCc`]), the loss interval it keeps for
//! them (OLIA's `l_r`), and the hand-over of its connection's
//! [`Coupling`] to its own controller.

use super::Subflow;
use mptun_cc::coupled::{Coupling, SubflowCc};

impl Subflow {
    /// A loss event (entering recovery, or the first RTO of a series):
    /// the bytes acknowledged since the previous one become the last
    /// interval, unless nothing was acknowledged in between
    /// (`mptcp_olia_set_state`).
    pub(super) fn mark_loss(&mut self) {
        if self.bytes_acked != self.loss_marks[1] {
            self.loss_marks = [self.loss_marks[1], self.bytes_acked];
        }
    }

    /// Bytes acknowledged between the last two losses, or since the last
    /// one if that is more.
    pub fn loss_interval(&self) -> u64 {
        let [before, last] = self.loss_marks;
        (self.bytes_acked - last).max(last - before)
    }

    /// What a coupled controller of this subflow's connection sees of it;
    /// `usable`: the connection lets it carry data now.
    pub fn coupling_view(&self, usable: bool) -> SubflowCc {
        SubflowCc {
            cwnd: self.ccs.cwnd,
            ssthresh: self.ccs.ssthresh,
            srtt: self.srtt(),
            in_flight: self.packets_in_flight(),
            mss: self.mss(0),
            ca_state: self.ca_state,
            loss_interval: self.loss_interval(),
            usable,
        }
    }

    /// Whether its controller reads its connection's subflows.
    pub fn is_coupled(&self) -> bool {
        self.cc.is_coupled()
    }

    /// Hands the connection's subflows to the controller (before input or
    /// a timeout of this subflow).
    pub fn set_coupling(&mut self, coupling: &Coupling<'_>) {
        self.cc.set_coupling(coupling);
    }
}
