//! Probing the other members for the race: their REST `/patroni`, or their PostgreSQL when the agent is gone.
use std::time::Duration;

use crate::dcs::MemberRecord;
use crate::ha::{Lsn, NodeName, PeerProbe, PeerStatus, PgRole, Tags, Timeline};

/// Patroni probes with 2 s and no retries.
pub const PROBE_TIMEOUT_MS: u64 = 2_000;
/// The largest `/patroni` answer believed. A real one is about 1 KiB (a few hundred bytes more with many
/// tags or replicas); a member answering megabytes, or without end, is not believed and its PostgreSQL is
/// asked instead.
pub const MAX_PEER_ANSWER_BYTES: usize = 1 << 20;

/// The client for requests to the other members' REST APIs (probes, failsafe rounds), built once at start.
/// As Patroni's peer requests do, it trusts `restapi.cafile` besides the system roots and, when the
/// members check client certificates (`verify_client`), presents `restapi.certfile`/`keyfile`: a REST
/// API behind a private CA stays reachable by its peers instead of every probe falling back to SQL and
/// every failsafe round failing. Timeouts are set per request.
/// With `cafile`, that CA is the only one trusted (as Patroni's peer requests do); no proxy from the
/// environment is ever used: members are reached directly, and the failsafe round carries credentials.
pub fn client(api: &crate::api::RestApiSettings) -> Result<reqwest::Client, String> {
    let read = |key: &str, p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("restapi.{key} {}: {e}", p.display()))
    };
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .no_proxy()
        .connect_timeout(Duration::from_millis(PROBE_TIMEOUT_MS));
    if let Some(ca) = &api.cafile {
        b = b.tls_built_in_root_certs(false);
        let certs = reqwest::Certificate::from_pem_bundle(&read("cafile", ca)?)
            .map_err(|e| format!("restapi.cafile {}: not a PEM bundle: {e}", ca.display()))?;
        for cert in certs {
            b = b.add_root_certificate(cert);
        }
    }
    if let (true, Some(cert), Some(key)) = (api.verify_client, &api.certfile, &api.keyfile) {
        let mut pem = read("certfile", cert)?;
        pem.push(b'\n');
        pem.extend(read("keyfile", key)?);
        let identity = reqwest::Identity::from_pem(&pem)
            .map_err(|e| format!("restapi.certfile/keyfile as a client certificate: {e}"))?;
        b = b.identity(identity);
    }
    b.build()
        .map_err(|e| format!("cannot build the peer HTTP client: {e}"))
}

/// Probe every member but us, in parallel (the agent runtime owns these short-lived tasks).
pub async fn probe_all(
    client: &reqwest::Client,
    members: &[(String, MemberRecord)],
    me: &NodeName,
    pg_creds: crate::pg::Credentials,
) -> Vec<PeerProbe> {
    let started = crate::clock::monotonic();
    let mut set = tokio::task::JoinSet::new();
    for (name, rec) in members.iter().filter(|(n, _)| n != me.as_str()) {
        let (client, creds, name, rec) =
            (client.clone(), pg_creds.clone(), name.clone(), rec.clone());
        set.spawn(async move {
            // Bounded as a whole: a frozen peer (accepting connections, never answering) must not hold the race.
            let limit = Duration::from_millis(2 * PROBE_TIMEOUT_MS + 500);
            match tokio::time::timeout(limit, probe_one(&client, &name, &rec, &creds)).await {
                Ok(p) => p,
                Err(_) => PeerProbe {
                    name: NodeName::new(name.as_str()),
                    answer: None,
                },
            }
        });
    }
    let mut out: Vec<PeerProbe> = set.join_all().await;
    tracing::debug!(
        took_ms = crate::clock::monotonic().since(started),
        "peer probes"
    );
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// `GET /patroni` of each of the other site's agents, in parallel, each bounded by the probe timeout: whether
/// it answers as a running primary (`None`: no believable answer in time).
pub async fn probe_sites(client: &reqwest::Client, urls: &[String]) -> Vec<crate::ha::SiteProbe> {
    let mut set = tokio::task::JoinSet::new();
    for (i, url) in urls.iter().enumerate() {
        let (client, url) = (client.clone(), url.clone());
        set.spawn(async move {
            let target = format!("{}/patroni", url.trim_end_matches('/'));
            let limit = Duration::from_millis(PROBE_TIMEOUT_MS + 500);
            let answer = tokio::time::timeout(limit, site_answer(&client, &target))
                .await
                .ok()
                .flatten();
            (
                i,
                crate::ha::SiteProbe {
                    url,
                    writable: answer,
                },
            )
        });
    }
    let mut out = set.join_all().await;
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, p)| p).collect()
}

