//! The MPTCP connection (RFC 8684 v1): the "msk" that owns the subflows.
//!
//! It keeps the connection-level send buffer (bytes from the oldest
//! unacknowledged data sequence number on) and the connection-level
//! reassembly queue, pushes bursts of data to subflows as the
//! [scheduler](crate::sched) picks them (each burst one DSS mapping), maps
//! what each subflow delivers back to data sequence numbers, and runs the
//! handshakes (MP_CAPABLE, MP_JOIN), DATA_ACK, DATA_FIN, ADD_ADDR and
//! reinjection. A connection whose peer does not speak MPTCP falls back to
//! plain TCP over its single subflow; the application sees no difference.
//!
//! The subflows stay plain [`Subflow`]s: this layer reaches them only through
//! their public API and the [`SegmentHook`] it passes to `poll_transmit`,
//! which adds the MPTCP option to each segment and advertises the
//! connection-level receive window.

mod close;
mod config;
mod coupling;
mod data_rx;
mod data_tx;
mod fallback;
mod handshake;
mod hook;
mod info;
mod pm;
mod rx;
mod signal;
mod slot;
mod stream;
mod subflow_rx;
mod subflow_tx;
mod timers;
mod tx;
mod userspace;

pub(crate) use crate::pm::JoinLimits;
pub use config::{ConnConfig, MptcpConfig};
pub use fallback::{FallbackReason, Mode};
pub(crate) use handshake::usable_cap_flags;
pub use info::{ConnectionInfo, SubflowInfo};

use crate::counters::Counters;
use crate::pm::JoinRequest;
use crate::pm::Paths;
use crate::sched::{new_scheduler, Scheduler};
use crate::seq::Seq;
use crate::tcp::{Event, Subflow, Transmit, Verdict};
use config::SeqSpace;
use data_rx::DataRx;
use data_tx::DataTx;
use fallback::ConnMode;
use handshake::Handshake;
use hook::Hook;
use mptun_time::Instant;
use mptun_wire::icmp::Unreachable;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::{crypto, TcpHeader};
use slot::{JoinState, Subflows};
use std::collections::VecDeque;
use std::net::SocketAddr;
use timers::TimerTable;

/// MP_TCPRST reason "MPTCP-specific error" (RFC 8684 3.6), what Linux sends
/// for a join it refuses (`MPTCP_RST_EMPTCP`).
pub const MPTCP_RST_EMPTCP: u8 = 1;

/// MP_TCPRST reason "middlebox interference" (RFC 8684 3.6): a DSS checksum failed.
pub const MPTCP_RST_EMIDDLEBOX: u8 = 6;

/// One application-visible connection: MPTCP with its subflows, or plain TCP.
///
/// Its state is grouped by concept, each group in the file that owns it:
/// the keys ([`handshake`]), MPTCP or fallen back ([`fallback`]), the
/// data-level send and receive sides ([`tx`], [`rx`]), the path manager's
/// state ([`paths`]), the subflows ([`slot`]) and the timers ([`timers`]).
pub struct Connection {
    cfg: ConnConfig,
    space: SeqSpace,
    mode: ConnMode,
    hs: Handshake,
    tx: DataTx,
    rx: DataRx,
    paths: Paths,
    pub(crate) subflows: Subflows,
    timers: TimerTable,
    sched: Box<dyn Scheduler>,
    /// Connection-level events for the application.
    events: VecDeque<Event>,
    /// Path-manager events (`userspace.rs`), once someone listens for them.
    pm_events: userspace::PmEvents,
    closed_event_sent: bool,
    /// What the connection counted itself (its subflows count their own).
    counters: Counters,
    /// The subflows as a coupled controller sees them (`coupling.rs`),
    /// kept to reuse its allocation.
    coupling: Vec<mptun_cc::coupled::SubflowCc>,
    /// Time of the last input, timer or output call: what application calls
    /// (which carry no time) act at.
    last_now: Instant,
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("mode", &self.mode)
            .field("subflows", &self.subflows.count())
            .field("snd_una", &self.tx.una())
            .field("rcv_nxt", &self.rx.nxt())
            .finish()
    }
}

impl Connection {
    fn new(cfg: ConnConfig, mode: ConnMode, server: bool, local_key: u64, now: Instant) -> Self {
        let space = SeqSpace::new(&cfg.mptcp);
        let tx_base = space.idsn(local_key) + 1;
        Connection {
            space,
            mode,
            hs: Handshake::new(server, local_key, cfg.mptcp.checksum),
            tx: DataTx::new(tx_base, cfg.mptcp.send_buffer.initial()),
            rx: DataRx::new(now, cfg.mptcp.recv_buffer.initial()),
            paths: Paths::new(now, cfg.mptcp.add_addr_timeout),
            subflows: Subflows::default(),
            timers: TimerTable::default(),
            sched: new_scheduler(cfg.mptcp.scheduler, cfg.mptcp.penalty),
            events: VecDeque::new(),
            pm_events: userspace::PmEvents::default(),
            closed_event_sent: false,
            counters: Counters::default(),
            coupling: Vec::new(),
            last_now: now,
            cfg,
        }
    }

