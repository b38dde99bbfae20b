//! Report pieces shared by every scenario, serialisable to JSON.

use mptun_link::LinkStats;
use serde::Serialize;
use std::collections::BTreeMap;

/// Counters of one link direction, for JSON.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LinkReport {
    pub delivered_packets: u64,
    pub dropped_queue: u64,
    pub dropped_loss: u64,
    pub dropped_down: u64,
    pub reordered: u64,
    pub duplicated: u64,
    pub max_queue_packets: u64,
}

impl From<LinkStats> for LinkReport {
    fn from(s: LinkStats) -> Self {
        LinkReport {
            delivered_packets: s.delivered_packets,
            dropped_queue: s.dropped_queue,
            dropped_loss: s.dropped_loss,
            dropped_down: s.dropped_down,
            reordered: s.reordered,
            duplicated: s.duplicated,
            max_queue_packets: s.max_queue_packets,
        }
    }
}

/// Non-zero counters by kernel name.
pub fn counters_map(c: &mptun_proto::Counters) -> BTreeMap<&'static str, u64> {
    c.iter().filter(|(_, v)| *v != 0).collect()
}

/// Wall-clock cost of a run: the only part of a report that differs between
/// two runs with the same seed.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WallClock {
    pub wall_s: f64,
    /// Simulated payload throughput per wall second, in Gbit: how much faster
    /// than real time the simulator runs this scenario.
    pub sim_gbps_per_wall_s: f64,
}

impl WallClock {
    pub fn new(wall: std::time::Duration, payload_bytes: u64) -> Self {
        let wall_s = wall.as_secs_f64();
        WallClock { wall_s, sim_gbps_per_wall_s: payload_bytes as f64 * 8.0 / wall_s.max(1e-9) / 1e9 }
    }
}

/// SHA-256 (hex) of a report with its wall-clock fields removed: two runs with
/// the same arguments and seed print the same digest, so "is this run
/// reproducible" is one string comparison.
pub fn run_digest<T: Serialize>(report: &T) -> String {
    use sha2::{Digest, Sha256};
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for k in ["wall_s", "sim_gbps_per_wall_s", "run_digest"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(report).expect("reports serialise");
    strip(&mut v);
    let digest = Sha256::digest(v.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
