//! Who gets served: connections in their handshake, and relays.
//!
//! A connection is in its handshake from `accept` until it is admitted as
//! a relay: the SOCKS negotiation (local) or the exit header (exit), then
//! the wait for a relay slot. Anyone who can reach the port can open
//! handshakes and leave them idle, so they are bounded on their own
//! ([`Gate`]), apart from the relays, and per source: a newcomer beyond a
//! bound ends the oldest handshake (the oldest of its own source when that
//! source is at its bound, else the oldest of the source holding the most).
//! A flood of idle connections thus churns through its own slots, and a
//! real client, the newest, completes its few round trips before enough
//! newcomers arrive to push it out. Accepting is never held back by the
//! relays, so such a flood cannot park real clients behind itself in the
//! kernel's listen queue either.
//!
//! Relays are bounded by count (`--max-connections`) and by a memory
//! budget ([`Budget`]); a handshake waits for both until its deadline,
//! then is refused with the reason.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::report::{Counters, Reporter};
use crate::conn::Conn;

/// How long a connection may take from accept to admission.
pub(crate) const HANDSHAKE: Duration = Duration::from_secs(10);

/// Where a connection comes from, for the per-source bound: the IPv4
/// address, or the IPv6 /64 (one subscriber's usual allocation).
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v) => match v.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v) & !((1u128 << 64) - 1)).into()),
        },
        v4 => v4,
    }
}

/// Why a handshake was ended to make room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Eviction {
    /// `--max-handshakes` were in progress.
    Full,
    /// Its source had `--max-handshakes-per-source` in progress.
    Source,
}

/// The signal an evicted handshake waits on.
#[derive(Default)]
struct Evict {
    /// 0: not evicted; 1 + [`Eviction`] otherwise.
    why: AtomicU8,
    notify: Notify,
}

impl Evict {
    fn fire(&self, why: Eviction) {
        self.why.store(1 + why as u8, Ordering::Relaxed);
        self.notify.notify_one();
    }

    fn fired(&self) -> Option<Eviction> {
        match self.why.load(Ordering::Relaxed) {
            0 => None,
            1 => Some(Eviction::Full),
            _ => Some(Eviction::Source),
        }
    }

    async fn wait(&self) -> Eviction {
        loop {
            if let Some(w) = self.fired() {
                return w;
            }
            self.notify.notified().await;
        }
    }
}

struct Entry {
    source: IpAddr,
    evict: Arc<Evict>,
}

/// The handshakes in progress, oldest first.
#[derive(Default)]
struct Table {
    next: u64,
    by_age: BTreeMap<u64, Entry>,
    per_source: HashMap<IpAddr, usize>,
}

impl Table {
    fn remove(&mut self, seq: u64) -> Option<Entry> {
        let e = self.by_age.remove(&seq)?;
        if let Some(n) = self.per_source.get_mut(&e.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&e.source);
            }
        }
        Some(e)
    }

    fn evict_oldest_of(&mut self, source: IpAddr, why: Eviction) {
        let seq = self.by_age.iter().find(|(_, e)| e.source == source).map(|(&s, _)| s);
        if let Some(e) = seq.and_then(|s| self.remove(s)) {
            e.evict.fire(why);
        }
    }

    fn heaviest(&self) -> Option<IpAddr> {
        self.per_source.iter().max_by_key(|(_, &n)| n).map(|(&s, _)| s)
    }
}

/// The bounds both ends apply; see the module documentation.
pub(crate) struct Limits {
    /// How long from accept to admission ([`HANDSHAKE`]).
    pub(crate) handshake: Duration,
    pub(crate) handshakes: usize,
    pub(crate) per_source: usize,
    pub(crate) relays: usize,
    /// Bytes; see [`Budget`].
    pub(crate) memory: u64,
    /// What one relay is charged at admission.
    pub(crate) relay_cost: u64,
    /// The part of `relay_cost` that is the carrier connection's buffers
    /// (measured instead, once the connection exists).
    pub(crate) carrier_cost: u64,
}

/// Handshakes in progress and the relays' slots and budget.
pub(crate) struct Gate {
    table: Mutex<Table>,
    handshake: Duration,
    max_handshakes: usize,
    per_source: usize,
    relays: Arc<Semaphore>,
    max_relays: usize,
    pub(crate) budget: Budget,
    reporter: Arc<Reporter>,
}

