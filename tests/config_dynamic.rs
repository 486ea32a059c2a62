//! The store's `config` key: typed parsing, the refusals `PATCH /config` answers 422 with, and Patroni's
//! precedence when it is merged with the local file.
use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use tenure::config::dynamic::{DynamicError, DynamicSettings};
use tenure::config::{self, Config};
use tenure::ha::observation::SyncSettings;
use tenure::ha::TimingError;

const FILE: &str = "\
scope: main
name: pg1
restapi: {listen: 127.0.0.1:8008, allow_unauthenticated: true}
etcd3: {hosts: 127.0.0.1:2379}
bootstrap:
  dcs:
    ttl: 30
    loop_wait: 5
    retry_timeout: 5
    postgresql:
      parameters: {work_mem: 4MB, max_connections: 50, wal_keep_size: 256MB}
postgresql:
  data_dir: /var/lib/pg/main
  listen: 127.0.0.1:5432
  authentication:
    superuser: {username: postgres, password: s}
    replication: {username: replicator, password: r}
  parameters: {shared_buffers: 16MB, max_connections: 40, maintenance_work_mem: 32MB}
";

fn file(text: &str) -> Config {
    match config::parse(text, Path::new("t.yml"), &BTreeMap::new()) {
        Ok(l) => l.config,
        Err(e) => panic!("{e}"),
    }
}

fn refused(v: serde_json::Value) -> DynamicError {
    match file(FILE).check_dynamic(&v) {
        Ok(d) => panic!("accepted: {d:?}"),
        Err(e) => e,
    }
}

#[test]
fn every_dynamic_key_is_read() {
    let d = DynamicSettings::parse(&json!({
        "ttl": 40, "loop_wait": "4", "retry_timeout": 6, "maximum_lag_on_failover": 2048,
        "primary_start_timeout": 0, "primary_stop_timeout": 30, "maximum_lag_on_syncnode": -1,
        "check_timeline": true, "pause": "on", "failsafe_mode": true,
        "postgresql": {"use_pg_rewind": false, "use_slots": true,
                       "parameters": {"work_mem": "5MB", "max_connections": 60, "wal_log_hints": true,
                                      "port": 1, "hot_standby": "off"},
                       "pg_hba": ["host all all 10.0.0.0/8 scram-sha-256"]},
        "synchronous_mode": false, "slots": {}
    }))
    .unwrap();
    assert_eq!(
        (d.ttl_ms, d.loop_wait_ms, d.retry_timeout_ms),
        (Some(40_000), Some(4_000), Some(6_000))
    );
    assert_eq!(d.maximum_lag_on_failover_bytes, Some(2048));
    assert_eq!(d.primary_start_timeout_ms, Some(0));
    assert_eq!(d.primary_stop_timeout_ms, Some(30_000));
    assert_eq!(d.sync, SyncSettings::default(), "-1: no limit");
    assert!(d.pause && d.failsafe_mode);
    assert_eq!(d.use_pg_rewind, Some(false));
    let p = d.parameters.unwrap();
    assert_eq!(p["work_mem"], "5MB");
    assert_eq!(p["max_connections"], "60");
    assert_eq!(p["wal_log_hints"], "on");
    assert!(!p.contains_key("port") && !p.contains_key("hot_standby"));
    assert_eq!(d.ignored, ["hot_standby", "port"]);
    assert_eq!(d.pg_hba.unwrap().len(), 1);
}

