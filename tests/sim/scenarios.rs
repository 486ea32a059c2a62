//! Hand-written scenarios in the DSL; the checkers run after every event of each.
use crate::dsl::Sim;

fn three() -> Sim {
    Sim::new(3).started()
}

#[test]
fn bootstrap_elects_one_primary_and_two_streaming_replicas() {
    let sim = three();
    sim.assert_converged();
    assert_eq!(
        sim.w.store.initialize.as_deref().map(|s| !s.is_empty()),
        Some(true),
        "sysid written"
    );
}

#[test]
fn host_crash_of_primary_fails_over_and_old_primary_rejoins() {
    let mut sim = three();
    let old = sim.primary_now();
    sim.crash_host(old);
    let took = sim.run_until_converged(sim.ttl() * 3);
    assert!(took <= sim.ttl() + 6_000, "failover took {took} ms");
    assert_ne!(sim.primary_now(), old);
    sim.restart_agent(old);
    sim.run_until_converged(sim.ttl() * 3);
    assert_ne!(sim.primary_now(), old, "the new primary keeps its role");
}

#[test]
fn primary_cut_off_from_store_fences_before_a_replica_promotes() {
    let mut sim = three();
    let old = sim.primary_now();
    sim.partition_from_store(old);
    sim.run_for(sim.ttl() * 2);
    assert_ne!(sim.primary(), Some(old), "the old primary fenced itself");
    sim.assert_single_writer();
    assert!(sim.primary().is_some(), "a replica took over");
    sim.heal_all();
    sim.run_until_converged(sim.ttl() * 4);
}

#[test]
fn replica_cut_off_from_store_never_promotes() {
    let mut sim = three();
    let p = sim.primary_now();
    let r = sim.replicas()[0];
    sim.partition_from_store(r);
    sim.run_for(sim.ttl() * 3);
    sim.assert_primary(p);
    sim.heal_all();
    sim.run_until_converged(sim.ttl() * 2);
}

#[test]
fn store_outage_no_replica_promotes_and_primary_fences() {
    let mut sim = three();
    let tl = sim.timeline_of(sim.primary_now());
    sim.store_outage();
    sim.run_for(sim.ttl() * 6);
    sim.assert_no_primary();
    sim.store_back();
    sim.run_until_converged(sim.ttl() * 3);
    assert!(sim.timeline_of(sim.primary_now()) >= tl);
}

#[test]
fn store_outage_in_pause_leaves_the_primary_running() {
    let mut sim = three();
    let p = sim.primary_now();
    sim.pause();
    sim.run_for(2_000);
    sim.store_outage();
    sim.run_for(sim.ttl() * 4);
    sim.assert_primary(p);
    sim.store_back();
    sim.run_for(sim.ttl());
    sim.assert_primary(p);
}

#[test]
fn frozen_agent_on_primary_is_fenced_without_a_watchdog() {
    let mut sim = three();
    let old = sim.primary_now();
    sim.freeze_agent(old);
    sim.run_for(sim.ttl() * 3);
    assert_ne!(
        sim.primary(),
        Some(old),
        "the fencing process stopped PostgreSQL"
    );
    assert!(sim.primary().is_some(), "a replica took over");
    sim.thaw(old);
    sim.run_until_converged(sim.ttl() * 3);
}

#[test]
fn frozen_agent_and_fencer_trip_the_watchdog() {
    let mut sim = Sim::with(2, 3, |_, c| c.watchdog = tenure::ha::WatchdogMode::Required).started();
    let old = sim.primary_now();
    sim.freeze_agent_and_fencer(old);
    // The watchdog fires at the lease's end (at most ttl/2 less the fence budget after the last renewal,
    // one loop before the freeze at most); the reset host's agent is back 3 s later and may win the key
    // again, so look in between.
    sim.run_for(sim.ttl() / 2);
    assert_ne!(sim.primary(), Some(old), "the watchdog reset the host");
    sim.run_for(sim.ttl() * 3);
    assert!(sim.primary().is_some(), "a primary after the reset");
    sim.heal_all();
    sim.run_until_converged(sim.ttl() * 3);
}

