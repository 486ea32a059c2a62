//! The one contract every `Dcs` backend meets, written once, generic over a `Backend` factory, and stamped out
//! per backend by `contract_tests!`.
mod faults;
mod members;
mod remove;
mod renewal;
mod sync;
mod ttl;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure::dcs::{ClusterSnapshot, Dcs, DcsError, MemberRecord, SwitchoverRecord};
use tenure::ha::observation::{MemberRole, MemberState};
use tenure::ha::types::{Lsn, NodeName, Timeline};
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};

pub use faults::*;
pub use members::*;
pub use remove::*;
pub use renewal::*;
pub use sync::*;
pub use ttl::*;
pub use watch::*;

/// A fault the backend may be able to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Healthy,
    /// Every request hangs until healed.
    Frozen,
    /// Consul's 500 `No cluster leader` (or the backend's equivalent "the store has no quorum").
    NoLeader,
    /// Requests are read and the connection closed without an answer.
    DropConnections,
}

/// What a backend provides to the suite.
#[async_trait]
pub trait Backend: Send + Sync {
    /// A client for member `name` of cluster `scope`, with HA ttl `ttl_ms`. Each case uses its own scope, so
    /// cases never see each other's keys even on a shared store.
    async fn make_client(&self, scope: &str, name: &str, ttl_ms: u64) -> Box<dyn Dcs>;
    /// The HA ttl the suite uses (as short as the store allows).
    fn ttl_ms(&self) -> u64;
    /// Whose session semantics the agent derives this store's session TTL for (`Timing::new`).
    fn session_store(&self) -> tenure::ha::SessionStore;
    /// The earliest and latest ms after the last acknowledged renewal at which keys bound to the session vanish.
    fn expiry_window_ms(&self, ttl_ms: u64) -> (u64, u64);
    /// Inject `fault`; `false` if this backend cannot (the case then prints a notice and returns).
    async fn set_fault(&self, fault: Fault) -> bool {
        let _ = fault;
        false
    }
    /// Write `value` as is at `<namespace>/<scope>/<key>` (garbage no client of ours writes); `false` if
    /// this backend cannot (the case then prints a notice and returns).
    async fn put_raw(&self, scope: &str, key: &str, value: &[u8]) -> bool {
        let _ = (scope, key, value);
        false
    }
}

/// Stamp out one `#[tokio::test]` per contract case for a backend factory
/// (`async fn() -> Option<impl Backend>`; `None` means skip, after printing why).
macro_rules! contract_tests {
    ($factory:path) => {
        contract_tests!($factory;
            exclusive_acquire_under_contention, expiry_frees_leader_not_before_ttl, release_frees_at_once,
            renewing_after_expiry_is_session_invalid, member_keys_vanish_with_their_session,
            restarted_agent_takes_over_its_own_leader_key, cas_config_conflicts, race_initialize_is_create_only,
            cancel_initialize_frees_the_race,
            snapshot_carries_every_key, failsafe_key_round_trips, watch_wakes_on_leader_change, watch_wakes_on_config_change,
            watch_times_out_without_change,
            passed_deadline_is_unavailable, no_cluster_leader_is_unavailable, frozen_store_answers_by_deadline,
            dropped_connection_is_unavailable, a_new_ttl_applies_from_the_next_acquire,
            an_unchanged_member_record_is_not_written_again, sync_key_is_written_with_cas,
            sync_key_is_deleted_with_cas, garbage_sync_key_reads_as_no_leader, sync_key_carries_quorum,
            delete_cluster_wipes_the_scope_only, one_keep_alive_per_leader_cycle);
    };
    ($factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                match $factory().await {
                    Some(backend) => crate::contract::$case(&backend).await,
                    None => eprintln!("skipped {}: backend not available", stringify!($case)),
                }
            }
        )*
    };
}

const DEADLINE_MS: u64 = 3_000;
/// How late after its promised moment an event may still count as on time (scheduling on a busy 2-core box).
const SLACK_MS: u64 = 250;
/// Longer than the lock-delay a Consul client asks for (1 ms), so a key freed by expiry can be taken.
const LOCK_DELAY_SLACK_MS: u64 = 20;

