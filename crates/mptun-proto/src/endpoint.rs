//! The endpoint: owns every connection of one host, demultiplexes incoming
//! IP packets to them by 4-tuple, answers strays with RST (RFC 9293 3.10.7.1),
//! and merges their transmissions and timers for the driver.
//!
//! Polling order for a driver is the one of [`crate::tcp`]:
//! `handle_packet`* / `handle_timeout` → `poll_transmit` until `None` →
//! `poll_event` until `None` → sleep until `poll_timeout`.

use crate::counters::Counters;
use crate::seq::Seq;
use crate::tcp::{Event, Subflow, TcpConfig, Transmit};
use mptun_time::Instant;
use mptun_wire::ip::parse_tcp_packet;
use mptun_wire::{TcpFlags, TcpHeader, TcpOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;

/// Identifies a connection within its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub usize);

/// Endpoint-wide settings.
#[derive(Clone, Debug, Default)]
pub struct EndpointConfig {
    /// Defaults for every connection this endpoint opens or accepts.
    pub tcp: TcpConfig,
}

/// (local, remote) of a subflow.
type FourTuple = (SocketAddr, SocketAddr);

/// All connections of one host.
pub struct Endpoint {
    config: EndpointConfig,
    rng: ChaCha20Rng,
    conns: Vec<Option<Subflow>>,
    by_tuple: HashMap<FourTuple, ConnectionHandle>,
    listeners: HashSet<SocketAddr>,
    accept_queue: VecDeque<ConnectionHandle>,
    events: VecDeque<(ConnectionHandle, Event)>,
    /// RSTs for packets that matched no connection: (src, dst, header).
    stray_rsts: VecDeque<(SocketAddr, SocketAddr, TcpHeader)>,
    next_tx: usize,
    counters: Counters,
}

impl Endpoint {
    /// `seed` feeds the CSPRNG that picks ISNs, timestamp offsets, ports and
    /// (later) MPTCP keys: the runtime passes OS entropy, the simulator a
    /// fixed seed for reproducible runs.
    pub fn new(config: EndpointConfig, seed: [u8; 32]) -> Self {
        Endpoint {
            config,
            rng: ChaCha20Rng::from_seed(seed),
            conns: Vec::new(),
            by_tuple: HashMap::new(),
            listeners: HashSet::new(),
            accept_queue: VecDeque::new(),
            events: VecDeque::new(),
            stray_rsts: VecDeque::new(),
            next_tx: 0,
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Accept connections to `addr` (an unspecified IP listens on every address).
    pub fn listen(&mut self, addr: SocketAddr) {
        self.listeners.insert(addr);
    }

    fn is_listening(&self, local: SocketAddr) -> bool {
        self.listeners.contains(&local)
            || self.listeners.iter().any(|l| l.ip().is_unspecified() && l.port() == local.port())
    }

    /// Opens a connection with the endpoint's default configuration. A zero
    /// local port picks an ephemeral one (Linux range 32768–60999).
    pub fn connect(&mut self, now: Instant, local: SocketAddr, remote: SocketAddr) -> ConnectionHandle {
        let cfg = self.config.tcp.clone();
        self.connect_with(now, local, remote, cfg)
    }

    /// Opens a connection with its own configuration.
    pub fn connect_with(
        &mut self,
        now: Instant,
        mut local: SocketAddr,
        remote: SocketAddr,
        cfg: TcpConfig,
    ) -> ConnectionHandle {
        if local.port() == 0 {
            loop {
                local.set_port(self.rng.random_range(32768..61000));
                if !self.by_tuple.contains_key(&(local, remote)) {
                    break;
                }
            }
        }
        let iss = self.rng.random();
        let ts = self.rng.random();
        let sf = Subflow::connect(now, cfg, local, remote, iss, ts);
        self.insert(sf)
    }

    fn insert(&mut self, sf: Subflow) -> ConnectionHandle {
        let key = (sf.local(), sf.remote());
        let h = match self.conns.iter().position(Option::is_none) {
            Some(i) => {
                self.conns[i] = Some(sf);
                ConnectionHandle(i)
            }
            None => {
                self.conns.push(Some(sf));
                ConnectionHandle(self.conns.len() - 1)
            }
        };
        self.by_tuple.insert(key, h);
        h
    }

    /// The next connection accepted by a listener, once its handshake completed.
    pub fn accept(&mut self) -> Option<ConnectionHandle> {
        self.accept_queue.pop_front()
    }

    pub fn conn(&self, h: ConnectionHandle) -> Option<&Subflow> {
        self.conns.get(h.0).and_then(Option::as_ref)
    }

    pub fn conn_mut(&mut self, h: ConnectionHandle) -> Option<&mut Subflow> {
        self.conns.get_mut(h.0).and_then(Option::as_mut)
    }

    // --------------------------------------------------------------
    // Stream interface: what a socket API (the tokio runtime, the
    // simulator's applications) uses, independent of whether the
    // connection is plain TCP or MPTCP underneath.
    // --------------------------------------------------------------

    /// Queues bytes for sending; returns how many the send buffer took.
    pub fn send(&mut self, h: ConnectionHandle, data: &[u8]) -> usize {
        self.conn_mut(h).map_or(0, |c| c.send(data))
    }

    /// Room in the send buffer.
    pub fn send_space(&self, h: ConnectionHandle) -> usize {
        self.conn(h).map_or(0, |c| c.send_space())
    }

    /// Copies received bytes into `out`; 0 means nothing is ready (check
    /// [`Endpoint::recv_finished`] to tell end-of-stream apart).
    pub fn recv(&mut self, h: ConnectionHandle, now: Instant, out: &mut [u8]) -> usize {
        self.conn_mut(h).map_or(0, |c| c.recv(now, out))
    }

    /// Bytes ready to read.
    pub fn recv_ready(&self, h: ConnectionHandle) -> usize {
        self.conn(h).map_or(0, |c| c.recv_ready())
    }

    /// The peer closed its direction and every byte before that was read.
    pub fn recv_finished(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_none_or(|c| c.recv_finished() || c.is_closed())
    }

    /// Orderly close of our direction (FIN after queued data).
    pub fn close(&mut self, h: ConnectionHandle) {
        if let Some(c) = self.conn_mut(h) {
            c.close();
        }
    }

    /// Abortive close (RST).
    pub fn abort(&mut self, h: ConnectionHandle) {
        if let Some(c) = self.conn_mut(h) {
            c.abort();
            let key = (c.local(), c.remote());
            self.by_tuple.remove(&key);
        }
    }

    /// The connection completed its handshake and is not yet closed.
    pub fn is_established(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_some_and(|c| c.state().is_synchronized() && !c.is_closed())
    }

    /// The connection is gone (closed, reset or timed out).
    pub fn is_closed(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_none_or(|c| c.is_closed())
    }

    /// (local, remote) addresses of the connection.
    pub fn addresses(&self, h: ConnectionHandle) -> Option<(SocketAddr, SocketAddr)> {
        self.conn(h).map(|c| (c.local(), c.remote()))
    }

    /// Forgets a closed connection (the application dropped its handle).
    pub fn remove(&mut self, h: ConnectionHandle) {
        if let Some(Some(sf)) = self.conns.get(h.0) {
            self.counters.add(&sf.counters());
            let key = (sf.local(), sf.remote());
            if self.by_tuple.get(&key) == Some(&h) {
                self.by_tuple.remove(&key);
            }
            self.conns[h.0] = None;
        }
    }

    /// Handles of every live connection.
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.conns.iter().enumerate().filter(|(_, c)| c.is_some()).map(|(i, _)| ConnectionHandle(i))
    }

    /// Counters of the endpoint and every connection, summed.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for sf in self.conns.iter().flatten() {
            c.add(&sf.counters());
        }
        c
    }

    /// Feeds one received IP packet. Malformed packets are counted and dropped.
    pub fn handle_packet(&mut self, now: Instant, packet: &[u8]) {
        let pkt = match parse_tcp_packet(packet) {
            Ok(p) => p,
            Err(_) => {
                self.counters.tcp_in_errs += 1;
                self.counters.mptun_malformed += 1;
                return;
            }
        };
        let local = SocketAddr::new(pkt.dst, pkt.tcp.dst_port);
        let remote = SocketAddr::new(pkt.src, pkt.tcp.src_port);
        let opts = pkt.tcp.options.summary();
        if opts.malformed {
            self.counters.mptun_malformed += 1;
        }
        if let Some(&h) = self.by_tuple.get(&(local, remote)) {
            let sf = self.conns[h.0].as_mut().expect("tuple map points at live connections");
            sf.handle_segment(now, &pkt.tcp, &opts, pkt.payload);
            if sf.is_closed() {
                self.by_tuple.remove(&(local, remote));
            }
            self.collect_events(h);
            return;
        }
        let f = pkt.tcp.flags;
        if f.syn() && !f.ack() && !f.rst() && self.is_listening(local) {
            let iss = self.rng.random();
            let ts = self.rng.random();
            let sf = Subflow::accept(now, self.config.tcp.clone(), local, remote, &pkt.tcp, &opts, iss, ts);
            self.insert(sf);
            return;
        }
        self.counters.mptun_no_socket += 1;
        if !f.rst() {
            // RFC 9293 3.10.7.1: RST for anything arriving at a closed port.
            let seg_len = pkt.payload.len() as u32 + f.syn() as u32 + f.fin() as u32;
            let (seq, ack, flags) = if f.ack() {
                (pkt.tcp.ack, 0, TcpFlags::RST)
            } else {
                (0, (Seq(pkt.tcp.seq) + seg_len).0, TcpFlags::RST | TcpFlags::ACK)
            };
            let hdr = TcpHeader {
                src_port: local.port(),
                dst_port: remote.port(),
                seq,
                ack,
                flags,
                window: 0,
                checksum: 0,
                urgent: 0,
                options: TcpOptions::new(),
            };
            if self.stray_rsts.len() < 64 {
                self.stray_rsts.push_back((local, remote, hdr));
            }
        }
    }

    fn collect_events(&mut self, h: ConnectionHandle) {
        let Some(sf) = self.conns[h.0].as_mut() else { return };
        let passive = sf.counters().tcp_passive_opens > 0;
        while let Some(ev) = sf.poll_event() {
            if ev == Event::Connected && passive {
                self.accept_queue.push_back(h);
            }
            self.events.push_back((h, ev));
        }
    }

    /// Fires due timers of every connection.
    pub fn handle_timeout(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let Some(sf) = self.conns[i].as_mut() else { continue };
            if sf.poll_timeout().is_some_and(|t| t <= now) {
                sf.handle_timeout(now);
                if sf.is_closed() {
                    let key = (sf.local(), sf.remote());
                    if self.by_tuple.get(&key) == Some(&ConnectionHandle(i)) {
                        self.by_tuple.remove(&key);
                    }
                }
                self.collect_events(ConnectionHandle(i));
            }
        }
    }

    /// Writes the next IP packet to send into `out`. Connections take turns.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Transmit> {
        if let Some((local, remote, hdr)) = self.stray_rsts.pop_front() {
            self.counters.tcp_out_rsts += 1;
            self.counters.tcp_out_segs += 1;
            if let Ok(len) = mptun_wire::ip::emit_tcp_packet(local.ip(), remote.ip(), 64, &hdr, &[], out) {
                return Some(Transmit { len, departure: now, src: local, dst: remote });
            }
        }
        let n = self.conns.len();
        for k in 0..n {
            let i = (self.next_tx + k) % n;
            let Some(sf) = self.conns[i].as_mut() else { continue };
            if let Some(t) = sf.poll_transmit(now, &mut (), out) {
                self.next_tx = (i + 1) % n.max(1);
                self.collect_events(ConnectionHandle(i));
                return Some(t);
            }
            self.collect_events(ConnectionHandle(i));
        }
        None
    }

    /// Earliest instant any connection needs attention.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.stray_rsts.is_empty() {
            return Some(Instant::ZERO);
        }
        self.conns.iter().flatten().fold(None, |t, sf| Instant::min_opt(t, sf.poll_timeout()))
    }

    /// Connection events in the order they happened.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        self.events.pop_front()
    }
}
