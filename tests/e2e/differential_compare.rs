//! The differential's comparison: each answer reduced to its shape (field paths and kinds, the values clients
//! branch on), the differences between the two clusters, and the rows of `docs/differences.md` that allow them.
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::Seen;

/// The JSON's shape: every field path with its kind; arrays merge their elements (`a[].b`).
pub(super) fn shape(v: &Value, path: &str, out: &mut BTreeMap<String, String>) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if !path.is_empty() {
        // Array elements of different kinds (a number here, null there) show as `null|number`.
        let merged = match out.get(path) {
            Some(k) if k != kind => {
                let mut kinds: Vec<&str> = k.split('|').chain([kind]).collect();
                kinds.sort_unstable();
                kinds.dedup();
                kinds.join("|")
            }
            _ => kind.to_string(),
        };
        out.insert(path.to_string(), merged);
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                shape(x, &p, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                shape(x, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

pub(super) fn record(seen: &mut Seen, probe: &str, code: u16, challenge: bool, body: &str) {
    let mut fields = BTreeMap::new();
    fields.insert("status".into(), code.to_string());
    fields.insert(
        "www-authenticate".into(),
        if challenge { "present" } else { "absent" }.into(),
    );
    // `/config` (and `PATCH /config`'s answer) holds each cluster's own settings: only the status is compared.
    let parsed = serde_json::from_str::<Value>(body).ok();
    let own_settings = probe.starts_with("GET /config") || probe.starts_with("PATCH /config");
    if let Some(v) = parsed.filter(|_| !own_settings) {
        if v.is_object() {
            shape(&v, "", &mut fields);
            values(&v, &mut fields);
        }
    }
    seen.insert(probe.to_string(), fields);
}

/// The values clients branch on, compared as values (`=role`), not only as kinds.
pub(super) fn values(v: &Value, fields: &mut BTreeMap<String, String>) {
    for k in ["state", "role", "replication_state"] {
        if let Some(x) = v.get(k).and_then(Value::as_str) {
            fields.insert(format!("={k}"), x.to_string());
        }
    }
}

/// `*` matches any run of characters.
pub(super) fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, rest)) => {
            let Some(tail) = s.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob(rest, &tail[i..]))
        }
    }
}

/// Every (probe, field, Patroni's, tenure's) where they differ; `absent` where one has no such field.
pub(super) fn differences(
    patroni: &Seen,
    tenure: &Seen,
) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    let probes: BTreeSet<&String> = patroni.keys().chain(tenure.keys()).collect();
    let empty = BTreeMap::new();
    for probe in probes {
        let (p, t) = (
            patroni.get(probe).unwrap_or(&empty),
            tenure.get(probe).unwrap_or(&empty),
        );
        let fields: BTreeSet<&String> = p.keys().chain(t.keys()).collect();
        for f in fields {
            let pv = p.get(f).map_or("absent", String::as_str);
            let tv = t.get(f).map_or("absent", String::as_str);
            if pv != tv {
                out.insert((probe.clone(), f.clone(), pv.to_string(), tv.to_string()));
            }
        }
    }
    out
}

/// The rows of `docs/differences.md`'s table: `| probe | field | Patroni 3.0.2 | tenure | why |` (`*` in
/// any of the first four cells matches any run of characters).
pub(super) fn listed() -> BTreeSet<(String, String, String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/differences.md"))
        .expect("docs/differences.md");
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<String> = l
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            (cells.len() >= 5 && !cells[4].is_empty()).then(|| {
                (
                    cells[0].clone(),
                    cells[1].clone(),
                    cells[2].clone(),
                    cells[3].clone(),
                )
            })
        })
        .collect()
}
