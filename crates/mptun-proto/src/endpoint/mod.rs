//! The endpoint: owns every connection of one host, demultiplexes incoming
//! IP packets to them (by 4-tuple, and by MPTCP token for MP_JOIN SYNs),
//! answers strays with RST (RFC 9293 3.10.7.1), and merges their
//! transmissions and timers for the driver.
//!
//! Polling order for a driver is the one of [`crate::tcp`]:
//! `handle_packet`* / `handle_timeout` → `poll_transmit` until `None` →
//! `poll_event` until `None` → sleep until `poll_timeout`.

mod cookie;
mod input;
mod limits;
mod pm;
mod ports;
mod timers;

pub use limits::Limits;
pub use pm::MAX_ENDPOINT_PM_EVENTS;
pub use ports::IP_LOCAL_PORT_RANGE;

use crate::counters::Counters;
use crate::error::{ConnectError, RecvError, SendError};
use crate::mptcp::{ConnConfig, Connection, MptcpConfig};
use crate::tcp::{Event, TcpConfig, Transmit};
use bytes::Bytes;
use mptun_time::Instant;
use mptun_wire::crypto;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use timers::TimerQueue;

/// Identifies a connection within its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub usize);

/// RSTs for segments that match no connection, queued until the driver
/// polls: a bound, so a flood of stray segments costs no memory (the excess
/// is dropped unanswered, as Linux's RST rate limit would).
const MAX_STRAY_RSTS: usize = 64;

/// Cookie SYN-ACKs queued until the driver polls (with the RSTs above).
const MAX_STATELESS: usize = 1024;

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

/// What the endpoint keeps about one connection besides the connection.
struct Slot {
    conn: Connection,
    /// Our token in [`Endpoint::tokens`], until the connection closes or
    /// falls back to plain TCP: kept here because a fallen-back connection
    /// no longer tells it.
    token: Option<u32>,
    /// Our entries in [`Endpoint::by_tuple`]: (pair, subflow index).
    tuples: Vec<(FourTuple, usize)>,
    /// The application knows the handle (it connected, or accepted it): only
    /// it may free the slot. A passive connection not yet accepted is the
    /// endpoint's, reaped as soon as it closes.
    owned: bool,
    /// Passive and its handshake not done: counts against `max_syn_backlog`.
    half_open: bool,
    /// Handed out by `conn_mut` since the endpoint last looked: its timer
    /// and output must be looked at again.
    dirty: bool,
}

/// All connections of one host.
pub struct Endpoint {
    config: EndpointConfig,
    rng: ChaCha20Rng,
    /// Each slot boxed: a connection is ~2.5 KB, and inline the vector's
    /// doubling would leave up to as much again unused per live connection
    /// (10,000 connections in a 16,384-slot vector: 41 MB where 25 MB are
    /// used) and copy every connection at each growth, under the runtime's
    /// lock. Boxed, the vector holds a pointer per slot.
    conns: Vec<Option<Box<Slot>>>,
    /// Free slots, lowest first (a handle is the lowest free index), O(log n)
    /// instead of a scan.
    free: BTreeSet<usize>,
    live: usize,
    half_open: usize,
    by_tuple: HashMap<FourTuple, (ConnectionHandle, usize)>,
    tokens: HashMap<u32, ConnectionHandle>,
    listeners: HashSet<SocketAddr>,
    accept_queue: VecDeque<ConnectionHandle>,
    events: VecDeque<(ConnectionHandle, Event)>,
    /// Stateless replies: RSTs for packets that matched no connection and
    /// SYN-ACKs carrying a cookie: (src, dst, header).
    stray_rsts: VecDeque<(SocketAddr, SocketAddr, mptun_wire::TcpHeader)>,
    timers: TimerQueue,
    cookies: cookie::CookieJar,
    /// Connections that may have something to send: `poll_transmit` walks
    /// these, not every idle connection.
    ready: BTreeSet<usize>,
    /// Slots with `dirty` set.
    dirty: Vec<usize>,
    /// Time of the last `poll_transmit` that found nothing left: every
    /// connection counts as having seen it, as if each idle connection had
    /// been walked on each call.
    swept_at: Instant,
    next_tx: usize,
    rr: usize,
    counters: Counters,
    /// MTU of the device each local address lives on (the driver's paths).
    device_mtus: HashMap<IpAddr, u32>,
    /// Path-manager events, once someone listens (`pm.rs`).
    pm_events: Option<VecDeque<(ConnectionHandle, crate::pm::PmEvent)>>,
    /// This host's addresses, for commands that name one (`pm.rs`).
    local_addrs: HashSet<IpAddr>,
}

