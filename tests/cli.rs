//! The operator CLI, run as the built binary against the Consul test double (the cluster state written through
//! `ConsulDcs`) and two real REST API servers whose `Control` records what reaches it.
#[path = "support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "api/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use harness::{primary, replica, settings, Api, NOW};
use serde_json::{json, Value};
use support::consul_server::{ConsulTestOptions, ConsulTestServer};
use tenure::api::ControlError;
use tenure::dcs::consul::{ConsulDcs, ConsulSettings};
use tenure::dcs::{Dcs, MemberRecord};
use tokio::time::Instant;

const SCOPE: &str = "batman";
const SYSID: &str = "7268000000000000001";
/// The leader's WAL position; the replica is 3 MiB behind.
const LEADER_LSN: u64 = 0x3000060;
const REPLICA_LSN: u64 = LEADER_LSN - 3 * 1024 * 1024;

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(3)
}

/// A cluster in the store (pg1 leader, pg2 replica), each member's `api_url` pointing at its own API.
struct Fixture {
    server: ConsulTestServer,
    pg1_api: Api,
    pg2_api: Api,
    pg1: ConsulDcs,
    _pg2: ConsulDcs,
    dir: tempfile::TempDir,
}

fn client(server: &ConsulTestServer, name: &str) -> ConsulDcs {
    // A long ttl: the members' sessions must outlive the test.
    ConsulDcs::new(ConsulSettings::new(&server.url(), SCOPE, name, 120_000)).expect("client")
}

