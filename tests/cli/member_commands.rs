//! Commands for one member, sent to its own REST API: `restart` (now, scheduled, pending), `flush`, `reinit`.
use super::*;

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
