//! Patroni's callbacks end to end (issue 12), on real agents, PostgreSQL 15 and etcd: a script that appends
//! its arguments to a file records, across bootstrap, a switchover and a crash failover, the sequence
//! Patroni 4 produces (written down below from its source); a slow callback is killed by the next one; a
//! hanging `pre_promote` is killed and its key given up within the ttl; a change in the `config` key's
//! parameters is followed by on_reload on every member.
//!
//! Run with `cargo test --test e2e_callbacks -- --nocapture` (as root or as `postgres`).
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::cluster::{Cluster, StoreKind, NODES};
use tenure::demo::local::{NodeSpec, RunAs};

use common::*;

/// `<node> <action> <role> <scope>` begin/end lines, stamped; a `slow_<action>` file in the node's directory
/// makes that action sleep 30 s once (it removes the file first).
const CALLBACK: &str = r#"#!/bin/sh
echo "$(date +%s.%N) $1 $2 $3 $4 begin" >> "$LOG"
if [ -e "$DIR/slow_$2" ]; then rm -f "$DIR/slow_$2"; sleep 30; fi
echo "$(date +%s.%N) $1 $2 $3 $4 end" >> "$LOG"
"#;

/// `pre_promote`: a `hang` file in the node's directory makes it hang once (an hour).
const PRE_PROMOTE: &str = r#"#!/bin/sh
echo "$(date +%s.%N) $1 pre_promote - - begin" >> "$LOG"
if [ -e "$DIR/hang" ]; then rm -f "$DIR/hang"; sleep 3600; fi
echo "$(date +%s.%N) $1 pre_promote - - end" >> "$LOG"
"#;

fn log_path(spec: &NodeSpec) -> PathBuf {
    spec.dir.parent().expect("root").join("callbacks.log")
}

/// Write node `spec`'s scripts and point its config at them.
fn hook_up(spec: &mut NodeSpec) {
    let owner = RunAs::detect().expect("run as").owner();
    std::fs::create_dir_all(&spec.dir).expect("node dir");
    let (log, dir) = (log_path(spec), spec.dir.clone());
    let env = format!("#!/bin/sh\nLOG={} DIR={}\n", log.display(), dir.display());
    for (name, body) in [("cb.sh", CALLBACK), ("pre_promote.sh", PRE_PROMOTE)] {
        let path = dir.join(name);
        let text = body.replacen("#!/bin/sh\n", &env, 1);
        std::fs::write(&path, text).expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::fs::write(&log, "").expect("log");
    if let Some((uid, gid)) = owner {
        for p in [&dir, &log, &dir.join("cb.sh"), &dir.join("pre_promote.sh")] {
            nix::unistd::chown(p.as_path(), Some(uid), Some(gid)).expect("chown");
        }
    }
    let (cb, name) = (dir.join("cb.sh"), spec.name.clone());
    let cb = format!("{} {name}", cb.display());
    spec.postgresql_extra = format!(
        "  callbacks:\n    on_start: {cb}\n    on_stop: {cb}\n    on_restart: {cb}\n    on_reload: {cb}\n    \
         on_role_change: {cb}\n  pre_promote: {} {name}\n  before_stop: {cb} before_stop - -\n",
        dir.join("pre_promote.sh").display()
    );
}

/// One line of the log.
#[derive(Clone, Debug)]
struct Line {
    at_s: f64,
    node: String,
    what: String,
    end: bool,
}

fn read_log(path: &Path) -> Vec<Line> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 6).then(|| Line {
                at_s: w[0].parse().unwrap_or(0.0),
                node: w[1].to_string(),
                what: format!("{} {}", w[2], w[3]),
                end: w[5] == "end",
            })
        })
        .collect()
}

/// The callbacks node `n` started since line `from`, in order ("on_stop demoted", ...).
fn begun(lines: &[Line], from: usize, n: &str) -> Vec<String> {
    lines[from..]
        .iter()
        .filter(|l| l.node == n && !l.end)
        .map(|l| l.what.clone())
        .collect()
}

