//! Quiet logs (issue 14 item 3), on real agents, PostgreSQL 15 and etcd: an idle healthy cluster writes at
//! most a heartbeat a minute per agent at INFO, and a switchover or a crashed replica is still said at INFO.
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;
use crate::support::cluster::{Cluster, NODES};

/// How long the idle cluster is watched: more than the one-minute heartbeat.
const IDLE: Duration = Duration::from_secs(70);

/// Bootstrap's own lines (replicas catching up, the first heartbeats) have passed by then.
const SETTLE: Duration = Duration::from_secs(10);

/// The length of node `i`'s agent log: where the lines of what follows begin.
fn log_len(c: &Cluster, i: usize) -> usize {
    std::fs::read_to_string(c.nodes[i].agent_log())
        .map(|t| t.len())
        .unwrap_or(0)
}

/// The INFO lines node `i`'s agent wrote past byte `from` of its log.
fn info_lines(c: &Cluster, i: usize, from: usize) -> Vec<String> {
    let text = std::fs::read_to_string(c.nodes[i].agent_log()).unwrap_or_default();
    text.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" INFO "))
        .map(str::to_string)
        .collect()
}

/// Idle for 70 s after bootstrap settles: at most two INFO lines per agent (a heartbeat a minute). Then a
/// switchover shows INFO cycle lines on the old primary and the candidate, and a SIGKILLed replica
/// postmaster one on that replica's agent.
pub fn idle_cluster_is_quiet(mut c: Cluster) {
    let p = c.wait_healthy(CONVERGE_BUDGET);
    hold(&mut c, SETTLE);
    let marks: Vec<usize> = (0..NODES).map(|i| log_len(&c, i)).collect();
    hold(&mut c, IDLE);
    for (i, mark) in marks.iter().enumerate() {
        let lines = info_lines(&c, i, *mark);
        log(
            &c,
            &format!(
                "{}: {} INFO lines in {} s idle",
                c.nodes[i].name,
                lines.len(),
                IDLE.as_secs()
            ),
        );
        assert!(
            lines.len() <= 2,
            "{} wrote {} INFO lines in {} s of an idle cluster:\n{}",
            c.nodes[i].name,
            lines.len(),
            IDLE.as_secs(),
            lines.join("\n")
        );
        assert!(
            lines.iter().all(|l| l.contains("heartbeat")),
            "{}: only heartbeats while idle:\n{}",
            c.nodes[i].name,
            lines.join("\n")
        );
    }

    let cand = others(p).next().expect("a replica");
    let marks: Vec<usize> = (0..NODES).map(|i| log_len(&c, i)).collect();
    let body = format!(
        r#"{{"leader":"{}","candidate":"{}"}}"#,
        c.nodes[p].name, c.nodes[cand].name
    );
    let (status, resp) = api(&c, p, "POST", "/switchover", &body);
    assert_eq!(status, 200, "switchover: {resp}");
    c.wait_until("the candidate primary", CONVERGE_BUDGET, |c| {
        (c.primary() == Some(cand)).then_some(())
    });
    for i in [p, cand] {
        c.wait_until("INFO cycle lines of the switchover", TTL, |c| {
            let lines = info_lines(c, i, marks[i]);
            lines.iter().any(|l| l.contains(" cycle ")).then_some(())
        });
    }
    let replica = others(cand).find(|&r| r != p).expect("the third node");
    c.wait_healthy(CONVERGE_BUDGET);
    let mark = log_len(&c, replica);
    c.kill_postmaster(replica, Signal::SIGKILL);
    c.wait_until(
        "an INFO cycle line of the crashed replica",
        CONVERGE_BUDGET,
        |c| {
            let lines = info_lines(c, replica, mark);
            lines
                .iter()
                .any(|l| l.contains(" cycle ") && l.contains("StartReplica"))
                .then_some(())
        },
    );
    c.wait_healthy(CONVERGE_BUDGET);
    c.assert_never_two_primaries();
}
