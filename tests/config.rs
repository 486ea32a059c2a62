//! The config loader: the template, defaults, every error path, ignored keys, env overrides, and the CLI's exit codes.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tenure::config::{self, ConfigError, ConfigErrors, Loaded, Store, VerifyClient};
use tenure::ha::WatchdogMode;

#[path = "config/cli_exit.rs"]
mod cli_exit;
#[path = "config/features.rs"]
mod features;
#[path = "config/hardening.rs"]
mod hardening;
#[path = "config/pgbouncer.rs"]
mod pgbouncer;
#[path = "config/tls.rs"]
mod tls;
#[path = "config/yaml_forms.rs"]
mod yaml_forms;

const BASE: &str = "\
scope: main
name: pg1
restapi:
  listen: 127.0.0.1:8008
  authentication: {username: admin, password: secret}
consul:
  host: 127.0.0.1:8500
postgresql:
  data_dir: /var/lib/pg/main
  listen: 127.0.0.1:5432
  authentication:
    superuser: {username: postgres, password: s}
    replication: {username: replicator, password: r}
";

fn no_env() -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse_with(text: &str, env: &BTreeMap<String, String>) -> Result<Loaded, ConfigErrors> {
    config::parse(text, Path::new("/etc/tenure/test.yml"), env)
}

fn ok(text: &str) -> Loaded {
    parse_with(text, &no_env()).unwrap_or_else(|e| panic!("expected a valid config, got:\n{e}"))
}

/// The errors, one per line, as the CLI prints them.
fn err(text: &str) -> String {
    err_with(text, &no_env())
}

fn err_with(text: &str, env: &BTreeMap<String, String>) -> String {
    match parse_with(text, env) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// BASE with `key.path: value` set (YAML value), creating maps on the way.
fn base_with(path: &str, value: &str) -> String {
    let mut doc: yaml_serde::Value = yaml_serde::from_str(BASE).unwrap();
    let mut node = &mut doc;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let map = node.as_mapping_mut().expect("a map on the way");
        let key = yaml_serde::Value::from(*part);
        if i + 1 == parts.len() {
            map.insert(key, yaml_serde::from_str(value).unwrap());
            break;
        }
        if !map.contains_key(&key) {
            map.insert(key.clone(), yaml_serde::Value::Mapping(Default::default()));
        }
        node = map.get_mut(&key).unwrap();
    }
    yaml_serde::to_string(&doc).unwrap()
}

/// BASE without one top-level section.
fn base_without(section: &str) -> String {
    let mut doc: yaml_serde::Value = yaml_serde::from_str(BASE).unwrap();
    doc.as_mapping_mut().unwrap().remove(section);
    yaml_serde::to_string(&doc).unwrap()
}

fn template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/tenure.yml")
}

#[test]
fn the_template_parses_into_every_setting() {
    let loaded = config::load(&template(), &no_env()).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = loaded.config;
    assert_eq!(
        (c.scope.as_str(), c.name().as_str(), c.namespace.as_str()),
        ("main", "pg1", "service")
    );
    let consul = c.consul_settings().expect("a consul store");
    assert_eq!(consul.url, "http://127.0.0.1:8500");
    assert_eq!(
        (
            consul.scope.as_str(),
            consul.name.as_str(),
            consul.session_ttl_ms
        ),
        ("main", "pg1", 15_000)
    );
    assert!(c.etcd_settings().is_none());
    let t = c.timing();
    assert_eq!(
        (
            t.ttl_ms,
            t.loop_wait_ms,
            t.retry_timeout_ms,
            t.session_ttl_ms
        ),
        (30_000, 5_000, 5_000, 15_000)
    );
    assert_eq!((t.fence_budget_ms, t.drift_max_ppm), (2_000, 10_000));
    let pg = c.pg_settings();
    assert_eq!((pg.listen_host.as_str(), pg.listen_port), ("0.0.0.0", 5432));
    assert_eq!(pg.connect_address, "10.0.0.11:5432");
    assert_eq!(pg.data_dir, Path::new("/var/lib/postgresql/16/main"));
    assert_eq!(
        pg.bin("pg_ctl"),
        Path::new("/usr/lib/postgresql/16/bin/pg_ctl")
    );
    assert_eq!(pg.rewind.username, "rewinder");
    assert_eq!(
        pg.parameters["max_connections"], "200",
        "from bootstrap.dcs.postgresql"
    );
    assert_eq!(pg.parameters["wal_keep_size"], "1GB", "from postgresql");
    assert_eq!(pg.pg_hba.len(), 5);
    assert_eq!(
        pg.pgpass_path,
        Path::new("/var/lib/postgresql/.pgpass-tenure")
    );
    assert_eq!(pg.pg_ctl_timeout_s, 60);
    assert!(c.initdb.data_checksums);
    assert_eq!(c.initdb.extra, ["--encoding=UTF8", "--locale=C.UTF-8"]);
    let core = c.core_config();
    assert_eq!(core.maximum_lag_on_failover_bytes, 1_048_576);
    assert_eq!(core.primary_start_timeout_ms, 300_000);
    assert!(core.use_pg_rewind && core.can_promote());
    assert_eq!(core.watchdog, WatchdogMode::Automatic);
    assert_eq!(c.tags["rack"], "r1");
    assert_eq!(c.api_url(), "http://10.0.0.11:8008/patroni");
    let api = c.restapi_settings();
    assert_eq!(api.listen.to_string(), "0.0.0.0:8008");
    assert_eq!(
        (api.username.as_deref(), api.password.as_deref()),
        (Some("admin"), Some("change-me"))
    );
    assert!(!api.allow_unauthenticated && api.certfile.is_none());
    assert!(c.fencer.enabled);
}

