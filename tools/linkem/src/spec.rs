//! netem-style link specifications: `rate=10mbit,delay=20ms,jitter=1ms,limit=30,loss=1%`.
//!
//! Lab scripts and the control socket speak the same tiny language so that a scenario written for
//! `tc qdisc add ... netem rate 10mbit delay 20ms limit 30` translates word for word. Units follow
//! tc(8): a bare rate is bits/s, `bps` means *bytes* per second, a bare time is microseconds.
//! A spec is applied on top of a base configuration, which is how `set a2b rate=3mbit` changes only
//! the rate of a running link.

use mptun_link::{CodelParams, JitterMode, LimitScope, LinkConfig, LossModel, Qdisc, RedParams};
use mptun_time::Duration;
use std::fmt;

/// Why a spec was rejected. Specs come from command lines and a control socket, so every
/// malformed input maps to one of these instead of a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// A `key=value` item whose key is not known.
    UnknownKey(String),
    /// A key that needs a value was given without one (or a flag was given one).
    MissingValue(String),
    /// The value could not be parsed for this key.
    BadValue { key: String, value: String, why: &'static str },
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::UnknownKey(k) => write!(f, "unknown key `{k}`"),
            SpecError::MissingValue(k) => write!(f, "key `{k}` needs a value (or takes none)"),
            SpecError::BadValue { key, value, why } => write!(f, "bad value `{value}` for `{key}`: {why}"),
        }
    }
}

impl std::error::Error for SpecError {}

fn bad(key: &str, value: &str, why: &'static str) -> SpecError {
    SpecError::BadValue { key: key.to_string(), value: value.to_string(), why }
}

/// Splits a number from its unit suffix: `"1.5ms"` → `(1.5, "ms")`.
fn split_unit<'a>(key: &str, v: &'a str) -> Result<(f64, &'a str), SpecError> {
    let v = v.trim();
    let end = v.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(v.len());
    let (num, unit) = v.split_at(end);
    if num.is_empty() {
        return Err(bad(key, v, "expected a number"));
    }
    let n: f64 = num.parse().map_err(|_| bad(key, v, "expected a number"))?;
    if !n.is_finite() || n < 0.0 {
        return Err(bad(key, v, "must be a finite non-negative number"));
    }
    Ok((n, unit))
}

/// A rate in bits per second (tc units). `0` means unlimited.
pub fn parse_rate(key: &str, v: &str) -> Result<u64, SpecError> {
    let (n, unit) = split_unit(key, v)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => {
            return Err(bad(
                key,
                v,
                "unit must be bit, kbit, mbit, gbit, tbit, kibit, mibit, gibit or bps, kbps, mbps, gbps",
            ))
        }
    };
    let bps = n * mult;
    if bps > u64::MAX as f64 / 2.0 {
        return Err(bad(key, v, "rate too large"));
    }
    Ok(bps.round() as u64)
}