/// Whether one `/patroni` answer is a running primary's.
async fn site_answer(client: &reqwest::Client, url: &str) -> Option<bool> {
    let resp = client
        .get(url)
        .timeout(Duration::from_millis(PROBE_TIMEOUT_MS))
        .send()
        .await
        .ok()?;
    let body = crate::http_body::read_capped(resp, MAX_PEER_ANSWER_BYTES)
        .await
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let role = v.get("role").and_then(|r| r.as_str())?;
    let running = v.get("state").and_then(|s| s.as_str()) == Some("running");
    Some(matches!(role, "primary" | "master") && running)
}

async fn probe_one(
    client: &reqwest::Client,
    name: &str,
    rec: &MemberRecord,
    creds: &crate::pg::Credentials,
) -> PeerProbe {
    let answer = match rest(client, &rec.api_url).await {
        Some(a) => Some(a),
        None => postgres(rec, creds).await,
    };
    PeerProbe {
        name: NodeName::new(name),
        answer,
    }
}

/// `GET <api_url>`: the `/patroni` JSON.
async fn rest(client: &reqwest::Client, url: &str) -> Option<PeerStatus> {
    if url.is_empty() {
        return None;
    }
    let resp = client
        .get(url)
        .timeout(Duration::from_millis(PROBE_TIMEOUT_MS))
        .send()
        .await
        .ok()?;
    let body = match crate::http_body::read_capped(resp, MAX_PEER_ANSWER_BYTES).await {
        Ok(b) => b,
        Err(e @ crate::http_body::BodyError::TooLarge { .. }) => {
            tracing::warn!(url, error = %e, "peer REST probe: answer not believed");
            return None;
        }
        Err(_) => return None,
    };
    status_from_json(&serde_json::from_slice(&body).ok()?)
}

/// What a member's `GET /patroni` answer tells the race.
fn status_from_json(v: &serde_json::Value) -> Option<PeerStatus> {
    let role = match v.get("role").and_then(|r| r.as_str()) {
        Some("primary" | "master")
            if v.get("state").and_then(|s| s.as_str()) == Some("running") =>
        {
            Some(PgRole::Primary)
        }
        Some("replica") if v.get("state").and_then(|s| s.as_str()) != Some("stopped") => {
            Some(PgRole::Replica)
        }
        _ => None,
    };
    let xlog = v.get("xlog");
    let pos = |k: &str| xlog.and_then(|x| x.get(k)).and_then(|p| p.as_u64());
    let lsn = pos("location")
        .or_else(|| pos("received_location").max(pos("replayed_location")))
        .unwrap_or(0);
    let tags = v
        .get("tags")
        .map(crate::dcs::values::tags_from_value)
        .unwrap_or_default();
    Some(PeerStatus {
        role,
        timeline: v
            .get("timeline")
            .and_then(|t| t.as_u64())
            .map(|t| Timeline(t as u32)),
        lsn: Lsn(lsn),
        tags,
    })
}

/// The agent did not answer: ask its PostgreSQL whether it still runs as primary (a dead agent's
/// PostgreSQL can still be writable, and must still block the race). Over TLS as the superuser section's
/// `sslmode` says: a peer whose pg_hba allows only `hostssl` must still be seen.
async fn postgres(rec: &MemberRecord, creds: &crate::pg::Credentials) -> Option<PeerStatus> {
    let ep = crate::pg::Endpoint::from_conn_url(NodeName::new("peer"), &rec.conn_url).ok()?;
    // Built field by field, never as a conninfo string: a password with a space, a quote or a backslash
    // must reach the server as it is.
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(&ep.host)
        .port(ep.port)
        .user(&creds.username)
        .password(&creds.password)
        .dbname("postgres")
        .application_name("tenure")
        .connect_timeout(Duration::from_millis(PROBE_TIMEOUT_MS));
    let connect = crate::pg::tls::connect(&mut cfg, &creds.ssl);
    let (client, conn) =
        match tokio::time::timeout(Duration::from_millis(PROBE_TIMEOUT_MS), connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                // Named, so a refused certificate or a hostssl-only pg_hba does not pass for a dead peer.
                tracing::warn!(conn_url = %rec.conn_url, error = %e, "peer SQL probe failed");
                return None;
            }
            Err(_) => return None,
        };
    let driver = tokio::spawn(conn);
    let query = client.query_one("SELECT pg_is_in_recovery()", &[]);
    let row = tokio::time::timeout(Duration::from_millis(PROBE_TIMEOUT_MS), query)
        .await
        .ok()?
        .ok();
    driver.abort();
    let in_recovery: bool = row?.get(0);
    Some(PeerStatus {
        role: Some(if in_recovery {
            PgRole::Replica
        } else {
            PgRole::Primary
        }),
        timeline: rec.timeline.map(Timeline),
        lsn: Lsn(rec.xlog_location.unwrap_or(0)),
        tags: Tags {
            nofailover: true,
            ..Tags::default()
        },
    })
}

