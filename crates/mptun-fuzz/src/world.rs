//! The world one input plays in: a client and a server `Endpoint`, an
//! application on each end that writes a known byte pattern and reads what
//! arrives, the packets in flight between them, and the fuzzer's hand on
//! every step. The invariants are checked after every step.

use crate::api;
use crate::forge::{self, C1, C2, PORT, S1, S2};
use crate::input::Input;
use crate::observe::Observed;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::pm::{EndpointFlags, PmEndpoint};
use mptun_proto::tcp::BufferSize;
use mptun_proto::{Duration, Instant};
use mptun_wire::parse_tcp_packet;
use std::net::{IpAddr, SocketAddr};

/// Receive buffer of every connection and subflow (fixed: the memory bound
/// is then a number, and small enough for the fuzzer to reach).
pub const RCV_BUF: usize = 16 * 1024;
/// Send buffer of every connection and subflow.
pub const SND_BUF: usize = 16 * 1024;
/// What a receive queue may hold beyond twice its window: the core's
/// `buf::MEM_SLACK` (one 64 KiB chunk and its 256-byte overhead), restated
/// here so that a change of the core's bound shows up as a failure.
pub const QUEUE_SLACK: usize = 64 * 1024 + 256;
/// Steps read from one input.
const MAX_STEPS: usize = 160;
/// Rounds of plain delivery and timers after the input is used up.
const SETTLE_ROUNDS: usize = 200;
/// Packets in flight; more are dropped (a full queue).
const MAX_INFLIGHT: usize = 256;
/// Packets taken from one endpoint in one go (a runaway transmitter fails).
const MAX_BURST: usize = 4096;

/// The byte at `i` of the stream the client (or the server) writes.
fn pattern(client: bool, i: usize) -> u8 {
    let x = (i as u64 ^ (u64::from(client) << 63)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// Memory one queue (the connection's or one subflow's) may hold.
fn queue_budget() -> usize {
    2 * RCV_BUF + QUEUE_SLACK
}

/// One application connection.
struct App {
    h: ConnectionHandle,
    written: usize,
    read: usize,
    closed: bool,
    /// Its stream is the peer application's (the server's connection on the
    /// client's tuple, or the client's): what it reads must be a prefix of
    /// what the peer wrote.
    checked: bool,
}

struct Side {
    ep: Endpoint,
    apps: Vec<App>,
    client: bool,
    /// Bytes the application writes on each connection.
    tx_len: usize,
    reading: bool,
    /// SYNs delivered to it: each may open one connection.
    syns_in: usize,
}

struct Pkt {
    to_client: bool,
    bytes: Vec<u8>,
}

/// Knobs read from the first input bytes.
struct Setup {
    mptcp: bool,
    checksum: bool,
    liar: bool,
    server_signals: bool,
    client_subflow: bool,
    timestamps: bool,
    sack: bool,
    c_len: usize,
    s_len: usize,
    seed: u8,
}

impl Setup {
    fn read(inp: &mut Input) -> Setup {
        let (a, b, seed) = (inp.u8(), inp.u8(), inp.u8());
        Setup {
            mptcp: a & 1 == 0,
            checksum: a & 2 != 0,
            liar: a & 4 != 0,
            server_signals: a & 8 == 0,
            client_subflow: a & 16 == 0,
            timestamps: a & 32 == 0,
            sack: a & 64 == 0,
            c_len: 1 + usize::from(b & 15) * 1024,
            s_len: 1 + usize::from(b >> 4) * 512,
            seed,
        }
    }

    fn config(&self, client: bool) -> EndpointConfig {
        let mut cfg = EndpointConfig::default();
        cfg.tcp.recv_buffer = BufferSize::Fixed(RCV_BUF);
        cfg.tcp.send_buffer = BufferSize::Fixed(SND_BUF);
        cfg.tcp.timestamps = self.timestamps;
        cfg.tcp.sack = self.sack;
        // The client's packets leave as the runtime's do over a TUN with
        // offload (headers built here, the payload gathered from the send
        // buffer, the checksum completed by the "device" below); the
        // server's are built whole: both paths of the core under fire.
        cfg.tcp.checksum_offload = client;
        cfg.tcp.gather_payload = client;
        cfg.mptcp.recv_buffer = BufferSize::Fixed(RCV_BUF);
        cfg.mptcp.send_buffer = BufferSize::Fixed(SND_BUF);
        cfg.mptcp.enabled = self.mptcp;
        cfg.mptcp.checksum = self.checksum;
        let pm = &mut cfg.mptcp.pm;
        pm.max_subflows = 4;
        pm.max_add_addr_accepted = 4;
        if client && self.client_subflow {
            pm.endpoints.push(PmEndpoint {
                id: 1,
                addr: C2.into(),
                flags: EndpointFlags { subflow: true, ..Default::default() },
                port: None,
            });
        }
        if !client && self.server_signals {
            pm.endpoints.push(PmEndpoint {
                id: 1,
                addr: S2.into(),
                flags: EndpointFlags { signal: true, ..Default::default() },
                port: None,
            });
        }
        cfg
    }
}

/// Which endpoint owns `ip` (`Some(true)`: the client).
fn owner(ip: IpAddr) -> Option<bool> {
    if ip == IpAddr::from(C1) || ip == IpAddr::from(C2) {
        Some(true)
    } else if ip == IpAddr::from(S1) || ip == IpAddr::from(S2) {
        Some(false)
    } else {
        None
    }
}

/// The destination address of an IP packet, if it has one.
fn dst_of(p: &[u8]) -> Option<IpAddr> {
    match p.first()? >> 4 {
        4 => p.get(16..20).map(|a| IpAddr::from(<[u8; 4]>::try_from(a).expect("4 bytes"))),
        6 => p.get(24..40).map(|a| IpAddr::from(<[u8; 16]>::try_from(a).expect("16 bytes"))),
        _ => None,
    }
}

/// `MPTUN_FUZZ_TRACE=1` prints every step and delivery (for the replay example).
fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("MPTUN_FUZZ_TRACE").is_some())
}

