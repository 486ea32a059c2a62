//! The config loader: the template, defaults, every error path, ignored keys, env overrides, and the CLI's exit codes.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tenure::config::{self, ConfigError, ConfigErrors, Loaded, Store, VerifyClient};
use tenure::ha::WatchdogMode;

#[path = "config/hardening.rs"]
mod hardening;
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
        (consul.scope.as_str(), consul.name.as_str(), consul.ttl_ms),
        ("main", "pg1", 30_000)
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
    assert_eq!(api.ttl_ms, 30_000);
    assert!(c.fencer.enabled);
    assert_eq!(c.fencer.fast_stop_timeout_ms, 1_000);
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

#[test]
fn validate_config_exits_0_or_64_naming_file_and_key() {
    let t = template();
    let (code, out, _) = tenure(&["agent", "--validate-config", t.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "config OK"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        format!("{BASE}bootstrap:\n  dcs:\n    loop_waitt: 5\n"),
    )
    .unwrap();
    let (code, out, err) = tenure(&["agent", "--validate-config", bad.to_str().unwrap()]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(
        err.contains("bad.yml") && err.contains("bootstrap.dcs.loop_waitt"),
        "{err}"
    );
    assert!(!out.contains("config OK"));

    let warned = dir.path().join("warned.yml");
    std::fs::write(
        &warned,
        base_with("postgresql.basebackup", "{max-rate: 100M}"),
    )
    .unwrap();
    let (code, out, err) = tenure(&["agent", "--validate-config", warned.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "config OK"), "{err}");
    assert!(
        err.contains("warning") && err.contains("postgresql.basebackup"),
        "{err}"
    );

    let (code, _, err) = tenure(&["agent", "--validate-config", "/nonexistent/tenure.yml"]);
    assert_eq!(code, 64);
    assert!(err.contains("/nonexistent/tenure.yml"), "{err}");
}

#[test]
fn cli_usage_exit_codes() {
    assert_eq!(tenure(&["agent"]).0, 64, "agent needs a file");
    assert_eq!(tenure(&["no-such-command"]).0, 64);
    assert_eq!(tenure(&["--help"]).0, 0);
    // Operator commands need the agent's config file to find the store and the REST API.
    for cmd in ["list", "pause", "resume", "history"] {
        let (code, _, err) = tenure(&[cmd]);
        assert_eq!(code, 64, "{cmd}: {err}");
        assert!(err.contains("--config"), "{cmd}: {err}");
    }
    let t = template();
    let (code, _, err) = tenure(&["agent", "--config", t.to_str().unwrap()]);
    if nix::unistd::geteuid().is_root() {
        assert_eq!(code, 64, "{err}");
        assert!(err.contains("PostgreSQL refuses to run as root"), "{err}");
    }
}

#[test]
fn fencer_and_watchdog_rules() {
    let e = err(&base_with("tenure.fencer", "{enabled: false}"));
    assert!(
        e.contains("tenure.fencer.enabled") && e.contains("watchdog.mode: required"),
        "{e}"
    );
    let text = base_with("tenure.fencer", "{enabled: false}");
    let c = ok(&(text + "watchdog: {mode: required}\n")).config;
    assert!(!c.fencer.enabled);
    assert_eq!(c.core_config().watchdog, WatchdogMode::Required);
    let e = err(&base_with("tenure.fencer.fast_stop_timeout", "2"));
    assert!(
        e.contains("tenure.fencer.fast_stop_timeout") && e.contains("fence_budget"),
        "{e}"
    );
    let c = ok(&base_with("watchdog", "{mode: 'off', safety_margin: -1}")).config;
    assert_eq!(
        (c.watchdog.mode, c.watchdog.timeout_ms(30_000)),
        (WatchdogMode::Off, 15_000)
    );
    let e = err(&base_with("watchdog.safety_margin", "28"));
    assert!(
        e.contains("watchdog.safety_margin") && e.contains("loop_wait"),
        "{e}"
    );
}

#[test]
fn a_consul_ttl_below_20_s_is_a_warning() {
    let loaded = ok(&base_with(
        "bootstrap.dcs",
        "{ttl: 16, loop_wait: 2, retry_timeout: 2}",
    ));
    assert_eq!(loaded.config.timing().session_ttl_ms, 8_000);
    let w: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        w.iter()
            .any(|w| w.contains("bootstrap.dcs.ttl") && w.contains("10 s")),
        "{w:?}"
    );
}

#[test]
fn store_addresses_as_patroni_writes_them() {
    let c = ok(&base_with(
        "consul",
        "{host: 'c1', port: 8501, scheme: https, token: t}",
    ))
    .config;
    let s = c.consul_settings().unwrap();
    assert_eq!(
        (s.url.as_str(), s.token.as_deref()),
        ("https://c1:8501", Some("t"))
    );
    let etcd = base_without("consul");
    let vars = env(&[
        ("TENURE_ETCD3_HOSTS", "['e1:2379','e2']"),
        ("TENURE_ETCD3_PROTOCOL", "https"),
        ("TENURE_ETCD3_CACERT", "/etc/etcd/ca.pem"),
    ]);
    let s = parse_with(&etcd, &vars)
        .unwrap()
        .config
        .etcd_settings()
        .unwrap();
    assert_eq!(s.endpoints, ["https://e1:2379", "https://e2:2379"]);
    let text = etcd + "etcd3: {hosts: [e1], username: u}\n";
    assert!(err(&text).contains("etcd3.username"));
}

#[test]
fn failsafe_settings_parse_and_a_timeout_that_cannot_land_is_refused() {
    let c = ok(&base_with("tenure.failsafe_timeout", "1.5")).config;
    assert_eq!(c.core_config().failsafe_timeout_ms, 1_500);
    assert!(!c.bootstrap_failsafe_mode);
    let c = ok(&base_with("bootstrap.dcs.failsafe_mode", "true"));
    assert!(c.config.bootstrap_failsafe_mode);
    assert!(
        c.warnings
            .iter()
            .all(|w| !w.to_string().contains("failsafe")),
        "failsafe_mode is no longer ignored"
    );
    let e = err(&base_with("tenure.failsafe_timeout", "60"));
    assert!(e.contains("tenure.failsafe_timeout"), "{e}");
    assert!(e.contains("failsafe"), "{e}");
}

/// etcd over TLS, as Patroni reads it: certificates without a protocol mean https; a half identity, an
/// https endpoint without a CA, or certificates with an explicit http endpoint are refused by key.
#[test]
fn etcd_tls_settings_and_their_refusals() {
    let etcd = |body: &str| base_without("consul") + &format!("etcd3: {{{body}}}\n");
    let c = ok(&etcd(
        "hosts: 'a:2379,b', cacert: /etc/ca.pem, cert: /etc/c.pem, key: /etc/k.pem",
    ))
    .config;
    let s = c.etcd_settings().unwrap();
    assert_eq!(s.endpoints, ["https://a:2379", "https://b:2379"]);
    let tls = s.tls.as_ref().expect("tls");
    assert_eq!(tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert_eq!(tls.key_file.as_deref(), Some(Path::new("/etc/k.pem")));

    let e = err(&etcd("hosts: a, cacert: /etc/ca.pem, cert: /etc/c.pem"));
    assert!(
        e.contains("etcd3.cert") && e.contains("etcd3.key go together"),
        "{e}"
    );
    let e = err(&etcd("hosts: a, protocol: https"));
    assert!(
        e.contains("etcd3.cacert") && e.contains("trust store"),
        "{e}"
    );
    let e = err(&etcd("hosts: 'http://a:2379', cacert: /etc/ca.pem"));
    assert!(e.contains("etcd3.hosts") && e.contains("plain http"), "{e}");
}

#[test]
fn hooks_are_split_as_patroni_splits_them() {
    let mut doc: yaml_serde::Value = yaml_serde::from_str(BASE).unwrap();
    let pg = doc["postgresql"].as_mapping_mut().unwrap();
    let hooks: yaml_serde::Value = yaml_serde::from_str(
        "{callbacks: {on_start: \"/usr/local/bin/cb.sh 'a b'\", on_role_change: /usr/local/bin/cb.sh}, \
         pre_promote: /usr/local/bin/fence.sh --check, before_stop: /bin/sync}",
    )
    .unwrap();
    pg.extend(hooks.as_mapping().unwrap().clone());
    let text = yaml_serde::to_string(&doc).unwrap();
    let c = ok(&text).config;
    let hooks = &c.local_pg.hooks;
    assert_eq!(
        hooks.callbacks.get(&tenure::ha::CallbackEvent::OnStart),
        Some(&vec!["/usr/local/bin/cb.sh".to_string(), "a b".to_string()])
    );
    assert_eq!(hooks.callbacks.len(), 2);
    assert_eq!(
        hooks.pre_promote,
        Some(vec!["/usr/local/bin/fence.sh".into(), "--check".into()])
    );
    assert_eq!(hooks.before_stop, Some(vec!["/bin/sync".into()]));
    let core = c.core_config();
    assert!(core.hooks.callbacks && core.hooks.pre_promote && core.hooks.before_stop);
}

#[test]
fn a_bad_hook_names_its_key() {
    let e = err(&base_with(
        "postgresql.callbacks",
        "{on_promote: /bin/true}",
    ));
    assert!(e.contains("on_promote"), "{e}");
    let e = err(&base_with("postgresql.pre_promote", "\"/bin/fence 'x\""));
    assert!(
        e.contains("postgresql.pre_promote") && e.contains("unclosed quote"),
        "{e}"
    );
}

/// `bootstrap.dcs`'s synchronous-replication keys are read (no longer ignored), checked, and carried into
/// the `config` key a new cluster's leader uploads; `quorum` (Patroni 4's quorum commit) is uploaded as the
/// word `quorum`, which the agents read as quorum mode.
#[test]
fn synchronous_mode_keys_are_carried_into_the_bootstrap_config() {
    let text = base_with(
        "bootstrap.dcs",
        "{synchronous_mode: on, synchronous_mode_strict: true, \
         synchronous_node_count: 2, maximum_lag_on_syncnode: -1}",
    );
    let c = ok(&text);
    assert!(
        c.warnings
            .iter()
            .all(|w| !w.to_string().contains("synchronous") && !w.to_string().contains("syncnode")),
        "{:?}",
        c.warnings
    );
    let uploaded = serde_json::Value::Object(c.config.bootstrap_sync.json());
    assert_eq!(
        uploaded,
        serde_json::json!({"synchronous_mode": true, "synchronous_mode_strict": true,
                           "synchronous_node_count": 2, "maximum_lag_on_syncnode": -1})
    );
    let d = tenure::config::dynamic::DynamicSettings::parse(&uploaded).unwrap();
    assert!(d.sync.enabled && d.sync.strict && d.sync.node_count == 2);
    assert!(!d.sync.quorum, "on is priority mode");
    let quorum = ok(&base_with("bootstrap.dcs.synchronous_mode", "Quorum"));
    let uploaded = serde_json::Value::Object(quorum.config.bootstrap_sync.json());
    assert_eq!(uploaded, serde_json::json!({"synchronous_mode": "quorum"}));
    let d = tenure::config::dynamic::DynamicSettings::parse(&uploaded).unwrap();
    assert!(d.sync.enabled && d.sync.quorum, "{:?}", d.sync);
    let off = ok(&base_with("bootstrap.dcs.synchronous_mode", "off"));
    assert_eq!(
        off.config.bootstrap_sync.json().get("synchronous_mode"),
        Some(&serde_json::json!(false))
    );
    let none = ok(BASE);
    assert!(
        none.config.bootstrap_sync.json().is_empty(),
        "nothing set, nothing uploaded"
    );
    for (key, value) in [
        ("bootstrap.dcs.synchronous_mode", "maybe"),
        ("bootstrap.dcs.synchronous_node_count", "0"),
        ("bootstrap.dcs.maximum_lag_on_syncnode", "-2"),
    ] {
        let e = err(&base_with(key, value));
        assert!(e.contains(key), "{key}: {e}");
    }
}

/// The `nosync` tag is a flag like `nofailover`: it reaches the member key, and a value that is not
/// true or false is refused.
#[test]
fn the_nosync_tag_is_a_flag() {
    let c = ok(&base_with("tags", "{nosync: true}")).config;
    assert_eq!(c.tags.get("nosync"), Some(&serde_json::json!(true)));
    let e = err(&base_with("tags", "{nosync: perhaps}"));
    assert!(e.contains("tags.nosync"), "{e}");
}
