//! A standby cluster end to end (Patroni's `standby_cluster`, a disaster-recovery second site), from the
//! user's side: two sites on one machine, each with its own etcd, scope and two real agents and PostgreSQL
//! 15 servers. Site A is an ordinary cluster. Site B is started once A has a primary, every node's config
//! holding `bootstrap.dcs.standby_cluster: {host: 127.0.0.1, port: <A's primary's port>,
//! create_replica_methods: [basebackup]}`: B's key holder clones from A and streams from it as the
//! *standby leader*, B's other member cascades from B's standby leader, and no node of B is ever writable.
//!
//! Each site's checker samples `pg_is_in_recovery()` and `GET /primary` on each of its nodes every 100 ms for
//! the test's life: site A never shows two writable nodes ([`Cluster::assert_never_two_primaries`]) and site
//! B never shows one ([`Cluster::assert_never_writable`]), so the two sites together never had two writable
//! nodes either.
//!
//! Run with `cargo test --test e2e_standby -- --nocapture` (as root or as `postgres`; the cases run one at a
//! time, each under one `serial()` hold for both sites).
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;
#[path = "two_sites.rs"]
mod two_sites;

use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use support::cluster::{serial, wait_for, Cluster, Layout, StoreKind};

use common::{create_table, tenure_cli, CONVERGE_BUDGET};
use two_sites::{
    role, sender_port, standby_cluster_section, REPLAY_BUDGET, REPOINT_BUDGET, SITE_NODES,
    STANDBY_SITE_BUDGET,
};

/// The two sites of one test. Fields drop in order: site B first, then A, the lock last.
struct Sites {
    /// The standby cluster.
    b: Cluster,
    /// The primary site.
    a: Cluster,
    /// Site A's primary (its index in `a.nodes`).
    a_primary: usize,
    /// Site B's standby leader and its other member, as found when B came up.
    b_leader: usize,
    b_other: usize,
    _serial: MutexGuard<'static, ()>,
}

fn log(site: &Cluster, msg: &str) {
    eprintln!(
        "[e2e standby {} {:>6.1}s] {msg}",
        site.nodes[0].scope,
        site.now_s()
    );
}

/// `GET path` on node `i`'s REST API: its status, asked again for up to 5 s while nothing answers (a
/// loaded box), 0 if nothing ever did.
fn status(c: &Cluster, i: usize, path: &str) -> u16 {
    wait_for(
        || Some(c.rest_get(i, path).0).filter(|s| *s != 0),
        Duration::from_secs(5),
    )
    .unwrap_or(0)
}

/// Wait until every node of `site` has the rows with ids `1..=n` of `e2e_writes` (written on site A).
fn wait_rows(site: &mut Cluster, nodes: &[usize], n: i64) {
    for &i in nodes {
        let name = site.nodes[i].name.clone();
        site.wait_until(
            &format!("{name} to replay the {n} rows written on site A"),
            REPLAY_BUDGET,
            |c| {
                c.sql_one(
                    i,
                    &format!("SELECT count(*) FROM e2e_writes WHERE id <= {n}"),
                )
                .ok()
                .filter(|v| v.parse::<i64>() == Ok(n))
            },
        );
    }
}

