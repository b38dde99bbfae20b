//! The driver task: the only place where the sans-IO endpoint meets time and
//! devices, in the style of quinn's `ConnectionDriver`.
//!
//! One iteration, in the order the core's contract asks for:
//!
//! 1. drain every device (each read until `WouldBlock`, one batch per device)
//!    and feed the packets to `Endpoint::handle_packet` (a super-packet's
//!    buffer lent as it is to `Endpoint::handle_packet_bytes`);
//! 2. fire timers due (`handle_timeout`);
//! 3. dispatch accepted connections to listeners;
//! 4. move due packets out of the departure queue, then `poll_transmit`
//!    until `None`: due packets go into their device's batch, later ones into
//!    the departure queue, each in the form its device takes
//!    (`TxPacket::fit_to`, `TxBatch::push`); for a device that gathers, a
//!    data packet's payload stays in the send buffer all the way
//!    (`Transmit::tail`) and only its headers are copied;
//! 5. `poll_event` until `None`, then wake the tasks whose connection became
//!    readable, writable, connected or failed; reap closed orphans;
//! 6. write the batches (by default a hand-over to each device's writer
//!    thread, `mptun_io::WriterThread`, for all but small batches);
//! 7. sleep until the earlier of the endpoint's `poll_timeout` and the
//!    departure queue's head, or until a device or a handle wakes us.
//!
//! Nothing here knows TCP or MPTCP: the same endpoint runs in the simulator.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use mptun_io::paths::DeviceId;
use mptun_io::{PacketIo, PushError, RxBatch, SharedPcap, TxBatch, TxChecksum, TxPacket, HEADROOM, MAX_TAIL_PARTS};
use mptun_proto::tcp::{Event, Transmit, Unreachable};
use mptun_proto::{ConnConfig, ConnectionHandle};
use mptun_time::{Duration, Instant};

use crate::departure::{self, Departure, DepartureQueue, Refused, TIMER_SLACK};
use crate::state::{ConnState, Shared, State, BACKLOG};
use crate::timer::{HrTimer, SPIN_BELOW};
use crate::StreamOptions;

/// Iterations per poll before yielding to the runtime, so one busy stack
/// cannot starve the application tasks sharing its worker thread.
const ITERATIONS_PER_POLL: usize = 32;
/// Packets produced per iteration before the lock is released and the
/// batches are written.
const TX_PER_ITERATION: usize = 256;
/// Packets queued for writing that are worth a syscall even while more
/// input is arriving.
const FLUSH_AT: usize = 64;
/// Bytes queued for writing that are worth a syscall even while more input
/// is arriving: a TSO super-segment gains nothing by waiting for company.
const FLUSH_BYTES: usize = 64 * 1024;
/// Bytes of packets built per iteration before they are written and the
/// devices read again. Without it one iteration would build the whole send
/// buffer (4 MiB, about a millisecond of copying) before writing any of it
/// or reading an ACK, and the sender would measure its own backlog as round
/// trip.
const TX_BYTES_PER_ITERATION: usize = 256 * 1024;
/// Longest a due packet waits in a batch for company; see step 6.
const MAX_HOLD: Duration = Duration::from_micros(100);
/// Longest the driver waits, once the stack is dropped, for its devices to
/// take what it still held and the resets it sends every connection (a
/// writer thread still busy with the previous batch): without it the
/// resets would be dropped with the driver, leaving the peers with
/// half-open connections. The writer threads then give a device that
/// still pushes back as long again for their last batch.
const SHUTDOWN_DRAIN: Duration = mptun_io::DRAIN_ON_DROP;
/// Longest a connection the application closed and let go, all its data
/// sent, may take once the stack is dropped to finish its close
/// (the peer's DATA_FIN and the subflows' FIN exchanges) before it is
/// reset with the rest. A kernel
/// socket closes in the background after its process exits; a stack that
/// ends with its process can give it only a moment, or a tool that exits
/// the instant it has its answer resets every connection in the middle of
/// its orderly close. A peer that answers in a few round trips of any
/// ordinary path makes it in time, one that does not is not worth the
/// process waiting longer for.
const SHUTDOWN_LINGER: Duration = mptun_io::DRAIN_ON_DROP;
/// How often closed connections nobody owns are swept from the endpoint.
const SWEEP_EVERY: Duration = Duration::from_millis(1000);
/// Largest packet the endpoint may write (an IPv6 jumbo aside).
const SCRATCH: usize = 65_535;

