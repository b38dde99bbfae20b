//! `runs.csv`: a row per run, keyed by its point's values and its seed;
//! what a directory holds already, and the file put in grid order once a
//! sweep (or a merge) has every run, so that the same grid gives the same
//! bytes however it was split and whatever order its runs finished in.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The key of a row: the point's values and the seed.
pub(crate) fn row_key(values: &[String], seed: u64) -> String {
    format!("{}|{seed}", values.join("|"))
}

/// A `runs.csv` read whole: its header and its complete rows (those with a
/// cell per column), keyed, in file order.
pub(crate) struct Runs {
    pub(crate) header: Vec<String>,
    pub(crate) rows: Vec<(String, String)>,
}

/// What `path` holds, or None when it does not exist or is empty. A last
/// line without its newline (a sweep killed while writing it) is cut off
/// the file first: the run is made again rather than read half-written.
/// The header must begin with `keys` and `seed`, else it is another grid's.
pub(crate) fn read(path: &Path, keys: &[String]) -> Result<Option<Runs>> {
    let mut text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
        std::fs::write(path, &text).with_context(|| format!("{}", path.display()))?;
    }
    let mut lines = text.lines();
    let Some(head) = lines.next() else { return Ok(None) };
    let header: Vec<String> = head.split(',').map(String::from).collect();
    let want: Vec<&str> = keys.iter().map(String::as_str).chain(["seed"]).collect();
    if header.len() < want.len() || header[..want.len()].iter().map(String::as_str).ne(want.iter().copied()) {
        bail!("{}: its columns ({}) are another sweep's; use another --out", path.display(), head);
    }
    let k = keys.len();
    let rows = lines
        .filter(|l| l.split(',').count() == header.len())
        .map(|l| {
            let f: Vec<String> = l.split(',').map(String::from).collect();
            (row_key(&f[..k], f[k].parse().unwrap_or(0)), l.to_string())
        })
        .collect();
    Ok(Some(Runs { header, rows }))
}

impl Runs {
    /// The keys of the rows it has.
    pub(crate) fn done(&self) -> BTreeSet<String> {
        self.rows.iter().map(|(k, _)| k.clone()).collect()
    }
}

/// Writes `header` and `rows` to `path` (whole, or not at all): first the
/// rows whose keys `order` lists, in its order, then the others in the
/// order given (the rows of another grid a rerun left in the file).
pub(crate) fn write_ordered(path: &Path, header: &[String], rows: &[(String, String)], order: &[String]) -> Result<()> {
    let by_key: BTreeMap<&str, &str> = rows.iter().map(|(k, l)| (k.as_str(), l.as_str())).collect();
    let listed: BTreeSet<&str> = order.iter().map(String::as_str).collect();
    let tmp = path.with_extension("csv.tmp");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp).with_context(|| format!("{}", tmp.display()))?);
    writeln!(w, "{}", header.join(","))?;
    for line in order.iter().filter_map(|k| by_key.get(k.as_str())) {
        writeln!(w, "{line}")?;
    }
    for (_, line) in rows.iter().filter(|(k, _)| !listed.contains(k.as_str())) {
        writeln!(w, "{line}")?;
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("{}", path.display()))
}
