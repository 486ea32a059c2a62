//! A standby cluster (Patroni's `standby_cluster`): its key holder, the standby leader, replicates from the
//! remote source and never promotes; its other members follow the standby leader; failover inside it elects
//! another standby leader.
use tenure::ha::*;

use crate::builders::*;

fn source() -> StandbySource {
    StandbySource {
        host: Some("10.1.0.5".into()),
        port: Some(5433),
        ..StandbySource::default()
    }
}

fn standby(c: Cluster) -> Cluster {
    c.standby_of(source())
}

/// Our key, in a standby cluster, with our record as a standby leader's.
fn ours() -> Cluster {
    standby(cluster().leader("pg1").member_replica("pg2", 400)).edit_member("pg1", |m| {
        m.role = MemberRole::StandbyLeader;
    })
}

#[test]
fn reason_standby_leading() {
    let fp = source().fingerprint();
    let o = obs(1_100).pg_replica_of_remote(1, 500, &fp).store(ours());
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(1_000), &o);
    expect(&d, Reason::StandbyLeading, &[]);
    assert_eq!(d.member.role, MemberRole::StandbyLeader);
    assert_eq!(d.status.role, NodeRole::StandbyLeader);
    let now = Millis(1_100);
    assert!(health::standby_leader_ok(&d.status, now));
    assert!(health::leader_ok(&d.status, now));
    assert!(!health::primary_ok(&d.status, now), "never /primary");
    assert!(
        !health::replica_ok(&d.status, None),
        "not /replica, as Patroni"
    );
}

#[test]
fn a_standby_leader_renews_its_key_when_due() {
    let fp = source().fingerprint();
    let leased = mem().leased_unarmed(1_000);
    let due = leased.lease.expect("lease").renew_due.0;
    let o = obs(due).pg_replica_of_remote(1, 500, &fp).store(ours());
    let d = decide(&cfg("pg1"), &leased, &o);
    assert_eq!(d.reason, Reason::StandbyLeading);
    assert!(d.actions.contains(&Action::RenewLeader), "{:?}", d.actions);
    assert!(!makes_primary(&d));
}

#[test]
fn reason_standby_leader_following_remote() {
    // A replica that took the key (a failover inside the standby cluster) is pointed at the remote source,
    // where a primary's leader would promote.
    let o = obs(1_100)
        .pg_replica_of(1, 500, "pg0")
        .store(standby(cluster().leader("pg1").member_replica("pg2", 400)));
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(1_000), &o);
    expect(
        &d,
        Reason::StandbyLeaderFollowingRemote,
        &[Action::FollowRemote(Box::new(source()))],
    );
    // The same key holder without a standby_cluster promotes: the rule is the standby cluster's.
    let o = obs(1_100)
        .pg_replica_of(1, 500, "pg0")
        .store(cluster().leader("pg1").member_replica("pg2", 400));
    assert!(makes_primary(&decide(
        &cfg("pg1"),
        &mem().leased_unarmed(1_000),
        &o
    )));
}

#[test]
fn a_changed_source_is_followed() {
    // The `config` key names another source (host moved): the recovery file is rewritten.
    let old = StandbySource {
        host: Some("10.1.0.9".into()),
        ..source()
    };
    let o = obs(1_100)
        .pg_replica_of_remote(1, 500, &old.fingerprint())
        .store(ours());
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(1_000), &o);
    expect(
        &d,
        Reason::StandbyLeaderFollowingRemote,
        &[Action::FollowRemote(Box::new(source()))],
    );
}

#[test]
fn reason_starting_standby_leader() {
    let o = obs(1_100).pg_stopped(1, 500).store(ours());
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(1_000), &o);
    expect(
        &d,
        Reason::StartingStandbyLeader,
        &[Action::StartStandbyLeader(Box::new(source()))],
    );
}

#[test]
fn reason_demoting_to_standby_cluster() {
    // A primary whose cluster's `config` now names a source (Patroni's demote-cluster): stopped first.
    let o = obs(1_100).pg_primary(1, 500).store(ours());
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(1_000), &o);
    assert_eq!(d.reason, Reason::DemotingToStandbyCluster);
    assert!(stops(&d), "{:?}", d.actions);
    assert!(!makes_primary(&d));
}

/// A new standby cluster's first member, which won the initialize race and holds the key: the store has
/// no `config` yet, so its own bootstrap.dcs names the source.
fn new_standby_site() -> (CoreConfig, Cluster) {
    let mut c = cfg("pg1");
    c.bootstrap_standby = Some(source());
    let mut missing = empty_cluster().initialize("pg1").leader("pg1");
    missing.members.clear();
    missing.config.missing = true;
    (c, missing)
}

#[test]
fn reason_cloning_from_remote() {
    // A new standby cluster: the store has no `config` yet, so our own bootstrap.dcs names the source; the
    // winner of the initialize race clones from it instead of running initdb.
    let (c, missing) = new_standby_site();
    let o = obs(1_100).store(missing);
    let d = decide(&c, &mem().leased_unarmed(1_000).bootstrapping(), &o);
    expect(
        &d,
        Reason::CloningFromRemote,
        &[Action::StartJob(Job::CloneRemote(Box::new(source())))],
    );
}

