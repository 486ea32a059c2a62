//! The commands that pick members by name or role, as patronictl does: `reload` (`POST /reload` on each),
//! `dsn` (a member's `host=... port=...`) and `version` (each member's `/patroni`).
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::prompt::confirm;
use super::rest::targets;
use super::{CliError, Ctx};
use crate::dcs::records::host_port;
use crate::dcs::ClusterSnapshot;

/// A member's API answers `POST /reload` at once (the agent re-reads its file on its next loop).
const RELOAD_TIMEOUT: Duration = Duration::from_secs(15);

/// patronictl's `--role` choices (`master` is `primary`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Leader,
    #[value(alias = "master")]
    Primary,
    StandbyLeader,
    Replica,
    Standby,
    Any,
}

impl Role {
    /// patronictl's word, as its messages print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Primary => "primary",
            Role::StandbyLeader => "standby-leader",
            Role::Replica => "replica",
            Role::Standby => "standby",
            Role::Any => "any",
        }
    }
}

/// patronictl's `get_all_members`: the leader (when its key is held and its member's role fits) for the
/// leader roles, every other member for `replica`/`standby`, every member for `any`; by name.
pub fn with_role(snapshot: &ClusterSnapshot, role: Role) -> Vec<String> {
    let leader = snapshot
        .cluster
        .leader_name()
        .map(|n| n.as_str().to_string());
    match role {
        Role::Leader | Role::Primary | Role::StandbyLeader => {
            let Some(leader) = leader else {
                return Vec::new();
            };
            let pg_role = snapshot.members.get(&leader).map(|m| m.role.as_str());
            let fits = match role {
                Role::Leader => true,
                Role::StandbyLeader => !matches!(pg_role, Some("primary" | "master")),
                _ => pg_role != Some("standby_leader"),
            };
            if fits {
                vec![leader]
            } else {
                Vec::new()
            }
        }
        Role::Any => snapshot.members.keys().cloned().collect(),
        Role::Replica | Role::Standby => snapshot
            .members
            .keys()
            .filter(|m| Some(*m) != leader.as_ref())
            .cloned()
            .collect(),
    }
}

/// patronictl's `get_any_member`: the member named (any role), else the first with `role` (the leader by
/// default).
fn any_member(
    snapshot: &ClusterSnapshot,
    role: Option<Role>,
    member: Option<&str>,
) -> Option<String> {
    let role = match member {
        Some(_) => Role::Any,
        None => role.unwrap_or(Role::Leader),
    };
    with_role(snapshot, role)
        .into_iter()
        .find(|m| member.is_none_or(|name| m == name))
}

/// `tenure dsn`: `host=H port=P` of the leader, of a member with `role`, or of `member`.
pub async fn dsn(ctx: &Ctx, role: Option<Role>, member: Option<String>) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let found = any_member(&snapshot, role, member.as_deref())
        .and_then(|m| snapshot.members.get(&m))
        .map(|rec| host_port(&rec.conn_url));
    let Some((Some(host), port)) = found else {
        return Err(CliError::refused("Can not find a suitable member"));
    };
    println!("host={host} port={}", port.unwrap_or(5432));
    Ok(())
}

