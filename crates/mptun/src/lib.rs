//! The tokio runtime of mptun: drives the sans-IO protocol core over TUN
//! devices (or any [`PacketIo`]) and offers sockets shaped like tokio's.
//! Everything an application needs is re-exported here (the TUN device and
//! the packet I/O trait from `mptun-io` too), so `mptun` and `tokio` are its
//! only dependencies.
//!
//! ```no_run
//! use std::sync::Arc;
//! use mptun::{MptcpStream, Stack, TunConfig, TunDevice};
//! use tokio::io::AsyncWriteExt;
//!
//! #[tokio::main]
//! async fn main() -> std::io::Result<()> {
//!     // A TUN device (needs CAP_NET_ADMIN) whose kernel side is 10.9.1.1/24; mptun is 10.9.1.2 on it.
//!     let tun = TunDevice::create(&TunConfig::new("mptc1").address("10.9.1.1".parse().unwrap(), 24)?)?;
//!     let stack = Stack::builder().path("10.9.1.2".parse().unwrap(), Arc::new(tun)).build()?;
//!     // was: let mut s = tokio::net::TcpStream::connect("10.8.1.2:5201").await?;
//!     let mut s = MptcpStream::connect(&stack, "10.8.1.2:5201").await?;
//!     s.write_all(b"hello").await?;
//!     s.shutdown().await?; // FIN (DATA_FIN under MPTCP)
//!     println!("{:?}", s.info()?.conn.subflows);
//!     Ok(())
//! }
//! ```
//!
//! - [`Stack`]: one endpoint, its paths `(local address, device)` and the
//!   driver task (module `driver`): reads devices in batches, feeds the
//!   endpoint, sends what it produces at each packet's earliest departure
//!   time (module `departure`), sleeps on a microsecond timer (module
//!   `timer`) until the next protocol deadline.
//! - [`MptcpListener`], [`MptcpStream`] (with [`OwnedReadHalf`] /
//!   [`OwnedWriteHalf`]): `AsyncRead` + `AsyncWrite`; shutdown sends the
//!   FIN (DATA_FIN under MPTCP).
//! - [`StreamOptions`]: per-stream buffers, congestion control, pacing cap.
//! - [`PathManager`] ([`Stack::path_manager`], [`MptcpStream::path_manager`]):
//!   endpoints, limits, the userspace PM's commands and its events, at run time.
//! - [`Stack::counters`] (kernel `nstat` names), [`MptcpStream::info`]
//!   (`TCP_INFO`-like per subflow), tracing spans `conn` and `subflow`.
//! - [`pathspec`]: the `--path dev=..,addr=..` syntax of the CLI and the
//!   examples, and the TUN devices it describes.
//! - [`pattern`]: the deterministic test data the CLI and the interop tests
//!   both send, so either can check what the other received.
//!
//! **Which runtime.** The stack's driver is a task on the runtime that
//! builds the [`Stack`]. For bulk transfers run the application's task on
//! the same thread (a current-thread runtime, or a `LocalSet`): each
//! hand-over between the application and the driver (data written, data
//! arrived, window opened) then costs no thread wake-up, where a
//! multi-worker runtime pays one whenever the hand-over lands on the other
//! worker and, on a machine with few cores, moves no more for as much CPU
//! per byte or more; the CLI's `send` and `serve` run on one thread for
//! that reason.

#![deny(missing_docs)]

mod clock;
mod departure;
mod driver;
mod handle;
mod info;
mod listener;
mod options;
pub mod pathspec;
pub mod pattern;
mod pm;
mod split;
mod stack;
mod state;
mod stats;
mod stream;
mod timer;

pub use info::{ConnectionInfo, Mode, StreamInfo, SubflowInfo};
pub use listener::MptcpListener;
pub use options::{scheduler_by_name, SchedulerFactory, StreamOptions};
pub use pm::{ConnectionPm, PathManager, PmEvents, PmLimits, PM_EVENT_BACKLOG};
pub use split::{OwnedReadHalf, OwnedWriteHalf};
pub use stack::{Path, Stack, StackBuilder, WeakStack};
pub use stats::RuntimeStats;
pub use stream::MptcpStream;

pub use mptun_cc::{Algorithm, PacerKind};
pub use mptun_proto::pm::{EndpointFlags, PmConfig, PmEndpoint, PmError, PmEvent, PmEventKind};
/// The scheduler framework and the shipped schedulers, for writing one.
pub use mptun_proto::sched;
pub use mptun_proto::sched::{
    ConnView, DefaultScheduler, PenaltyConfig, Pick, Policy, Request, Scheduler, SubflowView, Target,
};
pub use mptun_proto::tcp::{BufferSize, State as TcpState, TcpConfig, TcpInfo};
pub use mptun_proto::{ConnConfig, Counters, Limits, MptcpConfig};

/// The packet I/O layer (`mptun-io`): TUN devices, network namespaces, pcap.
pub use mptun_io as io;
pub use mptun_io::{ChannelIo, IfAddr, PacketIo, TunConfig, TunDevice};
