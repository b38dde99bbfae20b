//! No import cycle among the top-level modules of a crate: a module that
//! uses another (`crate::other::...`, `super::other` from a submodule, an
//! item the crate root re-exports from it) depends on it, and no two
//! modules may depend on each other, directly or around a loop. A helper
//! that two modules need belongs in a third that both use.
//!
//! Test code does not count: items marked `#[cfg(test)]`, and the files of
//! modules declared so, are left out. Paths are read from the source text
//! with comments and literals removed; a glob (`use super::*`) names no
//! module and is not followed.
//!
//! Run alone: `cargo test -p mptun-tests --test module_cycles`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[test]
fn mptun_cli_top_level_modules_have_no_cycle() {
    assert_acyclic("tools/mptun/src");
}

#[test]
fn mptun_proto_top_level_modules_have_no_cycle() {
    assert_acyclic("crates/mptun-proto/src");
}

/// The wire codec: `ip` names `gso` only in a doc comment and its tests.
#[test]
fn mptun_wire_top_level_modules_have_no_cycle() {
    assert_acyclic("crates/mptun-wire/src");
}

/// The checker itself: what counts as a dependency and what does not, and
/// that a cycle through `super::`, a root re-export or a group is found.
#[test]
fn the_checker_finds_cycles_and_ignores_comments_strings_and_tests() {
    let files = vec![
        (vec![], "pub use b::Thing;\nmod a;\nmod b;\nmod c;\nmod d;\n#[cfg(test)]\nmod t;\n".to_string()),
        (
            vec!["a"],
            concat!(
                "use crate::Thing; // crate::c::X\n",
                "const S: &str = \"crate::c\";\n",
                "const C: char = '{';\n",
                "fn f<'x>(_: &'x str) {}\n",
                "/* crate::d */\n",
                "#[cfg(test)]\n#[allow(unused)]\nmod tests { use crate::d::Y; }\n",
                "#[cfg(test)]\nfn g() -> [u8; 2] { crate::c::h(); [0; 2] }\n",
            )
            .to_string(),
        ),
        (vec!["b"], "pub struct Thing;\nfn f() { super::a::g() }\n".to_string()),
        (vec!["c"], "mod inner { use super::super::d::Z; }\npub(crate) fn h() {}\n".to_string()),
        (vec!["d"], "use crate::{c::{self, h}, Thing as T};\n".to_string()),
        (vec!["t"], "use crate::a::Q;\n".to_string()),
    ];
    let files = files.into_iter().map(|(m, text)| (m.into_iter().map(String::from).collect(), text)).collect();
    let g = graph(files);
    let edges: BTreeSet<(String, String)> = g.edges.keys().cloned().collect();
    let want: BTreeSet<(String, String)> = [("a", "b"), ("b", "a"), ("c", "d"), ("d", "c"), ("d", "b")]
        .iter()
        .map(|(x, y)| (x.to_string(), y.to_string()))
        .collect();
    assert_eq!(edges, want);
    let cycles = cycles(&g);
    assert_eq!(cycles, vec![vec!["a".to_string(), "b".to_string()], vec!["c".to_string(), "d".to_string()]]);
}

/// Fails with every cycle among the top-level modules of the crate whose
/// sources are in `src` (relative to the workspace), and the places that
/// make each of its edges.
fn assert_acyclic(src: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(src);
    let mut files = Vec::new();
    read_tree(&dir, &dir, &mut files);
    assert!(files.len() > 1, "{}: no sources found", dir.display());
    let g = graph(files.iter().map(|(m, _, text)| (m.clone(), text.clone())).collect());
    let cycles = cycles(&g);
    let mut msg = String::new();
    for c in &cycles {
        msg += &format!("cycle: {}\n", c.join(" <-> "));
        for ((from, to), at) in &g.edges {
            if c.contains(from) && c.contains(to) {
                let (file, line) = at;
                let path = files.iter().find(|(m, _, _)| m == file).map_or(PathBuf::new(), |f| f.1.clone());
                msg += &format!("  {from} -> {to}  ({}:{line})\n", path.display());
            }
        }
    }
    assert!(cycles.is_empty(), "{src}: import cycles among its top-level modules\n{msg}");
}

