//! A sweep's grid: `--set KEY=V1,V2,...` axes, their cartesian product, and
//! what a key means for each kind of target.

use anyhow::{anyhow, bail, Context, Result};

/// One axis of the grid: a key and the values it takes, in the order given.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Axis {
    pub(crate) key: String,
    pub(crate) values: Vec<String>,
}

/// `KEY=V1,V2,...` (at least one value; no empty key or value; a key once).
pub(crate) fn parse_axis(s: &str) -> Result<Axis> {
    let (key, vals) = s.split_once('=').ok_or_else(|| anyhow!("--set {s:?}: expected KEY=V1,V2,..."))?;
    let key = key.trim();
    if key.is_empty() || key.contains(',') {
        bail!("--set {s:?}: a key names one parameter");
    }
    let values: Vec<String> = vals.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        bail!("--set {s:?}: an empty value");
    }
    Ok(Axis { key: key.to_string(), values })
}

/// One point of the grid: a value for every axis, in the axes' order.
pub(crate) type Point = Vec<(String, String)>;

/// Every point of the grid, the last axis varying fastest (no axis: one
/// point with no parameters).
pub(crate) fn points(axes: &[Axis]) -> Result<Vec<Point>> {
    let mut seen = std::collections::BTreeSet::new();
    for a in axes {
        if !seen.insert(a.key.as_str()) {
            bail!("--set {}: given twice", a.key);
        }
    }
    let mut out: Vec<Point> = vec![Vec::new()];
    for a in axes {
        out = out
            .into_iter()
            .flat_map(|p| {
                a.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((a.key.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    if out.len() > 1_000_000 {
        bail!("{} grid points: more than a sweep should hold", out.len());
    }
    Ok(out)
}

/// A TOML value from a command-line word: an integer, a float, a boolean,
/// else a string (`10mbit`, `cubic`).
fn toml_word(v: &str) -> toml::Value {
    if let Ok(i) = v.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Ok(f) = v.parse::<f64>() {
        toml::Value::Float(f)
    } else if let Ok(b) = v.parse::<bool>() {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(v.to_string())
    }
}

/// Sets `key` of a scenario file's document to `value`. A key is a path:
/// `duration`, `link.NAME.rate` (a `[[link]]` by its name, or by index),
/// `flow.1.cc` (a `[[flow]]` by index; `*` for every one), `route.0.links`
/// is not settable (a list).
pub(crate) fn set_in_file(doc: &mut toml::Table, key: &str, value: &str) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.as_slice() {
        [field] => {
            doc.insert((*field).to_string(), toml_word(value));
            Ok(())
        }
        [table, which, field] => {
            let arr = doc
                .get_mut(*table)
                .and_then(|v| v.as_array_mut())
                .ok_or_else(|| anyhow!("{key}: the file has no [[{table}]]"))?;
            let n = arr.len();
            let mut hit = false;
            for (i, item) in arr.iter_mut().enumerate() {
                let t = item.as_table_mut().ok_or_else(|| anyhow!("{key}: [[{table}]] {i} is not a table"))?;
                let named = t.get("name").and_then(|n| n.as_str()) == Some(*which);
                if *which == "*" || named || which.parse::<usize>().ok() == Some(i) {
                    t.insert((*field).to_string(), toml_word(value));
                    hit = true;
                }
            }
            if !hit {
                bail!("{key}: no [[{table}]] named or numbered {which} (the file has {n})");
            }
            Ok(())
        }
        _ => bail!("{key}: a key is FIELD or TABLE.NAME_OR_INDEX.FIELD"),
    }
}

/// A scenario file's document with `point`'s keys set (those the file
/// holds; `cc` and `queue_bdp` are the command's overrides, not the file's).
pub(crate) fn patch_file(text: &str, point: &Point) -> Result<toml::Table> {
    let mut doc: toml::Table = toml::from_str(text).context("the scenario file")?;
    for (k, v) in point.iter().filter(|(k, _)| !matches!(k.as_str(), "cc" | "queue_bdp")) {
        set_in_file(&mut doc, k, v)?;
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_expand_to_their_product_last_fastest() {
        let a = parse_axis("rate=10mbit,20mbit").unwrap();
        let b = parse_axis("cc=cubic, bbr").unwrap();
        let p = points(&[a.clone(), b]).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[1], vec![("rate".into(), "10mbit".into()), ("cc".into(), "bbr".into())]);
        assert_eq!(points(&[]).unwrap(), vec![Vec::<(String, String)>::new()]);
        assert!(points(&[a.clone(), a]).is_err(), "a key twice");
        for bad in ["rate", "=1", "rate=", "rate=1,,2", "a,b=1"] {
            assert!(parse_axis(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_is_patched_by_name_index_or_star() {
        let text = "duration = \"60s\"\n[[link]]\nname = \"l1\"\nrate = \"10mbit\"\n[[link]]\nname = \"l2\"\nrate = \"3mbit\"\n[[flow]]\ncc = \"cubic\"\n[[flow]]\ncc = \"cubic\"\n";
        let p: Point = vec![
            ("link.l2.rate".into(), "5mbit".into()),
            ("link.0.queue".into(), "33".into()),
            ("flow.*.cc".into(), "bbr".into()),
            ("duration".into(), "30s".into()),
            ("cc".into(), "lia".into()),
        ];
        let out = patch_file(text, &p).unwrap();
        let link = out["link"].as_array().unwrap();
        assert_eq!(link[1]["rate"].as_str(), Some("5mbit"));
        assert_eq!(link[0]["queue"].as_integer(), Some(33));
        assert!(out["flow"].as_array().unwrap().iter().all(|f| f["cc"].as_str() == Some("bbr")));
        assert_eq!(out["duration"].as_str(), Some("30s"));
        assert!(out.get("cc").is_none(), "cc is the command's override");
        assert!(patch_file(text, &vec![("link.l9.rate".into(), "1mbit".into())]).is_err());
        assert!(patch_file(text, &vec![("a.b".into(), "1".into())]).is_err());
    }
}
