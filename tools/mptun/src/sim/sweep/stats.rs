//! A sweep's statistics: the figures of a report, and per grid point their
//! mean, standard deviation, 95 % confidence interval and range.

/// Two-sided 97.5 % quantiles of Student's t for 1 to 30 degrees of freedom.
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// The figures of a report: every number (and boolean, as 0 or 1) it holds,
/// named by its JSON path (`flows.0.goodput_bps`), but the wall-clock ones
/// (`wall_s`, `sim_gbps_per_wall_s`: not a property of the run) and the seed.
pub(crate) fn figures(v: &serde_json::Value) -> Vec<(String, f64)> {
    fn walk(v: &serde_json::Value, path: &str, out: &mut Vec<(String, f64)>) {
        let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
        match v {
            serde_json::Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    out.push((path.to_string(), x));
                }
            }
            serde_json::Value::Bool(b) => out.push((path.to_string(), f64::from(u8::from(*b)))),
            serde_json::Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| walk(x, &join(&i.to_string()), out)),
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    if !matches!(k.as_str(), "wall_s" | "sim_gbps_per_wall_s" | "seed") {
                        walk(x, &join(k), out);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// What a grid point's runs make of one figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stat {
    pub(crate) n: usize,
    pub(crate) mean: f64,
    /// Sample standard deviation (n − 1); 0 for one run.
    pub(crate) sd: f64,
    /// Half-width of the 95 % confidence interval of the mean (Student's t;
    /// 0 for one run: no interval can be said).
    pub(crate) ci95: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// The statistics of `xs` (not empty).
pub(crate) fn stat(xs: &[f64]) -> Stat {
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n.max(1) as f64;
    let sd = if n > 1 { (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
    let t = if n > 1 { T975.get(n - 2).copied().unwrap_or(1.96) } else { 0.0 };
    Stat {
        n,
        mean,
        sd,
        ci95: t * sd / (n as f64).sqrt(),
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_sd_and_a_t_interval() {
        let s = stat(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.n, s.mean, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!((s.sd - 1.290_994).abs() < 1e-6);
        // t(0.975, 3) = 3.182
        assert!((s.ci95 - 3.182 * 1.290_994 / 2.0).abs() < 1e-6);
        let one = stat(&[7.0]);
        assert_eq!((one.sd, one.ci95), (0.0, 0.0));
        // Past 30 degrees of freedom, the normal quantile.
        let many: Vec<f64> = (0..100).map(f64::from).collect();
        let s = stat(&many);
        assert!((s.ci95 - 1.96 * s.sd / 10.0).abs() < 1e-9);
    }

    #[test]
    fn figures_are_the_reports_numbers_but_wall_clock_and_seed() {
        let v = serde_json::json!({"seed": 3, "wall_s": 1.2, "goodput_bps": 5.0, "ok": true, "name": "x",
            "flows": [{"share": 0.4}, {"share": 0.6, "sim_gbps_per_wall_s": 9}]});
        let f = figures(&v);
        let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["flows.0.share", "flows.1.share", "goodput_bps", "ok"]);
        assert_eq!(f[3].1, 1.0);
    }
}