struct Device {
    io: Arc<dyn PacketIo>,
    rx: RxBatch,
    /// Built for the device's capabilities: each packet goes in in the
    /// form the device takes.
    tx: TxBatch,
    dead: bool,
}

/// The future spawned by [`crate::Stack`]; completes when the stack is dropped.
pub(crate) struct Driver {
    shared: Arc<Shared>,
    devices: Vec<Device>,
    /// Local address → device, from the stack's paths.
    routes: Vec<(IpAddr, DeviceId)>,
    departures: DepartureQueue,
    /// Where the endpoint builds the next packet, after [`HEADROOM`] bytes:
    /// it then moves into a device batch or the departure queue by a
    /// buffer swap, never a copy, and a spare buffer takes its place (a
    /// packet whose payload stays in the send buffer has only its headers
    /// here, and they are copied instead: the buffer stays).
    scratch: Vec<u8>,
    timer: HrTimer,
    last_sweep: Instant,
    wake: Vec<Waker>,
    /// When the oldest packet now waiting in a device batch was queued.
    batch_since: Option<Instant>,
    /// Capture files, flushed with each sweep.
    pcaps: Vec<SharedPcap>,
    /// Packets went through since the last flush.
    pcap_dirty: bool,
    /// How far ending has got, once the stack was dropped.
    ending: Option<Ending>,
}

/// The phases of a stack that was dropped.
#[derive(Clone, Copy)]
enum Ending {
    /// Until then the stack runs on for the connections the application
    /// closed and let go with all their data acknowledged, so they finish
    /// their close ([`SHUTDOWN_LINGER`]); every other connection was reset.
    Linger(Instant),
    /// What was left is reset; until then the devices must have taken the
    /// resets ([`SHUTDOWN_DRAIN`]).
    Drain(Instant),
}

enum Step {
    /// Work may be left: iterate again.
    Again,
    /// Everything is waiting on a registered waker.
    Idle,
    Shutdown,
}

impl Driver {
    pub(crate) fn new(
        shared: Arc<Shared>,
        devices: Vec<Arc<dyn PacketIo>>,
        routes: Vec<(IpAddr, DeviceId)>,
        pcaps: Vec<SharedPcap>,
        gro: bool,
    ) -> Self {
        let devices = devices
            .into_iter()
            .map(|io| {
                let mut rx = RxBatch::for_io(&*io);
                // The core takes a super-segment as one segment: a 64 KiB
                // GRO read costs one header and no copy (its buffer is lent
                // to the receive queue, step 1b), not 45 headers and copies
                // (`StackBuilder::gro`).
                rx.set_gro(gro);
                let tx = TxBatch::for_io(&*io);
                Device { io, rx, tx, dead: false }
            })
            .collect();
        Driver {
            shared,
            devices,
            routes,
            departures: DepartureQueue::default(),
            scratch: vec![0; HEADROOM + SCRATCH],
            timer: HrTimer::new(),
            last_sweep: Instant::ZERO,
            wake: Vec::new(),
            batch_since: None,
            pcaps,
            pcap_dirty: false,
            ending: None,
        }
    }

    pub(crate) fn high_resolution_timer(&self) -> bool {
        self.timer.is_high_resolution()
    }

    fn device_for(&self, src: IpAddr) -> Option<DeviceId> {
        if self.devices.len() == 1 {
            return Some(0);
        }
        self.routes.iter().find(|(ip, _)| *ip == src).map(|&(_, d)| d)
    }

