//! YAML as patronictl prints it (PyYAML's `safe_dump`): block style, keys sorted, YAML 1.1 quoting.
// yaml_serde writes YAML 1.2, where `on`, `1:30` and `2026-11-30T12:00:00+00:00` are plain strings. PyYAML
// (YAML 1.1) quotes them, and a YAML 1.1 reader of an unquoted one (PyYAML, Ansible, patronictl edit-config)
// gets `true`, 90 or a datetime instead of the string. So the layout is written here, and each scalar by
// yaml_serde unless YAML 1.1 would read it as another type.
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

/// `safe_dump(v, default_flow_style=False)`: a document ending in a newline.
pub fn dump(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => map(&mut out, m, 0, false),
        Value::Array(a) if !a.is_empty() => seq(&mut out, a, 0, false),
        // PyYAML ends a lone scalar document with `...`.
        Value::Object(_) | Value::Array(_) => out.push_str(&format!("{}\n", flow(v))),
        scalar => out.push_str(&format!("{}\n...\n", flow(scalar))),
    }
    out
}

fn pad(out: &mut String, indent: usize, inline: bool) {
    if !inline {
        out.push_str(&" ".repeat(indent));
    }
}

/// A map at `indent`; `inline`: its first key follows a `- ` already written.
fn map(out: &mut String, m: &Map<String, Value>, indent: usize, inline: bool) {
    for (i, (key, value)) in m.iter().enumerate() {
        pad(out, indent, inline && i == 0);
        out.push_str(&string(key));
        out.push(':');
        match value {
            Value::Object(inner) if !inner.is_empty() => {
                out.push('\n');
                map(out, inner, indent + 2, false);
            }
            // PyYAML does not indent a sequence under a key.
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                seq(out, items, indent, false);
            }
            other => out.push_str(&format!(" {}\n", flow(other))),
        }
    }
}

fn seq(out: &mut String, items: &[Value], indent: usize, inline: bool) {
    for (i, item) in items.iter().enumerate() {
        pad(out, indent, inline && i == 0);
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => map(out, m, indent + 2, true),
            Value::Array(a) if !a.is_empty() => seq(out, a, indent + 2, true),
            other => out.push_str(&format!("{}\n", flow(other))),
        }
    }
}

/// A scalar, or an empty map or list, on one line.
fn flow(v: &Value) -> String {
    match v {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => scalar(other),
    }
}

/// One scalar as PyYAML writes it (for a cell of a table, too).
pub fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => string(s),
        Value::Null => "null".into(),
        other => yaml_serde::to_string(other)
            .map(|s| s.trim_end().to_string())
            .unwrap_or_else(|_| other.to_string()),
    }
}

fn string(s: &str) -> String {
    if s.contains(|c: char| c.is_control()) {
        // A newline or a control character: JSON's escapes are YAML's double-quoted style.
        return Value::String(s.to_string()).to_string();
    }
    if yaml_1_1_reads_as_another_type(s) {
        return format!("'{}'", s.replace('\'', "''"));
    }
    match yaml_serde::to_string(s) {
        Ok(text) if !text.trim_end().contains('\n') => text.trim_end().to_string(),
        _ => Value::String(s.to_string()).to_string(),
    }
}

/// PyYAML's implicit resolvers (`yaml/resolver.py`): bool, float, int, merge, null, timestamp, value.
fn yaml_1_1_reads_as_another_type(s: &str) -> bool {
    static IMPLICIT: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF",
            r"|[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?",
            r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
            r"|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+",
            r"|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+",
            r"|<<|~|null|Null|NULL|=",
            r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]",
            r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9]",
            r"(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?",
            r")$"
        ))
        .expect("PyYAML's resolver patterns")
    });
    IMPLICIT.is_match(s)
}

#[cfg(test)]
mod tests {
    use super::{dump, yaml_1_1_reads_as_another_type};
    use serde_json::json;

    #[test]
    fn strings_yaml_1_1_reads_as_another_type() {
        for other in [
            "on",
            "Off",
            "yes",
            "NO",
            "1:30",
            "0755",
            "1_000",
            "0x1F",
            ".5",
            "1.",
            ".inf",
            "~",
            "Null",
            "<<",
            "=",
            "2026-11-30T12:00:00+00:00",
            "2002-12-14",
            "2001-12-14 21:59:43.10 -5",
        ] {
            assert!(yaml_1_1_reads_as_another_type(other), "{other}");
        }
        for string in [
            "",
            "y",
            "4MB",
            "C.UTF-8",
            "0/3000060",
            "2002-1-14",
            "2026-11-30T12:00",
            "pg1",
        ] {
            assert!(!yaml_1_1_reads_as_another_type(string), "{string}");
        }
    }

    /// PyYAML's layout, checked against patronictl in tests/patronictl.rs (show-config, history, list).
    #[test]
    fn block_style_as_pyyaml_writes_it() {
        let v = json!({"b": [1, {"x": "on", "y": []}, ["p", "q"]], "a": {"n": null, "e": {}, "s": "it's"},
                       "c": "line\nbreak"});
        assert_eq!(
            dump(&v),
            "a:\n  e: {}\n  n: null\n  s: it's\nb:\n- 1\n- x: 'on'\n  y: []\n- - p\n  - q\nc: \"line\\nbreak\"\n"
        );
        assert_eq!(dump(&json!([])), "[]\n");
        assert_eq!(dump(&json!("on")), "'on'\n...\n");
    }
}
