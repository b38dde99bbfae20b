//! The binary as a user starts it, without root. Its presence also makes
//! `cargo test --workspace` build the `mptun` binary that the workspace
//! tests in `tests/tests/cli_*.rs` run inside namespaces.

use std::process::Command;

#[test]
fn help_lists_every_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_mptun")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["sim", "serve", "send"] {
        assert!(text.contains(cmd), "--help lacks {cmd}: {text}");
    }
}

/// `send` and `serve` choose the scheduler by name, and their help names
/// every shipped one.
#[test]
fn send_and_serve_offer_every_scheduler() {
    for cmd in ["send", "serve"] {
        let out = Command::new(env!("CARGO_BIN_EXE_mptun")).args([cmd, "--help"]).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("--scheduler"), "{cmd} --help lacks --scheduler: {text}");
        for name in mptun::Policy::ALL.map(|p| p.name()) {
            assert!(text.contains(name), "{cmd} --help lacks {name}: {text}");
        }
    }
}
