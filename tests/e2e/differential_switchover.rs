//! The differential's pause, resume and switchover: what each answers and writes, and the roles and states
//! once the old primary has rejoined; then the other operator actions (`differential_actions.rs`).
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::{actions, record, replica_name, shape, until, Auth, Seen, Target};

/// Pause and resume through `PATCH /config` (the `config` key's `pause`, the member keys' `pause`), then a
/// switchover to the replica that runs: its answer, the `failover` key afterwards, and both members' roles
/// and states once the old primary has rejoined.
pub(super) fn operator_actions(t: &Target, seen: &mut Seen) {
    let replica = replica_name(t);
    let member_pause = |name: &str| {
        t.kv_json(&format!("members/{name}"))
            .and_then(|v| v.get("pause").cloned())
    };
    let (code, ch, text) = t.call(
        t.primary,
        "PATCH",
        "/config",
        Auth::Good,
        Some(r#"{"pause":true}"#),
    );
    record(seen, "PATCH /config pause", code, ch, &text);
    let mut fields = BTreeMap::new();
    if let Some(v) = t.kv_json("config").and_then(|v| v.get("pause").cloned()) {
        shape(&serde_json::json!({ "pause": v }), "", &mut fields);
    }
    for (role, name) in [
        ("primary", t.leader.as_str()),
        ("replica", replica.as_str()),
    ] {
        let p = until(Duration::from_secs(15), || member_pause(name));
        fields.insert(
            format!("member key ({role}).pause"),
            p.map_or("absent".into(), |v| v.to_string()),
        );
    }
    seen.insert("store after pause".into(), fields);
    let (code, ch, text) = t.call(
        t.primary,
        "PATCH",
        "/config",
        Auth::Good,
        Some(r#"{"pause":null}"#),
    );
    record(seen, "PATCH /config resume", code, ch, &text);
    let mut fields = BTreeMap::new();
    let cleared = until(Duration::from_secs(15), || {
        [t.leader.as_str(), replica.as_str()]
            .iter()
            .all(|n| member_pause(n).is_none())
            .then_some(())
    });
    fields.insert(
        "member keys lose pause".into(),
        format!("{}", cleared.is_some()),
    );
    fields.insert(
        "config key pause".into(),
        t.kv_json("config")
            .and_then(|v| v.get("pause").cloned())
            .map_or("absent".into(), |v| v.to_string()),
    );
    seen.insert("store after resume".into(), fields);

    let body = format!(r#"{{"leader":"{}","candidate":"{replica}"}}"#, t.leader);
    let (code, ch, text) = t.call(t.primary, "POST", "/switchover", Auth::Good, Some(&body));
    record(seen, "POST /switchover to the replica", code, ch, &text);
    let mut fields = BTreeMap::new();
    let rejoined = until(Duration::from_secs(60), || {
        let (_, _, body) = t.call(t.primary, "GET", "/patroni", Auth::None, None);
        let old: Value = serde_json::from_str(&body).ok()?;
        (old["role"] == "replica" && old["state"] == "running").then_some(old)
    });
    // The candidate's own answer once it runs as the primary (or what it says after 30 s).
    let read_new = || {
        let (_, _, body) = t.call(t.replica, "GET", "/patroni", Auth::None, None);
        serde_json::from_str::<Value>(&body).unwrap_or_default()
    };
    let new = until(Duration::from_secs(30), || {
        let v = read_new();
        (v["role"] == "primary" || v["role"] == "master").then_some(v)
    })
    .unwrap_or_else(read_new);
    fields.insert(
        "new primary =role".into(),
        new["role"].as_str().unwrap_or("?").into(),
    );
    fields.insert(
        "old primary rejoined as a running replica".into(),
        rejoined.is_some().to_string(),
    );
    fields.insert(
        "leader key".into(),
        if t.kv_raw("leader").as_deref() == Some(replica.as_str()) {
            "the candidate"
        } else {
            "someone else"
        }
        .into(),
    );
    let mut key = BTreeMap::new();
    if let Some(v) = t.kv_json("failover") {
        shape(&v, "failover key", &mut key);
    }
    if key.is_empty() {
        key.insert(
            "failover key".into(),
            if t.kv_raw("failover").is_some() {
                "not JSON"
            } else {
                "absent"
            }
            .into(),
        );
    }
    fields.extend(key);
    seen.insert("after the switchover".into(), fields);
    let primary = t
        .wait_primary(Duration::from_secs(30), None)
        .expect("a primary");
    actions::run(t, seen, &primary.name);
}
