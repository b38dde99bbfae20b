//! Paths: which device carries which local address.
//!
//! MPTCP subflows are told apart by their local address. The runtime may
//! give each path its own TUN (so each can sit behind its own qdisc) or put
//! several addresses on one TUN (fewer fds, one reader); this table makes
//! both look the same: an outgoing packet goes to the device that owns its
//! source address, and an incoming one is attributed to the path of its
//! destination address.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use crate::{PacketIo, TunDevice};

/// Index of a device in a [`PathSet`].
pub type DeviceId = usize;

/// One path: a local address and the device it lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// The local (client-side) address of the subflows on this path.
    pub local: IpAddr,
    /// The device carrying it.
    pub device: DeviceId,
}

/// The devices of a runtime and the paths over them.
#[derive(Default)]
pub struct PathSet {
    devices: Vec<Arc<dyn PacketIo>>,
    paths: Vec<Path>,
}

impl PathSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a device without paths; returns its id.
    pub fn add_device(&mut self, device: Arc<dyn PacketIo>) -> DeviceId {
        self.devices.push(device);
        self.devices.len() - 1
    }

    /// Adds a path. A local address belongs to one path only: two would make
    /// the choice of device for a packet ambiguous.
    pub fn add_path(&mut self, local: IpAddr, device: DeviceId) -> io::Result<usize> {
        if device >= self.devices.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no device {device}")));
        }
        if self.path_for_local(local).is_some() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{local} already has a path")));
        }
        self.paths.push(Path { local, device });
        Ok(self.paths.len() - 1)
    }

    /// Adds a TUN device and one path per address it was created with.
    pub fn add_tun(&mut self, tun: Arc<TunDevice>) -> io::Result<DeviceId> {
        let addrs: Vec<IpAddr> = tun.addresses().iter().map(|a| a.addr).collect();
        let id = self.add_device(tun);
        for a in addrs {
            self.add_path(a, id)?;
        }
        Ok(id)
    }

    /// All devices, by id.
    pub fn devices(&self) -> &[Arc<dyn PacketIo>] {
        &self.devices
    }

    /// All paths.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    /// The path whose local address is `addr`.
    pub fn path_for_local(&self, addr: IpAddr) -> Option<usize> {
        self.paths.iter().position(|p| p.local == addr)
    }

    /// The device an outgoing `packet` must leave by (its source address's
    /// path); `None` for unknown sources or packets too short to tell.
    pub fn device_for_outgoing(&self, packet: &[u8]) -> Option<DeviceId> {
        let src = source_addr(packet)?;
        self.paths.iter().find(|p| p.local == src).map(|p| p.device)
    }

    /// The path an incoming `packet` arrived for (its destination address).
    pub fn path_for_incoming(&self, packet: &[u8]) -> Option<usize> {
        self.path_for_local(destination_addr(packet)?)
    }
}

impl std::fmt::Debug for PathSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.devices.iter().map(|d| d.name()).collect();
        f.debug_struct("PathSet").field("devices", &names).field("paths", &self.paths).finish()
    }
}

/// The IPv4/IPv6 source address of `packet`, `None` if truncated or neither.
pub fn source_addr(packet: &[u8]) -> Option<IpAddr> {
    addr_at(packet, 12, 8)
}

/// The IPv4/IPv6 destination address of `packet`.
pub fn destination_addr(packet: &[u8]) -> Option<IpAddr> {
    addr_at(packet, 16, 24)
}

fn addr_at(p: &[u8], v4: usize, v6: usize) -> Option<IpAddr> {
    match p.first()? >> 4 {
        4 if p.len() >= 20 => {
            let a: [u8; 4] = p.get(v4..v4 + 4)?.try_into().ok()?;
            Some(IpAddr::from(a))
        }
        6 if p.len() >= 40 => {
            let a: [u8; 16] = p.get(v6..v6 + 16)?.try_into().ok()?;
            Some(IpAddr::from(a))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::udp_packet;
    use crate::ChannelIo;

    #[test]
    fn routes_by_source_and_destination() {
        let (a, _a_peer) = ChannelIo::pair("a", "ap", 1500, 8);
        let (b, _b_peer) = ChannelIo::pair("b", "bp", 1500, 8);
        let mut set = PathSet::new();
        let da = set.add_device(Arc::new(a));
        let db = set.add_device(Arc::new(b));
        let l1: IpAddr = "10.0.1.1".parse().unwrap();
        let l2: IpAddr = "fd00:0:0:2::1".parse().unwrap();
        let l3: IpAddr = "10.0.3.1".parse().unwrap();
        set.add_path(l1, da).unwrap();
        set.add_path(l2, db).unwrap();
        set.add_path(l3, db).unwrap(); // two addresses on one device
        assert!(set.add_path(l1, db).is_err());
        assert!(set.add_path("10.9.9.9".parse().unwrap(), 7).is_err());

        let out = udp_packet("10.0.3.1:5".parse().unwrap(), "10.0.3.2:6".parse().unwrap(), b"x");
        assert_eq!(set.device_for_outgoing(&out), Some(db));
        let out6 = udp_packet("[fd00:0:0:2::1]:5".parse().unwrap(), "[fd00:0:0:2::2]:6".parse().unwrap(), b"x");
        assert_eq!(set.device_for_outgoing(&out6), Some(db));
        let inc = udp_packet("10.0.1.2:6".parse().unwrap(), "10.0.1.1:5".parse().unwrap(), b"x");
        assert_eq!(set.path_for_incoming(&inc), Some(0));
        assert_eq!(set.device_for_outgoing(&out[..19]), None);
        assert_eq!(set.device_for_outgoing(&[]), None);
        assert_eq!(set.device_for_outgoing(&[0x50; 40]), None);
    }
}
