//! `synchronous_standby_names` against real PostgreSQL 15: each form set, reloaded and read back by the probe;
//! a listed streaming replica reported synchronous in the primary's `standbys`, in quorum commit
//! (`ANY n (..)`, `sync_state = 'quorum'`) too.
#[path = "support/pg.rs"]
mod pg_support;

use std::time::Duration;

use pg_support::{eventually, PgNode};
use tenure::ha::observation::{PgState, ReplicationStat, RunningPg, SyncNames};
use tenure::ha::types::NodeName;
use tenure::pg::ctl::{self, InitdbOptions, StopMode};
use tenure::pg::recovery::StandbyConfig;
use tenure::pg::{probe, slots, sync, PgSettings};

async fn running(s: &PgSettings) -> RunningPg {
    match probe::observe(s).await.expect("observe") {
        PgState::Running(r) => r,
        other => panic!("{} not running: {other:?}", s.name),
    }
}

fn all(names: &[&str]) -> SyncNames {
    SyncNames::All(names.iter().map(|n| NodeName::new(*n)).collect())
}

/// Quorum commit: `ANY num (names)`.
fn any(num: u32, names: &[&str]) -> SyncNames {
    SyncNames::Any {
        num,
        names: names.iter().map(|n| NodeName::new(*n)).collect(),
    }
}

/// What the executor does: tenure's value in the parameters, then written, reloaded and confirmed.
async fn set(s: &mut PgSettings, names: &SyncNames) {
    s.parameters.insert(sync::GUC.into(), sync::render(names));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    sync::apply(s, deadline)
        .await
        .unwrap_or_else(|e| panic!("set {names:?}: {e}"));
}

async fn bootstrap(node: &PgNode) {
    ctl::bootstrap(&node.settings, &InitdbOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_form_is_set_reloaded_and_read_back_by_the_probe() {
    let mut a = PgNode::new("sync-a");
    bootstrap(&a).await;
    assert_eq!(running(&a.settings).await.sync_names, SyncNames::Off);
    for names in [
        SyncNames::Block,
        all(&["node-b"]),
        all(&["node-b", "node_c", "first"]),
        any(1, &["node-b", "node_c"]),
        any(2, &["node-b", "node_c", "first"]),
        any(1, &["node-b"]),
        SyncNames::Off,
    ] {
        set(&mut a.settings, &names).await;
        assert_eq!(running(&a.settings).await.sync_names, names);
    }
    // An operator's value in a form tenure does not write guarantees nothing the core relies on.
    let theirs = SyncNames::Other("FIRST 1 (x, y)".into());
    set(&mut a.settings, &theirs).await;
    assert_eq!(running(&a.settings).await.sync_names, theirs);

    // Stopped: written to the file only, in effect from the next start.
    ctl::stop(&a.settings, StopMode::Fast).await.expect("stop");
    set(&mut a.settings, &all(&["x"])).await;
    ctl::start(&a.settings)
        .await
        .unwrap_or_else(|e| panic!("start: {e}\n{}", a.log()));
    assert_eq!(running(&a.settings).await.sync_names, all(&["x"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_streaming_replica_is_reported_synchronous() {
    let mut a = PgNode::new("node-a");
    let mut b = PgNode::new("node-b");
    bootstrap(&a).await;
    let (sa, sb) = (&a.settings, &b.settings);
    slots::create_slot(sa, &sb.slot_name()).await.unwrap();
    ctl::basebackup(sb, &a.endpoint(), &StandbyConfig::follow(sb, a.endpoint()))
        .await
        .expect("basebackup");
    ctl::start(sb)
        .await
        .unwrap_or_else(|e| panic!("start b: {e}\n{}", b.log()));
    let streaming = |sync| ReplicationStat {
        name: NodeName::new("node-b"),
        streaming: true,
        sync,
        flush_lsn: Default::default(),
    };
    let seen = eventually(20, "a to see b streaming", || async {
        let r = running(sa).await;
        (r.standbys.len() == 1 && r.standbys[0].streaming).then_some(r)
    })
    .await;
    assert_eq!(
        ReplicationStat {
            flush_lsn: Default::default(),
            ..seen.standbys[0].clone()
        },
        streaming(false),
        "matched on application_name = the member name"
    );
    assert!(running(sb).await.standbys.is_empty(), "a replica has none");

    set(&mut a.settings, &all(&["node-b"])).await;
    let sa = &a.settings;
    let listed = eventually(20, "a to wait for b", || async {
        let r = running(sa).await;
        r.standbys
            .first()
            .filter(|s| s.sync)
            .cloned()
            .map(|s| (r, s))
    })
    .await;
    assert_eq!(listed.0.sync_names, all(&["node-b"]));
    assert!(listed.1.flush_lsn.0 > 0);
    // A commit now waits for b, and returns because b flushes it.
    let client = probe::connect_local(sa).await.unwrap();
    let commit = client.batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (1)");
    tokio::time::timeout(Duration::from_secs(10), commit)
        .await
        .expect("a synchronous commit returns")
        .unwrap();

    // Quorum commit: PostgreSQL shows b as `quorum`, which the probe reports synchronous as `sync`.
    set(&mut a.settings, &any(1, &["node-b", "node-x"])).await;
    let sa = &a.settings;
    let voter = eventually(20, "a to show b as a quorum standby", || async {
        let client = probe::connect_local(sa).await.ok()?;
        let rows = probe::replication(&client).await.ok()?;
        rows.first()
            .filter(|row| row.sync_state == "quorum")
            .cloned()
    })
    .await;
    assert_eq!(voter.application_name, "node-b");
    let r = running(sa).await;
    assert_eq!(r.sync_names, any(1, &["node-b", "node-x"]));
    assert_eq!(
        ReplicationStat {
            flush_lsn: Default::default(),
            ..r.standbys[0].clone()
        },
        streaming(true),
        "sync_state = 'quorum' is synchronous"
    );
    let commit = client.batch_execute("INSERT INTO t VALUES (2)");
    tokio::time::timeout(Duration::from_secs(10), commit)
        .await
        .expect("a quorum commit returns once b flushes it")
        .unwrap();

    // A running replica is reloaded too (a promotion does not re-read the files).
    set(&mut b.settings, &all(&["node-a"])).await;
    assert_eq!(running(&b.settings).await.sync_names, all(&["node-a"]));
}
