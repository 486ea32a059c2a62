//! Config errors and warnings: each names where the value came from (file and line, or variable), the key and a fix.
//!
//! YAML comes through `yaml_serde`: serde_yaml (archived upstream at 0.9.34) continued by the YAML organization, the
//! same libyaml parser transpiled to Rust, the same `Value` and the same error texts (`<path>: <problem> at line L
//! column C`), which `from_yaml` turns into file, line, key and fix. Not serde_yml (unsound, archived) nor a parser
//! with other error texts, which would have meant rewriting that rendering.
use std::fmt;
use std::path::{Path, PathBuf};

use crate::ha::TimingError;

use super::ignored;

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    File { file: PathBuf, line: Option<usize> },
    Env { var: String },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File {
                file,
                line: Some(l),
            } => write!(f, "{}:{l}", file.display()),
            Origin::File { file, line: None } => write!(f, "{}", file.display()),
            Origin::Env { var } => write!(f, "environment variable {var}"),
        }
    }
}

/// One thing wrong with the configuration. `key` is the dotted path (`bootstrap.dcs.loop_wait`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read the config file: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: not a valid YAML config: {message}")]
    Syntax { origin: Origin, message: String },
    #[error("{origin}: unknown key `{key}`{}", hint.as_ref().map(|h| format!("; {h}")).unwrap_or_default())]
    UnknownKey {
        origin: Origin,
        key: String,
        hint: Option<String>,
    },
    #[error("{origin}: `{key}` is a Patroni setting tenure does not support: {why}")]
    Unsupported {
        origin: Origin,
        key: String,
        why: &'static str,
    },
    #[error("{origin}: `{key}`: {problem}{}", fix.as_ref().map(|h| format!("; {h}")).unwrap_or_default())]
    Invalid {
        origin: Origin,
        key: String,
        problem: String,
        fix: Option<String>,
    },
    #[error("{origin}: `{key}` is required; {fix}")]
    Missing {
        origin: Origin,
        key: String,
        fix: String,
    },
    #[error("{origin}: {settings} break tenure's {store} timing rule: {source}. {fix}")]
    Timing {
        origin: Origin,
        store: &'static str,
        settings: String,
        #[source]
        source: TimingError,
        fix: String,
    },
}

/// Every error found; never empty. Displays one error per line.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A Patroni key tenure ignores, or an environment variable it does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub origin: Origin,
    pub key: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: `{}` is ignored: {}",
            self.origin, self.key, self.message
        )
    }
}

/// Keys that are often written in the wrong section, and where they belong.
const HOMES: &[(&str, &str)] = &[
    ("ttl", "bootstrap.dcs.ttl"),
    ("loop_wait", "bootstrap.dcs.loop_wait"),
    ("retry_timeout", "bootstrap.dcs.retry_timeout"),
    (
        "maximum_lag_on_failover",
        "bootstrap.dcs.maximum_lag_on_failover",
    ),
    (
        "primary_start_timeout",
        "bootstrap.dcs.primary_start_timeout",
    ),
    ("fence_budget", "tenure.fence_budget"),
    ("drift_max_ppm", "tenure.drift_max_ppm"),
    ("fencer", "tenure.fencer"),
    ("use_pg_rewind", "postgresql.use_pg_rewind"),
    ("data_dir", "postgresql.data_dir"),
    ("nofailover", "tags.nofailover"),
    ("failover_priority", "tags.failover_priority"),
    ("noloadbalance", "tags.noloadbalance"),
    ("nosync", "tags.nosync"),
    ("synchronous_mode", "bootstrap.dcs.synchronous_mode"),
];

/// Turn a yaml_serde error into a config error with the key's full path and a fix.
pub(crate) fn from_yaml(file: &Path, e: &yaml_serde::Error) -> ConfigError {
    let origin = Origin::File {
        file: file.to_path_buf(),
        line: e.location().map(|l| l.line()),
    };
    let text = e.to_string();
    let msg = match text.rfind(" at line ") {
        Some(i) if e.location().is_some() => &text[..i],
        _ => text.as_str(),
    };
    let (path, rest) = match msg.split_once(": ") {
        Some((p, r)) if is_path(p) => (p, r),
        _ => ("", msg),
    };
    if let Some(after) = rest.strip_prefix("unknown field `") {
        let (field, expected) = after.split_once('`').unwrap_or((after, ""));
        let key = join(path, field);
        if let Some(why) = ignored::unsupported(&key) {
            return ConfigError::Unsupported { origin, key, why };
        }
        let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let hint = did_you_mean(field, &key, &candidates);
        return ConfigError::UnknownKey { origin, key, hint };
    }
    if path.is_empty() {
        return ConfigError::Syntax {
            origin,
            message: msg.to_string(),
        };
    }
    let problem = rest.to_string();
    ConfigError::Invalid {
        origin,
        key: path.to_string(),
        problem,
        fix: None,
    }
}

fn is_path(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-[]".contains(c))
}

pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() || prefix == "." {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A close spelling among the keys this section takes, or the section a misplaced key belongs in.
fn did_you_mean(field: &str, key: &str, candidates: &[&str]) -> Option<String> {
    if let Some((_, home)) = HOMES.iter().find(|(k, _)| *k == field) {
        if *home != key && !candidates.contains(&field) {
            return Some(format!("did you mean `{home}`?"));
        }
    }
    let best = candidates
        .iter()
        .map(|c| (edit_distance(field, c), *c))
        .filter(|(d, c)| *d <= 2 && *d < field.len().max(c.len()) / 2 + 1)
        .min();
    best.map(|(_, c)| format!("did you mean `{c}`?"))
}

/// Levenshtein distance, for typo hints.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}
