//! Site switchover end to end (Patroni 4.1's `demote-cluster`/`promote-cluster`, issue 32), from the user's
//! side: two sites on one machine as in `e2e_standby` (each its own etcd and scope, two agents and PostgreSQL
//! 15 servers each), site B a standby cluster of site A, each site's `peer_sites` naming the other site's
//! REST URLs in its `bootstrap.dcs` (both sites' ports are chosen before any config is written; site A
//! bootstraps while site B does not run yet, the first case).
//!
//! Beside each site's own checker, one sampler across both sites asks `pg_is_in_recovery()` and
//! `GET /primary` of all four nodes every 100 ms: never two writable nodes across the sites, and the
//! longest window with none is printed. A writer inserts increasing ids through one connection to whichever
//! node of either site answers as writable, recording what was acknowledged.
//!
//! - a new primary site whose `bootstrap.dcs.peer_sites` names a site not running yet bootstraps;
//! - `promote-cluster` with neither `--token` nor `--force` is refused and changes nothing; a planned
//!   switchover A -> B and back under the writer (`demote-cluster --force --host --port` on the primary site,
//!   the handover token read from its last line, `promote-cluster --token` on the other): no acknowledged
//!   write lost, the old site follows the new one; then `promote-cluster --force` on B while A is writable:
//!   refused by B's agents (the CLI exits non-zero within its `--timeout`), B stays a standby;
//! - that refused `promote-cluster --force` is not left armed: when A's agents stop answering later (frozen,
//!   as in a partition, A's PostgreSQL still running), B does not promote on its own;
//! - site A lost whole (agents, postmasters and its etcd SIGKILLed), `promote-cluster --force` with `y` on
//!   stdin on B; A's etcd and agents come back: for 3 x ttl no node of A is writable nor answers 200 on
//!   `/primary`, and B stays writable.
//!
//! `bench/site_switchover.sh` runs the ignored `bench_site_switchover` (`SITE_SWITCHOVER_RUNS`, default 3) and
//! `bench_patroni_site_switchover` (the same by hand with Patroni 3.0.2).
//!
//! Run with `cargo test --test e2e_site_switchover -- --nocapture` (as root or as `postgres`).
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "patroni_harness.rs"]
#[allow(dead_code)]
mod patroni_harness;
/// `bench/site_switchover.sh`'s two ignored cases.
#[path = "site_switchover_bench.rs"]
mod site_switchover_bench;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;
#[path = "two_sites.rs"]
mod two_sites;

use std::io::Write;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::checker::{Checker, Sample};
use support::cluster::{serial, stored_ids, wait_for, Cluster, Layout, StoreKind};
use support::writer::{WriteLog, Writer};
use tenure::demo::local;

use common::{create_table, hold, CONVERGE_BUDGET, TTL};
use two_sites::{
    role, sender_port, standby_cluster_section, REPLAY_BUDGET, REPOINT_BUDGET, SITE_NODES,
    STANDBY_SITE_BUDGET,
};

/// The CLI's own `--timeout` default (60 s), plus its start and some slack: the test gives up after this.
const CLI_BUDGET: Duration = Duration::from_secs(120);
/// `promote-cluster --timeout` of the refused promotion.
const REFUSED_TIMEOUT_S: u64 = 15;

/// A site's ports, chosen before any config is written (each site's `peer_sites` names the other's).
struct SitePorts {
    pg: Vec<u16>,
    api: Vec<u16>,
}

impl SitePorts {
    fn new() -> SitePorts {
        let port = || local::free_port().expect("free port");
        SitePorts {
            pg: (0..SITE_NODES).map(|_| port()).collect(),
            api: (0..SITE_NODES).map(|_| port()).collect(),
        }
    }

    /// The `bootstrap.dcs` lines naming this site's agents as the other site's `peer_sites`.
    fn as_peer_sites(&self) -> String {
        let urls: String = self
            .api
            .iter()
            .map(|p| format!("      - http://127.0.0.1:{p}\n"))
            .collect();
        format!("    peer_sites:\n{urls}")
    }
}

/// The two sites of one test, the sampler across both and its runtime. Fields drop in order: the sampler
/// first, then site B, site A, the lock last.
struct Sites {
    sampler: Option<Checker>,
    rt: Option<tokio::runtime::Runtime>,
    b: Cluster,
    a: Cluster,
    /// Node names, site A's then site B's (the sampler's columns).
    names: Vec<String>,
    /// The origin of the sampler's and the writer's times: site A's epoch.
    epoch: Instant,
    _serial: MutexGuard<'static, ()>,
}

