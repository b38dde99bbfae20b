//! TUN devices through tun-rs, registered with tokio.
//!
//! tun-rs creates and configures the device (and splits the GSO
//! super-packets the kernel hands over on read); the fd is then registered
//! with tokio's reactor directly so one readiness event can be drained with
//! plain `read(2)` calls until `EAGAIN`. On write, each packet goes down as
//! it is: a TSO super-packet from the stack with a GSO `virtio_net_hdr`
//! (the kernel cuts it, or forwards it whole to a device that does), any
//! other packet with an empty one. Nothing is coalesced in userspace: the
//! stack builds super-segments itself, with one header and one MPTCP
//! mapping, as Linux's TCP does.
//!
//! Configuration happens on the creating thread, in that thread's network
//! namespace: the ioctl and netlink sockets tun-rs opens belong to it. That is
//! why everything (addresses, MTU, up) is done at creation and cached, and why
//! [`crate::netns::spawn_tun_in_netns`] creates the device on a thread that
//! entered the namespace. The fd itself works from any thread afterwards.

use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tun_rs::{DeviceBuilder, SyncDevice, VIRTIO_NET_HDR_LEN};

use crate::batch::Unsent;
use crate::packet_io::{full_batch, is_per_packet_error, AtomicIoStats};
use crate::{DeviceCaps, IoStats, PacketIo, RxBatch, TxBatch, TxChecksum, HEADROOM, MAX_TAIL_PARTS};

use bytes::Bytes;

const _: () = assert!(HEADROOM == VIRTIO_NET_HDR_LEN, "slot headroom must fit the virtio-net header");

/// Linux's IFNAMSIZ less the terminating NUL.
const MAX_IFNAME: usize = 15;
/// Largest IP packet (the 16-bit total length), and thus largest GSO read.
const MAX_IP_PACKET: usize = 65_535;

/// An address with its prefix length, as `ip addr add` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length (0..=32 for IPv4, 0..=128 for IPv6).
    pub prefix: u8,
}

impl IfAddr {
    /// `addr/prefix`, checked.
    pub fn new(addr: IpAddr, prefix: u8) -> io::Result<Self> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(invalid(format!("prefix /{prefix} too long for {addr}")));
        }
        Ok(IfAddr { addr, prefix })
    }
}

impl std::str::FromStr for IfAddr {
    type Err = io::Error;
    /// Parses `10.0.0.1/24` or `fd00::1/64`.
    fn from_str(s: &str) -> io::Result<Self> {
        let (a, p) = s.split_once('/').ok_or_else(|| invalid(format!("{s:?}: expected ADDR/PREFIX")))?;
        let addr: IpAddr = a.parse().map_err(|e| invalid(format!("{a:?}: {e}")))?;
        let prefix: u8 = p.parse().map_err(|e| invalid(format!("{p:?}: {e}")))?;
        IfAddr::new(addr, prefix)
    }
}

impl std::fmt::Display for IfAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// How to create a TUN device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunConfig {
    /// Interface name; the kernel picks `tunN` when `None`.
    pub name: Option<String>,
    /// Addresses to assign (several make one TUN carry several paths).
    pub addresses: Vec<IfAddr>,
    /// Interface MTU.
    pub mtu: u16,
    /// Bring the link up.
    pub up: bool,
    /// Open with `IFF_VNET_HDR` and enable TSO/checksum offload: the kernel
    /// may then hand over TCP super-packets (split here, so callers still
    /// see wire-sized packets) and accepts the stack's TSO super-packets (a
    /// [`crate::TxBatch`] for it keeps them whole). On by default: offload
    /// multiplies bulk TCP's rate (`benches/tun_io.rs` measures it); falls
    /// back to plain framing when the kernel refuses it.
    pub offload: bool,
    /// `txqueuelen` (packets the kernel queues towards the reader); the
    /// kernel default of 500 drops bursts a slow reader cannot absorb.
    pub tx_queue_len: Option<u32>,
}

