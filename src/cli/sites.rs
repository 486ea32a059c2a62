//! `demote-cluster` and `promote-cluster` (Patroni 4.1's names): a planned site switchover with a handover
//! token, and the forced promotion of a standby site whose primary site is lost.
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::control::CONFIG_TIMEOUT;
use super::prompt::{confirm, type_in};
use super::rest::targets;
use super::{CliError, Ctx};
use crate::config::sites::parse_token;
use crate::dcs::ClusterSnapshot;
use crate::ha::{Handover, Lsn, NodeName, Timeline};

const POLL: Duration = Duration::from_secs(1);

/// What `demote-cluster` makes of this site: a standby of the named source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DemoteArgs {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub restore_command: Option<String>,
    pub primary_slot_name: Option<String>,
    pub force: bool,
    pub timeout_s: u64,
}

/// The key holder's name and its member record's role and state ("" when absent).
fn leader_role(s: &ClusterSnapshot) -> (Option<String>, String, String) {
    let name = s.cluster.leader_name().map(|n| n.as_str().to_string());
    let rec = name.as_ref().and_then(|n| s.members.get(n));
    let (role, state) = rec
        .map(|r| (r.role.clone(), r.state.clone()))
        .unwrap_or_default();
    (name, role, state)
}

/// `PATCH /config` on the leader (or any member) with `body`.
async fn patch(
    ctx: &Ctx,
    snapshot: &ClusterSnapshot,
    body: &Value,
    what: &str,
) -> Result<(), CliError> {
    let leader = snapshot
        .cluster
        .leader_name()
        .map(|n| n.as_str().to_string());
    let to = targets(snapshot, leader.as_deref());
    ctx.rest
        .first_reachable(&to, Method::PATCH, "/config", Some(body), CONFIG_TIMEOUT)
        .await?
        .accepted(what)?;
    Ok(())
}