#[test]
fn lease_arithmetic_that_breaks_is_refused_naming_the_rule() {
    let e = refused(json!({"ttl": 30, "loop_wait": 20, "retry_timeout": 10}));
    assert!(
        matches!(
            e,
            DynamicError::Timing(TimingError::LoopTooSlowForTtl { .. })
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("2 * retry_timeout"), "{e}");
    // The store's ttl with the file's loop_wait/retry_timeout (5 s each): 5 + 2*5 > 12.
    let e = refused(json!({"ttl": 12}));
    assert!(e.to_string().contains("must not exceed ttl"), "{e}");
}

/// Issue 13 item 8: huge numbers in the store's `config` key (or a PATCH /config) fail with the bound.
#[test]
fn huge_durations_in_the_config_key_name_the_bound() {
    for (v, key) in [
        (json!({"ttl": 1e300}), "ttl"),
        (json!({"loop_wait": 9_223_372_036_854_776_u64}), "loop_wait"),
        (json!({"retry_timeout": "604801"}), "retry_timeout"),
        (
            json!({"primary_start_timeout": 1e18}),
            "primary_start_timeout",
        ),
    ] {
        let e = refused(v.clone()).to_string();
        assert!(e.contains(key) && e.contains("604800"), "{v}: {e}");
    }
}

#[test]
fn negative_absurd_and_mistyped_values_are_refused_naming_the_key() {
    for (v, key) in [
        (json!({"loop_wait": -1}), "loop_wait"),
        (json!({"ttl": 100_000_000}), "ttl"),
        (json!({"retry_timeout": "soon"}), "retry_timeout"),
        (
            json!({"maximum_lag_on_failover": -5}),
            "maximum_lag_on_failover",
        ),
        (
            json!({"primary_start_timeout": [1]}),
            "primary_start_timeout",
        ),
        (json!({"pause": "maybe"}), "pause"),
        (
            json!({"postgresql": {"parameters": ["work_mem"]}}),
            "postgresql.parameters",
        ),
        (
            json!({"postgresql": {"parameters": {"work_mem": {"a": 1}}}}),
            "postgresql.parameters.work_mem",
        ),
        (
            json!({"postgresql": {"parameters": {"wal_level": "minimal"}}}),
            "postgresql.parameters.wal_level",
        ),
        (
            json!({"postgresql": {"parameters": {"max_connections": 3}}}),
            "postgresql.parameters.max_connections",
        ),
        (
            json!({"postgresql": {"pg_hba": "host all"}}),
            "postgresql.pg_hba",
        ),
        (
            json!({"postgresql": {"use_pg_rewind": "sometimes"}}),
            "postgresql.use_pg_rewind",
        ),
        (json!([1, 2]), "config"),
    ] {
        let e = refused(v.clone());
        assert!(
            matches!(&e, DynamicError::Invalid { key: k, .. } if k == key),
            "{v}: {e:?}"
        );
        assert!(e.to_string().starts_with(key), "{e}");
    }
}

#[test]
fn the_store_wins_for_cluster_wide_keys_and_the_file_for_its_own_parameters() {
    let c = file(FILE);
    let d = DynamicSettings::parse(&json!({
        "ttl": 40, "loop_wait": 2, "maximum_lag_on_failover": 7, "primary_start_timeout": 0,
        "postgresql": {"use_pg_rewind": false,
                       "parameters": {"work_mem": "5MB", "max_connections": 60, "shared_buffers": "1GB"}}
    }))
    .unwrap();
    let e = c.effective(&c.core_config(), &d).unwrap();
    let t = e.core.timing;
    assert_eq!(
        (
            t.ttl_ms,
            t.session_ttl_ms,
            t.loop_wait_ms,
            t.retry_timeout_ms
        ),
        (40_000, 40_000, 2_000, 5_000),
        "absent keys keep the file's bootstrap.dcs value"
    );
    assert_eq!(e.core.maximum_lag_on_failover_bytes, 7);
    assert_eq!(e.core.primary_start_timeout_ms, 0);
    assert!(
        !e.core.use_pg_rewind,
        "the file does not set it: the store's"
    );
    let p = &e.pg.parameters;
    assert_eq!(p["work_mem"], "5MB", "from the store");
    assert_eq!(p["shared_buffers"], "16MB", "the file's own parameter wins");
    assert_eq!(p["maintenance_work_mem"], "32MB");
    assert_eq!(p["max_connections"], "60", "protected: the store wins");
    assert!(
        !p.contains_key("wal_keep_size"),
        "bootstrap.dcs only seeds the key: once it has parameters, those are the cluster's"
    );
}

#[test]
fn a_key_without_parameters_keeps_the_files_and_bootstrap_parameters() {
    let c = file(FILE);
    let e = c
        .effective(
            &c.core_config(),
            &DynamicSettings::parse(&json!({"pause": true})).unwrap(),
        )
        .unwrap();
    assert_eq!(e.pg.parameters, c.pg_settings().parameters);
    assert_eq!(e.core, c.core_config());
}

#[test]
fn on_consul_the_session_ttl_is_half_the_stores_ttl() {
    let c = file(&FILE.replace(
        "etcd3: {hosts: 127.0.0.1:2379}",
        "consul: {host: 127.0.0.1:8500}",
    ));
    let d = DynamicSettings::parse(&json!({"ttl": 40})).unwrap();
    let t = c.effective(&c.core_config(), &d).unwrap().core.timing;
    assert_eq!(t.session_ttl_ms, 20_000);
    // loop_wait 5 + retry 5 + fence 2 = 12 > 9.9 (ttl 20 → session 10 less 1 %): refused on Consul only.
    let e = c.check_dynamic(&json!({"ttl": 20})).unwrap_err();
    assert!(
        matches!(
            e,
            DynamicError::Timing(TimingError::RenewalCannotLand { .. })
        ),
        "{e:?}"
    );
    assert!(file(FILE).check_dynamic(&json!({"ttl": 20})).is_ok());
}

/// Patroni's rule for the protected parameters on a replica: a value lower than the primary's (from
/// `pg_controldata`) is raised to it at start, so the hot standby starts; a higher one stays.
#[test]
fn a_replica_starts_with_at_least_the_primarys_max_connections() {
    let text = include_str!("../src/pg/testdata/controldata_primary_shut_down.txt").replace(
        "max_connections setting:              100",
        "max_connections setting:              120",
    );
    let cd = tenure::pg::controldata::ControlData::parse(&text).unwrap();
    assert_eq!(cd.primary_minimums["max_connections"], 120);
    let mut pg = file(FILE).pg_settings();
    assert_eq!(pg.parameters["max_connections"], "40");
    pg.parameters
        .insert("max_locks_per_transaction".into(), "128".into());
    let raised = tenure::pg::config::raised_to_primary(&pg, &cd);
    assert_eq!(raised.parameters["max_connections"], "120");
    assert_eq!(
        raised.parameters["max_locks_per_transaction"], "128",
        "higher than the primary's: kept"
    );
    assert!(
        !raised.parameters.contains_key("max_worker_processes"),
        "unset and equal to the default"
    );
}

/// `synchronous_mode` (`true`/`on`/`off`, and Patroni 4's `quorum`: quorum mode, on as well),
/// `synchronous_mode_strict`, `synchronous_node_count` (at least 1) and `maximum_lag_on_syncnode`
/// (bytes, `-1` no limit) are read, and a value the agents could not use is refused naming the key.
#[test]
fn synchronous_mode_keys_are_read_and_checked() {
    let d = DynamicSettings::parse(
        &json!({"synchronous_mode": "on", "synchronous_mode_strict": true,
        "synchronous_node_count": "2", "maximum_lag_on_syncnode": 1048576}),
    )
    .unwrap();
    let want = SyncSettings {
        quorum: false,
        enabled: true,
        strict: true,
        node_count: 2,
        max_lag_bytes: Some(1_048_576),
    };
    assert_eq!(d.sync, want);
    for (on, quorum) in [
        (json!(true), false),
        (json!("on"), false),
        (json!("quorum"), true),
        (json!("QUORUM"), true),
    ] {
        let d = DynamicSettings::parse(&json!({ "synchronous_mode": on })).unwrap();
        assert!(d.sync.enabled, "{on}");
        assert_eq!(d.sync.quorum, quorum, "{on}");
    }
    assert!(
        !DynamicSettings::parse(&json!({"synchronous_mode": "off"}))
            .unwrap()
            .sync
            .enabled
    );
    assert_eq!(
        DynamicSettings::parse(&json!({})).unwrap().sync,
        SyncSettings::default()
    );
    for (v, key) in [
        (json!({"synchronous_mode": "maybe"}), "synchronous_mode"),
        // Patroni compares the word as written (`str(v).lower() == 'quorum'`): padded, it is neither.
        (json!({"synchronous_mode": " quorum"}), "synchronous_mode"),
        (
            json!({"synchronous_mode_strict": "x"}),
            "synchronous_mode_strict",
        ),
        (
            json!({"synchronous_node_count": 0}),
            "synchronous_node_count",
        ),
        (
            json!({"synchronous_node_count": "two"}),
            "synchronous_node_count",
        ),
        (
            json!({"maximum_lag_on_syncnode": -2}),
            "maximum_lag_on_syncnode",
        ),
    ] {
        let e = refused(v.clone()).to_string();
        assert!(e.contains(key), "{v}: {e}");
    }
}

/// Issue 29 item 4: a name or value that would add a line to tenure.conf is refused naming the key; names
/// are PostgreSQL's, case-insensitive, so `Port` is `port` (never from the store) and not a second line.
#[test]
fn names_and_values_that_would_add_a_line_are_refused_and_names_are_lowercase() {
    for (v, key) in [
        (
            json!({"postgresql": {"parameters": {"work_mem = '5MB'\narchive_command": "x"}}}),
            "postgresql.parameters.\"work_mem = '5MB'\\narchive_command\"",
        ),
        (
            json!({"postgresql": {"parameters": {"work_mem": "5MB'\narchive_command = 'x"}}}),
            "postgresql.parameters.work_mem",
        ),
        (
            json!({"postgresql": {"parameters": {"work_mem": "1MB", "WORK_MEM": "2MB"}}}),
            "postgresql.parameters.work_mem",
        ),
    ] {
        let e = refused(v.clone());
        assert!(
            matches!(&e, DynamicError::Invalid { key: k, .. } if k == key),
            "{v}: {e:?}"
        );
    }
    let d = DynamicSettings::parse(
        &json!({"postgresql": {"parameters": {"Port": 1, "Work_Mem": "5MB"}}}),
    )
    .unwrap();
    assert_eq!(d.ignored, ["port"]);
    assert_eq!(d.parameters.unwrap()["work_mem"], "5MB");
}

/// Issue 29 item 5: parameters that run code come from the store only where the file allows them: named in
/// `postgresql.parameters_from_store_allowed`, or the very value of the file's `bootstrap.dcs`; the file's
/// own `postgresql.parameters` win as always. Otherwise the file's value stays and PATCH is refused.
#[test]
fn parameters_that_run_code_come_from_the_store_only_where_the_file_allows_them() {
    let base = FILE.replace(
        "parameters: {work_mem: 4MB, max_connections: 50, wal_keep_size: 256MB}",
        "parameters: {work_mem: 4MB, shared_preload_libraries: pg_stat_statements}",
    );
    let store = |params: serde_json::Value| json!({"postgresql": {"parameters": params}});
    let run = |c: &Config, v: &serde_json::Value| {
        let d = DynamicSettings::parse(v).unwrap();
        let e = c.effective(&c.core_config(), &d).unwrap();
        (e.pg.parameters, c.check_dynamic(v).map(|_| ()))
    };

    let c = file(&base);
    let (p, check) = run(
        &c,
        &store(json!({"ARCHIVE_COMMAND": "/bin/evil", "work_mem": "5MB"})),
    );
    assert!(!p.contains_key("archive_command"), "{p:?}");
    assert_eq!(p["work_mem"], "5MB");
    let e = check.unwrap_err().to_string();
    assert!(
        e.starts_with("postgresql.parameters.archive_command: runs code"),
        "{e}"
    );
    assert!(e.contains("parameters_from_store_allowed"), "{e}");

    // The bootstrap value itself is taken; another one is not, and the file's bootstrap value stays.
    let (p, check) = run(
        &c,
        &store(json!({"shared_preload_libraries": "pg_stat_statements"})),
    );
    assert_eq!(
        (p["shared_preload_libraries"].as_str(), check),
        ("pg_stat_statements", Ok(()))
    );
    let (p, check) = run(&c, &store(json!({"shared_preload_libraries": "evil"})));
    assert_eq!(p["shared_preload_libraries"], "pg_stat_statements");
    assert!(check.is_err());

    let allowing = base.replace(
        "  parameters: {shared_buffers",
        "  parameters_from_store_allowed: [Archive_Command, shared_preload_libraries]\n  parameters: {shared_buffers",
    );
    let c = file(&allowing);
    let (p, check) = run(
        &c,
        &store(
            json!({"archive_command": "/bin/archive %p", "shared_preload_libraries": "auto_explain"}),
        ),
    );
    assert_eq!(p["archive_command"], "/bin/archive %p");
    assert_eq!(p["shared_preload_libraries"], "auto_explain");
    assert_eq!(check, Ok(()));

    let local = base.replace(
        "maintenance_work_mem: 32MB}",
        "maintenance_work_mem: 32MB, archive_command: /bin/local}",
    );
    let c = file(&local);
    let (p, check) = run(&c, &store(json!({"archive_command": "/bin/evil"})));
    assert_eq!(
        (p["archive_command"].as_str(), check),
        ("/bin/local", Ok(()))
    );
}

/// A store's `pg_hba` line that admits clients without a password (`trust`, `ident`) would let a store writer in as
/// the superuser, and so run programs on every member: taken only where the file allows it (`pg_hba` in
/// `postgresql.parameters_from_store_allowed`), or when the file sets its own `pg_hba` (which wins anyway).
#[test]
fn a_pg_hba_from_the_store_that_admits_without_a_password_is_taken_only_where_the_file_allows_it() {
    let hba = |lines: serde_json::Value| json!({"postgresql": {"pg_hba": lines}});
    let trusting = hba(json!([
        "local all all scram-sha-256",
        "host all all 0.0.0.0/0 trust"
    ]));
    let run = |c: &Config, v: &serde_json::Value| {
        let d = DynamicSettings::parse(v).unwrap();
        let e = c.effective(&c.core_config(), &d).unwrap();
        (e.pg.pg_hba, c.check_dynamic(v).map(|_| ()))
    };

    let c = file(FILE);
    let (lines, check) = run(&c, &trusting);
    assert!(!lines.iter().any(|l| l.contains("trust")), "{lines:?}");
    let e = check.unwrap_err().to_string();
    assert!(
        e.starts_with("postgresql.pg_hba[1]: admits clients without a password (trust)"),
        "{e}"
    );
    let (lines, check) = run(&c, &hba(json!(["host all all 10.0.0.0/8 IDENT"])));
    assert!(lines.is_empty(), "{lines:?}");
    assert!(check.is_err());
    let (lines, check) = run(&c, &hba(json!(["host all all 10.0.0.0/8 scram-sha-256"])));
    assert_eq!((lines.len(), check), (1, Ok(())));

    let allowing = FILE.replace(
        "  parameters: {shared_buffers",
        "  parameters_from_store_allowed: [pg_hba]\n  parameters: {shared_buffers",
    );
    let c = file(&allowing);
    let (lines, check) = run(&c, &trusting);
    assert_eq!((lines.len(), check), (2, Ok(())));

    // A line break in a line would add a line nobody checked: the whole value is refused.
    let e = refused(hba(json!([
        "host all all 10.0.0.0/8 scram-sha-256\nhost all all 0/0 trust"
    ])));
    assert!(
        e.to_string()
            .starts_with("postgresql.pg_hba[0]: holds the control character"),
        "{e}"
    );
}

/// The file's own names and values become lines too: a line break there stops the agent at start (64).
#[test]
fn the_files_parameters_allow_list_and_name_pass_the_grammar() {
    let cases = [
        (
            FILE.replace(
                "shared_buffers: 16MB",
                "\"shared_buffers = 1\\nfsync\": 16MB",
            ),
            "postgresql.parameters.\"shared_buffers = 1\\nfsync\"",
        ),
        (
            FILE.replace("work_mem: 4MB", "work_mem: \"4MB\\nfsync = off\""),
            "bootstrap.dcs.postgresql.parameters.\"work_mem\"",
        ),
        (
            FILE.replace(
                "  parameters: {shared",
                "  parameters_from_store_allowed: [\"a b\"]\n  parameters: {shared",
            ),
            "postgresql.parameters_from_store_allowed[0]",
        ),
        (FILE.replace("name: pg1", "name: \"pg1\\nx\""), "name"),
    ];
    for (text, key) in cases {
        match config::parse(&text, Path::new("t.yml"), &BTreeMap::new()) {
            Ok(_) => panic!("{key}: accepted"),
            Err(e) => assert!(e.to_string().contains(key), "{key}: {e}"),
        }
    }
    let warned = FILE.replace(
        "  parameters: {shared",
        "  parameters_from_store_allowed: [work_mem]\n  parameters: {shared",
    );
    let loaded = config::parse(&warned, Path::new("t.yml"), &BTreeMap::new()).unwrap();
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| format!("{w:?}").contains("parameters_from_store_allowed")),
        "{:?}",
        loaded.warnings
    );
}