impl Default for TunConfig {
    fn default() -> Self {
        TunConfig { name: None, addresses: Vec::new(), mtu: 1500, up: true, offload: true, tx_queue_len: None }
    }
}

impl TunConfig {
    /// A config for interface `name` with MTU 1500, up, offload on.
    pub fn new(name: &str) -> Self {
        TunConfig { name: Some(name.to_owned()), ..Default::default() }
    }

    /// Adds an address.
    pub fn address(mut self, addr: IpAddr, prefix: u8) -> io::Result<Self> {
        self.addresses.push(IfAddr::new(addr, prefix)?);
        Ok(self)
    }

    /// Sets the MTU.
    pub fn mtu(mut self, mtu: u16) -> Self {
        self.mtu = mtu;
        self
    }

    /// Turns offload on or off.
    pub fn offload(mut self, on: bool) -> Self {
        self.offload = on;
        self
    }

    /// Sets `txqueuelen`.
    pub fn tx_queue_len(mut self, len: u32) -> Self {
        self.tx_queue_len = Some(len);
        self
    }

    /// Checks what the kernel would reject with a less helpful error.
    pub fn validate(&self) -> io::Result<()> {
        if let Some(name) = &self.name {
            if name.is_empty() || name.len() > MAX_IFNAME || name.contains(['/', ' ', '\0']) || name == "." {
                return Err(invalid(format!("bad interface name {name:?} (1..=15 bytes, no '/', space)")));
            }
        }
        if self.mtu < 68 {
            return Err(invalid(format!("MTU {} below the IPv4 minimum of 68", self.mtu)));
        }
        if self.mtu < 1280 && self.addresses.iter().any(|a| a.addr.is_ipv6()) {
            return Err(invalid(format!("MTU {} below the IPv6 minimum of 1280", self.mtu)));
        }
        for a in &self.addresses {
            IfAddr::new(a.addr, a.prefix)?;
        }
        Ok(())
    }

    /// Creates and configures the device on the calling thread, in its
    /// network namespace. Returns the blocking device so it can be moved to
    /// the thread that registers it with tokio.
    pub(crate) fn build_here(&self) -> io::Result<(SyncDevice, String)> {
        self.validate()?;
        match self.build_with(self.offload) {
            // A kernel without IFF_VNET_HDR/TUNSETOFFLOAD support: plain framing
            // works everywhere, and `TunDevice::offload()` tells which one we got.
            Err(e) if self.offload && e.kind() != io::ErrorKind::InvalidInput => self.build_with(false),
            r => r,
        }
    }

    fn build_with(&self, offload: bool) -> io::Result<(SyncDevice, String)> {
        let mut b = DeviceBuilder::new().mtu(self.mtu).enable(self.up).offload(offload);
        if let Some(name) = &self.name {
            b = b.name(name.clone());
        }
        if let Some(q) = self.tx_queue_len {
            b = b.tx_queue_len(q);
        }
        let mut v4 = self.addresses.iter().filter_map(|a| match a.addr {
            IpAddr::V4(v4) => Some((v4, a.prefix)),
            IpAddr::V6(_) => None,
        });
        if let Some((addr, prefix)) = v4.next() {
            b = b.ipv4(addr, prefix, None);
        }
        for a in &self.addresses {
            if let IpAddr::V6(v6) = a.addr {
                b = b.ipv6(v6, a.prefix);
            }
        }
        let dev = b.build_sync()?;
        for (addr, prefix) in v4 {
            dev.add_address_v4(addr, prefix)?;
        }
        let name = dev.name()?;
        Ok((dev, name))
    }
}

/// A TUN device: raw IP packets, registered with the current tokio runtime.
pub struct TunDevice {
    fd: AsyncFd<SyncDevice>,
    name: String,
    mtu: usize,
    offload: bool,
    addresses: Vec<IfAddr>,
    netns: Option<String>,
    stats: AtomicIoStats,
    /// Offload only: where one read lands before being split (a GSO
    /// super-packet plus its virtio header does not fit a slot).
    rx_scratch: Mutex<Vec<u8>>,
}

