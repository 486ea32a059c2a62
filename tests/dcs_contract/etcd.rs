//! The contract suite against a real etcd (one server per case, frozen with SIGSTOP), plus what only etcd has:
//! renewals across several TTLs, every call bounded on a frozen server, and Patroni's etcd3 key layout.
use std::time::Duration;

use async_trait::async_trait;
use tenure::dcs::etcd::{lease_ttl_s, EtcdDcs, EtcdSettings, EtcdTls};
use tenure::dcs::{Dcs, DcsError, MemberRecord};
use tokio::time::Instant;

use crate::contract::{Backend, Fault};
use crate::support::etcd::{DropProxy, EtcdCluster, EtcdServer};

/// A private single-member etcd per case, reached through a proxy that can drop connections; with `tls`,
/// the etcd serves https only and wants client certificates (`etcd_tls.rs`).
pub struct Etcd {
    pub(crate) server: EtcdServer,
    pub(crate) proxy: DropProxy,
    /// The PKI of a TLS server, and the client material to present.
    pub(crate) tls: Option<(tempfile::TempDir, EtcdTls)>,
}

#[async_trait]
impl Backend for Etcd {
    async fn make_client(&self, scope: &str, name: &str, ttl_ms: u64) -> Box<dyn Dcs> {
        let Some((_, tls)) = &self.tls else {
            return Box::new(client_at(vec![self.proxy.url()], scope, name, ttl_ms));
        };
        let endpoint = self.proxy.url().replace("http://", "https://");
        let settings = EtcdSettings {
            tls: Some(tls.clone()),
            ..settings(vec![endpoint], scope, name, ttl_ms)
        };
        Box::new(EtcdDcs::new(settings).expect("valid settings"))
    }
    fn ttl_ms(&self) -> u64 {
        1_000
    }
    fn session_store(&self) -> tenure::ha::SessionStore {
        tenure::ha::SessionStore::Etcd
    }
    fn expiry_window_ms(&self, ttl_ms: u64) -> (u64, u64) {
        // Never before the (rounded-up) lease TTL; the lessor scans for expired leases every 500 ms and
        // revokes them through raft, so they go within about 600 ms after it.
        let ttl = u64::try_from(lease_ttl_s(ttl_ms)).unwrap_or(u64::MAX / 2) * 1000;
        (ttl, ttl + 600)
    }
    async fn set_fault(&self, fault: Fault) -> bool {
        match fault {
            Fault::Healthy => {
                self.server.sigcont();
                self.proxy.set_dropping(false);
            }
            Fault::Frozen => self.server.sigstop(),
            Fault::DropConnections => self.proxy.set_dropping(true),
            // Needs three members: `etcd_quorum_loss_is_unavailable_and_the_lease_survives` covers it.
            Fault::NoLeader => return false,
        }
        true
    }
    async fn put_raw(&self, scope: &str, key: &str, value: &[u8]) -> bool {
        let mut opts = etcd_client::ConnectOptions::new();
        if let Some((_, tls)) = &self.tls {
            let pem = |p: &Option<std::path::PathBuf>| {
                std::fs::read(p.as_ref().expect("a PEM path")).expect("a PEM file")
            };
            let identity = etcd_client::Identity::from_pem(pem(&tls.cert_file), pem(&tls.key_file));
            opts = opts.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(pem(&tls.ca_file)))
                    .identity(identity),
            );
        }
        let mut raw = etcd_client::Client::connect([self.server.client_url()], Some(opts))
            .await
            .expect("a raw client");
        raw.put(format!("/service/{scope}/{key}"), value.to_vec(), None)
            .await
            .expect("a raw put");
        true
    }
}

/// Always a server: a missing `/usr/bin/etcd` fails the case rather than skipping it.
pub async fn etcd() -> Option<Etcd> {
    let server = EtcdServer::start();
    let proxy = DropProxy::start(server.host_port());
    Some(Etcd {
        server,
        proxy,
        tls: None,
    })
}

contract_tests!(etcd);

