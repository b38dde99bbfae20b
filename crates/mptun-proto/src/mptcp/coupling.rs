//! Coupled congestion control at the connection: before a subflow whose
//! controller couples ([`mptun_cc::coupled`]) processes input or a
//! timeout, it is handed every subflow of its connection.

use super::Connection;
use mptun_cc::coupled::Coupling;

impl Connection {
    /// Gives subflow `idx`'s controller the connection's subflows, if it
    /// reads them. Only while the connection speaks MPTCP with mappings:
    /// plain or fallen back, the one subflow is a single-path flow.
    pub(super) fn couple(&mut self, idx: usize) {
        if !self.mode.is_mapped() || !self.subflows.get(idx).is_some_and(|s| s.tcp.is_coupled()) {
            return;
        }
        self.coupling.clear();
        let mut me = None;
        for (i, s) in self.subflows.iter() {
            if i == idx {
                me = Some(self.coupling.len());
            }
            self.coupling.push(s.tcp.coupling_view(s.usable()));
        }
        if let Some(slot) = self.subflows.get_mut(idx) {
            slot.tcp.set_coupling(&Coupling { subflows: &self.coupling, me });
        }
    }
}
