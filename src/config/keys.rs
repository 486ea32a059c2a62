//! Every key the config file takes, read from the serde structs themselves (the reference's test uses it).
//
// No second list to keep in step: each section is asked for its fields by parsing a document with an unknown
// key in it; `deny_unknown_fields` answers with the section's whole field list. A field that answers the same
// question in turn is a section, and is walked; any other is a leaf (a value, a list, or a free map such as
// `tags` or `postgresql.parameters`).
use super::raw::RawConfig;

const PROBE: &str = "zz_tenure_key_probe";

/// Every key of the file as a dotted path (`bootstrap.dcs.ttl`), sections included, in the structs' order.
/// Patroni keys tenure accepts and ignores are included (they are in `ignored::IGNORED` as well).
pub fn known_keys() -> Vec<String> {
    let mut out = Vec::new();
    walk("", &mut out);
    out
}

fn walk(section: &str, out: &mut Vec<String>) {
    for field in fields_of(section).unwrap_or_default() {
        let key = if section.is_empty() {
            field
        } else {
            format!("{section}.{field}")
        };
        out.push(key.clone());
        if fields_of(&key).is_some() {
            walk(&key, out);
        }
    }
}

/// The fields `section` takes, or `None` when it is not a section with fixed fields.
fn fields_of(section: &str) -> Option<Vec<String>> {
    let mut doc = format!("{{{PROBE}: 0}}");
    for part in section.split('.').filter(|p| !p.is_empty()).rev() {
        doc = format!("{{{part}: {doc}}}");
    }
    let err = yaml_serde::from_str::<RawConfig>(&doc).err()?.to_string();
    // `restapi.authentication: unknown field `zz..`, expected one of `username`, `password` at line 1 ...`
    let (path, rest) = err.split_once(": ").unwrap_or(("", &err));
    let path = if path == "." { "" } else { path };
    let expected = rest.strip_prefix(&format!("unknown field `{PROBE}`"))?;
    if path != section && !(section.is_empty() && path.contains(' ')) {
        return None;
    }
    let expected = expected.split(" at line ").next().unwrap_or(expected);
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_sections_and_stops_at_maps_and_lists() {
        let keys = known_keys();
        for k in [
            "scope",
            "bootstrap.dcs.ttl",
            "bootstrap.dcs.master_start_timeout",
            "postgresql.callbacks.on_start",
            "postgresql.authentication.rewind.sslmode",
            "tenure.fencer.fast_stop_timeout",
            "tags",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
        }
        assert!(!keys
            .iter()
            .any(|k| k.contains(PROBE) || k.starts_with("tags.")));
        assert!(!keys.iter().any(|k| k.starts_with("postgresql.parameters.")));
    }
}