#[test]
fn agent_restart_on_primary_readopts_without_failover() {
    let mut sim = three();
    let p = sim.primary_now();
    let tl = sim.timeline_of(p);
    sim.kill_agent(p);
    sim.run_for(1_000);
    sim.restart_agent(p);
    sim.run_for(sim.ttl() * 2);
    sim.assert_primary(p);
    assert_eq!(sim.timeline_of(p), tl, "no timeline change");
    sim.assert_converged();
}

#[test]
fn postgres_crash_on_primary_restarts_in_place() {
    let mut sim = three();
    let p = sim.primary_now();
    let tl = sim.timeline_of(p);
    sim.crash_pg(p);
    sim.run_for(3_000);
    sim.assert_primary(p);
    assert_eq!(sim.timeline_of(p), tl);
}

#[test]
fn postgres_crash_with_zero_start_timeout_fails_over() {
    let mut sim = Sim::with(3, 3, |_, c| c.primary_start_timeout_ms = 0).started();
    let old = sim.primary_now();
    sim.crash_pg(old);
    sim.run_until_converged(sim.ttl() * 2);
    assert_ne!(sim.primary_now(), old);
}

#[test]
fn graceful_stop_of_primary_agent_hands_over_quickly() {
    let mut sim = three();
    let old = sim.primary_now();
    sim.shutdown_agent(old);
    sim.run_for(5_000);
    assert!(
        sim.primary().is_some_and(|p| p != old),
        "a replica is primary within 5 s"
    );
}

#[test]
fn switchover_to_a_candidate() {
    let mut sim = three();
    let old = sim.primary_now();
    let cand = sim.replicas()[1];
    sim.switchover(Some(cand), None);
    sim.run_for(3_000);
    sim.run_until_converged(sim.ttl() * 2);
    sim.assert_primary(cand);
    assert!(sim.w.store.switchover.is_none(), "request cleared");
    assert!(sim.w.nodes[old].pg.streaming, "old primary streams again");
}

#[test]
fn scheduled_switchover_waits_for_its_time() {
    let mut sim = three();
    let old = sim.primary_now();
    let cand = sim.replicas()[0];
    sim.switchover(Some(cand), Some(8_000));
    sim.run_for(5_000);
    sim.assert_primary(old);
    sim.run_for(5_000);
    sim.run_until_converged(sim.ttl() * 2);
    sim.assert_primary(cand);
}

#[test]
fn switchover_to_unknown_member_is_refused_and_cleared() {
    let mut sim = three();
    let p = sim.primary_now();
    sim.switchover_to_unknown();
    sim.run_for(3_000);
    sim.assert_primary(p);
    assert!(sim.w.store.switchover.is_none());
}

#[test]
fn pause_means_no_promotion_when_primary_postgres_dies() {
    let mut sim = three();
    let p = sim.primary_now();
    sim.pause();
    sim.run_for(2_000);
    sim.crash_pg(p);
    sim.run_for(sim.ttl() * 3);
    sim.assert_no_primary();
    sim.resume();
    sim.run_until_converged(sim.ttl() * 3);
}

#[test]
fn agent_stopped_in_pause_leaves_postgres_running_and_key_held() {
    let mut sim = three();
    let p = sim.primary_now();
    sim.pause();
    sim.run_for(2_000);
    sim.shutdown_agent(p);
    sim.run_for(sim.ttl() * 3);
    sim.assert_primary(p);
    sim.restart_agent(p);
    sim.run_for(3_000);
    sim.resume();
    sim.run_until_converged(sim.ttl() * 2);
    sim.assert_primary(p);
}

