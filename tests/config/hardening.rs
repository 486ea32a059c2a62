//! Issue 13: credentials that open nothing, numbers without bounds, secrets in `Debug` output.
use super::*;

/// An empty username or password would let `Authorization: Basic Og==` (":") through; both are refused.
#[test]
fn empty_credentials_are_refused() {
    for auth in [
        "{username: '', password: secret}",
        "{username: admin, password: ''}",
        "{username: '', password: ''}",
    ] {
        let e = err(&base_with("restapi.authentication", auth));
        assert!(
            e.contains("restapi.authentication") && e.contains("empty"),
            "{auth}: {e}"
        );
    }
    let e = err(&base_with("restapi.token", "''"));
    assert!(e.contains("restapi.token") && e.contains("empty"), "{e}");
}

/// `allow_unauthenticated: true` next to credentials would silently open what the credentials close.
#[test]
fn allow_unauthenticated_with_credentials_is_refused() {
    let e = err(&base_with("restapi.allow_unauthenticated", "true"));
    assert!(
        e.contains("restapi.allow_unauthenticated") && e.contains("restapi.authentication"),
        "{e}"
    );
    let open = base_without("restapi")
        + "restapi: {listen: '127.0.0.1:8008', allow_unauthenticated: true, token: t0k}\n";
    let e = err(&open);
    assert!(e.contains("restapi.allow_unauthenticated"), "{e}");
    let open = base_without("restapi")
        + "restapi: {listen: '127.0.0.1:8008', allow_unauthenticated: true}\n";
    assert!(ok(&open).config.restapi.auth.allow_unauthenticated);
}

/// Durations from the file have an upper bound, named in the error (no saturating or overflowing casts).
#[test]
fn huge_durations_fail_with_the_bound() {
    for (key, value) in [
        ("bootstrap.dcs.ttl", "1e300"),
        ("bootstrap.dcs.loop_wait", "9223372036854776"),
        ("bootstrap.dcs.retry_timeout", "604801"),
        ("postgresql.pg_ctl_timeout", "1e20"),
        ("tenure.fence_budget", "1e300"),
    ] {
        let e = err(&base_with(key, value));
        assert!(e.contains(key) && e.contains("604800"), "{key}: {e}");
    }
    let c = ok(&base_with("postgresql.pg_ctl_timeout", "604800")).config;
    assert_eq!(c.pg_settings().pg_ctl_timeout_s, 604_800);
}

#[test]
fn validate_config_refuses_unbounded_numbers() {
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in [
        ("bootstrap.dcs.ttl", "1e300"),
        ("bootstrap.dcs.loop_wait", "9223372036854776"),
    ] {
        let f = dir.path().join("huge.yml");
        std::fs::write(&f, base_with(key, value)).unwrap();
        let (code, out, err) = tenure(&["agent", "--validate-config", f.to_str().unwrap()]);
        assert_eq!(code, 64, "{key}: {out}{err}");
        assert!(err.contains(key) && err.contains("604800"), "{err}");
    }
}

/// `{:?}` of the whole loaded config (what a debug log line would print) carries no password or token.
#[test]
fn debug_output_of_the_config_has_no_secret() {
    let text = base_with("restapi.token", "t0ken-SECRET-3")
        .replace("password: secret", "password: rest-SECRET-1")
        .replace("password: s\n", "password: su-SECRET-2\n")
        .replace("password: r\n", "password: repl-SECRET-4\n");
    let loaded = ok(&text);
    let shown = format!("{:?} {:#?}", loaded.config, loaded.config);
    assert!(
        shown.contains("admin"),
        "the username is no secret: {shown}"
    );
    assert!(
        !shown.contains("SECRET"),
        "a secret in Debug output: {shown}"
    );
    let settings = format!(
        "{:?} {:?}",
        loaded.config.pg_settings(),
        loaded.config.restapi.server_settings()
    );
    assert!(!settings.contains("SECRET"), "{settings}");

    let consul = base_with("consul.token", "consul-SECRET-5");
    let etcd = base_without("consul")
        + "etcd3: {hosts: 'a:2379', username: root, password: etcd-SECRET-6}\n";
    for text in [consul, etcd] {
        let c = ok(&text).config;
        let shown = format!("{c:?} {:?} {:?}", c.consul_settings(), c.etcd_settings());
        assert!(
            !shown.contains("SECRET"),
            "a secret in Debug output: {shown}"
        );
        assert!(shown.contains("<hidden>"), "{shown}");
    }
}

/// Patroni 4's `log.type` (`plain` or `json`) and `log.level`; its other log keys are warnings.
#[test]
fn log_type_and_level_as_patroni_4_names_them() {
    use tenure::config::{LogFormat, LogSettings};
    let c = ok(BASE).config;
    assert_eq!(c.log, LogSettings::default());
    assert_eq!(
        (c.log.format, c.log.level.as_deref()),
        (LogFormat::Plain, None)
    );
    let c = ok(&base_with("log", "{type: json, level: WARNING}")).config;
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(c.log.level.as_deref(), Some("warn"));
    let c = ok(&base_with("log", "{level: CRITICAL}")).config;
    assert_eq!(c.log.level.as_deref(), Some("error"));
    let e = err(&base_with("log", "{type: xml}"));
    assert!(e.contains("log.type") && e.contains("json"), "{e}");
    let e = err(&base_with("log", "{level: LOUD}"));
    assert!(e.contains("log.level") && e.contains("DEBUG"), "{e}");
    let loaded = ok(&base_with("log", "{dir: /var/log/tenure, type: plain}"));
    assert!(
        loaded.warnings.iter().any(|w| w.key == "log.dir"),
        "{:?}",
        loaded.warnings
    );
}