/// Start site A (two nodes, wait for its primary), then site B as A's standby cluster, and wait until B's
/// standby leader streams from A's primary and B's other member from B's standby leader.
fn start_sites() -> Sites {
    let serial = serial();
    let t0 = Instant::now();
    let mut a = Cluster::start_site(
        StoreKind::Etcd,
        &Layout {
            scope: "site-a".into(),
            name_prefix: "a".into(),
            nodes: SITE_NODES,
        },
        |_| {},
    );
    let a_primary = a.wait_healthy(Duration::from_secs(90));
    let a_port = a.nodes[a_primary].pg_port;
    log(
        &a,
        &format!(
            "site A up: primary {} on port {a_port}",
            a.nodes[a_primary].name
        ),
    );
    let mut b = Cluster::start_site(
        StoreKind::Etcd,
        &Layout {
            scope: "site-b".into(),
            name_prefix: "b".into(),
            nodes: SITE_NODES,
        },
        |n| n.dcs_extra = standby_cluster_section(a_port),
    );
    let (b_leader, b_other) = b.wait_until(
        "a standby leader in site B streaming from site A's primary, the other member from it",
        STANDBY_SITE_BUDGET,
        |c| {
            let s = (0..c.nodes.len()).find(|&i| role(c, i) == "standby_leader")?;
            let o = (0..c.nodes.len()).find(|&i| i != s)?;
            (sender_port(c, s)? == a_port && sender_port(c, o)? == c.nodes[s].pg_port)
                .then_some((s, o))
        },
    );
    log(
        &b,
        &format!(
            "site B up {:.1} s after site A was started: standby leader {}, {} cascading from it",
            t0.elapsed().as_secs_f64(),
            b.nodes[b_leader].name,
            b.nodes[b_other].name
        ),
    );
    Sites {
        b,
        a,
        a_primary,
        b_leader,
        b_other,
        _serial: serial,
    }
}

impl Sites {
    /// Site A's checker: never two writable nodes; site B's: never a writable one.
    fn assert_checkers(&mut self) {
        self.b.assert_never_writable();
        self.a.assert_never_two_primaries();
    }
}

#[test]
fn a_standby_site_follows_the_primary_site_and_its_replicas_cascade() {
    let mut s = start_sites();
    let (p, sl, so) = (s.a_primary, s.b_leader, s.b_other);

    // The standby leader's REST answers, and the other member's.
    let b = &s.b;
    let (leader, other) = (b.nodes[sl].name.clone(), b.nodes[so].name.clone());
    assert_eq!(role(b, sl), "standby_leader", "{leader}: GET /patroni role");
    for path in ["/standby-leader", "/standby_leader", "/leader"] {
        assert_eq!(status(b, sl, path), 200, "{leader}: GET {path}");
    }
    assert_eq!(status(b, sl, "/primary"), 503, "{leader}: GET /primary");
    assert_eq!(role(b, so), "replica", "{other}: GET /patroni role");
    for path in ["/standby-leader", "/standby_leader", "/primary", "/leader"] {
        assert_eq!(status(b, so, path), 503, "{other}: GET {path}");
    }
    // The member's status is as fresh as its last cycle: it may not say streaming yet.
    let replica = wait_for(
        || (status(b, so, "/replica") == 200).then_some(()),
        Duration::from_secs(10),
    );
    assert!(
        replica.is_some(),
        "{other}: GET /replica: {:?}",
        b.rest_get(so, "/patroni")
    );
    // The store's member key (what `patronictl list` shows as "Standby Leader").
    let listed = wait_for(
        || {
            let (code, out, _) = tenure_cli(b, sl, &["list"]);
            (code == 0
                && out
                    .lines()
                    .any(|l| l.contains(&format!(" {leader} ")) && l.contains("Standby Leader")))
            .then_some(())
        },
        Duration::from_secs(10),
    );
    assert!(
        listed.is_some(),
        "`tenure list` on site B does not show {leader} as Standby Leader:\n{}",
        tenure_cli(b, sl, &["list"]).1
    );

    // Rows written on site A reach every node of site B.
    create_table(&s.a, p);
    s.a.sql(p, "INSERT INTO e2e_writes SELECT generate_series(1, 100)")
        .expect("insert on site A's primary");
    log(&s.a, "100 rows written on site A's primary");
    let t = Instant::now();
    wait_rows(&mut s.b, &[sl, so], 100);
    log(
        &s.b,
        &format!(
            "every node of site B has them after {:.1} s",
            t.elapsed().as_secs_f64()
        ),
    );

    // Who streams from whom: site A's primary serves B's standby leader and not B's other member, which
    // streams from B's standby leader.
    let a_port = s.a.nodes[p].pg_port;
    let streams_to_a = s.a.wait_until(
        &format!("{leader} in pg_stat_replication of site A's primary"),
        REPLAY_BUDGET,
        |c| {
            let names: Vec<String> = c
                .sql(p, "SELECT application_name FROM pg_stat_replication")
                .ok()?
                .into_iter()
                .filter_map(|r| r.into_iter().next())
                .collect();
            names.contains(&leader).then_some(names)
        },
    );
    assert!(
        !streams_to_a.contains(&other),
        "{other} streams from site A's primary: pg_stat_replication lists {streams_to_a:?}"
    );
    assert_eq!(
        sender_port(&s.b, sl),
        Some(a_port),
        "{leader} streams from site A's primary"
    );
    assert_eq!(
        sender_port(&s.b, so),
        Some(s.b.nodes[sl].pg_port),
        "{other} streams from {leader}, site B's standby leader"
    );
    s.a.check_agents();
    s.b.check_agents();
    s.assert_checkers();
}

