//! The packet I/O trait the runtime is written against.
//!
//! It is poll-based and object safe so the runtime can hold a
//! `Vec<Arc<dyn PacketIo>>` of mixed devices (a TUN per path, an in-memory pair
//! in tests, a pcap tap around either) and so the TUN crate underneath can be
//! swapped without touching the runtime. The async conveniences live in
//! [`PacketIoExt`], implemented for every `PacketIo`.

use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};

use crate::{RxBatch, TxBatch};

/// Raw IP packets in and out of one device.
///
/// Both directions take `&self`: one task may receive while another sends on
/// the same `Arc`. Each direction keeps only the waker of its latest poll, so
/// use one receiving task and one sending task per device.
pub trait PacketIo: Send + Sync {
    /// Interface name (or a label, for in-memory devices).
    fn name(&self) -> &str;

    /// Largest IP packet the device carries: the size to build packets for.
    fn mtu(&self) -> usize;

    /// Appends every packet that is ready, up to the batch's free slots, and
    /// returns how many it appended (at least one).
    ///
    /// Reading until the kernel says `WouldBlock` on each wakeup, rather than
    /// one packet per wakeup, is what keeps the per-packet cost at one
    /// syscall. Pending (with the waker registered) only when nothing was
    /// ready. A full batch is an error (`InvalidInput`): it would otherwise
    /// spin.
    fn poll_recv_batch(&self, cx: &mut Context<'_>, batch: &mut RxBatch) -> Poll<io::Result<usize>>;

    /// Writes every unsent packet of `batch`, then clears it; returns how
    /// many packets the device accepted.
    ///
    /// If the device pushes back half-way, the batch remembers how far it
    /// got and the call returns Pending; poll again with the same batch. A
    /// packet the kernel rejects as malformed (`EINVAL`) is dropped and
    /// counted in `tx_errors` without failing the rest: one bad packet from
    /// the stack must not stall every flow. Other errors are returned, with
    /// the batch still holding the unsent packets.
    fn poll_send_batch(&self, cx: &mut Context<'_>, batch: &mut TxBatch) -> Poll<io::Result<usize>>;

    /// Writes a single packet (no batch needed).
    fn poll_send(&self, cx: &mut Context<'_>, packet: &[u8]) -> Poll<io::Result<()>>;

    /// Counters since creation.
    fn stats(&self) -> IoStats;

    /// What the device does itself with the packets it writes. A transmit
    /// batch built for the device ([`crate::TxBatch::for_io`]) puts every
    /// packet pushed into it in the form these allow, so no caller decides
    /// per device. The default, nothing: packets reach the device whole,
    /// cut into wire segments and with complete checksums.
    fn caps(&self) -> DeviceCaps {
        DeviceCaps::NONE
    }
}

/// The send offloads of a device, as data: what it does itself with a
/// packet it writes, so that whoever fills its batch does the rest. After
/// smoltcp's `DeviceCapabilities`, which tells an interface which checksums
/// its device computes; a TUN opened with `IFF_VNET_HDR` does all three, a
/// plain one none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Takes TSO super-packets (up to 64 KiB behind one header) and cuts
    /// them into wire segments itself; for a device that does not, a
    /// super-packet is cut as it goes into the batch.
    pub tso: bool,
    /// Completes TCP checksums left partial (only the pseudo-header sum in
    /// the field), as a NIC with `NETIF_F_HW_CSUM` does: the stack then never
    /// sums a payload it sends. Only for a packet the device gets whole: one
    /// cut into wire segments on the way in has its checksum completed
    /// before, since cutting needs it complete.
    pub checksum_offload: bool,
    /// Writes a packet's payload pieces behind its headers itself (a gather
    /// write, `writev`), so that the payload is never copied into the
    /// packet: the device's own copy is then the only one. A payload stays
    /// in pieces only where the device also completes the checksum (nothing
    /// on the way reads the payload to sum it).
    pub gather: bool,
}

impl DeviceCaps {
    /// A device that does nothing itself (the default).
    pub const NONE: DeviceCaps = DeviceCaps { tso: false, checksum_offload: false, gather: false };
    /// A device that does everything above (a TUN with `IFF_VNET_HDR`).
    pub const ALL: DeviceCaps = DeviceCaps { tso: true, checksum_offload: true, gather: true };
}

/// Device counters, named after the kernel's `struct rtnl_link_stats64`
/// (what `ip -s link` prints) plus the batching and offload figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Packets handed to the caller.
    pub rx_packets: u64,
    /// Bytes handed to the caller.
    pub rx_bytes: u64,
    /// Reads that failed with something other than `WouldBlock`.
    pub rx_errors: u64,
    /// Packets lost on receive (e.g. a super-packet that could not be split).
    pub rx_dropped: u64,
    /// Packets written to the device.
    pub tx_packets: u64,
    /// Bytes written to the device.
    pub tx_bytes: u64,
    /// Packets the device refused (dropped, not retried).
    pub tx_errors: u64,
    /// `read(2)` calls that returned data (less than `rx_packets` with GSO).
    pub rx_syscalls: u64,
    /// `write(2)` calls that succeeded (less than `tx_packets` with GRO).
    pub tx_syscalls: u64,
    /// Receive wakeups that returned packets: `rx_packets / rx_wakeups` is
    /// the achieved batch size.
    pub rx_wakeups: u64,
    /// GSO super-packets split on receive.
    pub rx_gso_split: u64,
    /// GSO super-packets handed over whole (a batch in GRO mode).
    pub rx_gro_whole: u64,
}

/// Lock-free counters behind [`IoStats`], for implementations.
#[derive(Debug, Default)]
pub struct AtomicIoStats {
    pub(crate) rx_packets: AtomicU64,
    pub(crate) rx_bytes: AtomicU64,
    pub(crate) rx_errors: AtomicU64,
    pub(crate) rx_dropped: AtomicU64,
    pub(crate) tx_packets: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    pub(crate) tx_errors: AtomicU64,
    pub(crate) rx_syscalls: AtomicU64,
    pub(crate) tx_syscalls: AtomicU64,
    pub(crate) rx_wakeups: AtomicU64,
    pub(crate) rx_gso_split: AtomicU64,
    pub(crate) rx_gro_whole: AtomicU64,
}

impl AtomicIoStats {
    /// A snapshot.
    pub fn snapshot(&self) -> IoStats {
        IoStats {
            rx_packets: self.rx_packets.load(Relaxed),
            rx_bytes: self.rx_bytes.load(Relaxed),
            rx_errors: self.rx_errors.load(Relaxed),
            rx_dropped: self.rx_dropped.load(Relaxed),
            tx_packets: self.tx_packets.load(Relaxed),
            tx_bytes: self.tx_bytes.load(Relaxed),
            tx_errors: self.tx_errors.load(Relaxed),
            rx_syscalls: self.rx_syscalls.load(Relaxed),
            tx_syscalls: self.tx_syscalls.load(Relaxed),
            rx_wakeups: self.rx_wakeups.load(Relaxed),
            rx_gso_split: self.rx_gso_split.load(Relaxed),
            rx_gro_whole: self.rx_gro_whole.load(Relaxed),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Accounts the packets `batch[from..]` just received in one wakeup.
    pub(crate) fn rx_done(&self, batch: &RxBatch, from: usize) {
        let bytes: usize = batch.iter().skip(from).map(<[u8]>::len).sum();
        Self::add(&self.rx_packets, (batch.len() - from) as u64);
        Self::add(&self.rx_bytes, bytes as u64);
        Self::add(&self.rx_wakeups, 1);
    }
}

/// The error a receive on a full batch returns.
pub(crate) fn full_batch() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "receive into a full RxBatch")
}

/// Whether a write error means "this packet is bad" (drop it, go on) rather
/// than "the device is gone" (stop).
pub(crate) fn is_per_packet_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EMSGSIZE))
        || (e.raw_os_error().is_none() && e.kind() == io::ErrorKind::InvalidInput)
}

