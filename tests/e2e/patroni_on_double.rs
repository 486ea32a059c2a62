//! Patroni itself (Debian's 3.0.2 with python3-consul, run as `postgres`) as a 3-node cluster on the Consul
//! test double: bootstrap, crash failover (the leader's Patroni and postmaster SIGKILLed) within Consul's
//! session window, rejoin of the old primary, switchover, pause and resume through patronictl. A client
//! nobody here wrote is the best evidence the double is Consul-shaped. `cargo test --test e2e_patroni_consul`.
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "patroni_harness.rs"]
#[allow(dead_code)]
mod patroni_harness;

use std::time::{Duration, Instant};

use patroni_harness::{PatroniCluster, LOOP_WAIT_S, SCOPE, TTL_S};
use support::cluster::serial;

#[test]
fn patroni_bootstraps_fails_over_rejoins_switches_over_and_pauses_on_the_consul_double() {
    let _serial = serial();
    let mut c = PatroniCluster::start();
    let p = c.wait_healthy(Duration::from_secs(90));
    let leader = c.nodes[p].name.clone();
    assert_eq!(c.leader_key().as_deref(), Some(leader.as_str()));
    eprintln!("bootstrapped: {leader} leads");

    // Crash failover: the leader's host dies. Its session stops being renewed; the double (as Consul)
    // invalidates it somewhere in [TTL, 2·TTL], which deletes the leader key (behavior delete), and a
    // replica takes over.
    let crashed_at = Instant::now();
    c.crash(p);
    let limit = Duration::from_secs(2 * TTL_S + 4 * LOOP_WAIT_S + 20);
    let np = c.wait("a new primary after the crash", limit, || {
        let p2 = c.primaries();
        (p2.len() == 1 && p2[0] != p).then(|| p2[0])
    });
    let failover_s = crashed_at.elapsed().as_secs_f64();
    let new_leader = c.nodes[np].name.clone();
    assert_eq!(c.leader_key().as_deref(), Some(new_leader.as_str()));
    eprintln!(
        "crash failover: {new_leader} leads {failover_s:.1} s after the crash \
         (session TTL {} s; Consul's window for the key to go is [{}, {}] s)",
        TTL_S / 2,
        TTL_S / 2,
        TTL_S
    );

    // Rejoin: the old primary's Patroni comes back, rewinds if needed and follows the new leader.
    c.start_patroni(p);
    let again = c.wait_healthy(Duration::from_secs(90));
    assert_eq!(
        again, np,
        "the restarted old primary did not take its key back"
    );
    assert!(
        c.nodes[np].streaming_from_here().contains(&leader),
        "the old primary rejoined as a replica streaming from {new_leader}"
    );

    // Switchover back to the old primary, through patronictl and the Consul double.
    let out = c.patronictl(&[
        "switchover",
        SCOPE,
        "--leader",
        &new_leader,
        "--candidate",
        &leader,
        "--force",
    ]);
    eprintln!("{out}");
    let sp = c.wait_healthy(Duration::from_secs(60));
    assert_eq!(sp, p, "switched over to {leader}");
    assert_eq!(c.leader_key().as_deref(), Some(leader.as_str()));

    // Pause and resume, each waiting until every member shows it in its member key.
    let out = c.patronictl(&["pause", SCOPE, "--wait"]);
    assert!(
        out.contains("Success: cluster management is paused"),
        "{out}"
    );
    for n in &c.nodes {
        let (_, v) = n.get("/patroni").expect("patroni answers");
        assert_eq!(v["pause"], true, "{}: {v}", n.name);
    }
    let out = c.patronictl(&["resume", SCOPE, "--wait"]);
    assert!(
        out.contains("Success: cluster management is resumed"),
        "{out}"
    );
    for n in &c.nodes {
        let (_, v) = n.get("/patroni").expect("patroni answers");
        assert!(v.get("pause").is_none(), "{}: {v}", n.name);
    }
    assert_eq!(c.primaries(), vec![p]);
    c.failed = false;
}