#[test]
fn a_file_without_timing_keys_is_valid_for_both_stores() {
    let c = ok(BASE).config;
    let t = c.timing();
    assert_eq!(
        (
            t.ttl_ms,
            t.loop_wait_ms,
            t.retry_timeout_ms,
            t.session_ttl_ms
        ),
        (30_000, 5_000, 5_000, 15_000)
    );
    t.validate().unwrap();
    let etcd = base_without("consul") + "etcd3: {hosts: 'a:2379,b'}\n";
    let c = ok(&etcd).config;
    assert_eq!(
        c.timing().session_ttl_ms,
        30_000,
        "etcd's session TTL is the whole ttl"
    );
    let s = c.etcd_settings().unwrap();
    assert_eq!(s.endpoints, ["http://a:2379", "http://b:2379"]);
    assert_eq!(s.namespace, "service");
}

#[test]
fn defaults_where_the_file_is_silent() {
    let c = ok(BASE).config;
    let core = c.core_config();
    assert_eq!(core.failover_priority, 1);
    assert!(!core.nofailover && !core.noloadbalance && core.use_pg_rewind);
    assert!(
        !core.remove_data_directory_on_rewind_failure
            && !core.remove_data_directory_on_diverged_timelines
    );
    let pg = c.pg_settings();
    assert_eq!(
        pg.connect_address, "127.0.0.1:5432",
        "listen's host when it is not a wildcard"
    );
    assert_eq!(
        pg.rewind, pg.superuser,
        "the superuser rewinds without a rewind user"
    );
    assert_eq!(pg.pgpass_path, Path::new("/var/lib/pg/pgpass"));
    assert_eq!(pg.log_file, Path::new("/var/lib/pg/main.log"));
    assert_eq!(pg.bin("initdb"), Path::new("initdb"), "no bin_dir: PATH");
    assert!(pg.run_as.is_none());
    assert!(c.initdb.data_checksums && c.initdb.extra.is_empty());
    assert_eq!(c.watchdog.device, Path::new("/dev/watchdog"));
    assert_eq!(c.watchdog.timeout_ms(30_000), 25_000);
    let with_home = parse_with(BASE, &env(&[("HOME", "/home/pg")])).unwrap();
    assert_eq!(
        with_home.config.pg_settings().pgpass_path,
        Path::new("/home/pg/pgpass"),
        "Patroni's ~/pgpass"
    );
}

#[test]
fn patroni_default_timing_fails_the_consul_rule_with_a_fix() {
    let text = base_with(
        "bootstrap.dcs",
        "{ttl: 30, loop_wait: 10, retry_timeout: 10}",
    );
    let e = err(&text);
    assert!(e.contains("/etc/tenure/test.yml"), "{e}");
    assert!(
        e.contains("bootstrap.dcs.ttl")
            && e.contains("loop_wait")
            && e.contains("tenure.fence_budget"),
        "{e}"
    );
    assert!(
        e.contains("Consul timing rule") && e.contains("session TTL"),
        "{e}"
    );
    assert!(e.contains("Patroni's defaults"), "{e}");
    assert!(e.contains("loop_wait: 5 and retry_timeout: 5"), "{e}");
    assert!(e.contains("raise ttl to 45"), "{e}");
    // The same numbers fit etcd, whose session TTL is the whole ttl.
    let etcd = base_without("consul") + "etcd3: {host: 'e:2379'}\n";
    let etcd = etcd + "bootstrap: {dcs: {ttl: 30, loop_wait: 10, retry_timeout: 10}}\n";
    ok(&etcd);
}

