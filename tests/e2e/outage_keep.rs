//! `e2e_outage`'s scenarios around one primary kept or given up: a paused cluster whose store freezes past
//! the ttl (issue 16 §2), and a primary whose PostgreSQL cannot start (issue 16 §3). Their tests are in
//! `outage.rs`.
use super::*;

/// Paused cluster, the store frozen (etcd: SIGSTOP; the Consul double: `consul_fault`, every request hangs,
/// with sessions expiring meanwhile or not) for twice the ttl, then back: the same postmaster still runs and
/// takes writes, it holds the leader key again, nothing else was writable; after `tenure resume --wait` the
/// same primary carries on, on the same timeline.
pub(super) fn paused_store_frozen(kind: StoreKind, consul_fault: Fault) {
    let mut c = Cluster::start(kind);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    let (code, out, err) = tenure_cli(&c, 0, &["pause", "--wait"]);
    assert_eq!(code, 0, "tenure pause --wait: {out}\n{err}");
    let pid = c.postmaster_pid(p).expect("the primary's postmaster");
    let tl = c.timeline(p).expect("the primary's timeline");
    let fault = c.epoch.elapsed();
    match kind {
        StoreKind::Etcd => c.etcd().expect("etcd").sigstop(),
        _ => c.consul().expect("consul").set_fault(consul_fault),
    }
    log(
        &c,
        &format!(
            "paused; store frozen ({}); primary {} (postmaster {pid}, timeline {tl})",
            match kind {
                StoreKind::Etcd => "SIGSTOP".to_string(),
                _ => format!("{consul_fault:?}"),
            },
            c.nodes[p].name
        ),
    );
    hold(&mut c, 2 * TTL);
    c.sql(p, "INSERT INTO e2e_writes VALUES (1)")
        .expect("the paused primary takes writes with the store frozen past the ttl");
    match kind {
        StoreKind::Etcd => c.etcd().expect("etcd").sigcont(),
        _ => c.consul().expect("consul").set_fault(Fault::None),
    }
    let back = c.epoch.elapsed();
    let log_path = c.nodes[p].agent_log();
    let log_from = std::fs::metadata(&log_path).map_or(0, |m| m.len() as usize);
    log(&c, "store back");
    let leader_row = format!("| {} ", c.nodes[p].name);
    // The key `list` shows may still be the lapsed one (the double reaps it 2 s after it runs again): the
    // primary's own agent must also have taken it in pause, on a fresh read, before the resume below (a
    // resume it read first would end its lapsed lease the ordinary way: seen once in CI).
    c.wait_until(
        "the paused primary to hold the leader key again",
        CONVERGE_BUDGET,
        |c| {
            let (_, list, _) = tenure_cli(c, 0, &["list"]);
            let text = std::fs::read(&log_path).unwrap_or_default();
            let since = String::from_utf8_lossy(text.get(log_from..).unwrap_or_default());
            let retaken = since.contains("PAUSE: I am the leader with the lock");
            (retaken
                && list
                    .lines()
                    .any(|l| l.starts_with(&leader_row) && l.contains("Leader")))
            .then_some(())
        },
    );
    log(
        &c,
        &format!(
            "{} holds the key again {:.1} s after the store came back",
            c.nodes[p].name,
            (c.epoch.elapsed() - back).as_secs_f64()
        ),
    );
    assert_eq!(
        c.postmaster_pid(p),
        Some(pid),
        "the paused primary's PostgreSQL was stopped"
    );
    let (code, out, err) = tenure_cli(&c, 0, &["resume", "--wait"]);
    assert_eq!(code, 0, "tenure resume --wait: {out}\n{err}");
    // Replicas wait one usable ttl after a resume before they would race: hold past it.
    hold(&mut c, TTL + Duration::from_secs(3));
    assert_eq!(c.primary(), Some(p), "the same primary after resume");
    assert_eq!(
        c.postmaster_pid(p),
        Some(pid),
        "the same postmaster after resume"
    );
    let tl_after = c.wait_until("the primary's timeline", Duration::from_secs(10), |c| {
        c.timeline(p)
    });
    assert_eq!(tl_after, tl, "the timeline changed");
    c.sql(p, "INSERT INTO e2e_writes VALUES (2)")
        .expect("the primary takes writes after resume");
    assert_only_writable(&c, p, fault);
    c.assert_never_two_primaries();
}