/// Who we are in a `POST /failsafe` round, and how to reach the others.
#[derive(Clone, Debug, Default)]
pub struct FailsafePoster {
    pub name: String,
    pub conn_url: String,
    pub api_url: String,
    /// The REST API's basic credentials: every member of a cluster is configured with the same ones.
    pub basic_auth: Option<(String, String)>,
    /// `restapi.token`, used when no basic credentials are configured.
    pub token: Option<String>,
}

/// `POST /failsafe` to every member in parallel, each bounded by `timeout_ms` (the core's round bound; one try).
/// A member counts as accepting only on 200.
pub async fn post_failsafe(
    client: &reqwest::Client,
    members: &[(NodeName, String)],
    me: &FailsafePoster,
    timeout_ms: u64,
) -> Vec<crate::ha::FailsafeReply> {
    let limit = Duration::from_millis(timeout_ms.max(1));
    let body = serde_json::json!({
        "name": me.name, "conn_url": me.conn_url, "api_url": me.api_url,
    });
    let mut set = tokio::task::JoinSet::new();
    for (name, api_url) in members {
        let (client, body, name, url) = (
            client.clone(),
            body.clone(),
            name.clone(),
            failsafe_url(api_url),
        );
        let (auth, token) = (me.basic_auth.clone(), me.token.clone());
        set.spawn(async move {
            let mut req = client.post(&url).timeout(limit).json(&body);
            if auth.is_some() || token.is_some() {
                warn_plain_http(&url);
            }
            if let Some((u, p)) = auth {
                req = req.basic_auth(u, Some(p));
            } else if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let sent = tokio::time::timeout(limit, req.send()).await;
            let accepted = matches!(sent, Ok(Ok(r)) if r.status().as_u16() == 200);
            crate::ha::FailsafeReply { name, accepted }
        });
    }
    let mut out: Vec<_> = set.join_all().await;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// URLs warned about, at most: they come from member records (store data, so a writer cycling `api_url`s
/// could grow the set for ever); past the cap the oldest is forgotten, and warned about again if it recurs.
const MAX_WARNED_URLS: usize = 256;

static WARNED: std::sync::Mutex<std::collections::VecDeque<String>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// Credentials are about to go to `url`: warn (once per URL) when that is plain HTTP, where anyone on the
/// path reads them. Patroni sends them the same way; refusing would break clusters without TLS.
pub(crate) fn warn_plain_http(url: &str) {
    if !url.starts_with("http://") {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned.iter().any(|u| u == url) {
        if warned.len() >= MAX_WARNED_URLS {
            warned.pop_front();
        }
        warned.push_back(url.to_string());
        tracing::warn!(
            url,
            "credentials are sent over plain HTTP; configure TLS to protect them"
        );
    }
}

/// `http://h:8008/patroni` → `http://h:8008/failsafe` (Patroni's `urljoin(api_url, 'failsafe')`).
pub fn failsafe_url(api_url: &str) -> String {
    match api_url.rsplit_once('/') {
        Some((base, _)) if base.contains("://") => format!("{base}/failsafe"),
        _ => format!("{}/failsafe", api_url.trim_end_matches('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::{failsafe_url, status_from_json};

    #[test]
    fn the_warned_once_urls_are_capped() {
        // Member records are store data: a writer cycling api_urls must not grow this set for ever.
        for i in 0..5_000 {
            super::warn_plain_http(&format!(
                "http://10.9.{}.{}:8008/failsafe",
                i / 256,
                i % 256
            ));
        }
        let warned = super::WARNED.lock().unwrap().len();
        assert!(warned <= super::MAX_WARNED_URLS, "{warned} URLs remembered");
    }

    #[test]
    fn a_peer_tagged_nofailover_yes_is_not_a_candidate() {
        // Patroni accepts `nofailover: "yes"` (any non-empty string is true to it); the member key and the
        // `/patroni` answer carry the tag as written, and both readers must agree that it is set.
        let v = serde_json::json!({"role": "replica", "state": "running", "xlog": {"received_location": 5},
            "tags": {"nofailover": "yes"}});
        let s = status_from_json(&v).expect("a status");
        assert!(s.tags.nofailover && !s.tags.can_promote());
    }

    #[test]
    fn failsafe_url_replaces_the_last_segment_as_patroni_does() {
        assert_eq!(
            failsafe_url("http://10.0.0.1:8008/patroni"),
            "http://10.0.0.1:8008/failsafe"
        );
        assert_eq!(failsafe_url("https://h:8008"), "https://h:8008/failsafe");
        assert_eq!(failsafe_url("http://h:8008/"), "http://h:8008/failsafe");
    }
}
