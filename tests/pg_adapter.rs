//! The PostgreSQL adapter against real PostgreSQL 15: bootstrap, clone, promote, divergence, rewind, stop modes.
#[path = "support/pg.rs"]
mod pg_support;

use pg_support::{eventually, PgNode};
use tenure::ha::observation::{Divergence, PgRole, PgState, RunningPg};
use tenure::ha::types::Timeline;
use tenure::pg::ctl::{self, InitdbOptions, StopMode, Stopped};
use tenure::pg::recovery::{self, StandbyConfig};
use tenure::pg::{probe, rewind, slots, PgSettings};

async fn running(s: &PgSettings) -> RunningPg {
    match probe::observe(s).await.expect("observe") {
        PgState::Running(r) => r,
        other => panic!("{} not running: {other:?}", s.name),
    }
}

/// The adapter's full probe (what the runtime publishes beyond the core's view).
async fn status(s: &PgSettings) -> probe::RunningStatus {
    let client = probe::connect_local(s).await.expect("connect");
    probe::running_status(s, &client).await.expect("probe")
}

/// A helper session, renamed at once: it connects as the adapter does (`application_name`
/// 'tenure'), and a dropped one lingers in `pg_stat_activity` while its backend exits, where it
/// would pass for the probe's kept connection.
async fn helper(s: &PgSettings) -> tokio_postgres::Client {
    let client = probe::connect_local(s).await.expect("connect");
    client
        .batch_execute("SET application_name = 'pg_adapter-test'")
        .await
        .expect("rename the helper session");
    client
}

async fn sql(s: &PgSettings, q: &str) -> Vec<tokio_postgres::Row> {
    helper(s).await.query(q, &[]).await.expect(q)
}

async fn exec(s: &PgSettings, q: &str) {
    helper(s).await.batch_execute(q).await.expect(q)
}

