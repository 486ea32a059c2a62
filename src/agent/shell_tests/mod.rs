//! The shell on paused tokio time: `run_loop` over the real world (`RealWorld`, the executor, the publisher)
//! with an in-memory store (`MemDcs`) and a scripted PostgreSQL; no cluster, no real clock.
mod mem_dcs;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::api::Published;
use crate::clock;
use crate::ha::{
    LeaderKey, Lsn, NodeName, NodeRole, PgRole, PgState, RunningPg, SyncNames, SystemId, Timeline,
};

use super::api_side::ApiSide;
use super::execute::Executor;
use super::fence::Fence;
use super::local_pg::{LocalPg, Probe};
use super::settings::Settings;
use super::store_side::StoreSide;
use super::world::RealWorld;
use mem_dcs::MemDcs;

const SYSID: u64 = 7_000_000_000_000_000_001;

/// The agent's world over the in-memory store and scripted PostgreSQL, and the test's handles on both.
struct Harness {
    world: RealWorld,
    dcs: Arc<MemDcs>,
    published: watch::Receiver<Published>,
    fence_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn config(data_dir: &std::path::Path) -> crate::config::Config {
    let text = format!(
        "scope: main\nname: pg1\nrestapi:\n  listen: 127.0.0.1:8008\n  authentication: {{username: a, password: b}}\n\
         consul:\n  host: 127.0.0.1:8500\npostgresql:\n  data_dir: {}\n  listen: 127.0.0.1:5432\n  authentication:\n\
         \x20   superuser: {{username: postgres, password: s}}\n    replication: {{username: r, password: r}}\n",
        data_dir.display()
    );
    let path = std::path::Path::new("/etc/tenure/test.yml");
    crate::config::parse(&text, path, &BTreeMap::new())
        .expect("a valid config")
        .config
}

fn replica() -> PgState {
    PgState::Running(RunningPg {
        system_id: SystemId(SYSID),
        role: PgRole::Replica,
        timeline: Timeline(1),
        lsn: Lsn(1_000),
        receive_lsn: Some(Lsn(1_000)),
        replay_lsn: Some(Lsn(1_000)),
        upstream_end_lsn: None,
        upstream: Some(NodeName::new("pg2")),
        remote: None,
        streaming: true,
        pending_restart: false,
        server_version: 150_004,
        sync_names: SyncNames::Off,
        standbys: Vec::new(),
        slots: Vec::new(),
    })
}

/// pg1 runs PostgreSQL as `pg`, in an initialized cluster whose leader key pg2 holds (or nobody: `leader`).
fn harness(pg: PgState, leader: bool) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let config = config(&data_dir);
    let dcs = Arc::new(MemDcs::new("pg1"));
    {
        let mut st = dcs.st();
        st.snap.cluster.initialize = Some(SYSID.to_string());
        st.snap.config = Some((
            serde_json::json!({"ttl": 30, "loop_wait": 10, "retry_timeout": 10}),
            1,
        ));
        st.snap.index = 2;
        st.snap.cluster.optime = Some(Lsn(1_000));
        if leader {
            st.snap.cluster.leader = Some(LeaderKey {
                name: NodeName::new("pg2"),
                session: None,
                index: 2,
            });
        }
    }
    let port: Arc<dyn crate::dcs::Dcs> = dcs.clone();
    let (tx, published) = watch::channel(Published::starting(
        "main",
        "pg1",
        crate::ha::Millis(clock::TOKIO_BASE_MS),
        30_000,
    ));
    let (_requests_tx, requests) = tokio::sync::mpsc::channel(1);
    let api = ApiSide::new(
        tx,
        requests,
        Default::default(),
        "http://127.0.0.1:8008/patroni".into(),
    );
    let pg_settings = config.pg_settings();
    let mut exec = Executor::new(port.clone(), pg_settings.clone(), config.initdb.clone());
    // The fencing process is not under test: a program that exits at once.
    exec.fence = Fence::with_program(&data_dir, std::path::Path::new("/bin/true"));
    let fence_file = exec.fence.file().to_path_buf();
    let probe = Probe::Scripted(Arc::new(Mutex::new(pg)));
    let world = RealWorld {
        clock: clock::Source::tokio(),
        settings: Settings::new(config, BTreeMap::new()),
        store: StoreSide::new(port),
        pg: LocalPg::new(pg_settings, probe),
        api,
        exec,
        signals: None,
        shutting_down: false,
        record: None,
    };
    Harness {
        world,
        dcs,
        published,
        fence_file,
        _dir: dir,
    }
}

