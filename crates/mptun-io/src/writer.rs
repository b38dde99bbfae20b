//! A device whose writes happen on a thread of their own.
//!
//! Writing a packet into a TUN does more than copy it: the kernel receives
//! it inside the `write(2)`, so the peer's whole receive path (IP, TCP, the
//! wake-up of the reading application, and for an ACK the peer's next
//! transmissions) runs on the writer's CPU: a large share of the driver
//! task's time, in series with building the next packets. [`WriterThread`]
//! moves the writes to a dedicated thread, double-buffered: the driver
//! fills one batch while the thread writes the other, the way a NIC's
//! transmit ring decouples a driver from the wire.
//!
//! The price is a hand-over per batch (a futex wake when the thread
//! sleeps) and packets leaving up to a batch's writing time later; a
//! batch handed over while the previous one is still being written waits
//! (the driver sees `Pending` and is woken when the thread is free), so
//! at most two batches are ever queued: back-pressure, not a growing
//! queue.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use crate::{DeviceCaps, IoStats, PacketIo, RxBatch, TxBatch};

/// Batches smaller than this (ACKs, a few small segments) are written by
/// the caller itself when the thread is idle: the receiving kernel's work
/// for them is small, and a hand-over would delay each ACK by a thread
/// wake-up: a sender that sizes its window by the round trip it sees
/// (BBR) gets a longer one if every ACK waits for a hand-over, and moves
/// less.
pub const INLINE_BELOW: usize = 16 * 1024;

/// How long the thread sleeps on a device that pushed back before it
/// polls again (a lost wake-up costs at most this).
const PUSHBACK_RECHECK: Duration = Duration::from_millis(1);
/// Longest the thread keeps offering its last batch to a device that
/// pushes back once the writer is dropped: a stack's last packets (the
/// resets of its connections) are in it. The stack drains for as long
/// before it drops its writers.
pub const DRAIN_ON_DROP: Duration = Duration::from_millis(200);

/// Wraps a device so that [`PacketIo::poll_send_batch`] hands the batch to
/// a writer thread instead of writing it in the caller's task.
///
/// Everything else (receive, single-packet sends, counters, capabilities)
/// goes straight to the inner device. A batch the device fails to write
/// (an error, or a panic in its write) is lost, as on a failing NIC:
/// logged and counted in `tx_errors` by the thread, never charged to the
/// caller's next batch; TCP recovers the packets.
pub struct WriterThread {
    inner: Arc<dyn PacketIo>,
    name: String,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a batch is handed over or the wrapper is dropped.
    work: Condvar,
    /// Packets of batches the thread failed to write.
    lost: AtomicU64,
}

