//! Replication slots (`ha/slots.rs`): permanent slots created everywhere and advanced on replicas, the slots of
//! absent members kept for `member_slots_ttl`, `ignore_slots`, pause, and the `nostream` tag.
use tenure::ha::*;

use crate::builders::*;

const LSN: u64 = 10_000;

fn slot(name: &str, active: bool, restart: Option<u64>) -> LocalSlot {
    LocalSlot {
        name: name.into(),
        physical: true,
        database: None,
        plugin: None,
        active,
        restart_lsn: restart.map(Lsn),
    }
}

fn with_slots(mut o: Observation, slots: Vec<LocalSlot>) -> Observation {
    if let PgState::Running(r) = &mut o.pg {
        r.slots = slots;
    }
    o
}

fn permanent(mut c: Cluster, names: &[&str]) -> Cluster {
    c.config.slots.permanent = names.iter().map(|s| s.to_string()).collect();
    c
}

fn sync_action(d: &Decision) -> Option<SlotChanges> {
    d.actions.iter().find_map(|a| match a {
        Action::SyncSlots(c) => Some((**c).clone()),
        _ => None,
    })
}

fn status_action(d: &Decision) -> Option<StatusKey> {
    d.actions.iter().find_map(|a| match a {
        Action::WriteStatus(s) => Some((**s).clone()),
        _ => None,
    })
}

/// The leader pg1's decision, its PostgreSQL a primary at `LSN` holding `slots`, its lease taken at 1 000.
fn leader_decides(c: Cluster, slots: Vec<LocalSlot>) -> Decision {
    let o = with_slots(obs(1_500).pg_primary(1, LSN).store(c), slots);
    decide(&cfg("pg1"), &mem().leased(1_000), &o)
}

fn led() -> Cluster {
    cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .member_replica("pg3", LSN)
        .optime(LSN)
}

#[test]
fn the_leader_creates_a_missing_permanent_slot() {
    let c = permanent(led(), &["dr_site"]);
    let d = leader_decides(
        c,
        vec![slot("pg2", true, Some(LSN)), slot("pg3", true, Some(LSN))],
    );
    let s = sync_action(&d).expect("a slot change");
    assert_eq!(s.create, vec!["dr_site".to_string()]);
    assert!(s.drop.is_empty() && s.advance.is_empty(), "{s:?}");
}

