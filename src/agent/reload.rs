//! SIGHUP: re-read the config file and apply what can change while the agent runs.
//!
//! Applied at once: `tags` (the member key's tags, `nofailover`, `failover_priority`, `noloadbalance`),
//! `maximum_lag_on_failover`, `primary_start_timeout`, and `loop_wait` / `retry_timeout` /
//! `tenure.fence_budget` / `tenure.drift_max_ppm` when the new timing passes `Timing::validate`. `ttl` is
//! not: the store's session TTL is fixed when the client is built, and the lease arithmetic must use the TTL
//! the store actually enforces. Everything else (listen addresses, the store, `data_dir`, ...) is kept and
//! named as needing a restart.
use std::collections::BTreeMap;

use crate::config::Config;
use crate::ha::{CoreConfig, TimingError};

/// What a reload changes.
#[derive(Debug)]
pub struct Reload {
    /// The core config to run with from now on.
    pub core: CoreConfig,
    /// The member key's tags from now on.
    pub tags: BTreeMap<String, serde_json::Value>,
    /// Keys whose new values are now in effect.
    pub applied: Vec<&'static str>,
    /// Keys that changed in the file but take effect only after a restart.
    pub restart: Vec<&'static str>,
    /// The new timing breaks a rule: the old timing stays.
    pub timing_error: Option<TimingError>,
}

