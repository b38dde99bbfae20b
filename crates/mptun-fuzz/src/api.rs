//! Every call the harness makes into the `Endpoint` stream API, in one
//! place, so that a change of that API means editing these few functions
//! only. The typed errors (`ConnectError`, `SendError`, `RecvError`) are
//! folded into what the harness needs: a refusal, or "nothing moved".

use mptun_proto::endpoint::{ConnectionHandle, Endpoint};
use mptun_proto::Instant;
use std::net::SocketAddr;

/// Opens the client's connection; `None` if the endpoint refused.
pub(crate) fn connect(
    ep: &mut Endpoint,
    now: Instant,
    local: SocketAddr,
    remote: SocketAddr,
) -> Option<ConnectionHandle> {
    ep.connect(now, local, remote).ok()
}

/// Bytes the send buffer took (0: no room, or the connection is gone).
pub(crate) fn send(ep: &mut Endpoint, h: ConnectionHandle, data: &[u8]) -> usize {
    ep.send(h, data).unwrap_or(0)
}

/// Bytes read into `out` (0: nothing ready, or finished, or gone).
pub(crate) fn recv(ep: &mut Endpoint, h: ConnectionHandle, now: Instant, out: &mut [u8]) -> usize {
    ep.recv(h, now, out).unwrap_or(0)
}

/// Takes the next received piece without a copy (the runtime's
/// `read_chunk`), at most `max` bytes, into `out`; its length (0: nothing
/// ready, or finished, or gone).
pub(crate) fn recv_piece(ep: &mut Endpoint, h: ConnectionHandle, now: Instant, out: &mut [u8]) -> usize {
    match ep.recv_piece(h, now, out.len()) {
        Ok(Some(p)) => {
            out[..p.len()].copy_from_slice(&p);
            p.len()
        }
        _ => 0,
    }
}

/// The next connection a listener accepted.
pub(crate) fn accept(ep: &mut Endpoint) -> Option<ConnectionHandle> {
    ep.accept()
}

/// Orderly close of our direction.
pub(crate) fn close(ep: &mut Endpoint, h: ConnectionHandle) {
    ep.close(h)
}

/// Abortive close.
pub(crate) fn abort(ep: &mut Endpoint, h: ConnectionHandle) {
    ep.abort(h)
}

/// The client knows its server completed the MPTCP handshake (or the
/// connection is not MPTCP): until then a made-up option could make it take
/// a server that fell back to TCP for an MPTCP one (see `forge`).
pub(crate) fn peer_proved_mptcp(ep: &Endpoint, h: ConnectionHandle) -> bool {
    ep.conn(h).is_none_or(|c| c.mode() != mptun_proto::mptcp::Mode::Mptcp || c.info().fully_established)
}

/// Handshake done and not closed: the application may close its direction.
pub(crate) fn is_established(ep: &Endpoint, h: ConnectionHandle) -> bool {
    ep.is_established(h)
}