/// One line about a packet, for traces.
fn describe(p: &[u8]) -> String {
    match mptun_wire::parse_tcp_packet_unverified(p) {
        Ok(x) => format!(
            "{}:{} > {}:{} {:?} seq={} ack={} win={} len={} {:?}{}",
            x.src,
            x.tcp.src_port,
            x.dst,
            x.tcp.dst_port,
            x.tcp.flags,
            x.tcp.seq,
            x.tcp.ack,
            x.tcp.window,
            x.payload.len(),
            x.tcp.options,
            if parse_tcp_packet(p).is_err() { " BAD" } else { "" }
        ),
        Err(e) => format!("{} bytes, {e:?}", p.len()),
    }
}

/// Every subflow of `ep`, for traces.
fn dump(ep: &Endpoint) {
    for h in ep.handles() {
        if let Some(c) = ep.conn(h) {
            eprintln!("    {h:?} {:?} {}", c.mode(), c.debug_state());
        }
        for (i, sf) in ep.conn(h).into_iter().flat_map(|c| c.subflows()) {
            eprintln!("    {h:?} sf{i}: {sf:?} {:?}", sf.info());
        }
    }
}

/// What one input did, for tests that check the harness is not vacuous.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Steps read from the input.
    pub steps: usize,
    /// Bytes the client application read.
    pub client_read: usize,
    /// Bytes the server application read on the client's connection.
    pub server_read: usize,
    /// Bytes the client application wrote.
    pub client_written: usize,
    /// Bytes the server application wrote on the client's connection.
    pub server_written: usize,
    /// Most subflows one connection of the client had at once.
    pub max_subflows: usize,
}

/// The whole world of one input.
pub(crate) struct World {
    now: Instant,
    c: Side,
    s: Side,
    inflight: Vec<Pkt>,
    obs: Observed,
    liar: bool,
    /// The client connection's (local, remote).
    main: Option<(SocketAddr, SocketAddr)>,
    buf: Vec<u8>,
    max_subflows: usize,
}