#[test]
fn patronis_own_rule_is_named_too() {
    let e = err(&base_with(
        "bootstrap.dcs",
        "{ttl: 30, loop_wait: 5, retry_timeout: 13}",
    ));
    assert!(
        e.contains("2 * retry_timeout") && e.contains("bootstrap.dcs.ttl"),
        "{e}"
    );
    let e = err(&base_with("tenure.drift_max_ppm", "200000"));
    assert!(e.contains("tenure.drift_max_ppm"), "{e}");
}

#[test]
fn an_unknown_key_is_named_with_its_path_line_and_a_spelling_hint() {
    let e = err(&format!("{BASE}bootstrap:\n  dcs:\n    loop_waitt: 5\n"));
    assert!(e.contains("/etc/tenure/test.yml:"), "line number: {e}");
    assert!(e.contains("unknown key `bootstrap.dcs.loop_waitt`"), "{e}");
    assert!(e.contains("did you mean `loop_wait`?"), "{e}");
    let e = err(&format!("{BASE}ttl: 30\n"));
    assert!(
        e.contains("unknown key `ttl`") && e.contains("did you mean `bootstrap.dcs.ttl`?"),
        "{e}"
    );
    let e = err(&base_with(
        "postgresql.authentication.superuser.usernme",
        "x",
    ));
    assert!(
        e.contains("postgresql.authentication.superuser.usernme") && e.contains("`username`"),
        "{e}"
    );
}

#[test]
fn every_ignored_key_is_a_warning_not_an_error() {
    for (path, why) in config::ignored::IGNORED {
        let path = path.replace('*', "superuser");
        let text = match path.strip_prefix("etcd3.") {
            Some(key) => base_without("consul") + &format!("etcd3: {{host: 'e:2379', {key}: x}}\n"),
            None => base_with(&path, "x"),
        };
        let loaded = parse_with(&text, &no_env())
            .unwrap_or_else(|e| panic!("ignored key {path} was refused: {e}"));
        assert_eq!(loaded.warnings.len(), 1, "{path}: {:?}", loaded.warnings);
        let w = &loaded.warnings[0];
        assert_eq!(w.key, path);
        assert_eq!(w.message, *why);
        let shown = w.to_string();
        assert!(
            shown.contains("/etc/tenure/test.yml") && shown.contains("is ignored"),
            "{shown}"
        );
    }
}

#[test]
fn unsupported_patroni_keys_are_refused_with_the_reason() {
    for (path, why) in config::ignored::UNSUPPORTED {
        let e = err(&base_with(path, "x"));
        assert!(e.contains(path) && e.contains(why), "{path}: {e}");
    }
    let e = err(&base_with("consul.checks", "[serfHealth]"));
    assert!(
        e.contains("consul.checks") && e.contains("checks: []"),
        "{e}"
    );
    ok(&base_with("consul.checks", "[]"));
    let e = err(&base_with("bootstrap.method", "wal_e"));
    assert!(e.contains("bootstrap.method"), "{e}");
}

#[test]
fn exactly_one_store_section() {
    let both = format!("{BASE}etcd3: {{host: 'e:2379'}}\n");
    let e = err(&both);
    assert!(e.contains("consul/etcd3") && e.contains("both"), "{e}");
    let e = err(&base_without("consul"));
    assert!(e.contains("no store section"), "{e}");
    let e = err(&(base_without("consul") + "etcd: {host: 'e:2379'}\n"));
    assert!(e.contains("rename it to `etcd3`"), "{e}");
}

