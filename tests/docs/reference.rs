//! docs/reference/: the configuration and REST reference checked against the code, both ways.
//
// Keys come from the serde structs (`known_keys`: every field, through `deny_unknown_fields`), the
// variables from `config::ENV`, the `config` key's fields from the reads in src/config/dynamic.rs (each
// documented one must also be refused with a wrong value, so the code really reads it), and the routes
// from a running API asked every method on every path the router and health checks name.
use std::collections::{BTreeMap, BTreeSet};

use reqwest::Method;
use tenure::config::dynamic::DynamicSettings;
use tenure::config::ignored::IGNORED;

use super::harness::{primary, settings, with_cluster, Api, NOW};
use super::md::{read, rows, ticked, Row};

const CONFIG: &str = "docs/reference/configuration.md";
const REST: &str = "docs/reference/rest.md";

/// Whether a pattern (segments, `*` for any one) names `key`.
fn matches(pattern: &str, key: &str) -> bool {
    let (p, k): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), key.split('.').collect());
    p.len() == k.len() && p.iter().zip(&k).all(|(a, b)| *a == "*" || a == b)
}

fn section_rows(h2: &str) -> Vec<Row> {
    rows(&read(CONFIG))
        .into_iter()
        .filter(|r| r.h2 == h2)
        .collect()
}

/// The keys a section's rows document in their first cell, with the row's line.
fn documented(h2: &str) -> Vec<(String, usize)> {
    section_rows(h2)
        .iter()
        .flat_map(|r| ticked(&r.cells[0]).into_iter().map(move |k| (k, r.line)))
        .collect()
}

