//! The store's JSON records read and written as Patroni does.
use super::*;
use crate::dcs::keys::KeyLayout;

#[test]
fn member_json_round_trips_with_patroni_field_names() {
    let json = r#"{"conn_url":"postgres://10.0.0.1:5432/postgres","api_url":"http://10.0.0.1:8008/patroni",
        "state":"running","role":"replica","version":"3.0.2","xlog_location":123,"timeline":2,
        "tags":{"nofailover":true}}"#;
    let m: MemberRecord = serde_json::from_str(json).unwrap();
    assert_eq!(m.role, "replica");
    assert_eq!(m.timeline, Some(2));
    let back = serde_json::to_value(&m).unwrap();
    assert_eq!(back["api_url"], "http://10.0.0.1:8008/patroni");
    assert_eq!(back["tags"]["nofailover"], true);
}

#[test]
fn member_record_converts_to_core_member() {
    let json = r#"{"conn_url":"postgres://h:5432/postgres","api_url":"","state":"streaming","role":"replica",
        "version":"3.0.2","xlog_location":10,"receive_lsn":30,"replay_lsn":20,"timeline":2,
        "tags":{"nofailover":"true","failover_priority":"3","zone":"a","weight":5}}"#;
    let r: MemberRecord = serde_json::from_str(json).unwrap();
    let m = member_from_record("pg2", &r);
    assert_eq!(m.name, NodeName::new("pg2"));
    assert_eq!(m.role, MemberRole::Replica);
    assert_eq!(m.state, MemberState::Streaming);
    assert_eq!(m.api_url, None);
    assert_eq!(m.conn_url.as_deref(), Some("postgres://h:5432/postgres"));
    assert_eq!(m.lsn, Some(Lsn(30)));
    assert_eq!(m.timeline, Some(Timeline(2)));
    assert!(m.tags.nofailover);
    assert_eq!(m.tags.failover_priority, 3);
    assert_eq!(m.tags.other.get("zone").map(String::as_str), Some("a"));
    assert_eq!(m.tags.other.get("weight").map(String::as_str), Some("5"));
    // Patroni's streaming replica: state running, replication_state streaming.
    let patroni = MemberRecord {
        state: "running".into(),
        replication_state: Some("streaming".into()),
        ..r.clone()
    };
    assert_eq!(
        member_from_record("pg2", &patroni).state,
        MemberState::Streaming
    );
    assert_eq!(wire_state(MemberState::Streaming), "running");
    assert_eq!(
        replication_state(true, MemberState::Running, false),
        Some("in archive recovery")
    );
    let legacy = MemberRecord {
        role: "master".into(),
        state: "who knows".into(),
        ..Default::default()
    };
    let m = member_from_record("pg1", &legacy);
    assert_eq!(
        (m.role, m.state, m.lsn),
        (MemberRole::Primary, MemberState::Stopped, None)
    );
}