/// A time (tc units: a bare number is microseconds).
pub fn parse_time(key: &str, v: &str) -> Result<Duration, SpecError> {
    let (n, unit) = split_unit(key, v)?;
    let ns_per = match unit.to_ascii_lowercase().as_str() {
        "ns" | "nsec" => 1.0,
        "" | "us" | "usec" => 1e3,
        "ms" | "msec" => 1e6,
        "s" | "sec" | "secs" => 1e9,
        _ => return Err(bad(key, v, "unit must be ns, us, ms or s")),
    };
    let ns = n * ns_per;
    if ns > 3600.0 * 1e9 {
        return Err(bad(key, v, "longer than an hour"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// A probability: `"1%"` or a fraction in `[0, 1]` such as `"0.01"`.
pub fn parse_prob(key: &str, v: &str) -> Result<f64, SpecError> {
    let v = v.trim();
    let p = if let Some(pct) = v.strip_suffix('%') {
        let n: f64 = pct.trim().parse().map_err(|_| bad(key, v, "expected a percentage"))?;
        n / 100.0
    } else {
        v.parse().map_err(|_| bad(key, v, "expected `N%` or a fraction"))?
    };
    if !(0.0..=1.0).contains(&p) {
        return Err(bad(key, v, "probability must be within 0%..100%"));
    }
    Ok(p)
}

/// A byte count with optional `k`/`m`/`kb`/`mb` (decimal) or `kib`/`mib` suffix.
fn parse_bytes(key: &str, v: &str) -> Result<usize, SpecError> {
    let (n, unit) = split_unit(key, v)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        _ => return Err(bad(key, v, "unit must be b, kb, mb, kib or mib")),
    };
    let b = n * mult;
    if b.fract() != 0.0 || b > usize::MAX as f64 / 2.0 {
        return Err(bad(key, v, "expected a whole number of bytes"));
    }
    Ok(b as usize)
}

/// `loss=1%`, `loss=0.01`, `loss=none`, or netem's `gemodel p [r [1-h [1-k]]]` written
/// `loss=gemodel:1%:30%:100%:0%`, with netem's defaults r = 1-p, 1-h = 100%, 1-k = 0%.
pub fn parse_loss(key: &str, v: &str) -> Result<LossModel, SpecError> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("none") {
        return Ok(LossModel::None);
    }
    if let Some(rest) = v.strip_prefix("gemodel:").or_else(|| v.strip_prefix("gemodel/")) {
        let parts: Vec<&str> = rest.split([':', '/']).collect();
        if parts.is_empty() || parts.len() > 4 || parts.iter().any(|s| s.is_empty()) {
            return Err(bad(key, v, "gemodel takes 1 to 4 probabilities: gemodel:p[:r[:1-h[:1-k]]]"));
        }
        let p = parse_prob(key, parts[0])?;
        let r = parts.get(1).map(|s| parse_prob(key, s)).transpose()?.unwrap_or(1.0 - p);
        let loss_bad = parts.get(2).map(|s| parse_prob(key, s)).transpose()?.unwrap_or(1.0);
        let loss_good = parts.get(3).map(|s| parse_prob(key, s)).transpose()?.unwrap_or(0.0);
        return Ok(LossModel::GilbertElliott { p, r, loss_bad, loss_good });
    }
    let p = parse_prob(key, v.strip_prefix("random:").unwrap_or(v))?;
    Ok(if p == 0.0 { LossModel::None } else { LossModel::Bernoulli(p) })
}

fn parse_count(key: &str, v: &str) -> Result<usize, SpecError> {
    v.trim().parse().map_err(|_| bad(key, v, "expected a whole number"))
}

/// Applies `spec` on top of `base`. An empty spec (or `-`) leaves `base` unchanged.
///
/// Keys: `rate`, `delay`, `jitter`, `jitter-mode=ordered|reordering`, `reorder`, `limit`
/// (packets, `0`/`none` = unbounded), `limit-bytes`, `limit-scope=held|bottleneck`, `loss`,
/// `duplicate`, `corrupt`, `qdisc=droptail|codel|red` with CoDel's `codel-target` and
/// `codel-interval` (Linux `sch_codel`'s 5 ms and 100 ms unless given) and RED's `red-min`,
/// `red-max` (bytes of average backlog; Floyd's 5 and 15 packets of 1500 bytes unless given) and
/// `red-probability` (0.1), and the flags `down`, `up`, `reset` (back to an ideal wire before
/// the keys that follow).
pub fn apply_spec(base: &LinkConfig, spec: &str) -> Result<LinkConfig, SpecError> {
    let mut c = *base;
    let spec = spec.trim();
    if spec.is_empty() || spec == "-" {
        return Ok(c);
    }
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), Some(v.trim())),
            None => (item.to_ascii_lowercase(), None),
        };
        let need = || value.ok_or_else(|| SpecError::MissingValue(key.clone()));
        match key.as_str() {
            "down" | "up" | "reset" if value.is_some() => return Err(SpecError::MissingValue(key)),
            "down" => c.down = true,
            "up" => c.down = false,
            "reset" => c = LinkConfig { limit_scope: c.limit_scope, ..Default::default() },
            "rate" => {
                let v = need()?;
                c.rate_bps =
                    if v.eq_ignore_ascii_case("none") { None } else { Some(parse_rate(&key, v)?).filter(|&r| r > 0) };
            }
            "delay" => c.delay = parse_time(&key, need()?)?,
            "jitter" => c.jitter = parse_time(&key, need()?)?,
            "jitter-mode" => {
                c.jitter_mode = match need()?.to_ascii_lowercase().as_str() {
                    "ordered" | "preserve" | "order-preserving" => JitterMode::OrderPreserving,
                    "reordering" | "reorder" | "independent" => JitterMode::Reordering,
                    v => return Err(bad(&key, v, "expected `ordered` or `reordering`")),
                }
            }
            "reorder" => c.reorder = parse_prob(&key, need()?)?,
            "limit" => {
                let v = need()?;
                c.limit_packets =
                    if v.eq_ignore_ascii_case("none") { None } else { Some(parse_count(&key, v)?).filter(|&n| n > 0) };
            }
            "limit-bytes" => {
                let v = need()?;
                c.limit_bytes =
                    if v.eq_ignore_ascii_case("none") { None } else { Some(parse_bytes(&key, v)?).filter(|&n| n > 0) };
            }
            "limit-scope" => {
                c.limit_scope = match need()?.to_ascii_lowercase().as_str() {
                    "held" => LimitScope::Held,
                    "bottleneck" => LimitScope::Bottleneck,
                    v => return Err(bad(&key, v, "expected `held` or `bottleneck`")),
                }
            }
            "loss" => c.loss = parse_loss(&key, need()?)?,
            "duplicate" => c.duplicate = parse_prob(&key, need()?)?,
            "corrupt" => c.corrupt = parse_prob(&key, need()?)?,
            "qdisc" => {
                c.qdisc = match need()?.to_ascii_lowercase().as_str() {
                    "droptail" | "pfifo" => Qdisc::DropTail,
                    "codel" => match c.qdisc {
                        Qdisc::Codel(p) => Qdisc::Codel(p),
                        _ => Qdisc::Codel(CodelParams::default()),
                    },
                    "red" => match c.qdisc {
                        Qdisc::Red(p) => Qdisc::Red(p),
                        _ => Qdisc::Red(RedParams::packets(5, 15)),
                    },
                    v => return Err(bad(&key, v, "expected `droptail`, `codel` or `red`")),
                }
            }
            "codel-target" | "codel-interval" => {
                let Qdisc::Codel(mut p) = c.qdisc else {
                    return Err(bad(&key, need()?, "CoDel's: give `qdisc=codel` first"));
                };
                let t = parse_time(&key, need()?)?;
                if key == "codel-target" {
                    p.target = t;
                } else {
                    p.interval = t;
                }
                c.qdisc = Qdisc::Codel(p);
            }
            "red-min" | "red-max" | "red-probability" => {
                let Qdisc::Red(mut p) = c.qdisc else {
                    return Err(bad(&key, need()?, "RED's: give `qdisc=red` first"));
                };
                let v = need()?;
                match key.as_str() {
                    "red-min" => {
                        p.min_bytes = parse_count(&key, v)?.try_into().map_err(|_| bad(&key, v, "too large"))?
                    }
                    "red-max" => {
                        p.max_bytes = parse_count(&key, v)?.try_into().map_err(|_| bad(&key, v, "too large"))?
                    }
                    _ => {
                        let pr = parse_prob(&key, v)?;
                        if pr == 0.0 {
                            return Err(bad(&key, v, "RED's probability must be above 0"));
                        }
                        p.max_p_ppm = (pr * 1e6).round() as u32;
                    }
                }
                c.qdisc = Qdisc::Red(p);
            }
            _ => return Err(SpecError::UnknownKey(key)),
        }
    }
    if let Qdisc::Red(p) = c.qdisc {
        if p.min_bytes >= p.max_bytes {
            return Err(bad("red-min", &p.min_bytes.to_string(), "RED's min must be under its max"));
        }
    }
    Ok(c)
}

