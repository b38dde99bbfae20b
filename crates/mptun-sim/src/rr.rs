//! Request/response traffic, as netperf's `TCP_RR` generates it: the client
//! writes a request, the server answers as soon as the whole request has
//! arrived, and the client sends the next request the moment the whole
//! response has arrived. One transaction in flight at a time, so each
//! transaction's latency is the round trip of two small messages plus
//! whatever the stack (pacing, delayed ACKs, timers) adds — which is exactly
//! what an RPC workload feels.

use mptun_proto::endpoint::{ConnectionHandle, Endpoint};
use mptun_time::{Duration, Instant};
use serde::Serialize;
use std::collections::BTreeMap;

/// The requesting side: runs `target` transactions and times each.
#[derive(Clone, Debug)]
pub struct RrClient {
    pub request_size: usize,
    pub response_size: usize,
    /// Transactions to run.
    pub target: u64,
    /// Start of the transaction in progress (when its request was written).
    started: Option<Instant>,
    /// Request bytes not yet accepted by the send buffer.
    to_write: usize,
    /// Response bytes of the current transaction received so far.
    got: usize,
    /// Latency of every completed transaction, in order.
    pub latencies: Vec<Duration>,
}

impl RrClient {
    pub fn new(request_size: usize, response_size: usize, target: u64) -> Self {
        RrClient {
            request_size: request_size.max(1),
            response_size: response_size.max(1),
            target,
            started: None,
            to_write: 0,
            got: 0,
            latencies: Vec::with_capacity(target.min(1 << 24) as usize),
        }
    }

    /// All `target` transactions completed.
    pub fn done(&self) -> bool {
        self.latencies.len() as u64 >= self.target
    }
}

/// The answering side: one response per complete request.
#[derive(Clone, Debug)]
pub struct RrServer {
    pub request_size: usize,
    pub response_size: usize,
    got: usize,
    to_write: usize,
    /// Requests answered (responses queued).
    pub served: u64,
}

impl RrServer {
    pub fn new(request_size: usize, response_size: usize) -> Self {
        RrServer {
            request_size: request_size.max(1),
            response_size: response_size.max(1),
            got: 0,
            to_write: 0,
            served: 0,
        }
    }
}

/// Either side of a request/response connection.
#[derive(Clone, Debug)]
pub enum RrApp {
    Client(RrClient),
    Server(RrServer),
}

/// A simulated host running request/response apps on its connections.
pub struct RrHost {
    pub ep: Endpoint,
    pub apps: BTreeMap<ConnectionHandle, RrApp>,
    /// App given to each accepted connection.
    pub accept_template: Option<RrApp>,
    buf: Vec<u8>,
    /// Message bytes are zeros: nothing here inspects content.
    zeros: Vec<u8>,
}

impl RrHost {
    pub fn new(ep: Endpoint) -> Self {
        RrHost { ep, apps: BTreeMap::new(), accept_template: None, buf: vec![0; 64 * 1024], zeros: vec![0; 64 * 1024] }
    }

    /// Runs `app` on connection `h`.
    pub fn attach(&mut self, h: ConnectionHandle, app: RrApp) {
        self.apps.insert(h, app);
    }

    /// The client app on `h`, if there is one.
    pub fn client(&self, h: ConnectionHandle) -> Option<&RrClient> {
        match self.apps.get(&h) {
            Some(RrApp::Client(c)) => Some(c),
            _ => None,
        }
    }

    /// Lets every app read and write as far as the stack allows.
    pub fn pump(&mut self, now: Instant) {
        while let Some(h) = self.ep.accept() {
            if let Some(t) = &self.accept_template {
                self.apps.insert(h, t.clone());
            }
        }
        while self.ep.poll_event().is_some() {}
        for (&h, app) in self.apps.iter_mut() {
            let Some(conn) = self.ep.conn_mut(h) else { continue };
            if !conn.is_established() {
                continue;
            }
            match app {
                RrApp::Client(c) => loop {
                    if c.to_write > 0 {
                        let n = conn.send(&self.zeros[..c.to_write.min(self.zeros.len())]).unwrap_or(0);
                        c.to_write -= n;
                        if c.to_write > 0 {
                            break;
                        }
                    }
                    let n = conn.recv(now, &mut self.buf).unwrap_or(0);
                    if c.started.is_some() {
                        c.got += n;
                        if c.got >= c.response_size {
                            let start = c.started.take().expect("checked");
                            c.latencies.push(now - start);
                            // Anything beyond the response is not ours to time.
                            c.got = 0;
                        }
                    }
                    if c.started.is_none() && !c.done() {
                        c.started = Some(now);
                        c.to_write = c.request_size;
                        continue;
                    }
                    if n == 0 {
                        break;
                    }
                },
                RrApp::Server(s) => loop {
                    let n = conn.recv(now, &mut self.buf).unwrap_or(0);
                    s.got += n;
                    while s.got >= s.request_size {
                        s.got -= s.request_size;
                        s.to_write += s.response_size;
                        s.served += 1;
                    }
                    while s.to_write > 0 {
                        let w = conn.send(&self.zeros[..s.to_write.min(self.zeros.len())]).unwrap_or(0);
                        if w == 0 {
                            break;
                        }
                        s.to_write -= w;
                    }
                    if n == 0 {
                        break;
                    }
                },
            }
        }
    }
}

crate::endpoint_host!(RrHost);

/// Latency summary in netperf's `-o MIN_LATENCY,MEAN_LATENCY,MAX_LATENCY,
/// P99_LATENCY,STDDEV_LATENCY` terms, microseconds (fractional: simulated
/// time has nanosecond resolution).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencyStats {
    pub min_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
    /// Nearest-rank 99th percentile.
    pub p99_us: f64,
    /// Population standard deviation.
    pub stddev_us: f64,
    pub transactions: u64,
}

impl LatencyStats {
    pub fn from_latencies(lat: &[Duration]) -> Self {
        if lat.is_empty() {
            return LatencyStats::default();
        }
        let mut ns: Vec<u64> = lat.iter().map(|d| d.as_nanos() as u64).collect();
        ns.sort_unstable();
        let n = ns.len();
        let sum: u128 = ns.iter().map(|&x| u128::from(x)).sum();
        let mean = sum as f64 / n as f64;
        let var = ns.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let rank = (n * 99).div_ceil(100).max(1);
        let us = |ns: f64| ns.round() / 1e3;
        LatencyStats {
            min_us: us(ns[0] as f64),
            mean_us: us(mean),
            max_us: us(ns[n - 1] as f64),
            p99_us: us(ns[rank - 1] as f64),
            stddev_us: us(var.sqrt()),
            transactions: n as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_follow_netperf_definitions() {
        // 1..=100 us: p99 is the 99th smallest, mean 50.5, population stddev.
        let lat: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = LatencyStats::from_latencies(&lat);
        assert_eq!((s.min_us, s.max_us, s.p99_us, s.transactions), (1.0, 100.0, 99.0, 100));
        assert_eq!(s.mean_us, 50.5);
        assert!((s.stddev_us - 28.866).abs() < 0.001, "{}", s.stddev_us);
        assert_eq!(LatencyStats::from_latencies(&[]), LatencyStats::default());
        // A single slow transaction in 1000 does not reach the p99.
        let mut lat = vec![Duration::from_micros(20); 999];
        lat.push(Duration::from_millis(5));
        let s = LatencyStats::from_latencies(&lat);
        assert_eq!((s.p99_us, s.max_us), (20.0, 5000.0));
    }
}
