//! `linkem`'s shell completions and man page come from its own argument
//! definition, as `mptun`'s do (no root needed).

use std::process::Command;

fn linkem(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_linkem")).args(args).output().expect("run linkem");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn completions_and_man_page() {
    let (ok, text) = linkem(&["completions", "bash"]);
    assert!(ok && text.contains("_linkem()") && text.contains("--a2b") && text.contains("ctl"), "{text}");
    let (ok, text) = linkem(&["completions", "zsh"]);
    assert!(ok && text.contains("#compdef linkem"), "{text}");
    let (ok, text) = linkem(&["man"]);
    assert!(ok && text.contains(".TH linkem 1") && text.contains("a2b"), "{text}");
    let (ok, _) = linkem(&["completions", "tcsh"]);
    assert!(!ok, "an unknown shell is an error");
}