#[test]
fn nofailover_member_never_promotes() {
    let mut sim = Sim::with(4, 2, |i, c| c.nofailover = i == 1).started();
    let p = sim.primary_now();
    assert_eq!(p, 0, "only pg0 may bootstrap");
    sim.crash_host(p);
    sim.run_for(sim.ttl() * 4);
    sim.assert_no_primary();
}

#[test]
fn clock_drift_at_the_bound_keeps_one_writer() {
    for seed in 10..20 {
        let mut sim = Sim::with(seed, 3, |_, _| {}).started();
        let p = sim.primary_now();
        sim.partition_from_store(p);
        sim.run_for(sim.ttl() * 2);
        sim.heal_all();
        sim.run_until_converged(sim.ttl() * 4);
    }
}

#[test]
fn lost_replies_do_not_extend_leases() {
    let mut sim = Sim::with(5, 3, |_, _| {});
    sim.w.knobs.drop_reply_pct = 30;
    let mut sim = sim.started();
    sim.run_for(sim.ttl() * 5);
    sim.w.knobs.drop_reply_pct = 0;
    sim.run_until_converged(sim.ttl() * 4);
}

#[test]
fn diverged_old_primary_without_rewind_stays_stopped_and_says_why() {
    let mut sim = Sim::with(6, 3, |_, c| {
        c.use_pg_rewind = false;
        c.remove_data_directory_on_rewind_failure = false;
    })
    .started();
    let old = sim.primary_now();
    sim.partition_from_store(old);
    sim.run_for(sim.ttl() * 2);
    sim.heal_all();
    sim.run_for(sim.ttl() * 2);
    assert!(!sim.w.nodes[old].pg.is_primary());
    let why = &sim.w.nodes[old].agent.last_reason;
    assert!(
        why.contains("diverged") || why.contains("following"),
        "old primary says: {why}"
    );
}

#[test]
fn failed_rewind_falls_back_to_reclone_when_allowed() {
    let mut sim = Sim::with(7, 3, |_, _| {});
    sim.w.knobs.rewind_fail_pct = 100;
    let mut sim = sim.started();
    let old = sim.primary_now();
    sim.partition_from_store(old);
    sim.run_for(sim.ttl() * 2);
    sim.heal_all();
    sim.run_until_converged(sim.ttl() * 4);
}

#[test]
fn node_to_node_partition_alone_changes_nothing() {
    let mut sim = three();
    let p = sim.primary_now();
    let r = sim.replicas()[0];
    sim.partition_nodes(p, r);
    sim.run_for(sim.ttl() * 3);
    sim.assert_primary(p);
}

#[test]
fn isolated_primary_fences_and_rejoins_by_rewind() {
    let mut sim = three();
    let old = sim.primary_now();
    sim.isolate(old);
    sim.run_for(sim.ttl() * 2);
    sim.assert_single_writer();
    let new = sim.primary_now();
    assert_ne!(new, old);
    sim.heal_all();
    sim.run_until_converged(sim.ttl() * 3);
    assert!(
        sim.timeline_of(old) == sim.timeline_of(new),
        "rejoined on the new timeline"
    );
}

