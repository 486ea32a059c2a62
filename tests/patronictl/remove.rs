//! `tenure remove` asks what `patronictl remove` asks, refuses what it refuses, and leaves the store as it does.
use std::io::Write;
use std::process::Stdio;

use super::*;

/// A cluster (pg1 leader, pg2 replica) in `SCOPE` and one key of `batman2`, by fresh clients.
async fn populate(etcd: &EtcdServer) {
    let (pg1, pg2) = (agent(etcd, "pg1"), agent(etcd, "pg2"));
    pg1.race_initialize("7268000000000000001", deadline())
        .await
        .unwrap();
    pg1.ensure_session(deadline()).await.unwrap();
    pg1.acquire_leader(deadline()).await.unwrap();
    pg1.publish_member(&record("127.0.0.11", "primary", "running"), deadline())
        .await
        .unwrap();
    pg2.ensure_session(deadline()).await.unwrap();
    pg2.publish_member(&record("127.0.0.12", "replica", "running"), deadline())
        .await
        .unwrap();
    // Written once: the second time it is there already (a create-only write refused).
    let other = EtcdDcs::new(neighbour_settings(etcd)).unwrap();
    let _ = other.race_initialize("42", deadline()).await;
}

fn neighbour_settings(etcd: &EtcdServer) -> EtcdSettings {
    EtcdSettings {
        endpoints: etcd.endpoints(),
        scope: "batman2".into(),
        namespace: "/service/".into(),
        name: "pg9".into(),
        ttl_ms: 30_000,
        user: None,
        password: None,
        tls: None,
    }
}

/// `program args` with `input` on stdin: (exit code, what follows the listing on stdout, the error
/// message on stderr without the program's prefix).
fn typing(program: &str, args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run it");
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let questions = match stdout.find("Please confirm") {
        Some(at) => stdout[at..].to_string(),
        None => panic!("{program} asked nothing:\n{stdout}"),
    };
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let message = stderr
        .strip_prefix("Error: ")
        .or_else(|| stderr.strip_prefix("tenure: "))
        .unwrap_or(&stderr)
        .to_string();
    (out.status.code().unwrap_or(-1), questions, message)
}

/// What is left: the scope's member names and `initialize`, and `batman2`'s `initialize`.
async fn left(etcd: &EtcdServer) -> (Vec<String>, Option<String>, Option<String>) {
    let ours = agent(etcd, "ops")
        .get_cluster(true, deadline())
        .await
        .unwrap();
    let theirs = EtcdDcs::new(neighbour_settings(etcd)).unwrap();
    let theirs = theirs.get_cluster(true, deadline()).await.unwrap();
    (
        ours.members.keys().cloned().collect(),
        ours.cluster.initialize,
        theirs.cluster.initialize,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_asks_refuses_and_deletes_as_patronictl() {
    let etcd = EtcdServer::start();
    populate(&etcd).await;
    let (dir, yaml) = patronictl_config(&etcd);
    let ours = tenure_config(&dir, &etcd);
    let theirs_args = ["-c", yaml.to_str().unwrap(), "remove", SCOPE];
    let our_args = ["remove", SCOPE, "--config", ours.to_str().unwrap()];
    let tenure_bin = env!("CARGO_BIN_EXE_tenure");
    let full = (
        vec!["pg1".to_string(), "pg2".to_string()],
        Some("7268000000000000001".to_string()),
        Some("42".to_string()),
    );
    for input in [
        "gotham\n",
        "batman\nyes\n",
        "batman\nYes I am aware\npg2\n",
        "batman\n",
    ] {
        let theirs = typing(PATRONICTL, &theirs_args, input);
        let mine = typing(tenure_bin, &our_args, input);
        assert_eq!(mine, theirs, "{input:?}");
        assert_eq!(theirs.0, 1, "{theirs:?}");
        assert_eq!(left(&etcd).await, full, "{input:?} deleted keys");
    }
    let right = "batman\nYes I am aware\npg1\n";
    let theirs = typing(PATRONICTL, &theirs_args, right);
    let after_theirs = left(&etcd).await;
    populate(&etcd).await;
    assert_eq!(left(&etcd).await, full);
    let mine = typing(tenure_bin, &our_args, right);
    assert_eq!(mine, theirs);
    assert_eq!(theirs.0, 0, "{theirs:?}");
    assert_eq!(left(&etcd).await, after_theirs);
    assert_eq!(after_theirs, (vec![], None, Some("42".to_string())));
}
