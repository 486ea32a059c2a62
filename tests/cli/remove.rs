//! patronictl's `remove` from the user's side: the listing, three typed answers read from a pipe, and the
//! scope's keys gone only when every answer was right; another cluster's keys never.
use tokio::io::AsyncWriteExt;

use super::*;

const NAME_Q: &str = "Please confirm the cluster name to remove: ";
const AWARE_Q: &str =
    "You are about to remove all information in DCS for batman, please type: \"Yes I am aware\": ";
const LEADER_Q: &str =
    "This cluster currently is healthy. Please specify the leader name to continue: ";

/// `tenure <args>` with `input` piped to stdin (then closed): (exit code, stdout, stderr).
async fn tenure_typing(args: &[&str], input: &str) -> (i32, String, String) {
    // Held off the process-wide reaper (another test of this binary runs a cluster, and so the reaper): it
    // would reap the exited CLI first and the wait fail with ECHILD (seen in CI, 12-07).
    let reaper = tenure::demo::local::reaper();
    let mut child = reaper.spawn_with(|| {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tenure");
        let pid = child.id().map(|p| p as i32).into_iter().collect();
        (child, pid)
    });
    let pid = child.id().map(|p| p as i32);
    let mut stdin = child.stdin.take().unwrap();
    // A refused answer may end the process before it reads the rest: a broken pipe is no failure here.
    let _ = stdin.write_all(input.as_bytes()).await;
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the CLI finishes within 60 s")
        .expect("tenure's output");
    if let Some(pid) = pid {
        reaper.release(pid);
    }
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The fixture's cluster, all there: (initialize, config, history, leader, members).
async fn intact(f: &Fixture) -> bool {
    let s = f.pg1.get_cluster(true, deadline()).await.unwrap();
    s.cluster.initialize.as_deref() == Some(SYSID)
        && s.config.is_some()
        && s.history.is_some()
        && s.cluster.leader_name().map(|n| n.as_str()) == Some("pg1")
        && s.members.len() == 2
}

/// Another cluster on the same Consul, its name starting with ours: `remove batman` must not touch it.
async fn neighbour(f: &Fixture) -> ConsulDcs {
    let settings = ConsulSettings::new(
        &f.server.url(),
        "batman2",
        "pg9",
        tenure::ha::SessionStore::Consul.session_ttl_ms(120_000),
    );
    let other = ConsulDcs::new(settings).unwrap();
    other.race_initialize("42", deadline()).await.unwrap();
    other
        .cas_config(&json!({"ttl": 30}), None, deadline())
        .await
        .unwrap();
    other
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_answer_deletes_nothing() {
    let f = Fixture::start().await;
    let config = f.config();
    let args = ["remove", SCOPE, "--config", path(&config)];
    let cases = [
        ("gotham\n", "Cluster names specified do not match"),
        (
            "batman\nYes I am\n",
            "You did not exactly type \"Yes I am aware\"",
        ),
        (
            "batman\nYes I am aware\npg2\n",
            "You did not specify the current leader of the cluster",
        ),
        // Input ends before the last answer: click's abort.
        ("batman\nYes I am aware\n", "Aborted!"),
        ("", "Aborted!"),
    ];
    for (input, why) in cases {
        let (code, out, err) = tenure_typing(&args, input).await;
        assert_eq!(code, 1, "{input:?}: {out}{err}");
        assert!(err.contains(why), "{input:?}: {err}");
        assert!(
            out.starts_with(&format!("+ Cluster: {SCOPE} ({SYSID})")),
            "the listing first:\n{out}"
        );
        assert!(out.contains(NAME_Q), "{out}");
        assert!(intact(&f).await, "{input:?} deleted keys");
    }
    // The cluster must be the config's scope: bad usage, nothing asked.
    let (code, out, err) = tenure_typing(
        &["remove", "gotham", "--config", path(&config)],
        "gotham\nYes I am aware\npg1\n",
    )
    .await;
    assert_eq!((code, out.as_str()), (64, ""), "{err}");
    assert!(intact(&f).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_answers_wipe_the_scope_and_only_it() {
    let f = Fixture::start().await;
    let other = neighbour(&f).await;
    let config = f.config();
    let c = path(&config);
    let (code, out, err) = tenure_typing(
        &["remove", SCOPE, "--config", c],
        "batman\nYes I am aware\npg1\n",
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.ends_with(&format!("{NAME_Q}{AWARE_Q}{LEADER_Q}")),
        "patronictl's questions, in order:\n{out}"
    );
    let s = f.pg1.get_cluster(true, deadline()).await.unwrap();
    assert_eq!(s.cluster.initialize, None);
    assert_eq!(s.cluster.leader, None);
    assert!(s.members.is_empty() && s.config.is_none() && s.history.is_none());
    let (code, out, err) = tenure(&["list", "--config", c]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("+ Cluster: {SCOPE} (uninitialized)")) && !out.contains("pg1"),
        "an empty cluster:\n{out}"
    );
    let kept = other.get_cluster(true, deadline()).await.unwrap();
    assert_eq!(kept.cluster.initialize.as_deref(), Some("42"));
    assert!(kept.config.is_some(), "the other cluster's config went too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_leader_two_answers_do_and_an_absent_store_is_69() {
    let mut f = Fixture::start().await;
    f.pg1.release_leader(deadline()).await.unwrap();
    let config = f.config();
    let args = ["remove", SCOPE, "-f", "json", "--config", path(&config)];
    let (code, out, err) = tenure_typing(&args, "batman\nYes I am aware\n").await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("[{") && out.contains("\"Member\""),
        "the listing in JSON:\n{out}"
    );
    assert!(out.ends_with(AWARE_Q) && !out.contains(LEADER_Q), "{out}");
    let s = f.pg1.get_cluster(true, deadline()).await.unwrap();
    assert!(s.members.is_empty() && s.cluster.initialize.is_none());

    f.server.stop();
    let (code, _, err) = tenure_typing(&args, "batman\nYes I am aware\n").await;
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("cannot reach the store"), "{err}");
}
