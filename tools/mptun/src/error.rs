//! What kind of failure ends a command, which decides its exit status, so
//! that a script can tell "you asked for something wrong" from "the run
//! failed" without parsing the message (docs/cli.md, "Errors", has the table).
//!
//! An error is a failure of the run (exit 1) unless it was made with
//! [`usage`] or [`bail_usage!`] (exit 2, as clap's own usage errors: fix the command line or
//! the input file) or [`environment`] (exit 3: this machine or this user
//! cannot do it, e.g. no root, no such process behind a control socket).
//! A class survives `.context(..)`: `main` looks for it along the chain.

use std::fmt;

/// The exit statuses besides 0 (success) and 128 + N (ended by signal N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// The run started and failed: no connection, a peer's refusal, data
    /// damaged, a check of the report failed.
    Failure,
    /// The command line or an input file is wrong; nothing was run.
    Usage,
    /// The request is sound but this machine or user cannot carry it out.
    Environment,
}

impl Class {
    /// The process exit status of this class.
    pub(crate) const fn code(self) -> u8 {
        match self {
            Class::Failure => 1,
            Class::Usage => 2,
            Class::Environment => 3,
        }
    }
}

/// An error with its class; it prints as the error it wraps.
#[derive(Debug)]
struct Classified {
    class: Class,
    inner: anyhow::Error,
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.inner)
    }
}

impl std::error::Error for Classified {}

/// A wrong command line or input file (exit 2).
pub(crate) fn usage(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(Classified { class: Class::Usage, inner: e.into() })
}

/// Something this machine or user cannot do (exit 3).
pub(crate) fn environment(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(Classified { class: Class::Environment, inner: e.into() })
}

/// The class of an error: the outermost classified error along its chain,
/// a failure when there is none.
pub(crate) fn class_of(e: &anyhow::Error) -> Class {
    e.chain().find_map(|c| c.downcast_ref::<Classified>()).map_or(Class::Failure, |c| c.class)
}

/// `bail!` for a usage error: returns `Err(usage(anyhow!(...)))`.
macro_rules! bail_usage {
    ($($t:tt)*) => { return Err($crate::error::usage(anyhow::anyhow!($($t)*))) };
}
pub(crate) use bail_usage;

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::anyhow;

    #[test]
    fn a_class_survives_context_and_prints_once() {
        let e = usage(anyhow!("unknown key 'x'")).context("scenario.toml");
        assert_eq!(class_of(&e), Class::Usage);
        assert_eq!(format!("{e:#}"), "scenario.toml: unknown key 'x'");
        let e = environment(anyhow!("no root"));
        assert_eq!((class_of(&e), class_of(&e).code()), (Class::Environment, 3));
        assert_eq!(class_of(&anyhow!("timed out")), Class::Failure);
        let r: anyhow::Result<()> = (|| bail_usage!("bad {}", 1))();
        assert_eq!(class_of(&r.unwrap_err()), Class::Usage);
    }
}