/// `tenure reload CLUSTER [MEMBER...]`: the members (those with `role`, narrowed to the names given), the
/// list shown and the question asked as patronictl does, then `POST /reload` on each member's own API.
pub async fn reload(
    ctx: &Ctx,
    names: Vec<String>,
    role: Role,
    force: bool,
) -> Result<(), CliError> {
    let snapshot = ctx.store.read().await?;
    let scope = &ctx.config.scope;
    let candidates = with_role(&snapshot, role);
    if names.is_empty() && candidates.is_empty() {
        return Err(CliError::refused(format!(
            "{scope} cluster doesn't have any members"
        )));
    }
    print!("{}", super::list::table_text(scope, &snapshot));
    let chosen: Vec<String> = if names.is_empty() {
        candidates
    } else {
        candidates
            .into_iter()
            .filter(|c| names.contains(c))
            .collect()
    };
    if chosen.is_empty() {
        return Err(CliError::refused(format!(
            "No {} among provided members",
            role.as_str()
        )));
    }
    confirm(
        &format!(
            "Are you sure you want to reload members {}?",
            chosen.join(", ")
        ),
        force,
    )?;
    let loop_wait_s = snapshot
        .config
        .as_ref()
        .and_then(|(c, _)| c.get("loop_wait").and_then(Value::as_u64))
        .unwrap_or(ctx.config.timing().loop_wait_ms / 1000);
    let (mut refused, mut unreachable) = (Vec::new(), Vec::new());
    for name in &chosen {
        let to: Vec<_> = targets(&snapshot, Some(name))
            .into_iter()
            .filter(|t| t.name == *name)
            .collect();
        if to.is_empty() {
            println!(
                "Failed: reload for member {name}: it publishes no REST API address (api_url)"
            );
            unreachable.push(name.clone());
            continue;
        }
        match ctx
            .rest
            .first_reachable(&to, Method::POST, "/reload", None, RELOAD_TIMEOUT)
            .await
        {
            Ok(a) if a.status == 200 => println!("No changes to apply on member {name}"),
            Ok(a) if a.status == 202 => println!(
                "Reload request received for member {name} and will be processed within {loop_wait_s} seconds"
            ),
            Ok(a) => {
                println!(
                    "Failed: reload for member {name}, status code={}, ({})",
                    a.status,
                    a.body.trim()
                );
                refused.push(name.clone());
            }
            Err(e) => {
                println!("Failed: reload for member {name}: {e}");
                unreachable.push(name.clone());
            }
        }
    }
    match (refused.is_empty(), unreachable.is_empty()) {
        (true, true) => Ok(()),
        (false, _) => Err(CliError::refused(format!(
            "reload refused by {}",
            refused.join(", ")
        ))),
        (true, false) => Err(CliError::unavailable(format!(
            "reload did not reach {}",
            unreachable.join(", ")
        ))),
    }
}

/// `tenure version`'s first line.
pub fn version_line() -> String {
    format!("tenure version {}", env!("CARGO_PKG_VERSION"))
}

/// `tenure version CLUSTER [MEMBER...]`: this program's version, then each member's, as its `GET /patroni`
/// reports them (`patroni.version`, `server_version`), in patronictl's words.
pub async fn version(ctx: &Ctx, names: Vec<String>) -> Result<(), CliError> {
    println!("{}\n", version_line());
    let snapshot = ctx.store.read().await?;
    for t in targets(&snapshot, None) {
        if !names.is_empty() && !names.contains(&t.name) {
            continue;
        }
        match ctx.rest.get_json(&t, "/patroni").await {
            Some(v) => {
                let version = match &v["patroni"]["version"] {
                    Value::String(s) => s.clone(),
                    Value::Null => "None".into(),
                    other => other.to_string(),
                };
                let pg = v["server_version"]
                    .as_u64()
                    .map(|n| format!(" PostgreSQL {}", pg_version(n)))
                    .unwrap_or_default();
                println!("{}: Patroni {version}{pg}", t.name);
            }
            None => println!(
                "{}: failed to get version: no answer from {}patroni",
                t.name, t.base
            ),
        }
    }
    Ok(())
}

/// patronictl's `format_pg_version`: 90624 -> 9.6.24, 150004 -> 15.4.
pub fn pg_version(n: u64) -> String {
    if n < 100_000 {
        format!("{}.{}.{}", n / 10_000, n / 100 % 100, n % 100)
    } else {
        format!("{}.{}", n / 10_000, n % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_versions_as_patronictl_prints_them() {
        assert_eq!(pg_version(90624), "9.6.24");
        assert_eq!(pg_version(100000), "10.0");
        assert_eq!(pg_version(150004), "15.4");
    }
}