/// Compare the running settings (`core`, `tags`; `started` is the config the agent started with) with a
/// freshly loaded `new` config.
pub fn reload(
    core: &CoreConfig,
    tags: &BTreeMap<String, serde_json::Value>,
    started: &Config,
    new: &Config,
) -> Reload {
    let want = new.core_config();
    let mut restart = Vec::new();
    let (core_next, mut applied, timing_error) = apply_core(core, &want, &mut restart);
    let mut tags_out = tags.clone();
    if new.tags != *tags {
        tags_out = new.tags.clone();
        applied.insert(0, "tags");
    }
    let was = started.core_config();
    let (p0, p1) = (started.pg_settings(), new.pg_settings());
    let checks: [(&'static str, bool); 19] = [
        ("scope", started.scope != new.scope),
        ("namespace", started.namespace != new.namespace),
        ("name", started.name() != new.name()),
        ("store (etcd3 / consul)", started.store != new.store),
        ("restapi", started.restapi != new.restapi),
        ("postgresql.data_dir", p0.data_dir != p1.data_dir),
        ("postgresql.bin_dir", p0.bin_dir != p1.bin_dir),
        (
            "postgresql.listen",
            (&p0.listen_host, p0.listen_port) != (&p1.listen_host, p1.listen_port),
        ),
        (
            "postgresql.connect_address",
            p0.connect_address != p1.connect_address,
        ),
        ("postgresql.parameters", p0.parameters != p1.parameters),
        ("postgresql.pg_hba", p0.pg_hba != p1.pg_hba),
        (
            "postgresql.authentication",
            format!("{:?}", (&p0.superuser, &p0.replication, &p0.rewind))
                != format!("{:?}", (&p1.superuser, &p1.replication, &p1.rewind)),
        ),
        (
            "bootstrap.initdb",
            format!("{:?}", started.initdb) != format!("{:?}", new.initdb),
        ),
        ("watchdog", started.watchdog != new.watchdog),
        ("tenure.fencer", started.fencer != new.fencer),
        ("pgbouncer", started.pgbouncer != new.pgbouncer),
        (
            "postgresql.use_pg_rewind",
            was.use_pg_rewind != want.use_pg_rewind,
        ),
        (
            "postgresql.remove_data_directory_on_rewind_failure",
            was.remove_data_directory_on_rewind_failure
                != want.remove_data_directory_on_rewind_failure,
        ),
        (
            "postgresql.remove_data_directory_on_diverged_timelines",
            was.remove_data_directory_on_diverged_timelines
                != want.remove_data_directory_on_diverged_timelines,
        ),
    ];
    restart.extend(checks.iter().filter(|(_, c)| *c).map(|(k, _)| *k));
    let specific = restart.iter().any(|k| k.starts_with("postgresql."));
    if !specific && format!("{p0:?}") != format!("{p1:?}") {
        restart.push("postgresql (other keys)");
    }
    Reload {
        core: core_next,
        tags: tags_out,
        applied,
        restart,
        timing_error,
    }
}

/// The settings of `want` that apply while running, over `core`: the new core config, the keys applied,
/// and the timing rule the new timing breaks (the old timing is kept then). A `ttl` change goes to
/// `restart`.
pub fn apply_core(
    core: &CoreConfig,
    want: &CoreConfig,
    restart: &mut Vec<&'static str>,
) -> (CoreConfig, Vec<&'static str>, Option<TimingError>) {
    let mut next = core.clone();
    let mut applied = Vec::new();
    let mut timing_error = None;
    next.nofailover = want.nofailover;
    next.failover_priority = want.failover_priority;
    next.noloadbalance = want.noloadbalance;
    if want.maximum_lag_on_failover_bytes != core.maximum_lag_on_failover_bytes {
        next.maximum_lag_on_failover_bytes = want.maximum_lag_on_failover_bytes;
        applied.push("maximum_lag_on_failover");
    }
    if want.primary_start_timeout_ms != core.primary_start_timeout_ms {
        next.primary_start_timeout_ms = want.primary_start_timeout_ms;
        applied.push("primary_start_timeout");
    }
    if want.failsafe_timeout_ms != core.failsafe_timeout_ms {
        // Checked against the timing at load; rounds are shortened to the room a later timing leaves.
        next.failsafe_timeout_ms = want.failsafe_timeout_ms;
        applied.push("tenure.failsafe_timeout");
    }
    let (old_t, new_t) = (core.timing, want.timing);
    if new_t.ttl_ms != old_t.ttl_ms || new_t.session_ttl_ms != old_t.session_ttl_ms {
        restart.push("ttl");
    } else if new_t != old_t {
        match new_t.validate() {
            Ok(()) => {
                next.timing = new_t;
                let changed = [
                    ("loop_wait", new_t.loop_wait_ms != old_t.loop_wait_ms),
                    (
                        "retry_timeout",
                        new_t.retry_timeout_ms != old_t.retry_timeout_ms,
                    ),
                    (
                        "tenure.fence_budget",
                        new_t.fence_budget_ms != old_t.fence_budget_ms,
                    ),
                    (
                        "tenure.drift_max_ppm",
                        new_t.drift_max_ppm != old_t.drift_max_ppm,
                    ),
                ];
                applied.extend(changed.iter().filter(|(_, c)| *c).map(|(k, _)| *k));
            }
            Err(e) => timing_error = Some(e),
        }
    }
    (next, applied, timing_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const BASE: &str = "scope: s
name: n1
etcd3: {hosts: 127.0.0.1:2379}
restapi: {listen: 127.0.0.1:8008, connect_address: 127.0.0.1:8008, allow_unauthenticated: true}
bootstrap:
  dcs: {ttl: 30, loop_wait: 5, retry_timeout: 5, maximum_lag_on_failover: 1048576}
postgresql:
  data_dir: /tmp/tenure-reload-test/data
  listen: 127.0.0.1:5432
  connect_address: 127.0.0.1:5432
  authentication:
    superuser: {username: postgres, password: a}
    replication: {username: replicator, password: b}
tags: {rack: r1}
";

    fn config(text: &str) -> Config {
        match crate::config::parse(text, Path::new("t.yml"), &BTreeMap::new()) {
            Ok(l) => l.config,
            Err(e) => panic!("{e:?}"),
        }
    }

    fn run(new: &str) -> Reload {
        let old = config(BASE);
        reload(&old.core_config(), &old.tags, &old, &config(new))
    }

    #[test]
    fn an_unchanged_file_changes_nothing() {
        let r = run(BASE);
        assert!(r.applied.is_empty() && r.restart.is_empty() && r.timing_error.is_none());
        assert_eq!(r.core, config(BASE).core_config());
    }

    #[test]
    fn tags_lag_start_timeout_and_timing_apply_at_once() {
        let new = BASE
            .replace(
                "tags: {rack: r1}",
                "tags: {rack: r2, nofailover: true, failover_priority: 3}",
            )
            .replace(
                "maximum_lag_on_failover: 1048576",
                "maximum_lag_on_failover: 42, primary_start_timeout: 7",
            )
            .replace(
                "loop_wait: 5, retry_timeout: 5",
                "loop_wait: 4, retry_timeout: 6",
            );
        let r = run(&new);
        assert_eq!(
            r.applied,
            [
                "tags",
                "maximum_lag_on_failover",
                "primary_start_timeout",
                "loop_wait",
                "retry_timeout"
            ]
        );
        assert!(r.restart.is_empty(), "{:?}", r.restart);
        assert!(r.core.nofailover);
        assert_eq!(r.core.failover_priority, 3);
        assert_eq!(r.core.maximum_lag_on_failover_bytes, 42);
        assert_eq!(r.core.primary_start_timeout_ms, 7_000);
        assert_eq!(
            (r.core.timing.loop_wait_ms, r.core.timing.retry_timeout_ms),
            (4_000, 6_000)
        );
        assert_eq!(r.tags["rack"], serde_json::json!("r2"));
    }

    #[test]
    fn listen_addresses_store_data_dir_and_ttl_need_a_restart() {
        let new = BASE
            .replace("listen: 127.0.0.1:8008", "listen: 127.0.0.1:8009")
            .replace("hosts: 127.0.0.1:2379", "hosts: 127.0.0.1:2380")
            .replace("/tmp/tenure-reload-test/data", "/tmp/elsewhere/data")
            .replace("listen: 127.0.0.1:5432", "listen: 127.0.0.1:5433")
            .replace("ttl: 30", "ttl: 40");
        let r = run(&new);
        assert_eq!(
            r.restart,
            [
                "ttl",
                "store (etcd3 / consul)",
                "restapi",
                "postgresql.data_dir",
                "postgresql.listen"
            ]
        );
        assert!(r.applied.is_empty(), "{:?}", r.applied);
        // The running timing and store TTL stay.
        assert_eq!(r.core, config(BASE).core_config());
    }

    #[test]
    fn a_timing_that_breaks_a_rule_is_refused_and_the_old_one_kept() {
        let core = config(BASE).core_config();
        let mut want = core.clone();
        want.timing.loop_wait_ms = 25_000; // 25 + 2*5 > ttl 30
        want.maximum_lag_on_failover_bytes = 1;
        let mut restart = Vec::new();
        let (next, applied, err) = apply_core(&core, &want, &mut restart);
        assert!(matches!(err, Some(TimingError::LoopTooSlowForTtl { .. })));
        assert!(err.unwrap().to_string().contains("loop_wait"));
        assert_eq!(next.timing, core.timing);
        assert_eq!(applied, ["maximum_lag_on_failover"]);
        assert!(restart.is_empty());
    }
}