/// How many attempts to run PostgreSQL failed on node `i`, from its agent's log: `pg_ctl start` (as
/// primary or replica) and single-user crash recovery of a crashed directory (`RecoverCrashed`, which the
/// core asks for before a divergence check; `CheckDivergence` itself is a read now).
fn failed_starts(c: &Cluster, i: usize) -> usize {
    std::fs::read_to_string(c.nodes[i].agent_log())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("action did not succeed"))
        .filter(|l| {
            ["StartPrimary", "StartReplica", "RecoverCrashed"]
                .iter()
                .any(|a| l.contains(a))
        })
        .count()
}

/// A broken `postgresql.auto.conf`, then SIGKILL of the primary's postmaster: the agent's start fails, it
/// gives the key up at once and a replica is primary within ttl + loop_wait (+ the harness's slack); the
/// old node keeps no key and its start attempts are spaced out (counted in PostgreSQL's log); once the file
/// is repaired it rejoins as a replica of the new primary.
pub(super) fn primary_cannot_start(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let old = c.primary().expect("one primary");
    create_table(&c, old);
    let auto_conf = c.nodes[old].data_dir().join("postgresql.auto.conf");
    let good = std::fs::read_to_string(&auto_conf).expect("postgresql.auto.conf");
    std::fs::write(
        &auto_conf,
        format!("{good}this line is = not valid = at all\n"),
    )
    .expect("break postgresql.auto.conf");
    let pid = c.kill_postmaster(old, Signal::SIGKILL).expect("postmaster");
    let t_kill = Instant::now();
    log(
        &c,
        &format!(
            "broke {}'s postgresql.auto.conf and SIGKILLed its postmaster {pid}",
            c.nodes[old].name
        ),
    );
    let new = c.wait_until("a replica to be primary", CONVERGE_BUDGET, |c| {
        c.primary().filter(|&p| p != old)
    });
    log(
        &c,
        &format!(
            "{} primary {:.1} s after the kill (ttl + loop_wait = 11 s)",
            c.nodes[new].name,
            t_kill.elapsed().as_secs_f64()
        ),
    );
    let window = Duration::from_secs(20);
    let before = failed_starts(&c, old);
    hold(&mut c, window);
    let during = failed_starts(&c, old) - before;
    let (code, list, err) = tenure_cli(&c, new, &["list"]);
    assert_eq!(code, 0, "tenure list: {list}\n{err}");
    log(
        &c,
        &format!(
            "{}'s agent log ends:\n{}",
            c.nodes[old].name,
            tenure::demo::local::tail(&c.nodes[old].agent_log(), 12)
        ),
    );
    log(
        &c,
        &format!(
            "{} failed starts on {} in the first ~{} s after the failover, {} in the next {} s; tenure list:\n{list}",
            before,
            c.nodes[old].name,
            t_kill.elapsed().as_secs() - window.as_secs(),
            during,
            window.as_secs()
        ),
    );
    assert!(before >= 1, "the agent tried to start PostgreSQL");
    // loop_wait is 1 s and the back-off doubles: a hot loop would be hundreds.
    assert!(
        during <= window.as_secs() as usize,
        "{during} start attempts in {} s: retried faster than loop_wait",
        window.as_secs()
    );
    let old_row = format!("| {} ", c.nodes[old].name);
    let new_row = format!("| {} ", c.nodes[new].name);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&new_row) && l.contains("Leader")),
        "the new primary holds the key:\n{list}"
    );
    assert!(
        !list
            .lines()
            .any(|l| l.starts_with(&old_row) && l.contains("Leader")),
        "the old primary keeps no key:\n{list}"
    );
    std::fs::write(&auto_conf, good).expect("repair postgresql.auto.conf");
    let t_fix = Instant::now();
    let took = wait_rejoined(&mut c, old, new);
    log(
        &c,
        &format!(
            "file repaired: {} streams from {} {:.1} s later",
            c.nodes[old].name,
            c.nodes[new].name,
            t_fix.elapsed().as_secs_f64().max(took.as_secs_f64())
        ),
    );
    assert_eq!(c.primary(), Some(new));
    c.assert_never_two_primaries();
}
