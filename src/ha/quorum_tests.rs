//! Quorum mode's rules, case by case.
use super::*;
use crate::ha::config::{CoreConfig, Timing};
use crate::ha::ctx::Local;
use crate::ha::memory::SyncMemory;
use crate::ha::observation::{
    DynamicConfig, JobStatus, Observation, PgState, ReplicationStat, StoreView, SyncSettings,
};
use crate::ha::types::{Millis, SystemId};

fn set(names: &[&str]) -> BTreeSet<NodeName> {
    names.iter().map(|s| NodeName::new(*s)).collect()
}

fn any(num: u32, names: &[&str]) -> SyncNames {
    SyncNames::Any {
        num,
        names: set(names),
    }
}

fn key_write(voters: &[&str], quorum: u32) -> Action {
    Action::WriteSync {
        leader: NodeName::new("pg1"),
        standbys: set(voters),
        quorum,
        expected: Some(3),
    }
}

/// A cluster in quorum mode whose `sync` key, written by pg1, is `(quorum, voters)`.
fn quorum_cluster(voters: &[&str], quorum: u32) -> Cluster {
    Cluster {
        sync: Some(SyncKey {
            leader: Some(NodeName::new("pg1")),
            standbys: set(voters),
            quorum,
            index: 3,
        }),
        config: DynamicConfig {
            sync: SyncSettings {
                enabled: true,
                quorum: true,
                ..SyncSettings::default()
            },
            ..Default::default()
        },
        ..Cluster::default()
    }
}

/// Asserts the rule for pg1, primary at 900 under `names` (floor 850), whose key is `(quorum, voters)`;
/// `flushed` standbys streamed up to 900, the others to 800.
fn run_check(voters: &[&str], quorum: u32, names: SyncNames, flushed: &[&str], actions: &[Action]) {
    let t = Timing {
        ttl_ms: 10_000,
        loop_wait_ms: 1_000,
        retry_timeout_ms: 2_000,
        session_ttl_ms: 5_000,
        drift_max_ppm: 10_000,
        fence_budget_ms: 500,
    };
    let cfg = CoreConfig::new(NodeName::new("pg1"), t).expect("valid timing");
    let c = quorum_cluster(voters, quorum);
    let standbys = ["pg2", "pg3"]
        .iter()
        .map(|s| ReplicationStat {
            name: NodeName::new(*s),
            streaming: true,
            sync: true,
            flush_lsn: Lsn(if flushed.contains(s) { 900 } else { 800 }),
        })
        .collect();
    let r = RunningPg {
        system_id: SystemId(1),
        role: PgRole::Primary,
        timeline: Timeline(1),
        lsn: Lsn(900),
        receive_lsn: None,
        replay_lsn: None,
        upstream_end_lsn: None,
        upstream: None,
        remote: None,
        streaming: false,
        pending_restart: false,
        server_version: 150_004,
        sync_names: names.clone(),
        standbys,
        slots: Vec::new(),
    };
    let o = Observation {
        now: Millis(1_000),
        wall_ms: 0,
        pg: PgState::Running(r.clone()),
        store: StoreView::Available(c.clone()),
        store_read_at: Millis(1_000),
        peers: None,
        sites: None,
        outcomes: Vec::new(),
        job: JobStatus::Idle,
        divergence: None,
        shutting_down: false,
        failsafe_replies: None,
        failsafe_grant: None,
        pg_reloaded: false,
        request: None,
    };
    let ctx = Ctx {
        cfg: &cfg,
        obs: &o,
        now: o.now,
        local: Local::of(&o.pg),
        peers: None,
    };
    let mem = Memory {
        sync: SyncMemory {
            floor: Some((names, Lsn(850))),
            ..Default::default()
        },
        ..Memory::default()
    };
    check(&ctx, &mem, &c, &r, actions);
}

#[test]
fn the_safe_steps_pass() {
    let both = any(1, &["pg2", "pg3"]);
    // A returning standby: the stronger key first, then the list.
    let list = Action::SetSyncNames(both.clone());
    run_check(
        &["pg2"],
        0,
        any(1, &["pg2"]),
        &[],
        &[key_write(&["pg2", "pg3"], 1), list],
    );
    // Two acknowledgements now required, both voters caught up: quorum 0.
    let two = any(2, &["pg2", "pg3"]);
    run_check(
        &["pg2", "pg3"],
        1,
        two,
        &["pg2", "pg3"],
        &[key_write(&["pg2", "pg3"], 0)],
    );
    // Gone asynchronous: the vacuous key first.
    let off = Action::SetSyncNames(SyncNames::Off);
    run_check(&["pg2", "pg3"], 1, both, &[], &[key_write(&[], 0), off]);
}

#[test]
#[should_panic(expected = "not covered")]
fn a_list_the_key_does_not_cover_panics() {
    let list = Action::SetSyncNames(any(1, &["pg2", "pg3"]));
    run_check(&["pg2"], 0, any(1, &["pg2"]), &["pg2", "pg3"], &[list]);
}

#[test]
#[should_panic(expected = "quorum rule violated: key")]
fn a_weaker_key_before_the_voters_caught_up_panics() {
    let two = any(2, &["pg2", "pg3"]);
    run_check(
        &["pg2", "pg3"],
        1,
        two,
        &["pg2"],
        &[key_write(&["pg2", "pg3"], 0)],
    );
}

#[test]
#[should_panic(expected = "quorum rule violated: key")]
fn a_key_that_does_not_cover_the_running_list_panics() {
    let both = any(1, &["pg2", "pg3"]);
    run_check(
        &["pg2", "pg3"],
        1,
        both,
        &["pg2", "pg3"],
        &[key_write(&["pg2", "pg3"], 0)],
    );
}
