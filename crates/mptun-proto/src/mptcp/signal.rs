//! The MPTCP options of an incoming segment (Linux `mptcp_incoming_options`)
//! handed to the part of the connection each belongs to: DSS mappings to
//! the receive path (`rx.rs`), DATA_ACKs to the send path (`tx.rs`), MP_FAIL
//! and infinite mappings to `fallback.rs`, ADD_ADDR and RM_ADDR to the path
//! manager (`pm.rs`); MP_PRIO, MP_TCPRST and MP_FASTCLOSE, which only mark a
//! subflow or end the connection, are handled here.

use super::slot::JoinState;
use super::Connection;
use crate::seq::DataSeq;
use crate::tcp::Event;
use core::ops::ControlFlow;
use mptun_time::Instant;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::{crypto, MptcpOption};

impl Connection {
    /// The MPTCP options of a segment the subflow `idx` has processed, in
    /// the order they came, then what they imply together: subflows to
    /// withdrawn addresses close, and a client learns it is fully
    /// established. `Break` when MP_FASTCLOSE tore the connection down.
    pub(super) fn incoming_options(
        &mut self,
        now: Instant,
        idx: usize,
        opts: &OptionSummary,
        wnd: u64,
    ) -> ControlFlow<()> {
        let mut rm_ids: Vec<u8> = Vec::new();
        for o in &opts.mptcp {
            self.incoming_option(now, idx, o, wnd, &mut rm_ids)?;
        }
        self.close_removed(&rm_ids);
        // A client becomes fully established when the server shows it saw our
        // key: a DSS (sent only once it has our key), or an ADD_ADDR whose
        // HMAC, computed with our key, verifies. Not any other option: one
        // forged ADD_ADDR would make a client whose third ACK was lost (its
        // server fell back to TCP) take a plain-TCP peer for an MPTCP one.
        let hs = &mut self.hs;
        let proves = |o: &MptcpOption| match *o {
            MptcpOption::Dss { .. } => true,
            MptcpOption::AddAddr { echo: false, addr_id, addr, port, hmac } => hs
                .remote_key()
                .is_some_and(|rk| hmac == Some(crypto::add_addr_hmac(rk, hs.local_key(), addr_id, addr, port))),
            _ => false,
        };
        if !hs.server() && !hs.fully_established() && opts.mptcp.iter().any(proves) {
            hs.establish_fully();
        }
        ControlFlow::Continue(())
    }

    /// One MPTCP option's effect. RM_ADDR ids are collected into `rm_ids`
    /// and acted on once all options are seen.
    fn incoming_option(
        &mut self,
        now: Instant,
        idx: usize,
        o: &MptcpOption,
        wnd: u64,
        rm_ids: &mut Vec<u8>,
    ) -> ControlFlow<()> {
        let Some(slot) = self.subflows.get_mut(idx) else { return ControlFlow::Continue(()) };
        match o {
            MptcpOption::Dss { data_ack, mapping, data_fin } => {
                if let Some(a) = data_ack {
                    self.hs.on_peer_data_ack();
                    self.on_data_ack(a, wnd);
                }
                if let Some(m) = mapping {
                    return self.on_dss_mapping(idx, m, *data_fin);
                }
            }
            MptcpOption::MpCapable { sender_key: Some(_), data_len: Some(len), checksum, .. }
                if self.hs.server() && slot.mp.join() == JoinState::Initial =>
            {
                self.on_capable_mapping(idx, *len, *checksum);
            }
            MptcpOption::AddAddr { echo, addr_id, addr, port, hmac } => {
                let (local0, port0) = (slot.tcp.local().ip(), slot.tcp.remote().port());
                self.on_add_addr(now, local0, port0, (*echo, *addr_id, *addr, *port, *hmac));
            }
            MptcpOption::RmAddr { ids } => {
                self.counters.mptcp_rm_addr += 1;
                rm_ids.extend(ids.iter().copied());
                self.paths.forget_peer_announcements(ids);
                for &id in ids {
                    self.report_removed(id);
                }
            }
            MptcpOption::MpPrio { backup } => {
                self.counters.mptcp_mp_prio_rx += 1;
                // Reported when it changes: a peer repeating MP_PRIO on
                // every ACK must not flood the event queue.
                if slot.mp.set_backup(*backup) {
                    self.report_sub(crate::pm::PmEventKind::SubPriority, idx);
                }
            }
            MptcpOption::MpFastclose { receiver_key } if *receiver_key == self.hs.local_key() => {
                self.on_fastclose();
                return ControlFlow::Break(());
            }
            MptcpOption::MpTcpRst { reason, flags } => {
                self.counters.mptcp_mp_rst_rx += 1;
                slot.mp.on_peer_rst(*reason, *flags);
            }
            MptcpOption::MpFail { dsn } => self.on_mp_fail(idx, DataSeq(*dsn)),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// The options of an acceptable RST: its reason is counted, and an
    /// MP_FASTCLOSE with our key tears the connection down (RFC 8684 3.5
    /// lets it ride on a RST). `Break` when it did.
    pub(super) fn reset_options(&mut self, idx: usize, opts: &OptionSummary) -> ControlFlow<()> {
        for o in &opts.mptcp {
            match o {
                MptcpOption::MpTcpRst { reason, flags } => {
                    self.counters.mptcp_mp_rst_rx += 1;
                    if let Some(s) = self.subflows.get_mut(idx) {
                        s.mp.on_peer_rst(*reason, *flags);
                    }
                }
                MptcpOption::MpFastclose { receiver_key } if *receiver_key == self.hs.local_key() => {
                    self.on_fastclose();
                    return ControlFlow::Break(());
                }
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }

    /// MP_FASTCLOSE with our key: the peer aborted the whole connection;
    /// reset every subflow at once (RFC 8684 3.5).
    fn on_fastclose(&mut self) {
        self.counters.mptcp_mp_fastclose_rx += 1;
        for s in self.subflows.live_mut() {
            s.tcp.abort();
        }
        self.events.push_back(Event::Reset);
    }
}
