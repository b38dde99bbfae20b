//! An in-memory device pair: what one end sends, the other receives.
//!
//! Lets the runtime and everything above it be tested without root, TUN or
//! namespaces, through the same [`PacketIo`] trait. Each direction is a
//! bounded queue with backpressure (a full queue makes the sender wait, like
//! a TUN with `IFF_BACKPRESSURE`), and packet buffers are recycled through a
//! free list so a steady stream allocates nothing.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::packet_io::{full_batch, AtomicIoStats};
use crate::{IoStats, PacketBatch, PacketIo};

struct Queue {
    packets: VecDeque<Vec<u8>>,
    free: Vec<Vec<u8>>,
    rx_waker: Option<Waker>,
    tx_waker: Option<Waker>,
    /// Set when the sending end is dropped: the receiver drains, then sees EOF.
    tx_closed: bool,
    /// Set when the receiving end is dropped: sends fail at once.
    rx_closed: bool,
}

struct Pipe {
    q: Mutex<Queue>,
    capacity: usize,
}

impl Pipe {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Pipe {
            q: Mutex::new(Queue {
                packets: VecDeque::with_capacity(capacity),
                free: Vec::new(),
                rx_waker: None,
                tx_waker: None,
                tx_closed: false,
                rx_closed: false,
            }),
            capacity,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A panic elsewhere while holding the lock leaves the queue consistent
        // (every mutation is a single push/pop), so poisoning is ignored.
        self.q.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One end of an in-memory link; see [`ChannelIo::pair`].
pub struct ChannelIo {
    name: String,
    mtu: usize,
    tx: Arc<Pipe>,
    rx: Arc<Pipe>,
    stats: AtomicIoStats,
}

impl ChannelIo {
    /// Two connected ends named `a` and `b`, each direction buffering up to
    /// `capacity` packets of at most `mtu` bytes.
    pub fn pair(a: &str, b: &str, mtu: usize, capacity: usize) -> (ChannelIo, ChannelIo) {
        let capacity = capacity.max(1);
        let ab = Pipe::new(capacity);
        let ba = Pipe::new(capacity);
        let end = |name: &str, tx: &Arc<Pipe>, rx: &Arc<Pipe>| ChannelIo {
            name: name.to_owned(),
            mtu,
            tx: tx.clone(),
            rx: rx.clone(),
            stats: AtomicIoStats::default(),
        };
        (end(a, &ab, &ba), end(b, &ba, &ab))
    }

    /// Packets queued towards the peer and not yet received.
    pub fn in_flight(&self) -> usize {
        self.tx.lock().packets.len()
    }

    /// Queues one packet; `Ok(false)` when the queue is full.
    fn enqueue(&self, q: &mut Queue, packet: &[u8]) -> io::Result<bool> {
        if q.rx_closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "peer ChannelIo dropped"));
        }
        if q.packets.len() >= self.tx.capacity {
            return Ok(false);
        }
        let mut buf = q.free.pop().unwrap_or_else(|| Vec::with_capacity(self.mtu));
        buf.clear();
        buf.extend_from_slice(packet);
        q.packets.push_back(buf);
        Ok(true)
    }

    fn too_large(&self, len: usize) -> bool {
        len > self.mtu
    }
}

impl PacketIo for ChannelIo {
    fn name(&self) -> &str {
        &self.name
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn poll_recv_batch(&self, cx: &mut Context<'_>, batch: &mut PacketBatch) -> Poll<io::Result<usize>> {
        if batch.is_full() {
            return Poll::Ready(Err(full_batch()));
        }
        let from = batch.len();
        let mut q = self.rx.lock();
        while !batch.is_full() {
            let Some(buf) = q.packets.pop_front() else { break };
            // The sender enforced its MTU; a receiving batch sized smaller
            // than the sender's MTU drops what does not fit, like a NIC would.
            if batch.push(&buf).is_err() {
                AtomicIoStats::add(&self.stats.rx_dropped, 1);
            }
            q.free.push(buf);
        }
        let n = batch.len() - from;
        if n > 0 {
            if let Some(w) = q.tx_waker.take() {
                w.wake();
            }
            drop(q);
            self.stats.rx_done(batch, from);
            AtomicIoStats::add(&self.stats.rx_syscalls, n as u64);
            return Poll::Ready(Ok(n));
        }
        if q.tx_closed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer ChannelIo dropped")));
        }
        q.rx_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_send_batch(&self, cx: &mut Context<'_>, batch: &mut PacketBatch) -> Poll<io::Result<usize>> {
        let mut q = self.tx.lock();
        let mut sent = 0usize;
        let mut bytes = 0usize;
        let mut errors = 0u64;
        let result = loop {
            let Some(slot) = batch.next_unsent_with_headroom() else { break Poll::Ready(Ok(())) };
            let packet = &slot[crate::HEADROOM..];
            if self.too_large(packet.len()) {
                errors += 1;
                batch.reject_one();
                continue;
            }
            match self.enqueue(&mut q, packet) {
                Ok(true) => {
                    sent += 1;
                    bytes += packet.len();
                    batch.advance_sent(1);
                }
                Ok(false) => {
                    q.tx_waker = Some(cx.waker().clone());
                    break Poll::Pending;
                }
                Err(e) => break Poll::Ready(Err(e)),
            }
        };
        if sent > 0 {
            if let Some(w) = q.rx_waker.take() {
                w.wake();
            }
        }
        drop(q);
        AtomicIoStats::add(&self.stats.tx_packets, sent as u64);
        AtomicIoStats::add(&self.stats.tx_bytes, bytes as u64);
        AtomicIoStats::add(&self.stats.tx_syscalls, sent as u64);
        AtomicIoStats::add(&self.stats.tx_errors, errors);
        match result {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(batch.finish_send())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_send(&self, cx: &mut Context<'_>, packet: &[u8]) -> Poll<io::Result<()>> {
        if self.too_large(packet.len()) {
            AtomicIoStats::add(&self.stats.tx_errors, 1);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidInput, "packet larger than the MTU")));
        }
        let mut q = self.tx.lock();
        match self.enqueue(&mut q, packet) {
            Ok(true) => {
                if let Some(w) = q.rx_waker.take() {
                    w.wake();
                }
                drop(q);
                AtomicIoStats::add(&self.stats.tx_packets, 1);
                AtomicIoStats::add(&self.stats.tx_bytes, packet.len() as u64);
                AtomicIoStats::add(&self.stats.tx_syscalls, 1);
                Poll::Ready(Ok(()))
            }
            Ok(false) => {
                q.tx_waker = Some(cx.waker().clone());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn stats(&self) -> IoStats {
        self.stats.snapshot()
    }
}

impl Drop for ChannelIo {
    fn drop(&mut self) {
        let mut q = self.tx.lock();
        q.tx_closed = true;
        if let Some(w) = q.rx_waker.take() {
            w.wake();
        }
        drop(q);
        let mut q = self.rx.lock();
        q.rx_closed = true;
        if let Some(w) = q.tx_waker.take() {
            w.wake();
        }
    }
}

impl std::fmt::Debug for ChannelIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelIo").field("name", &self.name).field("mtu", &self.mtu).finish()
    }
}