impl TunDevice {
    /// Creates a TUN device in the calling thread's network namespace (use
    /// this when the process already runs inside the right namespace).
    ///
    /// Must be called within a tokio runtime.
    pub fn create(config: &TunConfig) -> io::Result<TunDevice> {
        let (dev, name) = config.build_here()?;
        Self::register(dev, name, config, None)
    }

    /// Wraps a device built elsewhere (possibly in another namespace) and
    /// registers it with the current runtime.
    pub(crate) fn register(
        dev: SyncDevice,
        name: String,
        config: &TunConfig,
        netns: Option<String>,
    ) -> io::Result<TunDevice> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other("TunDevice must be created inside a tokio runtime"));
        }
        dev.set_nonblocking(true)?;
        let offload = dev.tcp_gso();
        // SAFETY: the SyncDevice owns its fd and keeps it open, unchanged,
        // for as long as the AsyncFd owns the device.
        let fd = unsafe { AsyncFd::register(dev) }.map_err(|e| e.into_parts().1)?;
        Ok(TunDevice {
            fd,
            name,
            mtu: usize::from(config.mtu),
            offload,
            addresses: config.addresses.clone(),
            netns,
            stats: AtomicIoStats::default(),
            rx_scratch: Mutex::new(if offload { vec![0; VIRTIO_NET_HDR_LEN + MAX_IP_PACKET] } else { Vec::new() }),
        })
    }

    /// Whether `IFF_VNET_HDR` offload is active.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// The addresses it was created with.
    pub fn addresses(&self) -> &[IfAddr] {
        &self.addresses
    }

    /// The namespace it lives in (`None`: the process's own).
    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    /// Slots one offload read may fill: a 64 KiB super-packet cut at the
    /// smallest segment size the kernel would choose for this MTU.
    fn gso_slots(&self) -> usize {
        // IPv6 + TCP with options leaves at least mtu - 120 bytes per segment;
        // never assume fewer than 536 (the TCP default MSS).
        MAX_IP_PACKET / self.mtu.saturating_sub(120).max(536) + 1
    }

    /// One read into the batch: the packets it appended, 0 for a packet
    /// that was lost (counted in `rx_dropped`).
    fn read_once(&self, dev: &SyncDevice, batch: &mut RxBatch) -> io::Result<usize> {
        if !self.offload {
            let buf = batch.next_free_mut().ok_or_else(full_batch)?;
            let n = dev.recv(buf)?;
            // A packet longer than the slot (the MTU raised after the device
            // was opened) is cut by the read, which reports either its whole
            // length or the slot's (the kernel's `tun_put_user` returns the
            // first, its read path may clamp it to the second, leaving a
            // header that claims more than arrived). Either way it is lost,
            // never passed on cut nor recorded past the slot.
            if n > buf.len() || claimed_len(&buf[..n]).is_some_and(|len| len > n) {
                AtomicIoStats::add(&self.stats.rx_dropped, 1);
                return Ok(0);
            }
            batch.commit(n);
            return Ok(1);
        }
        if batch.gro() {
            return self.read_whole(dev, batch);
        }
        let mut scratch = self.rx_scratch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (slots, sizes) = batch.free_slots_mut();
        match dev.recv_multiple(&mut scratch, slots, sizes, HEADROOM) {
            Ok(n) => {
                batch.commit_many(n);
                if n > 1 {
                    AtomicIoStats::add(&self.stats.rx_gso_split, 1);
                }
                Ok(n)
            }
            // The read consumed a packet that could not be split (or was
            // malformed): count it as dropped, keep reading.
            Err(e) if e.kind() != io::ErrorKind::WouldBlock && e.raw_os_error().is_none() => {
                AtomicIoStats::add(&self.stats.rx_dropped, 1);
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// One offload read kept whole (the batch is in GRO mode): the virtio
    /// header lands in the slot's headroom and the packet, up to 64 KiB,
    /// after it; no copy, no split, no checksum pass here.
    fn read_whole(&self, dev: &SyncDevice, batch: &mut RxBatch) -> io::Result<usize> {
        let buf = batch.next_free_whole(MAX_IP_PACKET).ok_or_else(full_batch)?;
        let n = dev.recv(buf)?;
        // A TUN read reports the packet's whole length even when it had to
        // cut it (`tun_put_user`): longer than the slot is a packet lost.
        if n <= HEADROOM || n > buf.len() {
            AtomicIoStats::add(&self.stats.rx_dropped, 1);
            return Ok(0);
        }
        let rx = vnet_rx(&buf[..HEADROOM]);
        batch.commit_whole(n - HEADROOM, rx.gso_size, rx.checksum_verified, rx.partial);
        if rx.gso_size != 0 {
            AtomicIoStats::add(&self.stats.rx_gro_whole, 1);
        }
        Ok(1)
    }

    /// Writes one packet, its tail behind the slot's bytes (a gather write,
    /// one `writev`).
    fn write_one(&self, dev: &SyncDevice, p: Unsent<'_>) -> io::Result<usize> {
        let Unsent { slot: packet_with_headroom, tail, gso, checksum } = p;
        let partial = checksum == TxChecksum::Partial;
        if !self.offload {
            if !tail.is_empty() {
                // `gather` is the offload's: a batch for this device never
                // keeps a tail.
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "a gathered packet on a TUN without offload"));
            }
            if partial {
                // Not ours to leave partial: complete it as a NIC would.
                mptun_wire::gso::complete_checksum(&mut packet_with_headroom[HEADROOM..])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("partial checksum: {e}")))?;
            }
            return dev.send(&packet_with_headroom[HEADROOM..]);
        }
        let tail_len = tail.iter().map(Bytes::len).sum();
        let (hdr, packet) = packet_with_headroom.split_at_mut(HEADROOM);
        vnet_header(hdr, packet, tail_len, gso, partial)?;
        if tail.is_empty() {
            return dev.send(packet_with_headroom);
        }
        let mut iov = [IoSlice::new(&[]); 1 + MAX_TAIL_PARTS];
        if tail.len() > MAX_TAIL_PARTS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "more tail pieces than a batch takes"));
        }
        iov[0] = IoSlice::new(packet_with_headroom);
        for (v, piece) in iov[1..].iter_mut().zip(tail) {
            *v = IoSlice::new(piece);
        }
        dev.send_vectored(&iov[..1 + tail.len()])
    }
}

