//! linkem: a userspace netem that bridges two interfaces of a network namespace.
//!
//! The kernel this project runs on has no netem, yet lab experiments need delay, jitter, loss
//! and reordering on real packets, identical for mptun and for the kernel's own MPTCP. linkem
//! reads Ethernet frames from one interface, asks the shared sans-IO link model
//! ([`mptun_link::Link`], the one the simulator uses) when each frame leaves, and writes it to the
//! other interface at that instant. The library holds the pieces that can be tested without
//! root: the netem-style spec language, the control language, the histogram; the binary wires
//! them to AF_PACKET sockets and threads.

pub mod clock;
pub mod control;
pub mod forward;
pub mod hist;
pub mod packet;
pub mod spec;
