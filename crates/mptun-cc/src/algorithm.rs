//! Choosing a controller by name, as `net.ipv4.tcp_congestion_control` does.

use core::fmt;
use core::str::FromStr;

use crate::coupled::{Balia, Lia, Olia};
use crate::{Bbr, CongestionControl, Cubic, CubicConfig, Reno};

/// The congestion control algorithms this crate implements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// NewReno ([`Reno`]).
    Reno,
    /// CUBIC with HyStart ([`Cubic`]), Linux's default.
    #[default]
    Cubic,
    /// RFC 6356's coupled LIA ([`Lia`]); NewReno on a single path.
    Lia,
    /// OLIA ([`Olia`]); NewReno on a single path.
    Olia,
    /// BALIA ([`Balia`]); NewReno on a single path.
    Balia,
    /// BBR v1 ([`Bbr`]), per subflow and uncoupled as in Linux.
    Bbr,
}

impl Algorithm {
    /// Every algorithm, for help texts and test matrices.
    pub const ALL: [Algorithm; 6] =
        [Algorithm::Reno, Algorithm::Cubic, Algorithm::Lia, Algorithm::Olia, Algorithm::Balia, Algorithm::Bbr];

    /// The kernel's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Reno => "reno",
            Algorithm::Cubic => "cubic",
            Algorithm::Lia => "lia",
            Algorithm::Olia => "olia",
            Algorithm::Balia => "balia",
            Algorithm::Bbr => "bbr",
        }
    }

    /// Whether it couples the subflows of a multipath connection.
    pub fn is_coupled(self) -> bool {
        matches!(self, Algorithm::Lia | Algorithm::Olia | Algorithm::Balia)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.to_ascii_lowercase().as_str() {
            "reno" | "newreno" => Ok(Algorithm::Reno),
            "cubic" => Ok(Algorithm::Cubic),
            "lia" | "coupled" => Ok(Algorithm::Lia),
            "olia" => Ok(Algorithm::Olia),
            "balia" => Ok(Algorithm::Balia),
            "bbr" => Ok(Algorithm::Bbr),
            _ => Err(ParseError::new(
                "congestion control algorithm",
                s,
                &["reno", "cubic", "lia", "olia", "balia", "bbr"],
            )),
        }
    }
}

/// An unknown name given for one of this crate's enums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    what: &'static str,
    got: String,
    expected: &'static [&'static str],
}

impl ParseError {
    pub(crate) fn new(what: &'static str, got: &str, expected: &'static [&'static str]) -> Self {
        ParseError { what, got: got.to_owned(), expected }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?} (expected one of: {})", self.what, self.got, self.expected.join(", "))
    }
}

impl std::error::Error for ParseError {}

/// Builds the controller of each new subflow: how a controller written
/// outside this crate is plugged into a stack (quinn-proto's
/// `ControllerFactory`), in place of an [`Algorithm`] by name.
pub trait ControllerFactory: Send + Sync + fmt::Debug {
    /// A fresh controller for one subflow.
    fn build(&self) -> Box<dyn CongestionControl>;
}

/// A controller with default tunables.
pub fn new_controller(algorithm: Algorithm) -> Box<dyn CongestionControl> {
    new_controller_with(algorithm, CubicConfig::default())
}

/// A controller; `cubic` configures CUBIC and is ignored by Reno.
pub fn new_controller_with(algorithm: Algorithm, cubic: CubicConfig) -> Box<dyn CongestionControl> {
    match algorithm {
        Algorithm::Reno => Box::new(Reno::new()),
        Algorithm::Cubic => Box::new(Cubic::new(cubic)),
        Algorithm::Lia => Box::new(Lia::new()),
        Algorithm::Olia => Box::new(Olia::new()),
        Algorithm::Balia => Box::new(Balia::new()),
        Algorithm::Bbr => Box::new(Bbr::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HystartRoundStart, PacerKind};

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
            assert_eq!(new_controller(a).name(), a.name());
        }
        assert_eq!("CUBIC".parse::<Algorithm>(), Ok(Algorithm::Cubic));
        let err = "vegas".parse::<Algorithm>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown congestion control algorithm \"vegas\" (expected one of: reno, cubic, lia, olia, balia, bbr)"
        );
        for a in Algorithm::ALL {
            assert_eq!(new_controller(a).is_coupled(), a.is_coupled(), "{a}");
        }
        for p in [PacerKind::Edt, PacerKind::Quantum, PacerKind::None] {
            assert_eq!(p.to_string().parse::<PacerKind>(), Ok(p));
        }
        assert!("x".parse::<PacerKind>().is_err());
        assert_eq!("legacy".parse::<HystartRoundStart>(), Ok(HystartRoundStart::Legacy));
        assert_eq!(HystartRoundStart::default().to_string(), "fixed");
    }
}