async fn values(s: &PgSettings) -> Vec<String> {
    sql(s, "SELECT v FROM t ORDER BY v")
        .await
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Poll until the table on `s` holds exactly `want`.
async fn wait_values(s: &PgSettings, want: &[&str]) {
    eventually(30, &format!("{} to hold {want:?}", s.name), || async {
        let client = probe::connect_local(s).await.ok()?;
        let rows = client.query("SELECT v FROM t ORDER BY v", &[]).await.ok()?;
        let got: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        (got == want).then_some(())
    })
    .await
}

/// initdb, start as primary, create the roles.
async fn bootstrap(node: &PgNode) {
    let s = &node.settings;
    assert_eq!(probe::observe(s).await.unwrap(), PgState::NoData);
    ctl::bootstrap(s, &InitdbOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_promote_diverge_and_rewind() {
    let a = PgNode::new("node-a");
    let b = PgNode::new("node-b");
    let (sa, sb) = (&a.settings, &b.settings);

    bootstrap(&a).await;
    let pa = running(sa).await;
    assert_eq!((pa.role, pa.timeline), (PgRole::Primary, Timeline(1)));
    assert!(pa.lsn.0 > 0 && pa.upstream.is_none() && !pa.streaming);
    exec(
        sa,
        "CREATE TABLE t (v text PRIMARY KEY); INSERT INTO t VALUES ('1')",
    )
    .await;
    slots::create_slot(sa, &sb.slot_name()).await.unwrap();
    slots::create_slot(sa, &sb.slot_name())
        .await
        .expect("creating an existing slot is a no-op");
    assert_eq!(
        slots::list_slots(sa).await.unwrap(),
        vec!["node_b".to_string()]
    );

    // Clone b; start it as a standby with no upstream, then point it at a with a reload.
    let nobody = StandbyConfig {
        upstream: None,
        slot: None,
        remote: None,
    };
    ctl::basebackup(sb, &a.endpoint(), &nobody)
        .await
        .expect("basebackup");
    assert!(recovery::is_standby_configured(sb));
    ctl::start(sb)
        .await
        .unwrap_or_else(|e| panic!("start b: {e}\n{}", b.log()));
    let pb = running(sb).await;
    assert_eq!(
        (pb.role, pb.streaming, pb.upstream.clone()),
        (PgRole::Replica, false, None)
    );
    assert_eq!(pb.system_id, pa.system_id);
    recovery::reconfigure_upstream(sb, &StandbyConfig::follow(sb, a.endpoint()))
        .await
        .unwrap();
    exec(sa, "INSERT INTO t VALUES ('2')").await;
    wait_values(sb, &["1", "2"]).await;
    let pb = eventually(20, "b streaming", || async {
        let r = running(sb).await;
        r.streaming.then_some(r)
    })
    .await;
    assert_eq!(pb.upstream, Some(sa.name.clone()));
    assert_eq!(pb.timeline, Timeline(1));
    let client = probe::connect_local(sa).await.unwrap();
    let repl = probe::replication(&client).await.unwrap();
    assert_eq!(repl.len(), 1);
    assert_eq!(
        (repl[0].application_name.as_str(), repl[0].state.as_str()),
        ("node-b", "streaming")
    );
    let active = sql(
        sa,
        "SELECT active FROM pg_replication_slots WHERE slot_name = 'node_b'",
    )
    .await;
    assert!(active[0].get::<_, bool>(0), "b streams through its slot");

    // A following replica has not diverged.
    assert_eq!(
        rewind::check_divergence(sb, &a.endpoint()).await,
        Divergence::NoNeed {
            leader: sa.name.clone()
        }
    );

    // Promote b while a keeps writing: split brain, a's '3a' exists only on timeline 1.
    ctl::promote(sb).await.expect("promote");
    let pb = running(sb).await;
    assert_eq!((pb.role, pb.timeline), (PgRole::Primary, Timeline(2)));
    assert!(!recovery::is_standby_configured(sb));
    exec(sa, "INSERT INTO t VALUES ('3a'); SELECT pg_switch_wal()").await;
    exec(sb, "INSERT INTO t VALUES ('3b')").await;
    assert_eq!(ctl::stop(sa, StopMode::Fast).await.unwrap(), Stopped::Fast);
    match probe::observe(sa).await.unwrap() {
        PgState::Stopped(cd) => assert!(cd.was_primary && cd.clean && cd.timeline == Timeline(1)),
        other => panic!("a should be stopped: {other:?}"),
    }
    assert!(rewind::can_rewind(sa).await.unwrap());
    assert_eq!(
        rewind::check_divergence(sa, &b.endpoint()).await,
        Divergence::NeedRewind {
            leader: sb.name.clone()
        }
    );

    // Rewind a onto b and follow it: b's rows arrive, a's divergent row is gone.
    slots::create_slot(sb, &sa.slot_name()).await.unwrap();
    rewind::run_rewind(sa, &b.endpoint(), &StandbyConfig::follow(sa, b.endpoint()))
        .await
        .expect("pg_rewind");
    assert!(recovery::is_standby_configured(sa));
    ctl::start(sa)
        .await
        .unwrap_or_else(|e| panic!("start a: {e}\n{}", a.log()));
    exec(sb, "INSERT INTO t VALUES ('4')").await;
    wait_values(sa, &["1", "2", "3b", "4"]).await;
    let pa = eventually(20, "a streaming from b", || async {
        let r = running(sa).await;
        r.streaming.then_some(r)
    })
    .await;
    assert_eq!(
        (pa.role, pa.timeline, pa.upstream),
        (PgRole::Replica, Timeline(2), Some(sb.name.clone()))
    );
    assert_eq!(values(sb).await, vec!["1", "2", "3b", "4"]);
    assert_eq!(
        rewind::check_divergence(sa, &b.endpoint()).await,
        Divergence::NoNeed {
            leader: sb.name.clone()
        }
    );

    // A standby shut down reports its replay position, not a primary's checkpoint.
    assert_eq!(ctl::stop(sa, StopMode::Fast).await.unwrap(), Stopped::Fast);
    match probe::observe(sa).await.unwrap() {
        PgState::Stopped(cd) => assert!(!cd.was_primary && cd.clean && cd.timeline == Timeline(2)),
        other => panic!("a should be stopped: {other:?}"),
    }
    assert_eq!(
        rewind::check_divergence(sa, &b.endpoint()).await,
        Divergence::NoNeed {
            leader: sb.name.clone()
        }
    );

    // Re-clone from scratch (what follows a failed rewind): a comes back as b's streaming replica.
    let follow_b = StandbyConfig::follow(sa, b.endpoint());
    ctl::reinit(sa, &b.endpoint(), &follow_b)
        .await
        .expect("reinit");
    ctl::start(sa)
        .await
        .unwrap_or_else(|e| panic!("start a after reinit: {e}\n{}", a.log()));
    exec(sb, "INSERT INTO t VALUES ('5')").await;
    wait_values(sa, &["1", "2", "3b", "4", "5"]).await;
    assert_eq!(running(sa).await.upstream, Some(sb.name.clone()));
}

/// A clean switchover: the old primary's shutdown checkpoint reached the replica before it was promoted, so
/// its WAL ends exactly at the new timeline's switch point and it can follow without pg_rewind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanly_stopped_primary_follows_without_rewind() {
    let a = PgNode::new("sw-a");
    let b = PgNode::new("sw-b");
    let (sa, sb) = (&a.settings, &b.settings);
    bootstrap(&a).await;
    exec(
        sa,
        "CREATE TABLE t (v text PRIMARY KEY); INSERT INTO t VALUES ('1')",
    )
    .await;
    slots::create_slot(sa, &sb.slot_name()).await.unwrap();
    ctl::basebackup(sb, &a.endpoint(), &StandbyConfig::follow(sb, a.endpoint()))
        .await
        .expect("basebackup");
    ctl::start(sb)
        .await
        .unwrap_or_else(|e| panic!("start b: {e}\n{}", b.log()));
    wait_values(sb, &["1"]).await;

    ctl::checkpoint(sa)
        .await
        .expect("checkpoint before a graceful stop");
    assert_eq!(ctl::stop(sa, StopMode::Fast).await.unwrap(), Stopped::Fast);
    let PgState::Stopped(cd) = probe::observe(sa).await.unwrap() else {
        panic!("a should be stopped")
    };
    eventually(20, "b to receive a's shutdown checkpoint", || async {
        (running(sb).await.lsn > cd.lsn).then_some(())
    })
    .await;
    ctl::promote(sb).await.expect("promote");
    assert_eq!(running(sb).await.timeline, Timeline(2));
    assert_eq!(
        rewind::check_divergence(sa, &b.endpoint()).await,
        Divergence::NoNeed {
            leader: sb.name.clone()
        }
    );

    recovery::configure_standby(sa, &StandbyConfig::follow(sa, b.endpoint())).unwrap();
    slots::create_slot(sb, &sa.slot_name()).await.unwrap();
    ctl::start(sa)
        .await
        .unwrap_or_else(|e| panic!("start a: {e}\n{}", a.log()));
    exec(sb, "INSERT INTO t VALUES ('2')").await;
    wait_values(sa, &["1", "2"]).await;
    let pa = running(sa).await;
    assert_eq!((pa.role, pa.timeline), (PgRole::Replica, Timeline(2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_modes_escalate_and_a_killed_postmaster_restarts() {
    let mut n = PgNode::new("solo");
    n.settings.pg_ctl_timeout_s = 3;
    let s = &n.settings;
    bootstrap(&n).await;
    exec(
        s,
        "CREATE TABLE t (v text PRIMARY KEY); INSERT INTO t VALUES ('1')",
    )
    .await;
    // A postmaster-context setting changed and reloaded: pending until the restart below.
    let r = running(s).await;
    assert!(!r.pending_restart);
    assert!(
        (150_000..160_000).contains(&r.server_version),
        "{}",
        r.server_version
    );
    exec(s, "ALTER SYSTEM SET max_prepared_transactions = 3").await;
    exec(s, "SELECT pg_reload_conf()").await;
    eventually(10, "pending_restart after the reload", || async {
        running(s).await.pending_restart.then_some(())
    })
    .await;
    // Patroni 4.x's `pending_restart_reason`: the setting, its running value and the configured one.
    assert_eq!(
        status(s).await.pending_restart_reason,
        vec![("max_prepared_transactions".into(), "0".into(), "3".into())]
    );

    assert_eq!(ctl::stop(s, StopMode::Fast).await.unwrap(), Stopped::Fast);
    assert_eq!(
        ctl::stop(s, StopMode::Fast).await.unwrap(),
        Stopped::AlreadyStopped
    );
    assert!(matches!(probe::observe(s).await.unwrap(), PgState::Stopped(cd) if cd.clean));

    ctl::start(s).await.unwrap();
    assert!(
        !running(s).await.pending_restart,
        "the restart applied the setting"
    );
    assert_eq!(
        ctl::stop(s, StopMode::Immediate).await.unwrap(),
        Stopped::Immediate
    );
    assert!(
        matches!(probe::observe(s).await.unwrap(), PgState::Stopped(cd) if !cd.clean && cd.was_primary)
    );

    // SIGKILL from outside: postmaster.pid stays behind; the probe sees a stopped cluster; start recovers.
    ctl::start(s).await.unwrap();
    exec(s, "INSERT INTO t VALUES ('2')").await;
    let pid = n.postmaster_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually(10, "killed postmaster reaped", || async {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    })
    .await;
    assert!(
        n.postmaster_pid().is_some(),
        "a killed postmaster leaves its pid file"
    );
    assert!(matches!(probe::observe(s).await.unwrap(), PgState::Stopped(cd) if !cd.clean));
    ctl::start(s)
        .await
        .unwrap_or_else(|e| panic!("restart after SIGKILL: {e}\n{}", n.log()));
    assert_eq!(values(s).await, vec!["1", "2"]);

    // A frozen postmaster ignores pg_ctl: fast and immediate time out, SIGKILL ends it (and its children).
    let pid = n.postmaster_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    assert_eq!(ctl::stop(s, StopMode::Fast).await.unwrap(), Stopped::Killed);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists() || !running_pid(pid));
    // Single-user crash recovery turns the crashed cluster into a cleanly shut down one (same data).
    assert!(matches!(probe::observe(s).await.unwrap(), PgState::Stopped(cd) if !cd.clean));
    ctl::ensure_clean_shutdown(s).await.expect("crash recovery");
    assert!(
        matches!(probe::observe(s).await.unwrap(), PgState::Stopped(cd) if cd.clean && cd.was_primary)
    );
    ctl::start(s)
        .await
        .unwrap_or_else(|e| panic!("restart after kill: {e}\n{}", n.log()));
    assert_eq!(running(s).await.role, PgRole::Primary);
    assert_eq!(values(s).await, vec!["1", "2"]);
}

/// Whether `pid` is a live (non-zombie) process.
fn running_pid(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
        .unwrap_or(false)
}

/// A replica's probe reports received and replayed WAL apart (`pg_wal_replay_pause()` stops only replay),
/// its position is the greater, and the receiver's view of the upstream's WAL end is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_reads_received_and_replayed_apart() {
    let a = PgNode::new("lag-a");
    let b = PgNode::new("lag-b");
    let (sa, sb) = (&a.settings, &b.settings);
    bootstrap(&a).await;
    exec(sa, "CREATE TABLE t (v text PRIMARY KEY)").await;
    slots::create_slot(sa, &sb.slot_name()).await.unwrap();
    ctl::basebackup(sb, &a.endpoint(), &StandbyConfig::follow(sb, a.endpoint()))
        .await
        .expect("basebackup");
    ctl::start(sb)
        .await
        .unwrap_or_else(|e| panic!("start b: {e}\n{}", b.log()));
    exec(sa, "INSERT INTO t VALUES ('1')").await;
    wait_values(sb, &["1"]).await;
    assert!(!status(sb).await.replay_paused);
    exec(sb, "SELECT pg_wal_replay_pause()").await;
    assert!(status(sb).await.replay_paused, "pg_is_wal_replay_paused()");
    exec(
        sa,
        "INSERT INTO t SELECT g::text FROM generate_series(100, 20000) g",
    )
    .await;
    let primary = running(sa).await;
    let rb = eventually(20, "b to receive what it does not replay", || async {
        let r = running(sb).await;
        (r.receive_lsn >= Some(primary.lsn)).then_some(r)
    })
    .await;
    let (received, replayed) = (rb.receive_lsn.unwrap(), rb.replay_lsn.unwrap());
    assert!(
        received.bytes_ahead_of(replayed) > 100_000,
        "received {received}, replayed {replayed}"
    );
    assert_eq!(rb.lsn, received, "the failover position is the greater");
    assert_eq!(rb.visible_lsn(), replayed, "a query sees what was replayed");
    assert!(rb.upstream_end_lsn.is_some_and(|e| e >= replayed), "{rb:?}");
    exec(sb, "SELECT pg_wal_replay_resume()").await;
    assert!(!status(sb).await.replay_paused);
    eventually(20, "b to replay it all", || async {
        let r = running(sb).await;
        (r.replay_lsn >= Some(primary.lsn)).then_some(())
    })
    .await;
}

/// `postgresql.pg_hba` is written as given, as Patroni writes it: pg_hba is first-match, so a configured
/// `trust` rule must not be shadowed by tenure's scram lines (they apply only when no list is configured).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_pg_hba_is_written_as_given() {
    let mut node = PgNode::new("hba");
    node.settings.pg_hba = vec![
        "local all all trust".into(),
        "host all all 127.0.0.1/32 trust".into(),
        "host replication all 127.0.0.1/32 trust".into(),
    ];
    bootstrap(&node).await;
    let s = &node.settings;
    let hba = std::fs::read_to_string(s.data_dir.join("pg_hba.conf")).unwrap();
    let rules: Vec<&str> = hba
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(rules, node.settings.pg_hba, "{hba}");
    // The trust rule is the one that matches: a wrong password is not even asked for.
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres password=wrong dbname=postgres",
        s.listen_port
    );
    let (client, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("trust rule shadowed: {e}\n{hba}"));
    tokio::spawn(conn);
    let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    ctl::stop(s, StopMode::Fast).await.unwrap();
}

async fn observe_kept(s: &PgSettings, kept: &mut probe::KeptConnection) -> probe::RunningStatus {
    match probe::observe_kept(s, kept).await.expect("observe") {
        probe::Observed::Running(st) => st,
        other => panic!("not running: {other:?}"),
    }
}

/// The runtime's probe keeps its connection (opening one runs SCRAM's key derivation every cycle): the same
/// backend answers probe after probe; a terminated one is replaced within the same probe; a restarted
/// server gets a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_keeps_its_connection_and_replaces_a_lost_one() {
    let a = PgNode::new("node-k");
    let s = &a.settings;
    bootstrap(&a).await;
    let mut kept = probe::KeptConnection::default();
    let backend = || async {
        let rows = sql(
            s,
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'tenure' \
             AND pid <> pg_backend_pid() ORDER BY pid",
        )
        .await;
        rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>()
    };
    observe_kept(s, &mut kept).await;
    let first = backend().await;
    assert_eq!(first.len(), 1, "one kept probe connection: {first:?}");
    for _ in 0..3 {
        observe_kept(s, &mut kept).await;
        assert_eq!(
            backend().await,
            first,
            "the same backend answers every probe"
        );
    }
    exec(s, &format!("SELECT pg_terminate_backend({})", first[0])).await;
    eventually(10, "the terminated backend to go", || async {
        (!backend().await.contains(&first[0])).then_some(())
    })
    .await;
    let st = observe_kept(s, &mut kept).await;
    assert_eq!(
        st.role,
        PgRole::Primary,
        "a lost connection is replaced at once"
    );
    let second = backend().await;
    assert!(
        second.len() == 1 && second != first,
        "{first:?} -> {second:?}"
    );
    ctl::stop(s, StopMode::Fast).await.expect("stop");
    ctl::start(s).await.expect("start");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !matches!(
        probe::observe_kept(s, &mut kept).await,
        Ok(probe::Observed::Running(_))
    ) {
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted server answers"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(kept.is_kept());
    let third = backend().await;
    assert!(
        third.len() == 1 && third != second,
        "{second:?} -> {third:?}"
    );
}

/// A bootstrap whose PostgreSQL cannot start (a setting it refuses) fails and leaves no data behind: the
/// next attempt, here or on another member, must not find a half-made cluster to start as primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_bootstrap_leaves_an_empty_data_directory() {
    let mut node = PgNode::new("badboot");
    node.settings
        .parameters
        .insert("shared_buffers".into(), "not-a-size".into());
    let s = &node.settings;
    let err = ctl::bootstrap(s, &InitdbOptions::default())
        .await
        .expect_err("PostgreSQL refuses the setting");
    let left: Vec<_> = std::fs::read_dir(&s.data_dir)
        .expect("the directory itself stays")
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "after {err}: {left:?}");
    assert!(node.postmaster_pid().is_none(), "no postmaster left");
}

