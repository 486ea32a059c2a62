//! End-to-end tests on a real etcd: three real agents and PostgreSQL 15 servers per scenario.
//! Run with `cargo test --test e2e_etcd` (as root or as `postgres`; the scenarios run one at a time).
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "scenarios.rs"]
#[macro_use]
mod scenarios;

e2e_scenarios!(support::cluster::StoreKind::Etcd);

#[path = "pg_tls.rs"]
mod pg_tls;

/// PostgreSQL behind a hostssl-only pg_hba: bootstrap, clone and streaming with `sslmode: verify-ca`.
#[test]
fn replica_streams_over_hostssl_with_verify_ca() {
    pg_tls::replica_streams_over_hostssl_with_verify_ca();
}

/// The agents reach etcd over https only, with client certificates required (`etcd3.cacert`, `cert`, `key`
/// in their config files; https implied): bootstrap, a takeover after a graceful stop, and the rejoin.
#[test]
fn etcd_over_tls_bootstrap_takeover_and_rejoin() {
    scenarios::graceful_stop(support::cluster::StoreKind::EtcdTls);
}

/// `tenure demo --failover` (what `scripts/demo --failover` runs) forms a cluster, fails over, rejoins
/// and exits 0, leaving no directory behind.
#[test]
fn demo_failover_exits_0() {
    use tenure::demo::local;
    let _serial = support::cluster::serial();
    // Our own link to the binary: the demo's agents spawn their fencer from it, and a rebuild mid-run
    // replaces target/debug/tenure.
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("tenure");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_tenure"), &bin).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_tenure"), &bin).expect("copy tenure");
    }
    let mut cmd = std::process::Command::new(&bin);
    cmd.args(["demo", "--failover"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let started = std::time::Instant::now();
    let child = local::reaper().spawn(&mut cmd).expect("spawn tenure demo");
    let pid = child.id() as i32;
    let out = child.wait_with_output().expect("tenure demo");
    local::reaper().release(pid);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tenure demo --failover: {}\n{stdout}\n{stderr}",
        out.status
    );
    for line in [
        "took over",
        "is streaming again as a replica",
        "stopping the cluster",
    ] {
        assert!(
            stdout.contains(line),
            "demo output lacks {line:?}:\n{stdout}"
        );
    }
    let root = stdout
        .lines()
        .find_map(|l| l.strip_prefix("stopping the cluster and removing "))
        .expect("the demo names its directory");
    assert!(
        !std::path::Path::new(root.trim()).exists(),
        "the demo left {root} behind"
    );
    eprintln!(
        "[e2e demo] tenure demo --failover: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