struct State {
    /// A batch for the thread to write.
    full: Option<TxBatch>,
    /// The thread has a batch (queued in `full` or being written).
    busy: bool,
    /// The batch the thread last emptied, swapped in for the next full
    /// one (the caller's own earlier batch, so of the caller's shape).
    spare: Option<TxBatch>,
    /// The task that found the thread busy.
    waiting: Option<Waker>,
    shutdown: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WriterThread {
    /// Starts the thread for `inner`. Called inside a tokio runtime, the
    /// thread enters it, so a device registered with that runtime's
    /// reactor (a [`crate::TunDevice`]) can wait for write readiness.
    pub fn new(inner: Arc<dyn PacketIo>) -> io::Result<Self> {
        let name = inner.name().to_owned();
        let shared = Arc::new(Shared {
            state: Mutex::new(State { full: None, busy: false, spare: None, waiting: None, shutdown: false }),
            work: Condvar::new(),
            lost: AtomicU64::new(0),
        });
        let runtime = tokio::runtime::Handle::try_current().ok();
        let thread = {
            let (inner, shared, name_in_thread) = (inner.clone(), shared.clone(), name.clone());
            thread::Builder::new().name(format!("tx-{name}")).spawn(move || {
                let _rt = runtime.as_ref().map(|h| h.enter());
                run(&*inner, &shared, &name_in_thread);
            })?
        };
        Ok(WriterThread { inner, name, shared, thread: Some(thread) })
    }
}

/// The thread: takes each full batch, writes it whole, gives it back empty.
fn run(inner: &dyn PacketIo, shared: &Shared, name: &str) {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        let mut batch = {
            let mut st = shared.lock();
            loop {
                if let Some(b) = st.full.take() {
                    break b;
                }
                if st.shutdown {
                    return;
                }
                st = shared.work.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let mut give_up: Option<std::time::Instant> = None;
        let error = loop {
            match catch_unwind(AssertUnwindSafe(|| inner.poll_send_batch(&mut cx, &mut batch))) {
                Ok(Poll::Ready(Ok(_))) => break None,
                Ok(Poll::Ready(Err(e))) => break Some(e.to_string()),
                Err(_) => break Some("the device's write panicked".to_owned()),
                Ok(Poll::Pending) => {
                    if shared.lock().shutdown {
                        let now = std::time::Instant::now();
                        if now >= *give_up.get_or_insert(now + DRAIN_ON_DROP) {
                            break Some("the writer was dropped and the device still pushes back".to_owned());
                        }
                    }
                    thread::park_timeout(PUSHBACK_RECHECK);
                }
            }
        };
        // Whatever is left (a failure, a shutdown) is lost, as on a NIC.
        if let Some(e) = error {
            let n = batch.unsent();
            shared.lost.fetch_add(n as u64, Relaxed);
            tracing::warn!(device = name, "write failed, {n} packets dropped: {e}");
        }
        batch.clear();
        let mut st = shared.lock();
        st.spare = Some(batch);
        st.busy = false;
        let w = st.waiting.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }
}

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

impl PacketIo for WriterThread {
    fn name(&self) -> &str {
        &self.name
    }

    fn mtu(&self) -> usize {
        self.inner.mtu()
    }

    fn poll_recv_batch(&self, cx: &mut Context<'_>, batch: &mut RxBatch) -> Poll<io::Result<usize>> {
        self.inner.poll_recv_batch(cx, batch)
    }

    /// Hands `batch`'s packets to the thread and gives the caller an empty
    /// batch of the same capacity and packet size in its place (the one
    /// it handed over the time before): Ready with the number handed over (the device
    /// has not written them yet). Pending while the thread still writes
    /// the previous batch; the caller is woken when it is done. A small
    /// batch meeting an idle thread is written at once instead
    /// ([`INLINE_BELOW`]), in order with everything handed over before.
    fn poll_send_batch(&self, cx: &mut Context<'_>, batch: &mut TxBatch) -> Poll<io::Result<usize>> {
        let mut st = self.shared.lock();
        if batch.unsent() == 0 {
            return Poll::Ready(Ok(batch.finish_send()));
        }
        if !st.busy && batch.unsent_bytes() < INLINE_BELOW {
            // The thread is idle (so nothing of ours is queued before this
            // batch) and the batch is small: written here, at once.
            drop(st);
            return self.inner.poll_send_batch(cx, batch);
        }
        if st.busy {
            match &st.waiting {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => st.waiting = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        let mut empty = st
            .spare
            .take()
            .unwrap_or_else(|| TxBatch::new(batch.capacity(), batch.max_packet_len()).with_caps(batch.caps()));
        let n = batch.unsent();
        std::mem::swap(batch, &mut empty);
        st.full = Some(empty);
        st.busy = true;
        drop(st);
        self.shared.work.notify_one();
        Poll::Ready(Ok(n))
    }

    fn poll_send(&self, cx: &mut Context<'_>, packet: &[u8]) -> Poll<io::Result<()>> {
        self.inner.poll_send(cx, packet)
    }

    fn stats(&self) -> IoStats {
        let mut s = self.inner.stats();
        s.tx_errors += self.shared.lost.load(Relaxed);
        s
    }

    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }
}

impl Drop for WriterThread {
    /// Lets the thread write what it was given (what a device still
    /// pushes back after [`DRAIN_ON_DROP`] is dropped and counted lost),
    /// then joins it.
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.work.notify_one();
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for WriterThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterThread").field("name", &self.name).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChannelIo, TxPacket};
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    /// Polls `f` on this thread until it is ready, sleeping in between.
    /// Each sleep must end by a wake-up: one that is lost fails the test
    /// (after 5 s) instead of being covered by a periodic re-poll.
    fn block_on<T>(mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = f(&mut cx) {
                return v;
            }
            let t0 = Instant::now();
            thread::park_timeout(Duration::from_secs(5));
            assert!(t0.elapsed() < Duration::from_secs(5), "Pending, and never woken");
        }
    }

    /// Adds packets numbered `from..from + n` of `size` bytes each.
    fn fill_sized(batch: &mut TxBatch, from: u32, n: u32, size: usize) {
        let mut p = vec![0u8; size];
        for i in from..from + n {
            p[..4].copy_from_slice(&i.to_be_bytes());
            batch.push(&mut TxPacket::copy_of(&p)).unwrap();
        }
    }

    /// Packets big enough that a batch of 16 goes to the thread.
    fn fill(batch: &mut TxBatch, from: u32, n: u32) {
        fill_sized(batch, from, n, 1200);
    }

    fn number(p: &[u8]) -> u32 {
        u32::from_be_bytes(p[..4].try_into().unwrap())
    }

    /// Drains `rx` on a thread until `n` packets came; returns them in order.
    fn receive(rx: ChannelIo, n: usize) -> thread::JoinHandle<Vec<u32>> {
        thread::spawn(move || {
            let mut got = Vec::new();
            let mut b = RxBatch::new(64, 1500);
            while got.len() < n {
                block_on(|cx| rx.poll_recv_batch(cx, &mut b)).unwrap();
                got.extend(b.iter().map(number));
                b.clear();
                // A slow reader: the writer thread meets a full queue.
                thread::sleep(Duration::from_micros(200));
            }
            got
        })
    }

    /// Batches handed over one after another arrive whole and in order,
    /// through a device that keeps pushing back (a queue of 8 packets for
    /// batches of 32), with small batches in between that must not
    /// overtake a big one the thread is still writing: the caller waits
    /// while the thread is busy, nothing is lost or reordered, and the
    /// caller always gets an empty batch of its own shape back.
    #[test]
    fn batches_arrive_in_order_through_a_device_that_pushes_back() {
        let (a, b) = ChannelIo::pair("a", "b", 1500, 8);
        let w = WriterThread::new(Arc::new(a)).unwrap();
        let rx = receive(b, 33 * 40);
        let mut batch = TxBatch::new(32, 1500);
        let mut waited = 0;
        let mut next = 0u32;
        for k in 0..80 {
            // Even: 32 big packets (to the thread); odd: one small one.
            let n = if k % 2 == 0 { 32 } else { 1 };
            if n == 32 {
                fill(&mut batch, next, n);
            } else {
                fill_sized(&mut batch, next, n, 60);
            }
            next += n;
            let mut first = true;
            let got = block_on(|cx| {
                let r = w.poll_send_batch(cx, &mut batch);
                if r.is_pending() && std::mem::take(&mut first) {
                    waited += 1;
                }
                r
            })
            .unwrap();
            assert_eq!(got, n as usize);
            assert!(batch.is_empty(), "the caller gets an empty batch back");
            assert_eq!((batch.capacity(), batch.max_packet_len()), (32, 1500), "of its own shape");
        }
        let got = rx.join().unwrap();
        assert_eq!(got, (0..next).collect::<Vec<_>>());
        assert!(waited > 0, "the device never pushed back: the test did not test waiting");
        assert_eq!(w.stats().tx_packets, next as u64);
    }

    /// A device whose writes fail (or panic) for the first `bad` batches.
    struct Flaky {
        calls: AtomicUsize,
        bad: usize,
        panic: bool,
    }

    impl PacketIo for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        fn mtu(&self) -> usize {
            1500
        }
        fn poll_recv_batch(&self, _: &mut Context<'_>, _: &mut RxBatch) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn poll_send_batch(&self, _: &mut Context<'_>, b: &mut TxBatch) -> Poll<io::Result<usize>> {
            if self.calls.fetch_add(1, Relaxed) < self.bad {
                assert!(!self.panic, "a bug in the device");
                return Poll::Ready(Err(io::Error::other("link down")));
            }
            Poll::Ready(Ok(b.finish_send()))
        }
        fn poll_send(&self, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn stats(&self) -> IoStats {
            IoStats::default()
        }
    }

    /// A batch the device fails to write (an error, or a panic on the
    /// thread) is counted as lost; the caller's following batches are
    /// handed over and written as usual, and the thread keeps serving.
    #[test]
    fn a_failed_batch_is_counted_and_the_next_ones_go_through() {
        for panic in [false, true] {
            let dev = Arc::new(Flaky { calls: AtomicUsize::new(0), bad: 1, panic });
            let w = WriterThread::new(dev.clone()).unwrap();
            let mut batch = TxBatch::new(16, 1500);
            for _ in 0..3 {
                fill(&mut batch, 0, 16);
                assert_eq!(block_on(|cx| w.poll_send_batch(cx, &mut batch)).unwrap(), 16, "panic: {panic}");
            }
            let t0 = Instant::now();
            while dev.calls.load(Relaxed) < 3 {
                assert!(t0.elapsed() < Duration::from_secs(5), "a batch never reached the device");
                thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(w.stats().tx_errors, 16, "exactly the failed batch (panic: {panic})");
        }
    }

    /// Dropping the wrapper right after a hand-over still writes the batch
    /// (as a NIC drains its ring) and ends the thread.
    #[test]
    fn drop_writes_what_was_handed_over() {
        let (a, b) = ChannelIo::pair("a", "b", 1500, 64);
        let w = WriterThread::new(Arc::new(a)).unwrap();
        let mut batch = TxBatch::new(16, 1500);
        fill(&mut batch, 100, 16);
        assert_eq!(block_on(|cx| w.poll_send_batch(cx, &mut batch)).unwrap(), 16);
        drop(w);
        let mut got = RxBatch::new(64, 1500);
        assert_eq!(block_on(|cx| b.poll_recv_batch(cx, &mut got)).unwrap(), 16);
        assert_eq!(number(got.get(0).unwrap()), 100);
    }

    /// A device that pushes back when the writer is dropped still gets the
    /// last batch (a stack's resets are in it) once it takes packets again
    /// within the drain: the drop waits for it instead of dropping the rest.
    #[test]
    fn drop_gives_a_device_pushing_back_time_to_take_the_last_batch() {
        let (a, b) = ChannelIo::pair("a", "b", 1500, 4);
        let w = WriterThread::new(Arc::new(a)).unwrap();
        let mut batch = TxBatch::new(16, 1500);
        fill(&mut batch, 0, 16);
        block_on(|cx| w.poll_send_batch(cx, &mut batch)).unwrap();
        thread::sleep(Duration::from_millis(20));
        // The channel holds 4: the thread is stuck on the rest when the
        // writer goes; the reader makes room 10 ms later (well inside the
        // drain, even on a loaded machine).
        let reader = thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            let mut got = Vec::new();
            let t0 = Instant::now();
            while got.len() < 16 && t0.elapsed() < Duration::from_secs(5) {
                let mut rx = RxBatch::new(16, 1500);
                if let Poll::Ready(Ok(_)) = block_on_timeout(|cx| b.poll_recv_batch(cx, &mut rx)) {
                    got.extend((0..rx.len()).map(|i| number(rx.get(i).unwrap())));
                }
            }
            got
        });
        drop(w);
        assert_eq!(reader.join().unwrap(), (0..16).collect::<Vec<_>>(), "every packet of the last batch, in order");
    }

    /// Polls once, or again after a short sleep if pending (a bounded
    /// `block_on` for a reader that must give up).
    fn block_on_timeout<T>(mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> Poll<T> {
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut cx = Context::from_waker(&waker);
        match f(&mut cx) {
            Poll::Pending => {
                thread::park_timeout(Duration::from_millis(5));
                f(&mut cx)
            }
            r => r,
        }
    }

    /// A device that never takes the batch holds up the drop no longer
    /// than the drain.
    #[test]
    fn drop_does_not_wait_for_a_device_that_never_drains() {
        let (a, _b) = ChannelIo::pair("a", "b", 1500, 4);
        let w = WriterThread::new(Arc::new(a)).unwrap();
        let mut batch = TxBatch::new(16, 1500);
        fill(&mut batch, 0, 16);
        block_on(|cx| w.poll_send_batch(cx, &mut batch)).unwrap();
        thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        drop(w);
        assert!(t0.elapsed() < Duration::from_secs(5), "drop took {:?}", t0.elapsed());
    }

    /// A small batch meeting an idle thread is written before the call
    /// returns (no hand-over, no wake-up); a big one is handed over.
    #[test]
    fn small_batches_are_written_at_once() {
        let (a, b) = ChannelIo::pair("a", "b", 1500, 64);
        let w = WriterThread::new(Arc::new(a)).unwrap();
        let mut batch = TxBatch::new(16, 1500);
        let mut got = RxBatch::new(64, 1500);
        for round in 0..100u32 {
            fill_sized(&mut batch, round, 1, 60);
            assert_eq!(block_on(|cx| w.poll_send_batch(cx, &mut batch)).unwrap(), 1);
            // Already there: a poll that does not wait.
            let waker = Waker::from(Arc::new(Unpark(thread::current())));
            let r = b.poll_recv_batch(&mut Context::from_waker(&waker), &mut got);
            assert!(matches!(r, Poll::Ready(Ok(1))), "round {round}: {r:?}");
            assert_eq!(number(got.get(0).unwrap()), round);
            got.clear();
        }
        assert!(batch.unsent_bytes() == 0);
        fill(&mut batch, 0, 16);
        assert!(batch.unsent_bytes() >= INLINE_BELOW);
        assert_eq!(block_on(|cx| w.poll_send_batch(cx, &mut batch)).unwrap(), 16);
        assert_eq!(block_on(|cx| b.poll_recv_batch(cx, &mut got)).unwrap(), 16);
    }
}
