//! `mptun sim sweep`: a grid of parameters × seeds, run on every core.
//!
//! A researcher runs a simulator hundreds of times per figure. The sweep
//! takes a target (a scenario file, the `penalise` matrix, or `tcp-single`),
//! axes (`--set KEY=V1,V2,...`) and seeds, runs every (point, seed) on a
//! pool of threads (each run is a pure function of its point and seed, so
//! the order they finish in changes nothing), and writes:
//!
//! * `DIR/runs.csv`: one row per run, the point's values, the seed, then
//!   every figure of the run's report (its numbers, by JSON path);
//! * `DIR/summary.csv`: per point and figure, n, mean, standard deviation,
//!   the 95 % confidence interval of the mean (Student's t) and min/max;
//! * with `--plot`, `DIR/sweep-FIGURE.svg`: a figure over one axis with its
//!   confidence intervals as error bars, a line per value of the others.
//!
//! Rows are appended and flushed as runs finish; a sweep stopped (Ctrl-C)
//! and started again with the same arguments skips the runs `runs.csv`
//! already has. Progress goes to stderr.
//!
//! `--shard K/N` runs one share of the grid (for a batch engine's N tasks)
//! and `sweep merge` makes the shards whole (`shard`, `merge`); `DIR/sweep.json`
//! says which sweep a directory's runs are of.

mod grid;
mod merge;
mod plot;
mod runs;
mod shard;
mod stats;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use mptun::{Algorithm, Policy};
use mptun_sim::scenarios::{network, penalise, tcp_single};

use crate::error::usage;
use crate::units::{parse_duration, parse_rate, parse_size};
use grid::{Axis, Point};
use runs::row_key;
use shard::{Manifest, Shard};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct SweepArgs {
    #[command(subcommand)]
    command: Option<SweepCommand>,
    /// A scenario file (docs/scenarios/); its keys are FIELD (`duration`) or
    /// TABLE.NAME_OR_INDEX.FIELD (`link.bottleneck.rate`, `flow.1.cc`, `flow.*.cc`), plus `cc` (the
    /// MPTCP flows') and `queue_bdp` (every link's buffer in BDPs).
    #[arg(conflicts_with_all = ["penalise", "tcp_single"], required_unless_present_any = ["penalise", "tcp_single"])]
    file: Option<PathBuf>,
    /// The slow-subflow penalty matrix instead (`sim penalise`); keys: scenario (suite, unbounded,
    /// rwnd, sndbuf, both), policy (default, penalise, penalise-guarded, mptcp-org...), factor, tso.
    #[arg(long)]
    penalise: bool,
    /// `sim tcp-single` instead; keys: rate, delay, queue, loss, reorder, cc, size.
    #[arg(long)]
    tcp_single: bool,
    /// An axis of the grid: KEY=V1,V2,... (repeat for more axes).
    #[arg(long = "set", value_name = "KEY=V1,V2,...", value_parser = grid::parse_axis)]
    axes: Vec<Axis>,
    /// Seeds 1 to N at every point.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// Runs at once (default: the cores this process may use).
    #[arg(long)]
    jobs: Option<usize>,
    /// Where runs.csv, summary.csv, sweep.json and the plots go.
    #[arg(long, value_name = "DIR", required = true)]
    out: Option<PathBuf>,
    /// Run only shard K of N (K from 0 to N-1: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT,
    /// $JOB_COMPLETION_INDEX/N), a deterministic share of the runs; `sweep merge` makes the shards whole.
    #[arg(long, value_name = "K/N", value_parser = shard::parse_shard)]
    shard: Option<Shard>,
    /// Figures printed per point (mean ± 95 % CI) and plotted with --plot, by JSON path
    /// (e.g. goodput_bps, flows.0.share, runtime_s).
    #[arg(long = "figure", value_name = "PATH")]
    figures: Vec<String>,
    /// Draw each --figure over this axis, with error bars, into DIR/sweep-FIGURE.svg
    /// (FIGURE with `.` and `/` as `_`).
    #[arg(long, value_name = "KEY")]
    plot: Option<String>,
}

#[derive(Subcommand)]
enum SweepCommand {
    /// Builds runs.csv, summary.csv and the plots from every shard's directory of one sweep, the same
    /// bytes as the sweep run whole on one machine.
    Merge(merge::MergeArgs),
}

