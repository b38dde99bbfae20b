//! AF_PACKET sockets: whole Ethernet frames in and out of one interface.
//!
//! linkem sits between two interfaces of a middle namespace and must see every frame, whatever
//! its addresses, and put it back on the other side untouched, so it works at layer 2: one
//! receiving socket per ingress interface (promiscuous, ignoring the frames we transmit
//! ourselves) and one sending socket per egress interface that bypasses the qdisc layer.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const ETH_P_ALL: u16 = 0x0003;

/// An AF_PACKET SOCK_RAW socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

/// The outcome of one non-blocking receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recv {
    /// A frame of `len` bytes is in the buffer; `wire_len` is its real length, larger than `len`
    /// when the buffer was too small (a GRO/TSO super-frame).
    Frame { len: usize, wire_len: usize },
    /// Nothing to read right now.
    Empty,
    /// A frame we must not forward (one this host sent on the interface).
    Skipped,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The kernel's index for `ifname`.
pub fn ifindex(ifname: &str) -> io::Result<i32> {
    let c = CString::new(ifname).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface named {ifname}")));
    }
    Ok(idx as i32)
}

/// The MTU of `ifname` (what the egress accepts, Ethernet header excluded).
pub fn mtu(ifname: &str) -> io::Result<usize> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu"))?;
    s.trim().parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "unreadable mtu"))
}

/// Sets a receive buffer of `bytes` on `fd`: `SO_RCVBUFFORCE` passes `net.core.rmem_max` when
/// we are privileged, else the capped `SO_RCVBUF`. A forwarder (or a test's receiver) that the
/// host deschedules for milliseconds must not drop at its socket what the link model delivered.
pub fn force_recv_buffer(fd: RawFd, bytes: usize) -> io::Result<()> {
    let want = bytes.min(i32::MAX as usize) as libc::c_int;
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want).is_err() {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, want)?;
    }
    Ok(())
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    cvt(unsafe {
        libc::setsockopt(fd, level, name, &v as *const _ as *const libc::c_void, size_of::<libc::c_int>() as _)
    })?;
    Ok(())
}

impl PacketSocket {
    fn open(ifname: &str, protocol: u16) -> io::Result<Self> {
        let ifindex = ifindex(ifname)?;
        // SAFETY: plain socket(2) call; the result is checked before being owned.
        let fd = cvt(unsafe {
            libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol.to_be() as libc::c_int)
        })?;
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll and the length matches it.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const _ as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(PacketSocket { fd, ifindex })
    }

    /// A socket receiving every frame arriving on `ifname` (not those leaving it), in
    /// promiscuous mode, non-blocking, with a receive buffer of `rcvbuf` bytes.
    pub fn open_rx(ifname: &str, rcvbuf: usize) -> io::Result<Self> {
        let s = Self::open(ifname, ETH_P_ALL)?;
        let fd = s.fd.as_raw_fd();
        // Our own transmissions on this interface (the other direction's egress) must not loop back in.
        setsockopt_int(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)?;
        // SAFETY: packet_mreq is plain old data; zero is a valid starting value.
        let mut mr: libc::packet_mreq = unsafe { zeroed() };
        mr.mr_ifindex = s.ifindex;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        // SAFETY: passes a valid packet_mreq and its size.
        cvt(unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mr as *const _ as *const libc::c_void,
                size_of::<libc::packet_mreq>() as _,
            )
        })?;
        force_recv_buffer(fd, rcvbuf)?;
        // SAFETY: fcntl on our own descriptor.
        let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
        // SAFETY: as above.
        cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
        // Discard whatever queued between bind and now, and the counters that came with it.
        let mut buf = [0u8; 64];
        while !matches!(s.recv(&mut buf), Ok(Recv::Empty) | Err(_)) {}
        let _ = s.take_kernel_drops();
        Ok(s)
    }

    /// A send-only socket for `ifname` (protocol 0 so it receives nothing) that skips the
    /// egress qdisc: linkem already decided when the frame leaves.
    pub fn open_tx(ifname: &str) -> io::Result<Self> {
        let s = Self::open(ifname, 0)?;
        setsockopt_int(s.fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)?;
        Ok(s)
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads one frame without blocking.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Recv> {
        // SAFETY: sockaddr_ll is plain old data.
        let mut from: libc::sockaddr_ll = unsafe { zeroed() };
        let mut fromlen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `buf` and `from` are valid for writes of the lengths given; MSG_TRUNC makes the
        // kernel return the frame's real length even if it did not fit.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                &mut from as *mut _ as *mut libc::sockaddr,
                &mut fromlen,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Recv::Empty),
                _ => Err(e),
            };
        }
        // Belt and braces for kernels without PACKET_IGNORE_OUTGOING semantics on this path.
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            return Ok(Recv::Skipped);
        }
        let wire_len = n as usize;
        Ok(Recv::Frame { len: wire_len.min(buf.len()), wire_len })
    }

    /// Transmits one whole frame (blocking if the device is momentarily full).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is valid for reads of its length.
            let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr() as *const libc::c_void, frame.len(), 0) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Frames the kernel dropped because our receive buffer was full, since the last call
    /// (PACKET_STATISTICS resets on read).
    pub fn take_kernel_drops(&self) -> io::Result<u64> {
        // SAFETY: tpacket_stats is plain old data.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes and describe each other.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            )
        })?;
        Ok(st.tp_drops as u64)
    }
}
