//! Dynamic configuration end to end (issue 16 §1): `tenure edit-config` changes reach every real agent and
//! PostgreSQL 15 and show in behaviour (a reloadable parameter, a restart-only one pending a restart, a new
//! ttl in the next leader lease, session and fence and in `/liveness`, `primary_start_timeout: 0`), and a change the agents would refuse is
//! refused at the door (exit 1, the rule named, nothing stored). Etcd, and the Consul test double.
//! Every scenario ends with the checker's verdict: never two writable primaries.
//!
//! Run with `cargo test --test e2e_dyncfg -- --nocapture` (as root or as `postgres`).
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use support::cluster::{Cluster, StoreKind, NODES};

use common::*;

fn edit(c: &Cluster, i: usize, sets: &[&str]) -> (i32, String) {
    let mut args = vec!["edit-config"];
    for s in sets {
        args.push("--set");
        args.push(s);
    }
    let (code, out, err) = tenure_cli(c, i, &args);
    log(
        c,
        &format!(
            "edit-config {sets:?}: exit {code}: {} {}",
            out.trim(),
            err.trim()
        ),
    );
    (code, format!("{out}{err}"))
}

fn show_config(c: &Cluster, i: usize) -> String {
    tenure_cli(c, i, &["show-config"]).1
}

/// A reloadable parameter reaches every node; a refused change exits 1 naming the rule and stores nothing;
/// a restart-only parameter shows as pending a restart (`/patroni`, `tenure list`) until restarted.
fn parameters_and_refusals(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let p = c.primary().expect("a primary");
    assert_ne!(c.sql_one(p, "SHOW work_mem").unwrap(), "5MB");
    let (code, _) = edit(&c, p, &["postgresql.parameters.work_mem=5MB"]);
    assert_eq!(code, 0);
    c.wait_until("work_mem 5MB on every node", Duration::from_secs(30), |c| {
        (0..NODES)
            .all(|i| c.sql_one(i, "SHOW work_mem").ok().as_deref() == Some("5MB"))
            .then_some(())
    });

    // loop_wait 1 + 2 * retry_timeout 5 > ttl 10: the agents would refuse it.
    let before = show_config(&c, p);
    let (code, out) = edit(&c, p, &["retry_timeout=5"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("422") && out.contains("2 * retry_timeout"),
        "{out}"
    );
    let (code, out) = edit(&c, p, &["ttl=-1"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ttl: must not be negative"), "{out}");
    assert_eq!(show_config(&c, p), before, "nothing stored");

    let (code, _) = edit(&c, p, &["postgresql.parameters.max_files_per_process=900"]);
    assert_eq!(code, 0);
    c.wait_until(
        "pending_restart on every node",
        Duration::from_secs(30),
        |c| {
            (0..NODES)
                .all(|i| c.patroni(i)["pending_restart"] == serde_json::json!(true))
                .then_some(())
        },
    );
    let (_, list, _) = tenure_cli(&c, p, &["list"]);
    assert!(list.contains("Pending restart"), "{list}");
    let r = others(p).next().expect("a replica");
    let name = c.nodes[r].name.clone();
    let (code, out, err) = tenure_cli(&c, p, &["restart", &name, "--force"]);
    assert_eq!(code, 0, "{out} {err}");
    c.wait_until(
        "the restarted replica runs with 900",
        Duration::from_secs(60),
        |c| {
            (c.sql_one(r, "SHOW max_files_per_process").ok().as_deref() == Some("900")
                && c.patroni(r).get("pending_restart").is_none())
            .then_some(())
        },
    );
    assert_eq!(c.patroni(p)["pending_restart"], serde_json::json!(true));
    c.assert_never_two_primaries();
}

#[test]
fn a1_etcd_parameters_reach_every_node_pending_restart_and_refusals() {
    parameters_and_refusals(StoreKind::Etcd);
}

#[test]
fn a2_consul_parameters_reach_every_node_pending_restart_and_refusals() {
    parameters_and_refusals(StoreKind::Consul);
}

/// The TTL of the lease that holds the etcd leader key.
fn leader_lease_ttl_s(c: &Cluster) -> Option<i64> {
    let etcd = c.etcd()?.host_port().to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let mut client = etcd_client::Client::connect([etcd], None).await.ok()?;
        let resp = client.get("/service/e2e/leader", None).await.ok()?;
        let lease = resp.kvs().first()?.lease();
        let ttl = client.lease_time_to_live(lease, None).await.ok()?;
        Some(ttl.granted_ttl())
    })
}

/// A new ttl takes effect with the next leader term: after a switchover the new leader's lease is granted
/// with it.
#[test]
fn b_etcd_a_new_ttl_takes_effect_in_the_next_leader_lease() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let p = c.primary().expect("a primary");
    assert_eq!(leader_lease_ttl_s(&c), Some(10));
    let (code, _) = edit(&c, p, &["ttl=14"]);
    assert_eq!(code, 0);
    let to = others(p).next().expect("a replica");
    switch_over_once_streaming(&mut c, p, to);
    c.wait_until(
        "the candidate leads on a 14 s lease",
        Duration::from_secs(60),
        |c| (c.primary() == Some(to) && leader_lease_ttl_s(c) == Some(14)).then_some(()),
    );
    c.assert_never_two_primaries();
}