impl World {
    fn new(setup: &Setup) -> World {
        let mut s = Endpoint::new(setup.config(false), [setup.seed ^ 2; 32]);
        s.listen(SocketAddr::new(S1.into(), PORT));
        s.listen(SocketAddr::new(S2.into(), PORT));
        let c = Endpoint::new(setup.config(true), [setup.seed ^ 1; 32]);
        let mut w = World {
            now: Instant::ZERO,
            c: Side { ep: c, apps: Vec::new(), client: true, tx_len: setup.c_len, reading: true, syns_in: 0 },
            s: Side { ep: s, apps: Vec::new(), client: false, tx_len: setup.s_len, reading: true, syns_in: 0 },
            inflight: Vec::new(),
            obs: Observed::default(),
            liar: setup.liar,
            main: None,
            buf: vec![0u8; 65536],
            max_subflows: 0,
        };
        let (local, remote) = (SocketAddr::new(C1.into(), 0), SocketAddr::new(S1.into(), PORT));
        if let Some(h) = api::connect(&mut w.c.ep, w.now, local, remote) {
            w.main = w.c.ep.addresses(h);
            w.c.apps.push(App { h, written: 0, read: 0, closed: false, checked: true });
        }
        w
    }

    /// Runs one input.
    pub(crate) fn run(data: &[u8]) -> Stats {
        let mut inp = Input::new(data);
        let setup = Setup::read(&mut inp);
        let mut w = World::new(&setup);
        w.pump();
        let mut steps = 0;
        while !inp.is_empty() && steps < MAX_STEPS {
            w.step(&mut inp);
            w.pump();
            steps += 1;
        }
        w.settle();
        Stats {
            steps,
            client_read: w.c.apps.iter().map(|a| a.read).sum(),
            server_read: w.s.apps.iter().filter(|a| a.checked).map(|a| a.read).sum(),
            client_written: w.c.apps.iter().map(|a| a.written).sum(),
            server_written: w.s.apps.iter().filter(|a| a.checked).map(|a| a.written).sum(),
            max_subflows: w.max_subflows,
        }
    }

    fn side(&mut self, client: bool) -> &mut Side {
        if client {
            &mut self.c
        } else {
            &mut self.s
        }
    }

    fn deliver(&mut self, p: Pkt) {
        let now = self.now;
        if trace() {
            eprintln!("{:>10?} -> {}: {}", now, if p.to_client { "client" } else { "server" }, describe(&p.bytes));
        }
        let side = self.side(p.to_client);
        if !side.client && parse_tcp_packet(&p.bytes).is_ok_and(|x| x.tcp.flags.syn()) {
            side.syns_in += 1;
        }
        if p.bytes.len() >= mptun_proto::RECV_ZERO_COPY_MIN {
            // As the runtime's driver hands over a GRO read: lent as it is,
            // the receive queues keep slices of it.
            side.ep.handle_packet_bytes(now, p.bytes.into(), false);
        } else {
            side.ep.handle_packet(now, &p.bytes);
        }
        if trace() {
            dump(&side.ep);
        }
    }

    /// Sends a made-up packet to whichever endpoint owns its destination.
    fn inject(&mut self, bytes: Vec<u8>, to_client: Option<bool>) {
        let to = to_client.or_else(|| dst_of(&bytes).and_then(owner));
        if let Some(to_client) = to {
            self.deliver(Pkt { to_client, bytes });
        }
    }

