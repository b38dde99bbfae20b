//! A [`PacketIo`] wrapper that records both directions to a pcap file.
//!
//! Wrapping instead of building capture into each device keeps it optional
//! per device and available for every implementation (TUN, in-memory). Timestamps
//! are wall-clock (Unix epoch) so the capture lines up with a tcpdump taken
//! on the veths at the same time.

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::pcap::PcapWriter;
use crate::{DeviceCaps, IoStats, PacketIo, RxBatch, TxBatch, TxChecksum};

/// A pcap writer shareable between taps (one file for all paths).
pub type SharedPcap = Arc<Mutex<PcapWriter>>;

/// Records every packet `inner` receives or sends.
pub struct PcapTap<T> {
    inner: T,
    pcap: SharedPcap,
    failed: std::sync::atomic::AtomicBool,
}

impl<T: PacketIo> PcapTap<T> {
    /// Wraps `inner`, recording into a new file at `path`.
    pub fn create(inner: T, path: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Self::with_writer(inner, Arc::new(Mutex::new(PcapWriter::create(path)?))))
    }

    /// Wraps `inner`, recording into `pcap` (possibly shared with other taps).
    pub fn with_writer(inner: T, pcap: SharedPcap) -> Self {
        PcapTap { inner, pcap, failed: false.into() }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The writer, e.g. to flush it.
    pub fn writer(&self) -> &SharedPcap {
        &self.pcap
    }

    /// Flushes buffered records to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.lock().flush()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PcapWriter> {
        self.pcap.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record<'a>(&self, packets: impl Iterator<Item = &'a [u8]>) {
        let mut w = self.lock();
        for p in packets {
            if let Err(e) = w.write_now(p) {
                // Capture is diagnostics: a full disk must not stop traffic.
                // Say so once.
                if !self.failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    eprintln!("warning: pcap capture for {} failed: {e}", self.inner.name());
                }
            }
        }
    }
}

impl<T: PacketIo> PacketIo for PcapTap<T> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn mtu(&self) -> usize {
        self.inner.mtu()
    }

    fn poll_recv_batch(&self, cx: &mut Context<'_>, batch: &mut RxBatch) -> Poll<io::Result<usize>> {
        let from = batch.len();
        let r = self.inner.poll_recv_batch(cx, batch);
        if let Poll::Ready(Ok(_)) = r {
            // A checksum the sending stack left for the hardware is
            // recorded completed, as that hardware would have put it on a
            // wire: a reader that verifies checksums then flags only real
            // damage. The copy is the capture's; the stack gets the packet
            // as it came (and trusts it, never summing it), so only a
            // capture pays for the sum. A super-packet is recorded whole,
            // as it was read and as the stack took it, with its IP length.
            let packets: Vec<Cow<'_, [u8]>> = (from..batch.len())
                .filter_map(|i| {
                    let p = batch.get(i)?;
                    let Some((start, offset)) = batch.partial_checksum(i) else { return Some(Cow::Borrowed(p)) };
                    let mut c = p.to_vec();
                    mptun_wire::checksum::complete_partial(&mut c, start, offset);
                    Some(Cow::Owned(c))
                })
                .collect();
            self.record(packets.iter().map(|c| c.as_ref()));
        }
        r
    }

    fn poll_send_batch(&self, cx: &mut Context<'_>, batch: &mut TxBatch) -> Poll<io::Result<usize>> {
        let from = batch.tapped().max(batch.len() - batch.unsent());
        // A checksum left to the device is recorded completed, as the
        // device will send it (a capture on the wire shows it so, and a
        // dissector that verifies checksums accepts it), and a gathered
        // payload behind its headers.
        {
            let packets: Vec<Cow<'_, [u8]>> = batch
                .iter()
                .enumerate()
                .skip(from)
                .map(|(i, p)| {
                    if batch.checksum(i) != Some(TxChecksum::Partial) && batch.tail(i).is_empty() {
                        return Cow::Borrowed(p);
                    }
                    let mut c = p.to_vec();
                    for piece in batch.tail(i) {
                        c.extend_from_slice(piece);
                    }
                    let _ = mptun_wire::gso::complete_checksum(&mut c);
                    Cow::Owned(c)
                })
                .collect();
            self.record(packets.iter().map(|c| c.as_ref()));
        }
        batch.set_all_tapped();
        self.inner.poll_send_batch(cx, batch)
    }

    fn poll_send(&self, cx: &mut Context<'_>, packet: &[u8]) -> Poll<io::Result<()>> {
        let r = self.inner.poll_send(cx, packet);
        if let Poll::Ready(Ok(())) = r {
            self.record(std::iter::once(packet));
        }
        r
    }

    fn stats(&self) -> IoStats {
        self.inner.stats()
    }

    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }
}

impl<T> Drop for PcapTap<T> {
    fn drop(&mut self) {
        let _ = self.pcap.lock().map(|mut w| w.flush());
    }
}
