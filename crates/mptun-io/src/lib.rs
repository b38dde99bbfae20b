//! Packet I/O for the mptun runtime, independent of the protocol.
//!
//! - [`PacketIo`]: the small, object-safe trait the runtime reads and writes
//!   raw IP packets through, in reusable batches: [`RxBatch`] to receive,
//!   [`TxBatch`] to send, each packet to send a [`TxPacket`] that the batch
//!   puts in the form the device takes ([`DeviceCaps`]).
//! - [`TunDevice`]: a Linux TUN device via tun-rs, optionally with
//!   `IFF_VNET_HDR` TSO/GRO offload, created in any network namespace.
//! - [`ChannelIo`]: an in-memory pair for tests without root.
//! - [`netns`]: create/enter namespaces, run `ip -n`.
//! - [`netstat`]: the kernel's TCP/MPTCP counters by their `nstat` names.
//! - [`pcap`] and [`PcapTap`]: capture any device to a file Wireshark opens.
//! - [`WriterThread`]: a device's writes on a thread of their own.
//! - `testutil` (feature `testutil`, for tests and benches only): the
//!   skip-or-fail rule for namespace tests, packet builders.
//!
//! A path is (local address, device): one TUN per path, or one TUN carrying
//! several addresses; see [`paths::PathSet`].

#![deny(missing_docs)]

mod batch;
mod channel;
pub mod ctl;
pub mod netns;
pub mod netstat;
mod packet_io;
pub mod paths;
pub mod pcap;
mod pool;
mod tap;
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;
mod tun;
mod writer;

pub use batch::{
    Direction, PacketBatch, PushError, Rx, RxBatch, Tx, TxBatch, TxChecksum, TxPacket, HEADROOM, MAX_TAIL_PARTS,
};
pub use channel::ChannelIo;
pub use netns::{run_in_netns, spawn_tun_in_netns, Netns, NetnsGuard};
pub use packet_io::{AtomicIoStats, DeviceCaps, IoStats, PacketIo, PacketIoExt};
pub use pcap::{PcapReader, PcapWriter};
pub use pool::POOL_MAX;
pub use tap::{PcapTap, SharedPcap};
pub use tun::{IfAddr, TunConfig, TunDevice};
pub use writer::{WriterThread, DRAIN_ON_DROP, INLINE_BELOW};

/// Packets per batch: tun-rs' `IDEAL_BATCH_SIZE`, also wireguard-go's.
pub const DEFAULT_BATCH: usize = 128;
