use mptun_sim::scenarios::hystart::*;
#[test]
fn dbg() {
    let p = Params::default();
    let r = run_variant(&p, mptun_cc::HystartRoundStart::Fixed);
    println!("{:?}", r);
}
