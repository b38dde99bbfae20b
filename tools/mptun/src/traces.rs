//! Per-subflow time series of simulator runs: the traced re-run of a
//! scenario (the simulator is deterministic, so it is the same run the
//! report describes) and CSV files (`--csv DIR`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use mptun_sim::scenarios::aggregate::{self, PathParams};
use mptun_sim::scenarios::network::{FlowReport, FlowSample};
use mptun_sim::scenarios::tcp_single;
use mptun_sim::scenarios::transfer::{self, SubflowSample, Traced, TransferSpec};
use mptun_time::{Duration, Instant};

/// Sampling interval of traced runs.
pub(crate) const SAMPLE: Duration = Duration::from_millis(100);

/// One row of the CSV: a sample plus the throughput since the previous
/// sample of the same subflow.
pub(crate) struct Row<'a> {
    pub(crate) s: &'a SubflowSample,
    pub(crate) throughput_bps: f64,
}

/// Samples with throughput derived from `bytes_acked` deltas.
pub(crate) fn rows(samples: &[SubflowSample]) -> Vec<Row<'_>> {
    let mut last: BTreeMap<usize, (f64, u64)> = BTreeMap::new();
    samples
        .iter()
        .map(|s| {
            let (t0, b0) = last.insert(s.subflow, (s.t_s, s.bytes_acked)).unwrap_or((s.t_s, s.bytes_acked));
            let dt = s.t_s - t0;
            Row { s, throughput_bps: if dt > 0.0 { s.bytes_acked.saturating_sub(b0) as f64 * 8.0 / dt } else { 0.0 } }
        })
        .collect()
}

/// Writes `DIR/<name>.csv`: t_s,subflow,cwnd,ssthresh,srtt_us,bytes_acked,throughput_bps,penalized,receiver_ofo_queue.
pub(crate) fn write_csv(dir: &Path, name: &str, samples: &[SubflowSample]) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{name}.csv"));
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    writeln!(f, "t_s,subflow,cwnd,ssthresh,srtt_us,bytes_acked,throughput_bps,penalized,receiver_ofo_queue")?;
    for r in rows(samples) {
        let s = r.s;
        writeln!(
            f,
            "{:.3},{},{},{},{},{},{:.0},{},{}",
            s.t_s,
            s.subflow,
            s.cwnd,
            s.ssthresh,
            s.srtt_us,
            s.bytes_acked,
            r.throughput_bps,
            s.penalized,
            s.receiver_ofo_queue
        )?;
    }
    f.flush()?;
    Ok(path)
}

/// One flow's goodput between consecutive samples, as (t_s, bit/s), from
/// what B received.
pub(crate) fn flow_goodput(samples: &[FlowSample], flow: usize) -> Vec<(f64, f64)> {
    let mine: Vec<&FlowSample> = samples.iter().filter(|s| s.flow == flow).collect();
    mine.windows(2)
        .map(|w| {
            let dt = (w[1].t_s - w[0].t_s).max(1e-9);
            (w[1].t_s, w[1].received.saturating_sub(w[0].received) as f64 * 8.0 / dt)
        })
        .collect()
}

/// Writes `DIR/<name>.csv` for a network run, a row per flow, subflow and
/// sample: t_s,flow,kind,cc,subflow,cwnd,ssthresh,srtt_us,bytes_acked,received,goodput_bps
/// (`received` and `goodput_bps`, the flow's since the previous sample, are
/// the flow's, on each of its rows).
pub(crate) fn write_flow_csv(
    dir: &Path,
    name: &str,
    flows: &[FlowReport],
    samples: &[FlowSample],
) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{name}.csv"));
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    writeln!(f, "t_s,flow,kind,cc,subflow,cwnd,ssthresh,srtt_us,bytes_acked,received,goodput_bps")?;
    let mut last: BTreeMap<usize, (f64, u64)> = BTreeMap::new();
    for s in samples {
        let (t0, r0) = last.insert(s.flow, (s.t_s, s.received)).unwrap_or((0.0, 0));
        let dt = s.t_s - t0;
        let goodput = if dt > 0.0 { s.received.saturating_sub(r0) as f64 * 8.0 / dt } else { 0.0 };
        let (kind, cc) = flows.get(s.flow).map_or(("?", "?"), |r| (r.kind, r.cc));
        for sf in &s.subflows {
            writeln!(
                f,
                "{:.3},{},{kind},{cc},{},{},{},{},{},{},{goodput:.0}",
                s.t_s, s.flow, sf.subflow, sf.cwnd, sf.ssthresh, sf.srtt_us, sf.bytes_acked, s.received
            )?;
        }
    }
    f.flush()?;
    Ok(path)
}

/// The `aggregate` transfer (optionally with the failover link events),
/// traced at the client (the sender).
pub(crate) fn aggregate_traced(size: u64, seed: u64, failover: bool) -> (Traced, Vec<PathParams>) {
    let params = aggregate::Params { size, seed, ..Default::default() };
    let specs = aggregate::paths(&params.paths);
    let mut actions = Vec::new();
    if failover {
        for (t, down) in [(5_000, true), (15_000, false)] {
            let mut l = specs[0].a_to_b;
            l.down = down;
            actions.push((Instant::from_millis(t), 0, Some(l), Some(l)));
        }
    }
    let (client, server) = aggregate::mptcp_configs(params.paths.len());
    let spec = TransferSpec {
        paths: specs,
        size,
        reverse_size: 0,
        client,
        server,
        seed,
        max_time: Duration::from_secs(3600),
        port: 5201,
        sample_every: Some(SAMPLE),
        actions,
        client_scheduler: None,
    };
    (transfer::run_with_subflow_trace(&spec, false), params.paths)
}

/// `tcp-single` traced (one subflow).
pub(crate) fn tcp_single_traced(p: &tcp_single::Params) -> Traced {
    transfer::run_with_subflow_trace(&tcp_single::spec(p, Some(SAMPLE)), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_from_deltas() {
        let s = |t, id, b| SubflowSample {
            t_s: t,
            subflow: id,
            cwnd: 10,
            ssthresh: 20,
            srtt_us: 1,
            bytes_acked: b,
            penalized: 0,
            receiver_ofo_queue: 0,
        };
        let v = [s(0.1, 0, 0), s(0.1, 1, 0), s(0.2, 0, 12_500), s(0.2, 1, 0)];
        let r = rows(&v);
        assert_eq!(r[2].throughput_bps.round(), 1_000_000.0);
        assert_eq!(r[3].throughput_bps, 0.0);
    }
}