    fn iterate(&mut self, cx: &mut Context<'_>, more_iterations: bool) -> Step {
        // 1a. Receive, without the lock.
        let mut received = false;
        for d in self.devices.iter_mut().filter(|d| !d.dead) {
            if d.rx.is_full() {
                continue;
            }
            match d.io.poll_recv_batch(cx, &mut d.rx) {
                Poll::Ready(Ok(_)) => received = true,
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => received = true,
                Poll::Ready(Err(e)) => {
                    tracing::error!(device = d.io.name(), "receive failed, device dropped: {e}");
                    d.dead = true;
                }
                Poll::Pending => {}
            }
        }

        let shared = self.shared.clone();
        let mut st = shared.lock();
        st.stats.iterations += 1;
        let lingering = if st.shutdown { self.ending(&mut st) } else { None };
        if let Some(Ending::Drain(deadline)) = self.ending {
            let now = shared.clock.now();
            // What the fq still holds leaves now, each flow's packets in
            // order and its reset behind them: a reset sent ahead of data
            // it counts (its sequence number past what the peer has seen)
            // only draws a challenge ACK, and the peer stays half-open.
            // (Nothing is held past `now + HORIZON`: `push` refuses it.)
            let more = self.transmit(&mut st, now, now + 2 * departure::HORIZON);
            drop(st);
            // A device that pushes back wakes us when it takes more.
            let blocked = self.flush(cx);
            if now >= deadline || (!blocked && !more) {
                return Step::Shutdown;
            }
            if !blocked {
                return Step::Again;
            }
            return match self.timer.poll_until(cx, shared.clock.to_tokio(deadline)) {
                Poll::Ready(()) => Step::Again,
                Poll::Pending => Step::Idle,
            };
        }
        match &st.driver_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.driver_waker = Some(cx.waker().clone()),
        }
        let now = shared.clock.now();

        // 1b. Feed what arrived.
        for d in &mut self.devices {
            for i in 0..d.rx.len() {
                let verified = d.rx.checksum_verified(i);
                st.stats.rx_gro_packets += d.rx.gso_size(i).is_some() as u64;
                let p = d.rx.get(i).expect("i < len");
                if p.len() >= mptun_proto::RECV_ZERO_COPY_MIN {
                    // A super-segment: its buffer moves into the receive
                    // queue (and comes back to the batch's pool once read)
                    // instead of its payload being copied out.
                    let p = d.rx.take_bytes(i).expect("i < len");
                    st.ep.handle_packet_bytes(now, p, verified);
                } else if verified {
                    st.ep.handle_packet_checksum_verified(now, p);
                } else {
                    st.ep.handle_packet(now, p);
                }
            }
            st.stats.rx_packets += d.rx.len() as u64;
            d.rx.clear();
        }

        // 2. Timers.
        if st.ep.poll_timeout().is_some_and(|t| t <= now) {
            st.ep.handle_timeout(now);
        }

        // 3. Accepts.
        while let Some(h) = st.ep.accept() {
            dispatch_accept(&mut st, h);
        }

        // 4. Transmit.
        let more_tx = self.transmit(&mut st, now, now);

