//! A simulated host running the mptun endpoint with bulk applications.

use crate::apps::BulkApp;
use crate::host::{Host, Outgoing};
use mptun_proto::endpoint::{ConnectionHandle, Endpoint};
use mptun_proto::tcp::Event;
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
        while let Some((h, ev)) = self.ep.poll_event() {
            if matches!(ev, Event::Reset | Event::TimedOut) {
                tracing_event(h, ev);
            }
        }
        for (&h, app) in self.apps.iter_mut() {
            let Some(conn) = self.ep.conn_mut(h) else { continue };
            loop {
                let space = conn.send_space();
                let Some(chunk) = app.next_chunk(space) else { break };
                let n = conn.send(&chunk);
                debug_assert_eq!(n, chunk.len());
            }
            if app.send_done() && !app.closed && conn.is_established() {
                conn.close();
                app.closed = true;
            }
            loop {
                let n = conn.recv(now, &mut self.buf);
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

fn tracing_event(_h: ConnectionHandle, _ev: Event) {}

impl Host for StackHost {
    fn handle_packet(&mut self, now: Instant, packet: &[u8]) {
        self.ep.handle_packet(now, packet);
        self.pump(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.ep.handle_timeout(now);
        self.pump(now);
    }

    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Outgoing> {
        let t = self.ep.poll_transmit(now, out)?;
        Some(Outgoing { len: t.len, src: t.src.ip(), dst: t.dst.ip() })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.ep.poll_timeout()
    }
}
