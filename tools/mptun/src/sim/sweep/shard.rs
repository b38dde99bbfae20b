//! A sweep split over machines: `--shard K/N`, each shard's share of the
//! grid, and the manifest (`sweep.json`) that says which sweep a directory
//! of runs belongs to.
//!
//! A batch engine (a Slurm job array, a Kubernetes Indexed Job, GNU
//! parallel) starts N copies of one command that differ only in an index;
//! the share is a pure function of the grid and that index, so no copy
//! needs to hear from another, and `merge` can tell from the manifests
//! alone whether the shards it is given make up one whole sweep.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::grid::Axis;

/// Shard `index` of `count` (0-based, as `JOB_COMPLETION_INDEX` and a Slurm
/// array started at 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) count: usize,
}

/// `K/N` with 0 ≤ K < N.
pub(crate) fn parse_shard(s: &str) -> Result<Shard> {
    let (k, n) = s.split_once('/').ok_or_else(|| anyhow!("--shard {s:?}: expected K/N (0-based K, e.g. 0/8)"))?;
    let index: usize = k.trim().parse().map_err(|_| anyhow!("--shard {s:?}: K is not a number"))?;
    let count: usize = n.trim().parse().map_err(|_| anyhow!("--shard {s:?}: N is not a number"))?;
    if count == 0 || count > 1_000_000 {
        bail!("--shard {s:?}: N must be between 1 and 1000000");
    }
    if index >= count {
        bail!("--shard {s:?}: K counts from 0, so it must be below N (the last shard of {count} is {})", count - 1);
    }
    Ok(Shard { index, count })
}

impl Shard {
    /// Whether run `job` of the grid (point × seeds + seed − 1, the order a
    /// single machine runs them in) is this shard's. Dealt round-robin, so
    /// that every shard gets every kind of point and a share of seeds: a
    /// grid whose points differ in run time still splits evenly.
    pub(crate) fn owns(self, job: usize) -> bool {
        job % self.count == self.index
    }
}

/// What a directory of runs is: the sweep (target, grid, seeds, the build
/// that ran it) and, for a shard, which one. Written to `DIR/sweep.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    /// Of this file's layout.
    pub(crate) format: u32,
    /// The mptun that made the runs: another version's runs are another
    /// experiment.
    pub(crate) mptun: String,
    /// `file`, `penalise` or `tcp-single`.
    pub(crate) target: String,
    /// The scenario file's name without its extension (a file target).
    pub(crate) scenario: Option<String>,
    /// SHA-256 of the scenario file's bytes, hex: an edited file is another sweep.
    pub(crate) scenario_sha256: Option<String>,
    pub(crate) axes: Vec<ManifestAxis>,
    /// Seeds 1 to `seeds` at every point.
    pub(crate) seeds: u64,
    /// Absent for a sweep run whole on one machine, and for a merge.
    pub(crate) shard: Option<Shard>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ManifestAxis {
    pub(crate) key: String,
    pub(crate) values: Vec<String>,
}

/// The layout `Manifest` writes.
pub(crate) const FORMAT: u32 = 1;

/// Its file in a sweep's directory.
pub(crate) const FILE: &str = "sweep.json";

impl Manifest {
    pub(crate) fn new(
        target: &str,
        file: Option<(&str, &str)>,
        axes: &[Axis],
        seeds: u64,
        shard: Option<Shard>,
    ) -> Self {
        Manifest {
            format: FORMAT,
            mptun: env!("CARGO_PKG_VERSION").to_string(),
            target: target.to_string(),
            scenario: file.map(|(stem, _)| stem.to_string()),
            scenario_sha256: file.map(|(_, text)| hex(&Sha256::digest(text.as_bytes()))),
            axes: axes.iter().map(|a| ManifestAxis { key: a.key.clone(), values: a.values.clone() }).collect(),
            seeds,
            shard,
        }
    }

