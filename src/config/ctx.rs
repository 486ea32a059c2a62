//! The configuration's conversion state: where each value came from, and the errors and warnings so far.
use std::collections::BTreeMap;
use std::path::Path;

use super::defaults::MAX_DURATION_S;
use super::error::{ConfigError, Origin, Warning};
use super::raw::Seconds;

/// The conversion's state: where values came from, and what went wrong so far.
pub(crate) struct Ctx<'a> {
    pub file: &'a Path,
    /// Key path -> the environment variable that set it.
    pub env_keys: BTreeMap<String, String>,
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<Warning>,
}

impl Ctx<'_> {
    pub fn origin(&self, key: &str) -> Origin {
        match self.env_keys.get(key) {
            Some(var) => Origin::Env { var: var.clone() },
            None => Origin::File {
                file: self.file.to_path_buf(),
                line: None,
            },
        }
    }

    pub fn invalid(
        &mut self,
        key: &str,
        problem: impl Into<String>,
        fix: Option<impl Into<String>>,
    ) {
        self.errors.push(ConfigError::Invalid {
            origin: self.origin(key),
            key: key.to_string(),
            problem: problem.into(),
            fix: fix.map(Into::into),
        });
    }

    pub fn missing(&mut self, key: &str, fix: impl Into<String>) {
        self.errors.push(ConfigError::Missing {
            origin: self.origin(key),
            key: key.to_string(),
            fix: fix.into(),
        });
    }

    pub fn warn(&mut self, key: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            origin: self.origin(key),
            key: key.to_string(),
            message: message.into(),
        });
    }

    pub fn required<T>(&mut self, v: Option<T>, key: &str, fix: &str) -> Option<T> {
        if v.is_none() {
            self.missing(key, fix);
        }
        v
    }

    /// A duration in seconds as milliseconds; negative, non-finite or above `MAX_DURATION_S` is an error
    /// (larger is a typo, and would overflow the millisecond arithmetic downstream).
    pub fn ms(&mut self, v: Option<Seconds>, key: &str, default_ms: u64) -> u64 {
        match v {
            None => default_ms,
            Some(Seconds(s)) if s.is_finite() && (0.0..=MAX_DURATION_S as f64).contains(&s) => {
                (s * 1000.0).round() as u64
            }
            Some(Seconds(s)) => {
                self.invalid(
                    key,
                    format!("{s} is not a duration between 0 and {MAX_DURATION_S} s (a week)"),
                    Some("give seconds, at most 604800"),
                );
                default_ms
            }
        }
    }
}
