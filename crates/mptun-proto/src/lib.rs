//! Sans-IO protocol core (see module docs).
#![forbid(unsafe_code)]
