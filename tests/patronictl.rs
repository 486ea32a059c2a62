//! Patroni's own `patronictl` reads a cluster that tenure wrote into a real etcd: the key layout and JSON match.
//!
//! patronictl (Debian's Patroni 3.0.2) speaks etcd's gRPC-gateway JSON API over HTTP; tenure speaks gRPC. If the
//! tool is missing the test says so and fails, rather than pass without checking anything.
#[path = "support/etcd.rs"]
mod etcd_server;
#[path = "support/pg.rs"]
mod pg_support;
#[path = "patronictl/remove.rs"]
mod remove;

use std::process::Command;
use std::time::Duration;

use etcd_server::EtcdServer;
use tenure::dcs::etcd::{EtcdDcs, EtcdSettings};
use tenure::dcs::{Dcs, MemberRecord};
use tokio::time::Instant;

const PATRONICTL: &str = "/usr/bin/patronictl";
const SCOPE: &str = "batman";

fn agent(server: &EtcdServer, name: &str) -> EtcdDcs {
    EtcdDcs::new(EtcdSettings {
        endpoints: server.endpoints(),
        scope: SCOPE.into(),
        namespace: "/service/".into(),
        name: name.into(),
        ttl_ms: 30_000,
        user: None,
        password: None,
        tls: None,
    })
    .expect("valid settings")
}