/// `slots::apply` on a real server: creates a physical slot reserving WAL, advances an inactive one, drops it;
/// the probe reports what is there (temporary slots left out), names passed as parameters only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_changes_are_applied_and_probed() {
    use tenure::ha::{Lsn, SlotChanges};
    let a = PgNode::new("node-slots");
    let sa = &a.settings;
    bootstrap(&a).await;
    let create = SlotChanges {
        create: vec!["dr_site".into()],
        ..Default::default()
    };
    slots::apply(sa, &create).await.expect("create");
    let before = status(sa).await.slots;
    let dr = before.iter().find(|s| s.name == "dr_site").expect("probed");
    assert!(dr.physical && !dr.active);
    let start = dr.restart_lsn.expect("reserves WAL at once");
    exec(
        sa,
        "CREATE TABLE t (v text); INSERT INTO t SELECT g::text FROM generate_series(1, 1000) g",
    )
    .await;
    let now: String = sql(sa, "SELECT pg_current_wal_lsn()::text").await[0].get(0);
    let now: Lsn = now.parse().unwrap();
    let advance = SlotChanges {
        advance: vec![("dr_site".into(), now)],
        ..Default::default()
    };
    slots::apply(sa, &advance).await.expect("advance");
    let moved = status(sa).await.slots[0].restart_lsn.unwrap();
    assert!(
        moved > start && moved <= now,
        "{start} -> {moved} (target {now})"
    );
    let drop = SlotChanges {
        drop: vec!["dr_site".into()],
        ..Default::default()
    };
    slots::apply(sa, &drop).await.expect("drop");
    assert!(status(sa).await.slots.is_empty());
    // A hostile name is only ever a parameter: nothing is created, nothing else happens.
    let hostile = SlotChanges {
        create: vec!["x'); DROP TABLE t; --".into()],
        ..Default::default()
    };
    assert!(slots::apply(sa, &hostile).await.is_err());
    assert_eq!(
        sql(sa, "SELECT count(*) FROM t").await[0].get::<_, i64>(0),
        1000
    );
}
