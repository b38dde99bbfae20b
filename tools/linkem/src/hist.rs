//! Summaries of [`Histogram`]s (defined in `mptun-link`, where the
//! simulator's links use them too) in the unit lab reports read in.

pub use mptun_link::Histogram;
use serde::Serialize;

/// A summary in microseconds, the unit lab reports read in.
pub fn summary_us(h: &Histogram) -> HistSummary {
    let us = |ns: u64| ns as f64 / 1e3;
    HistSummary {
        count: h.count(),
        min: us(h.min()),
        mean: h.mean() / 1e3,
        p50: us(h.quantile(0.50)),
        p90: us(h.quantile(0.90)),
        p99: us(h.quantile(0.99)),
        p999: us(h.quantile(0.999)),
        max: us(h.max()),
    }
}

/// Percentiles of a histogram, in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct HistSummary {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_in_microseconds() {
        let mut h = Histogram::new();
        assert_eq!(summary_us(&h), HistSummary::default());
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        let s = summary_us(&h);
        assert_eq!((s.min, s.max, s.count), (1.0, 10_000.0, 10_000));
        assert!((s.p50 / 5_000.0 - 1.0).abs() < 0.01, "{}", s.p50);
    }
}