#[test]
fn an_idle_cluster_whose_slots_are_in_place_asks_for_nothing() {
    let c = permanent(led(), &["dr_site"]);
    let o = with_slots(
        obs(1_500).pg_primary(1, LSN).store(c),
        vec![
            slot("dr_site", false, Some(LSN)),
            slot("pg2", true, Some(LSN)),
            slot("pg3", true, Some(LSN)),
        ],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(sync_action(&d), None, "{:?}", d.actions);
}

#[test]
fn a_replica_keeps_the_permanent_slot_and_advances_it_to_the_leaders_position() {
    let mut c = permanent(led(), &["dr_site"]);
    c.slots.insert("dr_site".into(), Lsn(LSN - 100));
    let o = with_slots(
        obs(1_500).pg_replica_of(1, LSN, "pg1").store(c),
        vec![slot("dr_site", false, Some(LSN - 500))],
    );
    let d = decide(&cfg("pg2"), &mem(), &o);
    let s = sync_action(&d).expect("a slot change");
    assert_eq!(s.advance, vec![("dr_site".to_string(), Lsn(LSN - 100))]);
    assert!(s.create.is_empty() && s.drop.is_empty(), "{s:?}");
}

#[test]
fn a_replica_never_advances_a_slot_past_what_it_replayed() {
    let mut c = permanent(led(), &["dr_site"]);
    c.slots.insert("dr_site".into(), Lsn(LSN + 5_000));
    let o = with_slots(
        obs(1_500).pg_replica_of(1, LSN, "pg1").store(c),
        vec![slot("dr_site", false, Some(LSN - 500))],
    );
    let d = decide(&cfg("pg2"), &mem(), &o);
    let s = sync_action(&d).expect("a slot change");
    assert_eq!(s.advance, vec![("dr_site".to_string(), Lsn(LSN))]);
}

#[test]
fn a_replica_creates_a_missing_permanent_slot_so_a_failover_finds_it() {
    let c = permanent(led(), &["dr_site"]);
    let o = obs(1_500).pg_replica_of(1, LSN, "pg1").store(c);
    let d = decide(&cfg("pg2"), &mem(), &o);
    assert_eq!(
        sync_action(&d).expect("a change").create,
        vec!["dr_site".to_string()]
    );
}

#[test]
fn a_nofailover_member_keeps_no_permanent_slot() {
    let c = permanent(led(), &["dr_site"]);
    let o = with_slots(
        obs(1_500).pg_replica_of(1, LSN, "pg1").store(c),
        vec![slot("dr_site", false, Some(LSN))],
    );
    let mut cf = cfg("pg2");
    cf.nofailover = true;
    let d = decide(&cf, &mem(), &o);
    let s = sync_action(&d).expect("a change");
    assert!(s.create.is_empty());
    assert_eq!(s.drop, vec!["dr_site".to_string()]);
}

#[test]
fn a_permanent_slot_named_like_a_member_is_not_made_on_that_member() {
    let c = permanent(led(), &["pg2"]);
    let o = obs(1_500).pg_replica_of(1, LSN, "pg1").store(c);
    let d = decide(&cfg("pg2"), &mem(), &o);
    assert_eq!(sync_action(&d), None, "{:?}", d.actions);
}

#[test]
fn a_slot_removed_from_the_config_is_dropped() {
    let o = with_slots(
        obs(1_500).pg_primary(1, LSN).store(led()),
        vec![
            slot("dr_site", false, Some(LSN)),
            slot("pg2", true, Some(LSN)),
        ],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        sync_action(&d).expect("a change").drop,
        vec!["dr_site".to_string()]
    );
}

#[test]
fn an_active_slot_is_never_dropped() {
    let d = leader_decides(led(), vec![slot("receiver", true, Some(LSN))]);
    assert_eq!(sync_action(&d), None, "{:?}", d.actions);
}

#[test]
fn an_ignored_slot_is_neither_dropped_nor_advanced() {
    let mut c = led();
    c.config.slots.ignore = vec![SlotMatcher {
        name: Some("backup".into()),
        ..Default::default()
    }];
    let d = leader_decides(c, vec![slot("backup", false, Some(LSN))]);
    assert_eq!(sync_action(&d), None, "{:?}", d.actions);
}

#[test]
fn logical_slots_are_left_alone() {
    let mut s = slot("cdc", false, Some(LSN));
    s.physical = false;
    s.database = Some("app".into());
    s.plugin = Some("pgoutput".into());
    let o = with_slots(obs(1_500).pg_primary(1, LSN).store(led()), vec![s]);
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(sync_action(&d), None, "{:?}", d.actions);
}

#[test]
fn nothing_is_dropped_in_pause() {
    let o = with_slots(
        obs(1_500).pg_primary(1, LSN).store(led().paused()),
        vec![slot("dr_site", false, Some(LSN))],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000).paused(), &o);
    assert_eq!(sync_action(&d), None, "{:?}", d.actions);
}

#[test]
fn the_slot_of_an_absent_member_is_kept_for_member_slots_ttl_then_dropped() {
    let mut c = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .optime(LSN);
    c.config.slots.member_ttl_ms = 20_000;
    let slots = vec![slot("pg2", false, Some(LSN)), slot("pg3", false, Some(LSN))];
    // pg3 was seen at 1_000 (its key still there then).
    let seen = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .member_replica("pg3", LSN)
        .optime(LSN);
    let mut seen = seen;
    seen.config.slots.member_ttl_ms = 20_000;
    let o = with_slots(obs(1_000).pg_primary(1, LSN).store(seen), slots.clone());
    let d = decide(&cfg("pg1"), &mem().leased(900), &o);
    assert!(d.memory.slots.seen.contains_key("pg3"));
    // Gone since: kept within the ttl, and published as retained.
    let o = with_slots(
        obs(12_000).pg_primary(1, LSN).store(c.clone()),
        slots.clone(),
    );
    let d2 = decide(&cfg("pg1"), &d.memory.clone().leased(11_000), &o);
    assert!(
        sync_action(&d2).is_none_or(|s| s.drop.is_empty()),
        "{:?}",
        d2.actions
    );
    let st = status_action(&d2).expect("the renewal publishes status with slots");
    assert!(st.retain_slots.contains("pg3"), "{st:?}");
    // Past the ttl: dropped.
    let o = with_slots(obs(21_500).pg_primary(1, LSN).store(c), slots);
    let d3 = decide(&cfg("pg1"), &d2.memory.clone().leased(21_000), &o);
    assert_eq!(
        sync_action(&d3).expect("a change").drop,
        vec!["pg3".to_string()]
    );
}

#[test]
fn member_slots_ttl_zero_keeps_no_slot_of_an_absent_member() {
    let mut c = led();
    c.config.slots.member_ttl_ms = 0;
    let d = leader_decides(c, vec![slot("gone", false, Some(LSN))]);
    assert_eq!(
        sync_action(&d).expect("a change").drop,
        vec!["gone".to_string()]
    );
}

