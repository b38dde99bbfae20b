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
use crate::{DeviceCaps, IoStats, PacketIo, RxBatch, TxBatch, TxChecksum};

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
    offload: bool,
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
            offload: false,
        };
        (end(a, &ab, &ba), end(b, &ba, &ab))
    }

    /// This end as a device with a TUN's send offloads (`IFF_VNET_HDR`):
    /// it says it cuts TSO super-packets, completes TCP checksums left
    /// partial and writes gathered payloads behind their headers
    /// ([`DeviceCaps::ALL`]),
    /// so that the runtime's offload paths run in tests without a TUN. The
    /// peer receives wire segments with complete checksums, as a device
    /// puts them on the wire. (It does all that with whatever it is given;
    /// this changes what it offers.)
    pub fn offload(mut self, on: bool) -> Self {
        self.offload = on;
        self
    }

    /// Packets queued towards the peer and not yet received.
    pub fn in_flight(&self) -> usize {
        self.tx.lock().packets.len()
    }

    /// Queues one packet; `Ok(false)` when the queue is full.
    fn enqueue(&self, q: &mut Queue, packet: &[u8]) -> io::Result<bool> {
        self.enqueue_parts(q, packet, &[], TxChecksum::Complete, 0)
    }

    /// Queues the packet `head` followed by `tail`, its TCP checksum
    /// completed if partial, cut into wire segments of `gso` payload
    /// bytes if not 0, as an offloading device puts it on the wire.
    fn enqueue_parts(
        &self,
        q: &mut Queue,
        head: &[u8],
        tail: &[bytes::Bytes],
        checksum: TxChecksum,
        gso: u16,
    ) -> io::Result<bool> {
        let invalid = |e: mptun_wire::Error| io::Error::new(io::ErrorKind::InvalidInput, format!("offload: {e}"));
        if q.rx_closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "peer ChannelIo dropped"));
        }
        let tail_len = tail.iter().map(|t| t.len()).sum();
        let count = match gso {
            0 => 1,
            size => mptun_wire::gso::Layout::parse_head(head, tail_len).map_err(invalid)?.segment_count(size.into()),
        };
        if count > self.tx.capacity {
            // Would never fit: refused rather than waited for for ever.
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "more wire segments than the queue holds"));
        }
        if q.packets.len() + count > self.tx.capacity {
            return Ok(false);
        }
        if gso != 0 {
            let mut whole = head.to_vec();
            tail.iter().for_each(|t| whole.extend_from_slice(t));
            let mut segs = mptun_wire::gso::segments(&whole, gso.into()).map_err(invalid)?;
            let mut out = Vec::with_capacity(count);
            loop {
                let mut buf = q.free.pop().unwrap_or_default();
                buf.resize(self.mtu, 0);
                match segs.next_into(&mut buf) {
                    Ok(Some(n)) => {
                        buf.truncate(n);
                        out.push(buf);
                    }
                    Ok(None) => break,
                    Err(e) => return Err(invalid(e)),
                }
            }
            q.packets.extend(out);
            return Ok(true);
        }
        let mut buf = q.free.pop().unwrap_or_else(|| Vec::with_capacity(self.mtu));
        buf.clear();
        buf.extend_from_slice(head);
        for piece in tail {
            buf.extend_from_slice(piece);
        }
        if checksum == TxChecksum::Partial {
            if let Err(e) = mptun_wire::gso::complete_checksum(&mut buf) {
                q.free.push(buf);
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("partial checksum: {e}")));
            }
        }
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

    fn poll_recv_batch(&self, cx: &mut Context<'_>, batch: &mut RxBatch) -> Poll<io::Result<usize>> {
        if batch.is_full() {
            return Poll::Ready(Err(full_batch()));
        }
        let from = batch.len();
        let mut q = self.rx.lock();
        while !batch.is_full() {
            let Some(buf) = q.packets.pop_front() else { break };
            // The sender enforced its MTU; a receiving batch sized smaller
            // than the sender's MTU drops what does not fit, like a NIC would.
            if batch.receive(&buf).is_err() {
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

    fn poll_send_batch(&self, cx: &mut Context<'_>, batch: &mut TxBatch) -> Poll<io::Result<usize>> {
        let mut q = self.tx.lock();
        let mut sent = 0usize;
        let mut bytes = 0usize;
        let mut errors = 0u64;
        let result = loop {
            let Some(p) = batch.next_unsent() else { break Poll::Ready(Ok(())) };
            let len = p.packet_len();
            if p.gso == 0 && self.too_large(len) {
                errors += 1;
                batch.reject_one();
                continue;
            }
            match self.enqueue_parts(&mut q, &p.slot[crate::HEADROOM..], p.tail, p.checksum, p.gso) {
                Ok(true) => {
                    sent += 1;
                    bytes += len;
                    batch.advance_sent(1);
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                    errors += 1;
                    batch.reject_one();
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

    fn caps(&self) -> DeviceCaps {
        if self.offload {
            DeviceCaps::ALL
        } else {
            DeviceCaps::NONE
        }
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
