//! patronictl's `-f yaml` for `list` and `history`: rows as PyYAML's `safe_dump` prints them.
// yaml_serde writes YAML 1.2, where `2026-11-30T12:00:00+00:00` is a plain string; PyYAML (YAML 1.1) quotes
// it, and a Python script reading an unquoted one gets a datetime, not the string patronictl gave it. So the
// rows (maps of scalars, `Tags` one level deeper) are written here, each scalar by yaml_serde unless it is
// a string YAML 1.1 would read as a timestamp.
use serde_json::{Map, Value};

use super::CliError;

/// The rows as a YAML list of maps (keys sorted, as `safe_dump` sorts them), with patronictl's trailing
/// blank line (`click.echo` of a text that already ends in a newline).
pub fn rows_yaml(rows: &[Value]) -> Result<String, CliError> {
    if rows.is_empty() {
        return Ok("[]\n\n".into());
    }
    let mut out = String::new();
    for row in rows {
        let Some(map) = row.as_object().filter(|m| !m.is_empty()) else {
            return generic(rows);
        };
        for (i, (key, value)) in map.iter().enumerate() {
            out.push_str(if i == 0 { "- " } else { "  " });
            match value {
                Value::Object(inner) if !inner.is_empty() => {
                    out.push_str(&format!("{}:\n", scalar(&Value::String(key.clone()))?));
                    nested(&mut out, inner)?;
                }
                Value::Array(_) | Value::Object(_) => return generic(rows),
                v => out.push_str(&format!(
                    "{}: {}\n",
                    scalar(&Value::String(key.clone()))?,
                    scalar(v)?
                )),
            }
        }
    }
    out.push('\n');
    Ok(out)
}

fn nested(out: &mut String, map: &Map<String, Value>) -> Result<(), CliError> {
    for (key, value) in map {
        let key = scalar(&Value::String(key.clone()))?;
        out.push_str(&format!("    {key}: {}\n", scalar(value)?));
    }
    Ok(())
}

/// Anything deeper: yaml_serde's document as it is.
fn generic(rows: &[Value]) -> Result<String, CliError> {
    super::show::yaml(&Value::Array(rows.to_vec())).map(|s| s + "\n")
}

/// One scalar on one line: yaml_serde's, or single-quoted where YAML 1.1 would read a timestamp.
pub(super) fn scalar(v: &Value) -> Result<String, CliError> {
    match v {
        Value::String(s) if timestamp(s) => Ok(format!("'{s}'")),
        Value::Array(_) | Value::Object(_) => {
            // A list or map in a tag: JSON is YAML's flow style.
            Ok(v.to_string())
        }
        other => super::show::yaml(other).map(|s| s.trim_end().to_string()),
    }
}

/// YAML 1.1's timestamp (`yaml.resolver`'s `tag:yaml.org,2002:timestamp`): `2002-12-14`, or a date, `T` or
/// blanks, `h:mm:ss`, an optional fraction and an optional zone (`Z`, `+01`, `-05:30`).
fn timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |from: usize, min: usize, max: usize| -> Option<usize> {
        let n = b[from.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        (min..=max).contains(&n).then_some(from + n.min(max))
    };
    let sep = |at: usize, c: u8| (b.get(at) == Some(&c)).then_some(at + 1);
    let date = || -> Option<usize> {
        let y = digits(0, 4, 4)?;
        let m = digits(sep(y, b'-')?, 1, 2)?;
        digits(sep(m, b'-')?, 1, 2)
    };
    let Some(end) = date() else {
        return false;
    };
    if end == b.len() {
        // A date alone only in its long form.
        return b.len() == 10;
    }
    let time = || -> Option<usize> {
        let mut at = end;
        match b.get(at) {
            Some(b'T' | b't') => at += 1,
            Some(b' ' | b'\t') => {
                at += b[at..]
                    .iter()
                    .take_while(|c| **c == b' ' || **c == b'\t')
                    .count()
            }
            _ => return None,
        }
        let h = digits(at, 1, 2)?;
        let m = digits(sep(h, b':')?, 2, 2)?;
        let mut at = digits(sep(m, b':')?, 2, 2)?;
        if let Some(f) = sep(at, b'.') {
            at = f + b[f..].iter().take_while(|c| c.is_ascii_digit()).count();
        }
        at += b[at..]
            .iter()
            .take_while(|c| **c == b' ' || **c == b'\t')
            .count();
        match b.get(at) {
            None => Some(at),
            Some(b'Z') => Some(at + 1),
            Some(b'+' | b'-') => {
                let h = digits(at + 1, 1, 2)?;
                match sep(h, b':') {
                    Some(m) => digits(m, 2, 2),
                    None => Some(h),
                }
            }
            Some(_) => None,
        }
    };
    time() == Some(b.len())
}

#[cfg(test)]
mod tests {
    use super::{rows_yaml, timestamp};
    use serde_json::json;

    #[test]
    fn timestamps_are_what_yaml_1_1_reads_as_one() {
        for yes in [
            "2026-11-30T12:00:00+00:00",
            "2002-12-14",
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14 21:59:43.10 -5",
            "2001-12-15 2:59:43.10",
            "2001-12-15T02:59:43.1Z",
        ] {
            assert!(timestamp(yes), "{yes}");
        }
        for no in [
            "",
            "2002-1-14",
            "20021214",
            "2026-11-30T12:00",
            "2026-11-30T12:00:00+00:00 later",
            "0/3000060",
            "pg1",
        ] {
            assert!(!timestamp(no), "{no}");
        }
    }

    /// What `yaml.safe_dump` prints for these rows, checked against patronictl 3.0.2's `history -f yaml`
    /// in tests/patronictl.rs.
    #[test]
    fn rows_print_as_pyyaml_prints_them() {
        let rows = [
            json!({"TL": 1, "Timestamp": "2026-11-30T12:00:00+00:00", "New Leader": "pg1", "Reason": ""}),
            json!({"Member": "pg2", "Tags": {"zone": "a", "nofailover": true}}),
        ];
        assert_eq!(
            rows_yaml(&rows).unwrap(),
            "- New Leader: pg1\n  Reason: ''\n  TL: 1\n  Timestamp: '2026-11-30T12:00:00+00:00'\n\
             - Member: pg2\n  Tags:\n    nofailover: true\n    zone: a\n\n"
        );
        assert_eq!(rows_yaml(&[]).unwrap(), "[]\n\n");
    }
}
