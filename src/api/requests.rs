//! Request bodies of the mutating endpoints: strict JSON (unknown fields refused) into `Control` requests.
use serde::Deserialize;

use super::control::{
    ControlError, FailoverRequest, ReinitializeRequest, RestartRequest, RestartRole,
    SwitchoverRequest,
};
use crate::dcs::rfc3339::parse_rfc3339_ms;
use crate::ha::NodeName;

/// Upper bound of every duration from outside (file, store, REST): larger is a typo, and would overflow the
/// millisecond arithmetic. Here, in the lower layer, so the config reads it from the API and not back.
pub const MAX_DURATION_S: u64 = 7 * 86_400;

/// A body the API refuses with 400 and this message.
pub type BadRequest = String;

/// What `POST /failover` turns into: Patroni treats a failover naming a `leader` as a switchover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailoverOrSwitchover {
    Failover(FailoverRequest),
    Switchover(SwitchoverRequest),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchoverBody {
    #[serde(default)]
    leader: Option<String>,
    #[serde(default)]
    candidate: Option<String>,
    /// Patroni reads `candidate`, else `member`.
    #[serde(default)]
    member: Option<String>,
    #[serde(default)]
    scheduled_at: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartBody {
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    postgres_version: Option<String>,
    #[serde(default)]
    timeout: Option<serde_json::Value>,
    #[serde(default)]
    restart_pending: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReinitializeBody {
    #[serde(default)]
    force: Option<bool>,
    #[serde(default)]
    from_leader: Option<bool>,
}

/// `PATCH /config`: a JSON object to merge (`PUT /config`: the whole config). Not an empty one: Patroni
/// answers `{}` with 400 (api.py `_read_json_content`), so a PUT cannot wipe the key by mistake.
pub fn config_patch(body: &[u8]) -> Result<serde_json::Value, BadRequest> {
    let value: serde_json::Value = json(body)?;
    match value.as_object() {
        None => Err("the config patch must be a JSON object".into()),
        Some(o) if o.is_empty() => Err("the config patch must not be empty".into()),
        Some(_) => Ok(value),
    }
}

/// `POST /switchover`: `leader` required; `scheduled_at` with a time zone (400 without one, 422 when it
/// does not parse; a schedule in the past is refused by the agent, which reads the clock); `candidate`
/// must differ from `leader`. Patroni's order of checks (api.py `do_POST_failover`).
pub fn switchover(body: &[u8]) -> Result<SwitchoverRequest, ControlError> {
    let b: SwitchoverBody = json(body).map_err(bad_request)?;
    let candidate = name(b.candidate).or(name(b.member));
    let leader = name(b.leader).ok_or_else(|| {
        bad_request("Switchover could be performed only from a specific leader".into())
    })?;
    switchover_request(leader, candidate, b.scheduled_at)
}

/// `POST /failover`: `candidate` required (even with a `leader`), never scheduled; with a `leader` it is a
/// switchover.
pub fn failover(body: &[u8]) -> Result<FailoverOrSwitchover, ControlError> {
    let b: SwitchoverBody = json(body).map_err(bad_request)?;
    let candidate = name(b.candidate).or(name(b.member)).ok_or_else(|| {
        bad_request("Failover could be performed only to a specific candidate".into())
    })?;
    if b.scheduled_at
        .as_deref()
        .is_some_and(|s| !s.trim().is_empty())
    {
        return Err(bad_request("Failover can't be scheduled".into()));
    }
    match name(b.leader) {
        Some(leader) => {
            switchover_request(leader, Some(candidate), None).map(FailoverOrSwitchover::Switchover)
        }
        None => Ok(FailoverOrSwitchover::Failover(FailoverRequest {
            candidate,
        })),
    }
}

fn bad_request(message: BadRequest) -> ControlError {
    ControlError::new(400, message)
}

/// A schedule as Unix ms: 400 without a time zone, 422 when it does not parse (Patroni's `parse_schedule`;
/// `action` names the request in the message).
fn parse_schedule(s: &str, action: &str) -> Result<u64, ControlError> {
    match parse_rfc3339_ms(s) {
        Ok(ms) => Ok(ms),
        // Parses once a zone is added: the zone was missing.
        Err(_) if parse_rfc3339_ms(&format!("{}Z", s.trim())).is_ok() => Err(ControlError::new(
            400,
            format!("Timezone information is mandatory for the scheduled {action}"),
        )),
        Err(e) => Err(ControlError::new(
            422,
            format!("Unable to parse scheduled timestamp. It should be in an unambiguous format, e.g. ISO 8601 ({e})"),
        )),
    }
}

/// `POST /restart`: an empty body means now, unconditionally. Refusals are 400, except a `schedule`
/// that does not parse (422); one without a time zone is 400, as in Patroni (a schedule in the past is
/// the agent's to refuse: 422).
pub fn restart(body: &[u8]) -> Result<RestartRequest, ControlError> {
    restart_body(body)
        .map_err(|m| ControlError::new(400, m))?
        .schedule()
}

impl RestartRequest {
    fn schedule(mut self) -> Result<RestartRequest, ControlError> {
        if let Some(s) = self.schedule.as_deref() {
            self.schedule_ms = Some(parse_schedule(s, "restart")?);
        }
        Ok(self)
    }
}

fn restart_body(body: &[u8]) -> Result<RestartRequest, BadRequest> {
    if blank(body) {
        return Ok(RestartRequest::default());
    }
    let b: RestartBody = json(body)?;
    let role = match b.role.as_deref() {
        None => None,
        Some("primary") | Some("master") => Some(RestartRole::Primary),
        Some("replica") => Some(RestartRole::Replica),
        Some(_) => return Err("PostgreSQL role should be either primary or replica".into()),
    };
    let timeout_s = b.timeout.as_ref().map(timeout_seconds).transpose()?;
    let postgres_version = b.postgres_version.as_deref().map(version_num).transpose()?;
    Ok(RestartRequest {
        schedule: b.schedule.filter(|s| !s.trim().is_empty()),
        schedule_ms: None,
        role,
        postgres_version,
        timeout_s,
        restart_pending: b.restart_pending.unwrap_or(false),
    })
}

/// A PostgreSQL version as `server_version_num`, read as Patroni reads it: `X.Y` from 10 on (`15.4` is
/// 150004), `X.Y.Z` for older ones (`9.6.3` is 90603).
pub fn version_num(v: &str) -> Result<u32, BadRequest> {
    let bad = || format!("Invalid PostgreSQL version format: X.Y or X.Y.Z is accepted: {v}");
    let parts: Vec<u32> = v
        .split('.')
        .map(|p| p.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    // Checked: a major version past 429496 does not fit `server_version_num` (u32).
    let num = |major: u32, rest: u32| major.checked_mul(10_000)?.checked_add(rest);
    match parts[..] {
        [major, minor] if major >= 10 && minor < 100 => num(major, minor),
        [major, mid, minor] if mid < 100 && minor < 100 => num(major, mid * 100 + minor),
        _ => None,
    }
    .ok_or_else(bad)
}

/// `POST /reinitialize`: an empty body means `{}`.
pub fn reinitialize(body: &[u8]) -> Result<ReinitializeRequest, BadRequest> {
    if blank(body) {
        return Ok(ReinitializeRequest::default());
    }
    let b: ReinitializeBody = json(body)?;
    Ok(ReinitializeRequest {
        force: b.force.unwrap_or(false),
        from_leader: b.from_leader.unwrap_or(false),
    })
}

/// Endpoints that take no body (`POST /reload`, `DELETE /switchover`) refuse one that is not empty.
pub fn no_body(body: &[u8]) -> Result<(), BadRequest> {
    if blank(body) {
        Ok(())
    } else {
        Err("this endpoint takes no request body".into())
    }
}

fn switchover_request(
    leader: NodeName,
    candidate: Option<NodeName>,
    scheduled_at: Option<String>,
) -> Result<SwitchoverRequest, ControlError> {
    let scheduled_at = scheduled_at.filter(|s| !s.trim().is_empty());
    let scheduled_at_ms = match scheduled_at.as_deref() {
        Some(s) => Some(parse_schedule(s, "switchover")?),
        None => None,
    };
    if candidate.as_ref() == Some(&leader) {
        return Err(bad_request(
            "Switchover target and source are the same".into(),
        ));
    }
    Ok(SwitchoverRequest {
        leader,
        candidate,
        scheduled_at,
        scheduled_at_ms,
    })
}

fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BadRequest> {
    if blank(body) {
        return Err("empty request body: a JSON object is required".into());
    }
    serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))
}

fn blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

fn name(s: Option<String>) -> Option<NodeName> {
    s.filter(|s| !s.trim().is_empty()).map(NodeName)
}

/// `timeout`: seconds as a number or as text (`"30"`, `"30s"`), from 1 (Patroni refuses `<= 0`) to a week.
fn timeout_seconds(v: &serde_json::Value) -> Result<u64, BadRequest> {
    let max = MAX_DURATION_S;
    let bad = || format!("Timeout should be a positive number of seconds, at most {max}; got {v}");
    let s = match v {
        serde_json::Value::Number(n) => n.as_u64().ok_or_else(bad)?,
        serde_json::Value::String(s) => {
            let s = s.trim();
            s.strip_suffix('s')
                .unwrap_or(s)
                .trim()
                .parse()
                .map_err(|_| bad())?
        }
        _ => return Err(bad()),
    };
    if s == 0 || s > max {
        return Err(bad());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_patch_is_a_json_object_that_is_not_empty() {
        assert!(config_patch(br#"{"pause":true}"#).is_ok());
        for bad in [&b"{}"[..], b"[]", b"null", b"{\"pause\":"] {
            assert!(
                config_patch(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn switchover_needs_a_leader_and_a_time_zone() {
        assert!(switchover(br#"{"candidate":"b"}"#).is_err());
        assert!(switchover(br#"{"leader":"a","candidate":"a"}"#).is_err());
        assert!(switchover(br#"{"leader":"a","scheduled_at":"2030-01-01T00:00"}"#).is_err());
        let r = switchover(br#"{"leader":"a","scheduled_at":"2030-01-01T00:00Z"}"#).unwrap();
        assert_eq!(r.scheduled_at_ms, Some(1_893_456_000_000));
        assert!(switchover(br#"{"leader":"a","extra":1}"#)
            .unwrap_err()
            .message
            .contains("unknown field"));
        assert_eq!(
            switchover(br#"{"leader":"a","scheduled_at":"soon"}"#)
                .unwrap_err()
                .status,
            422
        );
        let r = switchover(br#"{"leader":"a","member":"b"}"#).unwrap();
        assert_eq!(r.candidate, Some(NodeName::new("b")));
    }

    #[test]
    fn failover_with_a_leader_is_a_switchover() {
        assert!(matches!(
            failover(br#"{"leader":"a","candidate":"b"}"#),
            Ok(FailoverOrSwitchover::Switchover(_))
        ));
        assert!(failover(br#"{"candidate":"b","scheduled_at":"2030-01-01T00:00Z"}"#).is_err());
        assert!(failover(b"{}").is_err());
        assert_eq!(failover(br#"{"leader":"a"}"#).unwrap_err().status, 400);
    }

    #[test]
    fn restart_and_reinitialize_accept_empty_bodies() {
        assert_eq!(restart(b"").unwrap(), RestartRequest::default());
        assert_eq!(
            restart(br#"{"timeout":"30s"}"#).unwrap().timeout_s,
            Some(30)
        );
        assert!(
            reinitialize(br#"{"from_leader":true}"#)
                .unwrap()
                .from_leader
        );
        assert!(no_body(b"x").is_err());
    }

    #[test]
    fn restart_schedules_need_a_time_zone_and_must_parse() {
        let r = restart(br#"{"schedule":"2030-01-01T00:00+01:00","role":"replica"}"#).unwrap();
        assert_eq!(r.schedule_ms, Some(1_893_452_400_000));
        assert_eq!(r.role, Some(RestartRole::Replica));
        assert_eq!(
            restart(br#"{"schedule":"2030-01-01T00:00:00"}"#)
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            restart(br#"{"schedule":"next tuesday"}"#)
                .unwrap_err()
                .status,
            422
        );
        assert_eq!(restart(br#"{"role":"leader"}"#).unwrap_err().status, 400);
    }

    #[test]
    fn a_version_too_large_for_server_version_num_is_refused() {
        // Found by the `rest` fuzz target: `5111111.1` overflowed `major * 10_000` (a panic in debug
        // builds, a wrapped, wrong version in release).
        assert!(version_num("5111111.1").is_err());
        assert!(version_num("4294967295.99.99").is_err());
        assert!(
            version_num("429497.0").is_err(),
            "the first major past u32::MAX"
        );
        assert_eq!(
            restart(br#"{"postgres_version":"5111111.1"}"#)
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(version_num("15.4"), Ok(150_004));
        assert_eq!(version_num("9.6.3"), Ok(90_603));
    }
}