/// Every `.rs` file below `dir`: its module path (`a/b.rs` and `a/b/mod.rs`
/// are `["a", "b"]`, the crate root `[]`), its path, its text.
fn read_tree(root: &Path, dir: &Path, out: &mut Vec<(Vec<String>, PathBuf, String)>) {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).expect("read source dir").map(|e| e.expect("dir entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_tree(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).expect("below root");
            let mut module: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            let file = module.pop().expect("file name");
            let stem = file.trim_end_matches(".rs");
            if !(stem == "mod" || (module.is_empty() && (stem == "main" || stem == "lib"))) {
                module.push(stem.to_owned());
            }
            let text = std::fs::read_to_string(&p).expect("read source");
            out.push((module, rel.to_path_buf(), text));
        }
    }
}

/// The dependencies between top-level modules, each with the first place
/// (file's module path, line) that makes it.
struct Graph {
    edges: BTreeMap<(String, String), (Vec<String>, usize)>,
}

/// The graph of `files` (module path, text), the crate root among them.
fn graph(files: Vec<(Vec<String>, String)>) -> Graph {
    let parsed: Vec<(Vec<String>, Parsed)> = files
        .into_iter()
        .map(|(m, t)| {
            let p = parse(&m, &tokens(&t));
            (m, p)
        })
        .collect();
    let modules: BTreeSet<String> = parsed.iter().filter_map(|(m, _)| m.first().cloned()).collect();
    let test_only: Vec<Vec<String>> = parsed.iter().flat_map(|(_, p)| p.test_modules.clone()).collect();
    // What the crate root's `use` items make `crate::NAME` stand for.
    let reexports: BTreeMap<String, String> = parsed
        .iter()
        .filter(|(m, _)| m.is_empty())
        .flat_map(|(_, p)| p.root_uses.clone())
        .filter(|(_, module)| modules.contains(module))
        .collect();
    let mut edges = BTreeMap::new();
    for (file, p) in &parsed {
        if p.test_file || test_only.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        for r in &p.refs {
            let Some(from) = r.from.first() else { continue };
            let to = match reexports.get(&r.to) {
                Some(m) => m,
                None => &r.to,
            };
            if to != from && modules.contains(to) {
                edges.entry((from.clone(), to.clone())).or_insert((file.clone(), r.line));
            }
        }
    }
    Graph { edges }
}