/// What a sweep runs.
enum Target {
    File { text: String, stem: String },
    Penalise,
    TcpSingle,
}

/// One point's run, built and not yet run.
enum Built {
    File(network::Spec),
    Penalise(penalise::Params),
    TcpSingle(tcp_single::Params),
}

impl Target {
    /// The report of one run at `point` with `seed`, as JSON.
    fn run(&self, point: &Point, seed: u64) -> Result<serde_json::Value> {
        Ok(match self.build(point, seed)? {
            Built::File(spec) => serde_json::to_value(network::run(&spec).map_err(|e| anyhow!("{e}"))?)?,
            Built::Penalise(p) => serde_json::to_value(penalise::run(&p))?,
            Built::TcpSingle(p) => serde_json::to_value(tcp_single::run(&p))?,
        })
    }

    /// The run at `point` with `seed`, every value of the point parsed: a
    /// sweep builds every point before it runs any.
    fn build(&self, point: &Point, seed: u64) -> Result<Built> {
        let get = |k: &str| point.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        match self {
            Target::File { text, stem } => {
                let patched = grid::patch_file(text, point)?;
                let o = crate::scenario_file::Overrides {
                    mptcp_cc: get("cc").map(|c| c.parse::<Algorithm>().map_err(|e| anyhow!("cc: {e}"))).transpose()?,
                    seed: Some(seed),
                    queue_bdp: get("queue_bdp")
                        .map(|q| q.parse::<f64>().with_context(|| format!("queue_bdp {q:?} is not a number")))
                        .transpose()?,
                };
                Ok(Built::File(crate::scenario_file::parse_table(patched, stem, o)?))
            }
            Target::Penalise => {
                let mut p = penalise::Params {
                    scenario: penalise::Scenario::Suite,
                    policy: Policy::Default,
                    seeds: 1,
                    penalty: Default::default(),
                    first_seed: seed,
                    tso: false,
                };
                for (k, v) in point {
                    match k.as_str() {
                        "scenario" => p.scenario = v.parse().map_err(|e: String| anyhow!(e))?,
                        "policy" => p.policy = v.parse().map_err(|e| anyhow!("policy: {e}"))?,
                        "factor" => p.penalty.factor = v.parse().context("factor")?,
                        "tso" => p.tso = v.parse().context("tso")?,
                        other => bail!("penalise has no key {other} (scenario, policy, factor, tso)"),
                    }
                }
                Ok(Built::Penalise(p))
            }
            Target::TcpSingle => {
                let mut p = tcp_single::Params { cc: Algorithm::Cubic, seed, ..tcp_single::Params::default() };
                for (k, v) in point {
                    match k.as_str() {
                        "rate" => p.rate_bps = parse_rate(v)?,
                        "delay" => p.delay = parse_duration(v)?,
                        "queue" => p.queue_packets = Some(v.parse().context("queue")?),
                        "loss" => p.loss = crate::units::parse_ratio(v)?,
                        "reorder" => p.reorder = crate::units::parse_ratio(v)?,
                        "cc" => p.cc = v.parse().map_err(|e| anyhow!("cc: {e}"))?,
                        "size" => p.size = parse_size(v)?,
                        other => bail!("tcp-single has no key {other} (rate, delay, queue, loss, reorder, cc, size)"),
                    }
                }
                Ok(Built::TcpSingle(p))
            }
        }
    }
}

/// One run of the sweep.
struct Job {
    point: usize,
    seed: u64,
}

