//! `demote-cluster` and `promote-cluster` as an operator meets them: refusals before anything is sent, the
//! `config` PATCH bodies (Patroni 4.1's `standby_cluster`, tenure's `handover`), and what is left behind when
//! the site does not change role in time.
use super::*;

/// pg1 as a standby leader of a site whose `config` key names its source.
async fn standby_site(f: &Fixture) {
    let snap = f.pg1.get_cluster(true, deadline()).await.unwrap();
    let (mut config, index) = snap.config.unwrap();
    config["standby_cluster"] = json!({"host": "10.9.0.1", "port": 5432});
    f.pg1
        .cas_config(&config, Some(index), deadline())
        .await
        .unwrap();
    let leader = MemberRecord {
        conn_url: "postgres://10.0.0.1:5432/postgres".into(),
        api_url: format!("{}/patroni", f.pg1_api.base),
        state: "streaming".into(),
        role: "standby_leader".into(),
        version: "0.1.0".into(),
        replay_lsn: Some(LEADER_LSN),
        timeline: Some(3),
        ..MemberRecord::default()
    };
    f.pg1.publish_member(&leader, deadline()).await.unwrap();
}

/// `tenure <args>` with `answer` on its stdin: (exit code, stdout, stderr).
async fn tenure_answering(args: &[&str], answer: &str) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tenure");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answer.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the CLI finishes within 60 s")
        .expect("its output");
    outcome(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demote_cluster_refuses_without_a_source_or_an_answer_and_sends_patronis_body() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, _, err) = tenure(&["demote-cluster", "--force", "--config", path(&config)]).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("At least --host, --port or --restore-command"),
        "{err}"
    );
    let args = ["demote-cluster", "--host", "10.9.0.1", "--port", "5433"];
    let (code, _, err) = tenure(&[&args[..], &["--config", path(&config)]].concat()).await;
    assert_eq!(code, 64, "stdin is not a terminal: {err}");
    assert!(err.contains("--force"), "{err}");
    assert!(f.pg1_api.control.calls().is_empty(), "nothing sent");

    // The fake agent accepts the PATCH but the site never reports a standby leader: the deadline ends it.
    let forced = [&args[..], &["--primary-slot-name", "site_b", "--force"]].concat();
    let (code, out, err) =
        tenure(&[&forced[..], &["--timeout", "1", "--config", path(&config)]].concat()).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("the leader is not a running standby_leader after 1 s"),
        "{err}"
    );
    assert!(
        !out.contains("handover token"),
        "no token without a demotion: {out}"
    );
    let calls = f.pg1_api.control.calls();
    let body = json!({"standby_cluster": {"host": "10.9.0.1", "port": 5433, "primary_slot_name": "site_b"},
                      "handover": null});
    assert_eq!(calls, vec![format!("patch_config {body}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demote_cluster_refuses_a_site_that_is_already_a_standby() {
    let f = Fixture::start().await;
    standby_site(&f).await;
    let config = f.config();
    let args = [
        "demote-cluster",
        "--host",
        "h",
        "--force",
        "--config",
        path(&config),
    ];
    let (code, _, err) = tenure(&args).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Cluster is already in the required state"),
        "{err}"
    );
    assert!(f.pg1_api.control.calls().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_cluster_needs_a_token_or_a_typed_yes_and_refuses_a_primary_site() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, _, err) = tenure(&["promote-cluster", "--config", path(&config)]).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("--token TIMELINE:LSN") && err.contains("--force"),
        "{err}"
    );
    for bad in ["3", "x:0/1", "3:nowhere", ":"] {
        let (code, _, err) =
            tenure(&["promote-cluster", "--token", bad, "--config", path(&config)]).await;
        assert_eq!(code, 64, "--token {bad}: {err}");
    }
    let (code, _, err) = tenure(&[
        "promote-cluster",
        "--token",
        "3:0/5000028",
        "--config",
        path(&config),
    ])
    .await;
    assert_eq!(code, 1, "pg1 is a primary: {err}");
    assert!(
        err.contains("Cluster is already in the required state"),
        "{err}"
    );

    standby_site(&f).await;
    let forced = ["promote-cluster", "--force", "--config", path(&config)];
    let (code, out, err) = tenure_answering(&forced, "n\n").await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("must never run as a primary again"),
        "the warning is shown: {out}"
    );
    assert!(err.contains("Aborted cluster promotion"), "{err}");
    let (code, _, err) = tenure(&forced).await;
    assert_eq!(code, 1, "no answer on stdin is no: {err}");
    assert!(f.pg1_api.control.calls().is_empty(), "nothing sent");
}