fn ended(lines: &[Line], from: usize, n: &str, what: &str) -> bool {
    lines[from..]
        .iter()
        .any(|l| l.node == n && l.end && l.what == what)
}

/// Wait until node `n` has begun exactly `want` since `from` (and a little longer, to see nothing more).
fn expect_seq(c: &mut Cluster, path: &Path, from: usize, i: usize, want: &[&str]) {
    let n = c.nodes[i].name.clone();
    let n = n.as_str();
    let got = c.wait_until(&format!("{n}'s callbacks {want:?}"), REJOIN_BUDGET, |_| {
        let got = begun(&read_log(path), from, n);
        (got.len() >= want.len()).then_some(got)
    });
    hold(c, Duration::from_secs(2));
    let settled = begun(&read_log(path), from, n);
    assert_eq!(settled, want, "{n}: callbacks (first seen {got:?})");
}

/// The agent's log line for a vetoed promotion (its Reason), printed as it gives the key up.
const VETOED: &str = "Promotion cancelled because the pre-promote script failed";

#[test]
fn callbacks_across_switchover_and_crash_failover_slow_killed_hanging_pre_promote() {
    let t0 = Instant::now();
    let mut c = Cluster::start_full(StoreKind::Etcd, 1, |_, a| a.clone(), hook_up);
    let path = log_path(&c.nodes[0]);
    let name = |c: &Cluster, i: usize| c.nodes[i].name.clone();
    let p = c.wait_healthy(CONVERGE_BUDGET);

    // Bootstrap (Patroni's post_bootstrap and a replica's first start): on_start with the role it runs as.
    expect_seq(&mut c, &path, 0, p, &["on_start primary"]);
    for r in others(p) {
        expect_seq(&mut c, &path, 0, r, &["on_start replica"]);
    }

    // Switchover p -> cand. Patroni 4: the old primary runs before_stop, then on_stop with "demoted"
    // (its shutdown checkpoint reached the candidate), then, started as a replica, on_role_change replica
    // only; the candidate runs pre_promote, then on_role_change primary; the third member, re-pointed by a
    // reload (PostgreSQL 13+), on_reload replica. The old primary's on_stop sleeps: on_role_change kills it.
    let cand = others(p).next().expect("a replica");
    let third = others(p).find(|i| *i != cand).expect("a third");
    std::fs::write(c.nodes[p].dir.join("slow_on_stop"), "").expect("slow marker");
    let mark = read_log(&path).len();
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}"}}"#,
        name(&c, p),
        name(&c, cand)
    );
    let (status, resp) = api(&c, p, "POST", "/switchover", &body);
    assert!(
        status == 200 || status == 202,
        "switchover: {status} {resp}"
    );
    c.wait_until(
        "the candidate to be primary",
        Duration::from_secs(30),
        |c| (c.primary() == Some(cand)).then_some(()),
    );
    wait_rejoined(&mut c, p, cand);
    let old = name(&c, p);
    expect_seq(
        &mut c,
        &path,
        mark,
        p,
        &["before_stop -", "on_stop demoted", "on_role_change replica"],
    );
    expect_seq(
        &mut c,
        &path,
        mark,
        cand,
        &["pre_promote -", "on_role_change primary"],
    );
    expect_seq(&mut c, &path, mark, third, &["on_reload replica"]);
    let lines = read_log(&path);
    assert!(
        ended(&lines, mark, &old, "before_stop -"),
        "before_stop ran to its end first"
    );
    assert!(
        !ended(&lines, mark, &old, "on_stop demoted"),
        "the slow on_stop was killed by on_role_change: {lines:#?}"
    );
    assert!(ended(&lines, mark, &old, "on_role_change replica"));
    log(
        &c,
        &format!(
            "switchover sequence as Patroni's ({:.1} s in)",
            t0.elapsed().as_secs_f64()
        ),
    );

    // Crash failover of cand, with the old primary p the only member allowed to promote (the third gets
    // nofailover through SIGHUP) and p's pre_promote hanging once. Patroni 4 would hold the key for as
    // long as the script hangs; tenure kills it at the decision's deadline (retry_timeout), gives the key
    // up and backs off for a ttl, then promotes on the next try: pre_promote, pre_promote, on_role_change
    // primary. The third, re-pointed: on_reload replica. cand, restarted: on_start replica.
    let cfg = c.nodes[third].config_path();
    let mut text = std::fs::read_to_string(&cfg).expect("config");
    text.push_str("tags:\n  nofailover: true\n");
    std::fs::write(&cfg, text).expect("config");
    c.kill_agent(third, Signal::SIGHUP);
    let agent_log = |c: &Cluster, i: usize| std::fs::read_to_string(c.nodes[i].agent_log());
    c.wait_until("the third's SIGHUP reload", Duration::from_secs(20), |c| {
        agent_log(c, third)
            .ok()
            .filter(|t| t.contains("SIGHUP: config reloaded"))
            .map(|_| ())
    });
    std::fs::write(c.nodes[p].dir.join("hang"), "").expect("hang marker");
    let mark = read_log(&path).len();
    c.crash_host(cand);
    let hung = c.wait_until("p's pre_promote to start", Duration::from_secs(40), |_| {
        read_log(&path)[mark..]
            .iter()
            .find(|l| l.node == old && l.what == "pre_promote -")
            .map(|_| Instant::now())
    });
    let vetoed_before = agent_log(&c, p).unwrap_or_default().matches(VETOED).count();
    c.wait_until("the key given up", TTL, |c| {
        let now = agent_log(c, p).unwrap_or_default().matches(VETOED).count();
        (now > vetoed_before).then_some(())
    });
    let released_s = hung.elapsed().as_secs_f64();
    log(
        &c,
        &format!("hanging pre_promote: key given up {released_s:.1} s after it started"),
    );
    assert!(released_s < TTL.as_secs_f64(), "released within the ttl");
    c.wait_until("p to be primary", Duration::from_secs(40), |c| {
        (c.primary() == Some(p)).then_some(())
    });
    expect_seq(
        &mut c,
        &path,
        mark,
        p,
        &["pre_promote -", "pre_promote -", "on_role_change primary"],
    );
    let lines = read_log(&path);
    let tries: Vec<&Line> = lines[mark..]
        .iter()
        .filter(|l| l.node == old && l.what == "pre_promote -" && !l.end)
        .collect();
    let gap_s = tries[1].at_s - tries[0].at_s;
    log(
        &c,
        &format!("second pre_promote {gap_s:.1} s after the first (ttl back-off)"),
    );
    assert!(
        gap_s >= TTL.as_secs_f64() - 1.0,
        "backed off for a ttl: {gap_s}"
    );
    assert_eq!(
        lines[mark..]
            .iter()
            .filter(|l| l.node == old && l.what == "pre_promote -" && l.end)
            .count(),
        1,
        "the hung pre_promote never reached its end (killed): {lines:#?}"
    );
    expect_seq(&mut c, &path, mark, third, &["on_reload replica"]);
    c.start_agent(cand);
    wait_rejoined(&mut c, cand, p);
    expect_seq(&mut c, &path, mark, cand, &["on_start replica"]);

    // A changed parameter in the `config` key: every member reloads PostgreSQL, then on_reload <role>.
    let mark = read_log(&path).len();
    let (code, out, err) = tenure_cli(
        &c,
        p,
        &["edit-config", "--set", "postgresql.parameters.work_mem=8MB"],
    );
    assert_eq!(code, 0, "edit-config: {out} {err}");
    expect_seq(&mut c, &path, mark, p, &["on_reload primary"]);
    for r in others(p) {
        expect_seq(&mut c, &path, mark, r, &["on_reload replica"]);
    }
    c.assert_never_two_primaries();
    assert_eq!(NODES, 3);
    log(&c, &format!("done in {:.1} s", t0.elapsed().as_secs_f64()));
}
