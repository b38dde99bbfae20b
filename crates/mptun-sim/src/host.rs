//! What the simulator needs from a host: the sans-IO driver contract.

use mptun_time::Instant;
use std::net::IpAddr;

/// A packet a host wants to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// Bytes written to the buffer handed to [`Host::poll_transmit`].
    pub len: usize,
    /// Source address: selects the path, as policy routing would.
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Payload bytes per wire segment of a TSO super-segment (see
    /// `mptun_proto::tcp::Transmit::segment_size`); the link cuts it.
    pub segment_size: Option<usize>,
}

/// A simulated host: a protocol endpoint plus whatever applications run on it.
pub trait Host {
    /// A packet arrived. `csum_verified`: the receiving device checked its
    /// TCP checksum and found it good (virtio's `DATA_VALID`, Linux's
    /// `CHECKSUM_UNNECESSARY`), so the stack need not verify it again. The
    /// simulator says so for every packet the wire did not corrupt, and
    /// leaves the checksum to the stack for those it did: a pass over
    /// every byte saved where it cannot find anything.
    fn handle_packet(&mut self, now: Instant, packet: &[u8], csum_verified: bool);
    /// `now` reached [`Host::poll_timeout`].
    fn handle_timeout(&mut self, now: Instant);
    /// The next packet to put on the wire at `now`.
    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Outgoing>;
    /// When to call `handle_timeout` next.
    fn poll_timeout(&self) -> Option<Instant>;
}

/// Completes a TCP checksum an endpoint left to the device
/// (`TcpConfig::checksum_offload`), as the simulated wire's device would.
pub fn complete_checksum(packet: &mut [u8]) {
    let done = mptun_wire::gso::complete_checksum(packet);
    debug_assert!(done.is_ok(), "an endpoint left a checksum to the device in a packet it cannot parse: {done:?}");
}

/// Implements [`Host`] for a type that holds an `ep: Endpoint` and runs its
/// applications in `fn pump(&mut self, now: Instant)`: feed the endpoint,
/// then let the applications react.
#[macro_export]
macro_rules! endpoint_host {
    ($t:ty) => {
        impl $crate::host::Host for $t {
            fn handle_packet(&mut self, now: mptun_time::Instant, packet: &[u8], csum_verified: bool) {
                if csum_verified {
                    self.ep.handle_packet_checksum_verified(now, packet);
                } else {
                    self.ep.handle_packet(now, packet);
                }
                self.pump(now);
            }

            fn handle_timeout(&mut self, now: mptun_time::Instant) {
                self.ep.handle_timeout(now);
                self.pump(now);
            }

            fn poll_transmit(&mut self, now: mptun_time::Instant, out: &mut [u8]) -> Option<$crate::host::Outgoing> {
                let t = self.ep.poll_transmit(now, out)?;
                // A payload left in the send buffer (`gather_payload`) goes
                // behind its headers, as a gathering device writes it.
                let len = t.assemble(out);
                if t.checksum_partial {
                    // The simulated wire is a device with checksum
                    // offload: it sends what such a device would.
                    $crate::host::complete_checksum(&mut out[..len]);
                }
                Some($crate::host::Outgoing { len, src: t.src.ip(), dst: t.dst.ip(), segment_size: t.segment_size })
            }

            fn poll_timeout(&self) -> Option<mptun_time::Instant> {
                self.ep.poll_timeout()
            }
        }
    };
}

/// A host that never sends and ignores what it gets: the far end of a unit
/// test of a host wrapper.
#[cfg(test)]
pub(crate) struct NullHost;

#[cfg(test)]
impl Host for NullHost {
    fn handle_packet(&mut self, _: Instant, _: &[u8], _: bool) {}
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_transmit(&mut self, _: Instant, _: &mut [u8]) -> Option<Outgoing> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}
