//! `mptun sim sweep merge DIR...`: the shards of one sweep made whole.
//!
//! Each shard's directory has its manifest and its runs; merge checks that
//! they are every shard of one sweep (same target, scenario file, build,
//! grid, seeds and shard count; each index once) and that each shard made
//! every run of its share, then writes the runs in grid order and the
//! summary and plots exactly as the sweep run whole on one machine would:
//! the same bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::Args;

use super::grid::{self, Axis};
use super::runs::{self, row_key};
use super::shard::{self, Manifest};
use crate::error::usage;

#[derive(Args)]
pub(crate) struct MergeArgs {
    /// The shards' directories (each one `sweep ... --shard K/N --out DIR` wrote), in any order.
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Where the merged runs.csv, summary.csv, sweep.json and plots go (not one of the shards').
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Figures printed per point (mean ± 95 % CI) and plotted with --plot, by JSON path.
    #[arg(long = "figure", value_name = "PATH")]
    figures: Vec<String>,
    /// Draw each --figure over this axis, with error bars, into DIR/sweep-FIGURE.svg.
    #[arg(long, value_name = "KEY")]
    plot: Option<String>,
}

pub(crate) fn run(a: MergeArgs) -> Result<()> {
    let mut shards: Vec<(&Path, Manifest)> = Vec::new();
    for d in &a.dirs {
        let m = Manifest::read(d)?.ok_or_else(|| {
            usage(anyhow!("{}: no {}: not the directory of a sweep's shard", d.display(), shard::FILE))
        })?;
        shards.push((d, m));
    }
    let (first_dir, first) = (shards[0].0, shards[0].1.clone());
    for (d, m) in &shards {
        first.same_sweep(m).map_err(|e| {
            usage(anyhow!("{}: not a shard of the sweep in {}: it is {e}", d.display(), first_dir.display()))
        })?;
    }
    let count = first.shard.expect("same_sweep checked it").count;
    let mut by_index: Vec<Option<&Path>> = vec![None; count];
    for (d, m) in &shards {
        let i = m.shard.expect("checked").index;
        if let Some(other) = by_index[i] {
            return Err(usage(anyhow!("{} and {} are both shard {i}/{count}", other.display(), d.display())));
        }
        by_index[i] = Some(d);
    }
    let missing: Vec<String> = (0..count).filter(|&i| by_index[i].is_none()).map(|i| i.to_string()).collect();
    if !missing.is_empty() {
        return Err(usage(anyhow!(
            "shard {} of {count} missing: merge takes the directory of every shard",
            missing.join(", ")
        )));
    }
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if a.out.exists() && shards.iter().any(|(d, _)| canonical(d) == canonical(&a.out)) {
        return Err(usage(anyhow!("--out {}: a shard's own directory; merge into another", a.out.display())));
    }
    let axes: Vec<Axis> = first.axes.iter().map(|x| Axis { key: x.key.clone(), values: x.values.clone() }).collect();
    let keys: Vec<String> = axes.iter().map(|x| x.key.clone()).collect();
    super::check_plot(&axes, &a.figures, a.plot.as_deref())?;
    let points = grid::points(&axes)?;
    let values: Vec<Vec<String>> = points.iter().map(|p| p.iter().map(|(_, v)| v.clone()).collect()).collect();
    let seeds = first.seeds;
    // Every run of the grid, in the order a single machine runs them.
    let order: Vec<String> = values.iter().flat_map(|v| (1..=seeds).map(move |seed| row_key(v, seed))).collect();
    let mut header: Option<(Vec<String>, &Path)> = None;
    let mut rows = Vec::with_capacity(order.len());
    for (d, m) in &shards {
        let sh = m.shard.expect("checked");
        let share: Vec<&String> = order.iter().enumerate().filter(|(j, _)| sh.owns(*j)).map(|(_, k)| k).collect();
        let path = d.join("runs.csv");
        let Some(r) = runs::read(&path, &keys)? else {
            if share.is_empty() {
                continue;
            }
            return Err(anyhow!(
                "{}: no runs yet; shard {}/{count} has {} runs to make: run its command again",
                path.display(),
                sh.index,
                share.len()
            ));
        };
        match &header {
            Some((h, from)) if *h != r.header => {
                return Err(anyhow!("{}: its columns are not those of {}'s runs.csv", path.display(), from.display()))
            }
            Some(_) => {}
            None => header = Some((r.header.clone(), d)),
        }
        let have: BTreeMap<&str, &str> = r.rows.iter().map(|(k, l)| (k.as_str(), l.as_str())).collect();
        let lacking = share.iter().filter(|k| !have.contains_key(k.as_str())).count();
        if lacking > 0 {
            return Err(anyhow!(
                "{}: shard {}/{count} has made {} of its {} runs: run its command again to finish it",
                d.display(),
                sh.index,
                share.len() - lacking,
                share.len()
            ));
        }
        rows.extend(share.iter().map(|k| ((*k).clone(), have[k.as_str()].to_string())));
    }
    let (header, _) = header.ok_or_else(|| anyhow!("no shard has a run"))?;
    let known = &header[keys.len() + 1..];
    if let Some(f) = a.figures.iter().find(|f| !known.contains(f)) {
        crate::error::bail_usage!("--figure {f}: no such figure (figures: {})", known.join(", "));
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("{}", a.out.display()))?;
    runs::write_ordered(&a.out.join("runs.csv"), &header, &rows, &order)?;
    Manifest { shard: None, ..first }.write(&a.out)?;
    eprintln!("sweep merge: {} runs of {count} shard(s) into {}", rows.len(), a.out.display());
    super::report(&a.out, &keys, &values, seeds, &a.figures, a.plot.as_deref())
}