/// The configuration linkem starts from: an ideal wire whose limit counts everything held,
/// as netem's `limit` does, so lab numbers line up with netem-based scripts.
pub fn linkem_default() -> LinkConfig {
    LinkConfig { limit_scope: LimitScope::Held, ..Default::default() }
}

/// Renders a configuration back into spec syntax (for `config` replies and logs); parsing the
/// result yields the same configuration.
pub fn format_spec(c: &LinkConfig) -> String {
    let mut out = Vec::new();
    out.push(match c.rate_bps {
        Some(r) => format!("rate={r}bit"),
        None => "rate=none".into(),
    });
    out.push(format!("delay={}ns", c.delay.as_nanos()));
    if !c.jitter.is_zero() {
        out.push(format!("jitter={}ns", c.jitter.as_nanos()));
    }
    out.push(
        match c.jitter_mode {
            JitterMode::OrderPreserving => "jitter-mode=ordered",
            JitterMode::Reordering => "jitter-mode=reordering",
        }
        .into(),
    );
    if c.reorder > 0.0 {
        out.push(format!("reorder={}", c.reorder));
    }
    out.push(match c.limit_packets {
        Some(n) => format!("limit={n}"),
        None => "limit=none".into(),
    });
    out.push(match c.limit_bytes {
        Some(n) => format!("limit-bytes={n}"),
        None => "limit-bytes=none".into(),
    });
    out.push(
        match c.limit_scope {
            LimitScope::Held => "limit-scope=held",
            LimitScope::Bottleneck => "limit-scope=bottleneck",
        }
        .into(),
    );
    out.push(match c.loss {
        LossModel::None => "loss=none".into(),
        LossModel::Bernoulli(p) => format!("loss={p}"),
        LossModel::GilbertElliott { p, r, loss_bad, loss_good } => {
            format!("loss=gemodel:{p}:{r}:{loss_bad}:{loss_good}")
        }
    });
    if c.duplicate > 0.0 {
        out.push(format!("duplicate={}", c.duplicate));
    }
    if c.corrupt > 0.0 {
        out.push(format!("corrupt={}", c.corrupt));
    }
    if let Qdisc::Codel(p) = c.qdisc {
        out.push(format!(
            "qdisc=codel,codel-target={}ns,codel-interval={}ns",
            p.target.as_nanos(),
            p.interval.as_nanos()
        ));
    }
    if let Qdisc::Red(p) = c.qdisc {
        out.push(format!(
            "qdisc=red,red-min={},red-max={},red-probability={}",
            p.min_bytes,
            p.max_bytes,
            f64::from(p.max_p_ppm) / 1e6
        ));
    }
    out.push(if c.down { "down".into() } else { "up".into() });
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<LinkConfig, SpecError> {
        apply_spec(&linkem_default(), s)
    }

    /// CoDel as `tc qdisc ... codel target 5ms interval 100ms` would have
    /// it, round trip through the spec syntax, and its knobs refused
    /// without it.
    #[test]
    fn codel_is_a_qdisc_with_its_knobs() {
        let c = parse("rate=20mbit,limit=1000,qdisc=codel").unwrap();
        assert_eq!(c.qdisc, Qdisc::Codel(CodelParams::default()));
        let c = parse("qdisc=codel,codel-target=2ms,codel-interval=50ms").unwrap();
        let want = CodelParams { target: Duration::from_millis(2), interval: Duration::from_millis(50) };
        assert_eq!(c.qdisc, Qdisc::Codel(want));
        assert_eq!(parse(&format_spec(&c)).unwrap(), c);
        assert_eq!(parse("qdisc=codel,qdisc=droptail").unwrap().qdisc, Qdisc::DropTail);
        assert!(parse("codel-target=2ms").is_err());
        assert!(parse("qdisc=fq").is_err());
    }

    /// RED as `tc qdisc ... red min B max B probability P` would have it,
    /// and what the spec line prints reads back the same.
    #[test]
    fn red_is_a_qdisc_with_its_knobs() {
        let c = parse("rate=10mbit,limit=125,qdisc=red,red-min=15000,red-max=45000,red-probability=0.05").unwrap();
        let Qdisc::Red(p) = c.qdisc else { panic!("{:?}", c.qdisc) };
        assert_eq!((p.min_bytes, p.max_bytes, p.max_p_ppm), (15_000, 45_000, 50_000));
        assert_eq!(parse(&format_spec(&c)).unwrap(), c);
        assert_eq!(parse("qdisc=red").unwrap().qdisc, Qdisc::Red(RedParams::packets(5, 15)));
        assert!(parse("red-min=1500").is_err(), "RED's knobs need qdisc=red first");
        assert!(parse("qdisc=red,red-min=30000").is_err(), "min over the default max");
        assert!(parse("qdisc=red,red-probability=0").is_err());
    }

    #[test]
    fn the_issue_examples_parse() {
        let c = parse("rate=10mbit,delay=20ms,jitter=1ms,limit=30,loss=1%").unwrap();
        assert_eq!(c.rate_bps, Some(10_000_000));
        assert_eq!(c.delay, Duration::from_millis(20));
        assert_eq!(c.jitter, Duration::from_millis(1));
        assert_eq!(c.limit_packets, Some(30));
        assert_eq!(c.loss, LossModel::Bernoulli(0.01));
        assert_eq!(c.limit_scope, LimitScope::Held, "netem semantics by default");
        assert_eq!(c.jitter_mode, JitterMode::OrderPreserving);
    }

    #[test]
    fn tc_units() {
        assert_eq!(parse_rate("rate", "3mbit").unwrap(), 3_000_000);
        assert_eq!(parse_rate("rate", "1.5Mbit").unwrap(), 1_500_000);
        assert_eq!(parse_rate("rate", "100kbit").unwrap(), 100_000);
        assert_eq!(parse_rate("rate", "1mbps").unwrap(), 8_000_000, "bps is bytes per second in tc");
        assert_eq!(parse_rate("rate", "1kibit").unwrap(), 1024);
        assert_eq!(parse_rate("rate", "64000").unwrap(), 64_000, "bare number is bit/s");
        assert_eq!(parse_time("delay", "250").unwrap(), Duration::from_micros(250), "bare time is µs");
        assert_eq!(parse_time("delay", "1.5ms").unwrap(), Duration::from_micros(1500));
        assert_eq!(parse_time("delay", "2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_time("delay", "100ns").unwrap(), Duration::from_nanos(100));
        assert_eq!(parse("limit-bytes=64kib").unwrap().limit_bytes, Some(65536));
        assert_eq!(parse("limit-bytes=45000").unwrap().limit_bytes, Some(45000));
    }

    #[test]
    fn probabilities() {
        assert_eq!(parse_prob("loss", "25%").unwrap(), 0.25);
        assert_eq!(parse_prob("loss", "0.5").unwrap(), 0.5);
        assert!(parse_prob("loss", "101%").is_err());
        assert!(parse_prob("loss", "2").is_err(), "a bare number above 1 is ambiguous");
        let c = parse("reorder=2%,duplicate=1%,corrupt=0.1%").unwrap();
        assert_eq!(c.reorder, 0.02);
        assert_eq!(c.duplicate, 0.01);
        assert!((c.corrupt - 0.001).abs() < 1e-12);
    }

    #[test]
    fn gemodel_defaults_follow_netem() {
        let c = parse("loss=gemodel:1%").unwrap();
        assert_eq!(c.loss, LossModel::GilbertElliott { p: 0.01, r: 0.99, loss_bad: 1.0, loss_good: 0.0 });
        let c = parse("loss=gemodel:1%:30%:90%:0.1%").unwrap();
        match c.loss {
            LossModel::GilbertElliott { p, r, loss_bad, loss_good } => {
                assert_eq!((p, r, loss_bad), (0.01, 0.3, 0.9));
                assert!((loss_good - 0.001).abs() < 1e-12);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("loss=gemodel:").is_err());
        assert!(parse("loss=gemodel:1%:2%:3%:4%:5%").is_err());
        assert_eq!(parse("loss=0").unwrap().loss, LossModel::None);
        assert_eq!(parse("loss=none").unwrap().loss, LossModel::None);
    }

    #[test]
    fn spec_changes_only_named_keys() {
        let base = parse("rate=10mbit,delay=20ms,limit=30").unwrap();
        let c = apply_spec(&base, "rate=3mbit").unwrap();
        assert_eq!(c.rate_bps, Some(3_000_000));
        assert_eq!(c.delay, Duration::from_millis(20));
        assert_eq!(c.limit_packets, Some(30));
        let d = apply_spec(&c, "down").unwrap();
        assert!(d.down);
        assert!(!apply_spec(&d, "up").unwrap().down);
        let r = apply_spec(&c, "reset,delay=1ms").unwrap();
        assert_eq!(r.rate_bps, None);
        assert_eq!(r.delay, Duration::from_millis(1));
        assert_eq!(apply_spec(&c, "").unwrap(), c);
        assert_eq!(apply_spec(&c, "rate=none,limit=0").unwrap().rate_bps, None);
        assert_eq!(apply_spec(&c, "limit=none").unwrap().limit_packets, None);
    }

    #[test]
    fn hostile_specs_get_typed_errors() {
        assert_eq!(parse("speed=1"), Err(SpecError::UnknownKey("speed".into())));
        assert_eq!(parse("rate"), Err(SpecError::MissingValue("rate".into())));
        assert_eq!(parse("down=1"), Err(SpecError::MissingValue("down".into())));
        for s in [
            "rate=fast",
            "rate=10furlongs",
            "rate=-1mbit",
            "rate=1e400",
            "delay=ms",
            "delay=5h",
            "delay=99999999s",
            "limit=-3",
            "limit=1.5",
            "limit-bytes=0.5",
            "limit-scope=all",
            "jitter-mode=chaos",
            "loss=%",
            "loss=NaN",
            "rate=..",
            "rate=1.2.3mbit",
            "delay=\u{1F600}",
        ] {
            assert!(matches!(parse(s), Err(SpecError::BadValue { .. })), "{s}: {:?}", parse(s));
        }
    }

    #[test]
    fn format_round_trips() {
        for s in [
            "rate=10mbit,delay=20ms,jitter=1ms,limit=30,loss=1%",
            "loss=gemodel:1%:30%,reorder=5%,jitter-mode=reordering,limit-bytes=3000,limit-scope=bottleneck",
            "duplicate=1%,corrupt=2%,down",
            "",
        ] {
            let c = parse(s).unwrap();
            assert_eq!(parse(&format_spec(&c)).unwrap(), c, "{s} -> {}", format_spec(&c));
        }
    }
}