        // 5. Events and wake-ups.
        while let Some((h, ev)) = st.ep.poll_event() {
            on_event(&mut st, h, ev, &mut self.wake);
        }
        st.flush_pm_events();
        self.collect_wakeups(&mut st);
        if now.saturating_duration_since(self.last_sweep) >= SWEEP_EVERY {
            self.last_sweep = now;
            sweep(&mut st);
            if std::mem::take(&mut self.pcap_dirty) {
                for p in &self.pcaps {
                    if let Err(e) = p.lock().unwrap_or_else(std::sync::PoisonError::into_inner).flush() {
                        tracing::warn!("pcap flush failed: {e}");
                    }
                }
            }
        }
        st.stats.app_wakeups += self.wake.len() as u64;
        st.stats.held_packets = self.departures.len() as u64;
        st.stats.held_bytes = self.departures.bytes() as u64;
        // Back at the end of a linger even if the orphans go quiet.
        let mut next = Instant::min_opt(st.ep.poll_timeout(), self.departures.next_departure());
        next = Instant::min_opt(next, lingering);
        if !self.pcaps.is_empty() {
            // Come back for the next flush even if the stack goes idle.
            self.pcap_dirty |= received || more_tx || self.devices.iter().any(|d| !d.tx.is_empty());
            if self.pcap_dirty {
                next = Instant::min_opt(next, Some(self.last_sweep + SWEEP_EVERY));
            }
        }
        drop(st);
        for w in self.wake.drain(..) {
            w.wake();
        }

        // 6. Write. When the driver is about to iterate again at once
        // (packets keep arriving, an ACK clock; or the next EDT slot is
        // microseconds away), the next iteration adds to the batches, and
        // writing now would cost a syscall per packet and defeat the
        // device's TSO coalescing. So a small batch waits until the driver
        // is about to sleep, the batch fills (FLUSH_AT packets or
        // FLUSH_BYTES), or its first packet has waited MAX_HOLD: a burst of
        // at most MAX_HOLD of the flow's pacing rate, as Linux's TSO
        // autosizing allows (1 ms). Packets leave late by at most that,
        // never early.
        let now2 = shared.clock.now();
        let due_soon = next.is_some_and(|t| t <= now2 + Duration::from_nanos(SPIN_BELOW.as_nanos() as u64));
        let again = received || more_tx || due_soon;
        let pending: usize = self.devices.iter().map(|d| d.tx.len()).sum();
        let held_long = self.batch_since.is_some_and(|t0| now2.saturating_duration_since(t0) >= MAX_HOLD);
        let blocked = if pending > 0
            && again
            && more_iterations
            && pending < FLUSH_AT
            && self.devices.iter().map(|d| d.tx.unsent_bytes()).sum::<usize>() < FLUSH_BYTES
            && !held_long
        {
            false
        } else {
            let b = self.flush(cx);
            if self.devices.iter().all(|d| d.tx.is_empty()) {
                self.batch_since = None;
            }
            b
        };

