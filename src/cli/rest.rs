//! A member's REST API as the CLI calls it: the base URL from the member's `api_url`, the credentials and
//! TLS material from the config file's `restapi` section, one answer or a reason it could not be had.
use std::time::Duration;

use reqwest::{Method, Url};

use super::CliError;
use crate::config::{RestApiConfig, VerifyClient};
use crate::dcs::ClusterSnapshot;

/// Connecting to a member's API may take this long before the next member is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest answer read from a member's API. The biggest real one is `/cluster` or `/history` of a big
/// cluster (well under a MiB); a member answering without end must not fill the operator's memory.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// How the unsafe endpoints are authorised.
enum Auth {
    /// `restapi.authentication` (what patronictl sends).
    Basic { username: String, password: String },
    /// `restapi.token`.
    Bearer(String),
    /// `allow_unauthenticated: true`.
    None,
}

/// The HTTP client and the credentials.
pub struct Rest {
    http: reqwest::Client,
    auth: Auth,
}

/// A member's API to try, in order.
#[derive(Clone, Debug)]
pub struct Target {
    pub name: String,
    pub base: Url,
}

/// An HTTP answer, whatever its status.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
    /// The URL that answered.
    pub url: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The answer's text, or `Err` (exit 1) naming the action, the status and the API's message.
    pub fn accepted(self, action: &str) -> Result<String, CliError> {
        if self.ok() {
            return Ok(self.body);
        }
        let message = self.body.trim();
        Err(CliError::refused(format!(
            "{action} refused by {}: HTTP {} {}",
            self.url,
            self.status,
            if message.is_empty() {
                "(no message)"
            } else {
                message
            }
        )))
    }
}

/// Why one request got no answer.
enum Failure {
    /// No connection: the next member may be tried.
    Connect(String),
    /// Connected, but no (complete) answer: the request may have been acted on.
    Other(String),
}

impl Rest {
    pub fn new(config: &RestApiConfig) -> Result<Rest, CliError> {
        let auth = match (&config.auth.basic, &config.auth.token) {
            (Some(b), _) => Auth::Basic {
                username: b.username.clone(),
                password: b.password.clone(),
            },
            (None, Some(t)) => Auth::Bearer(t.clone()),
            (None, None) => Auth::None,
        };
        // Members' APIs are reached directly, as patronictl does: no HTTP(S)_PROXY from the environment.
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .use_rustls_tls();
        if let Some(tls) = &config.tls {
            let read = |p: &std::path::Path| {
                std::fs::read(p)
                    .map_err(|e| CliError::usage(format!("cannot read {}: {e}", p.display())))
            };
            if let Some(ca) = &tls.cafile {
                for cert in reqwest::Certificate::from_pem_bundle(&read(ca)?)
                    .map_err(|e| CliError::usage(format!("bad CA bundle {}: {e}", ca.display())))?
                {
                    builder = builder.add_root_certificate(cert);
                }
            }
            if tls.verify_client == VerifyClient::Required {
                // The members want a client certificate: present the agent's own, as patronictl does
                // when `ctl.certfile` is not set.
                let mut pem = read(&tls.certfile)?;
                pem.push(b'\n');
                pem.extend(read(&tls.keyfile)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    CliError::usage(format!(
                        "bad client certificate {} / {}: {e}",
                        tls.certfile.display(),
                        tls.keyfile.display()
                    ))
                })?;
                builder = builder.identity(identity);
            }
        }
        let http = builder
            .build()
            .map_err(|e| CliError::internal(format!("cannot build the HTTP client: {e}")))?;
        Ok(Rest { http, auth })
    }

    /// Send to the first target that accepts a connection. A target that refuses or times out the connection
    /// is skipped; once one is connected its answer (or its silence) is final: the request is not repeated.
    pub async fn first_reachable(
        &self,
        targets: &[Target],
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        timeout: Duration,
    ) -> Result<Answer, CliError> {
        if targets.is_empty() {
            return Err(CliError::unavailable(
                "no member publishes a REST API address (api_url) in the store",
            ));
        }
        let mut tried = Vec::new();
        for t in targets {
            let url = join(&t.base, path);
            match self.send(method.clone(), &url, body, true, timeout).await {
                Ok(answer) => return Ok(answer),
                Err(Failure::Connect(why)) => tried.push(format!("{} ({url}): {why}", t.name)),
                Err(Failure::Other(why)) => {
                    return Err(CliError::unavailable(format!(
                        "{method} {url}: no answer: {why} (the request may still take effect)"
                    )))
                }
            }
        }
        Err(CliError::unavailable(format!(
            "cannot reach any member's REST API:\n  {}",
            tried.join("\n  ")
        )))
    }

    /// `GET` without credentials (the status endpoints); `None` when there is no answer.
    pub async fn get_json(&self, target: &Target, path: &str) -> Option<serde_json::Value> {
        let url = join(&target.base, path);
        let answer = self
            .send(Method::GET, &url, None, false, CONNECT_TIMEOUT)
            .await
            .ok()?;
        serde_json::from_str(&answer.body).ok()
    }

    async fn send(
        &self,
        method: Method,
        url: &Url,
        body: Option<&serde_json::Value>,
        authorised: bool,
        timeout: Duration,
    ) -> Result<Answer, Failure> {
        let mut rq = self.http.request(method, url.clone()).timeout(timeout);
        if authorised {
            rq = match &self.auth {
                Auth::Basic { username, password } => rq.basic_auth(username, Some(password)),
                Auth::Bearer(t) => rq.bearer_auth(t),
                Auth::None => rq,
            };
        }
        if let Some(b) = body {
            rq = rq
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_string());
        }
        let r = rq.send().await.map_err(|e| {
            let why = error_chain(&e);
            if e.is_connect() {
                Failure::Connect(why)
            } else {
                Failure::Other(why)
            }
        })?;
        let status = r.status().as_u16();
        let body = crate::http_body::read_capped(r, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| Failure::Other(error_chain(&e)))?;
        let body = String::from_utf8_lossy(&body).into_owned();
        Ok(Answer {
            status,
            body,
            url: url.to_string(),
        })
    }
}

