//! Consul's HTTP API as tenure uses it: one request at a time, each bounded by a deadline, every status code
//! mapped to a `DcsError` the caller can branch on (consul.md §5).
use std::path::PathBuf;

use base64::Engine as _;
use reqwest::{Client, Method, StatusCode};
use serde::Deserialize;
use tokio::time::{timeout_at, Instant};

use crate::dcs::DcsError;

/// The largest answer read from Consul. The biggest is a read of the whole scope (`?recurse`): a cluster
/// of 1,000 members with 2 KiB records is 2 MiB, base64 and JSON included under 3; eight times that leaves
/// room for any real cluster, while an agent (or a man in the middle) answering without end is cut off.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// What went wrong building the HTTP client (bad TLS files); a configuration error, not a store error.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad TLS material in {what}: {source}")]
    Tls {
        what: String,
        source: reqwest::Error,
    },
    #[error("no PEM certificate in {0}")]
    NoCertificate(PathBuf),
    #[error("client certificate and key must be given together")]
    HalfIdentity,
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
}

/// TLS files: a CA to trust and an optional client certificate (for `verify_incoming`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// One entry of a `GET /v1/kv/...` answer.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KvEntry {
    pub key: String,
    /// Base64; `null` for an empty value.
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub modify_index: u64,
}

impl KvEntry {
    /// The value's bytes; empty for `null`. Consul always sends base64, so an answer that is not names the
    /// key and fails.
    pub fn bytes(&self) -> Result<Vec<u8>, DcsError> {
        let Some(b64) = self.value.as_deref() else {
            return Ok(Vec::new());
        };
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| DcsError::BadData {
                key: self.key.clone(),
                why: format!("not base64: {e}"),
            })
    }

    /// The value decoded as UTF-8 text.
    pub fn text(&self) -> Result<String, DcsError> {
        String::from_utf8(self.bytes()?).map_err(|e| DcsError::BadData {
            key: self.key.clone(),
            why: e.to_string(),
        })
    }
}

/// A raw answer: status, `X-Consul-Index`, body.
pub struct Answer {
    pub status: StatusCode,
    pub index: Option<u64>,
    pub body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).trim().to_string()
    }
}

/// The transport: base URL, token and a pooled client.
pub struct Http {
    client: Client,
    base: String,
    token: Option<String>,
}