#[test]
fn bad_types_name_the_key_and_line() {
    let e = err(&format!("{BASE}bootstrap:\n  dcs:\n    ttl: thirty\n"));
    assert!(
        e.contains("test.yml:")
            && e.contains("`bootstrap.dcs.ttl`")
            && e.contains("number of seconds"),
        "{e}"
    );
    let e = err(&base_with("postgresql.use_pg_rewind", "'maybe'"));
    assert!(e.contains("postgresql.use_pg_rewind"), "{e}");
    let e = err(&base_with("watchdog.mode", "sometimes"));
    assert!(
        e.contains("watchdog.mode") && e.contains("automatic"),
        "{e}"
    );
    let e = err(&base_with("etcd3.hosts", "{a: 1}"));
    assert!(
        e.contains("etcd3.hosts") && e.contains("comma-separated"),
        "{e}"
    );
    let e = err(&base_with("tags.nofailover", "'perhaps'"));
    assert!(e.contains("tags.nofailover"), "{e}");
    let e = err(&base_with("bootstrap.dcs.ttl", "-5"));
    assert!(e.contains("bootstrap.dcs.ttl"), "{e}");
    let e = err("scope: [unclosed\n");
    assert!(
        e.contains("test.yml") && e.contains("not a valid YAML"),
        "{e}"
    );
}

#[test]
fn required_settings_are_named_with_an_example() {
    let e = err("scope: main\nconsul: {}\n");
    for key in [
        "`name`",
        "restapi.listen",
        "postgresql.data_dir",
        "postgresql.listen",
        "superuser.password",
    ] {
        assert!(e.contains(key), "{key} missing from:\n{e}");
    }
    let e = err(&base_with("postgresql.listen", "0.0.0.0:5432"));
    assert!(e.contains("postgresql.connect_address"), "{e}");
    let e = err(&base_with("postgresql.listen", "127.0.0.1"));
    assert!(e.contains("postgresql.listen") && e.contains("port"), "{e}");
}

#[test]
fn the_rest_api_needs_credentials_unless_opened_explicitly() {
    let e = err(&base_with("restapi", "{listen: 127.0.0.1:8008}"));
    assert!(
        e.contains("restapi.authentication") && e.contains("allow_unauthenticated"),
        "{e}"
    );
    let c = ok(&base_with(
        "restapi",
        "{listen: '*:8008', connect_address: 'db1:8008', token: t}",
    ))
    .config;
    let api = c.restapi_settings();
    assert_eq!(api.listen.to_string(), "0.0.0.0:8008");
    assert_eq!(api.token.as_deref(), Some("t"));
    ok(&base_with(
        "restapi",
        "{listen: 127.0.0.1:8008, allow_unauthenticated: true}",
    ));
    let tls = "{listen: 127.0.0.1:8008, token: t, certfile: c.pem, keyfile: k.pem, cafile: ca.pem, verify_client: required}";
    let c = ok(&base_with("restapi", tls)).config;
    assert_eq!(
        c.restapi.tls.as_ref().unwrap().verify_client,
        VerifyClient::Required
    );
    assert!(c.restapi_settings().verify_client);
    assert_eq!(c.api_url(), "https://127.0.0.1:8008/patroni");
    let e = err(&base_with("restapi.verify_client", "optional"));
    assert!(e.contains("restapi.verify_client"), "{e}");
    let e = err(&base_with("restapi.certfile", "c.pem"));
    assert!(e.contains("restapi.keyfile"), "{e}");
}

#[test]
fn initdb_options_as_patroni_writes_them() {
    let c = ok(&base_with(
        "bootstrap.initdb",
        "[{encoding: UTF8}, data-checksums, {wal-segsize: 32}]",
    ))
    .config;
    assert!(c.initdb.data_checksums);
    assert_eq!(c.initdb.extra, ["--encoding=UTF8", "--wal-segsize=32"]);
    let e = err(&base_with(
        "bootstrap.initdb",
        "[{encoding: UTF8, locale: C}]",
    ));
    assert!(
        e.contains("bootstrap.initdb[0]") && e.contains("exactly one key"),
        "{e}"
    );
    let e = err(&base_with(
        "bootstrap.initdb",
        "[data-checksums, {username: x}]",
    ));
    assert!(
        e.contains("bootstrap.initdb[1]") && e.contains("username"),
        "{e}"
    );
}