impl Drop for Sites {
    fn drop(&mut self) {
        if let Some(s) = self.sampler.take() {
            let (samples, _) = s.stop();
            if std::thread::panicking() {
                eprintln!("--- last samples across both sites (P = writable, r = in recovery, - = no answer) ---");
                for s in &samples[samples.len().saturating_sub(40)..] {
                    eprintln!("{}", s.render(&self.names));
                }
            }
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

fn log(epoch: Instant, msg: &str) {
    eprintln!(
        "[e2e site switchover {:>6.1}s] {msg}",
        epoch.elapsed().as_secs_f64()
    );
}

/// The node of `c` answering as its standby leader.
fn standby_leader(c: &Cluster) -> Option<usize> {
    (0..c.nodes.len()).find(|&i| role(c, i) == "standby_leader")
}

/// Start site A (its primary awaited), then site B as A's standby cluster (its standby leader streaming from
/// A's primary, its other member from the standby leader), and the sampler across both.
fn start_sites() -> Sites {
    let serial = serial();
    let t0 = Instant::now();
    let (pa, pb) = (SitePorts::new(), SitePorts::new());
    let with_ports = |ports: &SitePorts, peers: Option<&SitePorts>, extra: String| {
        let dcs = peers.map(SitePorts::as_peer_sites).unwrap_or_default();
        let (pg, api) = (ports.pg.clone(), ports.api.clone());
        let mut k = 0;
        move |n: &mut local::NodeSpec| {
            n.pg_port = pg[k];
            n.api_port = api[k];
            n.dcs_extra = format!("{dcs}{extra}");
            k += 1;
        }
    };
    let layout = |site: &str| Layout {
        scope: format!("site-{site}"),
        name_prefix: site.into(),
        nodes: SITE_NODES,
    };
    let mut a = Cluster::start_site(
        StoreKind::Etcd,
        &layout("a"),
        with_ports(&pa, Some(&pb), String::new()),
    );
    let epoch = a.epoch;
    let p = a.wait_healthy(Duration::from_secs(90));
    let a_port = a.nodes[p].pg_port;
    log(
        epoch,
        &format!("site A up: primary {} on port {a_port}", a.nodes[p].name),
    );
    let mut b = Cluster::start_site(
        StoreKind::Etcd,
        &layout("b"),
        with_ports(&pb, Some(&pa), standby_cluster_section(a_port)),
    );
    let (sl, so) = b.wait_until(
        "a standby leader in site B streaming from site A's primary, the other member from it",
        STANDBY_SITE_BUDGET,
        |c| {
            let s = standby_leader(c)?;
            let o = (0..c.nodes.len()).find(|&i| i != s)?;
            (sender_port(c, s)? == a_port && sender_port(c, o)? == c.nodes[s].pg_port)
                .then_some((s, o))
        },
    );
    log(
        epoch,
        &format!(
            "site B up {:.1} s after site A was started: standby leader {}, {} cascading from it",
            t0.elapsed().as_secs_f64(),
            b.nodes[sl].name,
            b.nodes[so].name
        ),
    );
    // Site A's bootstrap put its peer_sites (site B's agents, not running then) in its `config` key.
    let urls: Vec<String> = pb
        .api
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    a.wait_until(
        "site A's config key to hold peer_sites",
        REPLAY_BUDGET,
        |c| {
            let (_, config) = c.rest_get(p, "/config");
            serde_json::from_str::<serde_json::Value>(&config)
                .ok()
                .filter(|v| v["peer_sites"] == serde_json::json!(urls))
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let all: Vec<_> = a.nodes.iter().chain(&b.nodes).collect();
    let sampler = Checker::start(
        &rt,
        all.iter().map(|n| n.pg_port).collect(),
        all.iter().map(|n| n.api_port).collect(),
        epoch,
    );
    let names = all.iter().map(|n| n.name.clone()).collect();
    Sites {
        sampler: Some(sampler),
        rt: Some(rt),
        b,
        a,
        names,
        epoch,
        _serial: serial,
    }
}

/// What one `tenure` command did.
struct Cli {
    code: i32,
    out: String,
    err: String,
    took: Duration,
}

impl std::fmt::Display for Cli {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {} after {:.1} s\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code,
            self.took.as_secs_f64(),
            self.out,
            self.err
        )
    }
}

/// `tenure -c <node i's config> <args>` with `stdin` written to its standard input; killed after
/// [`CLI_BUDGET`] (then exit -1).
fn cli(c: &Cluster, i: usize, args: &[&str], stdin: &str) -> Cli {
    let reaper = local::reaper();
    let t0 = Instant::now();
    let mut child = reaper.spawn_with(|| {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .arg("-c")
            .arg(c.nodes[i].config_path())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run tenure");
        let pid = child.id() as i32;
        (child, vec![pid])
    });
    let pid = child.id() as i32;
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    if rx.recv_timeout(CLI_BUDGET).is_err() {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let out = waiter
        .join()
        .expect("waiter thread")
        .expect("wait for tenure");
    reaper.release(pid);
    Cli {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: t0.elapsed(),
    }
}

/// The token of `demote-cluster`'s last stdout line, `handover token: <timeline>:<lsn>`.
fn handover_token(out: &str) -> Option<String> {
    let last = out.lines().rev().find(|l| !l.trim().is_empty())?;
    let token = last.trim().strip_prefix("handover token: ")?;
    let (tl, lsn) = token.split_once(':')?;
    let (hi, lo) = lsn.split_once('/')?;
    (tl.parse::<u64>().is_ok()
        && u64::from_str_radix(hi, 16).is_ok()
        && u64::from_str_radix(lo, 16).is_ok())
    .then(|| token.to_string())
}

/// Writable nodes in a sample.
fn writable(s: &Sample) -> usize {
    s.writable.iter().filter(|w| **w == Some(true)).count()
}

/// The longest window with no writable node that ends in `[from, to]` (it may have begun before `from`):
/// from the last sample with one before a run of samples with none to the first sample with one after it
/// (or `to`).
fn longest_unwritable(samples: &[Sample], from: Duration, to: Duration) -> Duration {
    let mut last_writable: Option<Duration> = None;
    let mut longest = Duration::ZERO;
    let mut gap_open = false;
    for s in samples.iter().filter(|s| s.at <= to) {
        if writable(s) > 0 {
            if let (true, Some(l)) = (gap_open && s.at >= from, last_writable) {
                longest = longest.max(s.at - l);
            }
            last_writable = Some(s.at);
            gap_open = false;
        } else {
            gap_open = true;
        }
    }
    if let (true, Some(l)) = (gap_open, last_writable) {
        longest = longest.max(to - l);
    }
    longest
}

/// The longest pause between two consecutive acknowledged writes in `[from, to]`.
fn longest_write_gap(log: &[(i64, Duration)], from: Duration, to: Duration) -> Duration {
    log.iter()
        .map(|(_, at)| *at)
        .filter(|at| *at >= from && *at <= to)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(Duration::ZERO)
}

/// One planned switchover's figures.
struct Switch {
    token: String,
    /// Since the epoch: demote-cluster started; promote-cluster returned.
    from: Duration,
    to: Duration,
    /// demote-cluster's and promote-cluster's run times.
    cli: Duration,
    /// The new primary (its index in the new site).
    primary: usize,
}

/// Which site is which in a switchover.
#[derive(Clone, Copy)]
enum Dir {
    AtoB,
    BtoA,
}

impl Sites {
    fn pair(&mut self, dir: Dir) -> (&mut Cluster, &mut Cluster, &'static str) {
        match dir {
            Dir::AtoB => (&mut self.a, &mut self.b, "A -> B"),
            Dir::BtoA => (&mut self.b, &mut self.a, "B -> A"),
        }
    }

    fn since_epoch(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn samples(&self) -> Vec<Sample> {
        self.sampler
            .as_ref()
            .map(Checker::samples)
            .unwrap_or_default()
    }

    fn health_samples(&self) -> Vec<Sample> {
        self.sampler
            .as_ref()
            .map(Checker::health_samples)
            .unwrap_or_default()
    }

    /// A planned switchover from the primary site to its standby site: `demote-cluster --force` on the
    /// primary site naming the standby leader, the token from its last line, `promote-cluster --token` on
    /// the standby site; then the new site's primary is its old standby leader and the old site's standby
    /// leader streams from it, the old site's other member from its standby leader.
    fn switchover(&mut self, dir: Dir) -> Switch {
        let epoch = self.epoch;
        let from = self.since_epoch();
        let (old, new, what) = self.pair(dir);
        let p = old.primary().expect("the primary site has a primary");
        let sl = new.wait_until("the standby site's standby leader", REPLAY_BUDGET, |c| {
            standby_leader(c)
        });
        let port = new.nodes[sl].pg_port.to_string();
        log(
            epoch,
            &format!(
                "{what}: demote-cluster on {} naming {} (port {port})",
                old.nodes[p].name, new.nodes[sl].name
            ),
        );
        let demote = cli(
            old,
            p,
            &[
                "demote-cluster",
                "--force",
                "--host",
                "127.0.0.1",
                "--port",
                &port,
            ],
            "",
        );
        assert_eq!(demote.code, 0, "{what}: demote-cluster: {demote}");
        let token = handover_token(&demote.out).unwrap_or_else(|| {
            panic!("{what}: no `handover token: <timeline>:<lsn>` as demote-cluster's last line: {demote}")
        });
        log(
            epoch,
            &format!(
                "{what}: demote-cluster took {:.1} s: token {token}; promote-cluster on {}",
                demote.took.as_secs_f64(),
                new.nodes[sl].name
            ),
        );
        let promote = cli(new, sl, &["promote-cluster", "--token", &token], "");
        assert_eq!(promote.code, 0, "{what}: promote-cluster: {promote}");
        let to = epoch.elapsed();
        log(
            epoch,
            &format!(
                "{what}: promote-cluster took {:.1} s",
                promote.took.as_secs_f64()
            ),
        );
        let primary = new.wait_until("the new site's primary", CONVERGE_BUDGET, |c| c.primary());
        assert_eq!(
            primary, sl,
            "{what}: the standby leader {} is the new primary",
            new.nodes[sl].name
        );
        let new_port = new.nodes[sl].pg_port;
        let osl = old.wait_until(
            &format!(
                "{what}: the old site's standby leader to stream from the new primary (port {new_port})"
            ),
            REPOINT_BUDGET,
            |c| standby_leader(c).filter(|&s| sender_port(c, s) == Some(new_port)),
        );
        let other = (0..old.nodes.len()).find(|&i| i != osl).expect("two nodes");
        let osl_port = old.nodes[osl].pg_port;
        old.wait_until(
            &format!("{what}: the old site's other member to stream from its standby leader"),
            REPOINT_BUDGET,
            |c| (sender_port(c, other) == Some(osl_port)).then_some(()),
        );
        log(
            epoch,
            &format!(
                "{what}: {} is the new primary; the old site's standby leader {} streams from it, {} from {}",
                new.nodes[sl].name, old.nodes[osl].name, old.nodes[other].name, old.nodes[osl].name
            ),
        );
        Switch {
            token,
            from,
            to,
            cli: demote.took + promote.took,
            primary,
        }
    }

    /// Start the writer across both sites (the table created on site A's primary first).
    fn start_writer(&mut self) -> Writer {
        let p = self.a.primary().expect("site A's primary");
        create_table(&self.a, p);
        let ports = self
            .a
            .nodes
            .iter()
            .chain(&self.b.nodes)
            .map(|n| n.pg_port)
            .collect();
        Writer::start_any(self.rt.as_ref().expect("runtime"), ports, self.epoch)
    }

    /// Stop the sampler: never more than one writable node (SQL) nor more than one 200 on `GET /primary`
    /// across both sites; the samples.
    fn stop_sampler(&mut self) -> Vec<Sample> {
        let (samples, health) = self.sampler.take().expect("sampler running").stop();
        eprintln!(
            "[e2e site switchover] sampler across both sites: {} SQL and {} REST samples",
            samples.len(),
            health.len()
        );
        for (what, ss) in [
            ("two writable nodes across the sites", &samples),
            (
                "two nodes answering 200 on GET /primary across the sites",
                &health,
            ),
        ] {
            if let Some(bad) = ss.iter().position(|s| writable(s) > 1) {
                let around: Vec<String> = ss[bad.saturating_sub(10)..(bad + 10).min(ss.len())]
                    .iter()
                    .map(|s| s.render(&self.names))
                    .collect();
                panic!(
                    "{what} at {:.2} s; samples around it (P = primary, r = not, - = no answer):\n{}",
                    ss[bad].at.as_secs_f64(),
                    around.join("\n")
                );
            }
        }
        samples
    }
}

/// Every acknowledged id is on node `i` of `c`; how many are not.
fn lost(c: &Cluster, i: usize, acked: &[(i64, Duration)]) -> Vec<i64> {
    let stored = stored_ids(c, i).expect("read e2e_writes on the final primary");
    acked
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !stored.contains(id))
        .collect()
}

/// A new primary site whose `bootstrap.dcs.peer_sites` names a standby site that is not running yet (it is
/// set up from the primary site, so it comes second) bootstraps: nothing another site could have superseded
/// exists yet.
#[test]
fn a_new_primary_site_bootstraps_before_the_site_its_peer_sites_name_runs() {
    let _serial = serial();
    let peers = SitePorts::new();
    let mut a = Cluster::start_site(
        StoreKind::Etcd,
        &Layout {
            scope: "site-a".into(),
            name_prefix: "a".into(),
            nodes: SITE_NODES,
        },
        |n| n.dcs_extra = peers.as_peer_sites(),
    );
    let p = a.wait_healthy(Duration::from_secs(45));
    log(
        a.epoch,
        &format!("site A bootstrapped: primary {}", a.nodes[p].name),
    );
    a.assert_never_two_primaries();
}

#[test]
fn planned_site_switchover_there_and_back_loses_no_acknowledged_write_and_refuses_unsafe_promotions(
) {
    let mut s = start_sites();
    let epoch = s.epoch;
    let b_sl = standby_leader(&s.b).expect("site B's standby leader");

    // d. promote-cluster with neither --token nor --force: refused, nothing changed.
    let before = cli(&s.b, b_sl, &["show-config"], "");
    assert_eq!(before.code, 0, "show-config on site B: {before}");
    let bare = cli(&s.b, b_sl, &["promote-cluster"], "y\n");
    log(
        epoch,
        &format!("promote-cluster with neither --token nor --force: {bare}"),
    );
    assert_ne!(
        bare.code, 0,
        "promote-cluster with neither --token nor --force is refused: {bare}"
    );
    assert!(
        !bare.err.contains("unrecognized subcommand"),
        "promote-cluster is a command: {bare}"
    );
    let after = cli(&s.b, b_sl, &["show-config"], "");
    assert_eq!(
        before.out, after.out,
        "site B's config is unchanged by a refused promote-cluster"
    );
    hold(&mut s.b, Duration::from_secs(2));
    assert_eq!(
        standby_leader(&s.b),
        Some(b_sl),
        "site B's standby leader is still its standby leader"
    );
    assert_eq!(s.b.primary(), None, "site B has no writable node");

    // a. A -> B and back, under the writer.
    let writer = s.start_writer();
    std::thread::sleep(Duration::from_secs(2));
    let w_from = s.since_epoch();
    let ab = s.switchover(Dir::AtoB);
    let resume = |s: &Sites| {
        let at = s.since_epoch();
        wait_for(
            || {
                let samples = s.samples();
                samples
                    .iter()
                    .rev()
                    .find(|x| x.at > at && writable(x) == 1)
                    .map(|x| x.at)
            },
            Duration::from_secs(10),
        )
    };
    assert!(
        resume(&s).is_some(),
        "a writable node after A -> B (sampler)"
    );
    std::thread::sleep(Duration::from_secs(2));
    let ba = s.switchover(Dir::BtoA);
    assert!(
        resume(&s).is_some(),
        "a writable node after B -> A (sampler)"
    );
    std::thread::sleep(Duration::from_secs(2));
    let log_w: WriteLog = writer.stop();
    let w_to = s.since_epoch();
    let final_p = s.a.primary().expect("site A's primary at the end");
    assert_eq!(final_p, ba.primary);
    let missing = lost(&s.a, final_p, &log_w.acked);
    let samples = s.samples();
    for (what, sw) in [("A -> B", &ab), ("B -> A", &ba)] {
        log(
            epoch,
            &format!(
                "{what}: token {}; CLI {:.1} s; no writable node for {:.2} s (sampler), longest write gap {:.2} s",
                sw.token,
                sw.cli.as_secs_f64(),
                longest_unwritable(&samples, sw.from, sw.to + Duration::from_secs(2)).as_secs_f64(),
                longest_write_gap(&log_w.acked, sw.from, sw.to + Duration::from_secs(2)).as_secs_f64()
            ),
        );
    }
    log(
        epoch,
        &format!(
            "writer: {} acknowledged, {} failed; longest window with no writable node over the writer's life {:.2} s",
            log_w.acked.len(),
            log_w.failed,
            longest_unwritable(&samples, w_from, w_to).as_secs_f64()
        ),
    );
    assert!(
        missing.is_empty(),
        "{} acknowledged writes lost on the final primary {}: {:?}",
        missing.len(),
        s.a.nodes[final_p].name,
        &missing[..missing.len().min(20)]
    );
    assert!(
        log_w
            .acked
            .iter()
            .any(|(_, at)| *at > ab.to && *at < ba.from),
        "writes were acknowledged by site B's primary between the switchovers"
    );

    // c. promote-cluster --force on B while A is a healthy primary: B's agents refuse.
    let b_sl = standby_leader(&s.b).expect("site B's standby leader after switching back");
    let c_from = s.since_epoch();
    let timeout = REFUSED_TIMEOUT_S.to_string();
    let forced = cli(
        &s.b,
        b_sl,
        &["promote-cluster", "--force", "--timeout", &timeout],
        "y\n",
    );
    log(
        epoch,
        &format!("promote-cluster --force on B while A is writable: {forced}"),
    );
    assert_ne!(
        forced.code, 0,
        "promote-cluster --force on B while A is writable exits non-zero: {forced}"
    );
    assert!(
        forced.took < Duration::from_secs(REFUSED_TIMEOUT_S + 10),
        "promote-cluster --force --timeout {REFUSED_TIMEOUT_S} returned within its timeout: {forced}"
    );
    // Nothing was promoted: the command leaves site B a standby cluster, as it found it.
    let config = cli(&s.b, b_sl, &["show-config"], "");
    assert!(
        config.out.contains("standby_cluster:"),
        "site B's config has standby_cluster back after a refused promote-cluster --force: {config}"
    );
    hold(&mut s.b, Duration::from_secs(5));
    let c_to = s.since_epoch();
    assert_eq!(
        s.b.primary(),
        None,
        "site B stays a standby while A is writable"
    );
    let n_a = s.a.nodes.len();
    for (what, ss) in [
        ("pg_is_in_recovery()", s.samples()),
        ("GET /primary", s.health_samples()),
    ] {
        if let Some(bad) = ss
            .iter()
            .find(|x| x.at >= c_from && x.at <= c_to && x.writable[n_a..].contains(&Some(true)))
        {
            panic!(
                "a node of site B writable ({what}) after a refused promote-cluster --force: {}",
                bad.render(&s.names)
            );
        }
    }
    assert_eq!(
        s.a.primary(),
        Some(final_p),
        "site A's primary is unchanged"
    );
    s.stop_sampler();
    s.a.check_agents();
    s.b.check_agents();
    s.a.assert_never_two_primaries();
    s.b.assert_never_two_primaries();
}

/// A `promote-cluster --force` that site B's agents refused (site A writable, the CLI gave up: exit 1) is not
/// left armed: when site A's agents later stop answering (frozen here, as in a partition between the sites,
/// while A's PostgreSQL still runs until A's own fencing stops it), site B does not promote on its own.
#[test]
fn a_refused_forced_promotion_is_not_left_armed_for_when_the_primary_site_stops_answering() {
    let mut s = start_sites();
    let epoch = s.epoch;
    let sl = standby_leader(&s.b).expect("site B's standby leader");
    let forced = cli(
        &s.b,
        sl,
        &["promote-cluster", "--force", "--timeout", "10"],
        "y\n",
    );
    assert_ne!(
        forced.code, 0,
        "promote-cluster --force on B while A is writable exits non-zero: {forced}"
    );
    log(
        epoch,
        &format!(
            "promote-cluster --force refused (exit {}); freezing site A's agents",
            forced.code
        ),
    );
    let from = s.since_epoch();
    for i in 0..s.a.nodes.len() {
        s.a.sigstop_agent(i);
    }
    std::thread::sleep(TTL + Duration::from_secs(5));
    for i in 0..s.a.nodes.len() {
        s.a.sigcont_agent(i);
    }
    let to = s.since_epoch();
    let n_a = s.a.nodes.len();
    let samples = s.samples();
    let first = |site: std::ops::Range<usize>| {
        samples
            .iter()
            .find(|x| x.at >= from && x.writable[site.clone()].contains(&Some(true)))
            .map(|x| x.at.as_secs_f64())
    };
    let last_a = samples
        .iter()
        .rev()
        .find(|x| x.at >= from && x.writable[..n_a].contains(&Some(true)))
        .map(|x| x.at.as_secs_f64());
    log(
        epoch,
        &format!(
            "site A's agents frozen at {:.1} s, thawed at {:.1} s: site A last writable at {last_a:?} s, \
             site B first writable at {:?} s",
            from.as_secs_f64(),
            to.as_secs_f64(),
            first(n_a..n_a + s.b.nodes.len())
        ),
    );
    s.stop_sampler();
    let b_writable = samples
        .iter()
        .find(|x| x.at >= from && x.at <= to && x.writable[n_a..].contains(&Some(true)));
    if let Some(bad) = b_writable {
        panic!(
            "site B promoted on its own after its promote-cluster --force was refused, once site A's agents \
             stopped answering: {}",
            bad.render(&s.names)
        );
    }
}

#[test]
fn after_a_forced_promotion_the_lost_primary_site_comes_back_read_only() {
    let mut s = start_sites();
    let epoch = s.epoch;
    let p = s.a.primary().expect("site A's primary");
    let sl = standby_leader(&s.b).expect("site B's standby leader");
    create_table(&s.a, p);
    s.a.sql(p, "INSERT INTO e2e_writes SELECT generate_series(1, 50)")
        .expect("insert on site A's primary");
    s.b.wait_until(
        "site B's standby leader to replay 50 rows",
        REPLAY_BUDGET,
        |c| {
            c.sql_one(sl, "SELECT count(*) FROM e2e_writes")
                .ok()
                .filter(|n| n == "50")
        },
    );

    // Site A lost whole: agents, postmasters, then its etcd.
    for i in 0..s.a.nodes.len() {
        s.a.crash_host(i);
    }
    s.a.kill_etcd();
    log(epoch, "site A crashed whole (agents, PostgreSQL, etcd)");
    let forced = cli(&s.b, sl, &["promote-cluster", "--force"], "y\n");
    log(epoch, &format!("promote-cluster --force on B: {forced}"));
    assert_eq!(forced.code, 0, "promote-cluster --force on B: {forced}");
    let primary =
        s.b.wait_until("site B's primary", CONVERGE_BUDGET, |c| c.primary());
    assert_eq!(primary, sl, "site B's standby leader is promoted");
    let n: i64 =
        s.b.sql_one(sl, "SELECT count(*) FROM e2e_writes")
            .expect("count")
            .parse()
            .expect("a number");
    assert_eq!(n, 50, "every row site A had sent");

    // Site A comes back: its etcd, then its agents.
    s.a.restart_etcd();
    let back = s.since_epoch();
    for i in 0..s.a.nodes.len() {
        s.a.start_agent(i);
    }
    log(epoch, "site A's etcd and agents started again");
    let a_back = s.a.epoch.elapsed();
    hold(&mut s.a, 3 * TTL);
    let until = s.since_epoch();
    s.b.check_agents();
    let n_a = s.a.nodes.len();
    let samples = s.samples();
    if let Some(bad) = samples
        .iter()
        .find(|x| x.at >= back && x.writable[..n_a].contains(&Some(true)))
    {
        panic!(
            "a node of site A writable after it came back: {}",
            bad.render(&s.names)
        );
    }
    if let Some(bad) =
        s.a.health_samples()
            .iter()
            .find(|x| x.at >= a_back && x.writable.contains(&Some(true)))
    {
        panic!(
            "a node of site A answered 200 on GET /primary after it came back: at {:.2} s {:?}",
            bad.at.as_secs_f64(),
            bad.writable
        );
    }
    let b_col = n_a + sl;
    let b_down: Vec<&Sample> = samples
        .iter()
        .filter(|x| x.at >= back && x.at <= until && x.writable[b_col] == Some(false))
        .collect();
    assert!(
        b_down.is_empty(),
        "site B's primary {} answered in recovery after site A came back: {}",
        s.b.nodes[sl].name,
        b_down[0].render(&s.names)
    );
    assert_eq!(s.b.primary(), Some(sl), "site B is still writable");
    s.b.sql(sl, "INSERT INTO e2e_writes VALUES (51)")
        .expect("site B takes writes");
    log(
        epoch,
        &format!(
            "for {:.0} s after site A came back: no node of A writable, B's primary writable",
            (until - back).as_secs_f64()
        ),
    );
    s.stop_sampler();
    s.b.assert_never_two_primaries();
    s.a.assert_never_two_primaries();
}
