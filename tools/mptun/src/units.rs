//! Parsing of human quantities on the command line: sizes (`20M`, `1G`,
//! `64KiB`), rates (`10mbit`, `3Mbit/s`), durations (`20ms`) and ratios
//! (`1%`, `0.01`), with one-line errors.

use anyhow::{bail, Result};
use mptun_time::Duration;

fn split_num(s: &str) -> Result<(f64, String)> {
    let s = s.trim();
    if s.strip_prefix('-').is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c == '.')) {
        bail!("'{s}' out of range: a negative value");
    }
    let idx = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (n, unit) = s.split_at(idx);
    if n.is_empty() {
        bail!("'{s}' does not start with a number");
    }
    let v: f64 = n.parse().map_err(|_| anyhow::anyhow!("'{s}' is not a number"))?;
    if !v.is_finite() {
        bail!("'{s}' is not a finite number");
    }
    Ok((v, unit.trim().to_ascii_lowercase()))
}

/// Bytes. Like iperf3, `K`/`M`/`G` are powers of 1024; `KB`/`MB`/`GB` are
/// powers of 1000 and `KiB`/`MiB`/`GiB` powers of 1024, spelled out.
pub(crate) fn parse_size(s: &str) -> Result<u64> {
    let (v, unit) = split_num(s)?;
    let mult: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => bail!("unknown size unit in '{s}' (use K, M, G, KB, MB, GB)"),
    };
    let b = v * mult;
    if !(1.0..=1e15).contains(&b) {
        bail!("size '{s}' out of range");
    }
    Ok(b as u64)
}

/// Bits per second, netem/tc style: `10mbit`, `3Mbit`, `1gbit`, `500kbit`, `10M`.
pub(crate) fn parse_rate(s: &str) -> Result<u64> {
    let (v, unit) = split_num(s)?;
    let unit = unit.trim_end_matches("/s").trim_end_matches("ps");
    let mult = match unit {
        "" | "bit" | "b" => 1.0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        _ => bail!("unknown rate unit in '{s}' (use kbit, mbit, gbit)"),
    };
    let r = v * mult;
    if !(1000.0..=1e12).contains(&r) {
        bail!("rate '{s}' out of range (1kbit..1000gbit)");
    }
    Ok(r as u64)
}

/// `20ms`, `1.5s`, `150us`; a bare number is milliseconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration> {
    let (v, unit) = split_num(s)?;
    let secs = match unit.as_str() {
        "" | "ms" => v / 1e3,
        "s" => v,
        "us" => v / 1e6,
        _ => bail!("unknown time unit in '{s}' (use s, ms, us)"),
    };
    if secs > 86_400.0 {
        bail!("duration '{s}' out of range");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Seconds, `2.5` or `2.5s`, more than 0 and at most a day: the intervals
/// and timeouts of the commands that run in real time (`send`, `serve`,
/// the proxies), which take a standard [`std::time::Duration`].
pub(crate) fn parse_secs(s: &str) -> Result<std::time::Duration> {
    let v: f64 = s.trim_end_matches('s').parse().map_err(|_| anyhow::anyhow!("'{s}' is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        bail!("'{s}' seconds out of range (0, 86400]");
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

/// A probability: `1%` or `0.01`.
pub(crate) fn parse_ratio(s: &str) -> Result<f64> {
    let (v, unit) = split_num(s)?;
    let p = match unit.as_str() {
        "%" => v / 100.0,
        "" => v,
        _ => bail!("'{s}' is not a probability (use 0.01 or 1%)"),
    };
    if !(0.0..=1.0).contains(&p) {
        bail!("probability '{s}' out of range 0..1");
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_size("20M").unwrap(), 20 * 1024 * 1024);
        assert_eq!(parse_size("20MB").unwrap(), 20_000_000);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("5Q").is_err());
        assert_eq!(parse_rate("10mbit").unwrap(), 10_000_000);
        assert_eq!(parse_rate("3Mbit/s").unwrap(), 3_000_000);
        assert!(parse_rate("10").is_err());
        assert_eq!(parse_duration("20ms").unwrap(), Duration::from_millis(20));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_ratio("1%").unwrap(), 0.01);
        assert!(parse_ratio("2").is_err());
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("1e9").is_err());
        assert_eq!(parse_secs("2.5").unwrap(), std::time::Duration::from_millis(2500));
    }
}
