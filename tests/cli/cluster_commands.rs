//! Cluster-wide commands: `list`, `pause`/`resume`, `switchover`, `history`, `show-config`/`edit-config`.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_both_members_with_roles_and_lag() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, out, err) = tenure(&["list", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    let table = out.clone();
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
    // | Member | Host | Role | State | TL | Receive LSN | Lag | Replay LSN | Lag | Pending restart |
    // Pending restart reason | Scheduled restart | Tags |  (patronictl 4.1's columns; lag behind the optime)
    assert!(
        lines[1].contains("| TL | Receive LSN | Lag | Replay LSN | Lag | Pending restart |"),
        "{out}"
    );
    assert_eq!(
        row("pg1")[1..14],
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
            "",
            "",
            "",
            "",
        ][..],
        "{out}"
    );
    assert_eq!(
        row("pg2")[1..14],
        [
            "pg2",
            "10.0.0.2:5433",
            "Replica",
            "streaming",
            "3",
            "0/2D00060",
            "3",
            "0/2C00060",
            "4",
            "*",
            "max_connections: 100->200",
            "2030-01-01T12:00:00+00:00",
            "zone: a"
        ][..],
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
    assert!(members[0].get("Receive LSN").is_none(), "{out}");
    assert!(members[0].get("Replay Lag").is_none(), "{out}");
    assert_eq!(members[1]["Member"], "pg2");
    assert_eq!(members[1]["Role"], "Replica");
    assert_eq!(members[1]["Receive LSN"], "0/2D00060");
    assert_eq!(members[1]["Receive Lag"], 3);
    assert_eq!(members[1]["Replay LSN"], "0/2C00060");
    assert_eq!(members[1]["Replay Lag"], 4);
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

    // `-f yaml` holds what `-f json` holds; `-f tsv` is patronictl's: a Cluster column, each lag by name.
    let (code, yaml, err) = tenure(&["list", "--config", path(&config), "-f", "yaml"]).await;
    assert_eq!(code, 0, "{err}");
    let from_yaml: Value = yaml_serde::from_str(&yaml).expect("list -f yaml is YAML");
    assert_eq!(&from_yaml, &v, "yaml:\n{yaml}");
    assert!(
        yaml.contains("  Scheduled restart: '2030-01-01T12:00:00+00:00'\n"),
        "{yaml}"
    );
    let (code, tsv, err) = tenure(&["list", "--config", path(&config), "-f", "tsv"]).await;
    assert_eq!(code, 0, "{err}");
    let tsv: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(
        tsv[0][..10],
        [
            "Cluster",
            "Member",
            "Host",
            "Role",
            "State",
            "TL",
            "Receive LSN",
            "Receive Lag",
            "Replay LSN",
            "Replay Lag"
        ]
    );
    assert_eq!(
        tsv[2][5..],
        [
            "3",
            "0/2D00060",
            "3",
            "0/2C00060",
            "4",
            "*",
            "max_connections: 100->200",
            "2030-01-01T12:00:00+00:00",
            "{zone: a}"
        ]
    );
    // `-f pretty` is patronictl's name for the table; `-e` is accepted (its columns are in the unit tests).
    let (code, pretty, err) = tenure(&["list", "--config", path(&config), "-f", "pretty"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(pretty, table, "pretty is the table");
    let (code, extended, err) = tenure(&["list", "-e", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(extended, table, "every optional column already shows");

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

/// patronictl's `-w SECONDS` lists again until interrupted and `-t` puts the time above each listing; the
/// screen is cleared only on a terminal. A watch interval that is not a number of seconds is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_watches_until_interrupted() {
    let f = Fixture::start().await;
    let config = f.config();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["list", "-t", "-w", "0.2", "--config", path(&config)])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tenure list -w");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.start_kill().expect("kill tenure list -w");
    let out = child.wait_with_output().await.expect("its output");
    let text = String::from_utf8_lossy(&out.stdout);
    let titles = text.matches(&format!("+ Cluster: {SCOPE} (")).count();
    assert!(titles >= 3, "listed {titles} times in 1.5 s:\n{text}");
    let stamp = |l: &&str| {
        let b = l.as_bytes();
        l.len() == 19 && b[4] == b'-' && b[10] == b' ' && b[13] == b':'
    };
    assert_eq!(text.lines().filter(stamp).count(), titles, "{text}");
    assert!(
        !text.contains('\x1b'),
        "stdout is not a terminal: no clearing"
    );

    for bad in ["0", "soon", "1e9"] {
        let (code, _, err) = tenure(&["list", "-w", bad, "--config", path(&config)]).await;
        assert_eq!(code, 64, "-w {bad}: {err}");
        assert!(err.contains("number of seconds"), "-w {bad}: {err}");
    }
}
