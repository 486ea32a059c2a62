//! The commands that change the cluster, each one request to a member's REST API (the leader first):
//! `pause`/`resume` (`PATCH /config`), `switchover`, `failover`; `restart` and `reinit` go to the named
//! member's own API (`edit-config` is in `edit.rs`).
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::prompt::confirm;
use super::rest::{targets, Target};
use super::{CliError, Ctx};
use crate::dcs::records::member_from_record;
use crate::dcs::rfc3339::parse_rfc3339_ms;
use crate::dcs::ClusterSnapshot;
use crate::ha::{admit, AdmissionView, Gate, Inadmissible, NodeName, OperatorChange};

/// `PATCH /config` answers once the store is written.
pub(super) const CONFIG_TIMEOUT: Duration = Duration::from_secs(15);
/// The API answers a switchover once it happened or after `2 * max(10, loop_wait)` s, as Patroni's does.
const SWITCHOVER_TIMEOUT: Duration = Duration::from_secs(90);
/// `--wait` gives the members this long to report the new pause state.
const WAIT_LIMIT: Duration = Duration::from_secs(30);
const WAIT_POLL: Duration = Duration::from_secs(1);
/// The agent answers a restart once PostgreSQL is back (it waits up to 120 s), a reinit once the clone began.
const NODE_ACTION_TIMEOUT: Duration = Duration::from_secs(150);

/// What `restart`, `reinit` and `flush NODE restart` ask a member for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeAction {
    /// `POST /restart`: restart PostgreSQL in its current role, now or at `scheduled` (ISO 8601 with a
    /// time zone; `now` or empty means now).
    Restart {
        scheduled: Option<String>,
        pending: bool,
        pg_version: Option<String>,
    },
    /// `DELETE /restart`: forget the scheduled restart (no confirmation, as patronictl's `flush`).
    FlushRestart,
    /// `POST /reinitialize`: throw the data away and clone it again from the leader.
    Reinitialize,
}

/// `restart NODE` / `reinit NODE`: the request goes to NODE's own REST API (its `api_url` in the store).
pub async fn node_action(
    ctx: &Ctx,
    node: String,
    action: NodeAction,
    force: bool,
) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let scope = &ctx.config.scope;
    if !snapshot.members.contains_key(&node) {
        return Err(CliError::refused(format!(
            "{node} is not a member of cluster {scope}"
        )));
    }
    let to: Vec<Target> = targets(&snapshot, Some(&node))
        .into_iter()
        .filter(|t| t.name == node)
        .collect();
    if to.is_empty() {
        return Err(CliError::unavailable(format!(
            "{node} publishes no usable REST API address (api_url) in the store"
        )));
    }
    let (verb, method, path, body) = match &action {
        NodeAction::Restart {
            scheduled,
            pending,
            pg_version,
        } => {
            let mut body = match restart_schedule(scheduled.as_deref())? {
                Some(at) => json!({ "schedule": at }),
                None => json!({}),
            };
            if *pending {
                body["restart_pending"] = json!(true);
            }
            if let Some(v) = pg_version {
                body["postgres_version"] = json!(v);
            }
            ("restart", Method::POST, "/restart", Some(body))
        }
        NodeAction::FlushRestart => (
            "flush the scheduled restart",
            Method::DELETE,
            "/restart",
            None,
        ),
        NodeAction::Reinitialize => (
            "reinitialize",
            Method::POST,
            "/reinitialize",
            Some(json!({"force": force})),
        ),
    };
    let when = match body.as_ref().and_then(|b| b.get("schedule")) {
        Some(at) => format!(" at {}", at.as_str().unwrap_or_default()),
        None => String::new(),
    };
    confirm(
        &format!("Are you sure you want to {verb} member {node} of cluster {scope}{when}?"),
        force,
    )?;
    let message = ctx
        .rest
        .first_reachable(&to, method, path, body.as_ref(), NODE_ACTION_TIMEOUT)
        .await?
        .accepted(verb)?;
    println!("Success: {verb} on member {node}: {}", message.trim());
    Ok(())
}

/// `--scheduled`: `None` (or `now`) restarts now; a time must carry a time zone (exit 64 otherwise, as the
/// API would refuse it with 400).
pub fn restart_schedule(scheduled: Option<&str>) -> Result<Option<String>, CliError> {
    let Some(s) = scheduled
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "now")
    else {
        return Ok(None);
    };
    parse_rfc3339_ms(s)
        .map_err(|e| CliError::usage(format!("--scheduled: {e}; e.g. 2030-01-01T12:00+00:00")))?;
    Ok(Some(s.to_string()))
}