impl Http {
    pub fn new(url: &str, token: Option<String>, tls: &TlsFiles) -> Result<Self, SetupError> {
        // Straight to the agent: an HTTP(S)_PROXY nobody configured for Consul must not see the token.
        let mut builder = Client::builder().use_rustls_tls().no_proxy();
        if token.is_some() && url.starts_with("http://") {
            tracing::warn!(
                url,
                "the Consul token is sent over plain HTTP; use https:// to protect it"
            );
        }
        if let Some(ca) = &tls.cacert {
            // The configured CA is the only one trusted, as with Patroni's `consul.cacert`.
            builder = builder.tls_built_in_root_certs(false);
            let pem = read(ca)?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| SetupError::Tls {
                    what: ca.display().to_string(),
                    source,
                })?;
            // A file without a single certificate would silently trust nothing extra: refuse it up front.
            if certs.is_empty() {
                return Err(SetupError::NoCertificate(ca.clone()));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        match (&tls.cert, &tls.key) {
            (Some(cert), Some(key)) => {
                // rustls wants the certificate chain and the key in one PEM buffer.
                let mut pem = read(cert)?;
                pem.push(b'\n');
                pem.extend(read(key)?);
                let identity =
                    reqwest::Identity::from_pem(&pem).map_err(|source| SetupError::Tls {
                        what: cert.display().to_string(),
                        source,
                    })?;
                builder = builder.identity(identity);
            }
            (None, None) => {}
            _ => return Err(SetupError::HalfIdentity),
        }
        let client = builder.build().map_err(SetupError::Client)?;
        Ok(Http {
            client,
            base: url.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// Send one request and read the whole answer (at most `MAX_ANSWER_BYTES`), or give up at `deadline`.
    /// Never retries: the caller owns the retry budget.
    pub async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        deadline: Instant,
    ) -> Result<Answer, DcsError> {
        let what = format!("{method} {path_and_query}");
        if crate::clock::now() >= deadline {
            return Err(DcsError::Unavailable(format!(
                "{what}: deadline passed before sending"
            )));
        }
        let mut req = self
            .client
            .request(method, format!("{}{}", self.base, path_and_query));
        if let Some(token) = &self.token {
            req = req.header("X-Consul-Token", token);
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let exchange = async {
            let resp = req
                .send()
                .await
                .map_err(crate::http_body::BodyError::Http)?;
            let status = resp.status();
            let index = resp
                .headers()
                .get("X-Consul-Index")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let body = crate::http_body::read_capped(resp, MAX_ANSWER_BYTES).await?;
            Ok::<_, crate::http_body::BodyError>(Answer {
                status,
                index,
                body,
            })
        };
        match timeout_at(deadline, exchange).await {
            Err(_) => Err(DcsError::Unavailable(format!(
                "{what}: no answer by the deadline"
            ))),
            Ok(Err(e)) => Err(DcsError::Unavailable(format!("{what}: {e}"))),
            Ok(Ok(answer)) => Ok(answer),
        }
    }

    /// `call`, then every non-2xx status mapped to an error (404 included: callers that expect it use `call`).
    pub async fn call_ok(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        deadline: Instant,
    ) -> Result<Answer, DcsError> {
        let what = format!("{method} {path_and_query}");
        let answer = self.call(method, path_and_query, body, deadline).await?;
        if answer.status.is_success() {
            return Ok(answer);
        }
        Err(status_error(&what, &answer))
    }

    /// `GET /v1/kv/<key>` with extra query flags. `None` for 404 (the index is still returned).
    pub async fn kv_get(
        &self,
        key: &str,
        flags: &str,
        deadline: Instant,
    ) -> Result<(Option<Vec<KvEntry>>, u64), DcsError> {
        let path = with_query(&format!("/v1/kv/{}", escape_key(key)), flags);
        let answer = self.call(Method::GET, &path, None, deadline).await?;
        let index = answer.index.unwrap_or(0);
        if answer.status == StatusCode::NOT_FOUND {
            return Ok((None, index));
        }
        if !answer.status.is_success() {
            return Err(status_error(&format!("GET {path}"), &answer));
        }
        let entries: Vec<KvEntry> = serde_json::from_slice(&answer.body)
            .map_err(|e| DcsError::Unavailable(format!("GET {path}: unreadable answer: {e}")))?;
        Ok((Some(entries), index))
    }

    /// `PUT /v1/kv/<key>?<flags>`: Consul's `true`/`false`.
    pub async fn kv_put(
        &self,
        key: &str,
        flags: &str,
        value: Vec<u8>,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let path = with_query(&format!("/v1/kv/{}", escape_key(key)), flags);
        let answer = self
            .call_ok(Method::PUT, &path, Some(value), deadline)
            .await?;
        parse_bool(&path, &answer)
    }

    /// `DELETE /v1/kv/<key>?<flags>`: Consul's `true`/`false`.
    pub async fn kv_delete(
        &self,
        key: &str,
        flags: &str,
        deadline: Instant,
    ) -> Result<bool, DcsError> {
        let path = with_query(&format!("/v1/kv/{}", escape_key(key)), flags);
        let answer = self.call_ok(Method::DELETE, &path, None, deadline).await?;
        parse_bool(&path, &answer)
    }
}

/// The error for a non-2xx answer (consul.md §5): `invalid session` is the one 500 that means something.
pub fn status_error(what: &str, answer: &Answer) -> DcsError {
    let text = answer.text();
    let status = answer.status;
    // Case-sensitive, as Patroni matches it: Consul's lock error is `invalid session "<id>"`, while a refused
    // TTL reads `Invalid Session TTL` and is a configuration error, not a lost session.
    if text.contains("invalid session") {
        return DcsError::SessionInvalid(format!("{what}: {text}"));
    }
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return DcsError::Unavailable(format!("{what}: HTTP {status}: {text}"));
    }
    // 403 (ACL) and other 4xx: the store did not act, and retrying will not help; still nothing to infer.
    DcsError::Unavailable(format!("{what}: unexpected HTTP {status}: {text}"))
}

fn parse_bool(what: &str, answer: &Answer) -> Result<bool, DcsError> {
    match answer.text().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(DcsError::Unavailable(format!(
            "{what}: expected true/false, got {other:?}"
        ))),
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, SetupError> {
    std::fs::read(path).map_err(|source| SetupError::Read {
        path: path.clone(),
        source,
    })
}

fn with_query(path: &str, flags: &str) -> String {
    if flags.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{flags}")
    }
}

/// Percent-encode everything outside the characters Consul allows in key names (consul.md §2).
pub fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-_./,".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A Go duration string for `ms`, in seconds as Patroni writes it (`15s`, `7.5s`, `0.001s`).
pub fn go_seconds(ms: u64) -> String {
    let (s, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:03}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_keys_are_encoded_for_consul() {
        assert_eq!(go_seconds(15_000), "15s");
        assert_eq!(go_seconds(7_500), "7.5s");
        assert_eq!(go_seconds(1), "0.001s");
        assert_eq!(
            escape_key("service/b/members/pg 1"),
            "service/b/members/pg%201"
        );
    }

    #[test]
    fn invalid_session_500_is_not_an_outage() {
        let a = |status: u16, body: &str| Answer {
            status: StatusCode::from_u16(status).unwrap(),
            index: None,
            body: body.as_bytes().to_vec(),
        };
        assert!(matches!(
            status_error("x", &a(500, "invalid session \"abc\"")),
            DcsError::SessionInvalid(_)
        ));
        assert!(matches!(
            status_error("x", &a(500, "No cluster leader")),
            DcsError::Unavailable(_)
        ));
        assert!(matches!(
            status_error("x", &a(429, "slow down")),
            DcsError::Unavailable(_)
        ));
        assert!(matches!(
            status_error("x", &a(403, "Permission denied")),
            DcsError::Unavailable(_)
        ));
        let ttl = a(
            500,
            "Invalid Session TTL '1s', must be between [10s=24h0m0s]",
        );
        assert!(matches!(status_error("x", &ttl), DcsError::Unavailable(_)));
    }
}
