//! A deterministic discrete-event simulator for mptun.
//!
//! Two hosts run the real sans-IO core; between them, N paths, each a pair of
//! [`mptun_link::Link`]s. Time is virtual: the loop jumps straight to the next
//! packet arrival, host timer or scheduled action, so a 20 MB transfer over a
//! 10 Mbit/s link takes milliseconds of wall time, and the same seed gives the
//! same run bit for bit.

#![forbid(unsafe_code)]

pub mod apps;
pub mod cross;
mod events;
pub mod host;
pub mod pattern;
pub mod report;
pub mod rr;
pub mod scenarios;
pub mod stack;
pub mod tap;
pub mod world;

pub use host::{Host, Outgoing};
pub use stack::StackHost;
pub use world::{PathSpec, Side, Sim, SimConfig};
