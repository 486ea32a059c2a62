//! Domain newtypes shared by the core and the adapters: names, WAL positions, timelines, time.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A member's name, unique within a scope (Patroni's `name`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeName(pub String);

impl NodeName {
    pub fn new(s: impl Into<String>) -> Self {
        NodeName(s.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for NodeName {
    fn from(s: &str) -> Self {
        NodeName(s.to_string())
    }
}

/// A WAL position in bytes. Displays as PostgreSQL does (`0/16B3748`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const ZERO: Lsn = Lsn(0);
    /// Bytes by which `self` is ahead of `other` (0 when behind).
    pub fn bytes_ahead_of(self, other: Lsn) -> u64 {
        self.0.saturating_sub(other.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// The error for a string that is not `hi/lo` in hexadecimal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an LSN (expected hex `X/Y`): {0:?}")]
pub struct LsnParseError(pub String);

impl FromStr for Lsn {
    type Err = LsnParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || LsnParseError(s.to_string());
        let (hi, lo) = s.trim().split_once('/').ok_or_else(bad)?;
        let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
        if hi > u64::from(u32::MAX) || lo > u64::from(u32::MAX) {
            return Err(bad());
        }
        Ok(Lsn((hi << 32) | lo))
    }
}

/// A PostgreSQL timeline ID.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timeline(pub u32);

impl fmt::Display for Timeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The database system identifier from `pg_control` (what the `initialize` key holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SystemId(pub u64);

impl fmt::Display for SystemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A store session (Consul session UUID, or an etcd lease ID in decimal).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub String);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A point on the agent's monotonic clock, in milliseconds. Only the shell reads the clock;
/// the core receives `Millis` in its observation and compares them.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    pub fn plus_ms(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }
    pub fn minus_ms(self, ms: u64) -> Millis {
        Millis(self.0.saturating_sub(ms))
    }
    /// Milliseconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trips_through_postgres_notation() {
        let lsn: Lsn = "0/16B3748".parse().unwrap();
        assert_eq!(lsn, Lsn(0x16B3748));
        assert_eq!(lsn.to_string(), "0/16B3748");
        assert_eq!(Lsn(0x1_0000_0010).to_string(), "1/10");
        assert!("zz".parse::<Lsn>().is_err());
        assert!("1/FFFFFFFFF".parse::<Lsn>().is_err());
    }

    #[test]
    fn millis_arithmetic_saturates() {
        assert_eq!(Millis(5).since(Millis(9)), 0);
        assert_eq!(Millis(5).minus_ms(9), Millis(0));
        assert_eq!(Millis(5).plus_ms(5), Millis(10));
    }
}
