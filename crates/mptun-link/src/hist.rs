//! A fixed-size log-linear histogram of nanosecond values.
//!
//! linkem records a release error and a delay for every packet on the forwarding thread, and
//! every link records the queueing delay of each packet it delivers, so the recorder must be
//! O(1), allocation-free and bounded in memory whatever the run length. An
//! HDR-style layout gives that: values below 2^SUB_BITS ns are exact, above that each power of
//! two is split into 2^(SUB_BITS-1) buckets, bounding the relative error at 2^-(SUB_BITS-1) (< 1.6%).

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Exact buckets for [0, SUB), then one group of SUB/2 buckets per power of two up to 2^64.
const BUCKETS: usize = (SUB + (64 - SUB_BITS as u64) * (SUB / 2)) as usize;

/// Counts of values, with exact min/max/sum alongside the bucketed distribution.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram").field("count", &self.count).field("min", &self.min).field("max", &self.max).finish()
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    // Highest set bit h >= SUB_BITS; keep the SUB_BITS bits below the top one.
    let h = 63 - v.leading_zeros();
    let shift = h + 1 - SUB_BITS;
    let mantissa = (v >> shift) - SUB / 2; // in [0, SUB/2)
    (SUB + (shift as u64 - 1) * (SUB / 2) + mantissa) as usize
}

/// The largest value that maps to bucket `i` (reported quantiles never understate).
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = (i - SUB) / (SUB / 2) + 1;
    let mantissa = (i - SUB) % (SUB / 2) + SUB / 2;
    let lo = mantissa << shift;
    lo.saturating_add((1u64 << shift) - 1)
}

impl Histogram {
    /// An empty histogram (its buckets allocated once, here).
    pub fn new() -> Self {
        Histogram { counts: vec![0; BUCKETS].into_boxed_slice(), count: 0, sum: 0, min: u64::MAX, max: 0 }
    }

    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.count += 1;
        self.sum += v as u128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The smallest value counted, exactly (0 when empty).
    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    /// The largest value counted, exactly.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value below or at which a fraction `q` of the samples fall (upper bucket bound,
    /// clamped to the exact max); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper(i).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// The exact mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_u64() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let i = index(v);
            assert!(i >= last, "{v}");
            assert!(i < BUCKETS);
            assert!(upper(i) >= v, "upper({i})={} < {v}", upper(i));
            last = i;
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn relative_error_is_bounded() {
        for v in [127u64, 128, 129, 1000, 12_345, 1_000_000, 40_000_000, 123_456_789_012] {
            let u = upper(index(v));
            assert!((u - v) as f64 / v as f64 <= 1.0 / 64.0, "{v} -> {u}");
        }
    }

    #[test]
    fn quantiles_of_a_uniform_run() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        let p99 = h.quantile(0.99) as f64;
        assert!((p50 / 5_000_000.0 - 1.0).abs() < 0.01, "{p50}");
        assert!((p99 / 9_900_000.0 - 1.0).abs() < 0.01, "{p99}");
        assert_eq!(h.quantile(1.0), 10_000_000);
        assert!((1000..=1016).contains(&h.quantile(0.0)), "bucket upper bound within 1/64");
        assert_eq!(h.count(), 10_000);
        assert!((h.mean() - 5_000_500.0).abs() < 1.0);
        assert_eq!(h.max(), 10_000_000);
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let h = Histogram::new();
        assert_eq!(h.quantile(0.99), 0);
        assert_eq!((h.count(), h.max(), h.mean()), (0, 0, 0.0));
    }
}