fn client(server: &EtcdServer, scope: &str, name: &str, ttl_ms: u64) -> EtcdDcs {
    client_at(server.endpoints(), scope, name, ttl_ms)
}

fn client_at(endpoints: Vec<String>, scope: &str, name: &str, ttl_ms: u64) -> EtcdDcs {
    EtcdDcs::new(settings(endpoints, scope, name, ttl_ms)).expect("valid settings")
}

/// Plain settings for member `name` of `scope` (no credentials, no TLS).
pub(crate) fn settings(
    endpoints: Vec<String>,
    scope: &str,
    name: &str,
    ttl_ms: u64,
) -> EtcdSettings {
    EtcdSettings {
        endpoints,
        scope: scope.into(),
        namespace: "/service/".into(),
        name: name.into(),
        ttl_ms,
        user: None,
        password: None,
        tls: None,
    }
}

const SCOPE: &str = "batman";

fn agent(server: &EtcdServer, name: &str, ttl_ms: u64) -> EtcdDcs {
    client(server, SCOPE, name, ttl_ms)
}

pub(crate) fn dl(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

fn member(role: &str) -> MemberRecord {
    MemberRecord {
        conn_url: "postgres://127.0.0.1:5432/postgres".into(),
        api_url: "http://127.0.0.1:8008/patroni".into(),
        state: "running".into(),
        role: role.into(),
        version: "3.0.2".into(),
        ..MemberRecord::default()
    }
}

async fn leader_name(d: &EtcdDcs) -> Option<String> {
    let snap = d.get_cluster(true, dl(2000)).await.expect("get_cluster");
    snap.cluster.leader.map(|l| l.name.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_renewals_keep_the_key_past_ttl() {
    let etcd = EtcdServer::start();
    let (a, b) = (agent(&etcd, "a", 1500), agent(&etcd, "b", 1500));
    a.ensure_session(dl(2000)).await.unwrap();
    a.acquire_leader(dl(2000)).await.unwrap();
    b.ensure_session(dl(2000)).await.unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(4500) {
        a.renew_leader(dl(1000)).await.unwrap();
        assert!(matches!(
            b.acquire_leader(dl(1000)).await,
            Err(DcsError::Conflict(_))
        ));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert_eq!(leader_name(&b).await.as_deref(), Some("a"));
}

/// The loop's acquire and the member key's writer beside it, both without a lease, at the same moment
/// (after an outage ended): one lease is granted, the leader key is bound to it and the renewal finds it.
/// Before the grant was serialized each could grant its own, and the leader's next renewal was refused
/// ("the leader lock was lost"; `e2e_failsafe`, etcd frozen 35 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_concurrent_acquire_and_member_write_share_one_lease() {
    let etcd = EtcdServer::start();
    for round in 0..20 {
        let a = agent(&etcd, &format!("a{round}"), 10_000);
        let (acquired, session) =
            tokio::join!(a.acquire_leader(dl(2000)), a.ensure_session(dl(2000)));
        if acquired.is_err() {
            continue; // an earlier round's agent still holds the key
        }
        session.expect("a session");
        a.renew_leader(dl(2000))
            .await
            .unwrap_or_else(|e| panic!("round {round}: the renewal after acquiring: {e:?}"));
        a.release_leader(dl(2000)).await.expect("released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_frozen_server_yields_unavailable_by_the_deadline() {
    let etcd = EtcdServer::start();
    let a = agent(&etcd, "a", 10_000);
    a.ensure_session(dl(2000)).await.unwrap();
    a.acquire_leader(dl(2000)).await.unwrap();
    etcd.sigstop();
    let budget = Duration::from_millis(300);
    let slack = Duration::from_millis(150);
    macro_rules! frozen {
        ($what:expr, $call:expr) => {{
            let t = Instant::now();
            let r = $call;
            let took = t.elapsed();
            assert!(
                matches!(r, Err(DcsError::Unavailable(_))),
                "{}: expected Unavailable, got {:?}",
                $what,
                r
            );
            assert!(
                took < budget + slack,
                "{}: returned after {:?}",
                $what,
                took
            );
        }};
    }
    frozen!(
        "get_cluster",
        a.get_cluster(true, Instant::now() + budget).await
    );
    frozen!(
        "renew_session",
        a.renew_session(Instant::now() + budget).await
    );
    frozen!(
        "renew_leader",
        a.renew_leader(Instant::now() + budget).await
    );
    frozen!(
        "acquire_leader",
        a.acquire_leader(Instant::now() + budget).await
    );
    frozen!(
        "publish_member",
        a.publish_member(&member("primary"), Instant::now() + budget)
            .await
    );
    frozen!(
        "write_status",
        a.write_status(42, Instant::now() + budget).await
    );
    // A fresh agent connecting to the frozen server is bounded too.
    let fresh = agent(&etcd, "b", 10_000);
    frozen!(
        "ensure_session (new client)",
        fresh.ensure_session(Instant::now() + budget).await
    );
    etcd.sigcont();
    // The same client recovers once the server is back; the lease survived (10 s TTL).
    a.renew_leader(dl(3000)).await.expect("renew after SIGCONT");
    assert_eq!(leader_name(&a).await.as_deref(), Some("a"));
    // A timed-out write is an unknown outcome, not a failed one: a release sent to the frozen server may or
    // may not take effect when it runs again (it depends on whether etcd reads the request before the
    // client's cancellation). Either way the client keeps working.
    etcd.sigstop();
    frozen!(
        "release_leader",
        a.release_leader(Instant::now() + budget).await
    );
    etcd.sigcont();
    let r = a.renew_leader(dl(3000)).await;
    assert!(
        matches!(r, Ok(()) | Err(DcsError::Conflict(_))),
        "after an unknown release: {r:?}"
    );
    a.get_cluster(true, dl(3000))
        .await
        .expect("reads work again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keys_follow_patronis_etcd3_layout() {
    let etcd = EtcdServer::start();
    let a = agent(&etcd, "pg1", 1500);
    a.ensure_session(dl(2000)).await.unwrap();
    a.acquire_leader(dl(2000)).await.unwrap();
    a.publish_member(&member("primary"), dl(2000))
        .await
        .unwrap();
    a.write_status(0x3000060, dl(2000)).await.unwrap();
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    let get = |k: &'static str| {
        let mut c = raw.clone();
        async move { c.get(k, None).await.unwrap().kvs().first().cloned() }
    };
    let leader = get("/service/batman/leader")
        .await
        .expect("leader key with a leading slash");
    assert_eq!(leader.value_str().unwrap(), "pg1");
    assert_eq!(Some(leader.lease()), a.lease_id());
    let m = get("/service/batman/members/pg1")
        .await
        .expect("member key");
    assert_eq!(m.lease(), leader.lease(), "member bound to the same lease");
    let json: serde_json::Value = serde_json::from_slice(m.value()).unwrap();
    assert_eq!(json["role"], "primary");
    let status = get("/service/batman/status").await.expect("status key");
    assert_eq!(status.value_str().unwrap(), r#"{"optime":50331744}"#);
    // TTL rounded up to whole seconds and granted as such.
    assert_eq!(lease_ttl_s(1500), 2);
    assert_eq!(lease_ttl_s(1000), 1);
    assert_eq!(lease_ttl_s(30_000), 30);
    let ttl = raw
        .lease_time_to_live(a.lease_id().unwrap(), None)
        .await
        .unwrap();
    assert_eq!(ttl.granted_ttl(), 2);
    let snap = a.get_cluster(true, dl(2000)).await.unwrap();
    assert_eq!(snap.cluster.optime.map(|l| l.0), Some(0x3000060));
    assert_eq!(snap.cluster.members.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_quorum_loss_is_unavailable_and_the_lease_survives() {
    let cluster = EtcdCluster::start();
    let a = EtcdDcs::new(EtcdSettings {
        endpoints: cluster.endpoints(),
        scope: SCOPE.into(),
        namespace: "service".into(),
        name: "a".into(),
        ttl_ms: 15_000,
        user: None,
        password: None,
        tls: None,
    })
    .expect("settings");
    a.acquire_leader(dl(3000)).await.unwrap();
    a.publish_member(&member("primary"), dl(3000))
        .await
        .unwrap();
    // Two of three members frozen: the survivor has no quorum, whichever was the raft leader.
    cluster.members[1].sigstop();
    cluster.members[2].sigstop();
    let budget = Duration::from_millis(1500);
    for what in [
        "get_cluster",
        "renew_leader",
        "publish_member",
        "acquire_leader",
    ] {
        let t = Instant::now();
        let r = match what {
            "get_cluster" => a.get_cluster(true, t + budget).await.map(|_| ()),
            "renew_leader" => a.renew_leader(t + budget).await,
            "publish_member" => a.publish_member(&member("primary"), t + budget).await,
            _ => a.acquire_leader(t + budget).await,
        };
        let took = t.elapsed();
        assert!(
            matches!(r, Err(DcsError::Unavailable(_))),
            "{what} without quorum: {r:?}"
        );
        assert!(
            took < budget + Duration::from_millis(150),
            "{what} took {took:?}"
        );
    }
    cluster.members[1].sigcont();
    cluster.members[2].sigcont();
    // Once quorum is back the same client recovers, and the lease (15 s) outlived the outage. Right after
    // an election etcd may still answer "leader changed" (Unavailable) for a moment.
    let until = Instant::now() + Duration::from_secs(10);
    let leader = loop {
        let r = match a.renew_leader(dl(1000)).await {
            Ok(()) => a
                .get_cluster(true, dl(1000))
                .await
                .map(|s| s.cluster.leader),
            Err(e) => Err(e),
        };
        match r {
            Ok(leader) => break leader,
            Err(DcsError::Unavailable(_)) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("after quorum came back: {e:?}"),
        }
    };
    assert_eq!(leader.map(|l| l.name.0).as_deref(), Some("a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_with_auth_recovers_login_lease_and_key() {
    let mut etcd = EtcdServer::start();
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    raw.user_add("root", "s3cret", None).await.unwrap();
    raw.user_grant_role("root", "root").await.unwrap();
    raw.auth_enable().await.unwrap();
    let with_login = |name: &str| {
        EtcdDcs::new(EtcdSettings {
            endpoints: etcd.endpoints(),
            scope: SCOPE.into(),
            namespace: "service".into(),
            name: name.into(),
            ttl_ms: 15_000,
            user: Some("root".into()),
            password: Some("s3cret".into()),
            tls: None,
        })
        .expect("settings")
    };
    let a = with_login("a");
    a.acquire_leader(dl(3000))
        .await
        .expect("acquire with a login");
    a.publish_member(&member("primary"), dl(3000))
        .await
        .unwrap();
    // Without credentials etcd refuses: that says nothing about the cluster, so it is Unavailable.
    let anonymous = agent(&etcd, "x", 15_000);
    let r = anonymous.get_cluster(true, dl(3000)).await;
    assert!(
        matches!(r, Err(DcsError::Unavailable(_))),
        "no login: {r:?}"
    );
    // A crashed etcd: refused connections are Unavailable, and fast.
    etcd.kill();
    let t = Instant::now();
    let r = a.renew_leader(dl(2000)).await;
    assert!(
        matches!(r, Err(DcsError::Unavailable(_))),
        "etcd down: {r:?}"
    );
    assert!(t.elapsed() <= Duration::from_millis(2100));
    // Restarted, etcd kept the lease (re-armed at start) and the key.
    etcd.restart();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match a.renew_leader(dl(1000)).await {
            Ok(()) => break,
            Err(DcsError::Unavailable(_)) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("after restart: {e:?}"),
        }
    }
    // etcd invalidates a user's tokens when its password is set (even to the same value). The call that meets
    // the stale token is Unavailable; the next one logs in again by itself.
    let root = etcd_client::ConnectOptions::new().with_user("root", "s3cret");
    let mut admin = etcd_client::Client::connect(etcd.endpoints(), Some(root))
        .await
        .unwrap();
    admin.user_change_password("root", "s3cret").await.unwrap();
    let r = a.get_cluster(true, dl(2000)).await;
    assert!(
        matches!(&r, Err(DcsError::Unavailable(why)) if why.contains("invalid auth token")),
        "stale token: {r:?}"
    );
    a.renew_leader(dl(2000)).await.expect("logged in again");
    let snap = a
        .get_cluster(true, dl(3000))
        .await
        .expect("read after restart");
    assert_eq!(snap.cluster.leader.map(|l| l.name.0).as_deref(), Some("a"));
    assert!(snap.members.contains_key("a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_one_frozen_member_of_three_is_routed_around() {
    let cluster = EtcdCluster::start();
    let a = EtcdDcs::new(EtcdSettings {
        endpoints: cluster.endpoints(),
        scope: SCOPE.into(),
        namespace: "service".into(),
        name: "a".into(),
        ttl_ms: 30_000,
        user: None,
        password: None,
        tls: None,
    })
    .expect("settings");
    a.acquire_leader(dl(3000)).await.unwrap();
    // Spread requests over all three connections before one member hangs.
    for _ in 0..10 {
        a.get_cluster(true, dl(3000)).await.unwrap();
    }
    cluster.members[0].sigstop();
    // A cycle's calls with a 1 s budget each: count the failures until ten cycles in a row succeed. (With
    // etcd-client's own balancing over all endpoints this never settled: the frozen member's connection
    // still looks healthy, so every few calls went there and timed out.)
    let started = Instant::now();
    let (mut failures, mut streak) = (0, 0);
    while streak < 10 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never routed around the frozen member"
        );
        let ok =
            a.get_cluster(true, dl(1000)).await.is_ok() && a.renew_leader(dl(1000)).await.is_ok();
        if ok {
            streak += 1;
        } else {
            failures += 1;
            streak = 0;
        }
    }
    eprintln!(
        "frozen member: {failures} failed cycles, steady after {:?}",
        started.elapsed()
    );
    // The adapter moves to the next endpoint after a failure: one lost cycle for the frozen member, and up to
    // two more while the others elect a new raft leader if the frozen one was it; not one call in three forever.
    assert!(
        failures <= 3,
        "{failures} failed cycles before settling on a live member"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "settled only after {:?}",
        started.elapsed()
    );
    cluster.members[0].sigcont();
}

/// A leader key unchanged for longer than etcd's compaction retention: a watch from its (compacted-away)
/// revision still waits, and still wakes at once when the key changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_from_a_compacted_revision_still_wakes_on_the_change() {
    let etcd = EtcdServer::start();
    let (a, o) = (agent(&etcd, "a", 10_000), agent(&etcd, "o", 10_000));
    a.ensure_session(dl(2000)).await.unwrap();
    a.acquire_leader(dl(2000)).await.unwrap();
    let index = o
        .get_cluster(true, dl(2000))
        .await
        .unwrap()
        .cluster
        .leader
        .unwrap()
        .index;
    for optime in 1..=5 {
        a.write_status(optime, dl(2000)).await.unwrap();
    }
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    let now = raw
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    raw.compact(now, None).await.unwrap();
    let o = std::sync::Arc::new(o);
    let watcher = o.clone();
    let watch = tokio::spawn(async move {
        let r = watcher.watch_leader(index, 5_000).await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!watch.is_finished(), "the watch returned without a change");
    a.release_leader(dl(2000)).await.unwrap();
    let released = Instant::now();
    let (r, woke) = watch.await.unwrap();
    assert_ne!(r.unwrap(), index);
    let late_ms = woke.saturating_duration_since(released).as_millis();
    assert!(
        late_ms <= 100,
        "the watch woke {late_ms} ms after the release"
    );
}