impl Gate {
    pub(crate) fn new(l: &Limits, reporter: Arc<Reporter>) -> Arc<Gate> {
        Arc::new(Gate {
            table: Mutex::default(),
            handshake: l.handshake,
            max_handshakes: l.handshakes.max(1),
            per_source: l.per_source.max(1),
            relays: Arc::new(Semaphore::new(l.relays)),
            max_relays: l.relays,
            budget: Budget::new(l.memory, l.relay_cost, l.carrier_cost, l.handshake, reporter.clone()),
            reporter,
        })
    }

    /// Registers a connection just accepted from `peer`, ending the oldest
    /// handshake if a bound is reached.
    pub(crate) fn enter(self: &Arc<Self>, peer: SocketAddr) -> Handshake {
        let source = source_of(peer.ip());
        let evict = Arc::new(Evict::default());
        let mut t = self.table.lock().expect("handshake table");
        let before = t.by_age.len();
        if t.per_source.get(&source).copied().unwrap_or(0) >= self.per_source {
            t.evict_oldest_of(source, Eviction::Source);
        } else if t.by_age.len() >= self.max_handshakes {
            if let Some(h) = t.heaviest() {
                t.evict_oldest_of(h, Eviction::Full);
            }
        }
        if t.by_age.len() < before {
            Counters::bump(&self.reporter.counters.evicted);
        }
        let seq = t.next;
        t.next += 1;
        t.by_age.insert(seq, Entry { source, evict: evict.clone() });
        *t.per_source.entry(source).or_default() += 1;
        self.reporter.counters.handshakes.store(t.by_age.len() as u64, Ordering::Relaxed);
        drop(t);
        Handshake { gate: self.clone(), seq, evict, deadline: tokio::time::Instant::now() + self.handshake }
    }

    fn leave(&self, seq: u64) {
        let mut t = self.table.lock().expect("handshake table");
        t.remove(seq);
        self.reporter.counters.handshakes.store(t.by_age.len() as u64, Ordering::Relaxed);
    }

    /// What an eviction of this kind says.
    pub(crate) fn eviction_text(&self, why: Eviction) -> String {
        match why {
            Eviction::Full => format!(
                "ended in its handshake to make room: {} handshakes in progress (--max-handshakes)",
                self.max_handshakes
            ),
            Eviction::Source => format!(
                "ended in its handshake to make room: {} handshakes in progress from its address (--max-handshakes-per-source)",
                self.per_source
            ),
        }
    }
}

/// How a bounded part of the handshake ended early.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    TimedOut,
    Evicted(Eviction),
}

/// One connection's place among the handshakes; leaves it on drop.
pub(crate) struct Handshake {
    gate: Arc<Gate>,
    seq: u64,
    evict: Arc<Evict>,
    deadline: tokio::time::Instant,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        if self.evict.fired().is_none() {
            self.gate.leave(self.seq);
        }
    }
}

/// A relay's slot and its share of the budget, held while it runs.
pub(crate) struct Admitted {
    _slot: OwnedSemaphorePermit,
    charge: Charge,
}

impl Admitted {
    /// Charges the relay with what its MPTCP connection on mptun's stack
    /// holds in buffers, from the next sample on (a kernel socket's
    /// buffers are the kernel's memory, not this process's).
    pub(crate) fn track(&mut self, conn: &Conn) {
        if let (Conn::Mptun(_), Some(l), Some(p)) = (conn, conn.local_addr(), conn.peer_addr()) {
            self.track_key((l, p));
        }
    }

    fn track_key(&mut self, key: ConnKey) {
        self.charge.tracked = Some(key);
        self.charge.gate.budget.update(|st| {
            st.tracked.insert(key, 0);
        });
    }
}

/// Why a handshake was not admitted as a relay.
#[derive(Debug)]
pub(crate) enum NotAdmitted {
    Evicted(String),
    /// No relay slot or no room in the budget before the deadline.
    Full(String),
}

impl Handshake {
    /// Runs `f` until it completes, the handshake's deadline passes or it
    /// is evicted.
    pub(crate) async fn bound<F: std::future::Future>(&self, f: F) -> Result<F::Output, Cut> {
        tokio::select! {
            why = self.evict.wait() => Err(Cut::Evicted(why)),
            r = tokio::time::timeout_at(self.deadline, f) => r.map_err(|_| Cut::TimedOut),
        }
    }