/// The length an IP packet's header gives it (IPv4's total length, IPv6's
/// fixed header and payload length), where there is one to read.
fn claimed_len(p: &[u8]) -> Option<usize> {
    match (p.first()? >> 4, p) {
        (4, [_, _, hi, lo, ..]) => Some(usize::from(u16::from_be_bytes([*hi, *lo]))),
        (6, [_, _, _, _, hi, lo, ..]) => Some(40 + usize::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }
}

/// `virtio_net_hdr` flags: the device completes the checksum.
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
/// `virtio_net_hdr` flags (receive): the checksum was verified.
const VIRTIO_NET_HDR_F_DATA_VALID: u8 = 2;
/// `virtio_net_hdr` GSO types.
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
/// `virtio_net_hdr` GSO type bit: the first segment carries CWR.
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

/// What a received `virtio_net_hdr` says about its packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VnetRx {
    /// Wire segment size of a TCP super-packet (0: an ordinary packet, or a
    /// super-packet of another protocol, which is passed on as one packet).
    pub gso_size: u16,
    /// The kernel vouches for the TCP checksum (`DATA_VALID`) or left it
    /// partial for the hardware (`NEEDS_CSUM`): it must not be verified.
    pub checksum_verified: bool,
    /// `NEEDS_CSUM`'s `csum_start` and `csum_offset`: where a capture
    /// completes the checksum that the packet carries only partly.
    pub partial: Option<(u16, u16)>,
}