#[test]
fn failsafe_key_and_mode_read_as_patroni_writes_them() {
    let k =
        failsafe_from_json(r#"{"pg1": "http://h1:8008/patroni", "pg2": "http://h2:8008/patroni"}"#)
            .expect("a valid key");
    assert_eq!(
        k.get(&NodeName::new("pg2")).map(String::as_str),
        Some("http://h2:8008/patroni")
    );
    assert_eq!(failsafe_from_json("[1, 2]"), None, "garbage is no key");
    assert_eq!(failsafe_from_json(r#"{"pg1": 5}"#), None);
    let members = [("pg1".to_string(), "u".to_string())].into_iter().collect();
    assert_eq!(failsafe_json(&members), r#"{"pg1":"u"}"#);
    assert!(dynamic_config_from_json(&serde_json::json!({"failsafe_mode": true})).failsafe_mode);
    // A `config` key without it: on (tenure's default, issue 30); written off, or unreadable (Patroni's
    // parse_bool gives None, which Patroni reads as off): off.
    assert!(dynamic_config_from_json(&serde_json::json!({})).failsafe_mode);
    assert!(!dynamic_config_from_json(&serde_json::json!({"failsafe_mode": false})).failsafe_mode);
    assert!(
        !dynamic_config_from_json(&serde_json::json!({"failsafe_mode": "maybe"})).failsafe_mode
    );
    assert_eq!(
        KeyLayout::new("service", "batman").failsafe(),
        "service/batman/failsafe"
    );
}

#[test]
fn sync_settings_are_read_from_config_as_patroni_reads_them() {
    use crate::ha::observation::SyncSettings;
    let read = |v: serde_json::Value| dynamic_config_from_json(&v).sync;
    let s = read(
        serde_json::json!({"synchronous_mode": "on", "synchronous_mode_strict": "true",
        "synchronous_node_count": 3, "maximum_lag_on_syncnode": "4096"}),
    );
    let want = SyncSettings {
        enabled: true,
        quorum: false,
        strict: true,
        node_count: 3,
        max_lag_bytes: Some(4096),
    };
    assert_eq!(s, want);
    let quorum = read(serde_json::json!({"synchronous_mode": "Quorum"}));
    assert!(quorum.enabled && quorum.quorum, "{quorum:?}");
    assert!(!s.quorum, "on is priority mode");
    // Patroni: `str(v).lower() == 'quorum'`, not trimmed, and then not a boolean either.
    assert_eq!(
        read(serde_json::json!({"synchronous_mode": " quorum"})),
        SyncSettings::default()
    );
    // Garbage reads as Patroni's defaults: off, one node, no lag limit.
    let garbage = read(serde_json::json!({"synchronous_mode": "maybe",
        "synchronous_node_count": 0, "maximum_lag_on_syncnode": -1}));
    assert_eq!(garbage, SyncSettings::default());
}

#[test]
fn sync_key_json_is_patronis() {
    let names = |l: &[&str]| l.iter().map(|n| NodeName::new(*n)).collect();
    let pg1 = NodeName::new("pg1");
    assert_eq!(
        sync_json(&pg1, &names(&["pg3", "pg2"]), 0),
        r#"{"leader":"pg1","quorum":0,"sync_standby":"pg2,pg3"}"#
    );
    assert_eq!(
        sync_json(&pg1, &names(&[]), 0),
        r#"{"leader":"pg1","quorum":0,"sync_standby":null}"#
    );
    // Quorum mode: the voters in `sync_standby`, the votes a new leader needs in `quorum`.
    assert_eq!(
        sync_json(&pg1, &names(&["pg3", "pg2"]), 1),
        r#"{"leader":"pg1","quorum":1,"sync_standby":"pg2,pg3"}"#
    );
    let back = sync_from_text(&sync_json(&pg1, &names(&["pg2", "pg3"]), 1));
    assert_eq!(back, Ok((Some(pg1), names(&["pg2", "pg3"]), 1)));
}

#[test]
fn config_status_and_switchover_convert() {
    assert!(dynamic_config_from_json(&serde_json::json!({"pause": true})).pause);
    assert!(!dynamic_config_from_json(&serde_json::json!({"ttl": 30})).pause);
    assert_eq!(
        optime_from_status(&serde_json::json!({"optime": 77})),
        Some(Lsn(77))
    );
    assert_eq!(optime_from_status(&serde_json::json!({})), None);
    assert_eq!(
        switchover_from_record(&SwitchoverRecord::default()),
        Ok(None)
    );
    let r = SwitchoverRecord {
        leader: Some("pg1".into()),
        member: Some("pg2".into()),
        scheduled_at: Some("2016-10-31T14:00:00+01:00".into()),
    };
    let s = switchover_from_record(&r).unwrap().unwrap();
    assert_eq!(s.leader, Some(NodeName::new("pg1")));
    assert_eq!(s.candidate, Some(NodeName::new("pg2")));
    assert_eq!(s.scheduled_at_ms, Some(1_477_918_800_000));
}

#[test]
fn timeline_follows_patronis_history_rule() {
    let h = serde_json::json!([
        [
            1,
            25165984,
            "no recovery target specified",
            "2024-01-01T00:00:00+00:00"
        ],
        [2, 50331744, "no recovery target specified"]
    ]);
    assert_eq!(timeline_from_history(&h), Some(Timeline(3)));
    assert_eq!(
        timeline_from_history(&serde_json::json!([])),
        Some(Timeline(1))
    );
    assert_eq!(
        timeline_from_history(&serde_json::json!([["4", 1, "x"]])),
        Some(Timeline(5))
    );
    assert_eq!(timeline_from_history(&serde_json::json!({"x": 1})), None);
    assert_eq!(timeline_from_history(&serde_json::json!([["x"]])), None);
}

#[test]
fn conn_urls_give_host_and_port() {
    assert_eq!(
        host_port("postgres://rep:pw@10.0.0.2:5433/postgres"),
        (Some("10.0.0.2".into()), Some(5433))
    );
    assert_eq!(host_port("postgres://h/db"), (Some("h".into()), Some(5432)));
    assert_eq!(
        host_port("postgresql://[::1]:6000"),
        (Some("::1".into()), Some(6000))
    );
    assert_eq!(host_port(""), (None, None));
}

/// Patroni 4.1's `cluster_as_json` rule: unknown (absent or 0), behind, past the optime, no optime.
#[test]
fn replica_lag_is_measured_from_the_optime() {
    assert_eq!(replica_lag(None, Some(1000)), None);
    assert_eq!(replica_lag(Some(0), Some(1000)), None);
    assert_eq!(replica_lag(Some(900), Some(1000)), Some((Lsn(900), 100)));
    assert_eq!(replica_lag(Some(2000), Some(1000)), Some((Lsn(2000), 0)));
    assert_eq!(replica_lag(Some(2000), None), Some((Lsn(2000), 0)));
}

/// `status.slots` and `retain_slots` as Patroni writes them (objects, or JSON text), a name that is no slot name
/// left out: store values reach PostgreSQL only through the grammar.
#[test]
fn status_slots_are_read_as_patroni_writes_them_with_checked_names() {
    let v = serde_json::json!({"optime": 10, "slots": {"dr": 9, "a": "8", "x'y": 7}, "retain_slots": ["b", "B!"]});
    let slots = slots_from_status(&v);
    assert_eq!(slots.get("dr"), Some(&Lsn(9)));
    assert_eq!(slots.get("a"), Some(&Lsn(8)));
    assert_eq!(slots.len(), 2);
    assert_eq!(retain_slots_from_status(&v), ["b".to_string()].into());
    let text = serde_json::json!({"optime": 10, "slots": "{\"dr\": 9}", "retain_slots": "[\"b\"]"});
    assert_eq!(slots_from_status(&text).get("dr"), Some(&Lsn(9)));
    assert_eq!(retain_slots_from_status(&text).len(), 1);
}

/// The `config` key's slot settings: physical names that pass the grammar, Patroni's ttl forms.
#[test]
fn slot_settings_keep_physical_checked_names() {
    let s = slot_settings(&serde_json::json!({
        "slots": {"dr": {"type": "physical"}, "p2": null, "cdc": {"database": "d", "plugin": "p"}, "Bad": null},
        "ignore_slots": [{"name": "x", "type": "physical"}],
        "member_slots_ttl": "10min",
    }));
    assert_eq!(s.permanent, ["dr".to_string(), "p2".to_string()].into());
    assert_eq!(s.ignore.len(), 1);
    assert_eq!(s.member_ttl_ms, 600_000);
    assert_eq!(
        slot_settings(&serde_json::json!({})).member_ttl_ms,
        1_800_000
    );
}
