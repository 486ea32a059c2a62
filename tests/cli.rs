//! The operator CLI, run as the built binary against the Consul test double (the cluster state written through
//! `ConsulDcs`) and two real REST API servers whose `Control` records what reaches it.
#[path = "support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "support/pg.rs"]
mod pg_support;

#[path = "api/harness.rs"]
#[allow(dead_code)]
mod harness;

#[path = "cli/cluster_commands.rs"]
mod cluster_commands;
#[path = "cli/exits_and_habits.rs"]
mod exits_and_habits;
#[path = "cli/member_commands.rs"]
mod member_commands;
#[path = "cli/more_commands.rs"]
mod more_commands;
#[path = "cli/packaging.rs"]
mod packaging;
#[path = "cli/query.rs"]
mod query;
#[path = "cli/remove.rs"]
mod remove;
#[path = "cli/site_commands.rs"]
mod site_commands;

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
/// The replica replays a megabyte behind what it has received.
const REPLAYED_LSN: u64 = REPLICA_LSN - 1024 * 1024;

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
    ConsulDcs::new(ConsulSettings::new(
        &server.url(),
        SCOPE,
        name,
        tenure::ha::SessionStore::Consul.session_ttl_ms(120_000),
    ))
    .expect("client")
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
            replay_lsn: Some(REPLAYED_LSN),
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
    outcome(&out)
}

/// A finished CLI's (exit code, stdout, stderr).
fn outcome(out: &std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// The harness's reaper (PostgreSQL's daemonized postmasters are re-parented here) leaves a child that its
/// spawner waits for alone, even a moment after it exited: CI on 1d670c6 saw a CLI's wait fail with ECHILD.
#[test]
fn the_harness_reaper_leaves_a_spawned_child_to_its_waiter() {
    pg_support::init_process();
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    std::thread::sleep(Duration::from_millis(500));
    let status = child.wait().expect("the spawner reaps its own child");
    assert!(status.success());
}