/// Async wrappers over [`PacketIo`].
pub trait PacketIoExt: PacketIo {
    /// Waits for packets and appends them to `batch`; see [`PacketIo::poll_recv_batch`].
    fn recv_batch<'a>(&'a self, batch: &'a mut RxBatch) -> impl std::future::Future<Output = io::Result<usize>> + 'a {
        poll_fn(move |cx| self.poll_recv_batch(cx, batch))
    }

    /// Writes and clears `batch`; see [`PacketIo::poll_send_batch`].
    fn send_batch<'a>(&'a self, batch: &'a mut TxBatch) -> impl std::future::Future<Output = io::Result<usize>> + 'a {
        poll_fn(move |cx| self.poll_send_batch(cx, batch))
    }

    /// Writes one packet.
    fn send<'a>(&'a self, packet: &'a [u8]) -> impl std::future::Future<Output = io::Result<()>> + 'a {
        poll_fn(move |cx| self.poll_send(cx, packet))
    }
}

impl<T: PacketIo + ?Sized> PacketIoExt for T {}

impl<T: PacketIo + ?Sized> PacketIo for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn poll_recv_batch(&self, cx: &mut Context<'_>, batch: &mut RxBatch) -> Poll<io::Result<usize>> {
        (**self).poll_recv_batch(cx, batch)
    }
    fn poll_send_batch(&self, cx: &mut Context<'_>, batch: &mut TxBatch) -> Poll<io::Result<usize>> {
        (**self).poll_send_batch(cx, batch)
    }
    fn poll_send(&self, cx: &mut Context<'_>, packet: &[u8]) -> Poll<io::Result<()>> {
        (**self).poll_send(cx, packet)
    }
    fn stats(&self) -> IoStats {
        (**self).stats()
    }
    fn caps(&self) -> DeviceCaps {
        (**self).caps()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A device that can do everything and moves nothing.
    struct Capable;

    impl PacketIo for Capable {
        fn name(&self) -> &str {
            "capable"
        }
        fn mtu(&self) -> usize {
            1500
        }
        fn poll_recv_batch(&self, _: &mut Context<'_>, _: &mut RxBatch) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn poll_send_batch(&self, _: &mut Context<'_>, b: &mut TxBatch) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(b.len()))
        }
        fn poll_send(&self, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn stats(&self) -> IoStats {
            IoStats::default()
        }
        fn caps(&self) -> DeviceCaps {
            DeviceCaps::ALL
        }
    }

    /// The runtime holds its devices as `Arc<dyn PacketIo>`: a capability
    /// the `Arc` does not pass on reads as the trait's default (none),
    /// and the stack silently does the work itself, which no other test
    /// would notice.
    #[test]
    fn an_arc_passes_on_every_capability() {
        let d: Arc<dyn PacketIo> = Arc::new(Capable);
        assert_eq!(d.caps(), DeviceCaps::ALL);
        let twice: Arc<Arc<dyn PacketIo>> = Arc::new(d);
        assert_eq!(twice.caps(), DeviceCaps::ALL);
    }
}