    /// Waits (within the deadline, unless evicted) for a relay slot and
    /// room in the memory budget; the handshake is over either way.
    pub(crate) async fn admit(self) -> Result<Admitted, NotAdmitted> {
        let gate = self.gate.clone();
        let cut = |c: Cut, full: String| match c {
            Cut::Evicted(why) => NotAdmitted::Evicted(gate.eviction_text(why)),
            Cut::TimedOut => {
                Counters::bump(&gate.reporter.counters.over_budget);
                NotAdmitted::Full(full)
            }
        };
        let slot = match self.bound(gate.relays.clone().acquire_owned()).await {
            Ok(p) => p.expect("never closed"),
            Err(c) => {
                let why = format!(
                    "{} relays at once already, none ended within {} s (--max-connections)",
                    gate.max_relays,
                    gate.handshake.as_secs_f64()
                );
                return Err(cut(c, why));
            }
        };
        if let Err(c) = self.bound(gate.budget.reserve()).await {
            return Err(cut(c, gate.budget.refusal()));
        }
        Ok(Admitted { _slot: slot, charge: Charge { gate: gate.clone(), tracked: None } })
    }
}

/// The memory the relays of one proxy end may hold: each relay is charged
/// its own buffers (two copy buffers) and, on mptun's stack, what its
/// connection may hold in buffers (every subflow's send and receive buffer
/// as autotuning sized it, sampled from the stack each second), at least
/// an estimate per relay. Connections still in their handshake are not
/// charged: a flood of them must not use up the budget of real relays. A
/// relay that would go over waits for room.
pub(crate) struct Budget {
    limit: u64,
    /// How long a relay waits for room.
    wait: Duration,
    relay_cost: u64,
    carrier_cost: u64,
    st: Mutex<BudgetState>,
    room: Notify,
    reporter: Arc<Reporter>,
}

/// A connection on mptun's stack: its (local, peer) address.
type ConnKey = (SocketAddr, SocketAddr);

#[derive(Default)]
struct BudgetState {
    relays: u64,
    /// The relays' connections on mptun's stack, each with its buffers as
    /// last sampled.
    tracked: HashMap<ConnKey, u64>,
    /// The sum of those: a relay that ends takes its share with it at once,
    /// not at the next sample.
    sampled: u64,
}

impl Budget {
    fn new(limit: u64, relay_cost: u64, carrier_cost: u64, wait: Duration, reporter: Arc<Reporter>) -> Budget {
        Budget { limit, wait, relay_cost, carrier_cost, st: Mutex::default(), room: Notify::new(), reporter }
    }

    fn used(&self, st: &BudgetState) -> u64 {
        let own = self.relay_cost - self.carrier_cost;
        st.relays * own + st.sampled.max(st.relays * self.carrier_cost)
    }

    fn update(&self, f: impl FnOnce(&mut BudgetState)) {
        let mut st = self.st.lock().expect("budget");
        let before = self.used(&st);
        f(&mut st);
        let now = self.used(&st);
        self.reporter.counters.budget_used.store(now, Ordering::Relaxed);
        drop(st);
        if now < before {
            self.room.notify_waiters();
        }
    }

    /// Samples what the relays' connections on `stack` hold in buffers.
    pub(crate) fn sample(&self, stack: &mptun::Stack) {
        let tracked: HashSet<ConnKey> = self.st.lock().expect("budget").tracked.keys().copied().collect();
        let by_conn: HashMap<ConnKey, u64> = stack
            .connections()
            .iter()
            .filter(|c| tracked.contains(&(c.local, c.remote)))
            .map(|c| {
                let bytes = c.conn.subflows.iter().map(|s| (s.tcp.send_buffer + s.tcp.recv_buffer) as u64).sum();
                ((c.local, c.remote), bytes)
            })
            .collect();
        self.record(&by_conn);
    }

    /// Takes a sample of the tracked connections' buffers (one not in it
    /// holds none any more; one that ended meanwhile stays out).
    fn record(&self, by_conn: &HashMap<ConnKey, u64>) {
        self.update(|st| {
            for (k, b) in st.tracked.iter_mut() {
                *b = by_conn.get(k).copied().unwrap_or(0);
            }
            st.sampled = st.tracked.values().sum();
        });
    }