    /// `DIR/sweep.json`, or None when the directory has none.
    pub(crate) fn read(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
        };
        let m: Manifest =
            serde_json::from_str(&text).with_context(|| format!("{}: not a sweep's manifest", path.display()))?;
        if m.format != FORMAT {
            bail!("{}: manifest format {} (this mptun reads {FORMAT})", path.display(), m.format);
        }
        Ok(Some(m))
    }

    /// Written whole or not at all (a kill while writing leaves the old one).
    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(FILE);
        let tmp = dir.join(format!("{FILE}.tmp"));
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        std::fs::write(&tmp, text).with_context(|| format!("{}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))
    }

    /// The first way the runs of `self` are not comparable with those of
    /// `other`: another target, scenario file or build. The grid and seeds
    /// may differ (a rerun may add seeds or values), the shard may not.
    pub(crate) fn same_experiment(&self, other: &Manifest) -> Result<(), String> {
        let differ =
            |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| Err(format!("{what} {a:?}, not {b:?}"));
        if self.mptun != other.mptun {
            return differ("made by mptun", &other.mptun, &self.mptun);
        }
        if self.target != other.target {
            return differ("a sweep of", &other.target, &self.target);
        }
        if self.scenario_sha256 != other.scenario_sha256 {
            return differ("of the scenario file with SHA-256", &other.scenario_sha256, &self.scenario_sha256);
        }
        Ok(())
    }

    /// The first way `other` is not a shard of the same sweep as `self`
    /// (everything but the shard's index must be the same).
    pub(crate) fn same_sweep(&self, other: &Manifest) -> Result<(), String> {
        self.same_experiment(other)?;
        if self.axes != other.axes {
            let show = |m: &Manifest| {
                m.axes.iter().map(|a| format!("{}={}", a.key, a.values.join(","))).collect::<Vec<_>>().join(" ")
            };
            return Err(format!("of the grid {:?}, not {:?}", show(other), show(self)));
        }
        if self.seeds != other.seeds {
            return Err(format!("of {} seeds, not {}", other.seeds, self.seeds));
        }
        match (self.shard, other.shard) {
            (Some(a), Some(b)) if a.count != b.count => Err(format!("one of {} shards, not {}", b.count, a.count)),
            (Some(_), Some(_)) => Ok(()),
            _ => Err("not a shard (no --shard in its sweep)".into()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_k_of_n_from_zero() {
        assert_eq!(parse_shard("0/1").unwrap(), Shard { index: 0, count: 1 });
        assert_eq!(parse_shard("7/8").unwrap(), Shard { index: 7, count: 8 });
        for bad in ["8/8", "1/0", "-1/4", "a/4", "3", "1/4/2", ""] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        assert!(parse_shard("8/8").unwrap_err().to_string().contains("the last shard of 8 is 7"));
    }

    /// Every run is in exactly one shard's share, whatever the count.
    #[test]
    fn the_shares_partition_the_grid() {
        for count in [1, 2, 3, 7, 40] {
            for job in 0..100 {
                let owners = (0..count).filter(|&index| Shard { index, count }.owns(job)).count();
                assert_eq!(owners, 1, "job {job} of {count} shards");
            }
        }
    }

    #[test]
    fn manifests_tell_sweeps_apart() {
        let axes = [Axis { key: "cc".into(), values: vec!["lia".into(), "olia".into()] }];
        let m = |text: &str, seeds, shard| Manifest::new("file", Some(("a", text)), &axes, seeds, shard);
        let s = |index| Some(Shard { index, count: 3 });
        assert!(m("x", 3, s(0)).same_sweep(&m("x", 3, s(2))).is_ok());
        assert!(m("x", 3, s(0)).same_sweep(&m("y", 3, s(2))).unwrap_err().contains("SHA-256"));
        assert!(m("x", 3, s(0)).same_sweep(&m("x", 4, s(2))).unwrap_err().contains("seeds"));
        assert!(m("x", 3, s(0)).same_sweep(&m("x", 3, None)).unwrap_err().contains("not a shard"));
        let four = Some(Shard { index: 1, count: 4 });
        assert!(m("x", 3, s(0)).same_sweep(&m("x", 3, four)).unwrap_err().contains("of 4 shards"));
        let other = Manifest::new("file", Some(("a", "x")), &axes[..0], 3, s(1));
        assert!(m("x", 3, s(0)).same_sweep(&other).unwrap_err().contains("grid"));
        // A rerun may change the grid and the seeds, not the file.
        assert!(m("x", 3, None).same_experiment(&m("x", 5, None)).is_ok());
        assert!(m("x", 3, None).same_experiment(&m("y", 3, None)).is_err());
        let dir = std::env::temp_dir().join(format!("mptun-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(Manifest::read(&dir).unwrap(), None);
        m("x", 3, s(1)).write(&dir).unwrap();
        assert_eq!(Manifest::read(&dir).unwrap(), Some(m("x", 3, s(1))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