impl Endpoint {
    /// `seed` feeds the CSPRNG that picks ISNs, timestamp offsets, ports,
    /// MPTCP keys and nonces: the runtime passes OS entropy, the simulator a
    /// fixed seed for reproducible runs.
    pub fn new(config: EndpointConfig, seed: [u8; 32]) -> Self {
        // The cookie secret from a stream of its own: the main stream's
        // draws (ISNs, keys, ports) stay what they were without cookies.
        let mut cr = ChaCha20Rng::from_seed(seed);
        cr.set_stream(1);
        let secret = (cr.random(), cr.random());
        Endpoint {
            config,
            rng: ChaCha20Rng::from_seed(seed),
            conns: Vec::new(),
            free: BTreeSet::new(),
            live: 0,
            half_open: 0,
            by_tuple: HashMap::new(),
            tokens: HashMap::new(),
            listeners: HashSet::new(),
            accept_queue: VecDeque::new(),
            events: VecDeque::new(),
            stray_rsts: VecDeque::new(),
            timers: TimerQueue::default(),
            cookies: cookie::CookieJar::new(secret),
            ready: BTreeSet::new(),
            dirty: Vec::new(),
            swept_at: Instant::ZERO,
            next_tx: 0,
            rr: 0,
            counters: Counters::default(),
            device_mtus: HashMap::new(),
            pm_events: None,
            local_addrs: HashSet::new(),
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
        if let Some(s) = self.slot_mut(h) {
            s.conn.set_device_mtu(idx, mtu);
        }
    }

    /// Accept connections to `addr` (an unspecified IP listens on every address).
    pub fn listen(&mut self, addr: SocketAddr) {
        if self.listeners.insert(addr) {
            self.listener_event(crate::pm::PmEventKind::ListenerCreated, addr);
        }
    }

    /// Stops accepting connections to `addr` (a dropped listener).
    pub fn unlisten(&mut self, addr: SocketAddr) {
        if self.listeners.remove(&addr) {
            self.listener_event(crate::pm::PmEventKind::ListenerClosed, addr);
        }
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
    /// ephemeral one from [`Limits::local_port_range`] (none free towards
    /// `remote`: [`ConnectError::AddrNotAvailable`]); an explicit one must
    /// not name a live subflow's pair ([`ConnectError::AddrInUse`]). At
    /// [`Limits::max_connections`]: [`ConnectError::TooManyConnections`].
    pub fn connect_conn(
        &mut self,
        now: Instant,
        mut local: SocketAddr,
        remote: SocketAddr,
        cfg: ConnConfig,
    ) -> Result<ConnectionHandle, ConnectError> {
        if self.live >= self.config.limits.max_connections {
            self.counters.mptun_conn_limit += 1;
            return Err(ConnectError::TooManyConnections);
        }
        if local.port() == 0 {
            local.set_port(self.ephemeral_port(local.ip(), remote).ok_or(ConnectError::AddrNotAvailable)?);
        } else if self.tuple_in_use(&(local, remote)) {
            return Err(ConnectError::AddrInUse);
        }
        let key = self.fresh_key();
        let (iss, ts) = (self.rng.random(), self.rng.random());
        let iss = wrap_early_iss(&cfg, iss);
        let mptcp = cfg.mptcp.enabled;
        let conn = Connection::connect(now, cfg, local, remote, key, iss, ts);
        let h = self.insert(conn, true, false);
        if mptcp {
            self.add_token(h, key);
        }
        self.add_tuple(h, (local, remote), 0);
        self.apply_device_mtu(h, 0, local.ip());
        self.settle(h);
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

    /// The live subflow that owns the pair, if any: an entry whose subflow
    /// closed, or whose slot now holds another subflow, is stale.
    fn tuple_owner(&self, t: &FourTuple) -> Option<(ConnectionHandle, usize)> {
        let &(h, idx) = self.by_tuple.get(t)?;
        let sf = self.conn(h)?.subflow(idx)?;
        (!sf.is_closed() && sf.local() == t.0 && sf.remote() == t.1).then_some((h, idx))
    }

    fn tuple_in_use(&self, t: &FourTuple) -> bool {
        self.tuple_owner(t).is_some()
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

    fn add_token(&mut self, h: ConnectionHandle, key: u64) {
        let t = crypto::token(key);
        self.tokens.insert(t, h);
        if let Some(s) = self.slot_mut(h) {
            s.token = Some(t);
        }
    }

    fn add_tuple(&mut self, h: ConnectionHandle, t: FourTuple, idx: usize) {
        self.by_tuple.insert(t, (h, idx));
        if let Some(s) = self.slot_mut(h) {
            s.tuples.push((t, idx));
        }
    }

    fn insert(&mut self, mut conn: Connection, owned: bool, half_open: bool) -> ConnectionHandle {
        if self.pm_events.is_some() {
            conn.listen_pm_events();
        }
        let slot = Slot { conn, token: None, tuples: Vec::new(), owned, half_open, dirty: false };
        self.live += 1;
        self.half_open += half_open as usize;
        match self.free.pop_first() {
            Some(i) => {
                self.conns[i] = Some(Box::new(slot));
                ConnectionHandle(i)
            }
            None => {
                self.conns.push(Some(Box::new(slot)));
                ConnectionHandle(self.conns.len() - 1)
            }
        }
    }

    fn slot(&self, h: ConnectionHandle) -> Option<&Slot> {
        self.conns.get(h.0).and_then(Option::as_deref)
    }

    fn slot_mut(&mut self, h: ConnectionHandle) -> Option<&mut Slot> {
        self.conns.get_mut(h.0).and_then(Option::as_deref_mut)
    }

    /// The next connection accepted by a listener, once its handshake completed.
    pub fn accept(&mut self) -> Option<ConnectionHandle> {
        let h = self.accept_queue.pop_front()?;
        if let Some(s) = self.slot_mut(h) {
            s.owned = true;
        }
        Some(h)
    }

    /// The connection behind a handle, `None` once it was reaped: drivers
    /// hold handles, not references, so the endpoint can drop closed ones.
    pub fn conn(&self, h: ConnectionHandle) -> Option<&Connection> {
        self.slot(h).map(|s| &s.conn)
    }

    /// Mutable access for the stream API (send, recv, close); call
    /// [`Endpoint::poll_transmit`] afterwards, as the connection may have
    /// output.
    pub fn conn_mut(&mut self, h: ConnectionHandle) -> Option<&mut Connection> {
        let swept_at = self.swept_at;
        let s = self.conns.get_mut(h.0).and_then(Option::as_mut)?;
        if !s.dirty {
            s.dirty = true;
            self.dirty.push(h.0);
        }
        s.conn.saw(swept_at);
        Some(&mut s.conn)
    }

    /// Handles of every live connection.
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.conns.iter().enumerate().filter(|(_, c)| c.is_some()).map(|(i, _)| ConnectionHandle(i))
    }

    /// Live connections, and those of them half-open (passive, handshake
    /// not done): what [`Limits::max_connections`] and
    /// [`Limits::max_syn_backlog`] bound.
    pub fn connection_count(&self) -> (usize, usize) {
        (self.live, self.half_open)
    }

    /// Counters of the endpoint and every connection, summed.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for s in self.conns.iter().flatten() {
            c.add(&s.conn.counters());
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

    /// [`Endpoint::send`] without a copy ([`Connection::send_bytes`]): the
    /// send buffer keeps a slice of `data` until it is acknowledged. Returns
    /// how many bytes it took from the front; the caller offers the rest
    /// again later.
    pub fn send_bytes(&mut self, h: ConnectionHandle, data: Bytes) -> Result<usize, SendError> {
        let c = self.conn_mut(h).ok_or(SendError::InvalidState)?;
        let n = c.send_bytes(data)?;
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

    /// Takes the next piece of received data without copying it
    /// ([`Connection::recv_piece`]): `Ok(None)` means nothing is ready yet.
    pub fn recv_piece(&mut self, h: ConnectionHandle, now: Instant, max: usize) -> Result<Option<Bytes>, RecvError> {
        self.conn_mut(h).ok_or(RecvError::InvalidState)?.recv_piece(now, max)
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

    /// Everything the application wrote on `h` was acknowledged, or the
    /// connection is gone ([`crate::mptcp::Connection::all_data_acked`]).
    pub fn all_data_acked(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_none_or(|c| c.all_data_acked())
    }

    /// Everything the application wrote on `h` was sent, or the connection
    /// is gone ([`crate::mptcp::Connection::all_data_sent`]).
    pub fn all_data_sent(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_none_or(|c| c.all_data_sent())
    }

    /// The connection is gone or only TIME_WAIT is left of it
    /// ([`crate::mptcp::Connection::is_finished`]).
    pub fn is_finished(&self, h: ConnectionHandle) -> bool {
        self.conn(h).is_none_or(|c| c.is_finished())
    }

    /// (local, remote) addresses of the connection's initial subflow.
    pub fn addresses(&self, h: ConnectionHandle) -> Option<(SocketAddr, SocketAddr)> {
        self.conn(h).and_then(|c| c.addresses())
    }

    /// Forgets a connection (the application dropped its handle).
    pub fn remove(&mut self, h: ConnectionHandle) {
        self.free_slot(h);
    }

    /// Releases everything of slot `h`: its token, its pairs, its timer, its
    /// place in the ready and accept queues, its pending events; its
    /// counters go to the endpoint's.
    fn free_slot(&mut self, h: ConnectionHandle) {
        // Its last path-manager events (`closed` at the latest) go to the
        // endpoint's queue before the slot does: they name the connection
        // by token, which outlives the handle.
        if let Some(s) = self.conns.get_mut(h.0).and_then(Option::as_mut) {
            s.conn.report_closed();
        }
        self.collect_pm_events(h);
        let Some(s) = self.conns.get_mut(h.0).and_then(Option::take) else { return };
        self.counters.add(&s.conn.counters());
        if let Some(t) = s.token {
            if self.tokens.get(&t) == Some(&h) {
                self.tokens.remove(&t);
            }
        }
        for (t, _) in &s.tuples {
            if self.by_tuple.get(t).is_some_and(|&(ch, _)| ch == h) {
                self.by_tuple.remove(t);
            }
        }
        self.live -= 1;
        self.half_open -= s.half_open as usize;
        self.timers.set(h.0, None);
        self.ready.remove(&h.0);
        if !s.owned {
            // Never seen by the application: nothing of it may reach it
            // under a handle that a new connection may get next.
            self.accept_queue.retain(|&a| a != h);
            self.events.retain(|&(e, _)| e != h);
        }
        self.free.insert(h.0);
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

    /// Takes into account what the application did through `conn_mut`:
    /// timers moved, output queued.
    fn sync_dirty(&mut self) {
        for i in std::mem::take(&mut self.dirty) {
            let Some(s) = self.conns.get_mut(i).and_then(Option::as_mut) else { continue };
            s.dirty = false;
            let t = s.conn.poll_timeout();
            self.timers.set(i, t);
            self.ready.insert(i);
        }
    }

    /// Carries out what a connection asked for (new subflows, events) and
    /// keeps the endpoint's books on it: pairs and token released when their
    /// subflow or the connection goes, its timer. (The slot of a connection
    /// no application knows goes once it is closed and sent its last
    /// segment: `poll_transmit`.)
    fn post_conn(&mut self, now: Instant, h: ConnectionHandle) {
        let Some(s) = self.slot_mut(h) else { return };
        let joins = s.conn.take_pending_joins();
        if !joins.is_empty() {
            // Their SYNs are output.
            self.ready.insert(h.0);
        }
        for j in joins {
            let remote = SocketAddr::new(j.remote, j.remote_port);
            let Some(port) = self.ephemeral_port(j.local, remote) else {
                // Linux: __mptcp_subflow_connect fails with EADDRNOTAVAIL.
                self.counters.mptcp_mp_join_syn_tx_connect_err += 1;
                continue;
            };
            let local = SocketAddr::new(j.local, port);
            let (nonce, iss, ts) = (self.rng.random(), self.rng.random(), self.rng.random());
            let s = self.slot_mut(h).expect("checked above");
            let idx = s.conn.add_join(now, &j, local, nonce, iss, ts);
            self.add_tuple(h, (local, remote), idx);
            self.apply_device_mtu(h, idx, local.ip());
        }
        let s = self.conns[h.0].as_mut().expect("checked above");
        let mut connected = false;
        while let Some(ev) = s.conn.poll_event() {
            if ev == Event::Connected && s.half_open {
                connected = true;
            }
            self.events.push_back((h, ev));
        }
        if connected {
            self.on_passive_connected(h);
        }
        self.collect_pm_events(h);
        self.settle(h);
    }

    /// The books of `h` after anything happened to it.
    fn settle(&mut self, h: ConnectionHandle) {
        let Some(s) = self.conns.get_mut(h.0).and_then(Option::as_mut) else { return };
        let by_tuple = &mut self.by_tuple;
        let conn = &s.conn;
        s.tuples.retain(|&(t, idx)| {
            let live = conn.subflow(idx).is_some_and(|sf| !sf.is_closed() && sf.local() == t.0 && sf.remote() == t.1);
            if !live && by_tuple.get(&t) == Some(&(h, idx)) {
                by_tuple.remove(&t);
            }
            live
        });
        let closed = conn.is_closed();
        if closed || conn.mode() == crate::mptcp::Mode::Plain {
            if let Some(t) = s.token.take() {
                if self.tokens.get(&t) == Some(&h) {
                    self.tokens.remove(&t);
                }
            }
        }
        let t = s.conn.poll_timeout();
        self.timers.set(h.0, t);
    }

    /// Fires due timers of the connections that have one due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.sync_dirty();
        for i in self.timers.due(now) {
            let h = ConnectionHandle(i);
            let Some(s) = self.slot_mut(h) else { continue };
            if s.conn.poll_timeout().is_some_and(|t| t <= now) {
                s.conn.handle_timeout(now);
                self.ready.insert(i);
                self.post_conn(now, h);
            } else {
                self.settle(h);
            }
        }
    }

    /// Writes the next IP packet to send into `out`. Connections take turns.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Transmit> {
        self.sync_dirty();
        if let Some((local, remote, hdr)) = self.stray_rsts.pop_front() {
            self.counters.tcp_out_rsts += hdr.flags.rst() as u64;
            self.counters.tcp_out_segs += 1;
            // A bare RST: its checksum is computed here whatever the
            // devices can do (no payload to save a pass over).
            if let Ok(len) = mptun_wire::emit_tcp_packet(local.ip(), remote.ip(), self.config.tcp.ttl, &hdr, &[], out) {
                let t = Transmit {
                    len,
                    tail: Default::default(),
                    departure: now,
                    segment_size: None,
                    src: local,
                    dst: remote,
                    checksum_partial: false,
                };
                return Some(t);
            }
        }
        let n = self.conns.len();
        let (rr0, start) = (self.rr, self.next_tx);
        let mut visited = 0;
        // The ready connections from `next_tx` on, then those before it:
        // the order a walk over every slot would take them in.
        let mut cursor = start;
        let mut wrapped = false;
        loop {
            let next = self.ready.range(cursor..).next().copied();
            let i = match next {
                Some(i) if !wrapped || i < start => i,
                _ if !wrapped => {
                    wrapped = true;
                    cursor = 0;
                    continue;
                }
                _ => break,
            };
            cursor = i + 1;
            let Some(s) = self.conns[i].as_mut() else {
                self.ready.remove(&i);
                continue;
            };
            visited += 1;
            self.rr = rr0.wrapping_add(visited);
            let res = s.conn.poll_transmit(now, out, self.rr);
            if res.is_none() {
                self.ready.remove(&i);
            }
            // (Puts it back if it asked for subflows to open.)
            self.post_conn(now, ConnectionHandle(i));
            if let Some((_, t)) = res {
                self.next_tx = (i + 1) % n.max(1);
                return Some(t);
            }
            // Closed with nothing left to send (its last RST is out), and no
            // application knows it: the slot goes.
            if self.slot(ConnectionHandle(i)).is_some_and(|s| !s.owned && s.conn.is_closed()) {
                self.free_slot(ConnectionHandle(i));
            }
        }
        // Every live connection took its turn, the idle ones implicitly.
        self.rr = rr0.wrapping_add(self.live);
        self.swept_at = self.swept_at.max(now);
        None
    }

    /// Earliest instant any connection needs attention.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.stray_rsts.is_empty() {
            return Some(Instant::ZERO);
        }
        let dirty = self.dirty.iter().filter_map(|&i| self.conns[i].as_ref()?.conn.poll_timeout()).min();
        Instant::min_opt(self.timers.next(), dirty)
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
mod icmp_tests;
#[cfg(test)]
mod tests;
