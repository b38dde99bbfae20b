//! Ready-made experiments. Each builds a [`Sim`](crate::Sim), runs it and
//! returns a serialisable report; the `mptun sim` command prints them.

pub mod aggregate;
pub mod cc_compare;
pub mod edt_rr;
pub mod failover;
pub mod fallback;
pub mod hystart;
pub mod penalise;
pub mod tcp_single;
pub mod transfer;