#[test]
fn a_crashed_standby_leader_is_replaced_by_another_standby_leader() {
    let mut s = start_sites();
    let (p, sl, so) = (s.a_primary, s.b_leader, s.b_other);
    let a_port = s.a.nodes[p].pg_port;
    let (leader, other) = (s.b.nodes[sl].name.clone(), s.b.nodes[so].name.clone());
    create_table(&s.a, p);
    s.a.sql(p, "INSERT INTO e2e_writes VALUES (1)")
        .expect("insert on site A's primary");
    wait_rows(&mut s.b, &[sl, so], 1);

    log(&s.b, &format!("crashing {leader}, site B's standby leader"));
    let crash = Instant::now();
    s.b.crash_host(sl);
    s.b.wait_until(
        &format!("{other} to become site B's standby leader (ttl + margin)"),
        CONVERGE_BUDGET,
        |c| {
            (role(c, so) == "standby_leader" && c.rest_get(so, "/standby-leader").0 == 200)
                .then_some(())
        },
    );
    log(
        &s.b,
        &format!(
            "{other} is the standby leader {:.1} s after the crash",
            crash.elapsed().as_secs_f64()
        ),
    );
    assert_eq!(
        s.b.sql_one(so, "SELECT pg_is_in_recovery()").as_deref(),
        Ok("t"),
        "{other}, the new standby leader, is in recovery"
    );
    assert_eq!(status(&s.b, so, "/primary"), 503, "{other}: GET /primary");
    s.b.wait_until(
        &format!("{other} to stream from site A's primary"),
        REPOINT_BUDGET,
        |c| (sender_port(c, so) == Some(a_port)).then_some(()),
    );
    log(
        &s.b,
        &format!(
            "{other} streams from site A's primary {:.1} s after the crash",
            crash.elapsed().as_secs_f64()
        ),
    );

    // It follows site A: a new row written there arrives.
    s.a.sql(p, "INSERT INTO e2e_writes VALUES (2)")
        .expect("insert on site A's primary");
    wait_rows(&mut s.b, &[so], 2);
    assert_eq!(
        s.a.primary(),
        Some(p),
        "site A's primary is unchanged by site B's crash"
    );
    s.a.check_agents();
    s.b.check_agents();
    s.assert_checkers();
}