/// `pause` (`on`) or `resume`: `PATCH /config` with `{"pause": true}` or `{"pause": null}`.
pub async fn pause(ctx: &Ctx, on: bool, wait: bool) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    match (on, snapshot.cluster.config.pause) {
        (true, true) => return Err(CliError::refused("Cluster is already paused")),
        (false, false) => return Err(CliError::refused("Cluster is not paused")),
        _ => {}
    }
    let leader = snapshot
        .cluster
        .leader_name()
        .map(|n| n.as_str().to_string());
    let to = targets(&snapshot, leader.as_deref());
    let body = if on {
        json!({"pause": true})
    } else {
        json!({"pause": null})
    };
    let action = if on { "pause" } else { "resume" };
    ctx.rest
        .first_reachable(&to, Method::PATCH, "/config", Some(&body), CONFIG_TIMEOUT)
        .await?
        .accepted(action)?;
    println!(
        "Success: cluster management is {}",
        if on { "paused" } else { "resumed" }
    );
    if wait {
        wait_for_pause(ctx, &to, on).await?;
    }
    Ok(())
}

/// Poll every member's `GET /patroni` until each reports the pause state `on` (or the limit passes). A
/// member whose agent does not answer (stopped, its PostgreSQL perhaps still running, as pause allows) or
/// whose member key is gone from the store (its session or lease expired) is reported, not waited for:
/// patronictl reads the member keys, and an agent that is gone stops renewing its own.
async fn wait_for_pause(ctx: &Ctx, to: &[Target], on: bool) -> Result<(), CliError> {
    let state = if on { "pause" } else { "resume" };
    println!("Waiting for every member to {state}...");
    let until = crate::clock::now() + WAIT_LIMIT;
    loop {
        let present = ctx.store.read().await.ok().map(|s| s.members);
        let mut behind = Vec::new();
        let mut gone = Vec::new();
        for t in to {
            if present.as_ref().is_some_and(|m| !m.contains_key(&t.name)) {
                gone.push(format!("{} (its member key expired)", t.name));
                continue;
            }
            match ctx.rest.get_json(t, "/patroni").await {
                None => gone.push(format!("{} (its agent does not answer)", t.name)),
                Some(v) if v.get("pause").and_then(Value::as_bool).unwrap_or(false) == on => {}
                Some(_) => behind.push(t.name.clone()),
            }
        }
        if behind.is_empty() {
            if gone.is_empty() {
                println!("Success: every member reports that it has {state}d");
            } else {
                println!(
                    "Success: every running member reports that it has {state}d; not waited for: {}",
                    gone.join(", ")
                );
            }
            return Ok(());
        }
        if crate::clock::now() + WAIT_POLL > until {
            return Err(CliError::refused(format!(
                "after {} s these members do not yet report that they {state}d: {}",
                WAIT_LIMIT.as_secs(),
                behind.join(", ")
            )));
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// `POST /switchover` to the leader: `{"leader", "candidate"?, "scheduled_at"?}`.
pub async fn switchover(
    ctx: &Ctx,
    expected_leader: Option<String>,
    candidate: Option<String>,
    scheduled: Option<String>,
    force: bool,
) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let scope = &ctx.config.scope;
    let expected_leader = expected_leader.map(NodeName::new);
    let candidate = candidate.map(NodeName::new);
    let change = OperatorChange::Switchover {
        leader: expected_leader.as_ref(),
        candidate: candidate.as_ref(),
        scheduled_at_ms: None,
    };
    admission(&snapshot, change).map_err(|why| refusal(&why, scope))?;
    let leader = snapshot
        .cluster
        .leader_name()
        .map(|n| n.as_str().to_string())
        .expect("admitted at the CLI's gate: the cluster has a leader");
    let scheduled = scheduled.filter(|s| !s.trim().is_empty() && s.trim() != "now");
    if let Some(s) = &scheduled {
        parse_rfc3339_ms(s).map_err(|e| {
            CliError::usage(format!("--scheduled: {e}; e.g. 2030-01-01T12:00+00:00"))
        })?;
    }
    confirm(
        &format!("Are you sure you want to switchover cluster {scope}, demoting current leader {leader}?"),
        force,
    )?;
    let mut body = json!({"leader": leader});
    if let Some(c) = &candidate {
        body["candidate"] = json!(c.as_str());
    }
    if let Some(s) = &scheduled {
        body["scheduled_at"] = json!(s);
    }
    let to = targets(&snapshot, Some(&leader));
    let message = ctx
        .rest
        .first_reachable(
            &to,
            Method::POST,
            "/switchover",
            Some(&body),
            SWITCHOVER_TIMEOUT,
        )
        .await?
        .accepted("switchover")?;
    println!("{}", message.trim());
    Ok(())
}

/// `ha::admit` at the CLI's gate: what patronictl refuses before it sends a request.
fn admission(snapshot: &ClusterSnapshot, change: OperatorChange<'_>) -> Result<(), Inadmissible> {
    let members: Vec<_> = snapshot
        .members
        .iter()
        .map(|(name, rec)| member_from_record(name, rec))
        .collect();
    let view = AdmissionView {
        cluster: Some(&snapshot.cluster),
        members: &members,
        wall_ms: 0,
        max_lag_bytes: 0,
    };
    admit(Gate::Cli, &view, change)
}

/// The CLI's words for a refusal at its gate (the API's texts for the rest, which it never meets).
fn refusal(why: &Inadmissible, scope: &str) -> CliError {
    CliError::refused(match why {
        Inadmissible::NoLeader { .. } => format!(
            "cluster {scope} has no leader: a switchover needs one (use failover --candidate NAME)"
        ),
        Inadmissible::NotTheLeader { named, leader } => {
            format!("{named} is not the leader of cluster {scope} ({leader} is)")
        }
        Inadmissible::NoOtherMembers { leader } => format!(
            "No candidates found to switchover to: cluster {scope} has no member but its leader {leader}"
        ),
        Inadmissible::CandidateIsLeader { candidate } => {
            format!("{candidate} is already the leader of cluster {scope}")
        }
        Inadmissible::CandidateNotMember { candidate } => {
            format!("{candidate} is not a member of cluster {scope}")
        }
        other => other.to_string(),
    })
}

/// patronictl's question for a failover candidate, listing the members that may be promoted.
fn ask_candidate(snapshot: &ClusterSnapshot, force: bool) -> Result<String, CliError> {
    let leader = snapshot.cluster.leader_name().map(|n| n.as_str());
    let names: Vec<&str> = snapshot
        .members
        .iter()
        .filter(|(name, m)| {
            Some(name.as_str()) != leader && m.tags.get("nofailover") != Some(&true.into())
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if names.is_empty() {
        return Err(CliError::refused("No candidates found to failover to"));
    }
    let answer = if force {
        String::new()
    } else {
        super::prompt::ask("Candidate", &format!("{names:?}"), "pass --candidate NAME")?
    };
    if answer.is_empty() {
        return Err(CliError::refused(
            "Failover could be performed only to a specific candidate",
        ));
    }
    Ok(answer)
}

/// `POST /failover` with `{"candidate"}`, to the leader if there is one, else to the candidate first.
/// Without `--candidate` it is asked for (patronictl 4.x); none given is refused before anything is sent.
pub async fn failover(ctx: &Ctx, candidate: Option<String>, force: bool) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let scope = &ctx.config.scope;
    let candidate = match candidate {
        Some(c) => c,
        None => ask_candidate(&snapshot, force)?,
    };
    let change = OperatorChange::Failover {
        candidate: &NodeName::new(candidate.as_str()),
    };
    admission(&snapshot, change).map_err(|why| refusal(&why, scope))?;
    let leader = snapshot
        .cluster
        .leader_name()
        .map(|n| n.as_str().to_string());
    let question = match &leader {
        Some(l) => format!(
            "Are you sure you want to failover cluster {scope}, demoting current leader {l}?"
        ),
        None => format!("Are you sure you want to failover cluster {scope} to {candidate}?"),
    };
    confirm(&question, force)?;
    let first = leader.as_deref().unwrap_or(&candidate);
    let to = targets(&snapshot, Some(first));
    let message = ctx
        .rest
        .first_reachable(
            &to,
            Method::POST,
            "/failover",
            Some(&json!({"candidate": candidate})),
            SWITCHOVER_TIMEOUT,
        )
        .await?
        .accepted("failover")?;
    println!("{}", message.trim());
    Ok(())
}