/// Reads the `virtio_net_hdr` in front of a received packet.
pub(crate) fn vnet_rx(hdr: &[u8]) -> VnetRx {
    let (flags, gso_type) = (hdr[0], hdr[1] & !VIRTIO_NET_HDR_GSO_ECN);
    let gso_size = match gso_type {
        VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_TCPV6 => u16::from_le_bytes([hdr[4], hdr[5]]),
        _ => 0,
    };
    let partial = (flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0)
        .then(|| (u16::from_le_bytes([hdr[6], hdr[7]]), u16::from_le_bytes([hdr[8], hdr[9]])));
    VnetRx {
        gso_size,
        checksum_verified: flags & (VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID) != 0,
        partial,
    }
}
/// Offset of the checksum field in a TCP header (`csum_offset`).
const TCP_CSUM_OFFSET: u16 = 16;

/// Fills the `virtio_net_hdr` in front of an outgoing packet: all zero (no
/// GSO, the checksum is complete) for an ordinary packet with a complete
/// checksum; `NEEDS_CSUM` (the kernel completes the TCP checksum from
/// `csum_start`, as for a NIC's `CHECKSUM_PARTIAL`) for one the stack left
/// `partial`; and for a TSO super-packet also the kernel's segmentation
/// request (`TCPV4`/`TCPV6`, the segment size), so the kernel forwards one
/// 64 KiB skb and cuts it only where a device needs it. The fields are
/// little-endian (a TUN's legacy virtio header on a little-endian host;
/// tun-rs makes the same assumption).
pub(crate) fn vnet_header(
    hdr: &mut [u8],
    packet: &mut [u8],
    tail_len: usize,
    gso: u16,
    partial: bool,
) -> io::Result<()> {
    hdr.fill(0);
    if gso == 0 && !partial {
        return Ok(());
    }
    let l = mptun_wire::gso::Layout::parse_head(packet, tail_len)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TSO super-packet: {e}")))?;
    let segmented = gso != 0 && l.payload_len() > usize::from(gso);
    if !segmented && !partial {
        // One segment: an ordinary packet, its checksum already complete.
        return Ok(());
    }
    // A complete checksum becomes partial; one the stack left partial
    // already holds the pseudo-header sum (`emit_tcp_packet_offload`).
    if !partial {
        mptun_wire::gso::set_partial_checksum(packet, &l);
    }
    hdr[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    if segmented {
        hdr[1] = if l.src.is_ipv6() { VIRTIO_NET_HDR_GSO_TCPV6 } else { VIRTIO_NET_HDR_GSO_TCPV4 };
        hdr[2..4].copy_from_slice(&(l.header_len as u16).to_le_bytes());
        hdr[4..6].copy_from_slice(&gso.to_le_bytes());
    }
    hdr[6..8].copy_from_slice(&(l.ip_len as u16).to_le_bytes());
    hdr[8..10].copy_from_slice(&TCP_CSUM_OFFSET.to_le_bytes());
    Ok(())
}

impl PacketIo for TunDevice {
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
        // With offload one read may split into up to `gso_slots` packets, and
        // tun-rs needs that many free slots before it reads. Rather than stop
        // reading early, the batch keeps up to `gso_slots` spare slots beyond
        // its capacity (allocated once) and the drain stops at the capacity.
        let from = batch.len();
        loop {
            let mut guard = match self.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(g)) => g,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            let mut err = None;
            // Drain: keep reading under this one readiness event until the
            // kernel queue is empty or the batch is full.
            while !batch.is_full() {
                if self.offload && !batch.gro() {
                    batch.reserve_spare(batch.len() + self.gso_slots());
                }
                match guard.try_io(|fd| self.read_once(fd.get_ref(), batch)) {
                    Ok(Ok(_)) => AtomicIoStats::add(&self.stats.rx_syscalls, 1),
                    Ok(Err(e)) => {
                        AtomicIoStats::add(&self.stats.rx_errors, 1);
                        err = Some(e);
                        break;
                    }
                    // WouldBlock: readiness cleared, the next poll re-arms.
                    Err(_would_block) => break,
                }
            }
            let n = batch.len() - from;
            if n > 0 {
                self.stats.rx_done(batch, from);
                return Poll::Ready(Ok(n));
            }
            if let Some(e) = err {
                return Poll::Ready(Err(e));
            }
        }
    }

    fn poll_send_batch(&self, cx: &mut Context<'_>, batch: &mut TxBatch) -> Poll<io::Result<usize>> {
        if batch.unsent() == 0 {
            return Poll::Ready(Ok(batch.finish_send()));
        }
        loop {
            let mut guard = match self.fd.poll_write_ready(cx) {
                Poll::Ready(Ok(g)) => g,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            loop {
                let Some(p) = batch.next_unsent() else {
                    return Poll::Ready(Ok(batch.finish_send()));
                };
                let len = p.packet_len();
                match guard.try_io(|fd| self.write_one(fd.get_ref(), p)) {
                    Ok(Ok(_)) => {
                        AtomicIoStats::add(&self.stats.tx_packets, 1);
                        AtomicIoStats::add(&self.stats.tx_bytes, len as u64);
                        AtomicIoStats::add(&self.stats.tx_syscalls, 1);
                        batch.advance_sent(1);
                    }
                    Ok(Err(e)) if is_per_packet_error(&e) => {
                        AtomicIoStats::add(&self.stats.tx_errors, 1);
                        batch.reject_one();
                    }
                    Ok(Err(e)) => return Poll::Ready(Err(e)),
                    Err(_would_block) => break,
                }
            }
        }
    }

    fn poll_send(&self, cx: &mut Context<'_>, packet: &[u8]) -> Poll<io::Result<()>> {
        let hdr = [0u8; HEADROOM];
        loop {
            let mut guard = match self.fd.poll_write_ready(cx) {
                Poll::Ready(Ok(g)) => g,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            let r = guard.try_io(|fd| {
                if self.offload {
                    fd.get_ref().send_vectored(&[io::IoSlice::new(&hdr), io::IoSlice::new(packet)])
                } else {
                    fd.get_ref().send(packet)
                }
            });
            match r {
                Ok(Ok(_)) => {
                    AtomicIoStats::add(&self.stats.tx_packets, 1);
                    AtomicIoStats::add(&self.stats.tx_bytes, packet.len() as u64);
                    AtomicIoStats::add(&self.stats.tx_syscalls, 1);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => {
                    AtomicIoStats::add(&self.stats.tx_errors, 1);
                    return Poll::Ready(Err(e));
                }
                Err(_would_block) => continue,
            }
        }
    }

    fn stats(&self) -> IoStats {
        self.stats.snapshot()
    }

    /// With offload, everything: the kernel cuts super-packets and
    /// completes checksums as the virtio header asks, and a packet and its
    /// tail go out in one `writev` behind that header, so the kernel's copy
    /// of them into its skb is the only one the payload gets on its way
    /// out.
    fn caps(&self) -> DeviceCaps {
        if self.offload {
            DeviceCaps::ALL
        } else {
            DeviceCaps::NONE
        }
    }
}

impl AsRawFd for TunDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.get_ref().as_raw_fd()
    }
}

