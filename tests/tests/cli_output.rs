//! What `mptun`'s simulator commands print says what its numbers are: units
//! beside byte counts, and a label, not a placeholder, where no digest is.

#[path = "cli_support.rs"]
mod support;

use std::process::Command;

use support::mptun_bin;

fn stdout(args: &[&str]) -> String {
    let out = Command::new(mptun_bin()).args(args).output().expect("run mptun");
    assert!(out.status.success(), "mptun {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn sim_run_numbers_each_subflow_and_gives_its_bytes_a_unit() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios/shared-bottleneck.toml");
    let out = stdout(&["sim", "run", file]);
    let mptcp = out.lines().find(|l| l.trim_start().starts_with("mptcp")).expect("an mptcp line");
    assert!(mptcp.contains("(subflow 0 via bottleneck: ") && mptcp.contains(", subflow 1 via bottleneck: "), "{out}");
    assert!(mptcp.trim_end().ends_with(" B)"), "{out}");
}

#[test]
fn demo_labels_the_simulators_data_check() {
    let out = stdout(&["demo"]);
    assert!(!out.contains("checked-in-sim"), "{out}");
    assert!(out.contains("subflow(s); received data checked against what was sent (match)"), "{out}");
}