pub(crate) fn run(a: SweepArgs) -> Result<()> {
    if let Some(SweepCommand::Merge(m)) = a.command {
        return merge::run(m);
    }
    let out = a.out.clone().expect("clap requires --out without a subcommand");
    let target = match &a.file {
        Some(f) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("{}", f.display()))?;
            let stem = f.file_stem().map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
            Target::File { text, stem }
        }
        None if a.penalise => Target::Penalise,
        None => Target::TcpSingle,
    };
    if a.seeds == 0 || a.seeds > 100_000 {
        bail!("--seeds must be between 1 and 100000");
    }
    for ax in &a.axes {
        if ax.values.iter().chain([&ax.key]).any(|v| v.contains('"') || v.contains('|')) {
            bail!("--set {}: no quotes or | in keys and values", ax.key);
        }
        if ax.key == "seed" {
            bail!("--set seed: the seeds are --seeds N (1 to N at every point)");
        }
    }
    if a.shard.is_some() && a.plot.is_some() {
        crate::error::bail_usage!(
            "--plot with --shard: a shard has part of the runs; plot with `sweep merge ... --plot`"
        );
    }
    check_plot(&a.axes, &a.figures, a.plot.as_deref())?;
    let points = grid::points(&a.axes)?;
    let keys: Vec<String> = a.axes.iter().map(|x| x.key.clone()).collect();
    // Every point checked once before any run (a bad value fails now, not an hour in).
    for p in &points {
        target.build(p, 1).map_err(|e| crate::error::usage(anyhow!("{}: {e:#}", describe(p))))?;
    }
    let manifest = match &target {
        Target::File { text, stem } => Manifest::new("file", Some((stem, text)), &a.axes, a.seeds, a.shard),
        Target::Penalise => Manifest::new("penalise", None, &a.axes, a.seeds, a.shard),
        Target::TcpSingle => Manifest::new("tcp-single", None, &a.axes, a.seeds, a.shard),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("{}", out.display()))?;
    if let Some(old) = Manifest::read(&out)? {
        let whose =
            |e: String| usage(anyhow!("{}: its runs are another sweep's: {e}; use another --out", out.display()));
        old.same_experiment(&manifest).map_err(|e| whose(format!("they were {e}")))?;
        if old.shard != manifest.shard {
            let show =
                |s: Option<Shard>| s.map_or("the whole grid".into(), |s| format!("shard {}/{}", s.index, s.count));
            return Err(whose(format!("they are {}, not {}", show(old.shard), show(manifest.shard))));
        }
    }
    manifest.write(&out)?;
    let runs_path = out.join("runs.csv");
    let prior = runs::read(&runs_path, &keys)?;
    let done = prior.as_ref().map(runs::Runs::done).unwrap_or_default();
    let values: Vec<Vec<String>> = points.iter().map(|p| p.iter().map(|(_, v)| v.clone()).collect()).collect();
    let seeds = a.seeds;
    let share = |job: usize| a.shard.is_none_or(|s| s.owns(job));
    // This machine's runs of the grid, in grid order (the seeds of a point together).
    let mine: Vec<Job> = (0..points.len())
        .flat_map(|point| (1..=seeds).map(move |seed| Job { point, seed }))
        .enumerate()
        .filter(|&(i, _)| share(i))
        .map(|(_, j)| j)
        .collect();
    let jobs: Vec<&Job> = mine.iter().filter(|j| !done.contains(&row_key(&values[j.point], j.seed))).collect();
    let in_grid = mine.len() - jobs.len();
    let total = mine.len() as u64;
    let workers = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let of = a.shard.map_or(String::new(), |s| format!(", shard {}/{} has {total}", s.index, s.count));
    eprintln!(
        "sweep: {} point(s) x {} seed(s) = {} runs{of}, {} to do ({} in {}), {workers} at once",
        points.len(),
        seeds,
        points.len() as u64 * seeds,
        jobs.len(),
        in_grid,
        runs_path.display()
    );
    let mut header = prior.map(|r| r.header);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&runs_path)
        .with_context(|| format!("{}", runs_path.display()))?;
    let started = std::time::Instant::now();
    let (tx, rx) = mpsc::channel::<(usize, Result<serde_json::Value>, f64)>();
    // The figure columns are those of the grid's first run (its first point,
    // seed 1), whichever machine runs the rest: runs.csv has the same columns
    // however the grid is split. That run goes first, so that an unknown
    // --figure fails before the rest of the grid runs; a shard without it
    // runs it for its figures' names alone.
    let mut first = 0;
    if let (None, Some(j)) = (&header, jobs.first()) {
        let t = std::time::Instant::now();
        let r = target.run(&points[0], 1);
        let v = r.as_ref().map_err(|e| anyhow!("{}, seed 1: {e:#}", describe(&points[0])))?;
        let h: Vec<String> =
            keys.iter().cloned().chain(["seed".into()]).chain(stats::figures(v).into_iter().map(|(n, _)| n)).collect();
        writeln!(file, "{}", h.join(",")).context("runs.csv")?;
        header = Some(h);
        if j.point == 0 && j.seed == 1 {
            let _ = tx.send((0, r, t.elapsed().as_secs_f64()));
            first = 1;
        }
    }
    if let Some(h) = &header {
        let known = &h[keys.len() + 1..];
        if let Some(f) = a.figures.iter().find(|f| !known.contains(f)) {
            crate::error::bail_usage!("--figure {f}: no such figure (figures: {})", known.join(", "));
        }
    }
    let next = AtomicUsize::new(first);
    let mut failed = None;
    let mut dropped = BTreeMap::<String, usize>::new();
    std::thread::scope(|s| -> Result<()> {
        for _ in 0..workers.min(jobs.len()) {
            let (tx, next, jobs, points, target) = (tx.clone(), &next, &jobs, &points, &target);
            s.spawn(move || loop {
                if crate::signals::received().is_some() {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(j) = jobs.get(i) else { return };
                let t = std::time::Instant::now();
                let r = target.run(&points[j.point], j.seed);
                if tx.send((i, r, t.elapsed().as_secs_f64())).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut finished = in_grid as u64;
        for (i, r, wall) in rx {
            let j = jobs[i];
            let v = match r {
                Ok(v) => v,
                Err(e) => {
                    failed.get_or_insert_with(|| anyhow!("{}, seed {}: {e:#}", describe(&points[j.point]), j.seed));
                    continue;
                }
            };
            let h = header.as_ref().expect("written before the first run");
            let figs = stats::figures(&v);
            let by_name: BTreeMap<&str, f64> = figs.iter().map(|(n, x)| (n.as_str(), *x)).collect();
            for (n, _) in &figs {
                if !h[keys.len() + 1..].contains(n) {
                    *dropped.entry(n.clone()).or_default() += 1;
                }
            }
            let cells: Vec<String> = h[keys.len() + 1..]
                .iter()
                .map(|n| by_name.get(n.as_str()).map_or(String::new(), |x| format!("{x}")))
                .collect();
            let row: Vec<String> = values[j.point].iter().cloned().chain([j.seed.to_string()]).chain(cells).collect();
            writeln!(file, "{}", row.join(",")).context("runs.csv")?;
            file.flush()?;
            finished += 1;
            // Progress must not end the sweep when stderr goes away (`| head`).
            let _ = writeln!(
                std::io::stderr(),
                "[{finished}/{total}] {} seed {}: {wall:.2} s",
                describe(&points[j.point]),
                j.seed
            );
        }
        Ok(())
    })?;
    if !dropped.is_empty() {
        let list: Vec<String> = dropped.iter().map(|(n, c)| format!("{n} ({c} runs)")).collect();
        eprintln!("sweep: figures the grid's first run lacks are not in runs.csv: {}", list.join(", "));
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if crate::signals::received().is_some() {
        eprintln!("sweep: interrupted; run the same command again to go on");
        return Err(crate::signals::interrupted());
    }
    eprintln!("sweep: {} runs in {:.1} s", jobs.len(), started.elapsed().as_secs_f64());
    drop(file);
    // Every run made: the rows in grid order, so that the file does not
    // depend on the order the runs finished in (nor on the split).
    if let Some(r) = runs::read(&runs_path, &keys)? {
        let order: Vec<String> = mine.iter().map(|j| row_key(&values[j.point], j.seed)).collect();
        runs::write_ordered(&runs_path, &r.header, &r.rows, &order)?;
    }
    if let Some(s) = a.shard {
        eprintln!(
            "sweep: shard {}/{} has its runs in {}; `mptun sim sweep merge` every shard's directory --out DIR",
            s.index,
            s.count,
            out.display()
        );
        return Ok(());
    }
    report(&out, &keys, &values, seeds, &a.figures, a.plot.as_deref())
}

/// `--plot KEY` must name an axis and come with a figure to draw.
fn check_plot(axes: &[Axis], figures: &[String], plot: Option<&str>) -> Result<()> {
    if let Some(x) = plot {
        if !axes.iter().any(|ax| ax.key == x) {
            bail!("--plot {x}: not an axis of the grid");
        }
        if figures.is_empty() {
            bail!("--plot needs at least one --figure");
        }
    }
    Ok(())
}

/// What a sweep's complete runs make: `summary.csv`, the figures table on
/// stdout and the plots, from `DIR/runs.csv` alone (so that a merge of
/// shards writes what the whole sweep would).
fn report(
    out: &Path,
    keys: &[String],
    values: &[Vec<String>],
    seeds: u64,
    figures: &[String],
    plot: Option<&str>,
) -> Result<()> {
    let summary = summarise(&out.join("runs.csv"), keys, values, seeds, &out.join("summary.csv"))?;
    print_figures(&summary, keys, figures);
    if let Some(x) = plot {
        for f in figures {
            let path = out.join(format!("sweep-{}.svg", f.replace(['.', '/'], "_")));
            plot::figure_over(&path, &summary, keys, x, f)?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn describe(p: &Point) -> String {
    if p.is_empty() {
        return "(no axis)".into();
    }
    p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// Per point: figure name → its statistics.
pub(crate) type Summary = Vec<(Vec<String>, BTreeMap<String, stats::Stat>)>;

/// Reads every row of `runs` and writes the statistics per point to `out`:
/// points in grid order (`grid`), each figure over its runs in seed order,
/// so that the summary does not depend on the order the runs finished in.
fn summarise(runs: &Path, keys: &[String], grid: &[Vec<String>], seeds: u64, out: &Path) -> Result<Summary> {
    let text = std::fs::read_to_string(runs).with_context(|| format!("{}", runs.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().map(|h| h.split(',').collect()).unwrap_or_default();
    let k = keys.len();
    // Point → figure → (seed, value) of each run.
    type Runs = BTreeMap<String, Vec<(u64, f64)>>;
    let mut by_point: BTreeMap<Vec<String>, Runs> = BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() != header.len() {
            continue;
        }
        let point: Vec<String> = f[..k].iter().map(|s| s.to_string()).collect();
        let seed: u64 = f[k].parse().unwrap_or(0);
        if !(1..=seeds).contains(&seed) {
            continue;
        }
        let m = by_point.entry(point).or_default();
        for (name, cell) in header[k + 1..].iter().zip(&f[k + 1..]) {
            if let Ok(x) = cell.parse::<f64>() {
                m.entry(name.to_string()).or_default().push((seed, x));
            }
        }
    }
    let order: Vec<Vec<String>> = grid.iter().filter(|p| by_point.contains_key(*p)).cloned().collect();
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).with_context(|| format!("{}", out.display()))?);
    let cols: Vec<String> = keys
        .iter()
        .cloned()
        .chain(["figure", "n", "mean", "sd", "ci95_low", "ci95_high", "min", "max"].map(String::from))
        .collect();
    writeln!(w, "{}", cols.join(","))?;
    let mut summary = Vec::new();
    for point in order {
        let mut stats = BTreeMap::new();
        for (name, runs) in by_point.get_mut(&point).expect("in the grid") {
            runs.sort_by_key(|&(seed, _)| seed);
            let xs: Vec<f64> = runs.iter().map(|&(_, x)| x).collect();
            let s = stats::stat(&xs);
            writeln!(
                w,
                "{},{name},{},{},{},{},{},{},{}",
                point.join(","),
                s.n,
                s.mean,
                s.sd,
                s.mean - s.ci95,
                s.mean + s.ci95,
                s.min,
                s.max
            )?;
            stats.insert(name.clone(), s);
        }
        summary.push((point, stats));
    }
    w.flush()?;
    Ok(summary)
}

fn print_figures(summary: &Summary, keys: &[String], figures: &[String]) {
    if !figures.is_empty() {
        print!("{}", figures_table(summary, keys, figures));
    }
}

/// The figures per point as a table whose columns line up (each padded to
/// its widest cell, counted in characters: `±` is one).
fn figures_table(summary: &Summary, keys: &[String], figures: &[String]) -> String {
    let mut rows: Vec<Vec<String>> = vec![keys
        .iter()
        .cloned()
        .chain(["n".into()])
        .chain(figures.iter().map(|f| format!("{f} (mean ± 95% CI)")))
        .collect()];
    for (point, stats) in summary {
        let n = figures.iter().filter_map(|f| stats.get(f)).map(|s| s.n).max().unwrap_or(0);
        let cells =
            figures.iter().map(|f| stats.get(f).map_or("-".to_string(), |s| format!("{:.4} ± {:.4}", s.mean, s.ci95)));
        rows.push(point.iter().cloned().chain([n.to_string()]).chain(cells).collect());
    }
    let width = |c: usize| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..rows[0].len()).map(width).collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, &w)| format!("{c:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_table_lines_up() {
        let stat = |mean: f64| stats::stat(&[mean, mean * 1.5]);
        let summary: Summary = vec![
            (vec!["lia".into(), "1".into()], BTreeMap::from([("flows.0.share".to_string(), stat(0.5))])),
            (vec!["balia".into(), "10".into()], BTreeMap::from([("flows.0.share".to_string(), stat(1234.5))])),
        ];
        let keys = ["cc".to_string(), "queue_bdp".to_string()];
        let t = figures_table(&summary, &keys, &["flows.0.share".to_string(), "x".to_string()]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        // Every column starts at the same character in every line.
        let starts = |l: &str| -> Vec<usize> {
            let c: Vec<char> = l.chars().collect();
            (0..c.len())
                .filter(|&i| c[i] != ' ' && (i == 0 || (i >= 2 && c[i - 1] == ' ' && c[i - 2] == ' ')))
                .collect()
        };
        for l in &lines[1..] {
            assert_eq!(starts(l), starts(lines[0]), "{t}");
        }
    }

    fn args(out: &Path, seeds: u64, plot: bool) -> SweepArgs {
        SweepArgs {
            command: None,
            file: None,
            penalise: false,
            tcp_single: true,
            axes: vec![grid::parse_axis("cc=cubic,reno").unwrap(), grid::parse_axis("size=200KB").unwrap()],
            seeds,
            jobs: Some(2),
            out: Some(out.to_path_buf()),
            shard: None,
            figures: vec!["goodput_bps".into()],
            plot: plot.then(|| "cc".into()),
        }
    }

    /// Two points × two seeds: a row each, a summary row per point and
    /// figure with n = 2; started again with a third seed, only the two new
    /// runs are made; the figure is drawn; a different grid is refused.
    #[test]
    fn a_sweep_writes_rows_and_summary_and_resumes() {
        let dir = std::env::temp_dir().join(format!("mptun-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run(args(&dir, 2, false)).unwrap();
        let runs = std::fs::read_to_string(dir.join("runs.csv")).unwrap();
        assert_eq!(runs.lines().count(), 1 + 4, "{runs}");
        assert!(runs.lines().next().unwrap().starts_with("cc,size,seed,"));
        let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
        let good: Vec<&str> = summary.lines().filter(|l| l.contains(",goodput_bps,")).collect();
        assert_eq!(good.len(), 2, "{summary}");
        assert!(good.iter().all(|l| l.split(',').nth(3) == Some("2")), "n = 2: {good:?}");
        // The same cell of the same run twice gives the same figure: runs are
        // pure functions of point and seed.
        let seed1: Vec<&str> = runs.lines().filter(|l| l.starts_with("cubic,200KB,1,")).collect();
        assert_eq!(seed1.len(), 1);
        run(args(&dir, 3, true)).unwrap();
        let runs2 = std::fs::read_to_string(dir.join("runs.csv")).unwrap();
        assert_eq!(runs2.lines().count(), 1 + 6);
        for l in runs.lines() {
            assert!(runs2.lines().any(|m| m == l), "the first rows stay as they were: {l}");
        }
        let order: Vec<&str> = runs2.lines().skip(1).map(|l| l.split(',').next().unwrap()).collect();
        assert_eq!(order, ["cubic", "cubic", "cubic", "reno", "reno", "reno"], "rows in grid order");
        // A row cut short by a kill is made again, not read half-written.
        let cut = &runs2[..runs2.len() - 5];
        std::fs::write(dir.join("runs.csv"), cut).unwrap();
        run(args(&dir, 3, false)).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("runs.csv")).unwrap().lines().count(), 1 + 6);
        assert!(dir.join("sweep-goodput_bps.svg").exists());
        let mut other = args(&dir, 1, false);
        other.axes.pop();
        let e = run(other).unwrap_err().to_string();
        assert!(e.contains("another sweep's"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod shard_tests {
    use super::*;

    fn sweep(out: &Path, shard: Option<&str>, seeds: u64) -> SweepArgs {
        SweepArgs {
            command: None,
            file: None,
            penalise: false,
            tcp_single: true,
            axes: vec![grid::parse_axis("cc=cubic,reno").unwrap(), grid::parse_axis("loss=0,1%").unwrap()],
            seeds,
            jobs: Some(2),
            out: Some(out.to_path_buf()),
            shard: shard.map(|s| shard::parse_shard(s).unwrap()),
            figures: vec!["goodput_bps".into()],
            plot: None,
        }
    }

    fn merge(dirs: &[PathBuf], out: &Path) -> Result<()> {
        let args = merge::MergeArgs::parse_from(
            ["merge", "--out", out.to_str().unwrap()].into_iter().chain(dirs.iter().map(|d| d.to_str().unwrap())),
        );
        merge::run(args)
    }

    use clap::Parser;
    impl merge::MergeArgs {
        fn parse_from<'a>(words: impl IntoIterator<Item = &'a str>) -> Self {
            #[derive(clap::Parser)]
            struct Cmd {
                #[command(flatten)]
                m: merge::MergeArgs,
            }
            Cmd::parse_from(words).m
        }
    }

    /// 4 points × 3 seeds in one go, and as 5 and as 13 shards (the last
    /// of 13 has no run) run in reverse order: merged, runs.csv,
    /// summary.csv and sweep.json are the same bytes; a missing shard, one
    /// given twice, an unfinished one and one of another sweep are refused.
    #[test]
    fn shards_merged_are_the_whole_sweep() {
        let base = std::env::temp_dir().join(format!("mptun-shards-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let whole = base.join("whole");
        run(sweep(&whole, None, 3)).unwrap();
        let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap();
        for n in [5usize, 13] {
            let dirs: Vec<PathBuf> = (0..n).map(|k| base.join(format!("{n}-{k}"))).collect();
            for k in (0..n).rev() {
                run(sweep(&dirs[k], Some(&format!("{k}/{n}")), 3)).unwrap();
            }
            let merged = base.join(format!("merged-{n}"));
            merge(&dirs, &merged).unwrap();
            for f in ["runs.csv", "summary.csv", "sweep.json"] {
                assert!(read(&whole, f) == read(&merged, f), "{n} shards: {f} differs");
            }
            if n == 5 {
                let e = merge(&dirs[1..], &base.join("m2")).unwrap_err().to_string();
                assert!(e.contains("shard 0 of 5 missing"), "{e}");
                let mut twice = dirs.clone();
                twice.push(dirs[2].clone());
                let e = merge(&twice, &base.join("m3")).unwrap_err().to_string();
                assert!(e.contains("both shard 2/5"), "{e}");
                let e = merge(&dirs, &dirs[0]).unwrap_err().to_string();
                assert!(e.contains("a shard's own directory"), "{e}");
                // A shard cut short (its last row lost) is not merged.
                let p = dirs[3].join("runs.csv");
                let text = std::fs::read_to_string(&p).unwrap();
                let cut = text.trim_end().rfind('\n').unwrap() + 1;
                std::fs::write(&p, &text[..cut]).unwrap();
                let e = merge(&dirs, &base.join("m4")).unwrap_err().to_string();
                assert!(e.contains("shard 3/5 has made 1 of its 2 runs"), "{e}");
                // A shard of another grid (4 seeds) is not of this sweep.
                run(sweep(&dirs[3], Some("3/5"), 4)).unwrap();
                let e = merge(&dirs, &base.join("m5")).unwrap_err().to_string();
                assert!(e.contains("not a shard of the sweep") && e.contains("seeds"), "{e}");
                // A directory is one shard's: another shard is refused there.
                let e = run(sweep(&dirs[3], Some("2/5"), 3)).unwrap_err().to_string();
                assert!(e.contains("shard 3/5, not shard 2/5"), "{e}");
                let e = run(sweep(&dirs[3], None, 3)).unwrap_err().to_string();
                assert!(e.contains("not the whole grid"), "{e}");
            }
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
