//! `bench/site_switchover.sh`: planned site switchovers measured with tenure (`bench_site_switchover`) and done
//! by hand with Patroni 3.0.2 (`bench_patroni_site_switchover`), on the two sites, writer and sampler of
//! `e2e_site_switchover`.
use std::time::{Duration, Instant};

use super::patroni_harness;
use super::support::checker::{Checker, Sample};
use super::support::cluster::{serial, wait_for};
use super::support::writer::Writer;
use super::{
    log, longest_unwritable, longest_write_gap, lost, start_sites, writable, Dir, Switch,
    CLI_BUDGET, REPLAY_BUDGET, REPOINT_BUDGET, SITE_NODES, STANDBY_SITE_BUDGET,
};
use tenure::demo::local;

/// The median and the maximum of `v`.
fn median_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[(v.len() - 1) / 2], *v.last().unwrap_or(&0.0))
}

/// Switchover `k` of `rows`: the longest window with no writable node (sampler), the writer's longest pause,
/// up to the next switchover's start (or 3 s after the last), and its commands' time, in seconds.
fn window(
    rows: &[(String, Switch)],
    k: usize,
    samples: &[Sample],
    acked: &[(i64, Duration)],
) -> [f64; 3] {
    let sw = &rows[k].1;
    let to = rows
        .get(k + 1)
        .map_or(sw.to + Duration::from_secs(3), |(_, n)| n.from);
    [
        longest_unwritable(samples, sw.from, to).as_secs_f64(),
        longest_write_gap(acked, sw.from, to).as_secs_f64(),
        sw.cli.as_secs_f64(),
    ]
}

/// The `bench: <who>summary` lines: median and maximum of each figure of [`window`].
fn summary(who: &str, figures: &[[f64; 3]], third: &str) {
    for (pick, what) in ["no writable node (sampler)", "writer gap", third]
        .into_iter()
        .enumerate()
    {
        let (med, max) = median_max(figures.iter().map(|f| f[pick]).collect());
        println!(
            "bench: {who}summary over {} switchovers: {what}: median {:.0} ms, max {:.0} ms",
            figures.len(),
            med * 1000.0,
            max * 1000.0
        );
    }
}

/// `bench/site_switchover.sh`: `SITE_SWITCHOVER_RUNS` (default 3) planned switchovers A -> B and back under
/// the writer; per switchover the longest window with no writable node (sampler, every 100 ms), the writer's
/// longest pause between acknowledgements, the acknowledged writes missing on the new primary, and the CLI
/// commands' time; then the median and the maximum. Lines for the script start with `bench:`.
#[test]
#[ignore = "a benchmark: bench/site_switchover.sh"]
fn bench_site_switchover() {
    let runs: usize = std::env::var("SITE_SWITCHOVER_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut s = start_sites();
    let writer = s.start_writer();
    std::thread::sleep(Duration::from_secs(3));
    let mut rows: Vec<(String, Switch)> = Vec::new();
    for run in 1..=runs {
        for dir in [Dir::AtoB, Dir::BtoA] {
            let sw = s.switchover(dir);
            let what = match dir {
                Dir::AtoB => "A->B",
                Dir::BtoA => "B->A",
            };
            // Writes resume on the new primary before the next switchover is measured.
            std::thread::sleep(Duration::from_secs(3));
            rows.push((format!("run {run} {what}"), sw));
        }
    }
    let log_w = writer.stop();
    let samples = s.stop_sampler();
    let mut figures = Vec::new();
    for (k, (name, sw)) in rows.iter().enumerate() {
        let f = window(&rows, k, &samples, &log_w.acked);
        figures.push(f);
        let [sampler, gap, _] = f;
        if std::env::var_os("SITE_SWITCHOVER_SAMPLES").is_some() {
            for x in samples.iter().filter(|x| x.at >= sw.from && x.at <= sw.to) {
                println!("bench: sample {}", x.render(&s.names));
            }
        }
        println!(
            "bench: {name}: no writable node {:.0} ms (sampler), writer gap {:.0} ms, CLI {:.1} s, token {}",
            sampler * 1000.0,
            gap * 1000.0,
            sw.cli.as_secs_f64(),
            sw.token
        );
    }
    let final_p = s.a.primary().expect("site A's primary at the end");
    let missing = lost(&s.a, final_p, &log_w.acked);
    println!(
        "bench: writer: {} acknowledged, {} failed or timed out, acknowledged writes lost: {}",
        log_w.acked.len(),
        log_w.failed,
        missing.len()
    );
    summary("", &figures, "CLI time");
}

/// The one value of `query` on 127.0.0.1:`port` as the superuser (a Patroni node), None on any error.
fn sql_port(rt: &tokio::runtime::Runtime, port: u16, query: &str) -> Option<String> {
    rt.block_on(async {
        let conninfo = format!(
            "host=127.0.0.1 port={port} user={} password={} dbname=postgres connect_timeout=2",
            local::SUPERUSER.0,
            local::SUPERUSER.1
        );
        let connect = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls);
        let (client, conn) = tokio::time::timeout(Duration::from_secs(3), connect)
            .await
            .ok()?
            .ok()?;
        tokio::spawn(conn);
        let msgs = tokio::time::timeout(Duration::from_secs(5), client.simple_query(query))
            .await
            .ok()?
            .ok()?;
        msgs.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
    })
}