#[test]
fn scheduled_restarts_run_at_their_time_once_and_keep_one_primary() {
    use tenure::ha::{OperatorRequest, RestartFilter};
    let mut sim = three();
    let p = sim.primary_now();
    let r = sim.replicas()[0];
    let tl = sim.timeline_of(p);
    let due = |sim: &Sim, role: &str| {
        let what = format!("restarting PostgreSQL as {role}: the scheduled restart is due");
        sim.w.log.iter().filter(|l| l.contains(&what)).count()
    };
    let at = sim.w.t + 2_500;
    sim.operator_request(
        r,
        OperatorRequest::Restart {
            at_wall_ms: Some(at),
            filter: RestartFilter::default(),
        },
    );
    sim.operator_request(
        p,
        OperatorRequest::Restart {
            at_wall_ms: Some(at),
            filter: RestartFilter::default(),
        },
    );
    sim.run_for(2_000);
    assert_eq!(
        due(&sim, "replica") + due(&sim, "primary"),
        0,
        "not before its time"
    );
    sim.run_for(3_000);
    assert_eq!(due(&sim, "replica"), 1, "{:#?}", sim.w.log);
    assert_eq!(due(&sim, "primary"), 1, "{:#?}", sim.w.log);
    let ran_at = sim
        .w
        .log
        .iter()
        .find(|l| l.contains("the scheduled restart is due"))
        .and_then(|l| {
            l.strip_prefix("[t=")?
                .split(']')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .expect("a due line");
    assert!(
        ran_at >= at && ran_at < at + 1_000,
        "ran at {ran_at}, due {at}"
    );
    sim.run_for(3_000);
    sim.assert_primary(p);
    assert_eq!(sim.timeline_of(p), tl, "a restart promotes nothing");
    assert_eq!(due(&sim, "primary"), 1, "once");
    // Cancelled before its time: nothing happens.
    let at = sim.w.t + 2_000;
    sim.operator_request(
        r,
        OperatorRequest::Restart {
            at_wall_ms: Some(at),
            filter: RestartFilter::default(),
        },
    );
    sim.run_for(500);
    sim.operator_request(r, OperatorRequest::CancelRestart);
    sim.run_for(4_000);
    assert_eq!(due(&sim, "replica"), 1, "the cancelled one never ran");
}

#[test]
fn operator_restart_and_reinit_in_pause_keep_one_primary_and_bring_the_node_back() {
    use tenure::ha::{OperatorRequest, RestartFilter};
    let mut sim = three();
    let p = sim.primary_now();
    let r = sim.replicas()[0];
    let tl = sim.timeline_of(p);
    sim.pause();
    sim.run_for(2_000);
    let logged = |sim: &Sim, what: &str| sim.w.log.iter().any(|l| l.contains(what));
    sim.operator_request(
        p,
        OperatorRequest::Restart {
            at_wall_ms: None,
            filter: RestartFilter::default(),
        },
    );
    sim.run_for(3_000);
    assert!(
        logged(
            &sim,
            "restarting PostgreSQL as primary on the operator's request"
        ),
        "{:#?}",
        sim.w.log
    );
    sim.assert_primary(p);
    assert_eq!(sim.timeline_of(p), tl, "a restart promotes nothing");
    sim.operator_request(r, OperatorRequest::Reinitialize { force: false });
    sim.run_for(6_000);
    assert!(
        logged(&sim, "on the operator's request"),
        "{:#?}",
        sim.w.log
    );
    assert!(logged(&sim, "re-clone from"), "{:#?}", sim.w.log);
    assert_eq!(
        sim.w.nodes[r].pg.run,
        crate::pgmodel::Run::Replica { upstream: Some(p) },
        "the re-cloned replica runs again in pause"
    );
    sim.assert_primary(p);
    sim.resume();
    sim.run_until_converged(sim.ttl() * 2);
}

/// The old primary's fencing process hung, then its host cut off from the store: its agent stops
/// PostgreSQL itself at the lease's end, and its health check stops answering "primary" there (the
/// scenario mutant `HealthIgnoresLease` trips in `mutants.rs`).
#[test]
fn hung_fencer_and_cut_off_primary_still_one_writer_one_healthy_primary() {
    for seed in 1..6 {
        let mut sim = Sim::with(seed, 3, |_, _| {}).started();
        let p = sim.primary_now();
        sim.w.nodes[p].fencer_frozen = true;
        sim.partition_from_store(p);
        sim.run_for(sim.ttl() * 2);
        let new = sim.primary().expect("a new primary");
        assert_ne!(
            new, p,
            "seed {seed}: the cut-off primary is no longer writable"
        );
        sim.heal_all();
        sim.run_until_converged(sim.ttl() * 4);
    }
}
