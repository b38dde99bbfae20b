//! What a proxy end tells its operator: one event per connection (text
//! lines, or JSON lines with `--json`), a summary every interval like
//! `mptun send`'s, and the counters behind it (connections refused,
//! failed, wrong keys, replays) in both.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::probe::Probe;

/// Counters of one proxy end over its life.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Connections accepted (every one ends up closed, refused or failed).
    pub(crate) accepted: AtomicU64,
    /// Relayed connections that ended.
    pub(crate) closed: AtomicU64,
    /// Refused by policy: --allow (exit), SOCKS authentication or command
    /// (local), or the exit's refusal passed on.
    pub(crate) refused: AtomicU64,
    /// Could not be set up: the destination or exit unreachable, timeouts,
    /// malformed headers.
    pub(crate) failed: AtomicU64,
    /// Headers whose tag did not verify (exit), or replies that did not
    /// (local): the other end holds another key.
    pub(crate) wrong_key: AtomicU64,
    /// Authentic headers seen before (exit).
    pub(crate) replayed: AtomicU64,
    /// Authentic headers outside the timestamp window (exit).
    pub(crate) stale: AtomicU64,
    /// Handshakes ended to make room for newer ones (they count as failed).
    pub(crate) evicted: AtomicU64,
    /// Connections refused because no relay slot (`--max-connections`) or
    /// no room in `--memory-budget` came within the handshake time (they
    /// count as refused).
    pub(crate) over_budget: AtomicU64,
    /// Connections in their handshake now (a gauge, not a total).
    pub(crate) handshakes: AtomicU64,
    /// What the relays are charged against the memory budget now, bytes
    /// (a gauge).
    pub(crate) budget_used: AtomicU64,
    /// Bytes relayed towards the destination / back, of ended connections
    /// (live ones add theirs in [`Reporter::summary`]).
    pub(crate) bytes_up: AtomicU64,
    pub(crate) bytes_down: AtomicU64,
}

impl Counters {
    fn get(v: &AtomicU64) -> u64 {
        v.load(Ordering::Relaxed)
    }

    pub(crate) fn bump(v: &AtomicU64) {
        v.fetch_add(1, Ordering::Relaxed);
    }
}

/// Prints events and summaries for one proxy end.
pub(crate) struct Reporter {
    pub(crate) json: bool,
    /// `local` or `exit`.
    pub(crate) role: &'static str,
    pub(crate) counters: Counters,
    start: Instant,
    /// Live connections' byte counts, for the summary.
    live: std::sync::Mutex<Vec<std::sync::Weak<super::relay::Moved>>>,
}

/// Per-connection facts for the close event.
pub(crate) struct Closed<'a> {
    pub(crate) id: u64,
    pub(crate) peer: String,
    pub(crate) dest: String,
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) duration: Duration,
    pub(crate) reason: &'a str,
    pub(crate) probe: Option<Probe>,
}

impl Reporter {
    pub(crate) fn new(role: &'static str, json: bool) -> Arc<Reporter> {
        Arc::new(Reporter {
            json,
            role,
            counters: Counters::default(),
            start: Instant::now(),
            live: Default::default(),
        })
    }