#[test]
fn tags_reach_the_core_and_the_member_key() {
    let tags = "{nofailover: true, failover_priority: 3, noloadbalance: 'true', clonefrom: true, dc: east}";
    let loaded = ok(&base_with("tags", tags));
    let core = loaded.config.core_config();
    assert!(core.nofailover && core.noloadbalance && !core.can_promote());
    assert_eq!(core.failover_priority, 3);
    assert!(loaded.config.clonefrom);
    assert_eq!(loaded.config.tags["dc"], "east");
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.key == "tags.failover_priority"),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn environment_overrides_win_and_are_named_in_errors() {
    let vars = env(&[
        ("TENURE_NAME", "pg9"),
        ("TENURE_SCOPE", "other"),
        ("TENURE_RESTAPI_LISTEN", "127.0.0.1:9008"),
        ("TENURE_POSTGRESQL_DATA_DIR", "/data/pg9"),
        ("TENURE_CONSUL_URL", "https://consul.local:8501"),
        ("TENURE_SUPERUSER_PASSWORD", "from-env"),
        ("PATH", "/usr/bin"),
    ]);
    let c = parse_with(BASE, &vars).unwrap().config;
    assert_eq!((c.name().as_str(), c.scope.as_str()), ("pg9", "other"));
    assert_eq!(c.restapi.listen.to_string(), "127.0.0.1:9008");
    let pg = c.pg_settings();
    assert_eq!(pg.data_dir, Path::new("/data/pg9"));
    assert_eq!(pg.superuser.password, "from-env");
    let consul = c.consul_settings().unwrap();
    assert_eq!(
        (consul.url.as_str(), consul.name.as_str()),
        ("https://consul.local:8501", "pg9")
    );

    // A store section may come from the environment alone.
    let etcd = base_without("consul");
    let c = parse_with(&etcd, &env(&[("TENURE_ETCD3_HOSTS", "e1:2379, e2:2379")]))
        .unwrap()
        .config;
    assert_eq!(
        c.etcd_settings().unwrap().endpoints,
        ["http://e1:2379", "http://e2:2379"]
    );

    let e = err_with(BASE, &env(&[("TENURE_RESTAPI_LISTEN", "nowhere")]));
    assert!(
        e.contains("environment variable TENURE_RESTAPI_LISTEN") && e.contains("restapi.listen"),
        "{e}"
    );
    let e = err_with(
        BASE,
        &env(&[("TENURE_RESTAPI_ALLOW_UNAUTHENTICATED", "sure")]),
    );
    assert!(e.contains("TENURE_RESTAPI_ALLOW_UNAUTHENTICATED"), "{e}");

    let loaded = parse_with(
        BASE,
        &env(&[("TENURE_RESTAPI_LISTN", "x"), ("TENURE_SIM_SEED", "1")]),
    )
    .unwrap();
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0]
        .to_string()
        .contains("did you mean TENURE_RESTAPI_LISTEN?"));
}

#[test]
fn every_environment_variable_sets_exactly_its_key() {
    for (var, key, _) in config::ENV {
        let (value, yaml) = match *var {
            "TENURE_RESTAPI_ALLOW_UNAUTHENTICATED" => ("true", "true"),
            "TENURE_RESTAPI_VERIFY_CLIENT" => ("none", "none"),
            "TENURE_CONSUL_CONSISTENCY" => ("stale", "stale"),
            "TENURE_WATCHDOG_MODE" => ("off", "'off'"),
            v if v.contains("LISTEN") || v.contains("ADDRESS") || v.contains("HOST") => {
                ("127.0.0.1:1234", "'127.0.0.1:1234'")
            }
            _ => ("value", "value"),
        };
        let from_file = parse_with(&base_with(key, yaml), &no_env());
        let from_env = parse_with(BASE, &env(&[(var, value)]));
        match (from_file, from_env) {
            (Ok(f), Ok(e)) => assert_eq!(
                format!("{:?}", f.config),
                format!("{:?}", e.config),
                "{var}"
            ),
            (Err(f), Err(e)) => {
                assert_eq!(f.0.len(), e.0.len(), "{var}: {f} / {e}");
                assert!(
                    !f.to_string().contains("unknown key"),
                    "{var}: {key} is not a key: {f}"
                );
            }
            (f, e) => panic!("{var} and {key} disagree: {:?} / {:?}", f.err(), e.err()),
        }
    }
}

#[test]
fn a_config_error_reads_as_file_key_fix() {
    let e = parse_with(&base_with("postgresql.listen", "127.0.0.1"), &no_env()).unwrap_err();
    assert_eq!(e.0.len(), 1);
    match &e.0[0] {
        ConfigError::Invalid { key, fix, .. } => {
            assert_eq!(key, "postgresql.listen");
            assert!(fix.is_some());
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(ok(BASE).config.store, Store::Consul(_)));
}

fn tenure(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .env_clear()
        .output()
        .expect("run tenure");
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        s(&out.stdout),
        s(&out.stderr),
    )
}