/// The TTL of the Consul session that holds the leader key, as sent (a Go duration: "5s").
fn leader_session_ttl(c: &Cluster) -> Option<String> {
    let url = c.consul()?.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let client = reqwest::Client::new();
        let get = |path: String| {
            let req = client.get(format!("{url}{path}"));
            async move {
                let body = req.send().await.ok()?.bytes().await.ok()?;
                serde_json::from_slice::<serde_json::Value>(&body).ok()
            }
        };
        let key = get("/v1/kv/service/e2e/leader".into()).await?;
        let id = key[0]["Session"].as_str()?.to_string();
        let info = get(format!("/v1/session/info/{id}")).await?;
        info[0]["TTL"].as_str().map(str::to_string)
    })
}

/// How far ahead of now node `i`'s fence is armed: the deadline the core armed (`armed <ms>` on
/// CLOCK_MONOTONIC in `<data_dir>.fence.d/fence`, which the fencing process enforces).
fn fence_ahead_ms(c: &Cluster, i: usize) -> Option<u64> {
    let mut dir = c.nodes[i].data_dir().into_os_string();
    dir.push(".fence.d");
    let text = std::fs::read_to_string(std::path::Path::new(&dir).join("fence")).ok()?;
    let deadline: u64 = text.trim().strip_prefix("armed ")?.parse().ok()?;
    Some(deadline.saturating_sub(tenure::clock::monotonic().0))
}

