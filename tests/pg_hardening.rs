//! Hardening against local attackers on real PostgreSQL 15: child environments, passwords in the server
//! log, the peer SQL probe's credentials, outbound HTTP and proxies (issue 13).
#[path = "support/pg.rs"]
mod pg_support;

use pg_support::PgNode;
use tenure::dcs::MemberRecord;
use tenure::ha::types::NodeName;
use tenure::ha::PgRole;
use tenure::pg::ctl::{self, InitdbOptions};

async fn bootstrap(node: &PgNode) {
    ctl::bootstrap(&node.settings, &InitdbOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
}

/// One node started through the agent's code path with `TENURE_*` secrets in the environment and
/// `log_statement = all`: the postmaster's environment holds no `TENURE_` variable, and neither the
/// replication nor the rewind password reaches the server log although the roles were created with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_the_postmaster_environment_or_the_server_log() {
    // Set before any child is spawned; this test binary has no other user of these variables.
    std::env::set_var("TENURE_SUPERUSER_PASSWORD", "env-secret-1");
    std::env::set_var("TENURE_RESTAPI_PASSWORD", "env-secret-2");
    let mut node = PgNode::new("hard-a");
    let s = &mut node.settings;
    s.parameters.insert("log_statement".into(), "all".into());
    s.parameters
        .insert("log_min_duration_statement".into(), "0".into());
    s.replication.password = "repl-pw-XYZZY-1".into();
    s.rewind.password = "rewind-pw-XYZZY-2".into();
    bootstrap(&node).await;

    let pid = node.postmaster_pid().expect("postmaster.pid");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("read environ");
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| v.starts_with("TENURE_"))
        .collect();
    assert!(vars.is_empty(), "the postmaster inherited {vars:?}");

    // Run the role statements once more on a running server (the update path), then read the log.
    ctl::create_roles(&node.settings)
        .await
        .expect("create_roles");
    let log = node.log();
    assert!(
        log.contains("statement:"),
        "log_statement = all logged nothing: the check below would prove nothing\n{log}"
    );
    for pw in ["repl-pw-XYZZY-1", "rewind-pw-XYZZY-2"] {
        assert!(
            !log.contains(pw),
            "the password {pw} is in the server log:\n{log}"
        );
    }
}

/// The peer SQL probe (used when a member's REST API does not answer) authenticates with a password
/// holding a space, a backslash and a quote; before the fix the unquoted conninfo broke it and the probe
/// reported nothing, which silently disabled the "a peer is still primary" check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_sql_probe_works_with_a_password_holding_a_space_and_a_backslash() {
    let mut node = PgNode::new("hard-b");
    node.settings.superuser.password = r"pa ss\word 'q".into();
    bootstrap(&node).await;
    let s = &node.settings;
    let member = MemberRecord {
        conn_url: format!("postgres://127.0.0.1:{}/postgres", s.listen_port),
        // No REST API: the probe must fall back to SQL.
        api_url: String::new(),
        ..MemberRecord::default()
    };
    let client = reqwest::Client::new();
    let creds = (s.superuser.username.clone(), s.superuser.password.clone());
    let probes = tenure::agent::peers::probe_all(
        &client,
        &[("peer".into(), member)],
        &NodeName::new("me"),
        creds,
    )
    .await;
    assert_eq!(probes.len(), 1);
    let answer = probes[0].answer.as_ref().expect("the SQL probe answered");
    assert_eq!(answer.role, Some(PgRole::Primary));
}
