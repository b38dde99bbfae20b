//! Address helpers shared by the CLI's unit tests, so that each test module
//! does not grow its own copy.

use std::net::SocketAddr;

/// A socket address written as in a test's prose; a typo is a test bug.
pub(crate) fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}