    // ------------------------------------------------------------------
    // Accessors
    // ------------------------------------------------------------------

    /// Whether the connection speaks MPTCP; [`Mode::Plain`] when the peer
    /// refused or a middlebox forced a fallback at the handshake.
    pub fn mode(&self) -> Mode {
        self.mode.public()
    }

    /// Our token (first 32 bits of SHA-256 of our key), in MPTCP mode.
    pub fn local_token(&self) -> Option<u32> {
        (!self.mode.plain()).then(|| crypto::token(self.hs.local_key()))
    }

    /// The peer's token, once its key is known (logs and diagnostics: it
    /// names the connection on the peer's side).
    pub fn remote_token(&self) -> Option<u32> {
        self.hs.remote_key().map(crypto::token)
    }

    /// The subflows, by index.
    pub fn subflows(&self) -> impl Iterator<Item = (usize, &Subflow)> {
        self.subflows.iter().map(|(i, s)| (i, &s.tcp))
    }

    /// Subflow `i`, `None` once it closed (a later subflow may take the
    /// index once it is free).
    pub fn subflow(&self, i: usize) -> Option<&Subflow> {
        self.subflows.get(i).map(|s| &s.tcp)
    }

    /// (local, remote) of the initial subflow.
    pub fn addresses(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.subflow(0).map(|sf| (sf.local(), sf.remote()))
    }

    /// Replaces the scheduler (per-connection policy). What the old one
    /// counted stays with the connection.
    pub fn set_scheduler(&mut self, s: Box<dyn Scheduler>) {
        self.sched.add_counters(&mut self.counters);
        self.sched = s;
    }

    /// Marks subflow `id` backup (or not) and tells the peer with MP_PRIO.
    pub fn set_backup(&mut self, id: usize, backup: bool) -> bool {
        let Some(slot) = self.subflows.get_mut(id) else { return false };
        slot.mp.set_backup(backup);
        if self.mode.is_mptcp() {
            slot.mp.signals.owe_prio(backup);
            slot.tcp.request_ack();
        }
        true
    }

    /// The next connection-level event (connected, peer closed, reset,
    /// closed). Subflow events are digested here: the application sees one
    /// stream, not its subflows coming and going.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The subflows the path manager wants opened, for the endpoint to create.
    pub(crate) fn take_pending_joins(&mut self) -> Vec<JoinRequest> {
        self.paths.take_joins()
    }

    fn plain(&self) -> bool {
        self.mode.plain()
    }

    fn initial(&mut self) -> Option<&mut Subflow> {
        self.subflows.get_mut(0).map(|s| &mut s.tcp)
    }

    // ------------------------------------------------------------------
    // Input
    // ------------------------------------------------------------------

    /// A segment for subflow `idx`, in the order Linux takes its steps: the
    /// subflow's own TCP validation and processing first, and only if the
    /// segment was acceptable the handshake options, the fallback check, the
    /// other MPTCP options one by one, and the connection-level consequences
    /// (Linux acts on MPTCP options only after `tcp_validate_incoming`). A
    /// segment the MPTCP layer rejects (bad HMAC, wrong mapping) resets the
    /// subflow; the caller learns of it through the subflow's events.
    pub(crate) fn handle_segment(
        &mut self,
        now: Instant,
        idx: usize,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        packet: Option<&bytes::Bytes>,
    ) {
        self.last_now = self.last_now.max(now);
        let single_subflow = self.subflows.count() == 1;
        let ofo_empty = self.rx.buf().ofo_is_empty();
        self.couple(idx);
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        let una_before = slot.tcp.snd_una();
        // The peer's sender shares the window across subflows (Linux raises a
        // subflow's snd_wnd to the connection's): data on this subflow may
        // reach past the edge it announced itself, up to the connection's.
        // After a fallback the subflow's own window is the limit again.
        let shared_window = if self.mode.is_mapped() { self.rx.accept_edge().saturating_sub(self.rx.nxt()) } else { 0 };
        slot.tcp.set_conn_rcv_window(shared_window);
        let verdict = slot.tcp.handle_segment_in(now, hdr, opts, payload, packet);
        let acked_new = slot.tcp.snd_una().gt(una_before);
        let wnd = (hdr.window as u64) << slot.tcp.snd_wscale();
        // Relative ssn of the payload's first byte (a SYN takes one number).
        slot.mp.rx.set_segment(Seq(hdr.seq) + hdr.flags.syn() as u32 - slot.rcv_base().0, payload.len() as u32);
        match verdict {
            Verdict::Accepted => {
                if self.handshake_input(now, idx, hdr, opts).is_break() {
                    return;
                }
                // A SYN's options are the handshake's and nothing else: a
                // SYN taken as a simultaneous open on a join subflow (any
                // sequence number will do) must not move connection state.
                if hdr.flags.syn() {
                    self.after_input(now, idx);
                    return;
                }
                self.detect_fallback(idx, hdr, opts, payload, (single_subflow, ofo_empty, acked_new));
                if self.mode.is_mptcp() && self.incoming_options(now, idx, opts, wnd).is_break() {
                    return;
                }
            }
            // An acceptable RST ends the subflow; of its options only the
            // reason (MP_TCPRST) and a keyed MP_FASTCLOSE still mean anything.
            Verdict::Reset => {
                if self.mode.is_mptcp() && self.reset_options(idx, opts).is_break() {
                    return;
                }
            }
            Verdict::Dropped => self.counters.mptun_mp_opts_unacceptable += !opts.mptcp.is_empty() as u64,
        }
        self.after_input(now, idx);
    }