    fn step(&mut self, inp: &mut Input) {
        let op = inp.u8();
        if trace() {
            eprintln!("step op {}", op % 12);
        }
        let n = self.inflight.len();
        match op % 12 {
            // Deliver one packet in flight (any of them: reordering).
            0..=2 => {
                if n > 0 {
                    let p = self.inflight.remove(inp.index(n));
                    self.deliver(p);
                }
            }
            // Deliver everything in flight, in order.
            3 => {
                for p in std::mem::take(&mut self.inflight) {
                    self.deliver(p);
                }
            }
            4 => {
                if n > 0 {
                    self.inflight.remove(inp.index(n));
                }
            }
            5 => {
                if n > 0 && n < MAX_INFLIGHT {
                    let i = inp.index(n);
                    let p = Pkt { to_client: self.inflight[i].to_client, bytes: self.inflight[i].bytes.clone() };
                    self.inflight.push(p);
                }
            }
            6 => {
                if n > 0 {
                    let i = inp.index(n);
                    forge::corrupt(&mut self.inflight[i].bytes, inp, self.liar);
                }
            }
            7 => self.advance(inp),
            8 => {
                if let Some(p) = forge::structured(&self.obs, inp, self.liar, self.client_proved()) {
                    self.inject(p, None);
                }
            }
            9 => {
                let to_client = inp.bool();
                let len = usize::from(inp.u8()) * 6;
                let bytes = inp.bytes(len).to_vec();
                self.inject(bytes, Some(to_client));
            }
            10 => {
                if let Some(p) = forge::kernel_frame(&self.obs, inp, self.liar, self.client_proved()) {
                    self.inject(p, None);
                }
            }
            _ => self.app_op(inp),
        }
    }

    fn client_proved(&self) -> bool {
        self.c.apps.first().is_none_or(|a| api::peer_proved_mptcp(&self.c.ep, a.h))
    }

    /// Moves virtual time on and fires the timers that are due.
    fn advance(&mut self, inp: &mut Input) {
        let next = Instant::min_opt(self.c.ep.poll_timeout(), self.s.ep.poll_timeout());
        let to = match inp.u8() % 4 {
            0 => self.now + Duration::from_millis(u64::from(inp.u8())),
            1 => self.now + Duration::from_millis(u64::from(inp.u8()) * 50),
            2 => self.now + Duration::from_secs(u64::from(inp.u8())),
            _ => next.unwrap_or(self.now).max(self.now),
        };
        self.now = to;
        self.c.ep.handle_timeout(self.now);
        self.s.ep.handle_timeout(self.now);
        if trace() {
            eprintln!("{:>10?} timers", self.now);
            dump(&self.c.ep);
            dump(&self.s.ep);
        }
    }

    /// What an application may do besides writing and reading: stop or
    /// resume reading (the receive queues fill up), close early, abort.
    fn app_op(&mut self, inp: &mut Input) {
        let client = inp.bool();
        let what = inp.u8() % 4;
        let side = self.side(client);
        let Some(app) = side.apps.last_mut() else { return };
        let h = app.h;
        match what {
            0 | 1 => side.reading = !side.reading,
            2 => {
                if !app.closed {
                    app.closed = true;
                    api::close(&mut side.ep, h);
                }
            }
            _ => api::abort(&mut side.ep, h),
        }
    }