/// `standby_cluster` in the key: what the agents can follow is taken, the rest refused naming the key (422
/// through `PATCH /config`); null or absent is no standby cluster.
#[test]
fn standby_cluster_values_are_checked() {
    for ok in [
        json!({"standby_cluster": {"host": "10.1.0.5", "port": 5433, "create_replica_methods": ["basebackup"]}}),
        json!({"standby_cluster": {"host": "10.1.0.5", "port": "5433", "primary_slot_name": "dr"}}),
        json!({"standby_cluster": null}),
    ] {
        assert!(DynamicSettings::parse(&ok).is_ok(), "{ok}");
    }
    for (bad, key) in [
        (json!({"standby_cluster": "10.1.0.5"}), "standby_cluster"),
        (
            json!({"standby_cluster": {"host": "h", "port": 70000}}),
            "standby_cluster.port",
        ),
        (
            json!({"standby_cluster": {"host": ["h"]}}),
            "standby_cluster.host",
        ),
        (
            json!({"standby_cluster": {"restore_command": "true\narchive_command = 'x'"}}),
            "standby_cluster.restore_command",
        ),
    ] {
        let e = DynamicSettings::parse(&bad)
            .expect_err("refused")
            .to_string();
        assert!(e.starts_with(key), "{bad}: {e}");
    }
}