/// The members' APIs: `first` (when named) before the others, the others by name; members without a
/// usable `api_url` are left out.
pub fn targets(snapshot: &ClusterSnapshot, first: Option<&str>) -> Vec<Target> {
    let mut names: Vec<&String> = snapshot.members.keys().collect();
    names.sort_by_key(|n| Some(n.as_str()) != first);
    names
        .into_iter()
        .filter_map(|name| {
            let base = base_url(&snapshot.members[name].api_url)?;
            Some(Target {
                name: name.clone(),
                base,
            })
        })
        .collect()
}

/// `http://10.0.0.1:8008/patroni` -> `http://10.0.0.1:8008/`.
pub fn base_url(api_url: &str) -> Option<Url> {
    let mut url = Url::parse(api_url).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return None;
    }
    url.set_path("/");
    url.set_query(None);
    url.set_fragment(None);
    Some(url)
}

fn join(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    url.set_path(path);
    url
}

/// reqwest's error with its causes ("error sending request: ...: Connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers every request with `body` (JSON, with its length) and closes.
    async fn answering(body: Vec<u8>) -> Url {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(&body).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        Url::parse(&format!("http://{addr}/")).unwrap()
    }

    fn rest() -> Rest {
        Rest::new(&RestApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            connect_address: String::new(),
            auth: crate::config::RestAuth {
                basic: None,
                token: None,
                allow_unauthenticated: true,
            },
            tls: None,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_member_answer_past_the_cap_is_no_answer() {
        let big = format!(
            r#"{{"state": "running", "pad": "{}"}}"#,
            "x".repeat(17 << 20)
        );
        let small = r#"{"state": "running"}"#.to_string();
        let rest = rest();
        for (body, expect) in [(small, true), (big, false)] {
            let target = Target {
                name: "m".into(),
                base: answering(body.into_bytes()).await,
            };
            let got = rest.get_json(&target, "/patroni").await;
            assert_eq!(
                got.is_some(),
                expect,
                "{:?}",
                got.map(|v| v["state"].clone())
            );
        }
    }
}