#[test]
fn a_failed_remote_clone_gives_the_key_and_initialize_up() {
    let (c, missing) = new_standby_site();
    let o = obs(1_100).store(missing).job_finished(
        Job::CloneRemote(Box::new(source())),
        JobResult::Failed("pg_basebackup: could not connect".into()),
    );
    let d = decide(&c, &mem().leased_unarmed(1_000).bootstrapping(), &o);
    assert!(matches!(d.reason, Reason::JobFailed { .. }), "{}", d.reason);
    assert!(d.actions.contains(&Action::ReleaseLeader));
    assert!(d.actions.contains(&Action::CancelInitialize));
    assert!(!d.memory.no_leader.bootstrapping);
}

#[test]
fn the_other_members_follow_the_standby_leader() {
    let o = obs(1_100).pg_replica_of(1, 400, "pg9").store(ours());
    let m = mem().remembers(Divergence::NoNeed { leader: n("pg1") });
    let d = decide(&cfg("pg2"), &m, &o);
    expect(
        &d,
        Reason::Reconfiguring { leader: n("pg1") },
        &[Action::Follow {
            upstream: Some(n("pg1")),
        }],
    );
    assert_eq!(d.member.role, MemberRole::Replica);
    let following = obs(1_200).pg_replica_of(1, 400, "pg1").store(ours());
    let d = decide(&cfg("pg2"), &d.memory, &following);
    assert_eq!(d.reason, Reason::Following { leader: n("pg1") });
    assert!(health::replica_ok(&d.status, None), "{:?}", d.status);
}

#[test]
fn a_standby_leader_that_lost_its_key_is_no_standby_leader() {
    // Our recovery file still follows the source, but another member holds the key now.
    let fp = source().fingerprint();
    let c = standby(cluster().leader("pg2").member_replica("pg1", 400));
    let o = obs(1_100).pg_replica_of_remote(1, 400, &fp).store(c);
    let d = decide(&cfg("pg1"), &mem(), &o);
    assert_eq!(d.member.role, MemberRole::Replica);
    assert_eq!(d.status.role, NodeRole::Replica);
    assert!(!health::standby_leader_ok(&d.status, Millis(1_100)));
}

#[test]
fn synchronous_mode_is_off_in_a_standby_cluster() {
    // Patroni's `is_synchronous_mode`: the store's synchronous_mode does not apply to a standby cluster.
    let config = serde_json::json!({
        "synchronous_mode": true,
        "standby_cluster": {"host": "10.1.0.5", "port": 5433}
    });
    let d = tenure::dcs::records::dynamic_config_from_json(&config);
    assert!(!d.sync.enabled);
    assert_eq!(d.standby_cluster, Some(source()));
}

#[test]
fn standby_cluster_is_read_as_patroni_reads_it() {
    let read = |v: serde_json::Value| tenure::dcs::records::standby_cluster(&v);
    assert_eq!(read(serde_json::json!({})), None);
    assert_eq!(
        read(serde_json::json!({"standby_cluster": {"primary_slot_name": "s"}})),
        None,
        "no host, port or restore_command: not a standby cluster"
    );
    assert_eq!(
        read(serde_json::json!({"standby_cluster": {"host": "10.1.0.5", "port": "5433"}})),
        Some(source()),
        "a port as text"
    );
    let archive = read(serde_json::json!({"standby_cluster": {"restore_command": "cp /a/%f %p"}}))
        .expect("a restore_command alone");
    assert!(!archive.can_clone());
}

#[test]
fn a_restarted_standby_leader_comes_back_following_the_source() {
    let fp = source().fingerprint();
    let o = Observation {
        request: Some(OperatorRequest::Restart {
            at_wall_ms: None,
            filter: RestartFilter {
                role: None,
                pending_only: false,
                below_version: None,
            },
        }),
        ..obs(1_100).pg_replica_of_remote(1, 500, &fp).store(ours())
    };
    let d = decide(&cfg("pg1"), &mem().leased_unarmed(1_000), &o);
    assert_eq!(d.answer, Some(RequestAnswer::Accepted));
    assert!(
        d.actions
            .contains(&Action::StartStandbyLeader(Box::new(source()))),
        "{:?}",
        d.actions
    );
    assert!(!makes_primary(&d));
}

#[test]
fn a_standby_leader_with_the_store_away_neither_promotes_nor_stops() {
    // The store unreachable: the standby leader keeps replaying from the other site, as any replica does.
    let fp = source().fingerprint();
    let m = decide(
        &cfg("pg1"),
        &mem().leased_unarmed(1_000),
        &obs(1_100).pg_replica_of_remote(1, 500, &fp).store(ours()),
    )
    .memory;
    let d = decide(
        &cfg("pg1"),
        &m,
        &obs(9_000).pg_replica_of_remote(1, 500, &fp),
    );
    assert!(!makes_primary(&d), "{:?}", d.actions);
    assert!(!stops(&d), "{:?}", d.actions);
}
