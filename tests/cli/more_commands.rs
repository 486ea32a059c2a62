//! patronictl's `reload`, `dsn`, `version`, `topology` and `edit-config` in `$EDITOR`, from the user's side.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_posts_to_each_chosen_member_after_the_list_and_the_question() {
    let f = Fixture::start().await;
    let config = f.config();
    let c = path(&config);
    // Without a terminal and without --force: refused before anything is sent.
    let (code, _, err) = tenure(&["reload", SCOPE, "--config", c]).await;
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--force"), "{err}");
    assert!(f.pg1_api.control.calls().is_empty());

    let (code, out, err) = tenure(&["reload", SCOPE, "--force", "--config", c]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("+ Cluster: {SCOPE} (")),
        "the list first:\n{out}"
    );
    for m in ["pg1", "pg2"] {
        assert!(
            out.contains(&format!(
                "Reload request received for member {m} and will be processed within 10 seconds"
            )),
            "{out}"
        );
    }
    assert_eq!(f.pg1_api.control.calls(), ["reload"]);
    assert_eq!(f.pg2_api.control.calls(), ["reload"]);

    // Named members, and roles.
    let (code, _, err) = tenure(&["reload", SCOPE, "pg2", "--force", "--config", c]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(f.pg2_api.control.calls().len(), 2);
    assert_eq!(f.pg1_api.control.calls().len(), 1);
    let (code, _, err) = tenure(&["reload", SCOPE, "-r", "leader", "--force", "--config", c]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(f.pg1_api.control.calls().len(), 2);
    assert_eq!(f.pg2_api.control.calls().len(), 2);
    let (code, _, err) = tenure(&[
        "reload", SCOPE, "pg1", "-r", "replica", "--force", "--config", c,
    ])
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("No replica among provided members"), "{err}");

    // A member that refuses: patronictl's line, exit 1.
    *f.pg2_api.control.refusal.lock().unwrap() = Some(ControlError::new(503, "busy"));
    let (code, out, err) = tenure(&["reload", SCOPE, "--force", "--config", c]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        out.contains("Failed: reload for member pg2, status code=503, (busy)"),
        "{out}"
    );

    // The cluster must be the config's scope.
    let (code, _, err) = tenure(&["reload", "gotham", "--force", "--config", c]).await;
    assert_eq!(code, 64, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsn_prints_the_chosen_members_host_and_port() {
    let f = Fixture::start().await;
    let config = f.config();
    let c = path(&config);
    let dsn = |args: &'static [&'static str]| {
        let mut all = vec!["dsn"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--config", c]);
        async move { tenure(&all).await }
    };
    assert_eq!(dsn(&[]).await.1, "host=10.0.0.1 port=5432\n");
    assert_eq!(
        dsn(&[SCOPE, "-r", "replica"]).await.1,
        "host=10.0.0.2 port=5433\n"
    );
    assert_eq!(dsn(&["-m", "pg2"]).await.1, "host=10.0.0.2 port=5433\n");
    assert_eq!(dsn(&["-r", "primary"]).await.1, "host=10.0.0.1 port=5432\n");
    let (code, _, err) = dsn(&["-r", "standby-leader"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("Can not find a suitable member"), "{err}");
    let (code, _, err) = dsn(&["-m", "pg9"]).await;
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = dsn(&["-m", "pg2", "-r", "leader"]).await;
    assert_eq!(code, 64, "--role and --member together: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_prints_its_own_then_each_members() {
    let f = Fixture::start().await;
    f.pg2_api.set(|p| p.server_version = Some(150004));
    let config = f.config();
    let c = path(&config);
    let own = format!("tenure version {}\n", env!("CARGO_PKG_VERSION"));
    // No cluster: no config needed.
    let (code, out, err) = tenure(&["version"]).await;
    assert_eq!((code, out.as_str()), (0, own.as_str()), "{err}");

    let (code, out, err) = tenure(&["version", SCOPE, "--config", c]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!("{own}\npg1: Patroni 0.1.0 PostgreSQL 16.4\npg2: Patroni 0.1.0 PostgreSQL 15.4\n")
    );
    let (code, out, err) = tenure(&["version", SCOPE, "pg2", "--config", c]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{own}\npg2: Patroni 0.1.0 PostgreSQL 15.4\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_puts_the_replicas_below_the_leader() {
    let f = Fixture::start().await;
    let config = f.config();
    let (code, out, err) = tenure(&["topology", "--config", path(&config)]).await;
    assert_eq!(code, 0, "{err}");
    let names: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Member"))
        .filter_map(|l| l.split('|').nth(1))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    assert_eq!(names, ["pg1", "+ pg2"], "{out}");
    // Tags in YAML flow style, as patronictl's topology prints them.
    assert!(out.contains("{zone: a}"), "{out}");
    assert!(
        out.starts_with(&format!("+ Cluster: {SCOPE} ({SYSID}) ")),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_config_opens_the_editor_shows_the_diff_and_patches_what_changed() {
    let f = Fixture::start().await;
    let config = f.config();
    let c = path(&config);
    // The editor: a script that rewrites the file it is given.
    let editor = f.dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i -e 's/^loop_wait: 10$/loop_wait: 7/' -e '/^retry_timeout:/d' \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let ed = path(&editor);
    let (code, out, err) = tenure_env(
        &["edit-config", "--config", c],
        &[("EDITOR", ed), ("PATH", "/usr/bin:/bin")],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "--- \n+++ \n@@ -1,6 +1,5 @@\n-loop_wait: 10\n+loop_wait: 7\n postgresql:\n   parameters:\n     \
         work_mem: 4MB\n-retry_timeout: 10\n ttl: 30\nConfiguration changed\n"
    );
    assert_eq!(
        f.pg1_api.control.calls(),
        [r#"patch_config {"loop_wait":7,"retry_timeout":null}"#]
    );

    // An editor that changes nothing, one that fails, none at all.
    let (code, out, err) = tenure_env(&["edit-config", "--config", c], &[("EDITOR", "true")]).await;
    assert_eq!((code, out.as_str()), (0, "Not changed\n"), "{err}");
    let (code, _, err) = tenure_env(&["edit-config", "--config", c], &[("EDITOR", "false")]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("Editor exited with return code 1"), "{err}");
    let (code, _, err) = tenure(&["edit-config", "--config", c]).await;
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("EDITOR"), "{err}");
    assert_eq!(f.pg1_api.control.calls().len(), 1);

    // -p and -q; --apply FILE merges.
    let (code, out, err) =
        tenure(&["edit-config", "-q", "-p", "work_mem=16MB", "--config", c]).await;
    assert_eq!(
        (code, out.as_str()),
        (0, "Configuration changed\n"),
        "{err}"
    );
    assert_eq!(
        f.pg1_api.control.calls()[1],
        r#"patch_config {"postgresql":{"parameters":{"work_mem":"16MB"}}}"#
    );
    let apply = f.dir.path().join("apply.yml");
    std::fs::write(
        &apply,
        "ttl: 40\npostgresql: {parameters: {max_connections: 50}}\n",
    )
    .unwrap();
    let (code, _, err) =
        tenure(&["edit-config", "-q", "--apply", path(&apply), "--config", c]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        f.pg1_api.control.calls()[2],
        r#"patch_config {"postgresql":{"parameters":{"max_connections":50}},"ttl":40}"#
    );
    // From stdin, patronictl wants --force.
    for (force, calls) in [(false, 3), (true, 4)] {
        let mut args = vec!["edit-config", "--apply", "-", "--config", c];
        if force {
            args.push("--force");
        }
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(&args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stdin, b"ttl: 50\n")
            .await
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("+ttl: 50"), "{text}");
        assert_eq!(
            text.contains("Use --force option to apply changes"),
            !force,
            "{text}"
        );
        assert_eq!(f.pg1_api.control.calls().len(), calls, "{text}");
    }
}
