//! Replays fuzz inputs on stable (`cargo run -p mptun-fuzz --example replay
//! -- FILE...`): the way to debug a crash the fuzzer saved.

fn main() {
    for f in std::env::args().skip(1) {
        let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let stats = mptun_fuzz::run(&data);
        println!("{f}: ok {stats:?}");
    }
}