/// Run the agent's loop until `check` is done with it (the loop is dropped then).
async fn with_loop(world: &mut RealWorld, check: impl std::future::Future<Output = ()>) {
    tokio::select! {
        ended = super::shell::run_loop(world) => panic!("the loop ended: {ended:?}"),
        () = check => {}
    }
}

fn calls(dcs: &MemDcs) -> Vec<(&'static str, u64)> {
    dcs.st().calls.iter().map(|c| (c.name, c.at_ms)).collect()
}

/// Wait (on paused time) for the REST state to change; how long that took.
async fn next_publish(published: &mut watch::Receiver<Published>) -> Duration {
    let t0 = clock::now();
    tokio::time::timeout(Duration::from_secs(60), published.changed())
        .await
        .expect("the loop published within a minute")
        .expect("the loop is alive");
    clock::now() - t0
}

/// A store read that never answers (an adapter deaf to its deadline) is given up at the read's deadline,
/// `retry_timeout` after the cycle began, and the cycle goes on without the store.
#[tokio::test(start_paused = true)]
async fn a_hung_store_read_is_cut_at_its_deadline() {
    let mut h = harness(replica(), true);
    h.dcs.st().hang.insert("get_cluster");
    let retry_ms = h.world.settings.core.timing.retry_timeout_ms;
    let (dcs, mut published) = (h.dcs.clone(), h.published.clone());
    with_loop(&mut h.world, async {
        let took = next_publish(&mut published).await;
        assert_eq!(
            took,
            Duration::from_millis(retry_ms),
            "published once the read was cut"
        );
    })
    .await;
    let cut: Vec<_> = dcs.st().cut.iter().map(|c| (c.name, c.at_ms)).collect();
    assert_eq!(cut, [("get_cluster", retry_ms)]);
    assert_eq!(
        h.world.api.counters.store_errors.get("unavailable"),
        Some(&1)
    );
}

/// After a cycle the REST state shows the decision (the role, the running ttl), and the member key follows it
/// in the store.
#[tokio::test(start_paused = true)]
async fn a_cycle_publishes_its_status_and_member_key() {
    let mut h = harness(replica(), true);
    let (dcs, mut published) = (h.dcs.clone(), h.published.clone());
    with_loop(&mut h.world, async {
        assert_eq!(next_publish(&mut published).await, Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(1)).await;
    })
    .await;
    let p = published.borrow().clone();
    assert_eq!(p.status.role, NodeRole::Replica);
    assert!(p.status.streaming);
    assert_eq!(p.ttl_ms, 30_000);
    assert_eq!(
        p.cluster.as_ref().map(|c| c.index),
        Some(2),
        "the snapshot read"
    );
    let member = dcs
        .st()
        .members
        .get("pg1")
        .cloned()
        .expect("the member key");
    assert_eq!(member, p.member, "the store got what the REST API shows");
}

/// A `config` key changed in the store reaches the next cycle: the core runs with it, the REST API shows it,
/// the store's next session gets its TTL.
#[tokio::test(start_paused = true)]
async fn a_changed_config_key_reaches_the_next_cycle() {
    let mut h = harness(replica(), true);
    let (dcs, mut published) = (h.dcs.clone(), h.published.clone());
    with_loop(&mut h.world, async {
        next_publish(&mut published).await;
        assert_eq!(published.borrow().ttl_ms, 30_000);
        {
            let mut st = dcs.st();
            let key = serde_json::json!({"ttl": 40, "loop_wait": 5, "retry_timeout": 5});
            st.snap.config = Some((key, 3));
            st.snap.index = 3;
        }
        next_publish(&mut published).await;
    })
    .await;
    assert_eq!(published.borrow().ttl_ms, 40_000);
    assert_eq!(h.world.settings.core.timing.ttl_ms, 40_000);
    assert_eq!(
        dcs.st().session_ttl_ms,
        Some(20_000),
        "Consul's session TTL is ttl/2"
    );
}