/// A ttl changed at run time (10 s to 20 s) reaches everything that rests on it (issue 33): `/liveness` of a
/// replica whose loop stood still for 13 s answers 200 (it answered by the start-up ttl before), and the next
/// leader term runs on a Consul session of ttl/2 = 10 s with its fence armed past the old session's 5 s.
#[test]
fn b2_consul_a_new_ttl_reaches_liveness_the_session_and_the_fence() {
    let mut c = Cluster::start(StoreKind::Consul);
    let p = c.primary().expect("a primary");
    assert_eq!(leader_session_ttl(&c).as_deref(), Some("5s"));
    let ahead = fence_ahead_ms(&c, p).expect("the primary's fence armed");
    assert!(
        ahead <= 5_000,
        "the fence within the 5 s session: {ahead} ms"
    );
    let (code, _) = edit(&c, p, &["ttl=20"]);
    assert_eq!(code, 0);
    c.wait_until("ttl 20 on every node", Duration::from_secs(20), |c| {
        (0..NODES)
            .all(|i| {
                let (s, body) = c.rest_get(i, "/config");
                s == 200 && body.contains("\"ttl\":20")
            })
            .then_some(())
    });
    // `/config` answers from the store's mirror at once; each agent's loop applies the key at its next cycle
    // (loop_wait 1 s). Stopping a replica's agent before that cycle tested the old ttl (seen in CI).
    std::thread::sleep(Duration::from_secs(2));

    // The replica's loop stands still longer than the old ttl, shorter than the new one. The request is
    // queued while the agent is stopped, so it is answered as the agent resumes, before its next cycle.
    let mut replicas = others(p);
    let (r, to) = (
        replicas.next().expect("a replica"),
        replicas.next().expect("another"),
    );
    c.sigstop_agent(r);
    std::thread::sleep(Duration::from_secs(13));
    let pid = c.agent_pid(r).expect("the stopped agent");
    let liveness = std::thread::scope(|s| {
        let probe = s.spawn(|| api(&c, r, "GET", "/liveness", ""));
        std::thread::sleep(Duration::from_millis(500));
        nix::sys::signal::kill(pid, Signal::SIGCONT).expect("SIGCONT");
        probe.join().expect("the liveness probe")
    });
    assert_eq!(
        liveness.0, 200,
        "13 s without a cycle is within the new ttl of 20 s"
    );

    switch_over_once_streaming(&mut c, p, to);
    c.wait_until(
        "the candidate leads on a 10 s session",
        Duration::from_secs(60),
        |c| {
            (c.primary() == Some(to) && leader_session_ttl(c).as_deref() == Some("10s"))
                .then_some(())
        },
    );
    // 10 s * (1 - 1%) less the 1 s fence budget at most; past 5 s, which the old session could not cover.
    let ahead = c.wait_until("the fence armed past 5 s", Duration::from_secs(10), |c| {
        fence_ahead_ms(c, to).filter(|&ms| ms > 5_000)
    });
    assert!(ahead <= 8_900, "{ahead} ms");
    c.assert_never_two_primaries();
}

/// `primary_start_timeout: 0`: the primary whose PostgreSQL crashed gives the key up at once instead of
/// restarting it, a replica is promoted, and the old primary rejoins as a replica.
#[test]
fn c_etcd_primary_start_timeout_0_fails_over_when_the_primary_crashes() {
    let mut c = Cluster::start(StoreKind::Etcd);
    let p = c.primary().expect("a primary");
    let (code, _) = edit(&c, p, &["primary_start_timeout=0"]);
    assert_eq!(code, 0);
    // An agent applies the key in the cycle that read it, before it publishes that snapshot (`/config`).
    c.wait_until(
        "the new config on every node",
        Duration::from_secs(20),
        |c| {
            (0..NODES)
                .all(|i| {
                    let (s, body) = c.rest_get(i, "/config");
                    s == 200 && body.contains("\"primary_start_timeout\":0")
                })
                .then_some(())
        },
    );
    c.kill_postmaster(p, Signal::SIGKILL)
        .expect("the primary's postmaster");
    let new = c.wait_until("another node primary", Duration::from_secs(60), |c| {
        c.primary().filter(|&n| n != p)
    });
    log(&c, &format!("{} took over", c.nodes[new].name));
    wait_rejoined(&mut c, p, new);
    c.assert_never_two_primaries();
}

/// Ask `p` to switch over to `to` once `to` streams from it: the candidate may still be catching up on the first
/// try; the answer says so, and a retry follows.
fn switch_over_once_streaming(c: &mut Cluster, p: usize, to: usize) {
    c.wait_until("the replica streams", Duration::from_secs(30), |c| {
        c.streams_from(to, p).then_some(())
    });
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}"}}"#,
        c.nodes[p].name, c.nodes[to].name
    );
    c.wait_until("the switchover accepted", Duration::from_secs(30), |c| {
        let (status, _) = api(c, p, "POST", "/switchover", &body);
        (status == 200).then_some(())
    });
}