/// A promotion that does not happen within its deadline is disarmed: `standby_cluster` is written back, so
/// the site does not promote later on its own (the primary site may only have stopped answering).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_past_its_deadline_puts_standby_cluster_back() {
    let f = Fixture::start().await;
    standby_site(&f).await;
    let config = f.config();
    let args = [
        "promote-cluster",
        "--token",
        "3:0/5000028",
        "--timeout",
        "1",
    ];
    let (code, out, err) = tenure(&[&args[..], &["--config", path(&config)]].concat()).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("standby_cluster was put back"), "{err}");
    let promote = json!({"standby_cluster": null, "handover": {"timeline": 3, "lsn": "0/5000028"}});
    let back = json!({"standby_cluster": {"host": "10.9.0.1", "port": 5432}, "handover": null});
    let calls = f.pg1_api.control.calls();
    assert_eq!(
        calls,
        vec![
            format!("patch_config {promote}"),
            format!("patch_config {back}")
        ]
    );

    let forced = [
        "promote-cluster",
        "--force",
        "--timeout",
        "1",
        "--config",
        path(&config),
    ];
    let (code, _, err) = tenure_answering(&forced, "y\n").await;
    assert_eq!(code, 1, "{err}");
    let none = json!({"standby_cluster": null, "handover": null});
    assert_eq!(f.pg1_api.control.calls()[2], format!("patch_config {none}"));
    assert_eq!(f.pg1_api.control.calls()[3], format!("patch_config {back}"));
}

/// The other site's PostgreSQL does not answer while demote-cluster waits for it to replay the token: the
/// deadline ends the wait, exit 1, with the token printed and the command that finishes the switchover named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demote_cluster_prints_the_token_when_the_other_site_never_answers() {
    let f = Fixture::start().await;
    let config = f.config();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let args = [
        "demote-cluster",
        "--host",
        "127.0.0.1",
        "--port",
        &closed,
        "--force",
        "--timeout",
        "5",
        "--config",
        path(&config),
    ];
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let run = tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tenure(&args).await
    });
    // What the agent does on the PATCH: its primary comes back as the standby leader.
    let patched = tokio::time::timeout(Duration::from_secs(30), async {
        while f.pg1_api.control.calls().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    patched.await.expect("demote-cluster sends its PATCH");
    standby_site(&f).await;
    let (code, out, err) = run.await.unwrap();
    assert_eq!(code, 1, "{out}{err}");
    let token = format!("3:{}", tenure::ha::Lsn(LEADER_LSN));
    assert!(out.contains("cluster is successfully demoted"), "{out}");
    assert!(out.contains(&format!("handover token: {token}")), "{out}");
    assert!(
        err.contains(&format!("has not replayed up to {token} within 5 s"))
            && err.contains(&format!("tenure promote-cluster --token {token}")),
        "{err}"
    );
}

/// No store: nothing is sent, exit 69 naming it (the other commands' habit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_commands_without_the_store_exit_69_before_sending() {
    let f = Fixture::start().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let file = f.dir.path().join("nowhere.yml");
    let auth = "  authentication: {username: admin, password: s3cret}\n";
    std::fs::write(&file, config_text(&format!("127.0.0.1:{closed}"), auth)).unwrap();
    for cmd in [
        &["demote-cluster", "--host", "h", "--force"][..],
        &["promote-cluster", "--token", "3:0/5000028"][..],
    ] {
        let (code, _, err) = tenure(&[cmd, &["--config", path(&file)]].concat()).await;
        assert_eq!(code, 69, "{cmd:?}: {err}");
        assert!(err.contains("cannot reach the store"), "{cmd:?}: {err}");
    }
    assert!(f.pg1_api.control.calls().is_empty());
}