/// The race won: the decision's actions run in the core's order (the history line, then the fence, then the
/// promotion), each store call after the one before it.
#[tokio::test(start_paused = true)]
async fn actions_run_in_the_decisions_order() {
    let mut h = harness(replica(), false);
    // The promotion fails (pg_ctl finds no data directory) and the next decision would stand the fence down:
    // the store stops answering at the next decision's read, to look at the fence the promotion ran under.
    h.dcs.st().hang_after_calls = Some(5);
    let dcs = h.dcs.clone();
    let fence_file = h.fence_file.clone();
    with_loop(&mut h.world, async {
        tokio::time::sleep(Duration::from_millis(1)).await;
    })
    .await;
    let names: Vec<&str> = calls(&dcs).iter().map(|c| c.0).take(4).collect();
    assert_eq!(
        names,
        [
            "get_cluster",
            "get_cluster",
            "acquire_leader",
            "get_cluster"
        ],
        "read, probe the peers (nobody), read, acquire, read"
    );
    let first_history = calls(&dcs).iter().position(|c| c.0 == "write_history");
    assert_eq!(
        first_history,
        Some(4),
        "the history line first after the acquisition's read"
    );
    let fence =
        std::fs::read_to_string(&fence_file).expect("the fence armed after the history line");
    assert!(fence.starts_with("armed "), "{fence}");
}

/// The history line refused: nothing after it in that decision runs, so the fence is never armed and
/// PostgreSQL never promoted (R1 rests on this: no promotion the core did not see its steps for).
#[tokio::test(start_paused = true)]
async fn the_first_failed_action_stops_the_decision() {
    let mut h = harness(replica(), false);
    h.dcs.st().refuse.insert("write_history");
    let dcs = h.dcs.clone();
    let fence_file = h.fence_file.clone();
    with_loop(&mut h.world, async {
        tokio::time::sleep(Duration::from_millis(1)).await;
    })
    .await;
    assert!(calls(&dcs).iter().any(|c| c.0 == "write_history"));
    assert!(
        !fence_file.exists(),
        "armed after a refused history line: {:?}",
        std::fs::read_to_string(&fence_file)
    );
}

/// A store write that never answers is cut at the decision's store deadline (here `retry_timeout`: no lease
/// yet), its outcome unknown; the next cycle then does not read the store again at once.
#[tokio::test(start_paused = true)]
async fn a_hung_store_write_is_cut_at_the_decisions_deadline() {
    let mut h = harness(replica(), false);
    h.dcs.st().hang.insert("acquire_leader");
    let retry_ms = h.world.settings.core.timing.retry_timeout_ms;
    let dcs = h.dcs.clone();
    with_loop(&mut h.world, async {
        tokio::time::sleep(Duration::from_millis(retry_ms + 1)).await;
    })
    .await;
    let cut: Vec<_> = dcs.st().cut.iter().map(|c| (c.name, c.at_ms)).collect();
    assert_eq!(cut, [("acquire_leader", retry_ms)]);
    let after: Vec<_> = calls(&dcs)
        .into_iter()
        .skip_while(|c| c.0 != "acquire_leader")
        .collect();
    assert!(
        !after
            .iter()
            .any(|c| c.0 == "get_cluster" && c.1 == retry_ms),
        "read again right after an unanswered call: {after:?}"
    );
    assert_eq!(
        h.world.api.counters.store_errors.get("unavailable"),
        Some(&1),
        "the skipped read"
    );
}

/// A promotion that fails at once (here pg_ctl finds no data directory) is retried after a back-off, not at
/// once: before, the loop went round at one instant, a store read and a history write each time (seen: 100
/// history writes at 0 ms, until the test store stopped answering).
#[tokio::test(start_paused = true)]
async fn a_failing_promotion_is_retried_after_a_back_off() {
    let mut h = harness(replica(), false);
    let dcs = h.dcs.clone();
    with_loop(&mut h.world, async {
        tokio::time::sleep(Duration::from_millis(2_000)).await;
    })
    .await;
    let writes: Vec<u64> = calls(&dcs)
        .iter()
        .filter(|c| c.0 == "write_history")
        .map(|c| c.1)
        .collect();
    assert!(
        (2..=4).contains(&writes.len()),
        "history writes (one per attempt) in 2 s: {writes:?}"
    );
    for pair in writes.windows(2) {
        assert!(
            pair[1] - pair[0] >= 500,
            "attempts closer than the back-off: {writes:?}"
        );
    }
}