impl std::fmt::Debug for TunDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunDevice")
            .field("name", &self.name)
            .field("mtu", &self.mtu)
            .field("offload", &self.offload)
            .field("addresses", &self.addresses)
            .field("netns", &self.netns)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{checksum, tcp_packet, TcpFields};
    use std::net::SocketAddr;

    fn super_packet(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
        let (s, d): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let ts = [1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 6];
        tcp_packet(s, d, TcpFields { seq: 1000, ack: 1, flags: 0x18, window: 100, options: &ts }, payload)
    }

    /// What the kernel does with a `NEEDS_CSUM` packet: the complement of
    /// the sum from `csum_start` on, stored at `csum_start + csum_offset`.
    fn complete_checksum(hdr: &[u8], pkt: &mut [u8]) {
        let start = usize::from(u16::from_le_bytes([hdr[6], hdr[7]]));
        let at = start + usize::from(u16::from_le_bytes([hdr[8], hdr[9]]));
        let c = checksum(&pkt[start..], 0);
        pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn gso_header_asks_the_kernel_to_cut_and_checksum() {
        for (src, dst, ip_len, gso_type) in [
            ("10.0.0.1:1", "10.0.0.2:2", 20usize, VIRTIO_NET_HDR_GSO_TCPV4),
            ("[fd00::1]:1", "[fd00::2]:2", 40, VIRTIO_NET_HDR_GSO_TCPV6),
        ] {
            let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
            let orig = super_packet(src, dst, &payload);
            let mut pkt = orig.clone();
            let mut hdr = [0xffu8; HEADROOM];
            vnet_header(&mut hdr, &mut pkt, 0, 1448, false).unwrap();
            assert_eq!(hdr[0], VIRTIO_NET_HDR_F_NEEDS_CSUM);
            assert_eq!(hdr[1], gso_type);
            assert_eq!(u16::from_le_bytes([hdr[2], hdr[3]]) as usize, ip_len + 32, "hdr_len: IP + TCP with options");
            assert_eq!(u16::from_le_bytes([hdr[4], hdr[5]]), 1448);
            assert_eq!(u16::from_le_bytes([hdr[6], hdr[7]]) as usize, ip_len);
            assert_eq!(u16::from_le_bytes([hdr[8], hdr[9]]), 16);
            assert_ne!(pkt, orig, "the checksum field holds the partial sum");
            // The kernel completes the checksum: the original, correct one.
            complete_checksum(&hdr, &mut pkt);
            assert_eq!(pkt, orig);
            assert!(mptun_wire::parse_tcp_packet(&pkt).is_ok(), "a parser that verifies checksums accepts it");
        }
    }

    #[test]
    fn ordinary_packets_get_an_empty_header() {
        let mut pkt = super_packet("10.0.0.1:1", "10.0.0.2:2", &[7; 1000]);
        let orig = pkt.clone();
        let mut hdr = [0xffu8; HEADROOM];
        vnet_header(&mut hdr, &mut pkt, 0, 0, false).unwrap();
        assert_eq!((hdr, &pkt), ([0; HEADROOM], &orig));
        // A "super-packet" of one segment needs no segmentation either.
        vnet_header(&mut hdr, &mut pkt, 0, 1448, false).unwrap();
        assert_eq!((hdr, &pkt), ([0; HEADROOM], &orig));
    }

    /// A packet the stack left with a partial checksum (checksum offload)
    /// asks the kernel to complete it (`NEEDS_CSUM`, `csum_start` at the TCP
    /// header), with a segmentation request only when it is a super-packet
    /// of more than one segment; the kernel's completion gives the packet a
    /// stack without offload would have built.
    #[test]
    fn partial_checksums_are_left_to_the_kernel() {
        for (src, dst, ip_len) in [("10.0.0.1:1", "10.0.0.2:2", 20usize), ("[fd00::1]:1", "[fd00::2]:2", 40)] {
            for (plen, gso, segmented) in [(1000usize, 0u16, false), (1000, 1448, false), (5001, 1448, true)] {
                let payload: Vec<u8> = (0..plen as u32).map(|i| (i * 7) as u8).collect();
                let full = super_packet(src, dst, &payload);
                let mut pkt = full.clone();
                let l = mptun_wire::gso::Layout::parse(&pkt).unwrap();
                mptun_wire::gso::set_partial_checksum(&mut pkt, &l);
                let mut hdr = [0xffu8; HEADROOM];
                vnet_header(&mut hdr, &mut pkt, 0, gso, true).unwrap();
                // Only the headers here, the payload gathered behind them
                // by the write: the same virtio header.
                let hlen = pkt.len() - plen;
                let mut gathered = [0u8; HEADROOM];
                vnet_header(&mut gathered, &mut pkt.clone()[..hlen], plen, gso, true).unwrap();
                assert_eq!(gathered, hdr, "{plen} by {gso}, gathered");
                assert!(vnet_header(&mut gathered, &mut pkt.clone()[..hlen], plen - 1, gso, true).is_err());
                assert_eq!(hdr[0], VIRTIO_NET_HDR_F_NEEDS_CSUM);
                assert_eq!(hdr[1] != 0, segmented, "a GSO type only for a super-packet: {plen} by {gso}");
                assert_eq!(u16::from_le_bytes([hdr[4], hdr[5]]), if segmented { gso } else { 0 });
                assert_eq!(u16::from_le_bytes([hdr[6], hdr[7]]) as usize, ip_len);
                assert_eq!(u16::from_le_bytes([hdr[8], hdr[9]]), 16);
                complete_checksum(&hdr, &mut pkt);
                assert_eq!(pkt, full);
            }
        }
    }

    #[test]
    fn malformed_super_packets_are_refused_as_invalid_input() {
        let pkt = super_packet("10.0.0.1:1", "10.0.0.2:2", &[7; 5000]);
        let mut hdr = [0u8; HEADROOM];
        for cut in [0, 10, 30] {
            let mut p = pkt[..cut].to_vec();
            let e = vnet_header(&mut hdr, &mut p, 0, 1448, false).unwrap_err();
            assert!(crate::packet_io::is_per_packet_error(&e), "{e}");
        }
        let mut p = pkt.clone();
        p[9] = 17; // UDP
        assert!(vnet_header(&mut hdr, &mut p, 0, 1448, false).is_err());
        assert!(vnet_header(&mut hdr, &mut p, 0, 0, true).is_err(), "a partial checksum on what is not TCP");
    }

    #[test]
    fn claimed_len_reads_the_ip_header_s_length() {
        let udp = crate::testutil::udp_packet("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap(), &[7; 100]);
        assert_eq!(claimed_len(&udp), Some(128));
        assert_eq!(claimed_len(&udp[..4]), Some(128), "what a cut read leaves");
        let v6 = crate::testutil::udp_packet("[fd00::1]:1".parse().unwrap(), "[fd00::2]:2".parse().unwrap(), &[7; 100]);
        assert_eq!(claimed_len(&v6), Some(148));
        assert_eq!(claimed_len(&[]), None);
        assert_eq!(claimed_len(&[0x45, 0, 0]), None, "too short to say");
        assert_eq!(claimed_len(&[0x00; 20]), None, "not IP");
    }

    #[test]
    fn received_vnet_header_says_segment_size_and_checksum_trust() {
        let hdr = |flags: u8, gso_type: u8, size: u16| {
            let mut h = [0u8; 10];
            h[0] = flags;
            h[1] = gso_type;
            h[4..6].copy_from_slice(&size.to_le_bytes());
            // csum_start 20 (an IPv4 header), csum_offset 16 (TCP's field).
            h[6..8].copy_from_slice(&20u16.to_le_bytes());
            h[8..10].copy_from_slice(&16u16.to_le_bytes());
            vnet_rx(&h)
        };
        let partial = Some((20, 16));
        assert_eq!(
            hdr(0, 0, 0),
            VnetRx { gso_size: 0, checksum_verified: false, partial: None },
            "complete checksum: verify it"
        );
        assert_eq!(
            hdr(1, 0, 0),
            VnetRx { gso_size: 0, checksum_verified: true, partial },
            "NEEDS_CSUM: partial, trusted, and where to complete it"
        );
        assert_eq!(hdr(2, 0, 0), VnetRx { gso_size: 0, checksum_verified: true, partial: None }, "DATA_VALID");
        assert_eq!(hdr(1, VIRTIO_NET_HDR_GSO_TCPV4, 1448), VnetRx { gso_size: 1448, checksum_verified: true, partial });
        assert_eq!(hdr(1, VIRTIO_NET_HDR_GSO_TCPV6 | VIRTIO_NET_HDR_GSO_ECN, 1428).gso_size, 1428);
        assert_eq!(hdr(1, 3, 1400).gso_size, 0, "UDP GSO is not a TCP super-segment");
        // A size in a header that says no GSO is ignored.
        assert_eq!(hdr(0, 0, 1448).gso_size, 0);
    }
}