    /// Moves what the subflow delivered into the connection, then reacts.
    fn after_input(&mut self, now: Instant, idx: usize) {
        if self.mode.is_mptcp() {
            self.drain_subflow(now, idx);
        }
        self.on_subflow_events(idx);
        self.progress(now);
    }

    fn on_subflow_events(&mut self, idx: usize) {
        let mptcp = self.mode.is_mptcp();
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        if mptcp && slot.tcp.rst_pending() {
            // A subflow reset by the MPTCP layer (a bad mapping or checksum
            // found while draining) is reaped only once its RST left with
            // MP_TCPRST (and MP_FAIL): poll_transmit comes back here.
            return;
        }
        let mut failed = false;
        let mut error = 0;
        let mut fallback_fin = false;
        while let Some(ev) = slot.tcp.poll_event() {
            match ev {
                Event::Reset => error = crate::pm::ECONNRESET,
                Event::TimedOut => error = crate::pm::ETIMEDOUT,
                Event::Unreachable(why) => error = why.errno(),
                _ => {}
            }
            match (self.mode.public(), ev, slot.mp.join()) {
                // Until the SYN-ACK decides, the initial subflow's fate is the connection's.
                (Mode::Plain | Mode::Pending, e, _) => self.events.push_back(e),
                (_, Event::Connected, JoinState::Initial) => self.events.push_back(Event::Connected),
                (_, Event::Connected, _) => {}
                // After a fallback the subflow's FIN is the DATA_FIN, if
                // the stream is whole up to it (checked below).
                (_, Event::PeerFin, _) if self.mode.infinite() => fallback_fin = true,
                (_, Event::PeerFin, _) => {
                    // The peer closed this subflow: close ours too.
                    slot.tcp.close();
                }
                (_, Event::Reset | Event::TimedOut | Event::Unreachable(_), _) => failed = true,
                (_, Event::Closed, _) => failed = true,
            }
        }
        if fallback_fin && !self.rx.peer_fin_done() {
            if self.fallback_fin_in_order(idx) {
                self.rx.end_by_subflow_fin();
                self.events.push_back(Event::PeerFin);
            } else {
                // Bytes the subflow acknowledged cannot be delivered in
                // order: fail loudly rather than end the stream short.
                for s in self.subflows.live_mut() {
                    s.tcp.abort();
                }
                failed = true;
            }
        }
        if failed && mptcp {
            self.reinject_from(idx);
            if error != 0 {
                self.schedule_reopen(idx);
            }
            self.report_sub_closed(idx, error);
            if let Some(slot) = self.subflows.take(idx) {
                // Keep what the subflow counted.
                self.counters.add(&slot.tcp.counters());
                // The slot may be reused: nothing of this subflow may stay
                // attached to its index.
                self.sched.forget(idx);
                self.timers.stop(timers::Timer::JoinAck(idx));
            }
            if self.subflows.count() == 0 && !self.closed_event_sent {
                self.closed_event_sent = true;
                let done = self.tx.fin().acked() && self.rx.peer_fin_done();
                self.events.push_back(if done { Event::Closed } else { Event::Reset });
                self.report_closed();
            }
        }
    }

    /// [`Connection::progress`] at the time of the last driver call.
    pub(crate) fn progress_now(&mut self) {
        self.progress(self.last_now);
    }

    pub(crate) fn last_now(&self) -> Instant {
        self.last_now
    }

    /// The driver's clock reached `now` for this connection (what an
    /// application call that carries no time acts at).
    pub(crate) fn saw(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
    }

