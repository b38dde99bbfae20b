//! Byte stores shared by the TCP subflow and the MPTCP connection: both keep
//! a send queue from the oldest unacknowledged byte on and a reassembly queue
//! on the receive side, so one implementation serves both layers.

#![deny(missing_docs)]

mod ofo;
mod recv;
#[cfg(test)]
mod recv_oracle;
mod send;

pub(crate) use ofo::{unpin, Src, COPY_BELOW};
#[cfg(test)]
pub(crate) use recv::MEM_SLACK;
pub(crate) use recv::{mem_budget, RecvBuf};
pub(crate) use send::SendBuf;
