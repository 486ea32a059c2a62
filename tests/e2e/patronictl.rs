//! Patroni's own `patronictl` (Debian's `patroni` package) against a running tenure cluster on etcd and on
//! the Consul test double:
//! `list` shows it, `pause --wait` puts it in maintenance and tenure honours it (a dead primary is not
//! replaced), `resume --wait` hands control back and the cluster has a primary again.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::cluster::{Cluster, StoreKind};
use tenure::demo::local::{StoreAddr, API_USER};

const PATRONICTL: &str = "/usr/bin/patronictl";

fn patronictl(cfg: &std::path::Path, args: &[&str]) -> String {
    assert!(
        std::path::Path::new(PATRONICTL).exists(),
        "{PATRONICTL} missing: apt-get install patroni python3-etcd"
    );
    // The harness reaps stray zombies: hold this child so that we get to wait for it ourselves.
    let reaper = tenure::demo::local::reaper();
    let child = reaper.spawn_with(|| {
        let child = Command::new(PATRONICTL)
            .arg("-c")
            .arg(cfg)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run patronictl");
        let pid = child.id() as i32;
        (child, vec![pid])
    });
    let pid = child.id() as i32;
    let out = child.wait_with_output().expect("wait for patronictl");
    reaper.release(pid);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "patronictl {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// patronictl's config for cluster `c`, in `dir`.
fn patronictl_config(c: &Cluster, dir: &tempfile::TempDir) -> std::path::PathBuf {
    let store = match c.nodes[0].store.clone() {
        StoreAddr::Etcd(hosts) => format!("etcd3:\n  hosts: {hosts}\n"),
        StoreAddr::Consul(host) => format!("consul:\n  host: {host}\n"),
        StoreAddr::EtcdTls { .. } => panic!("plain stores only"),
    };
    let scope = c.nodes[0].scope.clone();
    let cfg = dir.path().join("patronictl.yml");
    std::fs::write(
        &cfg,
        format!(
            "scope: {scope}\nnamespace: /service/\n{store}restapi:\n  authentication:\n    \
             username: {}\n    password: {}\n",
            API_USER.0, API_USER.1
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn patronictl_lists_pauses_and_resumes_a_tenure_cluster() {
    list_pause_resume(StoreKind::Etcd);
}

/// The same through patronictl's Consul backend (python3-consul), against the Consul test double.
#[test]
fn patronictl_on_consul_lists_pauses_and_resumes_a_tenure_cluster() {
    list_pause_resume(StoreKind::Consul);
}

fn list_pause_resume(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let scope = c.nodes[0].scope.clone();
    let dir = tempfile::tempdir().unwrap();
    let cfg = patronictl_config(&c, &dir);

    let table = patronictl(&cfg, &["list", &scope]);
    assert_eq!(table.matches("Leader").count(), 1, "{table}");
    assert_eq!(table.matches("Replica").count(), 2, "{table}");

    // `--wait` gives every member loop_wait + 1 s to show `pause: true` in its member key; the config
    // watch makes the replicas publish it at once.
    let out = patronictl(&cfg, &["pause", &scope, "--wait"]);
    assert!(
        out.contains("Success: cluster management is paused"),
        "{out}"
    );
    let table = patronictl(&cfg, &["list", &scope]);
    assert!(table.contains("Maintenance mode: on"), "{table}");

    // Paused: the primary's PostgreSQL dies and nobody takes over for two TTLs.
    let p = c.primary().expect("a primary");
    c.kill_postmaster(p, Signal::SIGKILL);
    let ttl = Duration::from_secs(c.nodes[0].timings.ttl_s);
    std::thread::sleep(2 * ttl);
    assert_eq!(c.primary(), None, "a replica was promoted during pause");

    let out = patronictl(&cfg, &["resume", &scope, "--wait"]);
    assert!(
        out.contains("Success: cluster management is resumed"),
        "{out}"
    );
    let limit = ttl + Duration::from_secs(c.nodes[0].timings.loop_wait_s + 5 + 10);
    let np = c.wait_until("a primary after resume", limit, |c| c.primary());
    eprintln!("after resume the primary is {}", c.nodes[np].name);
    c.assert_never_two_primaries();
}

/// `patronictl restart --scheduled` on a replica: 202 (patronictl's "restart scheduled"), its `list` shows the
/// member key's `scheduled_restart`; `patronictl flush ... restart` deletes it (the member key and `/patroni`
/// lose it) and the postmaster was never restarted. Then a setting pending a restart, and
/// `patronictl restart --pending`.
#[test]
fn patronictl_schedules_lists_and_flushes_a_restart_and_restarts_a_pending_one() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let scope = c.nodes[0].scope.clone();
    let dir = tempfile::tempdir().unwrap();
    let cfg = patronictl_config(&c, &dir);
    let p = c.primary().expect("a primary");
    let r = (0..c.nodes.len()).find(|i| *i != p).expect("a replica");
    let rn = c.nodes[r].name.clone();
    let pid = c.postmaster_pid(r).expect("replica postmaster");

    let at = "2099-01-01T00:00:00+00:00";
    let out = patronictl(
        &cfg,
        &["restart", &scope, &rn, "--scheduled", at, "--force"],
    );
    assert!(out.contains("restart scheduled"), "{out}");
    assert_eq!(c.patroni(r)["scheduled_restart"]["schedule"], at);
    let table = c.wait_until(
        "patronictl list to show the schedule",
        Duration::from_secs(10),
        |_| {
            let table = patronictl(&cfg, &["list", &scope]);
            (table.contains("Scheduled restart") && table.contains("2099-01-01")).then_some(table)
        },
    );
    eprintln!("{table}");

    let out = patronictl(&cfg, &["flush", &scope, &rn, "restart", "--force"]);
    assert!(out.contains("Success"), "{out}");
    assert!(c.patroni(r).get("scheduled_restart").is_none());
    c.wait_until(
        "the member key to lose the schedule",
        Duration::from_secs(10),
        |_| (!patronictl(&cfg, &["list", &scope]).contains("2099-01-01")).then_some(()),
    );
    assert_eq!(c.postmaster_pid(r), Some(pid), "nothing restarted");

    // A setting that needs a restart, changed on the replica: `list` shows it pending (member key
    // `pending_restart`); `restart --pending` (`restart_pending`) restarts it, and the setting is live.
    c.sql(r, "ALTER SYSTEM SET max_prepared_transactions = 3")
        .expect("ALTER SYSTEM");
    c.sql(r, "SELECT pg_reload_conf()").expect("reload");
    let table = c.wait_until(
        "patronictl list to show the pending restart",
        Duration::from_secs(15),
        |_| {
            let table = patronictl(&cfg, &["list", &scope]);
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| {rn} ")))?
                .to_string();
            (table.contains("Pending restart") && row.contains("| *")).then_some(table)
        },
    );
    eprintln!("{table}");
    let version = c.patroni(r)["server_version"]
        .as_u64()
        .expect("server_version");
    assert!((150_000..160_000).contains(&version), "{version}");
    // `--pg-version` (`postgres_version`): a server at least that new is not restarted.
    let out = patronictl(
        &cfg,
        &["restart", &scope, &rn, "--pg-version", "15.0", "--force"],
    );
    assert!(
        out.contains("status code=503") && out.contains("not below postgres_version"),
        "{out}"
    );
    assert_eq!(c.postmaster_pid(r), Some(pid), "not restarted");
    let out = patronictl(&cfg, &["restart", &scope, &rn, "--pending", "--force"]);
    assert!(
        out.contains(&format!("Success: restart on member {rn}")),
        "{out}"
    );
    assert_ne!(
        c.postmaster_pid(r),
        Some(pid),
        "the postmaster was restarted"
    );
    assert_eq!(
        c.sql_one(r, "SHOW max_prepared_transactions").as_deref(),
        Ok("3")
    );
    c.wait_until(
        "the member key to lose pending_restart",
        Duration::from_secs(15),
        |_| (!patronictl(&cfg, &["list", &scope]).contains("Pending restart")).then_some(()),
    );
    c.assert_never_two_primaries();
}

/// `GET /patroni` and the member keys carry Patroni 4.x's fields with Patroni's types: a streaming replica
/// is `state: running` with `replication_state: streaming` (deployment checks assert `running`), the primary
/// lists its walsenders under `replication`, and both name the database system. patronictl (3.0.2 shows the
/// member key's `state`) sees every member `running`; `tenure list`, like Patroni 4's patronictl, shows a
/// replica's `replication_state`.
#[test]
fn status_and_member_keys_carry_patronis_fields() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let scope = c.nodes[0].scope.clone();
    let dir = tempfile::tempdir().unwrap();
    let cfg = patronictl_config(&c, &dir);
    let p = c.primary().expect("a primary");
    let replicas: Vec<usize> = (0..c.nodes.len()).filter(|i| *i != p).collect();
    let ready = c.wait_until(
        "both replicas streaming and listed by the primary",
        Duration::from_secs(30),
        |c| {
            // Every row streaming: the clone's own walsender (`state: backup`, under the replica's
            // application_name, as Patroni also lists it) can outlive the clone by a moment.
            let st = c.patroni(p);
            let rows = st.get("replication")?.as_array()?;
            let listed =
                rows.len() == replicas.len() && rows.iter().all(|w| w["state"] == "streaming");
            let streaming = replicas
                .iter()
                .all(|r| c.patroni(*r)["replication_state"] == "streaming");
            (listed && streaming).then_some(st)
        },
    );
    let sysid = ready["database_system_identifier"]
        .as_str()
        .expect("database_system_identifier is a string")
        .to_string();
    assert!(sysid.parse::<u64>().is_ok(), "{sysid}");
    for (i, st) in
        std::iter::once((p, ready.clone())).chain(replicas.iter().map(|r| (*r, c.patroni(*r))))
    {
        assert_eq!(st["state"], "running", "{st}");
        assert_eq!(st["database_system_identifier"], sysid.as_str(), "{st}");
        assert!(st["dcs_last_seen"].is_u64(), "{st}");
        assert!(st["server_version"].is_u64(), "{st}");
        assert!(st["timeline"].is_u64(), "{st}");
        assert!(st["postmaster_start_time"].is_string(), "{st}");
        assert_eq!(st["patroni"]["scope"], scope.as_str(), "{st}");
        assert_eq!(st["patroni"]["name"], c.nodes[i].name.as_str(), "{st}");
        assert!(st["patroni"]["version"].is_string(), "{st}");
    }
    assert_eq!(ready["role"], "primary");
    assert!(ready["xlog"]["location"].is_u64(), "{ready}");
    assert!(ready.get("replication_state").is_none(), "{ready}");
    for row in ready["replication"].as_array().unwrap() {
        for (k, is) in [
            (
                "usename",
                serde_json::Value::is_string as fn(&serde_json::Value) -> bool,
            ),
            ("application_name", serde_json::Value::is_string),
            ("client_addr", serde_json::Value::is_string),
            ("state", serde_json::Value::is_string),
            ("sync_state", serde_json::Value::is_string),
            ("sync_priority", serde_json::Value::is_u64),
        ] {
            assert!(is(&row[k]), "{k} in {row}");
        }
        assert_eq!(row["state"], "streaming", "{row}");
    }
    for r in &replicas {
        let st = c.patroni(*r);
        assert_eq!(st["role"], "replica", "{st}");
        assert!(st["xlog"]["received_location"].is_u64(), "{st}");
        assert!(st["xlog"]["replayed_location"].is_u64(), "{st}");
        assert!(st["xlog"]["paused"].is_boolean(), "{st}");
    }
    // The member keys, as patronictl reads them: every member `running`.
    let rows = c.wait_until(
        "patronictl list to show every member running",
        Duration::from_secs(15),
        |_| {
            let out = patronictl(&cfg, &["list", &scope, "-f", "json"]);
            let rows: Vec<serde_json::Value> = serde_json::from_str(&out).ok()?;
            rows.iter().all(|m| m["State"] == "running").then_some(rows)
        },
    );
    assert_eq!(rows.len(), 3, "{rows:?}");
    // tenure's own reader of the member key: replicas show their replication state.
    let out = tenure_cli(&c, &["list", "-f", "json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let streaming = rows.iter().filter(|m| m["State"] == "streaming").count();
    assert_eq!(streaming, 2, "{out}");
    c.assert_never_two_primaries();
}

/// `tenure ARGS -c <node 0's config>`.
fn tenure_cli(c: &Cluster, args: &[&str]) -> String {
    let out = tenure::demo::local::reaper()
        .output(
            Command::new(env!("CARGO_BIN_EXE_tenure"))
                .args(args)
                .arg("-c")
                .arg(c.nodes[0].config_path()),
        )
        .expect("run tenure");
    assert!(
        out.status.success(),
        "tenure {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
