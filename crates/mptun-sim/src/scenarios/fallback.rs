//! `fallback`: the client offers MPTCP, the server answers as plain TCP (no
//! MP_CAPABLE in its SYN-ACK). The connection must fall back transparently
//! and the transfer complete over the one path.

use super::aggregate::{self, Params};
use mptun_cc::Algorithm;
use mptun_proto::endpoint::EndpointConfig;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub aggregate: aggregate::Report,
    /// The client's connection ended up plain TCP.
    pub fallback: bool,
}

/// The scenario with CUBIC at both ends.
pub fn run(seed: u64, size: u64) -> Report {
    run_with(seed, size, Algorithm::Cubic)
}

/// The scenario with congestion control `cc` at both ends.
pub fn run_with(seed: u64, size: u64, cc: Algorithm) -> Report {
    let p = Params { size, seed, cc, ..Params::default() };
    let (client, _) = aggregate::mptcp_configs(p.paths.len());
    let mut server = EndpointConfig::default();
    server.mptcp.enabled = false;
    let r = aggregate::run_named("fallback", &p, client, server);
    let mut report = Report { fallback: r.result.client_mode == "plain", aggregate: r };
    // The flattened aggregate digest covers only its own fields: cover ours too.
    report.aggregate.run_digest = crate::report::run_digest(&report);
    report
}
