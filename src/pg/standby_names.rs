//! `synchronous_standby_names`' value in Patroni's format: rendered, and parsed back (pure, no I/O).
//!
//! The format: `''`, the strict placeholder, `a`, or `n (a,b,...)` sorted and quoted as `quote_standby_name`; read
//! back into `SyncNames`, anything else `Other`.
use std::collections::BTreeSet;

use crate::ha::observation::SyncNames;
use crate::ha::types::NodeName;

/// The GUC's name, as `postgresql.parameters` spells it.
pub const GUC: &str = "synchronous_standby_names";

/// Patroni's strict-mode placeholder: a name no standby has, so every commit waits.
pub const STRICT_PLACEHOLDER: &str = "__patroni_strict_sync_replica_placeholder__";

/// The value as Patroni's `set_synchronous_standby_names` writes it: empty, the placeholder, one name, or
/// `n (a,b,...)` with the names sorted (PostgreSQL reads a bare count as `FIRST n`).
pub fn render(names: &SyncNames) -> String {
    match names {
        SyncNames::Off => String::new(),
        SyncNames::Block => STRICT_PLACEHOLDER.to_string(),
        SyncNames::All(set) if set.len() == 1 => quote_standby_name(set.iter().next().unwrap()),
        SyncNames::All(set) => {
            let quoted: Vec<String> = set.iter().map(quote_standby_name).collect();
            format!("{} ({})", set.len(), quoted.join(","))
        }
        // Patroni 4's quorum form: `ANY n (a,b,...)`, even with one name.
        SyncNames::Any { num, names } => {
            let quoted: Vec<String> = names.iter().map(quote_standby_name).collect();
            format!("ANY {num} ({})", quoted.join(","))
        }
        SyncNames::Other(raw) => raw.clone(),
    }
}

/// A running value read back: one of tenure's (Patroni's) forms exactly, else `Other` (an operator's value,
/// or `FIRST 1 (a,b)` and the like, which guarantees less than tenure assumes of its own forms).
pub fn parse(raw: &str) -> SyncNames {
    let parsed = match raw {
        "" => SyncNames::Off,
        STRICT_PLACEHOLDER => SyncNames::Block,
        _ if raw.starts_with("ANY ") => match any_of(raw) {
            Some((num, names)) => SyncNames::Any { num, names },
            None => return SyncNames::Other(raw.to_string()),
        },
        _ => match names_of(raw) {
            Some(set) => SyncNames::All(set),
            None => return SyncNames::Other(raw.to_string()),
        },
    };
    // Only an exact round trip is ours: spacing, order, quoting and the count must be as rendered.
    if render(&parsed) == raw {
        parsed
    } else {
        SyncNames::Other(raw.to_string())
    }
}

/// `ANY n (a,b,...)` as rendered, with `n` at most the number of names; `None` for any other shape.
fn any_of(raw: &str) -> Option<(u32, BTreeSet<NodeName>)> {
    let (count, rest) = raw.strip_prefix("ANY ")?.split_once(" (")?;
    let num: u32 = count.parse().ok()?;
    let names: BTreeSet<NodeName> = split_names(rest.strip_suffix(')')?)?
        .into_iter()
        .map(|n| (!n.is_empty()).then(|| NodeName::new(&n)))
        .collect::<Option<_>>()?;
    (num as usize <= names.len()).then_some((num, names))
}

/// The names of `a` or `n (a,b,...)`; `None` for any other shape.
fn names_of(raw: &str) -> Option<BTreeSet<NodeName>> {
    let list = match raw.split_once(" (") {
        Some((count, rest)) => {
            count.parse::<usize>().ok()?;
            rest.strip_suffix(')')?
        }
        None => raw,
    };
    split_names(list)?
        .into_iter()
        .map(|n| (!n.is_empty()).then(|| NodeName::new(&n)))
        .collect()
}

/// Split `a,"b,c",d` at the commas outside double quotes, unquoting (`""` is a quote).
fn split_names(list: &str) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    let mut chars = list.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut()?.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(String::new()),
            (c, _) => out.last_mut()?.push(c),
        }
    }
    (!quoted).then_some(out)
}

/// Patroni's `quote_standby_name`: a plain identifier stays bare unless it is `first` or `any` (keywords of
/// the syntax); anything else is double-quoted. PostgreSQL matches names case-insensitively either way.
pub fn quote_standby_name(name: &NodeName) -> String {
    let s = name.as_str();
    let mut chars = s.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    let keyword = s.eq_ignore_ascii_case("first") || s.eq_ignore_ascii_case("any");
    if plain && !keyword {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(names: &[&str]) -> SyncNames {
        SyncNames::All(names.iter().map(|n| NodeName::new(*n)).collect())
    }

    #[test]
    fn renders_as_patroni() {
        assert_eq!(render(&SyncNames::Off), "");
        assert_eq!(render(&SyncNames::Block), STRICT_PLACEHOLDER);
        assert_eq!(render(&all(&["pg2"])), "pg2");
        assert_eq!(render(&all(&["pg3", "node-1"])), "2 (\"node-1\",pg3)");
        assert_eq!(render(&all(&["first", "a\"b"])), "2 (\"a\"\"b\",\"first\")");
    }

    #[test]
    fn parses_its_own_forms_back_and_nothing_else() {
        for n in [
            SyncNames::Off,
            SyncNames::Block,
            all(&["pg2"]),
            all(&["node-1"]),
            all(&["a,b", "c", "Any"]),
            all(&["x\"y", "z"]),
            SyncNames::Any {
                num: 1,
                names: [NodeName::new("a")].into(),
            },
            SyncNames::Any {
                num: 2,
                names: [
                    NodeName::new("pg2"),
                    NodeName::new("node-3"),
                    NodeName::new("pg4"),
                ]
                .into(),
            },
        ] {
            assert_eq!(parse(&render(&n)), n, "{n:?}");
        }
        for raw in [
            "*",
            "FIRST 1 (a,b)",
            "ANY 3 (a,b)",
            "ANY 1 (b,a)",
            "ANY 1 a",
            "1 (a,b)",
            "a,b",
            "2 (b,a)",
            "\"pg2\"",
        ] {
            assert_eq!(parse(raw), SyncNames::Other(raw.into()), "{raw}");
        }
    }
}
