//! Exit codes for an unreachable store or API and a bad config; patronictl's option habits; refusals before
//! sending; `pause --wait` with an agent gone.
use super::*;

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