/// The strongly connected groups of more than one module, each sorted,
/// in order.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in g.edges.keys() {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(n) = todo.pop() {
            for &m in &next[n] {
                if seen.insert(m) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut out: BTreeSet<Vec<String>> = BTreeSet::new();
    for (&n, r) in &reached {
        let group: Vec<String> = r
            .iter()
            .filter(|&&m| reached[m].contains(n))
            .map(|m| m.to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if group.len() > 1 {
            out.insert(group);
        }
    }
    out.into_iter().collect()
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of `text` that paths are made of, each with its line;
/// comments, string, char and number literals and lifetimes dropped.
fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident_start = |ch: char| ch.is_alphabetic() || ch == '_';
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    // Skips a quoted literal from its opening quote at `i` (escapes honoured).
    let skip_quoted = |mut i: usize, line: &mut usize, quote: char| {
        i += 1;
        while i < c.len() && c[i] != quote {
            if c[i] == '\\' {
                i += 1;
            }
            if at(i) == '\n' {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    // Skips a raw string `r#*"...."#*` whose `r` is at `i`, if one starts there.
    let raw_string = |i: usize, line: &mut usize| -> Option<usize> {
        let mut j = i + 1;
        while at(j) == '#' {
            j += 1;
        }
        if at(j) != '"' {
            return None;
        }
        let hashes = j - i - 1;
        j += 1;
        loop {
            if j >= c.len() {
                return Some(j);
            }
            if c[j] == '\n' {
                *line += 1;
            }
            if c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                return Some(j + 1 + hashes);
            }
            j += 1;
        }
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_quoted(i, &mut line, '"');
        } else if ch == 'b' && at(i + 1) == '"' {
            i = skip_quoted(i + 1, &mut line, '"');
        } else if ch == 'b' && at(i + 1) == '\'' {
            i = skip_quoted(i + 1, &mut line, '\'');
        } else if let Some(end) = (ch == 'r').then(|| raw_string(i, &mut line)).flatten() {
            i = end;
        } else if let Some(end) = (ch == 'b' && at(i + 1) == 'r').then(|| raw_string(i + 1, &mut line)).flatten() {
            i = end;
        } else if ch == '\'' {
            if at(i + 1) == '\\' || at(i + 2) == '\'' {
                i = skip_quoted(i, &mut line, '\'');
            } else {
                // A lifetime or label.
                i += 1;
                while ident_char(at(i)) {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while ident_char(at(i)) {
                i += 1;
            }
        } else if ident_start(ch) {
            let start = i;
            while ident_char(at(i)) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // `r#name`: a raw identifier.
            if word == "r" && at(i) == '#' && ident_start(at(i + 1)) {
                continue;
            }
            out.push((Tok::Ident(word), line));
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// A path that leaves the module it is written in.
struct Ref {
    /// The module it is written in (the file's path and the inline modules around it).
    from: Vec<String>,
    /// The top-level module, or crate-root item, it names.
    to: String,
    line: usize,
}

#[derive(Default)]
struct Parsed {
    refs: Vec<Ref>,
    /// Module paths declared `#[cfg(test)] mod name;` (their files are test code).
    test_modules: Vec<Vec<String>>,
    /// The whole file is `#![cfg(test)]`.
    test_file: bool,
    /// In the crate root: the names its `use` items bind, with the top-level module each comes from.
    root_uses: Vec<(String, String)>,
}

fn is_ident(t: Option<&(Tok, usize)>, s: &str) -> bool {
    matches!(t, Some((Tok::Ident(w), _)) if w == s)
}

fn is_punct(t: Option<&(Tok, usize)>, p: char) -> bool {
    matches!(t, Some((Tok::Punct(q), _)) if *q == p)
}

/// The index after the group that opens at `i` (`(`, `[` or `{`).
fn skip_group(t: &[(Tok, usize)], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match &t[i].0 {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Whether `#[cfg(test)]` (or, `inner`, `#![cfg(test)]`) starts at `i`; the index after it.
fn cfg_test(t: &[(Tok, usize)], i: usize) -> Option<(usize, bool)> {
    if !is_punct(t.get(i), '#') {
        return None;
    }
    let inner = is_punct(t.get(i + 1), '!');
    let j = i + 1 + usize::from(inner);
    let want = [
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    let ok = want.iter().enumerate().all(|(k, w)| t.get(j + k).is_some_and(|(tok, _)| tok == w));
    ok.then_some((j + want.len(), inner))
}

/// The top-level names a path's first segments name from the crate root
/// (`a` of `a::x`, `a` and `b` of `{a::x, b}`), from the token at `i`.
fn first_segments(t: &[(Tok, usize)], i: usize) -> Vec<String> {
    match t.get(i) {
        Some((Tok::Ident(w), _)) if w != "self" => vec![w.clone()],
        Some((Tok::Punct('{'), _)) => {
            let end = skip_group(t, i);
            let mut out = Vec::new();
            let mut j = i + 1;
            let mut at_start = true;
            while j < end - 1 {
                match &t[j].0 {
                    Tok::Punct('{' | '(' | '[') => {
                        j = skip_group(t, j);
                        continue;
                    }
                    Tok::Punct(',') => at_start = true,
                    Tok::Ident(w) if at_start => {
                        if w != "self" {
                            out.push(w.clone());
                        }
                        at_start = false;
                    }
                    _ => at_start = false,
                }
                j += 1;
            }
            out
        }
        _ => Vec::new(),
    }
}

/// The names a `use` tree from `i` binds, each with the first segment of
/// its path (`crate::` and `self::` aside): `a::{b, c::d as e}` binds `b`
/// and `e`, both from `a`. Returns the index after the tree.
fn use_bindings(t: &[(Tok, usize)], mut i: usize, prefix: &[String], out: &mut Vec<(String, String)>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match t.get(i).map(|(tok, _)| tok) {
            Some(Tok::Ident(w)) if w == "crate" || w == "self" && path.is_empty() => i += 1,
            Some(Tok::Ident(w)) if w != "as" => {
                path.push(w.clone());
                i += 1;
            }
            Some(Tok::PathSep) => i += 1,
            Some(Tok::Punct('{')) => {
                i += 1;
                while !matches!(t.get(i).map(|(tok, _)| tok), None | Some(Tok::Punct('}'))) {
                    i = use_bindings(t, i, &path, out);
                    if is_punct(t.get(i), ',') {
                        i += 1;
                    }
                }
                return i + 1;
            }
            // A glob binds no name this can know.
            Some(Tok::Punct('*')) => return i + 1,
            _ => break,
        }
    }
    let mut name = path.last().filter(|n| *n != "self").or(path.iter().rev().nth(1)).cloned();
    if is_ident(t.get(i), "as") {
        name = match t.get(i + 1) {
            Some((Tok::Ident(alias), _)) => Some(alias.clone()),
            _ => None,
        };
        i += 2;
    }
    if let (Some(name), Some(first)) = (name, path.first()) {
        out.push((name, first.clone()));
    }
    i
}

/// The paths of one file whose module path is `file`.
fn parse(file: &[String], t: &[(Tok, usize)]) -> Parsed {
    let mut p = Parsed::default();
    // Inline modules open around the current token: (brace depth at their `{`, name).
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let here = |inline: &[(usize, String)]| -> Vec<String> {
        file.iter().cloned().chain(inline.iter().map(|(_, n)| n.clone())).collect()
    };
    let mut i = 0;
    while i < t.len() {
        if let Some((after, inner)) = cfg_test(t, i) {
            if inner {
                p.test_file = true;
                return p;
            }
            // Further attributes, the visibility, then the item itself.
            let mut j = after;
            while is_punct(t.get(j), '#') {
                j = skip_group(t, j + 1);
            }
            let item = j;
            if is_ident(t.get(j), "pub") {
                j += 1;
                if is_punct(t.get(j), '(') {
                    j = skip_group(t, j);
                }
            }
            if is_ident(t.get(j), "mod") && is_punct(t.get(j + 2), ';') {
                if let Some((Tok::Ident(name), _)) = t.get(j + 1) {
                    let mut m = here(&inline);
                    m.push(name.clone());
                    p.test_modules.push(m);
                }
                i = j + 3;
                continue;
            }
            let mut k = item;
            while k < t.len() {
                match t[k].0 {
                    Tok::Punct(';') => {
                        k += 1;
                        break;
                    }
                    Tok::Punct('{') => {
                        k = skip_group(t, k);
                        break;
                    }
                    Tok::Punct('(' | '[') => k = skip_group(t, k),
                    // The end of what encloses it (a field, a variant): not the item's to skip.
                    Tok::Punct('}') => break,
                    _ => k += 1,
                }
            }
            i = k;
            continue;
        }
        let line = t[i].1;
        match &t[i].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
            }
            Tok::Ident(w) if w == "mod" && is_punct(t.get(i + 2), '{') => {
                if let Some((Tok::Ident(name), _)) = t.get(i + 1) {
                    inline.push((depth, name.clone()));
                }
            }
            Tok::Ident(w) if w == "use" && file.is_empty() && inline.is_empty() => {
                let mut b = Vec::new();
                use_bindings(t, i + 1, &[], &mut b);
                p.root_uses.extend(b);
            }
            Tok::Ident(w) if w == "crate" && matches!(t.get(i + 1), Some((Tok::PathSep, _))) => {
                let from = here(&inline);
                for to in first_segments(t, i + 2) {
                    p.refs.push(Ref { from: from.clone(), to, line });
                }
            }
            Tok::Ident(w)
                if w == "super" && !matches!(i.checked_sub(1).and_then(|k| t.get(k)), Some((Tok::PathSep, _))) =>
            {
                let from = here(&inline);
                let mut j = i;
                let mut up = 0;
                while is_ident(t.get(j), "super") && matches!(t.get(j + 1), Some((Tok::PathSep, _))) {
                    up += 1;
                    j += 2;
                }
                if up > 0 && up <= from.len() {
                    let base = &from[..from.len() - up];
                    let tos = match base.first() {
                        Some(m) => vec![m.clone()],
                        None => first_segments(t, j),
                    };
                    for to in tos {
                        p.refs.push(Ref { from: from.clone(), to, line });
                    }
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    p
}