    /// The applications write, read and close; the endpoints' packets go
    /// on the wire; the invariants are checked.
    fn pump(&mut self) {
        let now = self.now;
        while let Some(h) = api::accept(&mut self.s.ep) {
            let checked = self.main.is_some_and(|(l, r)| self.s.ep.addresses(h) == Some((r, l)));
            self.s.apps.push(App { h, written: 0, read: 0, closed: false, checked });
        }
        let peer_written = [
            self.s.apps.iter().filter(|a| a.checked).map(|a| a.written).max().unwrap_or(0),
            self.c.apps.iter().map(|a| a.written).max().unwrap_or(0),
        ];
        let liar = self.liar;
        for (side, peer_written) in [(&mut self.c, peer_written[0]), (&mut self.s, peer_written[1])] {
            for app in &mut side.apps {
                while app.written < side.tx_len {
                    let n = (side.tx_len - app.written).min(self.buf.len());
                    for (i, b) in self.buf[..n].iter_mut().enumerate() {
                        *b = pattern(side.client, app.written + i);
                    }
                    let k = api::send(&mut side.ep, app.h, &self.buf[..n]);
                    if k == 0 {
                        break;
                    }
                    app.written += k;
                }
                if app.written == side.tx_len && !app.closed && api::is_established(&side.ep, app.h) {
                    app.closed = true;
                    api::close(&mut side.ep, app.h);
                }
                while side.reading {
                    // The client takes pieces as they arrived (zero-copy
                    // reads), the server copies: both read paths of the
                    // core under the hostile wire.
                    let k = if side.client {
                        api::recv_piece(&mut side.ep, app.h, now, &mut self.buf)
                    } else {
                        api::recv(&mut side.ep, app.h, now, &mut self.buf)
                    };
                    if k == 0 {
                        break;
                    }
                    if app.checked && !liar {
                        for (i, &b) in self.buf[..k].iter().enumerate() {
                            let at = app.read + i;
                            assert!(
                                b == pattern(!side.client, at),
                                "client={} read a wrong byte at offset {at} (of {k} read at {})",
                                side.client,
                                app.read
                            );
                        }
                        assert!(
                            app.read + k <= peer_written,
                            "client={} read {} bytes, the peer wrote {peer_written}",
                            side.client,
                            app.read + k
                        );
                    }
                    app.read += k;
                }
            }
            while side.ep.poll_event().is_some() {}
        }
        for client in [true, false] {
            let mut burst = 0;
            loop {
                let side = if client { &mut self.c } else { &mut self.s };
                let Some(t) = side.ep.poll_transmit(now, &mut self.buf) else { break };
                burst += 1;
                assert!(burst < MAX_BURST, "runaway transmitter (client={client})");
                let n = t.assemble(&mut self.buf);
                if t.checksum_partial {
                    mptun_wire::gso::complete_checksum(&mut self.buf[..n]).expect("the stack emits valid packets");
                }
                let bytes = self.buf[..n].to_vec();
                if trace() {
                    eprintln!("{:>10?} {} sends {}", now, if client { "client" } else { "server" }, describe(&bytes));
                }
                self.obs.record(client, &bytes);
                if let Some(to_client) = owner(t.dst.ip()) {
                    if self.inflight.len() < MAX_INFLIGHT {
                        self.inflight.push(Pkt { to_client, bytes });
                    }
                }
            }
        }
        self.check_memory();
        let subflows = self.c.ep.handles().filter_map(|h| self.c.ep.conn(h)).map(|c| c.subflows().count()).max();
        self.max_subflows = self.max_subflows.max(subflows.unwrap_or(0));
    }

    /// Bytes buffered per connection and per endpoint stay within the
    /// configured buffers plus a fixed slack.
    fn check_memory(&self) {
        for side in [&self.c, &self.s] {
            let mut conns = 0;
            for h in side.ep.handles() {
                let Some(c) = side.ep.conn(h) else { continue };
                let subflows = c.subflows().count();
                let mem = c.recv_mem();
                let bound = (1 + subflows) * queue_budget();
                assert!(
                    mem <= bound,
                    "client={}: connection {h:?} holds {mem} B for receiving, over {bound} (1 + {subflows} queues)\n{}",
                    side.client,
                    c.debug_state()
                );
                conns += 1;
            }
            // Only SYNs open connections at a listener; the client has its one.
            let most = if side.client { 1 } else { side.syns_in };
            assert!(conns <= most, "client={}: {conns} connections from {most} SYNs", side.client);
        }
    }

    /// The input is used up: deliver what is in flight and fire timers
    /// for a while, so that whatever state the steps left is played out.
    fn settle(&mut self) {
        for _ in 0..SETTLE_ROUNDS {
            if !self.inflight.is_empty() {
                for p in std::mem::take(&mut self.inflight) {
                    self.deliver(p);
                }
            } else {
                let next = Instant::min_opt(self.c.ep.poll_timeout(), self.s.ep.poll_timeout());
                let Some(next) = next.filter(|t| *t <= self.now + Duration::from_secs(300)) else { break };
                self.now = self.now.max(next);
                self.c.ep.handle_timeout(self.now);
                self.s.ep.handle_timeout(self.now);
            }
            self.pump();
        }
    }
}