fn record(host: &str, role: &str, state: &str) -> MemberRecord {
    MemberRecord {
        conn_url: format!("postgres://{host}:5432/postgres"),
        api_url: format!("http://{host}:8008/patroni"),
        state: state.into(),
        role: role.into(),
        version: "3.0.2".into(),
        timeline: Some(1),
        ..MemberRecord::default()
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(3)
}

/// `patronictl -c <yaml> <args...>`, its output, or a panic that says exactly what went wrong.
fn patronictl(config: &std::path::Path, args: &[&str]) -> String {
    assert!(
        std::path::Path::new(PATRONICTL).exists(),
        "{PATRONICTL} not installed: `apt-get install patroni python3-etcd` to run this compatibility test"
    );
    let out = Command::new(PATRONICTL)
        .arg("-c")
        .arg(config)
        .args(args)
        .output()
        .expect("run patronictl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "patronictl {args:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A patronictl configuration for `SCOPE` on `etcd`, in a temp dir kept as long as the returned guard.
fn patronictl_config(etcd: &EtcdServer) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("patronictl.yml");
    let text = format!(
        "scope: {SCOPE}\nnamespace: /service/\netcd3:\n  hosts: {}\n",
        etcd.host_port()
    );
    std::fs::write(&yaml, text).unwrap();
    (dir, yaml)
}

/// A tenure config for `SCOPE` on `etcd`, beside patronictl's in `dir`.
fn tenure_config(dir: &tempfile::TempDir, etcd: &EtcdServer) -> std::path::PathBuf {
    let file = dir.path().join("tenure.yml");
    let text = format!(
        "scope: {SCOPE}\nname: ops\nrestapi:\n  listen: 127.0.0.1:8008\n  authentication: {{username: a, password: b}}\netcd3:\n  hosts: {}\n\
         postgresql:\n  data_dir: /var/lib/pg/main\n  listen: 127.0.0.1:5432\n  authentication:\n    \
         superuser: {{username: postgres, password: s}}\n    replication: {{username: r, password: r}}\n",
        etcd.host_port()
    );
    std::fs::write(&file, text).unwrap();
    file
}

/// `tenure <args> --config <config>`: its output, or a panic with its stderr.
fn tenure(config: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_clear()
        .output()
        .expect("run tenure");
    assert!(
        out.status.success(),
        "tenure {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn patronictl_list(config: &std::path::Path, format: &str) -> String {
    patronictl(config, &["list", SCOPE, "-f", format])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patronictl_lists_a_cluster_written_by_tenure() {
    let etcd = EtcdServer::start();
    let (pg1, pg2) = (agent(&etcd, "pg1"), agent(&etcd, "pg2"));

    pg1.race_initialize("", deadline()).await.unwrap();
    pg1.write_initialize("7268000000000000001", deadline())
        .await
        .unwrap();
    // Values YAML could read as something else (`on`, `%m`, an empty string, a time) for show-config.
    let config = serde_json::json!({"ttl": 30, "loop_wait": 10, "retry_timeout": 10,
        "maximum_lag_on_failover": 1048576, "check_timeline": false, "postgresql": {
            "use_pg_rewind": true, "pg_hba": ["local all all trust", "host replication all 0.0.0.0/0 md5"],
            "parameters": {"hot_standby": "on", "max_connections": 100, "work_mem": "4MB",
                "log_line_prefix": "%m [%p] ", "shared_preload_libraries": "", "wal_keep_size": "1GB",
                "archive_timeout": "2026-11-30T12:00:00+00:00", "lc_messages": "C.UTF-8",
                "checkpoint_completion_target": 0.9, "search_path": "'$user', public"}}});
    pg1.cas_config(&config, None, deadline()).await.unwrap();
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    let mut primary = record("127.0.0.11", "primary", "running");
    primary.xlog_location = Some(0x3000060);
    pg1.publish_member(&primary, deadline()).await.unwrap();
    pg1.write_status(0x3000060, deadline()).await.unwrap();
    pg2.ensure_session(deadline()).await.unwrap();
    let mut replica = record("127.0.0.12", "replica", "streaming");
    replica.receive_lsn = Some(0x3000060);
    replica.replay_lsn = Some(0x3000060);
    // Patroni 3.0.2's lag column reads `xlog_location` for replicas too (its utils.cluster_as_json).
    replica.xlog_location = Some(0x3000000);
    replica.replication_state = Some("streaming".into());
    pg2.publish_member(&replica, deadline()).await.unwrap();

    let (_dir, yaml) = patronictl_config(&etcd);

    let table = patronictl_list(&yaml, "pretty");
    println!("{table}");
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{table}"))
    };
    assert!(row("pg1").contains("Leader"), "pg1 is the Leader:\n{table}");
    assert!(row("pg2").contains("Replica"), "pg2 is a Replica:\n{table}");
    assert!(
        row("pg1").contains("127.0.0.11"),
        "host taken from conn_url:\n{table}"
    );

    // The machine-readable form, field by field.
    let json: serde_json::Value =
        serde_json::from_str(&patronictl_list(&yaml, "json")).expect("patronictl json");
    let members = json.as_array().expect("a list of members");
    let find = |name: &str| {
        members
            .iter()
            .find(|m| m["Member"] == name)
            .cloned()
            .expect(name)
    };
    assert_eq!(find("pg1")["Role"], "Leader");
    assert_eq!(find("pg2")["Role"], "Replica");
    assert_eq!(find("pg1")["TL"], 1);
    assert_eq!(
        find("pg2")["Lag in MB"],
        0,
        "lag from status.optime minus the replica's LSN"
    );

    // The dynamic configuration and the timeline history, as patronictl reads them.
    let theirs = patronictl(&yaml, &["show-config", SCOPE]);
    let shown: serde_json::Value = yaml_serde::from_str(&theirs).expect("show-config prints YAML");
    assert_eq!(shown, config, "show-config:\n{shown:?}");
    let ours = tenure(&tenure_config(&_dir, &etcd), &["show-config"]);
    assert_eq!(
        ours, theirs,
        "tenure show-config prints what patronictl prints"
    );
    let line = serde_json::json!([
        1,
        50331744,
        "no recovery target specified",
        "2026-11-30T12:00:00+00:00",
        "pg1"
    ]);
    // A line as Patroni before 1.6 wrote it: no timestamp, no new leader (patronictl fills in "").
    let old_line = serde_json::json!([2, 83886080, "no recovery target specified"]);
    pg1.write_history(&serde_json::json!([line, old_line]), deadline())
        .await
        .unwrap();
    let history = patronictl(&yaml, &["history", SCOPE, "-f", "json"]);
    let history: serde_json::Value = serde_json::from_str(&history).expect("history json");
    assert_eq!(history[0]["TL"], 1, "history:\n{history}");
    assert_eq!(history[0]["LSN"], 50331744, "history:\n{history}");
    assert_eq!(history[0]["New Leader"], "pg1", "history:\n{history}");
    // `tenure history` prints what patronictl prints, in each machine-readable format.
    let tenure_yaml = tenure_config(&_dir, &etcd);
    for format in ["json", "yaml", "tsv"] {
        let theirs = patronictl(&yaml, &["history", SCOPE, "-f", format]);
        let ours = tenure(&tenure_yaml, &["history", "-f", format]);
        if format == "json" {
            // The same values; patronictl's separators and key order are json.dumps's.
            let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).expect(format);
            assert_eq!(parse(&ours), parse(&theirs), "history -f json");
        } else {
            assert_eq!(ours, theirs, "history -f {format}");
        }
    }

    // The leader key vanishing (released) is visible to patronictl too.
    pg1.release_leader(deadline()).await.unwrap();
    let table = patronictl_list(&yaml, "pretty");
    assert!(
        !table.contains("Leader"),
        "no leader after release:\n{table}"
    );
}

/// The other direction: what patronictl writes (a CAS on `config`, a `failover` request when the leader's REST
/// API does not answer) tenure reads, and tenure's next CAS on `config` works from the revision it read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_reads_what_patronictl_writes() {
    let etcd = EtcdServer::start();
    let (pg1, pg2) = (agent(&etcd, "pg1"), agent(&etcd, "pg2"));
    pg1.race_initialize("7268000000000000001", deadline())
        .await
        .unwrap();
    let config = serde_json::json!({"ttl": 30, "loop_wait": 10, "retry_timeout": 10});
    pg1.cas_config(&config, None, deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    // Nothing listens on these API addresses, so patronictl falls back to writing the store itself.
    pg1.publish_member(&record("127.0.0.11", "primary", "running"), deadline())
        .await
        .unwrap();
    pg2.publish_member(&record("127.0.0.12", "replica", "streaming"), deadline())
        .await
        .unwrap();
    let (_dir, yaml) = patronictl_config(&etcd);

    patronictl(
        &yaml,
        &[
            "edit-config",
            SCOPE,
            "--force",
            "-s",
            "loop_wait=5",
            "-s",
            "pause=true",
        ],
    );
    let snap = pg2.get_cluster(true, deadline()).await.unwrap();
    let (value, index) = snap.config.expect("config");
    assert_eq!(
        value["loop_wait"], 5,
        "config written by patronictl: {value}"
    );
    assert!(
        snap.cluster.config.pause,
        "pause set by patronictl is seen by the core"
    );
    let resumed = serde_json::json!({"ttl": 30, "loop_wait": 5, "retry_timeout": 10});
    pg2.cas_config(&resumed, Some(index), deadline())
        .await
        .expect("CAS from patronictl's revision");

    let out = patronictl(
        &yaml,
        &[
            "switchover",
            SCOPE,
            "--leader",
            "pg1",
            "--candidate",
            "pg2",
            "--force",
        ],
    );
    assert!(
        out.contains("falling back to DCS"),
        "patronictl wrote the failover key itself:\n{out}"
    );
    let snap = pg2.get_cluster(true, deadline()).await.unwrap();
    let sw = snap.cluster.switchover.expect("switchover request");
    assert_eq!(sw.leader.map(|n| n.0).as_deref(), Some("pg1"));
    assert_eq!(sw.candidate.map(|n| n.0).as_deref(), Some("pg2"));
    assert_eq!(sw.scheduled_at_ms, None);
    pg1.clear_switchover(deadline()).await.unwrap();
    assert_eq!(
        pg2.get_cluster(true, deadline())
            .await
            .unwrap()
            .cluster
            .switchover,
        None
    );
}

/// The `sync` key tenure writes, read by patronictl 3.0.2: with `synchronous_mode` on, the listed member is a
/// `Sync Standby` in both formats (the rule `tenure list` follows, tested in `cli::list`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patronictl_shows_the_sync_standby_tenure_wrote() {
    let etcd = EtcdServer::start();
    let (pg1, pg2, pg3) = (
        agent(&etcd, "pg1"),
        agent(&etcd, "pg2"),
        agent(&etcd, "pg3"),
    );
    let config = serde_json::json!({"ttl": 30, "loop_wait": 10, "retry_timeout": 10,
        "synchronous_mode": true, "postgresql": {}});
    pg1.cas_config(&config, None, deadline()).await.unwrap();
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    pg1.publish_member(&record("127.0.0.11", "primary", "running"), deadline())
        .await
        .unwrap();
    for (a, host) in [(&pg2, "127.0.0.12"), (&pg3, "127.0.0.13")] {
        a.ensure_session(deadline()).await.unwrap();
        a.publish_member(&record(host, "replica", "running"), deadline())
            .await
            .unwrap();
    }
    let standbys = [tenure::ha::types::NodeName::new("pg2")].into();
    pg1.write_sync(&"pg1".into(), &standbys, 0, None, deadline())
        .await
        .unwrap();

    let (_dir, yaml) = patronictl_config(&etcd);
    let table = patronictl_list(&yaml, "pretty");
    println!("{table}");
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{table}"))
            .to_string()
    };
    assert!(row("pg2").contains("Sync Standby"), "{table}");
    assert!(row("pg3").contains("Replica"), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&patronictl_list(&yaml, "json")).expect("patronictl json");
    let role = |name: &str| {
        json.as_array()
            .and_then(|m| m.iter().find(|m| m["Member"] == name))
            .map(|m| m["Role"].clone())
    };
    assert_eq!(role("pg2"), Some(serde_json::json!("Sync Standby")));
    assert_eq!(role("pg1"), Some(serde_json::json!("Leader")));
}

/// `tenure list` is the table patronictl 4.1 prints: tenure's `-f json` rows, laid out by this machine's
/// patronictl (`print_output`: prettytable, the title in the border, tags in YAML, a long pending setting
/// hidden, rules between rows once a cell has several lines) through `tests/patronictl_table.py`, which
/// builds the columns as 4.1's `output_members` does, must come out byte for byte as tenure printed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_list_is_the_table_patronictl_prints() {
    use tenure::dcs::records::{ParamDiff, ScheduledRestartRecord};
    let etcd = EtcdServer::start();
    let (pg1, pg2, pg3) = (
        agent(&etcd, "pg1"),
        agent(&etcd, "pg2"),
        agent(&etcd, "pg3"),
    );
    pg1.race_initialize("7268000000000000001", deadline())
        .await
        .unwrap();
    let config = serde_json::json!({"ttl": 30, "loop_wait": 10, "retry_timeout": 10});
    pg1.cas_config(&config, None, deadline()).await.unwrap();
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    let optime = 0x3000060;
    let mut primary = record("127.0.0.11", "primary", "running");
    primary.xlog_location = Some(optime);
    pg1.publish_member(&primary, deadline()).await.unwrap();
    pg1.write_status(optime, deadline()).await.unwrap();

    let mut lagging = record("127.0.0.12", "replica", "running");
    lagging.conn_url = "postgres://127.0.0.12:5433/postgres".into();
    lagging.receive_lsn = Some(optime - 3 * 1024 * 1024);
    lagging.replay_lsn = Some(optime - 5 * 1024 * 1024);
    lagging.replication_state = Some("streaming".into());
    lagging.tags.insert("zone".into(), serde_json::json!("a"));
    lagging
        .tags
        .insert("nofailover".into(), serde_json::json!(false));
    lagging.pending_restart = Some(true);
    let diff = |old: &str, new: &str| ParamDiff {
        old_value: old.into(),
        new_value: new.into(),
    };
    lagging.pending_restart_reason = Some(
        [
            ("max_connections".to_string(), diff("100", "200")),
            (
                "shared_preload_libraries".to_string(),
                diff("pg_stat_statements", "pg_stat_statements,auto_explain"),
            ),
        ]
        .into(),
    );
    lagging.scheduled_restart = Some(ScheduledRestartRecord {
        schedule: "2030-01-01T12:00:00+00:00".into(),
        postgres_version: Some("15.9".into()),
        ..Default::default()
    });
    pg2.ensure_session(deadline()).await.unwrap();
    pg2.publish_member(&lagging, deadline()).await.unwrap();
    let mut unknown = record("127.0.0.13", "replica", "starting");
    unknown
        .tags
        .insert("clonefrom".into(), serde_json::json!(true));
    pg3.ensure_session(deadline()).await.unwrap();
    pg3.publish_member(&unknown, deadline()).await.unwrap();

    let (dir, _) = patronictl_config(&etcd);
    let config = tenure_config(&dir, &etcd);
    let ours = tenure(&config, &["list"]);
    let rows: serde_json::Value =
        serde_json::from_str(&tenure(&config, &["list", "-f", "json"])).expect("list -f json");
    let given = serde_json::json!({
        "title": format!(" Cluster: {SCOPE} (7268000000000000001) "),
        "members": rows,
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/patronictl_table.py");
    let mut python = Command::new("/usr/bin/python3")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 (installed with patroni)");
    use std::io::Write;
    python
        .stdin
        .take()
        .unwrap()
        .write_all(given.to_string().as_bytes())
        .unwrap();
    let out = python.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = String::from_utf8_lossy(&out.stdout);
    println!("tenure list:\n{ours}\npatronictl's printer:\n{theirs}");
    assert!(ours.contains("[hidden - too long]"), "{ours}");
    assert!(ours.contains("if version < 15.9"), "{ours}");
    assert_eq!(ours, theirs);
}

/// `tenure dsn`, `tenure topology`'s tree and `tenure edit-config`'s diff next to patronictl's, on the same
/// etcd keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsn_topology_and_the_edit_config_diff_are_patronictls() {
    let etcd = EtcdServer::start();
    let (pg1, pg2) = (agent(&etcd, "pg1"), agent(&etcd, "pg2"));
    pg1.race_initialize("7268000000000000001", deadline())
        .await
        .unwrap();
    let config = serde_json::json!({"ttl": 30, "loop_wait": 10, "retry_timeout": 10,
        "postgresql": {"use_pg_rewind": true, "parameters": {"work_mem": "4MB", "max_connections": 100}}});
    pg1.cas_config(&config, None, deadline()).await.unwrap();
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    pg1.publish_member(&record("127.0.0.11", "primary", "running"), deadline())
        .await
        .unwrap();
    pg2.ensure_session(deadline()).await.unwrap();
    let mut replica = record("127.0.0.12", "replica", "running");
    replica.conn_url = "postgres://127.0.0.12:5433/postgres".into();
    pg2.publish_member(&replica, deadline()).await.unwrap();
    let (dir, yaml) = patronictl_config(&etcd);
    let ours = tenure_config(&dir, &etcd);

    for args in [&[][..], &["-r", "replica"], &["-m", "pg2"], &["-r", "any"]] {
        let mut theirs_args = vec!["dsn", SCOPE];
        theirs_args.extend_from_slice(args);
        let mut our_args = vec!["dsn"];
        our_args.extend_from_slice(args);
        assert_eq!(
            tenure(&ours, &our_args),
            patronictl(&yaml, &theirs_args),
            "dsn {args:?}"
        );
    }

    let names = |table: &str| -> Vec<String> {
        table
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| Member"))
            .filter_map(|l| l.split('|').nth(1).map(|c| c.trim().to_string()))
            .collect()
    };
    let theirs = patronictl(&yaml, &["topology", SCOPE]);
    assert_eq!(
        names(&tenure(&ours, &["topology"])),
        names(&theirs),
        "{theirs}"
    );
    assert_eq!(names(&theirs), ["pg1", "+ pg2"], "{theirs}");

    // The same change, without --force: patronictl prints its diff and asks (stdin is no terminal, so it
    // aborts); tenure prints its diff and goes on to the leader's API, which is not there (exit 69).
    let change = [
        "-s",
        "loop_wait=5",
        "-p",
        "work_mem=8MB",
        "-s",
        "postgresql.use_pg_rewind=null",
        "-s",
        "synchronous_mode=true",
    ];
    let theirs = Command::new(PATRONICTL)
        .arg("-c")
        .arg(&yaml)
        .args(["edit-config", SCOPE])
        .args(change)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run patronictl");
    let theirs = String::from_utf8_lossy(&theirs.stdout).into_owned();
    let (their_diff, _) = theirs
        .split_once("Apply these changes?")
        .unwrap_or_else(|| panic!("patronictl asked nothing:\n{theirs}"));
    let mine = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["edit-config", "--config", ours.to_str().unwrap()])
        .args(change)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tenure");
    assert_eq!(mine.status.code(), Some(69), "no API answers");
    assert_eq!(String::from_utf8_lossy(&mine.stdout), their_diff);
    assert!(
        their_diff.contains("+synchronous_mode: true"),
        "{their_diff}"
    );
}