#[test]
fn a_new_leader_keeps_the_slots_its_predecessor_retained() {
    let mut c = led();
    c.retain_slots.insert("pg4".into());
    let d = leader_decides(c, vec![slot("pg4", false, Some(LSN))]);
    assert!(
        sync_action(&d).is_none_or(|s| s.drop.is_empty()),
        "{:?}",
        d.actions
    );
    assert!(d.memory.slots.seen.contains_key("pg4"));
}

#[test]
fn the_leader_publishes_its_slots_and_its_own_position_in_status() {
    let c = permanent(led(), &["dr_site"]);
    let o = with_slots(
        obs(2_000).pg_primary(1, LSN + 50).store(c),
        vec![
            slot("dr_site", false, Some(LSN - 10)),
            slot("pg2", true, Some(LSN)),
        ],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    let st = status_action(&d).expect("status with slots");
    assert_eq!(st.optime, Lsn(LSN + 50));
    assert_eq!(st.slots.get("dr_site"), Some(&Lsn(LSN - 10)));
    assert_eq!(
        st.slots.get("pg1"),
        Some(&Lsn(LSN + 50)),
        "its own name: replicas advance its slot"
    );
    assert!(!d.actions.contains(&Action::WriteOptime(Lsn(LSN + 50))));
}

#[test]
fn a_nostream_member_starts_without_an_upstream() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .optime(LSN);
    let mut cf = cfg("pg2");
    cf.nostream = true;
    let o = obs(1_500)
        .pg_stopped(1, LSN)
        .store(c)
        .divergence(Divergence::NoNeed { leader: n("pg1") });
    let d = decide(
        &cf,
        &mem().remembers(Divergence::NoNeed { leader: n("pg1") }),
        &o,
    );
    assert!(
        d.actions.contains(&Action::StartReplica { upstream: None }),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_nostream_member_following_nobody_stays_that_way() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .optime(LSN);
    let mut cf = cfg("pg2");
    cf.nostream = true;
    let mut o = obs(1_500).pg_replica(1, LSN).store(c);
    if let PgState::Running(r) = &mut o.pg {
        r.upstream = None;
        r.streaming = false;
    }
    let m = mem()
        .leader_index(1)
        .remembers(Divergence::NoNeed { leader: n("pg1") });
    let d = decide(&cf, &m, &o);
    assert_eq!(
        d.reason,
        Reason::Following { leader: n("pg1") },
        "{:?}",
        d.actions
    );
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn no_slot_is_kept_for_a_nostream_member() {
    let c = cluster()
        .leader("pg1")
        .member_replica("pg2", LSN)
        .edit_member("pg2", |m| m.tags.nostream = true)
        .optime(LSN);
    let mut c = c;
    c.config.slots.member_ttl_ms = 0;
    let d = leader_decides(c, vec![slot("pg2", false, Some(LSN))]);
    assert_eq!(
        sync_action(&d).expect("a change").drop,
        vec!["pg2".to_string()]
    );
}

#[test]
fn a_nostream_member_is_still_a_failover_candidate() {
    // Patroni's rules do not exclude it: only lag, timeline and the nofailover/priority tags do.
    let mut cf = cfg("pg2");
    cf.nostream = true;
    assert!(cf.can_promote());
}

#[test]
fn the_leader_advances_the_slot_of_a_cascading_member_to_its_published_position() {
    let c = led().edit_member("pg3", |m| {
        m.tags.other.insert("replicatefrom".into(), "pg2".into());
        m.lsn = Some(Lsn(LSN - 10));
    });
    let o = with_slots(
        obs(1_500).pg_primary(1, LSN).store(c),
        vec![
            slot("pg2", true, Some(LSN)),
            slot("pg3", false, Some(LSN - 900)),
        ],
    );
    let d = decide(&cfg("pg1"), &mem().leased(1_000), &o);
    assert_eq!(
        sync_action(&d).expect("a change").advance,
        vec![("pg3".to_string(), Lsn(LSN - 10))]
    );
}

#[test]
fn the_leader_does_not_advance_a_permanent_slot_its_consumer_moves() {
    let c = permanent(led(), &["dr_site"]);
    let mut c = c;
    c.slots.insert("dr_site".into(), Lsn(LSN));
    let d = leader_decides(c, vec![slot("dr_site", false, Some(LSN - 900))]);
    assert_eq!(sync_action(&d), None, "{:?}", d.actions);
}

#[test]
fn a_standby_cluster_creates_no_permanent_slot() {
    let c = permanent(led(), &["dr_site"]).standby_of(StandbySource {
        host: Some("10.1.0.5".into()),
        ..Default::default()
    });
    let o = obs(1_500).pg_replica_of(1, LSN, "pg1").store(c);
    let d = decide(&cfg("pg2"), &mem(), &o);
    assert!(
        sync_action(&d).is_none_or(|s| s.create.is_empty()),
        "{:?}",
        d.actions
    );
}
