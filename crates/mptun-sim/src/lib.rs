//! Deterministic simulator.
#![forbid(unsafe_code)]
