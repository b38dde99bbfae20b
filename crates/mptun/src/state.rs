//! What the driver task and the application's socket handles share: the
//! endpoint, the wakers of every task waiting on a connection, listeners.
//!
//! One `std::sync::Mutex` guards it all, as in quinn: every critical section
//! is a few calls into the sans-IO core, never an await, so an async mutex
//! would only add cost. Handles change the endpoint (send, recv, close)
//! under the lock and then wake the driver, which transmits; the driver
//! feeds packets and timers under the lock and then wakes the handles whose
//! readiness changed. Wakers are always invoked after the lock is released.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use mptun_proto::{ConnectionHandle, Endpoint};

use crate::clock::Clock;
use crate::stats::RuntimeStats;

/// Shared between the driver and every handle of one stack.
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) clock: Clock,
    /// Told when the driver is gone (its devices released), for
    /// [`crate::Stack::shutdown`].
    pub(crate) driver_done: tokio::sync::Notify,
}

impl Shared {
    pub(crate) fn new(state: State, clock: Clock) -> Self {
        Shared { state: Mutex::new(state), clock, driver_done: tokio::sync::Notify::new() }
    }

    /// Locks the state. A panic while holding the lock cannot leave the
    /// endpoint half-updated in a way later calls would trip over more than
    /// the panic itself, so poisoning is ignored rather than cascaded.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the state, then wakes the driver so it transmits what `f`
    /// made sendable (data, a window update, a FIN).
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut st = self.lock();
        let r = f(&mut st);
        let w = st.driver_waker.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
        r
    }
}

/// Per-connection bookkeeping of the runtime (the protocol state lives in
/// the endpoint).
pub(crate) struct ConnState {
    /// Owners: the stream (its halves share one), or a listener's accept
    /// queue. At zero the connection is an orphan: it finishes its close and
    /// is then removed from the endpoint.
    pub(crate) refs: usize,
    pub(crate) read: Option<Waker>,
    pub(crate) write: Option<Waker>,
    pub(crate) connect: Option<Waker>,
    pub(crate) connected: bool,
    /// Why the connection failed, once it did.
    pub(crate) error: Option<io::ErrorKind>,
    /// Our direction was shut down (FIN / DATA_FIN queued).
    pub(crate) write_shutdown: bool,
    /// Send-buffer room that wakes a blocked writer: waking it for every
    /// acknowledged segment would cost a task switch per 1448 bytes.
    pub(crate) wake_space: usize,
    pub(crate) span: tracing::Span,
}

impl ConnState {
    pub(crate) fn new(refs: usize, wake_space: usize, span: tracing::Span) -> Self {
        ConnState {
            refs,
            read: None,
            write: None,
            connect: None,
            connected: false,
            error: None,
            write_shutdown: false,
            wake_space: wake_space.max(1),
            span,
        }
    }
}

/// A bound listener.
pub(crate) struct ListenerState {
    pub(crate) addr: SocketAddr,
    pub(crate) queue: VecDeque<ConnectionHandle>,
    pub(crate) waker: Option<Waker>,
    /// The scheduler of the connections it hands out, if not the stack's.
    pub(crate) scheduler: Option<crate::options::SchedulerFactory>,
}

/// Linux's `net.core.somaxconn` default: connections a listener queues
/// before it refuses more.
pub(crate) const BACKLOG: usize = 4096;

/// Path-manager events a subscriber may fall behind by before it loses the
/// oldest (as a netlink socket whose buffer is full gets `ENOBUFS`); each
/// loss is counted by [`crate::PmEvents::lost`].
pub const PM_EVENT_BACKLOG: usize = 4096;

/// Everything behind the lock.
pub(crate) struct State {
    pub(crate) ep: Endpoint,
    pub(crate) conns: HashMap<ConnectionHandle, ConnState>,
    /// Connections the driver must look at after each iteration: a task
    /// waits on them, or they are orphans to reap once closed.
    pub(crate) watch: HashSet<ConnectionHandle>,
    pub(crate) listeners: HashMap<u64, ListenerState>,
    pub(crate) next_listener: u64,
    pub(crate) driver_waker: Option<Waker>,
    /// The last `Stack` handle is gone: abort everything and stop.
    pub(crate) shutdown: bool,
    /// The driver task ended (shutdown, or a panic); handles fail from now.
    pub(crate) driver_gone: bool,
    pub(crate) local_ips: Vec<IpAddr>,
    pub(crate) stats: RuntimeStats,
    /// Where path-manager events go once someone subscribed
    /// ([`crate::PathManager::events`]).
    pm_tx: Option<tokio::sync::broadcast::Sender<mptun_proto::pm::PmEvent>>,
}

impl State {
    pub(crate) fn new(ep: Endpoint, local_ips: Vec<IpAddr>) -> Self {
        State {
            ep,
            conns: HashMap::new(),
            watch: HashSet::new(),
            listeners: HashMap::new(),
            next_listener: 0,
            driver_waker: None,
            shutdown: false,
            driver_gone: false,
            local_ips,
            stats: RuntimeStats::default(),
            pm_tx: None,
        }
    }

    /// The sender of path-manager events, made (and the endpoint told to
    /// keep them) at the first subscription.
    pub(crate) fn pm_events_sender(&mut self) -> &tokio::sync::broadcast::Sender<mptun_proto::pm::PmEvent> {
        if self.pm_tx.is_none() {
            self.ep.listen_pm_events();
        }
        self.pm_tx.get_or_insert_with(|| tokio::sync::broadcast::channel(PM_EVENT_BACKLOG).0)
    }

    /// Moves the endpoint's path-manager events to the subscribers (none
    /// kept when nobody subscribes any more).
    pub(crate) fn flush_pm_events(&mut self) {
        let Some(tx) = &self.pm_tx else { return };
        while let Some((_, ev)) = self.ep.poll_pm_event() {
            let _ = tx.send(ev);
        }
    }

    /// The error an operation on a stack without driver returns.
    pub(crate) fn gone_error() -> io::Error {
        io::Error::other("the mptun stack's driver has stopped")
    }

    /// Gives up one owner of `h`; at zero, closes it (orderly, or with a RST
    /// when received data would be lost, as Linux's `close()` does) and
    /// leaves it to the driver to reap.
    pub(crate) fn release(&mut self, h: ConnectionHandle) {
        let Some(cs) = self.conns.get_mut(&h) else { return };
        cs.refs = cs.refs.saturating_sub(1);
        if cs.refs > 0 {
            return;
        }
        cs.read = None;
        cs.write = None;
        cs.connect = None;
        if self.ep.recv_ready(h) > 0 {
            let _g = cs.span.enter();
            tracing::debug!("dropped with unread data: reset");
            self.ep.abort(h);
        } else if !cs.write_shutdown {
            cs.write_shutdown = true;
            self.ep.close(h);
        }
        self.watch.insert(h);
    }
}
