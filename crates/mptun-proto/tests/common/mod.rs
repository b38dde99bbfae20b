//! Helpers shared by this crate's integration tests and benches: addresses
//! written as literals, parsed in one place.

// Each test binary uses only the helpers it needs.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};

/// An IP address written as a literal.
pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A socket address written as a literal.
pub fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}