/// `bench/site_switchover.sh`'s comparison: the same two sites, writer and sampler with Patroni 3.0.2 (two
/// nodes per site on an etcd each; ttl 10, loop_wait 1, retry_timeout 2), switched over the only way 3.0.2
/// has: `patronictl edit-config --set standby_cluster.host/port` on the primary site, then once its leader
/// answers as a standby leader, `--set standby_cluster=null` on the other. No token: nothing waits for the
/// other site to have replayed the old primary's last record.
#[test]
#[ignore = "a benchmark: bench/site_switchover.sh"]
fn bench_patroni_site_switchover() {
    use patroni_harness::{PatroniCluster, PatroniSite, StandbyOf};
    let runs: usize = std::env::var("SITE_SWITCHOVER_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let _serial = serial();
    let epoch = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let site = |standby: Option<&StandbyOf>| {
        PatroniCluster::start_site(&PatroniSite {
            nodes: SITE_NODES,
            standby,
            superuser: local::SUPERUSER,
            timing_s: (10, 1, 2),
        })
    };
    let role = |c: &PatroniCluster, i: usize| -> String {
        c.nodes[i]
            .get("/patroni")
            .and_then(|(_, v)| v["role"].as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let writable_node = |c: &PatroniCluster| {
        (0..c.nodes.len()).find(|&i| {
            sql_port(&rt, c.nodes[i].pg_port, "SELECT pg_is_in_recovery()").as_deref() == Some("f")
        })
    };
    let sender = |c: &PatroniCluster, i: usize| -> Option<u16> {
        sql_port(
            &rt,
            c.nodes[i].pg_port,
            "SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'",
        )?
        .parse()
        .ok()
    };
    let mut a = site(None);
    let p = a.wait(
        "a primary in Patroni site A",
        Duration::from_secs(120),
        || writable_node(&a),
    );
    let a_port = a.nodes[p].pg_port;
    let mut b = site(Some(&StandbyOf {
        port: a_port,
        superuser: local::SUPERUSER,
        replication: ("replicator", "rep-pw"),
    }));
    b.wait(
        "a standby leader in Patroni site B streaming from A",
        STANDBY_SITE_BUDGET,
        || {
            (0..SITE_NODES)
                .find(|&i| role(&b, i) == "standby_leader" && sender(&b, i) == Some(a_port))
        },
    );
    log(epoch, "Patroni sites up");
    // The CREATE answers no row: done once the SELECT answers.
    wait_for(
        || {
            let create = "CREATE TABLE IF NOT EXISTS e2e_writes (id bigint PRIMARY KEY)";
            let _ = sql_port(&rt, a_port, create);
            sql_port(&rt, a_port, "SELECT count(*) FROM e2e_writes")
        },
        Duration::from_secs(20),
    )
    .expect("create table on Patroni site A");
    let all: Vec<(u16, u16)> = a
        .nodes
        .iter()
        .chain(&b.nodes)
        .map(|n| (n.pg_port, n.api.port()))
        .collect();
    let sampler = Checker::start(
        &rt,
        all.iter().map(|x| x.0).collect(),
        all.iter().map(|x| x.1).collect(),
        epoch,
    );
    let writer = Writer::start_any(&rt, all.iter().map(|x| x.0).collect(), epoch);
    std::thread::sleep(Duration::from_secs(3));
    let mut rows: Vec<(String, Switch)> = Vec::new();
    for run in 1..=runs {
        for (what, old, new) in [("A->B", &a, &b), ("B->A", &b, &a)] {
            let from = epoch.elapsed();
            let sl = new.wait("the standby leader", REPLAY_BUDGET, || {
                (0..SITE_NODES).find(|&i| role(new, i) == "standby_leader")
            });
            let port = new.nodes[sl].pg_port;
            old.patronictl(&[
                "edit-config",
                "--force",
                "--set",
                "standby_cluster.host=127.0.0.1",
                "--set",
                &format!("standby_cluster.port={port}"),
            ]);
            old.wait(
                "the old site's leader to answer as a standby leader",
                CLI_BUDGET,
                || {
                    (writable_node(old).is_none()
                        && (0..SITE_NODES).any(|i| role(old, i) == "standby_leader"))
                    .then_some(())
                },
            );
            new.patronictl(&["edit-config", "--force", "--set", "standby_cluster=null"]);
            let np = new.wait("the new site's primary", CLI_BUDGET, || writable_node(new));
            let to = epoch.elapsed();
            assert_eq!(np, sl, "{what}: the standby leader is promoted");
            let osl = old.wait(
                "the old site's standby leader to stream from the new primary",
                REPOINT_BUDGET,
                || {
                    (0..SITE_NODES)
                        .find(|&i| role(old, i) == "standby_leader" && sender(old, i) == Some(port))
                },
            );
            log(
                epoch,
                &format!(
                    "Patroni {what}: {} primary after {:.1} s; {} follows it",
                    new.nodes[sl].name,
                    (to - from).as_secs_f64(),
                    old.nodes[osl].name
                ),
            );
            std::thread::sleep(Duration::from_secs(3));
            rows.push((
                format!("patroni run {run} {what}"),
                Switch {
                    token: "-".into(),
                    from,
                    to,
                    cli: to - from,
                    primary: np,
                },
            ));
        }
    }
    let log_w = writer.stop();
    let (samples, _) = sampler.stop();
    let double = samples.iter().filter(|x| writable(x) > 1).count();
    let mut figures = Vec::new();
    for (k, (name, sw)) in rows.iter().enumerate() {
        let f = window(&rows, k, &samples, &log_w.acked);
        figures.push(f);
        let [sampler, gap, _] = f;
        println!(
            "bench: {name}: no writable node {:.0} ms (sampler), writer gap {:.0} ms, commands and waits {:.1} s",
            sampler * 1000.0,
            gap * 1000.0,
            sw.cli.as_secs_f64()
        );
    }
    let final_p = writable_node(&a).expect("Patroni site A's primary at the end");
    let stored: std::collections::BTreeSet<i64> = rt.block_on(async {
        let conninfo = format!(
            "host=127.0.0.1 port={} user={} password={} dbname=postgres",
            a.nodes[final_p].pg_port,
            local::SUPERUSER.0,
            local::SUPERUSER.1
        );
        let (client, conn) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
            .await
            .expect("connect to Patroni site A's primary");
        tokio::spawn(conn);
        client
            .query("SELECT id FROM e2e_writes", &[])
            .await
            .expect("read e2e_writes")
            .iter()
            .map(|r| r.get::<_, i64>(0))
            .collect()
    });
    let missing = log_w
        .acked
        .iter()
        .filter(|(id, _)| !stored.contains(id))
        .count();
    println!(
        "bench: patroni writer: {} acknowledged, {} failed or timed out, acknowledged writes lost: {missing}; samples with two writable nodes: {double}",
        log_w.acked.len(),
        log_w.failed,
    );
    summary("patroni ", &figures, "commands and waits");
    a.failed = false;
    b.failed = false;
    drop(b);
    drop(a);
    rt.shutdown_timeout(Duration::from_secs(2));
}
