//! The stateful harness on stable, as CI runs it: every input of the
//! checked-in corpus (the kernel-vector seeds and every crash the fuzzer
//! found, see docs/fuzzing.md), then inputs from a seeded PRNG.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// Seeded inputs per run: a few seconds at the test profile's opt-level 2.
/// `MPTUN_FUZZ_SEEDED=<count>` and `MPTUN_FUZZ_SEED=<u64>` run more, or
/// others, on stable.
const RANDOM_INPUTS: u64 = 5000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn replay_dir(dir: &Path) -> usize {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for f in &files {
        let data = std::fs::read(f).expect("corpus file");
        let r = std::panic::catch_unwind(|| {
            mptun_fuzz::run(&data);
        });
        assert!(r.is_ok(), "corpus input {} failed", f.display());
    }
    files.len()
}

#[test]
fn corpus_replays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/endpoint");
    let n = replay_dir(&root);
    assert!(n >= 10, "only {n} corpus inputs in {}", root.display());
}

/// The clean-run seeds (every packet delivered, timers fired) complete
/// both transfers, and with MPTCP the client joins its second address: the
/// harness does drive the stack where the invariants matter.
#[test]
fn clean_runs_complete_the_transfer() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/endpoint");
    for (name, joins) in [("mptcp", true), ("csum", true), ("tcp", false), ("bare", true), ("nojoin", false)] {
        let data = std::fs::read(dir.join(format!("seed-clean-{name}"))).expect("seed");
        let s = mptun_fuzz::run(&data);
        assert!(s.client_written > 4000 && s.server_written > 2000, "{name}: {s:?}");
        assert_eq!((s.server_read, s.client_read), (s.client_written, s.server_written), "{name}: {s:?}");
        assert_eq!(s.max_subflows >= 2, joins, "{name}: {s:?}");
    }
}

#[test]
fn seeded_inputs() {
    let mut rng = ChaCha8Rng::seed_from_u64(env_u64("MPTUN_FUZZ_SEED", 0x006d_7074_756e));
    for i in 0..env_u64("MPTUN_FUZZ_SEEDED", RANDOM_INPUTS) {
        let len = rng.random_range(3..1500);
        let mut data = vec![0u8; len];
        rng.fill(&mut data[..]);
        // Half of them in truthful mode with MPTCP on, the case with the
        // most checks.
        if i % 2 == 0 {
            data[0] &= !0b101;
        }
        let r = std::panic::catch_unwind(|| {
            mptun_fuzz::run(&data);
        });
        if r.is_err() {
            let path = std::env::temp_dir().join(format!("mptun-fuzz-seeded-{i}"));
            std::fs::write(&path, &data).expect("write failing input");
            panic!("seeded input {i} failed; saved to {}", path.display());
        }
    }
}
