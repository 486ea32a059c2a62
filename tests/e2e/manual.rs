//! Manual actions in pause (issue 6: restart, reinit, switchover to a named candidate, and their refusals) and
//! scheduled restarts, end to end on real agents, PostgreSQL 15 and etcd.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;
use crate::support::cluster::{Cluster, StoreKind};

// ---------------------------------------------------------------------------------------------------------
// Manual actions in pause (issue 6): restart, reinit, switchover to a named candidate; and the refusals

/// `pg_postmaster_start_time()` on node `i`, as text.
fn postmaster_start(c: &Cluster, i: usize) -> String {
    c.sql_one(i, "SELECT pg_postmaster_start_time()::text")
        .unwrap_or_else(|e| panic!("{}: {e}", c.nodes[i].name))
}

/// `tenure list --format json` run with node `i`'s config: how far `member`'s received WAL lags, in MB
/// (patronictl 4.1's `Receive Lag`), as the store's member records show it (read from the store itself, as
/// the REST API's switchover check reads it, not from a node's last snapshot), when a number.
fn store_lag_mb(c: &Cluster, i: usize, member: &str) -> Option<u64> {
    let (code, out, _) = tenure_cli(c, i, &["list", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).ok().filter(|_| code == 0)?;
    v.as_array()?.iter().find(|m| m["Member"] == member)?["Receive Lag"].as_u64()
}

/// In pause: `tenure restart <primary>` restarts PostgreSQL (new postmaster, new start time) and it stays
/// the primary with no promotion anywhere; `tenure restart <replica>` brings it back streaming; `tenure reinit
/// <replica>` re-clones it (a file planted in its data directory is gone) and it streams again. Refusals:
/// reinit of the leader (503, Patroni's message), a switchover without a candidate in pause (400, Patroni's
/// message), a switchover to a candidate lagging beyond maximum_lag_on_failover (412, nothing written, no
/// promotion). Then a switchover in pause to a named candidate works, and `POST /reload` re-reads the
/// config file. The checker samples throughout.
pub fn manual_actions_in_pause() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let p = c.wait_healthy(CONVERGE_BUDGET);
    create_table(&c, p);
    let mut replicas = others(p);
    let (r1, r2) = (replicas.next().unwrap(), replicas.next().unwrap());
    let (pn, r1n, r2n) = (
        c.nodes[p].name.clone(),
        c.nodes[r1].name.clone(),
        c.nodes[r2].name.clone(),
    );
    let (code, out, err) = tenure_cli(&c, 0, &["pause", "--wait"]);
    assert_eq!(code, 0, "tenure pause --wait: {out}\n{err}");
    let paused_at = c.epoch.elapsed();
    let tl = c.timeline(p);

    // Restart of the primary: without --force and without a terminal nothing happens.
    let pid = c.postmaster_pid(p).expect("primary postmaster");
    let started = postmaster_start(&c, p);
    let (code, _, err) = tenure_cli(&c, 0, &["restart", &pn]);
    assert_eq!(code, 64, "restart without --force: {err}");
    assert_eq!(
        c.postmaster_pid(p),
        Some(pid),
        "nothing restarted without --force"
    );
    let (code, out, err) = tenure_cli(&c, r1, &["restart", &pn, "--force"]);
    log(
        &c,
        &format!("tenure restart {pn}: {code} {} {}", out.trim(), err.trim()),
    );
    assert_eq!(code, 0, "tenure restart {pn}: {out}\n{err}");
    assert!(out.contains("restarted successfully"), "{out}");
    let new_pid = c
        .postmaster_pid(p)
        .expect("the primary runs after the restart");
    assert_ne!(new_pid, pid, "a new postmaster");
    assert_ne!(
        postmaster_start(&c, p),
        started,
        "pg_postmaster_start_time moved"
    );
    assert_eq!(c.primary(), Some(p), "still the primary after its restart");
    assert_eq!(c.timeline(p), tl, "no new timeline: nothing was promoted");
    c.sql(p, "INSERT INTO e2e_writes VALUES (1)")
        .expect("the restarted primary takes writes");
    assert_eq!(c.patroni(p)["pause"], true, "still paused");

    // Restart of a replica: back, streaming from the primary.
    let pid = c.postmaster_pid(r2).expect("replica postmaster");
    let (code, out, err) = tenure_cli(&c, p, &["restart", &r2n, "--force"]);
    log(&c, &format!("tenure restart {r2n}: {code} {}", out.trim()));
    assert_eq!(code, 0, "tenure restart {r2n}: {out}\n{err}");
    assert_ne!(c.postmaster_pid(r2), Some(pid), "a new postmaster on {r2n}");
    wait_rejoined(&mut c, r2, p);

    // Reinit of a replica: its data directory is replaced by a fresh clone, and it streams again.
    let marker = c.nodes[r1].data_dir().join("tenure_e2e_marker");
    std::fs::write(&marker, "planted before the reinit").expect("plant the marker");
    let (code, out, err) = tenure_cli(&c, p, &["reinit", &r1n, "--force"]);
    log(&c, &format!("tenure reinit {r1n}: {code} {}", out.trim()));
    assert_eq!(code, 0, "tenure reinit {r1n}: {out}\n{err}");
    assert!(out.contains("reinitialize started"), "{out}");
    c.sql(p, "INSERT INTO e2e_writes VALUES (2)")
        .expect("the primary takes writes during the reinit");
    let took = wait_rejoined(&mut c, r1, p);
    assert!(!marker.exists(), "the re-clone replaced the data directory");
    c.wait_until(
        "row 2 on the re-cloned replica",
        Duration::from_secs(20),
        |c| {
            (c.sql_one(r1, "SELECT count(*) FROM e2e_writes WHERE id = 2")
                .ok()?
                == "1")
                .then_some(())
        },
    );
    log(
        &c,
        &format!(
            "{r1n} re-cloned and streaming {:.1} s after the reinit was answered",
            took.as_secs_f64()
        ),
    );

    // Refusals. Reinit of the leader: 503 with Patroni's message (CLI exit 1).
    let (status, resp) = api(&c, p, "POST", "/reinitialize", "{}");
    log(
        &c,
        &format!("POST /reinitialize on the leader: {status} {}", resp.trim()),
    );
    assert_eq!(
        (status, resp.trim()),
        (503, "I am the leader, can not reinitialize")
    );
    let (code, _, err) = tenure_cli(&c, r1, &["reinit", &pn, "--force"]);
    assert_eq!(code, 1, "tenure reinit of the leader: {err}");
    assert!(
        err.contains("I am the leader, can not reinitialize"),
        "{err}"
    );

    // A switchover without a candidate in pause: 400, Patroni's message; nothing happens.
    let body = format!(r#"{{"leader":"{pn}"}}"#);
    let (status, resp) = api(&c, p, "POST", "/switchover", &body);
    log(
        &c,
        &format!(
            "switchover without candidate in pause: {status} {}",
            resp.trim()
        ),
    );
    assert_eq!(
        (status, resp.trim()),
        (
            400,
            "Switchover is possible only to a specific candidate in a paused state"
        )
    );

    // A candidate lagging beyond maximum_lag_on_failover (1 MiB): its walsender ended, its replication
    // role barred from reconnecting, a few MB written.
    c.sql(p, "ALTER ROLE replicator NOLOGIN")
        .expect("bar replication logins");
    c.sql(
        p,
        &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = '{r2n}'"),
    )
    .expect("end the walsender");
    c.sql(
        p,
        "INSERT INTO e2e_writes SELECT g FROM generate_series(1000, 150000) g",
    )
    .expect("write a few MB");
    // Wait until the lag is in the members' published positions in the store, which is what the check
    // compares (a node's /cluster answers from its last snapshot, and the SQL-measured lag reaches the store
    // only when the agents next publish).
    let lag = c.wait_until(
        &format!("{r2n}'s published position to lag over 1 MiB"),
        Duration::from_secs(30),
        |c| store_lag_mb(c, p, &r2n).filter(|mb| *mb >= 3),
    );
    let asked = c.epoch.elapsed();
    let body = format!(r#"{{"leader":"{pn}","candidate":"{r2n}"}}"#);
    let (status, resp) = api(&c, p, "POST", "/switchover", &body);
    log(
        &c,
        &format!(
            "switchover to {r2n} lagging {lag} MB: {status} {}",
            resp.trim()
        ),
    );
    assert_eq!(status, 412, "lagging candidate: {resp}");
    assert!(resp.contains("maximum_lag_on_failover"), "{resp}");
    hold(&mut c, Duration::from_secs(3));
    assert_eq!(
        c.first_writable(r2, asked),
        None,
        "the lagging candidate was not promoted"
    );
    assert_eq!(c.primary(), Some(p));
    c.sql(p, "ALTER ROLE replicator LOGIN")
        .expect("allow replication again");
    wait_rejoined(&mut c, r2, p);

    // A switchover in pause to a named candidate: it becomes the primary.
    let asked = c.epoch.elapsed();
    let body = format!(r#"{{"leader":"{pn}","candidate":"{r1n}"}}"#);
    let (status, resp) = api(&c, p, "POST", "/switchover", &body);
    log(
        &c,
        &format!("switchover in pause to {r1n}: {status} {}", resp.trim()),
    );
    assert!(
        status == 200 || status == 202,
        "switchover in pause refused: {status} {resp}"
    );
    c.wait_until(
        &format!("{r1n} to be primary"),
        Duration::from_secs(40),
        |c| (c.primary() == Some(r1)).then_some(()),
    );
    assert_eq!(
        c.first_writable(r2, paused_at),
        None,
        "{r2n} was never promoted"
    );
    // The checker samples every 100 ms: give it a moment to see what `primary()` just saw.
    let promoted_at = c.wait_until(
        "the checker to see the new primary",
        Duration::from_secs(5),
        |c| c.first_writable(r1, asked),
    );
    log(
        &c,
        &format!(
            "{r1n} primary at {:.1} s in pause",
            promoted_at.as_secs_f64()
        ),
    );
    assert_eq!(
        c.patroni(r1)["pause"],
        true,
        "still paused after the switchover"
    );
    // The operator asked for the old primary's stop: it comes back as a replica of the new one, in pause.
    let back = wait_rejoined(&mut c, p, r1);
    log(
        &c,
        &format!(
            "{pn} streams from {r1n} {:.1} s after it was seen primary, still in pause",
            back.as_secs_f64()
        ),
    );

    // POST /reload: 202, and the agent re-reads its file as on SIGHUP.
    let (status, resp) = api(&c, r1, "POST", "/reload", "");
    assert_eq!((status, resp.trim()), (202, "reload scheduled"));
    let agent_log = c.nodes[r1].agent_log();
    c.wait_until(
        "the agent to reload on POST /reload",
        Duration::from_secs(10),
        |_| {
            let text = std::fs::read_to_string(&agent_log).ok()?;
            (text.contains("POST /reload") && text.contains("SIGHUP: config reloaded"))
                .then_some(())
        },
    );

    let (code, out, err) = tenure_cli(&c, r1, &["resume", "--wait"]);
    assert_eq!(code, 0, "tenure resume --wait: {out}\n{err}");
    c.wait_healthy(Duration::from_secs(90));
    c.assert_never_two_primaries();
}

// ---------------------------------------------------------------------------------------------------------
// Scheduled restarts

/// `tenure restart <replica> --scheduled <5 s ahead>`: 202 "Restart scheduled", published as
/// `scheduled_restart` in its `/patroni`; a second schedule is refused (409); the postmaster is the same one
/// until the time, a new one after it, and the replica streams again with the schedule gone. Then a restart
/// scheduled an hour ahead is flushed (`tenure flush NODE restart`: 200), and a second flush answers 404.
pub fn scheduled_restart_of_a_replica() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let p = c.wait_healthy(CONVERGE_BUDGET);
    let r = others(p).next().expect("a replica");
    let rn = c.nodes[r].name.clone();
    let pid = c.postmaster_pid(r).expect("replica postmaster");
    let at = SystemTime::now() + Duration::from_secs(5);
    let at_text = rfc3339(at);
    // rfc3339 drops the fraction: the schedule is up to a second before `at`.
    let due = UNIX_EPOCH
        + Duration::from_secs(at.duration_since(UNIX_EPOCH).expect("after 1970").as_secs());
    let (code, out, err) = tenure_cli(&c, p, &["restart", &rn, "--scheduled", &at_text, "--force"]);
    log(
        &c,
        &format!(
            "tenure restart {rn} --scheduled {at_text}: {code} {}",
            out.trim()
        ),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Restart scheduled"), "{out}");
    let published = c.patroni(r);
    assert_eq!(
        published["scheduled_restart"]["schedule"], at_text,
        "{published}"
    );
    let body = format!(r#"{{"schedule":"{at_text}"}}"#);
    let (status, text) = api(&c, r, "POST", "/restart", &body);
    assert_eq!(
        (status, text.trim()),
        (409, "Another restart is already scheduled")
    );

    // Not before its time.
    while SystemTime::now() + Duration::from_millis(300) < due {
        assert_eq!(c.postmaster_pid(r), Some(pid), "restarted before {at_text}");
        c.check_agents();
        std::thread::sleep(Duration::from_millis(100));
    }
    // After it: a new postmaster within a loop or so (plus slack for a loaded machine).
    let new_pid = c.wait_until(
        "the scheduled restart to run",
        Duration::from_secs(20),
        |c| c.postmaster_pid(r).filter(|p| *p != pid),
    );
    let late = SystemTime::now().duration_since(due).unwrap_or_default();
    log(
        &c,
        &format!(
            "{rn}: new postmaster {new_pid} (was {pid}), seen {:.1} s after {at_text}",
            late.as_secs_f64()
        ),
    );
    wait_rejoined(&mut c, r, p);
    c.wait_until(
        "the schedule to disappear from /patroni",
        Duration::from_secs(10),
        |c| {
            c.patroni(r)
                .get("scheduled_restart")
                .is_none()
                .then_some(())
        },
    );

    // Flushed before its time; nothing left to flush then.
    let later = rfc3339(SystemTime::now() + Duration::from_secs(3_600));
    let (code, out, err) = tenure_cli(&c, p, &["restart", &rn, "--scheduled", &later, "--force"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = tenure_cli(&c, p, &["flush", &rn, "restart"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("scheduled restart deleted"), "{out}");
    let (status, text) = api(&c, r, "DELETE", "/restart", "");
    assert_eq!((status, text.trim()), (404, "no restarts are scheduled"));
    assert_eq!(
        c.postmaster_pid(r),
        Some(new_pid),
        "the flushed one never ran"
    );
    c.assert_never_two_primaries();
}