        // 7. Decide.
        if received || (more_tx && !blocked) {
            return Step::Again;
        }
        match next {
            None if pending > 0 && !blocked => Step::Again,
            None => Step::Idle,
            Some(t) if t <= shared.clock.now() => Step::Again,
            Some(t) => {
                let deadline = shared.clock.to_tokio(t);
                match self.timer.poll_until(cx, deadline) {
                    Poll::Ready(()) => {
                        shared.lock().stats.timer_wakeups += 1;
                        Step::Again
                    }
                    Poll::Pending => Step::Idle,
                }
            }
        }
    }

    /// Moves due packets into device batches and asks the endpoint for more.
    /// Returns whether it stopped early (a batch filled up, or the
    /// per-iteration budget ran out) with more possibly left. Packets
    /// stamped to leave by `due_by` are due: `now` while the stack runs,
    /// everything held once it shuts down.
    fn transmit(&mut self, st: &mut State, now: Instant, due_by: Instant) -> bool {
        // Held packets first: they are older than anything the endpoint
        // produces now, and a flow's packets must stay in order. Each went
        // into the form its device takes when it was held.
        while let Some(due) = self.departures.peek_due(due_by) {
            let d = &mut self.devices[due.device];
            match push(&mut d.tx, due.packet, st) {
                // Not room for it (or all its wire segments): it stays
                // first in line.
                Err(PushError::Full) => return true,
                Err(_) => st.stats.tx_oversize += 1,
                Ok(()) => {}
            }
            let spare = self.departures.pop_due(due_by).expect("peeked");
            self.departures.recycle(spare.into_buffer());
            self.batch_since.get_or_insert(now);
        }
        let mut made = 0usize;
        for _ in 0..TX_PER_ITERATION {
            if made >= TX_BYTES_PER_ITERATION {
                return true;
            }
            let Some(t) = st.ep.poll_transmit(now, &mut self.scratch[HEADROOM..]) else { return false };
            made += t.packet_len();
            st.stats.tx_packets += 1;
            st.stats.tx_segments += t.segment_size.map_or(1, |size| {
                mptun_wire::gso::Layout::parse_head(&self.scratch[HEADROOM..HEADROOM + t.len], t.tail.len())
                    .map_or(1, |l| l.segment_count(size) as u64)
            });
            let Some(dev) = self.device_for(t.src.ip()) else {
                st.stats.tx_no_route += 1;
                tracing::debug!(src = %t.src, dst = %t.dst, "no path owns the source address; dropped");
                continue;
            };
            let flow = (t.src, t.dst);
            let d = &mut self.devices[dev];
            let mut full = d.tx.is_full();
            let due = t.departure <= due_by + TIMER_SLACK && !full && !self.departures.holds(&flow);
            // Into the form the device takes, now or held for later: a
            // payload left in the send buffer (`gather_payload`) stays
            // there for a device that writes it behind the headers, and is
            // copied in here otherwise; a checksum left partial stays so
            // only for a device that completes it.
            let mut p = tx_packet(std::mem::take(&mut self.scratch), &t);
            let pieces = !p.tail().is_empty();
            if let Err(e) = p.fit_to(d.tx.caps()) {
                tracing::warn!(device = d.io.name(), "could not complete a checksum: {e}");
            }
            st.stats.tx_tail_copied += (pieces && p.tail().is_empty()) as u64;
            if due {
                self.batch_since.get_or_insert(now);
                match push(&mut d.tx, &mut p, st) {
                    // Not room for all of a super-segment's wire segments.
                    Err(PushError::Full) => full = true,
                    r => {
                        if let Err(e) = r {
                            st.stats.tx_oversize += 1;
                            tracing::warn!(device = d.io.name(), "dropped an outgoing packet: {e}");
                        }
                        // A slot's old buffer, or this one where the packet
                        // was copied (its headers, or its wire segments).
                        self.scratch = p.into_buffer();
                        if self.scratch.len() < HEADROOM + SCRATCH {
                            // A slot's first buffer, MTU-sized: from now on it
                            // takes super-segments too.
                            self.scratch.resize(HEADROOM + SCRATCH, 0);
                        }
                        continue;
                    }
                }
            }
            // Its time has not come (EDT), its flow has packets waiting, or
            // the device's batch is full: the fq holds it, a super-segment
            // in this buffer (moved), a small packet (an ACK behind paced
            // data, or the headers of a gathered one, its tail beside them)
            // copied into a small recycled buffer, so that thousands held
            // do not each keep 64 KiB.
            let n = HEADROOM + p.len();
            self.scratch = if n >= departure::SMALL {
                self.departures.take_buffer(HEADROOM + SCRATCH)
            } else {
                let small = self.departures.take_buffer(n);
                p.move_into(small)
            };
            match self.departures.push(now, Departure { flow, at: t.departure, device: dev, packet: p }) {
                Ok(()) => st.stats.tx_held += 1,
                Err(Refused::Horizon) => st.stats.tx_horizon_drops += 1,
                Err(Refused::Limit) => st.stats.tx_queue_drops += 1,
            }
            if full {
                return true;
            }
        }
        true
    }

    /// Writes every device's batch; true if a device pushed back (its waker
    /// is registered and the unsent packets stay in the batch).
    fn flush(&mut self, cx: &mut Context<'_>) -> bool {
        let mut blocked = false;
        let mut errors = 0;
        let mut batches = 0;
        for d in &mut self.devices {
            if d.tx.is_empty() {
                continue;
            }
            if d.dead {
                errors += d.tx.len() as u64;
                d.tx.clear();
                continue;
            }
            match d.io.poll_send_batch(cx, &mut d.tx) {
                Poll::Ready(Ok(_)) => batches += 1,
                Poll::Ready(Err(e)) => {
                    // The packets are lost, as on a failing NIC; TCP recovers them.
                    tracing::warn!(device = d.io.name(), "write failed, {} packets dropped: {e}", d.tx.unsent());
                    errors += d.tx.unsent() as u64;
                    d.tx.clear();
                }
                Poll::Pending => blocked = true,
            }
        }
        if batches > 0 || errors > 0 {
            let mut st = self.shared.lock();
            st.stats.tx_batches += batches;
            st.stats.tx_errors += errors;
        }
        blocked
    }

    /// Wakes tasks whose wait is over; forgets watched connections nobody waits on.
    fn collect_wakeups(&mut self, st: &mut State) {
        let State { ep, conns, watch, .. } = st;
        let mut reap = Vec::new();
        watch.retain(|&h| {
            let Some(cs) = conns.get_mut(&h) else { return false };
            let failed = cs.error.is_some() || ep.is_closed(h);
            if cs.read.is_some() && (failed || ep.recv_ready(h) > 0 || ep.recv_finished(h)) {
                self.wake.extend(cs.read.take());
            }
            if cs.write.is_some() && (failed || ep.send_space(h) >= cs.wake_space) {
                self.wake.extend(cs.write.take());
            }
            if cs.connect.is_some() && (failed || cs.connected) {
                self.wake.extend(cs.connect.take());
            }
            if cs.refs == 0 {
                // An orphan still closing (FIN_WAIT, TIME_WAIT) is not looked
                // at on every turn, or a flood of them costs the driver
                // a pass over all of them each time: its closing event puts
                // it back here (`on_event`), and `sweep` reaps one that
                // ends without an event.
                if ep.is_closed(h) {
                    reap.push(h);
                }
                return false;
            }
            cs.read.is_some() || cs.write.is_some() || cs.connect.is_some()
        });
        for h in reap {
            ep.remove(h);
            conns.remove(&h);
        }
    }

    /// Moves a dropped stack on: at once, its listeners are closed and
    /// every connection the application still holds (or never accepted)
    /// reset, as a process exit does, and so is one it closed with data
    /// still unacknowledged, which would not be delivered in a moment
    /// anyway; those it closed and let go with all their data through
    /// linger until their close is over ([`Endpoint::is_finished`]) or
    /// [`SHUTDOWN_LINGER`] has passed, and what is left of them then is
    /// reset too and drained. Returns the end of the linger while it lasts.
    ///
    /// [`Endpoint::is_finished`]: mptun_proto::Endpoint::is_finished
    fn ending(&mut self, st: &mut State) -> Option<Instant> {
        let now = self.shared.clock.now();
        let until = match self.ending {
            Some(Ending::Drain(_)) => return None,
            Some(Ending::Linger(until)) => until,
            None => {
                for id in st.listeners.keys().copied().collect::<Vec<_>>() {
                    crate::listener::close(st, id);
                }
                // An orphan whose data all went (acknowledged or not) keeps
                // running: its last DATA_ACK may be a round trip away when
                // a tool shuts down the moment it has read its answer (the
                // kernel's was seen to race the shutdown). One with data
                // still unsent is reset: a process that ends cannot wait.
                abort_all(st, |st, h| !(is_orphan(st, h) && st.ep.all_data_sent(h)));
                wake_all(st, &mut self.wake);
                for w in self.wake.drain(..) {
                    w.wake();
                }
                now + SHUTDOWN_LINGER
            }
        };
        let closing = st.conns.keys().any(|&h| is_orphan(st, h) && !st.ep.is_finished(h));
        if closing && now < until {
            self.ending = Some(Ending::Linger(until));
            return Some(until);
        }
        // The resets leave with the drain (`transmit`), behind what is held.
        abort_all(st, |_, _| true);
        self.ending = Some(Ending::Drain(now + SHUTDOWN_DRAIN));
        None
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.shared.lock().stats.polls += 1;
        for i in 0..ITERATIONS_PER_POLL {
            match this.iterate(cx, i + 1 < ITERATIONS_PER_POLL) {
                Step::Again => {}
                Step::Idle => return Poll::Pending,
                Step::Shutdown => return Poll::Ready(()),
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Drop for Driver {
    /// However the task ends (the stack dropped, the runtime shut down, a
    /// panic), handles must not wait forever.
    fn drop(&mut self) {
        /// Tells every handle the driver is gone when dropped, after the
        /// devices below, or while unwinding from a device's own drop.
        struct Gone<'a>(&'a Shared);
        impl Drop for Gone<'_> {
            fn drop(&mut self) {
                let mut st = self.0.lock();
                st.driver_gone = true;
                let mut wake = Vec::new();
                wake_all(&mut st, &mut wake);
                drop(st);
                for w in wake {
                    w.wake();
                }
                self.0.driver_done.notify_waiters();
            }
        }
        let _gone = Gone(&self.shared);
        // The devices first: where the driver held the last handle, a
        // writer thread writes what it was given and a capture is flushed
        // (their own drops), before anyone is told the driver is gone.
        self.devices.clear();
        for p in &self.pcaps {
            if let Err(e) = p.lock().unwrap_or_else(std::sync::PoisonError::into_inner).flush() {
                tracing::warn!("pcap flush failed: {e}");
            }
        }
    }
}

/// The packet `poll_transmit` built in `buf` (after [`HEADROOM`] bytes), as
/// it goes to a device.
fn tx_packet(buf: Vec<u8>, t: &Transmit) -> TxPacket {
    const _: () = assert!(mptun_proto::tcp::TAIL_PARTS <= MAX_TAIL_PARTS, "a tail fits a slot");
    let checksum = if t.checksum_partial { TxChecksum::Partial } else { TxChecksum::Complete };
    TxPacket::new(buf, t.len)
        .with_tail(t.tail.parts())
        .expect("a tail fits a slot")
        .with_segment_size(t.segment_size)
        .with_checksum(checksum)
}

/// Pushes `p` into a device's batch, counting one that went with its
/// payload still in the send buffer.
fn push(tx: &mut TxBatch, p: &mut TxPacket, st: &mut State) -> Result<(), PushError> {
    let gathered = !p.tail().is_empty();
    let r = tx.push(p);
    st.stats.tx_gathered += (gathered && r.is_ok()) as u64;
    r
}

/// Resets every connection `which` picks that is not closed yet.
fn abort_all(st: &mut State, which: impl Fn(&State, ConnectionHandle) -> bool) {
    let handles: Vec<_> = st.ep.handles().collect();
    for h in handles {
        if !st.ep.is_closed(h) && which(st, h) {
            st.ep.abort(h);
        }
    }
}

/// The application closed `h` and let it go: it finishes on its own.
fn is_orphan(st: &State, h: ConnectionHandle) -> bool {
    st.conns.get(&h).is_some_and(|cs| cs.refs == 0)
}

fn wake_all(st: &mut State, out: &mut Vec<Waker>) {
    for cs in st.conns.values_mut() {
        out.extend(cs.read.take());
        out.extend(cs.write.take());
        out.extend(cs.connect.take());
    }
    for l in st.listeners.values_mut() {
        out.extend(l.waker.take());
    }
}

/// Hands an accepted connection to the listener bound to its local address
/// (an exact match before a wildcard), or refuses it with a RST.
fn dispatch_accept(st: &mut State, h: ConnectionHandle) {
    let Some((local, remote)) = st.ep.addresses(h) else { return };
    let exact = st.listeners.iter().find(|(_, l)| l.addr == local).map(|(&id, _)| id);
    let wildcard = || {
        st.listeners
            .iter()
            .find(|(_, l)| l.addr.ip().is_unspecified() && l.addr.port() == local.port())
            .map(|(&id, _)| id)
    };
    let id = exact.or_else(wildcard);
    let cfg = st.ep.config();
    let cfg = ConnConfig { tcp: cfg.tcp.clone(), mptcp: cfg.mptcp.clone() };
    let span = tracing::debug_span!("conn", id = h.0, %local, %remote, side = "server");
    span.in_scope(|| tracing::debug!("accepted"));
    let mut cs = ConnState::new(1, StreamOptions::wake_space(&cfg), span);
    cs.connected = st.ep.is_established(h);
    match id.and_then(|id| st.listeners.get_mut(&id)).filter(|l| l.queue.len() < BACKLOG) {
        Some(l) => {
            l.queue.push_back(h);
            if let Some(w) = l.waker.take() {
                w.wake();
            }
            st.conns.insert(h, cs);
        }
        None => {
            cs.span.in_scope(|| tracing::debug!("no listener takes it (closed or backlog full): reset"));
            st.stats.accept_refused += 1;
            cs.refs = 0;
            st.ep.abort(h);
            st.conns.insert(h, cs);
            st.watch.insert(h);
        }
    }
}

fn on_event(st: &mut State, h: ConnectionHandle, ev: Event, wake: &mut Vec<Waker>) {
    let Some(cs) = st.conns.get_mut(&h) else {
        // A passive connection that failed before being accepted.
        return;
    };
    let _g = cs.span.enter();
    tracing::debug!(event = ?ev);
    match ev {
        Event::Connected => {
            cs.connected = true;
            if let Some((local, remote)) = st.ep.addresses(h) {
                let sf = tracing::debug_span!(parent: &cs.span, "subflow", %local, %remote);
                sf.in_scope(|| tracing::debug!("established"));
            }
            wake.extend(cs.connect.take());
            wake.extend(cs.write.take());
        }
        Event::PeerFin => wake.extend(cs.read.take()),
        Event::Reset => {
            cs.error =
                Some(if cs.connected { io::ErrorKind::ConnectionReset } else { io::ErrorKind::ConnectionRefused });
        }
        Event::TimedOut => cs.error = Some(io::ErrorKind::TimedOut),
        Event::Unreachable(why) => cs.error = Some(unreachable_kind(why)),
        Event::Closed => {}
    }
    if matches!(ev, Event::Reset | Event::TimedOut | Event::Unreachable(_) | Event::Closed) {
        wake.extend(cs.read.take());
        wake.extend(cs.write.take());
        wake.extend(cs.connect.take());
        st.watch.insert(h);
    }
}

/// What `connect` (or a read after a timeout) returns for an ICMP error,
/// as the kernel's errno for it reads in Rust.
fn unreachable_kind(why: Unreachable) -> io::ErrorKind {
    match why {
        Unreachable::Network => io::ErrorKind::NetworkUnreachable,
        Unreachable::Host | Unreachable::TimeExceeded => io::ErrorKind::HostUnreachable,
        // ENOPROTOOPT has no kind of its own: the host refuses TCP.
        Unreachable::Port | Unreachable::Protocol => io::ErrorKind::ConnectionRefused,
        Unreachable::Prohibited => io::ErrorKind::PermissionDenied,
    }
}

/// Removes closed connections no handle knows about: passive ones that
/// failed before they were accepted, and orphans (closed and let go by the
/// application) whose end brought no event.
fn sweep(st: &mut State) {
    let dead: Vec<_> =
        st.ep.handles().filter(|h| st.conns.get(h).is_none_or(|cs| cs.refs == 0) && st.ep.is_closed(*h)).collect();
    for h in dead {
        st.ep.remove(h);
        st.conns.remove(&h);
        st.watch.remove(&h);
    }
}
