//! At start-up, before PostgreSQL is touched: refuse to run when another live agent already runs under our
//! name in this scope (Patroni's `ensure_unique_name`). Two agents with one name would fight over one
//! member key and, worse, over one leader key.
use std::time::Duration;

use crate::dcs::Dcs;

/// Patroni probes with 2 s.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the start-up check found.
#[derive(Debug, PartialEq, Eq)]
pub enum NameCheck {
    /// No live member key with our name, or it is our own (a previous run at our address).
    Free,
    /// The store could not be read: the loop will find out; the check cannot tell.
    Unknown(String),
    /// Another agent answers `GET /patroni` with our scope and name at this address.
    TakenBy { api_url: String },
}

/// Read the cluster once (bounded by `timeout_ms`); if `members/<name>` is there (its session is alive:
/// the key lives only as long as it) with an `api_url` other than ours, ask that address who it is.
pub async fn check(
    dcs: &dyn Dcs,
    scope: &str,
    name: &str,
    own_api_url: &str,
    timeout_ms: u64,
) -> NameCheck {
    let deadline = crate::clock::now() + Duration::from_millis(timeout_ms);
    let snap = match dcs.get_cluster(false, deadline).await {
        Ok(s) => s,
        Err(e) => return NameCheck::Unknown(e.to_string()),
    };
    let Some(rec) = snap.members.get(name) else {
        return NameCheck::Free;
    };
    if rec.api_url.is_empty() || rec.api_url == own_api_url {
        return NameCheck::Free;
    }
    if answers_as(&rec.api_url, scope, name).await {
        NameCheck::TakenBy {
            api_url: rec.api_url.clone(),
        }
    } else {
        NameCheck::Free
    }
}

/// Whether `GET api_url` answers Patroni's `/patroni` JSON naming `scope` and `name`.
async fn answers_as(api_url: &str, scope: &str, name: &str) -> bool {
    // Only an identity probe: a peer's self-signed certificate must not hide a running twin.
    let Ok(client) = reqwest::Client::builder()
        .no_proxy()
        .timeout(PROBE_TIMEOUT)
        .connect_timeout(PROBE_TIMEOUT)
        .danger_accept_invalid_certs(true)
        .build()
    else {
        return false;
    };
    let answer = async {
        let resp = client.get(api_url).send().await.ok()?;
        let body = crate::http_body::read_capped(resp, super::peers::MAX_PEER_ANSWER_BYTES)
            .await
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
        let p = v.get("patroni")?;
        Some(
            p.get("name").and_then(|n| n.as_str()) == Some(name)
                && p.get("scope").and_then(|s| s.as_str()) == Some(scope),
        )
    };
    tokio::time::timeout(PROBE_TIMEOUT + Duration::from_millis(500), answer)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
