//! The example coupled controller (`examples/ewtcp.rs`), written against
//! the public API only, runs a scenario to the end with the bytes intact.

#[path = "../examples/ewtcp.rs"]
mod ewtcp;

#[test]
fn an_external_coupled_controller_runs_a_scenario() {
    ewtcp::main();
}
