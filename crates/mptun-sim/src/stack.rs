//! A simulated host running the mptun endpoint with bulk applications.

use crate::apps::BulkApp;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint};
use mptun_time::Instant;
use std::collections::BTreeMap;

/// An endpoint plus one [`BulkApp`] per connection.
pub struct StackHost {
    pub ep: Endpoint,
    pub apps: BTreeMap<ConnectionHandle, BulkApp>,
    /// App given to each accepted connection.
    pub accept_template: Option<BulkApp>,
    buf: Vec<u8>,
}

impl StackHost {
    pub fn new(ep: Endpoint) -> Self {
        StackHost { ep, apps: BTreeMap::new(), accept_template: None, buf: vec![0; 64 * 1024] }
    }

    /// Runs an app on connection `h`.
    pub fn attach(&mut self, h: ConnectionHandle, app: BulkApp) {
        self.apps.insert(h, app);
    }

    /// Lets every app write and read as much as the stack allows.
    pub fn pump(&mut self, now: Instant) {
        while let Some(h) = self.ep.accept() {
            if let Some(t) = &self.accept_template {
                self.apps.insert(h, t.clone());
            }
        }
        // The applications poll readiness (and `recv_finished`) directly;
        // the event queue only needs draining so it does not grow.
        while self.ep.poll_event().is_some() {}
        for (&h, app) in self.apps.iter_mut() {
            let Some(conn) = self.ep.conn_mut(h) else { continue };
            loop {
                let space = conn.send_space();
                let Some(chunk) = app.next_chunk(space) else { break };
                let len = chunk.len();
                let n = conn.send_bytes(chunk).unwrap_or(0);
                debug_assert_eq!(n, len);
            }
            if app.send_done() && !app.closed && conn.is_established() && (!app.close_after_peer || app.peer_closed) {
                conn.close();
                app.closed = true;
            }
            loop {
                let n = conn.recv(now, &mut self.buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                app.on_receive(now, &self.buf[..n]);
            }
            if conn.recv_finished() {
                app.peer_closed = true;
            }
        }
    }
}

crate::endpoint_host!(StackHost);