/// Wait until the key holder reports `role` and runs, printing Patroni's progress lines; its record then.
async fn wait_for_role(
    ctx: &Ctx,
    role: &str,
    limit: Duration,
) -> Result<(String, ClusterSnapshot), CliError> {
    let until = crate::clock::now() + limit;
    loop {
        if let Ok(s) = ctx.store.read().await {
            let (name, r, state) = leader_role(&s);
            match name {
                // A standby leader that streams from its source reports `streaming`.
                Some(n) if r == role && matches!(state.as_str(), "running" | "streaming") => {
                    return Ok((n, s))
                }
                _ => println!(
                    "{} cluster is unlocked: {}, leader role: {r}, leader state: {state}",
                    super::list::now_text(),
                    s.cluster.leader.is_none()
                ),
            }
        }
        if crate::clock::now() + POLL > until {
            return Err(CliError::refused(format!(
                "the leader is not a running {role} after {} s",
                limit.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `demote-cluster`: make this site a standby of the named source, then read the handover token from the
/// demoted standby leader and wait until the source has replayed it.
pub async fn demote_cluster(ctx: &Ctx, args: &DemoteArgs) -> Result<(), CliError> {
    if args.host.is_none() && args.port.is_none() && args.restore_command.is_none() {
        return Err(CliError::usage(
            "At least --host, --port or --restore-command should be specified",
        ));
    }
    let snapshot = ctx.store.read().await?;
    let scope = &ctx.config.scope;
    match leader_role(&snapshot) {
        (None, ..) => {
            return Err(CliError::refused(
                "Cluster has no leader, demotion is not possible",
            ))
        }
        (_, r, _) if r == "standby_leader" => {
            return Err(CliError::refused(
                "Cluster is already in the required state",
            ))
        }
        _ => {}
    }
    println!("Current cluster topology");
    print!("{}", super::list::table_text(scope, &snapshot));
    confirm(
        &format!("Are you sure you want to demote {scope} cluster?"),
        args.force,
    )?;
    let mut sc = serde_json::Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            sc.insert(k.into(), v);
        }
    };
    put("host", args.host.clone().map(Value::from));
    put("port", args.port.map(Value::from));
    put(
        "primary_slot_name",
        args.primary_slot_name.clone().map(Value::from),
    );
    put(
        "restore_command",
        args.restore_command.clone().map(Value::from),
    );
    let body = json!({"standby_cluster": sc, "handover": null});
    patch(ctx, &snapshot, &body, "demote-cluster").await?;
    let limit = Duration::from_secs(args.timeout_s);
    let (leader, s) = wait_for_role(ctx, "standby_leader", limit).await?;
    println!(
        "{} cluster is successfully demoted",
        super::list::now_text()
    );
    let token = token_of(&s, &leader)?;
    let text = format!("{}:{}", token.timeline, token.lsn);
    let replayed = match (&args.host, args.port) {
        (None, None) => None,
        (host, port) => Some(remote_replayed(ctx, host.as_deref(), port, token.lsn, limit).await),
    };
    match replayed {
        Some(Err(why)) => {
            println!("handover token: {text}");
            Err(CliError::refused(format!(
                "the other site has not replayed up to {text} within {} s ({why}); promote it with \
                 `tenure promote-cluster --token {text}` once it has",
                limit.as_secs()
            )))
        }
        _ => {
            println!("handover token: {text}");
            Ok(())
        }
    }
}

/// The handover token: the demoted standby leader's timeline and the end of its last record.
fn token_of(s: &ClusterSnapshot, leader: &str) -> Result<Handover, CliError> {
    let rec = s.members.get(leader).ok_or_else(|| {
        CliError::unavailable(format!(
            "{leader} has no member key: cannot read the handover token"
        ))
    })?;
    let lsn = rec.replay_lsn.or(rec.xlog_location);
    match (rec.timeline, lsn) {
        (Some(tl), Some(lsn)) => Ok(Handover {
            timeline: Timeline(tl),
            lsn: Lsn(lsn),
        }),
        _ => Err(CliError::unavailable(format!(
            "{leader}'s member key has no timeline or replay position: cannot read the handover token"
        ))),
    }
}

/// Poll the other site's PostgreSQL (as our superuser) until it has replayed `wanted`.
async fn remote_replayed(
    ctx: &Ctx,
    host: Option<&str>,
    port: Option<u16>,
    wanted: Lsn,
    limit: Duration,
) -> Result<(), String> {
    let ep = crate::pg::Endpoint {
        name: NodeName::new("other-site"),
        host: host.unwrap_or("localhost").to_string(),
        port: port.unwrap_or(5432),
    };
    let until = crate::clock::now() + limit;
    loop {
        let ask = async {
            let client = crate::pg::probe::connect_to(&ep, &ctx.config.pg_settings().superuser)
                .await
                .map_err(|e| e.to_string())?;
            let row = client
                .query_one("SELECT pg_last_wal_replay_lsn()::text", &[])
                .await
                .map_err(|e| e.to_string())?;
            let text: Option<String> = row.get(0);
            text.ok_or("it is not a standby".to_string())?
                .parse::<Lsn>()
                .map_err(|e| e.to_string())
        };
        let last = match tokio::time::timeout(Duration::from_secs(5), ask).await {
            Ok(Ok(at)) if at >= wanted => {
                println!(
                    "the other site ({}:{}) replayed up to {at}",
                    ep.host, ep.port
                );
                return Ok(());
            }
            Ok(Ok(at)) => format!("at {at}"),
            Ok(Err(e)) => e,
            Err(_) => "no answer within 5 s".into(),
        };
        if crate::clock::now() + POLL > until {
            return Err(last);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `promote-cluster`: with the token, a planned switchover's second half; with `--force` (asked again),
/// the promotion of a standby site whose primary site is lost.
pub async fn promote_cluster(
    ctx: &Ctx,
    token: Option<&str>,
    force: bool,
    timeout_s: u64,
) -> Result<(), CliError> {
    let handover = match (token, force) {
        (Some(t), _) => Some(parse_token(t).map_err(CliError::usage)?),
        (None, true) => None,
        (None, false) => {
            return Err(CliError::usage(
                "promote-cluster needs the handover token that demote-cluster printed on the primary site \
                 (--token TIMELINE:LSN), or --force when the primary site is lost (the writes it had not \
                 sent are then lost)",
            ))
        }
    };
    let snapshot = ctx.store.read().await?;
    let scope = &ctx.config.scope;
    match leader_role(&snapshot) {
        (None, ..) => {
            return Err(CliError::refused(
                "Cluster has no leader, promotion is not possible",
            ))
        }
        (_, r, _) if r != "standby_leader" => {
            return Err(CliError::refused(
                "Cluster is already in the required state",
            ))
        }
        _ => {}
    }
    println!("Current cluster topology");
    print!("{}", super::list::table_text(scope, &snapshot));
    let body = match &handover {
        Some(h) => {
            json!({"standby_cluster": null, "handover": {"timeline": h.timeline.0, "lsn": h.lsn.to_string()}})
        }
        None => {
            println!(
                "Without a handover token the writes the primary site had not sent are lost, and the other \
                 site must never run as a primary again: turn it into a standby of this one \
                 (`tenure demote-cluster` there) before it takes writes."
            );
            let answer = type_in(&format!(
                "Are you sure you want to promote {scope} cluster without a token? [y/N]"
            ))?;
            if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
                return Err(CliError::refused("Aborted cluster promotion"));
            }
            json!({"standby_cluster": null, "handover": null})
        }
    };
    patch(ctx, &snapshot, &body, "promote-cluster").await?;
    match wait_for_role(ctx, "primary", Duration::from_secs(timeout_s)).await {
        Ok(_) => {
            println!(
                "{} cluster is successfully promoted",
                super::list::now_text()
            );
            Ok(())
        }
        Err(e) => disarm(ctx, &snapshot, e).await,
    }
}

/// The promotion did not happen in time: put `standby_cluster` back, so that it does not happen later on
/// its own (the other site answered as a primary, and may stop answering without being gone).
async fn disarm(ctx: &Ctx, before: &ClusterSnapshot, why: CliError) -> Result<(), CliError> {
    let now = ctx.store.read().await?;
    if leader_role(&now).1 == "primary" {
        println!(
            "{} cluster is successfully promoted",
            super::list::now_text()
        );
        return Ok(());
    }
    let old = before
        .config
        .as_ref()
        .and_then(|(c, _)| c.get("standby_cluster").cloned())
        .unwrap_or(Value::Null);
    patch(
        ctx,
        &now,
        &json!({"standby_cluster": old, "handover": null}),
        "promote-cluster",
    )
    .await?;
    Err(CliError::refused(format!(
        "{why}; standby_cluster was put back, nothing was promoted (the leader's log says why: the other site \
         answering as a primary, or the handover token not reached)"
    )))
}