    /// Housekeeping after any input, timer or application call, in order:
    /// what a fallback acknowledged, releasing acknowledged data, send
    /// buffer growth, stale detection, PM decisions, pushing data, the
    /// timers that follow this state ([`Connection::run_timers`]), closing.
    pub(crate) fn progress(&mut self, now: Instant) {
        if !self.mode.is_mptcp() {
            return;
        }
        if self.mode.infinite() {
            self.fallback_una();
        }
        self.release_acked();
        self.grow_send_buffer();
        self.detect_stale();
        self.pm_progress(now);
        self.push_pending();
        self.run_timers(now);
        self.fallback_close();
        self.close_when_done();
        self.report_progress();
    }

    // ------------------------------------------------------------------
    // Output
    // ------------------------------------------------------------------

    /// An ICMP "fragmentation needed" / "packet too big" about subflow
    /// `idx` quoting sequence number `seq` (see [`Subflow::handle_too_big`]):
    /// only that subflow's MSS comes down.
    pub(crate) fn handle_too_big(&mut self, now: Instant, idx: usize, seq: Seq, mtu: u32) {
        self.last_now = self.last_now.max(now);
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        if slot.tcp.handle_too_big(now, seq, mtu) {
            self.progress(now);
        }
    }

    /// An ICMP destination-unreachable / time-exceeded about subflow `idx`
    /// quoting sequence number `seq` (see [`Subflow::handle_unreachable`]).
    /// A handshake it ends is a failed subflow like a reset one: the
    /// connection's own while the first SYN-ACK is awaited (Linux
    /// propagates a subflow's error only on the MP_CAPABLE connect or
    /// after a fallback), a failed join otherwise. Returns whether the
    /// subflow closed on it.
    pub(crate) fn handle_unreachable(&mut self, now: Instant, idx: usize, seq: Seq, why: Unreachable) -> bool {
        self.last_now = self.last_now.max(now);
        let Some(slot) = self.subflows.get_mut(idx) else { return false };
        if !slot.tcp.handle_unreachable(seq, why) {
            return false;
        }
        self.on_subflow_events(idx);
        self.progress(now);
        true
    }

    /// The MTU of the device subflow `idx` leaves by (see
    /// [`Subflow::set_device_mtu`]); called by the endpoint as it creates it.
    pub(crate) fn set_device_mtu(&mut self, idx: usize, mtu: u32) {
        if let Some(slot) = self.subflows.get_mut(idx) {
            slot.tcp.set_device_mtu(mtu);
        }
    }

    /// Next packet of any subflow; `start` rotates fairness.
    pub(crate) fn poll_transmit(&mut self, now: Instant, out: &mut [u8], start: usize) -> Option<(usize, Transmit)> {
        self.last_now = self.last_now.max(now);
        let n = self.subflows.slot_count();
        for k in 0..n {
            let i = (start + k) % n;
            if self.subflows.get(i).is_none() {
                continue;
            }
            let t = if self.plain() { self.poll_plain(now, i, out) } else { self.poll_mptcp(now, i, out) };
            self.on_subflow_events(i);
            if let Some(t) = t {
                return Some((i, t));
            }
        }
        None
    }

    fn poll_plain(&mut self, now: Instant, i: usize, out: &mut [u8]) -> Option<Transmit> {
        self.subflows.get_mut(i)?.tcp.poll_transmit(now, &mut (), out)
    }

    /// The next packet of subflow `i`, its MPTCP options written by the
    /// [`Hook`].
    fn poll_mptcp(&mut self, now: Instant, i: usize, out: &mut [u8]) -> Option<Transmit> {
        let recv_window = self.rx.window();
        let slot = self.subflows.get_mut(i)?;
        if slot.apply_cut() {
            self.counters.mptcp_cwnd_penalized += 1;
        }
        let (base, next_ssn) = (slot.snd_base(), slot.snd_nxt_rel());
        let announces = slot.is_open();
        let cap_before = self.hs.cap_ack_sent();
        let before = slot.tcp.snd_nxt();
        let mut hook = Hook {
            mode: self.mode,
            hs: &mut self.hs,
            tx: &mut self.tx,
            rx: &mut self.rx,
            paths: &mut self.paths,
            counters: &mut self.counters,
            mp: &mut slot.mp,
            now,
            base,
            next_ssn,
            recv_window,
            announces,
        };
        let t = slot.tcp.poll_transmit(now, &mut hook, out);
        // A data segment (or the third ACK, which must carry MP_CAPABLE)
        // took the pure ACK that was asked for to carry a due DATA_FIN: ask
        // again, so that it leaves right after instead of a retransmission
        // timeout later.
        let took_the_ack = slot.tcp.snd_nxt() != before || (!cap_before && self.hs.cap_ack_sent());
        if self.tx.fin().due() && took_the_ack {
            slot.tcp.request_ack();
        }
        // The hook sends announcements and moves their deadlines.
        self.sync_announce_timer();
        t
    }
}

#[cfg(test)]
mod tests;