    fn elapsed(&self) -> f64 {
        (self.start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
    }

    fn line(&self, mut v: Value, text: String) {
        let out = if self.json {
            if let Value::Object(m) = &mut v {
                m.insert("time".into(), json!(self.elapsed()));
                m.insert("role".into(), json!(self.role));
            }
            v.to_string()
        } else {
            format!("[{:>9.3}] {text}", self.elapsed())
        };
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{out}");
        let _ = o.flush();
    }

    /// The startup line; tests and scripts wait for "listening".
    pub(crate) fn listening(&self, what: &str, fields: Value) {
        let mut v = json!({"event": "listening", "on": what});
        if let (Value::Object(m), Value::Object(f)) = (&mut v, fields) {
            m.extend(f);
        }
        self.line(v, format!("mptun proxy {}: listening on {what}", self.role));
    }

    pub(crate) fn track(&self, m: &Arc<super::relay::Moved>) {
        let mut l = self.live.lock().expect("live list");
        l.retain(|w| w.strong_count() > 0);
        l.push(Arc::downgrade(m));
    }

    pub(crate) fn connect(&self, id: u64, peer: &str, dest: &str, extra: Value) {
        let mut v = json!({"event": "connect", "id": id, "peer": peer, "dest": dest});
        if let (Value::Object(m), Value::Object(f)) = (&mut v, extra) {
            m.extend(f);
        }
        self.line(v, format!("#{id} {peer} -> {dest}: connected"));
    }

    /// A connection that was never relayed: refused by policy or failed.
    pub(crate) fn refused(&self, id: u64, peer: &str, dest: Option<&str>, why: &str, counter: &AtomicU64, kind: &str) {
        Counters::bump(counter);
        let v = json!({"event": kind, "id": id, "peer": peer, "dest": dest, "reason": why});
        self.line(v, format!("#{id} {peer} -> {}: {kind}: {why}", dest.unwrap_or("?")));
    }

    /// A connection ended in its handshake to make room, before it said
    /// anything valid: counted (failed, and `evicted` by the gate) but not
    /// printed, as a flood of them would otherwise flood the log too.
    pub(crate) fn evicted(&self) {
        Counters::bump(&self.counters.failed);
    }

    pub(crate) fn closed(&self, c: Closed<'_>) {
        let c2 = &self.counters;
        Counters::bump(&c2.closed);
        c2.bytes_up.fetch_add(c.up, Ordering::Relaxed);
        c2.bytes_down.fetch_add(c.down, Ordering::Relaxed);
        let secs = c.duration.as_secs_f64();
        let subflows: Vec<Value> = c
            .probe
            .as_ref()
            .map(|p| {
                p.subflows
                    .iter()
                    .map(|s| {
                        json!({
                            "id": s.id,
                            "local": s.local.map(|a| a.to_string()),
                            "remote": s.remote.map(|a| a.to_string()),
                            "bytes_sent": s.bytes_acked,
                            "bytes_received": s.bytes_received,
                            "retrans_segs": s.retrans_segs,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let used = c
            .probe
            .as_ref()
            .map_or(0, |p| p.subflows.iter().filter(|s| s.bytes_acked > 0 || s.bytes_received > 0).count());
        let mode = c.probe.as_ref().map(|p| p.mode);
        let v = json!({
            "event": "close", "id": c.id, "peer": c.peer, "dest": c.dest,
            "bytes_up": c.up, "bytes_down": c.down, "duration_s": (secs * 1000.0).round() / 1000.0,
            "reason": c.reason, "mode": mode, "subflows_used": used, "subflows": subflows,
        });
        let per_sf: Vec<String> = c
            .probe
            .iter()
            .flat_map(|p| p.subflows.iter())
            .map(|s| {
                let ip = |a: Option<std::net::SocketAddr>| a.map_or("?".into(), |a| a.ip().to_string());
                format!("{}-{} {} B", ip(s.local), ip(s.remote), s.bytes_acked + s.bytes_received)
            })
            .collect();
        let text = format!(
            "#{} {} -> {}: closed ({}) after {:.2} s, {} up, {} down, {} subflow(s) used [{}]",
            c.id,
            c.peer,
            c.dest,
            c.reason,
            secs,
            c.up,
            c.down,
            used,
            per_sf.join(", ")
        );
        self.line(v, text);
    }

    /// Totals plus live connections' bytes, and the counters.
    pub(crate) fn summary(&self, interval: Option<(f64, u64, u64)>, last: bool) {
        let c = &self.counters;
        let (up, down) = self.totals();
        let active = Counters::get(&c.accepted)
            .saturating_sub(Counters::get(&c.closed) + Counters::get(&c.refused) + Counters::get(&c.failed));
        let (secs, bps_up, bps_down) = match interval {
            Some((s, u0, d0)) if s > 0.0 => {
                (s, (up.saturating_sub(u0)) as f64 * 8.0 / s, (down.saturating_sub(d0)) as f64 * 8.0 / s)
            }
            _ => (0.0, 0.0, 0.0),
        };
        let v = json!({
            "event": if last { "end" } else { "summary" },
            "active": active,
            "accepted": Counters::get(&c.accepted), "closed": Counters::get(&c.closed),
            "refused": Counters::get(&c.refused), "failed": Counters::get(&c.failed),
            "wrong_key": Counters::get(&c.wrong_key), "replayed": Counters::get(&c.replayed),
            "stale": Counters::get(&c.stale),
            "evicted": Counters::get(&c.evicted), "over_budget": Counters::get(&c.over_budget),
            "handshakes": Counters::get(&c.handshakes), "budget_used": Counters::get(&c.budget_used),
            "bytes_up": up, "bytes_down": down,
            "interval_s": (secs * 1000.0).round() / 1000.0,
            "bits_per_second_up": bps_up.round(), "bits_per_second_down": bps_down.round(),
        });
        let text = format!(
            "{}: {active} active ({} in handshake), {} accepted, {} closed, {} refused, {} failed, {} wrong key, {} replayed, {} stale, {} evicted, {} over budget; {up} bytes up, {down} down{}",
            if last { "total" } else { "summary" },
            Counters::get(&c.handshakes),
            Counters::get(&c.accepted),
            Counters::get(&c.closed),
            Counters::get(&c.refused),
            Counters::get(&c.failed),
            Counters::get(&c.wrong_key),
            Counters::get(&c.replayed),
            Counters::get(&c.stale),
            Counters::get(&c.evicted),
            Counters::get(&c.over_budget),
            if secs > 0.0 { format!(" ({:.2} Mbit/s up, {:.2} down)", bps_up / 1e6, bps_down / 1e6) } else { String::new() }
        );
        self.line(v, text);
    }

    /// The bytes so far, for the next interval's rate.
    fn totals(&self) -> (u64, u64) {
        let c = &self.counters;
        let live: Vec<_> = self.live.lock().expect("live list").iter().filter_map(std::sync::Weak::upgrade).collect();
        (
            Counters::get(&c.bytes_up) + live.iter().map(|m| m.up.load(Ordering::Relaxed)).sum::<u64>(),
            Counters::get(&c.bytes_down) + live.iter().map(|m| m.down.load(Ordering::Relaxed)).sum::<u64>(),
        )
    }

    /// Prints a summary every `every` for as long as it runs.
    pub(crate) async fn summaries(self: Arc<Self>, every: Duration) {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let (mut last, mut at) = (self.totals(), Instant::now());
        loop {
            t.tick().await;
            self.summary(Some((at.elapsed().as_secs_f64(), last.0, last.1)), false);
            (last, at) = (self.totals(), Instant::now());
        }
    }
}