/// The two-site keys from the store: a URL that is not http(s), one with credentials, too many, or a
/// handover token that is not one are refused (422 for PATCH /config); good ones pass.
#[test]
fn peer_sites_and_handover_from_the_store_are_checked() {
    use serde_json::json;
    use tenure::config::dynamic::DynamicSettings;
    let ok = [
        json!({"peer_sites": ["http://10.2.0.1:8008", "https://b2:8008/"]}),
        json!({"handover": {"timeline": 3, "lsn": "0/5000028"}}),
        json!({"peer_sites": null, "handover": null}),
    ];
    for v in ok {
        assert!(DynamicSettings::parse(&v).is_ok(), "{v} refused");
    }
    let many: Vec<String> = (0..17).map(|i| format!("http://10.2.0.{i}:8008")).collect();
    let bad = [
        (json!({"peer_sites": ["file:///etc/shadow"]}), "peer_sites"),
        (
            json!({"peer_sites": ["http://u:p@10.2.0.1:8008"]}),
            "peer_sites",
        ),
        (json!({"peer_sites": "http://10.2.0.1:8008"}), "peer_sites"),
        (json!({ "peer_sites": many }), "peer_sites"),
        (
            json!({"handover": {"timeline": 0, "lsn": "0/1"}}),
            "handover",
        ),
        (
            json!({"handover": {"timeline": 2, "lsn": "nope"}}),
            "handover",
        ),
        (json!({"handover": "2:0/1"}), "handover"),
    ];
    for (v, key) in bad {
        let err = DynamicSettings::parse(&v).expect_err(&v.to_string());
        assert!(err.to_string().contains(key), "{v}: {err}");
    }
}