/// `tenure query` prints what `patronictl query` prints, on a real PostgreSQL 15 a member key points at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_prints_what_patronictl_prints() {
    let etcd = EtcdServer::start();
    let mut node = pg_support::PgNode::new("q1");
    node.settings.pg_hba = vec![
        "local all all trust".into(),
        "host all all 127.0.0.1/32 trust".into(),
    ];
    tenure::pg::ctl::bootstrap(&node.settings, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
    let pg1 = agent(&etcd, "pg1");
    pg1.race_initialize("7268000000000000001", deadline())
        .await
        .unwrap();
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    let mut primary = record("127.0.0.1", "primary", "running");
    primary.conn_url = format!(
        "postgres://127.0.0.1:{}/postgres",
        node.settings.listen_port
    );
    pg1.publish_member(&primary, deadline()).await.unwrap();
    let (dir, yaml) = patronictl_config(&etcd);
    let ours = tenure_config(&dir, &etcd);
    let sql = "SELECT 1 AS a, NULL AS b, 'x y' AS c UNION ALL SELECT 22, 'z', ''";
    for format in [&["--delimiter", ","][..], &["--format", "pretty"], &[]] {
        let mut theirs = vec![
            "query", SCOPE, "-U", "postgres", "-d", "postgres", "-c", sql,
        ];
        theirs.extend_from_slice(format);
        let mut mine = vec![
            "query",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "--command",
            sql,
        ];
        mine.extend_from_slice(format);
        assert_eq!(
            tenure(&ours, &mine),
            patronictl(&yaml, &theirs),
            "query {format:?}"
        );
    }
}
