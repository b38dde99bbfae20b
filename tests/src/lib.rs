//! Shared helpers for the workspace integration tests: a two-namespace,
//! N-path lab ([`Lab`]), kernel sockets inside it ([`kernel`]), and transfer
//! helpers that check integrity with SHA-256 ([`xfer`]), an HTTP server for the proxy tests ([`http`]).

pub mod http;
pub mod kernel;
pub mod lab;
pub mod xfer;

pub use lab::Lab;