#[test]
fn configuration_reference_has_a_row_for_every_key_of_the_file() {
    let known = tenure::config::known_keys();
    assert!(
        known.len() > 100,
        "known_keys() found only {} keys",
        known.len()
    );
    let sections: BTreeSet<&String> = known
        .iter()
        .filter(|k| known.iter().any(|c| c.starts_with(&format!("{k}."))))
        .collect();
    let file = documented("The file");
    let ignored = documented("Accepted and ignored");
    let mut problems = Vec::new();
    for key in known.iter().filter(|k| !sections.contains(k)) {
        let is_ignored = IGNORED.iter().any(|(p, _)| matches(p, key));
        let (table, rows) = if is_ignored {
            ("Accepted and ignored", &ignored)
        } else {
            ("The file", &file)
        };
        if !rows.iter().any(|(p, _)| matches(p, key)) {
            let section = key.rsplit_once('.').map_or("top level", |(s, _)| s);
            problems.push(format!(
                "no row for `{key}`: add `| `{key}` | type | default | ... |` under `## {table}` (section `{section}`) in {CONFIG}"
            ));
        }
    }
    for (table, rows) in [("The file", &file), ("Accepted and ignored", &ignored)] {
        for (p, line) in rows {
            if !known.iter().any(|k| matches(p, k)) {
                problems.push(format!(
                    "{CONFIG}:{line}: `{p}` under `## {table}` is not a key of the file"
                ));
            } else if table == "The file" && IGNORED.iter().any(|(i, _)| matches(i, p)) {
                problems.push(format!(
                    "{CONFIG}:{line}: `{p}` is ignored: move it under `## Accepted and ignored`"
                ));
            } else if table != "The file" && !IGNORED.iter().any(|(i, _)| matches(i, p)) {
                problems.push(format!(
                    "{CONFIG}:{line}: `{p}` is no longer ignored: move it under `## The file`"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every key src/config/dynamic.rs reads from the `config` JSON (`get("k")`, `int("k", ..)`; `pg.get("k")`
/// is `postgresql.k`).
fn dynamic_keys_read() -> BTreeSet<String> {
    let src = include_str!("../../src/config/dynamic.rs");
    let mut out = BTreeSet::new();
    for pat in ["get(\"", "int(\""] {
        for (i, _) in src.match_indices(pat) {
            let rest = &src[i + pat.len()..];
            let key = &rest[..rest.find('"').unwrap()];
            let prefix = if src[..i].ends_with("pg.") {
                "postgresql."
            } else {
                ""
            };
            out.insert(format!("{prefix}{key}"));
        }
    }
    // `get("postgresql")` reads the section whose fields are the `pg.get` ones.
    let sections: Vec<String> = out
        .iter()
        .filter(|k| out.iter().any(|c| c.starts_with(&format!("{k}."))))
        .cloned()
        .collect();
    out.retain(|k| !sections.contains(k));
    out
}

#[test]
fn configuration_reference_lists_every_field_of_the_config_key() {
    let read_by_code = dynamic_keys_read();
    assert!(
        read_by_code.contains("ttl") && read_by_code.contains("postgresql.parameters"),
        "{read_by_code:?}"
    );
    let doc: BTreeMap<String, usize> = documented("The `config` key").into_iter().collect();
    let mut problems = Vec::new();
    for k in &read_by_code {
        if !doc.contains_key(k) {
            problems.push(format!("no row for `{k}` (read in src/config/dynamic.rs): add it under `## The `config` key` in {CONFIG}"));
        }
    }
    for (k, line) in &doc {
        if !read_by_code.contains(k) {
            problems.push(format!(
                "{CONFIG}:{line}: `{k}` is not read from the `config` key"
            ));
            continue;
        }
        // A wrong value must be refused: the code reads the key (unknown keys are let through).
        let mut v = serde_json::json!([[1]]);
        for part in k.rsplit('.') {
            v = serde_json::json!({ part: v });
        }
        match DynamicSettings::parse(&v) {
            Err(_) => {}
            other => problems.push(format!(
                "{CONFIG}:{line}: `{k}`: {v} was not refused: {other:?}"
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn configuration_reference_lists_every_environment_variable() {
    let doc: Vec<(String, String, usize)> = section_rows("Environment variables")
        .iter()
        .filter_map(|r| {
            Some((
                ticked(&r.cells[0]).first()?.clone(),
                ticked(r.cells.get(1)?).first()?.clone(),
                r.line,
            ))
        })
        .collect();
    let mut problems = Vec::new();
    for (var, key, _) in tenure::config::ENV {
        match doc.iter().find(|(v, _, _)| v == var) {
            None => problems.push(format!(
                "no row for `{var}`: add `| `{var}` | `{key}` |` under `## Environment variables` in {CONFIG}"
            )),
            Some((_, k, line)) if k != key => {
                problems.push(format!("{CONFIG}:{line}: `{var}` sets `{key}`, not `{k}`"))
            }
            Some(_) => {}
        }
    }
    for (v, _, line) in &doc {
        if !tenure::config::ENV.iter().any(|(var, _, _)| var == v) {
            problems.push(format!("{CONFIG}:{line}: `{v}` is not read"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Paths named in the API's source: the router's and the health checks' string literals.
fn paths_in_source() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for src in [
        include_str!("../../src/api/router.rs"),
        include_str!("../../src/api/health.rs"),
    ] {
        for piece in src.split('"').skip(1).step_by(2) {
            if piece.starts_with('/')
                && piece[1..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-')
            {
                out.insert(piece.to_string());
            }
        }
    }
    out.insert("/".into());
    out
}

const METHODS: [&str; 7] = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"];

#[tokio::test]
async fn rest_reference_has_every_route_the_api_serves_and_no_other() {
    let doc_rows = rows(&read(REST));
    let mut doc: BTreeMap<(String, String), (Vec<u16>, usize)> = BTreeMap::new();
    for r in doc_rows
        .iter()
        .filter(|r| r.cells.len() >= 3 && !ticked(&r.cells[1]).is_empty())
    {
        let codes: Vec<u16> = r.cells[2]
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|c| c.parse().ok())
            .collect();
        for m in r.cells[0].split(',').map(|m| m.trim().trim_matches('`')) {
            for p in ticked(&r.cells[1]) {
                doc.insert((m.to_string(), p), (codes.clone(), r.line));
            }
        }
    }
    assert!(
        doc.len() > 40,
        "{REST}: only {} method/path rows found",
        doc.len()
    );
    let mut paths = paths_in_source();
    paths.extend(doc.keys().map(|(_, p)| p.clone()));
    let mut problems = Vec::new();
    // With a store snapshot and before the first one (the status paths' 503).
    for published in [with_cluster(primary(NOW + 10_000)), primary(NOW + 10_000)] {
        let api = Api::start(settings(), published).await;
        for path in &paths {
            for m in METHODS {
                let (code, _) = api
                    .code(Method::from_bytes(m.as_bytes()).unwrap(), path)
                    .await;
                let code = code.as_u16();
                let served = code != 404 && code != 405;
                match (served, doc.get(&(m.to_string(), path.clone()))) {
                    (true, None) => problems.push(format!("{m} {path} answers {code} but has no row in {REST}")),
                    (false, Some((_, line))) => problems.push(format!("{REST}:{line}: {m} {path} answers {code}: not served")),
                    (true, Some((codes, line))) if !codes.contains(&code) => problems.push(format!(
                        "{REST}:{line}: {m} {path} answered {code} (no credentials sent), not among the codes {codes:?}"
                    )),
                    _ => {}
                }
            }
        }
        api.shutdown().await;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