/// An invalidated session's keys are under Consul's lock-delay (tenure sends Patroni's 1 ms): an acquire
/// inside it is refused, and a client can send one that soon after it saw the key go. Wait it out.
async fn past_lock_delay() {
    sleep(Duration::from_millis(LOCK_DELAY_SLACK_MS)).await;
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_millis(DEADLINE_MS)
}

fn scope(case: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("contract-{case}-{nanos}")
}

/// A client as the agent runs it: its store mirror fed beside it (a backend without one returns at once), so
/// every case holds for reads from the mirror as for full reads.
async fn client(b: &dyn Backend, scope: &str, name: &str) -> Arc<dyn Dcs> {
    let c: Arc<dyn Dcs> = Arc::from(b.make_client(scope, name, b.ttl_ms()).await);
    let fed = c.clone();
    tokio::spawn(async move { fed.run_mirror().await });
    c
}

async fn snapshot(c: &dyn Dcs) -> ClusterSnapshot {
    c.get_cluster(true, deadline()).await.expect("get_cluster")
}

async fn leader(c: &dyn Dcs) -> Option<String> {
    snapshot(c).await.cluster.leader.map(|l| l.name.0)
}

fn is_unavailable<T: std::fmt::Debug>(r: &Result<T, DcsError>) -> bool {
    matches!(r, Err(DcsError::Unavailable(_)))
}

/// Poll until the leader key is gone; returns when that was first seen, or `None` by `until`.
async fn leader_gone_at(c: &dyn Dcs, until: Instant) -> Option<Instant> {
    while Instant::now() < until {
        if leader(c).await.is_none() {
            return Some(Instant::now());
        }
        sleep(Duration::from_millis(10)).await;
    }
    None
}

fn member(role: &str, lsn: u64) -> MemberRecord {
    MemberRecord {
        conn_url: "postgres://127.0.0.1:5432/postgres".into(),
        api_url: "http://127.0.0.1:8008/patroni".into(),
        state: "running".into(),
        role: role.into(),
        version: "0.1.0".into(),
        xlog_location: Some(lsn),
        timeline: Some(3),
        ..MemberRecord::default()
    }
}

