//! Test the tester: each deliberately broken rule (feature `mutants`) must make a checker fail.
use std::panic::{catch_unwind, AssertUnwindSafe};

use tenure::ha::mutants::Mutant;
use tenure::ha::WatchdogMode;

use crate::dsl::Sim;

/// Run `scenario` and return the panic message (the checker's verdict), if any.
fn verdict(scenario: impl FnOnce()) -> Option<String> {
    let result = catch_unwind(AssertUnwindSafe(scenario));
    result.err().map(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Try seeds until one trips a checker; return its message.
fn first_failure(seeds: std::ops::Range<u64>, run: impl Fn(u64)) -> String {
    for seed in seeds.clone() {
        if let Some(msg) = verdict(|| run(seed)) {
            println!("seed {seed}: {}", msg.lines().next().unwrap_or(""));
            return msg;
        }
    }
    panic!("no checker failed within seeds {seeds:?}: the checkers cannot see this mutant");
}

fn assert_tripped(msg: &str, checkers: &[&str]) {
    assert!(
        checkers.iter().any(|c| msg.contains(c)),
        "expected one of {checkers:?} to fail, got: {}",
        msg.lines().next().unwrap_or("")
    );
}

fn mutant_sim(seed: u64, m: Mutant) -> Sim {
    Sim::with(seed, 3, |_, c| c.mutant = Some(m))
}

#[test]
fn mutant_promote_before_ack_trips_single_writer_or_lease_covers() {
    let msg = first_failure(1..50, |seed| {
        crate::random::run_seed(seed, |_, c| c.mutant = Some(Mutant::PromoteBeforeAck));
    });
    assert_tripped(&msg, &["SingleWriter", "LeaseCovers"]);
}

#[test]
fn mutant_lease_from_reply_trips_lease_covers() {
    let msg = first_failure(1..300, |seed| {
        let mut sim = mutant_sim(seed, Mutant::LeaseFromReply);
        sim.w.knobs.slow_ms = 1_900;
        sim.w.knobs.drop_reply_pct = 0;
        let mut sim = sim.started();
        for _ in 0..4 {
            sim.run_for(3_000 + seed % 2_000);
            let p = sim.primary().unwrap_or(0);
            sim.partition_from_store(p);
            sim.run_for(sim.ttl() * 2);
            sim.heal_all();
            sim.run_for(sim.ttl());
        }
    });
    assert_tripped(&msg, &["LeaseCovers", "SingleWriter"]);
}

#[test]
fn mutant_no_fence_when_store_down_trips_lease_covers() {
    let msg = first_failure(1..5, |seed| {
        let mut sim = mutant_sim(seed, Mutant::NoFenceWhenStoreDown).started();
        let p = sim.primary_now();
        sim.partition_from_store(p);
        sim.run_for(sim.ttl() * 3);
    });
    assert_tripped(&msg, &["LeaseCovers", "SingleWriter"]);
}

/// The fence a renewal arms in its own decision must count from no later than that decision: counted from
/// the end of the call budget, it outlives the session when the agent freezes right after the renewal.
#[test]
fn mutant_arm_renewal_from_budget_end_trips_lease_covers() {
    let msg = first_failure(1..50, |seed| {
        let mut sim = mutant_sim(seed, Mutant::ArmRenewalFromBudgetEnd).started();
        let p = sim.primary_now();
        sim.run_for(seed % 1_000);
        sim.freeze_agent(p);
        sim.run_for(sim.ttl() * 3);
    });
    assert_tripped(&msg, &["LeaseCovers", "SingleWriter"]);
}

#[test]
fn mutant_watchdog_never_fires_trips_lease_covers() {
    let msg = first_failure(1..5, |seed| {
        let mut sim = Sim::with(seed, 3, |_, c| {
            c.watchdog = WatchdogMode::Required;
            c.mutant = Some(Mutant::WatchdogNeverFires);
        })
        .started();
        let p = sim.primary_now();
        sim.freeze_agent_and_fencer(p);
        sim.run_for(sim.ttl() * 3);
    });
    assert_tripped(&msg, &["LeaseCovers", "SingleWriter"]);
}

#[test]
fn mutant_health_ignores_lease_trips_health_single() {
    let msg = first_failure(1..200, |seed| {
        let mut sim = mutant_sim(seed, Mutant::HealthIgnoresLease).started();
        let p = sim.primary_now();
        // With its fencing process hung, the old primary runs until its agent stops it, which answers
        // from that decision's status until the next: a status that ignores the lease says "primary"
        // there while the new leader promotes. (Cut off alone, the fencer stops PostgreSQL at the lease's
        // end and the agent, not reading after the unanswered renewal, says so at once.)
        sim.w.nodes[p].fencer_frozen = true;
        sim.partition_from_store(p);
        sim.run_for(sim.ttl() * 2);
    });
    assert_tripped(&msg, &["HealthSingle"]);
}

#[test]
fn mutant_skip_divergence_check_trips_no_silent_divergence() {
    let msg = first_failure(1..20, |seed| {
        let mut sim = mutant_sim(seed, Mutant::SkipDivergenceCheck).started();
        let p = sim.primary_now();
        // Cut off from peers too, so the old primary writes WAL nobody else receives.
        sim.isolate(p);
        sim.run_for(sim.ttl() * 2);
        sim.heal_all();
        sim.run_for(sim.ttl() * 4);
    });
    assert_tripped(&msg, &["NoSilentDivergence"]);
}

#[test]
fn mutant_read_lag_from_received_trips_read_lag_honest() {
    let msg = first_failure(1..5, |seed| {
        let mut sim = mutant_sim(seed, Mutant::ReadLagFromReceived).started();
        let r = sim.replicas()[0];
        sim.pause_replay(r);
        sim.run_for(5_000);
    });
    assert_tripped(&msg, &["ReadLagHonest"]);
}

#[test]
fn mutant_never_race_trips_liveness() {
    let msg = first_failure(1..5, |seed| {
        let mut sim = mutant_sim(seed, Mutant::NeverRace).started();
        let p = sim.primary_now();
        sim.crash_host(p);
        sim.run_until_converged(sim.ttl() * 6);
    });
    assert_tripped(&msg, &["Liveness"]);
}

#[test]
fn mutant_race_ignores_timeline_trips_timeline_monotone() {
    let msg = first_failure(1..400, |seed| {
        crate::random::run_seed(seed, |_, c| c.mutant = Some(Mutant::RaceIgnoresTimeline));
    });
    assert_tripped(&msg, &["TimelineMonotone"]);
}

#[test]
fn mutant_failsafe_from_receive_trips_lease_covers() {
    let msg = first_failure(101..141, |seed| {
        crate::failsafe::cut_from_store_then_from_peers(seed, |_, c| {
            c.mutant = Some(Mutant::FailsafeFromReceive)
        })
    });
    assert_tripped(&msg, &["LeaseCovers", "SingleWriter"]);
}

#[test]
fn mutant_failsafe_ignore_grant_trips_single_writer() {
    let msg = first_failure(101..141, |seed| {
        crate::failsafe::cut_from_store_then_from_peers(seed, |_, c| {
            c.mutant = Some(Mutant::FailsafeIgnoreGrant)
        })
    });
    assert_tripped(&msg, &["SingleWriter", "LeaseCovers"]);
}

#[test]
fn mutant_pause_demotes_on_lapsed_key_trips_pause_hands_off() {
    // The rule before issue 16 §2: a paused primary whose lease lapsed while the store was frozen is
    // stopped when the thawed store still shows its key.
    let msg = first_failure(1..5, |seed| {
        let sim = mutant_sim(seed, Mutant::PauseDemotesOnLapsedKey);
        crate::pause_outage::paused_outage(sim, crate::pause_outage::Outage::EtcdFrozen);
    });
    assert_tripped(&msg, &["PauseHandsOff"]);
}

#[test]
fn mutant_ignore_pre_promote_veto_trips_no_promote_after_veto() {
    let msg = first_failure(1..20, |seed| {
        let mut sim = Sim::with(seed, 3, |_, c| {
            c.hooks.pre_promote = true;
            c.mutant = Some(Mutant::IgnorePrePromoteVeto);
        })
        .started();
        let replicas = sim.replicas();
        crate::hooks::crash_with_vetoes(&mut sim, &replicas);
        sim.run_for(1000);
    });
    assert_tripped(&msg, &["NoPromoteAfterVeto"]);
}

#[test]
fn mutant_sync_async_may_race_trips_no_acked_write_lost() {
    let msg = first_failure(1..10, |seed| {
        crate::sync::async_member_left_alone(mutant_sim(seed, Mutant::SyncAsyncMayRace))
    });
    assert_tripped(&msg, &["NoAckedWriteLost"]);
}

#[test]
fn mutant_sync_publish_unconfirmed_trips_no_acked_write_lost() {
    let msg = first_failure(1..10, |seed| {
        crate::sync::crash_as_standby_is_published(mutant_sim(seed, Mutant::SyncPublishUnconfirmed))
    });
    assert_tripped(&msg, &["NoAckedWriteLost"]);
}

#[test]
fn mutant_sync_names_before_key_trips_no_acked_write_lost() {
    let msg = first_failure(1..10, |seed| {
        crate::sync::crash_as_names_change(mutant_sim(seed, Mutant::SyncNamesBeforeKey))
    });
    assert_tripped(&msg, &["NoAckedWriteLost"]);
}

#[test]
fn mutant_quorum_race_without_votes_trips_no_acked_write_lost() {
    let msg = first_failure(1..10, |seed| {
        crate::quorum::laggard_left_alone(mutant_sim(seed, Mutant::QuorumRaceWithoutVotes))
    });
    assert_tripped(&msg, &["NoAckedWriteLost"]);
}

#[test]
fn mutant_quorum_shrink_unconfirmed_trips_no_acked_write_lost() {
    let msg = first_failure(1..10, |seed| {
        crate::quorum::crash_as_voters_return(mutant_sim(seed, Mutant::QuorumShrinkUnconfirmed))
    });
    assert_tripped(&msg, &["NoAckedWriteLost"]);
}

#[test]
fn mutant_publish_before_actions_trips_slow_store_keeps_lease() {
    let msg = first_failure(1..5, |seed| {
        crate::slow_store::primary_keeps_its_lease(seed, |c| {
            c.mutant = Some(Mutant::PublishBeforeActions)
        });
    });
    assert_tripped(&msg, &["SlowStoreKeepsLease"]);
}

#[test]
fn mutant_failsafe_fixed_timeout_trips_failsafe_keeps_primary() {
    let msg = first_failure(1..5, |seed| {
        crate::failsafe_hung::hung_store_keeps_the_primary(seed, 2_000, 20_000, |c| {
            c.mutant = Some(Mutant::FailsafeFixedTimeout)
        });
    });
    assert_tripped(&msg, &["FailsafeKeepsPrimary"]);
}

#[test]
fn mutant_check_without_recovery_trips_recovery_before_check() {
    let msg = first_failure(1..200, |seed| {
        crate::random::run_seed(seed, |_, c| c.mutant = Some(Mutant::CheckWithoutRecovery));
    });
    assert_tripped(&msg, &["RecoveryBeforeCheck"]);
}

#[test]
fn mutant_keep_initialize_after_failed_bootstrap_trips_liveness() {
    let msg = first_failure(1..11, |seed| {
        crate::bootstrap_failure::two_members_cannot_bootstrap(seed, |_, c| {
            c.mutant = Some(Mutant::KeepInitializeAfterFailedBootstrap)
        });
    });
    assert_tripped(&msg, &["Liveness"]);
}

#[test]
fn mutant_pooler_route_at_acquire_trips_pooler_routes_to_leader() {
    let msg = first_failure(1..10, |seed| {
        let mut sim =
            crate::pooler::pooled(seed, |_, c| c.mutant = Some(Mutant::PoolerRouteAtAcquire));
        let cand = sim.replicas()[0];
        sim.switchover(Some(cand), None);
        sim.run_for(5_000);
    });
    assert_tripped(&msg, &["PoolerRoutesToLeader"]);
}

#[test]
fn mutant_chain_ignores_routed_here_trips_pooler_routes_to_leader() {
    let msg = first_failure(1..10, |seed| {
        let mut sim =
            crate::pooler::chained(seed, |_, c| c.mutant = Some(Mutant::ChainIgnoresRoutedHere));
        let cand = sim.replicas()[0];
        sim.w.nodes[cand].pooler.down = true;
        sim.switchover(Some(cand), None);
        sim.run_for(5_000);
    });
    assert_tripped(&msg, &["PoolerRoutesToLeader"]);
}

#[test]
fn mutant_promote_retries_at_once_trips_promotion_paced() {
    // The random seeds whose node 1 cannot promote (one in seven).
    let msg = first_failure(1..400, |seed| {
        if seed % 7 == 4 {
            crate::random::run_seed(seed, |_, c| c.mutant = Some(Mutant::PromoteRetriesAtOnce));
        }
    });
    assert_tripped(&msg, &["PromotionPaced"]);
}

#[test]
fn mutant_standby_leader_promotes_trips_standby_site_read_only() {
    let msg = first_failure(1..10, |seed| {
        crate::standby_cluster::run_standby_seed(seed, |_, c| {
            c.mutant = Some(Mutant::StandbyLeaderPromotes)
        });
    });
    assert_tripped(&msg, &["StandbySiteReadOnly"]);
}

#[test]
fn mutant_stale_read_undoes_standby_trips_standby_site_read_only() {
    // Seen failing before the rule: a standby leader that read a `config` from before the demotion promoted.
    let msg = first_failure(1..60, |seed| {
        crate::standby_cluster::run_standby_seed(seed, |_, c| {
            c.mutant = Some(Mutant::StaleReadUndoesStandby)
        });
    });
    assert_tripped(&msg, &["StandbySiteReadOnly"]);
}

#[test]
fn mutant_peer_site_ignored_trips_at_most_one_writable_site() {
    // A site back from a whole-site outage promotes while the other site (promoted meanwhile) answers as a primary.
    let msg = first_failure(1..5, |seed| {
        crate::sites::superseded_site(seed, true, |_, c| c.mutant = Some(Mutant::PeerSiteIgnored));
    });
    assert_tripped(&msg, &["AtMostOneWritableSite"]);
}

#[test]
fn mutant_promote_without_handover_trips_handover_loses_nothing() {
    // The other site's WAL arrives 3 s late: promoting on the handover at once loses what it acknowledged last.
    let msg = first_failure(1..5, |seed| {
        crate::sites::planned_switchover(seed, 3_000, |_, c| {
            c.mutant = Some(Mutant::PromoteWithoutHandover)
        });
    });
    assert_tripped(&msg, &["HandoverLosesNothing"]);
}

#[test]
fn mutant_peer_site_ignored_trips_at_most_one_writable_site_in_random_seeds() {
    let msg = first_failure(1..20, |seed| {
        crate::sites::run_return_seed(seed, |_, c| c.mutant = Some(Mutant::PeerSiteIgnored));
    });
    assert_tripped(&msg, &["AtMostOneWritableSite"]);
}

#[test]
fn mutant_promote_without_handover_trips_handover_loses_nothing_in_random_seeds() {
    let msg = first_failure(1..20, |seed| {
        crate::sites::run_handover_seed(seed, |_, c| {
            c.mutant = Some(Mutant::PromoteWithoutHandover)
        });
    });
    assert_tripped(&msg, &["HandoverLosesNothing"]);
}