/// The primary site is lost whole; the operator promotes the standby site by removing `standby_cluster` from
/// its `config` (what `promote-cluster --force` will do): its standby leader becomes a primary, its other
/// member follows it, and every row site A had sent is there.
#[test]
fn losing_the_primary_site_then_removing_standby_cluster_promotes_the_standby_site() {
    let mut s = start_sites();
    let (p, sl, so) = (s.a_primary, s.b_leader, s.b_other);
    let leader = s.b.nodes[sl].name.clone();
    create_table(&s.a, p);
    s.a.sql(p, "INSERT INTO e2e_writes SELECT generate_series(1, 50)")
        .expect("insert on site A's primary");
    wait_rows(&mut s.b, &[sl, so], 50);
    for i in 0..s.a.nodes.len() {
        s.a.crash_host(i);
    }
    log(&s.a, "site A crashed whole");
    // Until the operator acts, site B stays read-only, whatever it sees.
    std::thread::sleep(Duration::from_secs(3));
    s.b.assert_never_writable();
    let (code, out, err) = tenure_cli(
        &s.b,
        sl,
        &["edit-config", "--set", "standby_cluster=null", "--force"],
    );
    assert_eq!(code, 0, "edit-config: {out} {err}");
    let promoted = Instant::now();
    let primary = s.b.wait_until(
        "site B's standby leader to become its primary",
        CONVERGE_BUDGET,
        |c| c.primary(),
    );
    assert_eq!(primary, sl, "{leader}, the standby leader, is promoted");
    log(
        &s.b,
        &format!(
            "{leader} is site B's primary {:.1} s after standby_cluster went",
            promoted.elapsed().as_secs_f64()
        ),
    );
    let n: i64 =
        s.b.sql_one(sl, "SELECT count(*) FROM e2e_writes")
            .expect("count")
            .parse()
            .expect("a number");
    assert_eq!(n, 50, "every row site A had sent");
    s.b.sql(sl, "INSERT INTO e2e_writes VALUES (51)")
        .expect("site B takes writes");
    wait_rows(&mut s.b, &[so], 51);
}

/// Cascading inside one site (Patroni's `replicatefrom` tag). The three members name each other in a ring
/// (n1 -> n2 -> n3 -> n1), so whichever is the primary, one replica names the other replica and streams
/// from it, and the other names the primary. When the replica it streams from crashes, it streams from the
/// primary.
#[test]
fn a_replica_tagged_replicatefrom_streams_from_that_member_and_falls_back_to_the_leader() {
    let names = ["n1", "n2", "n3"];
    // Not `start_full`: its wait for every replica streaming from the primary never ends when a tagged
    // replica cascades from the start (seen under load: the middle replica ran before the tagged one).
    let _serial = serial();
    let mut c = Cluster::start_site(StoreKind::Etcd, &Layout::default(), |spec| {
        let i = names.iter().position(|n| *n == spec.name).expect("n1..n3");
        spec.extra
            .push_str(&format!("tags:\n  replicatefrom: {}\n", names[(i + 1) % 3]));
    });
    let p = c.wait_until("a primary", STANDBY_SITE_BUDGET, |c| c.primary());
    let index = |name: &str| c.nodes.iter().position(|n| n.name == name).expect("a node");
    // The replica whose tag names the other replica, and that other replica.
    let (cascaded, middle) = (0..3)
        .filter(|&i| i != p)
        .map(|i| (i, index(names[(i + 1) % 3])))
        .find(|&(_, m)| m != p)
        .expect("one replica names the other");
    let port = |i: usize| c.nodes[i].pg_port;
    let (p_port, m_port) = (port(p), port(middle));
    c.wait_until(
        "the tagged replica to stream from the other replica",
        REPOINT_BUDGET,
        |c| {
            (sender_port(c, cascaded) == Some(m_port) && sender_port(c, middle) == Some(p_port))
                .then_some(())
        },
    );
    create_table(&c, p);
    c.sql(p, "INSERT INTO e2e_writes VALUES (1)")
        .expect("insert on the primary");
    wait_rows(&mut c, &[cascaded], 1);

    c.crash_host(middle);
    c.wait_until(
        "the tagged replica to stream from the primary once its upstream is gone",
        REPOINT_BUDGET,
        |c| (sender_port(c, cascaded) == Some(p_port)).then_some(()),
    );
    c.sql(p, "INSERT INTO e2e_writes VALUES (2)")
        .expect("insert on the primary");
    wait_rows(&mut c, &[cascaded], 2);
    c.assert_never_two_primaries();
}
