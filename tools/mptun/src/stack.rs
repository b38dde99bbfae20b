//! Setting up and ending what a command's stack runs on, shared by
//! `send`, `serve`, the proxies and the lab peers: the runtime, the end of
//! an mptun stack, and the message of a failed connect on either stack.

use anyhow::{anyhow, Context, Result};
use std::net::SocketAddr;

/// The tokio runtime `send`, `serve` and the proxies run on: one thread,
/// where the test's I/O task (a proxy's relays) and mptun's stack driver
/// take turns (a file's disk I/O and hashing run on a thread of their own,
/// `bulk::pipeline`). The stack's driver is one task whatever the runtime,
/// so a proxy's many connections share it either way.
///
/// On a runtime with two workers the two tasks sat on different threads,
/// or moved between them, and every hand-over between them (data written,
/// data arrived, window opened) and every device readiness woke the other
/// worker: a futex or eventfd wake-up and an IPI each, which cost more
/// than the second core gave.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// Ends an mptun stack before its `block_on` returns: on the one-thread
/// runtime nothing polls the stack's driver afterwards, so what it still
/// holds (packets in its departure queue, the resets of connections left
/// open after an error, or of a proxy's relays still open after its stop)
/// would never leave, and the peer would wait for them.
pub(crate) async fn end_stack(stack: Option<mptun::Stack>) {
    if let Some(s) = stack {
        s.shutdown().await;
    }
}

/// One line with the cause of a failed connect.
pub(crate) fn connect_error(to: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind as K;
    let why = match e.kind() {
        K::ConnectionRefused => "connection refused".to_string(),
        K::TimedOut => "timed out".to_string(),
        K::HostUnreachable => "host unreachable".to_string(),
        K::NetworkUnreachable => "network unreachable".to_string(),
        K::AddrNotAvailable => format!("no local address for it ({e})"),
        _ => e.to_string(),
    };
    anyhow!("cannot connect to {to}: {why}")
}