    /// Counts one more relay once there is room for it (the caller holds
    /// it as a [`Charge`]).
    async fn reserve(&self) {
        loop {
            // Registered before the check, so a release in between wakes it.
            let room = self.room.notified();
            {
                let mut st = self.st.lock().expect("budget");
                if st.relays == 0 || self.used(&st) + self.relay_cost <= self.limit {
                    st.relays += 1;
                    self.reporter.counters.budget_used.store(self.used(&st), Ordering::Relaxed);
                    return;
                }
            }
            room.await;
        }
    }

    fn refusal(&self) -> String {
        let st = self.st.lock().expect("budget");
        format!(
            "over the memory budget: {} relays hold {} KiB of {} KiB, one more needs {} KiB; none ended within {} s (--memory-budget)",
            st.relays,
            self.used(&st) >> 10,
            self.limit >> 10,
            self.relay_cost >> 10,
            self.wait.as_secs_f64()
        )
    }
}

/// One relay's share of the [`Budget`], returned on drop.
struct Charge {
    gate: Arc<Gate>,
    tracked: Option<ConnKey>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let tracked = self.tracked;
        self.gate.budget.update(|st| {
            st.relays -= 1;
            if let Some(b) = tracked.and_then(|k| st.tracked.remove(&k)) {
                st.sampled -= b;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::sa;

    const SHORT: Duration = Duration::from_secs(1);

    fn gate(handshakes: usize, per_source: usize, relays: usize, memory: u64) -> Arc<Gate> {
        let l = Limits { handshake: SHORT, handshakes, per_source, relays, memory, relay_cost: 100, carrier_cost: 60 };
        Gate::new(&l, Reporter::new("local", true))
    }

    /// A flood from one source churns through that source's slots; the
    /// handshakes of others are not touched, and its own newest survive.
    #[tokio::test]
    async fn hostile_handshake_flood_from_one_source_spares_others() {
        let g = gate(8, 4, 10, 10_000);
        let real = g.enter(sa("192.0.2.1:1000"));
        let flood: Vec<Handshake> = (0..100).map(|i| g.enter(sa(&format!("198.51.100.7:{}", 2000 + i)))).collect();
        assert_eq!(real.evict.fired(), None, "another source is never evicted by one source's flood");
        let live: Vec<bool> = flood.iter().map(|h| h.evict.fired().is_none()).collect();
        assert_eq!(live.iter().filter(|&&l| l).count(), 4, "the source holds its bound");
        assert!(live[96..].iter().all(|&l| l), "the newest four live");
        assert_eq!(flood[0].evict.fired(), Some(Eviction::Source));
        assert_eq!(g.reporter.counters.evicted.load(Ordering::Relaxed), 96);
        assert_eq!(g.reporter.counters.handshakes.load(Ordering::Relaxed), 5);
        assert_eq!(flood[0].bound(std::future::pending::<()>()).await, Err(Cut::Evicted(Eviction::Source)));
        drop(flood);
        assert_eq!(g.reporter.counters.handshakes.load(Ordering::Relaxed), 1, "evicted ones left already");
    }

    /// Many sources filling the table: a newcomer ends the oldest of the
    /// source with the most, so a lone client is the last to go.
    #[tokio::test]
    async fn hostile_a_full_table_evicts_from_the_heaviest_source() {
        let g = gate(6, 6, 10, 10_000);
        let lone = g.enter(sa("192.0.2.1:1"));
        let heavy: Vec<Handshake> = (0..4).map(|i| g.enter(sa(&format!("198.51.100.1:{}", 10 + i)))).collect();
        let other = g.enter(sa("[2001:db8:1:2::5]:1"));
        let same64 = g.enter(sa("[2001:db8:1:2::6]:1"));
        assert_eq!(heavy[0].evict.fired(), Some(Eviction::Full), "the heaviest source's oldest");
        for h in [&lone, &other, &same64] {
            assert_eq!(h.evict.fired(), None);
        }
        let again = g.enter(sa("[2001:db8:1:2::7]:1"));
        assert_eq!(heavy[1].evict.fired(), Some(Eviction::Full));
        assert!(lone.evict.fired().is_none() && again.evict.fired().is_none());
        assert_eq!(source_of("2001:db8:1:2::6".parse().unwrap()), source_of("2001:db8:1:2:ffff::1".parse().unwrap()));
        assert_eq!(source_of("::ffff:192.0.2.1".parse().unwrap()), "192.0.2.1".parse::<IpAddr>().unwrap());
    }

    /// Admission waits for a relay slot and for room in the budget, within
    /// the deadline; a relay that ends lets the next one in.
    #[tokio::test]
    async fn admission_queues_then_refuses() {
        let g = gate(8, 8, 2, 250); // two relays of 100 fit the budget, a third not
        let a = g.enter(sa("192.0.2.1:1")).admit().await.unwrap();
        let b = g.enter(sa("192.0.2.1:2")).admit().await.unwrap();
        let (g2, started) = (g.clone(), tokio::time::Instant::now());
        let waiting = tokio::spawn(async move {
            let c = g2.enter(sa("192.0.2.1:3")).admit().await;
            (c, started.elapsed())
        });
        tokio::time::sleep(SHORT / 2).await;
        drop(a);
        let (c, waited) = waiting.await.unwrap();
        assert!(c.is_ok() && waited >= SHORT / 2 && waited < SHORT, "{waited:?}");
        let mut c = c.unwrap();
        c.track_key(key(3));
        let over = g.enter(sa("192.0.2.1:4")).admit().await;
        assert!(matches!(&over, Err(NotAdmitted::Full(w)) if w.contains("--max-connections")), "{:?}", over.err());
        drop(b);
        // The slot is free, the budget not: c's connection's buffers grew.
        g.budget.record(&HashMap::from([(key(3), 200)]));
        let over = g.enter(sa("192.0.2.1:5")).admit().await;
        assert!(matches!(&over, Err(NotAdmitted::Full(w)) if w.contains("--memory-budget")), "{:?}", over.err());
        assert_eq!(g.reporter.counters.over_budget.load(Ordering::Relaxed), 2);
        g.budget.record(&HashMap::from([(key(3), 0)]));
        assert!(g.enter(sa("192.0.2.1:6")).admit().await.is_ok());
        drop(c);
    }

    /// A connection of mptun's stack, for the budget's books.
    fn key(port: u16) -> ConnKey {
        (sa("10.201.0.2:1081"), SocketAddr::new("10.101.0.2".parse().unwrap(), port))
    }

    /// A relay that ends gives back its connection's buffers as last
    /// sampled at once, so one waiting for room is admitted then, not at the
    /// next sample (each second). Before, at 1,000 relays, those that
    /// ended kept the budget full until the next sample, and the waiting
    /// ones were admitted one at a time (the first always is) for that
    /// second.
    #[tokio::test]
    async fn an_ended_relay_gives_its_sampled_buffers_back_at_once() {
        let g = gate(8, 8, 10, 250); // a relay costs 40 + its connection's buffers, at least 60
        let mut a = g.enter(sa("192.0.2.1:1")).admit().await.unwrap();
        a.track_key(key(1));
        let mut b = g.enter(sa("192.0.2.1:2")).admit().await.unwrap();
        b.track_key(key(2));
        // Autotuning grew both connections' buffers: 2 x 40 + 2 x 90 = 260 of 250.
        g.budget.record(&HashMap::from([(key(1), 90), (key(2), 90)]));
        assert_eq!(g.reporter.counters.budget_used.load(Ordering::Relaxed), 260);
        let (g2, started) = (g.clone(), tokio::time::Instant::now());
        let waiting = tokio::spawn(async move {
            let c = g2.enter(sa("192.0.2.1:3")).admit().await;
            (c, started.elapsed())
        });
        tokio::time::sleep(SHORT / 4).await;
        drop(a);
        let (c, waited) = waiting.await.unwrap();
        assert!(c.is_ok() && waited < SHORT / 2, "admitted after {waited:?}, a ended after {:?}", SHORT / 4);
        // Two relays of 40, and their connections' buffers: b's 90 sampled,
        // c's not yet, but at least 60 each: 2 x 40 + 2 x 60.
        assert_eq!(g.reporter.counters.budget_used.load(Ordering::Relaxed), 200);
        drop((b, c));
        assert_eq!(g.reporter.counters.budget_used.load(Ordering::Relaxed), 0);
    }
}
