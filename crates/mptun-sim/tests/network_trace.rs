//! The traced run of a network is the run its report describes: sampling
//! every flow each 500 ms leaves the report, digest included, as an
//! untraced run gives it, and the samples add up to what the report counts.

use mptun_sim::scenarios::network::{run, run_traced};
use mptun_sim::scenarios::shared_bottleneck::{spec, Params};
use mptun_time::Duration;

#[test]
fn sampling_a_network_run_leaves_it_unchanged() {
    let p = Params { duration: Duration::from_secs(10), seed: 2, ..Params::default() };
    let s = spec(&p);
    let plain = run(&s).unwrap();
    let (traced, samples) = run_traced(&s, Some(Duration::from_millis(500))).unwrap();
    assert_eq!(traced.run_digest, plain.run_digest, "sampling changed the run");
    // 20 instants (0.5 s .. 10 s), each with every flow.
    assert_eq!(samples.len(), 20 * s.flows.len());
    for (i, f) in traced.flows.iter().enumerate() {
        let mine: Vec<_> = samples.iter().filter(|x| x.flow == i).collect();
        assert!(mine.windows(2).all(|w| w[0].t_s < w[1].t_s && w[0].received <= w[1].received));
        let last = mine.last().unwrap();
        assert_eq!(last.t_s, 10.0);
        assert_eq!(last.received, f.bytes, "flow {i}: the last sample is the report's count");
        assert_eq!(last.subflows.len(), f.subflows, "flow {i}");
        assert!(last.subflows.iter().all(|sf| sf.cwnd > 0 && sf.srtt_us > 0), "{last:?}");
    }
}