/// `slots`, `ignore_slots` and `member_slots_ttl` in the key: store values are data, so a name outside
/// PostgreSQL's slot-name grammar, a logical slot or an unreadable ttl is refused naming the key (422 through
/// `PATCH /config`).
#[test]
fn slot_values_are_checked() {
    for ok in [
        json!({"slots": {"dr_site": {"type": "physical"}, "b": null}}),
        json!({"ignore_slots": [{"name": "x", "type": "physical"}, {"database": "app", "plugin": "pgoutput"}]}),
        json!({"member_slots_ttl": 0}),
        json!({"member_slots_ttl": "30min"}),
        json!({"slots": null, "ignore_slots": null, "member_slots_ttl": null}),
    ] {
        assert!(DynamicSettings::parse(&ok).is_ok(), "{ok}");
    }
    for (bad, key) in [
        (json!({"slots": {"x'; DROP": {}}}), "slots.x'; DROP"),
        (json!({"slots": {"a".repeat(64): null}}), "slots.aaaa"),
        (
            json!({"slots": {"dr": {"type": "logical", "database": "d", "plugin": "p"}}}),
            "slots.dr.",
        ),
        (json!({"slots": {"dr": "physical"}}), "slots.dr"),
        (json!({"slots": ["dr"]}), "slots"),
        (json!({"ignore_slots": {"name": "x"}}), "ignore_slots"),
        (
            json!({"ignore_slots": [{"name": "X!"}]}),
            "ignore_slots[0].name",
        ),
        (
            json!({"ignore_slots": [{"plugin": "p\nx = 1"}]}),
            "ignore_slots[0].plugin",
        ),
        (json!({"member_slots_ttl": -1}), "member_slots_ttl"),
        (json!({"member_slots_ttl": "soon"}), "member_slots_ttl"),
    ] {
        let e = DynamicSettings::parse(&bad)
            .expect_err("refused")
            .to_string();
        assert!(e.starts_with(key), "{bad}: {e}");
    }
}