impl Fixture {
    async fn start() -> Fixture {
        let server = ConsulTestServer::start(ConsulTestOptions::default()).await;
        let pg1_api = Api::start(settings(), primary(NOW + 10_000)).await;
        let pg2_api = Api::start(settings(), replica(0)).await;
        let (pg1, pg2) = (client(&server, "pg1"), client(&server, "pg2"));

        pg1.race_initialize("", deadline()).await.unwrap();
        pg1.write_initialize(SYSID, deadline()).await.unwrap();
        let config = json!({"ttl": 30, "loop_wait": 10, "retry_timeout": 10,
                            "postgresql": {"parameters": {"work_mem": "4MB"}}});
        pg1.cas_config(&config, None, deadline()).await.unwrap();
        pg1.ensure_session(deadline()).await.unwrap();
        pg1.acquire_leader(deadline()).await.unwrap();
        let leader = MemberRecord {
            conn_url: "postgres://10.0.0.1:5432/postgres".into(),
            api_url: format!("{}/patroni", pg1_api.base),
            state: "running".into(),
            role: "primary".into(),
            version: "0.1.0".into(),
            xlog_location: Some(LEADER_LSN),
            timeline: Some(3),
            ..MemberRecord::default()
        };
        pg1.publish_member(&leader, deadline()).await.unwrap();
        pg1.write_status(LEADER_LSN, deadline()).await.unwrap();
        pg1.write_history(
            &json!([
                [
                    1,
                    25165984,
                    "no recovery target specified",
                    "2024-01-01T00:00:00+00:00",
                    "pg1"
                ],
                [
                    2,
                    50331744,
                    "no recovery target specified",
                    "2024-02-01T00:00:00+00:00",
                    "pg2"
                ]
            ]),
            deadline(),
        )
        .await
        .unwrap();
        pg2.ensure_session(deadline()).await.unwrap();
        let mut follower = MemberRecord {
            conn_url: "postgres://10.0.0.2:5433/postgres".into(),
            api_url: format!("{}/patroni", pg2_api.base),
            state: "running".into(),
            role: "replica".into(),
            version: "0.1.0".into(),
            receive_lsn: Some(REPLICA_LSN),
            replay_lsn: Some(REPLICA_LSN),
            timeline: Some(3),
            replication_state: Some("streaming".into()),
            ..MemberRecord::default()
        };
        follower.tags.insert("zone".into(), json!("a"));
        follower.scheduled_restart = Some(tenure::dcs::records::ScheduledRestartRecord {
            schedule: "2030-01-01T12:00:00+00:00".into(),
            role: None,
            restart_pending: None,
            postgres_version: None,
        });
        follower.pending_restart = Some(true);
        let diff = tenure::dcs::records::ParamDiff {
            old_value: "100".into(),
            new_value: "200".into(),
        };
        follower.pending_restart_reason = Some([("max_connections".to_string(), diff)].into());
        pg2.publish_member(&follower, deadline()).await.unwrap();

        Fixture {
            server,
            pg1_api,
            pg2_api,
            pg1,
            _pg2: pg2,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The agent config file the CLI reads, with this `restapi` auth section.
    fn config_with(&self, auth: &str) -> PathBuf {
        let file = self.dir.path().join(format!("tenure-{}.yml", auth.len()));
        std::fs::write(&file, config_text(&self.server.addr().to_string(), auth)).unwrap();
        file
    }

    fn config(&self) -> PathBuf {
        self.config_with("  authentication: {username: admin, password: s3cret}\n")
    }

    /// Set `pause` in the store's `config` key (what a real agent does on PATCH /config).
    async fn set_pause(&self, on: bool) {
        let snap = self.pg1.get_cluster(true, deadline()).await.unwrap();
        let (mut config, index) = snap.config.unwrap();
        if on {
            config["pause"] = json!(true);
        } else {
            config.as_object_mut().unwrap().remove("pause");
        }
        self.pg1
            .cas_config(&config, Some(index), deadline())
            .await
            .unwrap();
    }
}

fn config_text(consul: &str, auth: &str) -> String {
    format!(
        "scope: {SCOPE}
name: ops
restapi:
  listen: 127.0.0.1:8008
{auth}consul:
  host: {consul}
postgresql:
  data_dir: /var/lib/pg/main
  listen: 127.0.0.1:5432
  authentication:
    superuser: {{username: postgres, password: s}}
    replication: {{username: replicator, password: r}}
"
    )
}

/// `tenure <args>` with a clean environment and stdin that is not a terminal: (exit code, stdout, stderr).
async fn tenure(args: &[&str]) -> (i32, String, String) {
    tenure_env(args, &[]).await
}

async fn tenure_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the CLI finishes within 60 s")
    .expect("run tenure");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_both_members_with_roles_and_lag() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, out, err) = tenure(&["list", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(&format!("+ Cluster: {SCOPE} ({SYSID}) ")),
        "{out}"
    );
    let row = |name: &str| -> Vec<String> {
        let line = lines
            .iter()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{out}"));
        line.split('|').map(|c| c.trim().to_string()).collect()
    };
    // | Member | Host | Role | State | TL | Lag in MB | Pending restart | Pending restart reason |
    // Scheduled restart | Tags |  (patronictl 4.x's columns)
    assert!(
        lines[1].contains("| Pending restart | Pending restart reason    | Scheduled restart "),
        "{out}"
    );
    assert_eq!(
        row("pg1")[1..11],
        [
            "pg1",
            "10.0.0.1:5432",
            "Leader",
            "running",
            "3",
            "",
            "",
            "",
            "",
            ""
        ],
        "{out}"
    );
    assert_eq!(
        row("pg2")[1..11],
        [
            "pg2",
            "10.0.0.2:5433",
            "Replica",
            "streaming",
            "3",
            "3",
            "*",
            "max_connections: 100->200",
            "2030-01-01T12:00:00+00:00",
            "zone: a"
        ],
        "{out}"
    );
    assert!(!out.contains("Maintenance mode"), "{out}");

    let (code, out, err) = tenure(&["list", "--config", path(&config), "--format", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("list --format json is JSON");
    let members = v.as_array().expect("an array of members");
    assert_eq!(members.len(), 2, "{out}");
    assert_eq!(members[0]["Member"], "pg1");
    assert_eq!(members[0]["Role"], "Leader");
    assert_eq!(members[0]["Cluster"], SCOPE);
    assert!(members[0].get("Lag in MB").is_none(), "{out}");
    assert_eq!(members[1]["Member"], "pg2");
    assert_eq!(members[1]["Role"], "Replica");
    assert_eq!(members[1]["Lag in MB"], 3);
    assert_eq!(members[1]["TL"], 3);
    assert_eq!(members[1]["Tags"]["zone"], "a");
    assert_eq!(members[1]["Scheduled restart"], "2030-01-01T12:00:00+00:00");
    assert!(members[0].get("Scheduled restart").is_none(), "{out}");
    assert_eq!(members[1]["Pending restart"], "*");
    assert_eq!(
        members[1]["Pending restart reason"],
        "max_connections: 100->200"
    );
    assert!(members[0].get("Pending restart reason").is_none(), "{out}");
    assert!(members[0].get("Pending restart").is_none(), "{out}");

    // Paused: patronictl's line under the table. TENURE_CONFIG stands in for --config.
    f.set_pause(true).await;
    let (code, out, err) = tenure_env(&["list"], &[("TENURE_CONFIG", path(&config))]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Maintenance mode: on"), "{out}");
    assert!(err.is_empty(), "no warnings for TENURE_CONFIG: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_patch_the_config_through_the_leader_with_credentials() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, out, err) = tenure(&["pause", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("paused"), "{out}");
    // The recording control only sees requests that passed the credential check.
    assert_eq!(
        f.pg1_api.control.calls(),
        [r#"patch_config {"pause":true}"#]
    );
    assert!(f.pg2_api.control.calls().is_empty(), "the leader first");

    f.set_pause(true).await;
    let (code, _, err) = tenure(&["pause", "--config", path(&config)]).await;
    assert_eq!(code, 1, "already paused: {err}");
    assert!(err.contains("already paused"), "{err}");

    let (code, out, err) = tenure(&["resume", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("resumed"), "{out}");
    assert_eq!(
        f.pg1_api.control.calls()[1],
        r#"patch_config {"pause":null}"#
    );

    // A token instead of basic auth.
    f.set_pause(false).await;
    let token = f.config_with("  token: t0ken\n");
    let (code, _, err) = tenure(&["pause", "--config", path(&token)]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(f.pg1_api.control.calls().len(), 3);

    // Wrong credentials: refused with the status, exit 1.
    let wrong = f.config_with("  authentication: {username: admin, password: wrong-password}\n");
    let (code, _, err) = tenure(&["pause", "--config", path(&wrong)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("401"), "{err}");
    assert_eq!(f.pg1_api.control.calls().len(), 3);

    // --wait: every member's /patroni reports the pause.
    for api in [&f.pg1_api, &f.pg2_api] {
        api.set(|p| p.status.paused = true);
    }
    let (code, out, err) = tenure(&["pause", "--wait", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("every member reports"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_asks_unless_forced_and_sends_leader_and_candidate() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, _, err) = tenure(&[
        "switchover",
        "--candidate",
        "pg2",
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 64, "stdin is not a terminal: {err}");
    assert!(err.contains("--force"), "{err}");
    assert!(f.pg1_api.control.calls().is_empty());

    let (code, out, err) = tenure(&[
        "switchover",
        "--candidate",
        "pg2",
        "--force",
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Successfully switched over"), "{out}");
    let calls = f.pg1_api.control.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0].starts_with("switchover SwitchoverRequest")
            && calls[0].contains(r#"leader: NodeName("pg1")"#)
            && calls[0].contains(r#"candidate: Some(NodeName("pg2"))"#),
        "{calls:?}"
    );

    // A candidate that is not a member is refused before anything is sent.
    let (code, _, err) = tenure(&[
        "switchover",
        "--candidate",
        "pg9",
        "--force",
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("pg9"), "{err}");

    // The API's refusal: exit 1 with its status and message.
    *f.pg1_api.control.refusal.lock().unwrap() =
        Some(ControlError::new(412, "candidate does not exists"));
    let (code, _, err) = tenure(&["switchover", "--force", "--config", path(&config)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("412") && err.contains("candidate does not exists"),
        "{err}"
    );
    *f.pg1_api.control.refusal.lock().unwrap() = None;

    let (code, out, err) = tenure(&[
        "failover",
        "--candidate",
        "pg2",
        "--force",
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Successfully failed over"), "{out}");
    assert_eq!(
        f.pg1_api.control.calls().last().unwrap(),
        r#"failover FailoverRequest { candidate: NodeName("pg2") }"#
    );
    let (code, _, err) =
        tenure(&["failover", "--candidate", "pg2", "--config", path(&config)]).await;
    assert_eq!(code, 64, "{err}");
    // patronictl 4.x: `--candidate` is optional, asked for on a terminal; a failover without one is
    // refused before anything is sent (with --force, or an empty answer).
    let sent = f.pg1_api.control.calls().len();
    let (code, _, err) = tenure(&["failover", "--force", "--config", path(&config)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Failover could be performed only to a specific candidate"),
        "{err}"
    );
    let (code, _, err) = tenure(&["failover", "--config", path(&config)]).await;
    assert_eq!(code, 64, "no terminal to ask on: {err}");
    assert!(err.contains("Candidate"), "{err}");
    assert_eq!(f.pg1_api.control.calls().len(), sent, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_config_are_read_and_edited() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, out, err) = tenure(&["history", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| TL | "), "{out}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("no recovery target"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows[0].contains("25165984")
            && rows[0].contains("2024-01-01T00:00:00+00:00")
            && rows[0].contains("pg1"),
        "{out}"
    );
    assert!(
        rows[1].contains("50331744") && rows[1].contains("pg2"),
        "{out}"
    );
    let (code, out, err) =
        tenure(&["history", "--format", "json", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[1]["New Leader"], "pg2");
    assert_eq!(v[0]["TL"], 1);

    let (code, out, err) = tenure(&["show-config", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    let shown: yaml_serde::Value = yaml_serde::from_str(&out).expect("YAML");
    assert_eq!(shown["loop_wait"], yaml_serde::Value::from(10));
    assert_eq!(
        shown["postgresql"]["parameters"]["work_mem"],
        yaml_serde::Value::from("4MB")
    );

    let (code, out, err) = tenure(&[
        "edit-config",
        "--set",
        "loop_wait=5",
        "--set",
        "postgresql.parameters.work_mem=8MB",
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Configuration changed"), "{out}");
    assert_eq!(
        f.pg1_api.control.calls(),
        [r#"patch_config {"loop_wait":5,"postgresql":{"parameters":{"work_mem":"8MB"}}}"#]
    );
    let (code, _, err) = tenure(&["edit-config", "--config", path(&config)]).await;
    assert_eq!(code, 64, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_store_and_apis_exit_69_naming_them() {
    let f = Fixture::start().await;
    let config = f.config();
    let pg1_base = f.pg1_api.base.clone();
    f.pg1_api.shutdown().await;
    // The leader's API is down: the next member's takes the request.
    let (code, _, err) = tenure(&["pause", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        f.pg2_api.control.calls(),
        [r#"patch_config {"pause":true}"#]
    );
    f.pg2_api.shutdown().await;
    let (code, _, err) = tenure(&["pause", "--config", path(&config)]).await;
    assert_eq!(code, 69, "{err}");
    assert!(err.contains(&pg1_base), "{err}");

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let file = f.dir.path().join("nowhere.yml");
    std::fs::write(
        &file,
        config_text(
            &format!("127.0.0.1:{closed}"),
            "  authentication: {username: admin, password: s3cret}\n",
        ),
    )
    .unwrap();
    for cmd in ["list", "history", "pause"] {
        let (code, _, err) = tenure(&[cmd, "--config", path(&file)]).await;
        assert_eq!(code, 69, "{cmd}: {err}");
        assert!(
            err.contains(&format!(
                "cannot reach the store at http://127.0.0.1:{closed}"
            )),
            "{cmd}: {err}"
        );
    }
}

#[tokio::test]
async fn missing_or_invalid_config_exits_64() {
    let (code, _, err) = tenure(&["list"]).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("--config") && err.contains("TENURE_CONFIG"),
        "{err}"
    );
    let (code, _, err) = tenure(&["list", "--config", "/nonexistent/tenure.yml"]).await;
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("/nonexistent/tenure.yml"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(&bad, "scope: x\nno_such_key: 1\n").unwrap();
    let (code, _, err) = tenure(&["switchover", "--force", "--config", path(&bad)]).await;
    assert_eq!(code, 64, "{err}");
    let (code, out, _) = tenure(&["--help"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("Exit codes:") && out.contains("69"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_scheduled_and_flush_restart_go_to_the_named_members_api() {
    let f = Fixture::start().await;
    let config = f.config();
    let at = "2030-01-01T12:00:00+00:00";
    // Without a terminal and without --force nothing is sent; a time without a zone is bad usage.
    let (code, _, err) = tenure(&[
        "restart",
        "pg2",
        "--scheduled",
        at,
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 64, "{err}");
    let naive = [
        "restart",
        "pg2",
        "--scheduled",
        "2030-01-01T12:00",
        "--force",
        "--config",
        path(&config),
    ];
    let (code, _, err) = tenure(&naive).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("--scheduled") && err.contains("time zone"),
        "{err}"
    );
    assert!(f.pg2_api.control.calls().is_empty());

    let scheduled = [
        "restart",
        "pg2",
        "--scheduled",
        at,
        "--force",
        "--config",
        path(&config),
    ];
    let (code, out, err) = tenure(&scheduled).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Success: restart on member pg2: Restart scheduled"),
        "{out}"
    );
    let calls = f.pg2_api.control.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0].contains("schedule_ms: Some(1893499200000)"),
        "{calls:?}"
    );

    // `now` is an immediate restart.
    let args = [
        "restart",
        "pg2",
        "--scheduled",
        "now",
        "--force",
        "--config",
        path(&config),
    ];
    let (code, out, _) = tenure(&args).await;
    assert_eq!(code, 0);
    assert!(out.contains("restarted successfully"), "{out}");
    let calls = f.pg2_api.control.calls();
    assert!(calls[1].contains("restart_pending: false"), "{calls:?}");

    // --pending sends Patroni's `restart_pending`.
    let args = [
        "restart",
        "pg2",
        "--pending",
        "--force",
        "--config",
        path(&config),
    ];
    let (code, _, err) = tenure(&args).await;
    assert_eq!(code, 0, "{err}");
    let calls = f.pg2_api.control.calls();
    assert!(calls[2].contains("restart_pending: true"), "{calls:?}");

    // flush NODE restart: DELETE /restart without a prompt (as patronictl's flush).
    let (code, out, err) = tenure(&["flush", "pg2", "restart", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("scheduled restart deleted"), "{out}");
    let calls = f.pg2_api.control.calls();
    assert_eq!(
        calls.last().map(String::as_str),
        Some("cancel_restart"),
        "{calls:?}"
    );
    assert!(
        f.pg1_api.control.calls().is_empty(),
        "only the named member is asked"
    );

    // Nothing scheduled: the member's 404, exit 1.
    *f.pg2_api.control.refusal.lock().unwrap() =
        Some(ControlError::new(404, "no restarts are scheduled"));
    let (code, _, err) = tenure(&["flush", "pg2", "restart", "--config", path(&config)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("404") && err.contains("no restarts are scheduled"),
        "{err}"
    );
    // Another one already scheduled: 409, exit 1.
    *f.pg2_api.control.refusal.lock().unwrap() = Some(ControlError::new(
        409,
        "Another restart is already scheduled",
    ));
    let (code, _, err) = tenure(&scheduled).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("409") && err.contains("Another restart is already scheduled"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_and_reinit_go_to_the_named_members_api_and_ask_unless_forced() {
    let f = Fixture::start().await;
    let config = f.config();
    // Without a terminal and without --force nothing is sent.
    for cmd in ["restart", "reinit"] {
        let (code, _, err) = tenure(&[cmd, "pg2", "--config", path(&config)]).await;
        assert_eq!(code, 64, "{cmd}: stdin is not a terminal: {err}");
        assert!(err.contains("--force"), "{cmd}: {err}");
    }
    // An unknown member is refused before anything is sent.
    for cmd in ["restart", "reinit"] {
        let (code, _, err) = tenure(&[cmd, "pg9", "--force", "--config", path(&config)]).await;
        assert_eq!(code, 1, "{cmd}: {err}");
        assert!(err.contains("pg9 is not a member"), "{cmd}: {err}");
    }
    assert!(f.pg1_api.control.calls().is_empty());
    assert!(f.pg2_api.control.calls().is_empty());

    let (code, out, err) = tenure(&["restart", "pg2", "--force", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Success: restart on member pg2"), "{out}");
    let (code, out, err) = tenure(&["reinit", "pg2", "--force", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Success: reinitialize on member pg2"), "{out}");
    // patronictl's `restart CLUSTER MEMBER`: the cluster first, which must be the config's scope.
    for cmd in ["restart", "reinit"] {
        let (code, _, err) = tenure(&[
            cmd,
            "elsewhere",
            "pg2",
            "--force",
            "--config",
            path(&config),
        ])
        .await;
        assert_eq!(code, 64, "{cmd}: {err}");
        assert!(err.contains("elsewhere"), "{cmd}: {err}");
    }
    assert_eq!(f.pg2_api.control.calls().len(), 2, "nothing more was sent");
    let (code, out, err) = tenure(&[
        "restart",
        SCOPE,
        "pg2",
        "--force",
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Success: restart on member pg2"), "{out}");
    let calls = f.pg2_api.control.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls[0].starts_with("restart"), "{calls:?}");
    assert!(calls[2].starts_with("restart"), "{calls:?}");
    assert!(
        calls[1].starts_with("reinitialize") && calls[1].contains("force: true"),
        "{calls:?}"
    );
    assert!(
        f.pg1_api.control.calls().is_empty(),
        "only the named member is asked"
    );

    // The member's refusal: exit 1 with its status and message.
    *f.pg1_api.control.refusal.lock().unwrap() = Some(ControlError::new(
        503,
        "I am the leader, can not reinitialize",
    ));
    let (code, _, err) = tenure(&["reinit", "pg1", "--force", "--config", path(&config)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("503") && err.contains("I am the leader, can not reinitialize"),
        "{err}"
    );
}

/// patronictl's habits: `-c/--config` before or after the command, `list -f json`,
/// `switchover --leader/--primary`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_is_global_and_patronictl_option_names_work() {
    let f = Fixture::start().await;
    let config = f.config();
    for args in [
        vec!["-c", path(&config), "list", "-f", "json"],
        vec!["--config", path(&config), "list", "-f", "json"],
        vec!["list", "-c", path(&config), "-f", "json"],
        vec!["list", "-f", "json", "--config", path(&config)],
        vec!["-c", path(&config), "list", SCOPE, "-f", "json"],
    ] {
        let (code, out, err) = tenure(&args).await;
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
        assert_eq!(v.as_array().map(Vec::len), Some(2), "{args:?}: {out}");
    }
    // patronictl's positional CLUSTER: tenure's config names one scope, another is refused.
    let (code, _, err) = tenure(&["-c", path(&config), "list", "other-cluster"]).await;
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("other-cluster"), "{err}");
    // --leader / --primary name the current leader; a wrong one is refused before anything is sent.
    let (code, _, err) = tenure(&[
        "-c",
        path(&config),
        "switchover",
        "--primary",
        "pg2",
        "--candidate",
        "pg2",
        "--force",
    ])
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("pg2 is not the leader"), "{err}");
    assert!(f.pg1_api.control.calls().is_empty());
    let (code, _, err) = tenure(&[
        "-c",
        path(&config),
        "switchover",
        "--leader",
        "pg1",
        "--candidate",
        "pg2",
        "--force",
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    let calls = f.pg1_api.control.calls();
    assert!(calls[0].contains(r#"leader: NodeName("pg1")"#), "{calls:?}");
}

/// patronictl refuses a switchover before sending it when the leader is alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_without_other_members_is_refused_before_sending() {
    let f = Fixture::start().await;
    let config = f.config();
    f._pg2.destroy_session(deadline()).await.unwrap();
    let (code, _, err) = tenure(&["switchover", "--force", "--config", path(&config)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("No candidates found to switchover to"),
        "{err}"
    );
    assert!(f.pg1_api.control.calls().is_empty());
}

/// `pause --wait` with one member's agent gone (its REST API does not answer, PostgreSQL may still run, as
/// pause allows): that member is reported, not waited for, as patronictl (which reads the member keys, and an
/// agent that is gone stops renewing its key) completes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_wait_reports_a_member_whose_agent_is_gone() {
    let f = Fixture::start().await;
    let config = f.config();
    f.pg1_api.set(|p| p.status.paused = true);
    let Fixture {
        pg1_api,
        pg2_api,
        server,
        ..
    } = f;
    pg2_api.shutdown().await;
    let (code, out, err) = tenure(&["pause", "--wait", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("Success: cluster management is paused"),
        "{out}"
    );
    assert!(
        out.contains("pg2") && out.contains("does not answer"),
        "the member that was not waited for is named: {out}"
    );
    assert_eq!(pg1_api.control.calls().len(), 1);
    drop(server);
}
