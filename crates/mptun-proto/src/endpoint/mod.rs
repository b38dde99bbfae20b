//! The endpoint: owns every connection of one host, demultiplexes incoming
//! IP packets to them (by 4-tuple, and by MPTCP token for MP_JOIN SYNs),
//! answers strays with RST (RFC 9293 3.10.7.1), and merges their
//! transmissions and timers for the driver.
//!
//! Polling order for a driver is the one of [`crate::tcp`]:
//! `handle_packet`* / `handle_timeout` → `poll_transmit` until `None` →
//! `poll_event` until `None` → sleep until `poll_timeout`.

mod limits;
mod ports;

pub use limits::Limits;
pub use ports::IP_LOCAL_PORT_RANGE;

use crate::counters::Counters;
use crate::error::{ConnectError, RecvError, SendError};
use crate::mptcp::{ConnConfig, Connection, MptcpConfig};
use crate::seq::Seq;
use crate::tcp::{Event, TcpConfig, Transmit};
use mptun_time::Instant;
use mptun_wire::icmp::{parse_icmp_packet, Icmp};
use mptun_wire::parse_tcp_packet;
use mptun_wire::{crypto, MptcpOption, TcpFlags, TcpHeader, TcpOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// Identifies a connection within its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub usize);

/// RSTs for segments that match no connection, queued until the driver
/// polls: a bound, so a flood of stray segments costs no memory (the excess
/// is dropped unanswered, as Linux's RST rate limit would).
const MAX_STRAY_RSTS: usize = 64;

/// Endpoint-wide settings: the defaults of every connection it opens or accepts.
#[derive(Clone, Debug, Default)]
pub struct EndpointConfig {
    /// Per-subflow TCP settings of every connection.
    pub tcp: TcpConfig,
    /// MPTCP settings of every connection (MP_CAPABLE offered and accepted
    /// only if enabled here).
    pub mptcp: MptcpConfig,
    /// What the endpoint lets peers and the application hold.
    pub limits: Limits,
}

impl EndpointConfig {
    fn conn(&self) -> ConnConfig {
        ConnConfig { tcp: self.tcp.clone(), mptcp: self.mptcp.clone() }
    }
}

/// (local, remote) of a subflow.
type FourTuple = (SocketAddr, SocketAddr);

/// All connections of one host.
pub struct Endpoint {
    config: EndpointConfig,
    rng: ChaCha20Rng,
    conns: Vec<Option<Connection>>,
    by_tuple: HashMap<FourTuple, (ConnectionHandle, usize)>,
    tokens: HashMap<u32, ConnectionHandle>,
    listeners: HashSet<SocketAddr>,
    accept_queue: VecDeque<ConnectionHandle>,
    passive: HashSet<ConnectionHandle>,
    events: VecDeque<(ConnectionHandle, Event)>,
    /// RSTs for packets that matched no connection: (src, dst, header).
    stray_rsts: VecDeque<(SocketAddr, SocketAddr, TcpHeader)>,
    next_tx: usize,
    rr: usize,
    counters: Counters,
    /// MTU of the device each local address lives on (the driver's paths).
    device_mtus: HashMap<IpAddr, u32>,
}

impl Endpoint {
    /// `seed` feeds the CSPRNG that picks ISNs, timestamp offsets, ports,
    /// MPTCP keys and nonces: the runtime passes OS entropy, the simulator a
    /// fixed seed for reproducible runs.
    pub fn new(config: EndpointConfig, seed: [u8; 32]) -> Self {
        Endpoint {
            config,
            rng: ChaCha20Rng::from_seed(seed),
            conns: Vec::new(),
            by_tuple: HashMap::new(),
            tokens: HashMap::new(),
            listeners: HashSet::new(),
            accept_queue: VecDeque::new(),
            passive: HashSet::new(),
            events: VecDeque::new(),
            stray_rsts: VecDeque::new(),
            next_tx: 0,
            rr: 0,
            counters: Counters::default(),
            device_mtus: HashMap::new(),
        }
    }

    /// The settings the endpoint was created with (a driver reads them to
    /// size its own buffers or report what runs).
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// The MTU of the device that carries local address `local`: every
    /// subflow from that address created from now on announces and uses an
    /// MSS that fits it and runs path-MTU discovery below it (ICMP, and
    /// probing per `TcpConfig::mtu_probing`). Without it a subflow uses the
    /// configured MSS as is.
    pub fn set_device_mtu(&mut self, local: IpAddr, mtu: u32) {
        self.device_mtus.insert(local, mtu);
    }

    /// Gives subflow `idx` of `h`, bound to `local`, its device MTU.
    fn apply_device_mtu(&mut self, h: ConnectionHandle, idx: usize, local: IpAddr) {
        let Some(&mtu) = self.device_mtus.get(&local) else { return };
        if let Some(c) = self.conn_mut(h) {
            c.set_device_mtu(idx, mtu);
        }
    }

    /// Accept connections to `addr` (an unspecified IP listens on every address).
    pub fn listen(&mut self, addr: SocketAddr) {
        self.listeners.insert(addr);
    }

    /// Stops accepting connections to `addr` (a dropped listener).
    pub fn unlisten(&mut self, addr: SocketAddr) {
        self.listeners.remove(&addr);
    }

    fn is_listening(&self, local: SocketAddr) -> bool {
        self.listeners.contains(&local)
            || self.listeners.iter().any(|l| l.ip().is_unspecified() && l.port() == local.port())
    }

    /// Opens a connection with the endpoint's defaults.
    pub fn connect(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<ConnectionHandle, ConnectError> {
        let cfg = self.config.conn();
        self.connect_conn(now, local, remote, cfg)
    }

    /// Opens a connection with its own TCP settings (MPTCP settings from the endpoint).
    pub fn connect_with(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        tcp: TcpConfig,
    ) -> Result<ConnectionHandle, ConnectError> {
        let cfg = ConnConfig { tcp, mptcp: self.config.mptcp.clone() };
        self.connect_conn(now, local, remote, cfg)
    }

    /// Opens a connection with its own settings. A zero local port picks an
    /// ephemeral one from [`IP_LOCAL_PORT_RANGE`] (none free towards
    /// `remote`: [`ConnectError::AddrNotAvailable`]); an explicit one must
    /// not name a live subflow's pair ([`ConnectError::AddrInUse`]).
    pub fn connect_conn(
        &mut self,
        now: Instant,
        mut local: SocketAddr,
        remote: SocketAddr,
        cfg: ConnConfig,
    ) -> Result<ConnectionHandle, ConnectError> {
        if local.port() == 0 {
            local.set_port(self.ephemeral_port(local.ip(), remote).ok_or(ConnectError::AddrNotAvailable)?);
        } else if self.tuple_in_use(&(local, remote)) {
            return Err(ConnectError::AddrInUse);
        }
        let key = self.fresh_key();
        let (iss, ts) = (self.rng.random(), self.rng.random());
        let iss = wrap_early_iss(&cfg, iss);
        let conn = Connection::connect(now, cfg, local, remote, key, iss, ts);
        let h = self.insert(conn);
        self.tokens.insert(crypto::token(key), h);
        self.by_tuple.insert((local, remote), (h, 0));
        self.apply_device_mtu(h, 0, local.ip());
        Ok(h)
    }

    /// A local port from `local` towards `remote` that no live subflow and
    /// no listener uses, or `None` once the range is exhausted.
    fn ephemeral_port(&mut self, local: IpAddr, remote: SocketAddr) -> Option<u16> {
        let mut rng = std::mem::replace(&mut self.rng, ChaCha20Rng::from_seed([0; 32]));
        let p = ports::pick(&mut rng, &self.config.limits.local_port_range, |p| {
            let l = SocketAddr::new(local, p);
            self.tuple_in_use(&(l, remote)) || self.is_listening(l)
        });
        self.rng = rng;
        p
    }

    /// Whether a live subflow owns the pair (an entry whose subflow closed
    /// is stale and may be taken over).
    fn tuple_in_use(&self, t: &FourTuple) -> bool {
        self.by_tuple
            .get(t)
            .is_some_and(|&(h, idx)| self.conn(h).and_then(|c| c.subflow(idx)).is_some_and(|s| !s.is_closed()))
    }

    /// A key whose token no other connection of ours uses.
    fn fresh_key(&mut self) -> u64 {
        loop {
            let k: u64 = self.rng.random();
            if !self.tokens.contains_key(&crypto::token(k)) {
                return k;
            }
        }
    }

    fn insert(&mut self, c: Connection) -> ConnectionHandle {
        match self.conns.iter().position(Option::is_none) {
            Some(i) => {
                self.conns[i] = Some(c);
                ConnectionHandle(i)
            }
            None => {
                self.conns.push(Some(c));
                ConnectionHandle(self.conns.len() - 1)
            }
        }
    }

    /// The next connection accepted by a listener, once its handshake completed.
    pub fn accept(&mut self) -> Option<ConnectionHandle> {
        self.accept_queue.pop_front()
    }

    /// The connection behind a handle, `None` once it was reaped: drivers
    /// hold handles, not references, so the endpoint can drop closed ones.
    pub fn conn(&self, h: ConnectionHandle) -> Option<&Connection> {
        self.conns.get(h.0).and_then(Option::as_ref)
    }

    /// Mutable access for the stream API (send, recv, close); call
    /// [`Endpoint::poll_transmit`] afterwards, as the connection may have
    /// output.
    pub fn conn_mut(&mut self, h: ConnectionHandle) -> Option<&mut Connection> {
        self.conns.get_mut(h.0).and_then(Option::as_mut)
    }

    /// Handles of every live connection.
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.conns.iter().enumerate().filter(|(_, c)| c.is_some()).map(|(i, _)| ConnectionHandle(i))
    }

    /// Counters of the endpoint and every connection, summed.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for conn in self.conns.iter().flatten() {
            c.add(&conn.counters());
        }
        c
    }

    // --------------------------------------------------------------
    // Stream interface: what a socket API (the tokio runtime, the
    // simulator's applications) uses, plain TCP or MPTCP alike.
    // --------------------------------------------------------------

    /// Queues bytes for sending; returns how many the send buffer took
    /// (`Ok(0)`: no room yet). An error: the connection is gone or our
    /// direction is shut down, nothing will ever be taken.
    pub fn send(&mut self, h: ConnectionHandle, data: &[u8]) -> Result<usize, SendError> {
        let c = self.conn_mut(h).ok_or(SendError::InvalidState)?;
        let n = c.send(data)?;
        self.after_app(h);
        Ok(n)
    }

    /// Room in the send buffer.
    pub fn send_space(&self, h: ConnectionHandle) -> usize {
        self.conn(h).map_or(0, |c| c.send_space())
    }

    /// Copies received bytes into `out`: `Ok(0)` means nothing is ready yet,
    /// [`RecvError::Finished`] the end of the peer's stream,
    /// [`RecvError::InvalidState`] a connection gone without that end.
    pub fn recv(&mut self, h: ConnectionHandle, now: Instant, out: &mut [u8]) -> Result<usize, RecvError> {
        self.conn_mut(h).ok_or(RecvError::InvalidState)?.recv(now, out)
    }

    /// Bytes ready to read.
    pub fn recv_ready(&self, h: ConnectionHandle) -> usize {
        self.conn(h).map_or(0, |c| c.recv_ready())
    }

    /// The peer closed its direction and every byte before that was read.
    pub fn recv_finished(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_none_or(|c| c.recv_finished() || c.is_closed())
    }

    /// Orderly close of our direction (DATA_FIN / FIN after queued data).
    pub fn close(&mut self, h: ConnectionHandle) {
        if let Some(c) = self.conn_mut(h) {
            c.close();
        }
        self.after_app(h);
    }

    /// Abortive close (RST on every subflow).
    pub fn abort(&mut self, h: ConnectionHandle) {
        if let Some(c) = self.conn_mut(h) {
            c.abort();
        }
    }

    /// The connection completed its handshake and is not yet closed.
    pub fn is_established(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_some_and(|c| c.is_established())
    }

    /// The connection is gone (closed, reset or timed out).
    pub fn is_closed(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_none_or(|c| c.is_closed())
    }

    /// (local, remote) addresses of the connection's initial subflow.
    pub fn addresses(&self, h: ConnectionHandle) -> Option<(SocketAddr, SocketAddr)> {
        self.conn(h).and_then(|c| c.addresses())
    }

    /// Forgets a connection (the application dropped its handle).
    pub fn remove(&mut self, h: ConnectionHandle) {
        if let Some(Some(c)) = self.conns.get(h.0) {
            self.counters.add(&c.counters());
            if let Some(t) = c.local_token() {
                if self.tokens.get(&t) == Some(&h) {
                    self.tokens.remove(&t);
                }
            }
            self.by_tuple.retain(|_, (ch, _)| *ch != h);
            self.conns[h.0] = None;
            self.passive.remove(&h);
        }
    }

    fn after_app(&mut self, h: ConnectionHandle) {
        let Some(c) = self.conn_mut(h) else { return };
        c.progress_now();
        let now = c.last_now();
        self.post_conn(now, h);
    }

    // --------------------------------------------------------------
    // Driver interface
    // --------------------------------------------------------------

    /// Feeds one received IP packet. Malformed packets are counted and dropped.
    pub fn handle_packet(&mut self, now: Instant, packet: &[u8]) {
        let pkt = match parse_tcp_packet(packet) {
            Ok(p) => p,
            Err(mptun_wire::Error::NotTcp) => {
                self.handle_non_tcp(now, packet);
                return;
            }
            Err(mptun_wire::Error::Unsupported) => {
                // Not ours to judge (fragments, extension headers).
                self.counters.mptun_not_tcp += 1;
                return;
            }
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
        if let Some(&(h, idx)) = self.by_tuple.get(&(local, remote)) {
            let live = self.conn(h).and_then(|c| c.subflow(idx)).is_some_and(|s| !s.is_closed());
            if live {
                let c = self.conns[h.0].as_mut().expect("tuple map points at live connections");
                c.handle_segment(now, idx, &pkt.tcp, &opts, pkt.payload);
                self.post_conn(now, h);
                return;
            }
            self.by_tuple.remove(&(local, remote));
        }
        let f = pkt.tcp.flags;
        if f.syn() && !f.ack() && !f.rst() {
            let join = opts.mptcp.iter().find_map(|o| match o {
                MptcpOption::MpJoinSyn { backup, addr_id, token, nonce } => Some((*backup, *addr_id, *token, *nonce)),
                _ => None,
            });
            if let Some((backup, addr_id, token, peer_nonce)) = join {
                if self.accept_join(now, local, remote, &pkt.tcp, &opts, (backup, addr_id, token, peer_nonce)) {
                    return;
                }
            } else if self.is_listening(local) {
                // H set and B clear, or the MP_CAPABLE is ignored (RFC 8684 3.1).
                let mpc = opts.mptcp.iter().any(|o| {
                    matches!(o, MptcpOption::MpCapable { version: 1, flags, .. } if crate::mptcp::usable_cap_flags(*flags))
                });
                let key = self.fresh_key();
                let (iss, ts) = (self.rng.random(), self.rng.random());
                let cfg = self.config.conn();
                let iss = wrap_early_iss(&cfg, iss);
                let c = Connection::accept(now, cfg, local, remote, &pkt.tcp, &opts, mpc, key, iss, ts);
                let h = self.insert(c);
                self.passive.insert(h);
                if mpc {
                    self.tokens.insert(crypto::token(key), h);
                }
                self.by_tuple.insert((local, remote), (h, 0));
                self.apply_device_mtu(h, 0, local.ip());
                return;
            }
        }
        self.counters.mptun_no_socket += 1;
        let refused_join = opts.mptcp.iter().any(|o| matches!(o, MptcpOption::MpJoinSyn { .. }));
        self.queue_rst(local, remote, &pkt.tcp, pkt.payload.len(), refused_join);
    }

    /// A packet that is not TCP: ICMP "fragmentation needed" / ICMPv6
    /// "packet too big" about one of our subflows goes to that subflow
    /// (which checks the quoted sequence number); the rest is counted and
    /// dropped (neighbour discovery on a TUN, UDP...).
    fn handle_non_tcp(&mut self, now: Instant, packet: &[u8]) {
        let t = match parse_icmp_packet(packet) {
            Ok(Icmp::TooBig(t)) => t,
            Ok(Icmp::Other) | Err(mptun_wire::Error::NotTcp) => {
                self.counters.mptun_not_tcp += 1;
                return;
            }
            Err(_) => {
                self.counters.icmp_in_errors += 1;
                return;
            }
        };
        if t.v6 {
            self.counters.icmp6_in_pkt_too_bigs += 1;
        } else {
            self.counters.icmp_in_dest_unreachs += 1;
        }
        let tuple = (SocketAddr::new(t.local, t.local_port), SocketAddr::new(t.remote, t.remote_port));
        let Some(&(h, idx)) = self.by_tuple.get(&tuple) else { return };
        if let Some(c) = self.conns.get_mut(h.0).and_then(Option::as_mut) {
            c.handle_too_big(now, idx, Seq(t.seq), t.mtu);
            self.post_conn(now, h);
        }
    }

    fn accept_join(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        syn: &TcpHeader,
        opts: &mptun_wire::tcp::OptionSummary,
        (backup, addr_id, token, peer_nonce): (bool, u8, u32, u32),
    ) -> bool {
        let Some(&h) = self.tokens.get(&token) else {
            self.counters.mptcp_mp_join_no_token_found += 1;
            return false;
        };
        let (nonce, iss, ts) = (self.rng.random(), self.rng.random(), self.rng.random());
        let Some(c) = self.conns.get_mut(h.0).and_then(Option::as_mut) else { return false };
        match c.accept_join(now, local, remote, syn, opts, (backup, addr_id, peer_nonce), nonce, iss, ts) {
            Some(idx) => {
                self.by_tuple.insert((local, remote), (h, idx));
                self.apply_device_mtu(h, idx, local.ip());
                true
            }
            None => false,
        }
    }

    fn queue_rst(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        hdr: &TcpHeader,
        payload_len: usize,
        mptcp_err: bool,
    ) {
        let f = hdr.flags;
        if f.rst() {
            return;
        }
        // RFC 9293 3.10.7.1: RST for anything arriving at a closed port.
        let seg_len = payload_len as u32 + f.syn() as u32 + f.fin() as u32;
        let (seq, ack, flags) = if f.ack() {
            (hdr.ack, 0, TcpFlags::RST)
        } else {
            (0, (Seq(hdr.seq) + seg_len).0, TcpFlags::RST | TcpFlags::ACK)
        };
        let mut rst = TcpHeader::new(local.port(), remote.port(), seq, ack, flags, 0);
        rst.options = TcpOptions::new();
        if mptcp_err {
            // RFC 8684 3.6: say why (Linux: MPTCP_RST_EMPTCP for an unknown token).
            let o = MptcpOption::MpTcpRst { flags: 0, reason: crate::mptcp::MPTCP_RST_EMPTCP };
            if rst.options.push_aligned(&mptun_wire::TcpOption::Mptcp(o)).is_ok() {
                self.counters.mptcp_mp_rst_tx += 1;
            }
        }
        if self.stray_rsts.len() < MAX_STRAY_RSTS {
            self.stray_rsts.push_back((local, remote, rst));
        }
    }

    /// Carries out what a connection asked for: new subflows, events.
    fn post_conn(&mut self, now: Instant, h: ConnectionHandle) {
        let Some(c) = self.conns.get_mut(h.0).and_then(Option::as_mut) else { return };
        let joins = std::mem::take(&mut c.pending_joins);
        for j in joins {
            let remote = SocketAddr::new(j.remote, j.remote_port);
            let Some(port) = self.ephemeral_port(j.local, remote) else {
                // Linux: __mptcp_subflow_connect fails with EADDRNOTAVAIL.
                self.counters.mptcp_mp_join_syn_tx_connect_err += 1;
                continue;
            };
            let local = SocketAddr::new(j.local, port);
            let (nonce, iss, ts) = (self.rng.random(), self.rng.random(), self.rng.random());
            let c = self.conns[h.0].as_mut().expect("checked above");
            let idx = c.add_join(now, &j, local, nonce, iss, ts);
            self.by_tuple.insert((local, remote), (h, idx));
            if let Some(&mtu) = self.device_mtus.get(&local.ip()) {
                c.set_device_mtu(idx, mtu);
            }
        }
        let c = self.conns[h.0].as_mut().expect("checked above");
        while let Some(ev) = c.poll_event() {
            if ev == Event::Connected && self.passive.contains(&h) {
                self.accept_queue.push_back(h);
            }
            self.events.push_back((h, ev));
        }
    }

    /// Fires due timers of every connection.
    pub fn handle_timeout(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let Some(c) = self.conns[i].as_mut() else { continue };
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
                self.post_conn(now, ConnectionHandle(i));
            }
        }
    }

    /// Writes the next IP packet to send into `out`. Connections take turns.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Transmit> {
        if let Some((local, remote, hdr)) = self.stray_rsts.pop_front() {
            self.counters.tcp_out_rsts += 1;
            self.counters.tcp_out_segs += 1;
            if let Ok(len) = mptun_wire::emit_tcp_packet(local.ip(), remote.ip(), self.config.tcp.ttl, &hdr, &[], out) {
                return Some(Transmit { len, departure: now, src: local, dst: remote });
            }
        }
        let n = self.conns.len();
        for k in 0..n {
            let i = (self.next_tx + k) % n;
            let Some(c) = self.conns[i].as_mut() else { continue };
            self.rr = self.rr.wrapping_add(1);
            let res = c.poll_transmit(now, out, self.rr);
            self.post_conn(now, ConnectionHandle(i));
            if let Some((_, t)) = res {
                self.next_tx = (i + 1) % n.max(1);
                return Some(t);
            }
        }
        None
    }

    /// Earliest instant any connection needs attention.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.stray_rsts.is_empty() {
            return Some(Instant::ZERO);
        }
        self.conns.iter().flatten().fold(None, |t, c| Instant::min_opt(t, c.poll_timeout()))
    }

    /// Connection events in the order they happened.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        self.events.pop_front()
    }
}

/// The ISS of an initial subflow: `iss`, or with
/// [`MptcpConfig::wrap_early`] one about `n / 2` before 2^32 (tests only).
fn wrap_early_iss(cfg: &ConnConfig, iss: u32) -> u32 {
    cfg.mptcp.wrap_early.map_or(iss, |n| 0u32.wrapping_sub(n / 2).wrapping_sub(iss % 4096))
}

#[cfg(test)]
mod tests;