pub async fn exclusive_acquire_under_contention(b: &dyn Backend) {
    let scope = scope("contention");
    let mut clients = Vec::new();
    for i in 0..5 {
        clients.push(client(b, &scope, &format!("n{i}")).await);
    }
    for round in 0..10 {
        let mut races = JoinSet::new();
        for (i, c) in clients.iter().enumerate() {
            let c = c.clone();
            races.spawn(async move { (i, c.acquire_leader(deadline()).await) });
        }
        let mut winners = Vec::new();
        while let Some(joined) = races.join_next().await {
            let (i, result) = joined.expect("task");
            match result {
                Ok(()) => winners.push(i),
                Err(DcsError::Conflict(_)) => {}
                Err(e) => panic!("round {round}: n{i} got {e:?}, expected Ok or Conflict"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one winner, got {winners:?}"
        );
        let w = winners[0];
        assert_eq!(
            leader(&*clients[0]).await,
            Some(format!("n{w}")),
            "round {round}"
        );
        for (i, c) in clients.iter().enumerate() {
            let renewed = c.renew_leader(deadline()).await;
            if i == w {
                renewed.expect("the winner keeps its lock");
            } else {
                assert!(
                    matches!(renewed, Err(DcsError::Conflict(_))),
                    "n{i} does not hold it: {renewed:?}"
                );
            }
        }
        clients[w]
            .release_leader(deadline())
            .await
            .expect("release");
    }
    for c in &clients {
        c.destroy_session(deadline()).await.expect("destroy");
    }
}

pub async fn expiry_frees_leader_not_before_ttl(b: &dyn Backend) {
    let scope = scope("expiry");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    a.ensure_session(deadline()).await.expect("session");
    let sent = Instant::now();
    a.acquire_leader(deadline()).await.expect("acquire");
    let acked = Instant::now();
    let (min_ms, max_ms) = b.expiry_window_ms(b.ttl_ms());
    let gone = leader_gone_at(
        &*o,
        acked + Duration::from_millis(max_ms + SLACK_MS + max_ms / 4),
    )
    .await
    .expect("the leader key vanishes once its session expires");
    let lived_ms = gone.duration_since(sent).as_millis() as u64;
    assert!(
        lived_ms >= min_ms,
        "expired after {lived_ms} ms, before the promised {min_ms} ms"
    );
    let after_ack_ms = gone.duration_since(acked).as_millis() as u64;
    assert!(
        after_ack_ms <= max_ms + SLACK_MS + max_ms / 4,
        "expired only after {after_ack_ms} ms (max {max_ms})"
    );
    // `o` can see the key gone and send its acquire within the lock-delay.
    past_lock_delay().await;
    o.acquire_leader(deadline())
        .await
        .expect("the expired key is free to take");
}

pub async fn release_frees_at_once(b: &dyn Backend) {
    let scope = scope("release");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    a.acquire_leader(deadline()).await.expect("acquire");
    assert!(matches!(
        o.acquire_leader(deadline()).await,
        Err(DcsError::Conflict(_))
    ));
    a.release_leader(deadline()).await.expect("release");
    assert_eq!(
        leader(&*o).await,
        None,
        "released key is gone at once, not left lockless"
    );
    // No lock-delay after an explicit release: the other member takes it immediately.
    o.acquire_leader(deadline())
        .await
        .expect("acquire right after release");
    assert!(matches!(
        a.renew_leader(deadline()).await,
        Err(DcsError::Conflict(_))
    ));
    // Releasing what we do not hold is a no-op that leaves the holder alone.
    a.release_leader(deadline())
        .await
        .expect("release when not holding");
    o.renew_leader(deadline()).await.expect("holder unaffected");
    assert_eq!(leader(&*a).await.as_deref(), Some("o"));
}

pub async fn renewing_after_expiry_is_session_invalid(b: &dyn Backend) {
    let scope = scope("renew-expired");
    let a = client(b, &scope, "a").await;
    let old = a.ensure_session(deadline()).await.expect("session");
    a.acquire_leader(deadline()).await.expect("acquire");
    let (_, max_ms) = b.expiry_window_ms(b.ttl_ms());
    sleep(Duration::from_millis(max_ms + SLACK_MS + max_ms / 4)).await;
    let r = a.renew_leader(deadline()).await;
    assert!(
        matches!(r, Err(DcsError::SessionInvalid(_))),
        "renew_leader after expiry: {r:?}"
    );
    let r = a.renew_session(deadline()).await;
    assert!(
        matches!(r, Err(DcsError::SessionInvalid(_))),
        "renew_session after expiry: {r:?}"
    );
    let new = a.ensure_session(deadline()).await.expect("a fresh session");
    assert_ne!(new, old, "a new session, not the dead one");
    a.renew_session(deadline())
        .await
        .expect("the fresh session renews");
    a.destroy_session(deadline()).await.expect("destroy");
}

pub async fn member_keys_vanish_with_their_session(b: &dyn Backend) {
    let scope = scope("members");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    // The trait's protocol: a session first (ensure_session), then keys bound to it.
    a.ensure_session(deadline()).await.expect("session a");
    o.ensure_session(deadline()).await.expect("session o");
    a.publish_member(&member("replica", 100), deadline())
        .await
        .expect("publish a");
    o.publish_member(&member("primary", 200), deadline())
        .await
        .expect("publish o");
    let s = snapshot(&*o).await;
    let names: Vec<&str> = s.cluster.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["a", "o"]);
    let m = s.cluster.member(&NodeName::new("a")).expect("a");
    assert_eq!(
        (m.role, m.state, m.lsn, m.timeline),
        (
            MemberRole::Replica,
            MemberState::Running,
            Some(Lsn(100)),
            Some(Timeline(3))
        )
    );
    assert_eq!(m.api_url.as_deref(), Some("http://127.0.0.1:8008/patroni"));
    // Republishing overwrites in place.
    a.publish_member(&member("replica", 150), deadline())
        .await
        .expect("republish");
    let s = snapshot(&*o).await;
    assert_eq!(
        s.cluster.member(&NodeName::new("a")).and_then(|m| m.lsn),
        Some(Lsn(150))
    );
    // Destroying the session removes the member at once.
    a.destroy_session(deadline()).await.expect("destroy");
    let s = snapshot(&*o).await;
    assert!(
        s.cluster.member(&NodeName::new("a")).is_none(),
        "a's key went with its session"
    );
    assert!(s.cluster.member(&NodeName::new("o")).is_some());
    // Letting a session expire removes its member too.
    let (_, max_ms) = b.expiry_window_ms(b.ttl_ms());
    let until = Instant::now() + Duration::from_millis(max_ms + SLACK_MS + max_ms / 4);
    while snapshot(&*a)
        .await
        .cluster
        .member(&NodeName::new("o"))
        .is_some()
    {
        assert!(
            Instant::now() < until,
            "o's member key outlived its session"
        );
        sleep(Duration::from_millis(20)).await;
    }
    // And a member can come back under a new session.
    a.ensure_session(deadline()).await.expect("new session");
    a.publish_member(&member("replica", 300), deadline())
        .await
        .expect("publish again");
    assert!(snapshot(&*o)
        .await
        .cluster
        .member(&NodeName::new("a"))
        .is_some());
}

pub async fn restarted_agent_takes_over_its_own_leader_key(b: &dyn Backend) {
    let scope = scope("takeover");
    let (before, other) = (client(b, &scope, "n1").await, client(b, &scope, "n2").await);
    before.acquire_leader(deadline()).await.expect("acquire");
    // The same member restarts with a new session while the old one still lives.
    let after = client(b, &scope, "n1").await;
    after
        .acquire_leader(deadline())
        .await
        .expect("our own name under an older session is taken over");
    let session = after.ensure_session(deadline()).await.expect("session");
    let held = snapshot(&*other).await.cluster.leader.expect("leader");
    assert_eq!(
        (held.name.as_str(), held.session.as_ref()),
        ("n1", Some(&session))
    );
    assert!(
        matches!(
            before.renew_leader(deadline()).await,
            Err(DcsError::Conflict(_))
        ),
        "the old session lost it"
    );
    // Another member's name is never taken over.
    assert!(matches!(
        other.acquire_leader(deadline()).await,
        Err(DcsError::Conflict(_))
    ));
    after.renew_leader(deadline()).await.expect("still ours");
}

pub async fn cas_config_conflicts(b: &dyn Backend) {
    let scope = scope("cas");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    let v1 = serde_json::json!({"ttl": 30});
    a.cas_config(&v1, None, deadline()).await.expect("create");
    assert!(
        matches!(
            o.cas_config(&v1, None, deadline()).await,
            Err(DcsError::Conflict(_))
        ),
        "create-only"
    );
    let (value, index) = snapshot(&*o).await.config.expect("config");
    assert_eq!(value, v1);
    let v2 = serde_json::json!({"ttl": 30, "pause": true});
    o.cas_config(&v2, Some(index), deadline())
        .await
        .expect("cas at the current index");
    let stale = a
        .cas_config(&serde_json::json!({"ttl": 10}), Some(index), deadline())
        .await;
    assert!(
        matches!(stale, Err(DcsError::Conflict(_))),
        "stale index: {stale:?}"
    );
    let s = snapshot(&*a).await;
    assert_eq!(s.config.map(|c| c.0), Some(v2));
    assert!(s.cluster.config.pause);
}

pub async fn race_initialize_is_create_only(b: &dyn Backend) {
    let scope = scope("init");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    a.race_initialize("a-won", deadline()).await.expect("first");
    assert!(matches!(
        o.race_initialize("o-won", deadline()).await,
        Err(DcsError::Conflict(_))
    ));
    assert_eq!(
        snapshot(&*o).await.cluster.initialize.as_deref(),
        Some("a-won")
    );
    a.write_initialize("7301234567890123456", deadline())
        .await
        .expect("overwrite");
    assert_eq!(
        snapshot(&*o).await.cluster.initialize.as_deref(),
        Some("7301234567890123456")
    );
}

/// A failed bootstrap deletes `initialize` (Patroni's `cancel_initialization`): the race is open again.
pub async fn cancel_initialize_frees_the_race(b: &dyn Backend) {
    let scope = scope("cancel-init");
    let (a, o) = (client(b, &scope, "a").await, client(b, &scope, "o").await);
    a.race_initialize("a", deadline()).await.expect("a wins");
    a.cancel_initialize(deadline()).await.expect("cancel");
    assert_eq!(snapshot(&*o).await.cluster.initialize, None);
    o.race_initialize("o", deadline())
        .await
        .expect("o wins now");
    assert_eq!(snapshot(&*a).await.cluster.initialize.as_deref(), Some("o"));
    // Deleting a key that is already gone is no error: a retried cancel whose first reply was lost.
    o.cancel_initialize(deadline()).await.expect("cancel");
    o.cancel_initialize(deadline()).await.expect("cancel again");
}

/// The `failsafe` key (Patroni's JSON `{name: api_url}`) and `failsafe_mode` in `config` reach the snapshot.
pub async fn failsafe_key_round_trips(b: &dyn Backend) {
    let scope = scope("failsafe");
    let a = client(b, &scope, "a").await;
    let s = snapshot(&*a).await;
    assert_eq!(
        (s.cluster.failsafe, s.cluster.config.failsafe_mode),
        (None, false)
    );
    let members: std::collections::BTreeMap<String, String> = [
        ("a".to_string(), "http://10.0.0.1:8008/patroni".to_string()),
        ("b".to_string(), "http://10.0.0.2:8008/patroni".to_string()),
    ]
    .into_iter()
    .collect();
    a.write_failsafe(&members, deadline())
        .await
        .expect("write failsafe");
    a.cas_config(
        &serde_json::json!({"ttl": 30, "failsafe_mode": true}),
        None,
        deadline(),
    )
    .await
    .expect("config");
    let s = snapshot(&*a).await;
    let want = members
        .iter()
        .map(|(k, v)| (NodeName::new(k.as_str()), v.clone()))
        .collect();
    assert_eq!(s.cluster.failsafe, Some(want));
    assert!(s.cluster.config.failsafe_mode);
    // Overwritten as a whole (a member that left is gone from the key).
    let one: std::collections::BTreeMap<String, String> = members.into_iter().take(1).collect();
    a.write_failsafe(&one, deadline()).await.expect("rewrite");
    assert_eq!(
        snapshot(&*a).await.cluster.failsafe.map(|k| k.len()),
        Some(1)
    );
}

pub async fn snapshot_carries_every_key(b: &dyn Backend) {
    let scope = scope("snapshot");
    let a = client(b, &scope, "a").await;
    let empty = snapshot(&*a).await;
    assert_eq!(
        empty.cluster,
        Default::default(),
        "a fresh scope reads as empty, not as an error"
    );
    a.ensure_session(deadline()).await.expect("session");
    a.acquire_leader(deadline()).await.expect("acquire");
    a.publish_member(&member("primary", 5), deadline())
        .await
        .expect("member");
    a.write_status(4242, deadline()).await.expect("status");
    a.write_history(
        &serde_json::json!([[1, 25165984, "no recovery target specified"]]),
        deadline(),
    )
    .await
    .expect("history");
    let request = SwitchoverRecord {
        leader: Some("a".into()),
        member: Some("b".into()),
        scheduled_at: Some("2030-01-01T00:00:00+00:00".into()),
    };
    a.write_switchover(&request, deadline())
        .await
        .expect("switchover");
    let s = snapshot(&*a).await;
    assert_eq!(s.cluster.leader_name().map(NodeName::as_str), Some("a"));
    assert_eq!(s.cluster.optime, Some(Lsn(4242)));
    assert_eq!(
        s.history,
        Some(serde_json::json!([[
            1,
            25165984,
            "no recovery target specified"
        ]]))
    );
    assert_eq!(s.switchover, Some(request));
    let sw = s.cluster.switchover.expect("switchover");
    assert_eq!(
        (sw.leader, sw.candidate, sw.scheduled_at_ms),
        (Some("a".into()), Some("b".into()), Some(1_893_456_000_000))
    );
    assert_eq!(s.members.get("a").map(|m| m.role.as_str()), Some("primary"));
    assert!(s.index > 0);
    a.clear_switchover(deadline()).await.expect("clear");
    assert_eq!(snapshot(&*a).await.cluster.switchover, None);
    // Patroni 4's status with slots: written whole, read back with checked slot names.
    let status = tenure::dcs::records::status_json(&tenure::ha::StatusKey {
        optime: Lsn(5000),
        slots: [
            ("dr_site".to_string(), Lsn(4900)),
            ("a".to_string(), Lsn(5000)),
        ]
        .into(),
        retain_slots: ["gone".to_string()].into(),
    });
    a.write_status_json(&status, deadline())
        .await
        .expect("status with slots");
    let c = snapshot(&*a).await.cluster;
    assert_eq!(c.optime, Some(Lsn(5000)));
    assert_eq!(c.slots.get("dr_site"), Some(&Lsn(4900)));
    assert_eq!(c.retain_slots, ["gone".to_string()].into());
}
