//! Request dispatch: one warp filter hands method, path, query, headers and body to `handle`.
use std::convert::Infallible;
use std::sync::Arc;

use warp::http::header::{
    HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE,
};
use warp::http::{HeaderMap, Method, Response, StatusCode};
use warp::hyper::Body;
use warp::{Buf, Filter, Stream};

use super::auth::{Auth, Denied};
use super::control::{Accepted, ControlError};
use super::health::{healthy, Check, HealthQuery};
use super::limiter::Limiter;
use super::refusals::RefusalLog;
use super::requests::{self, FailoverOrSwitchover};
use super::server::PeerAddr;
use super::state::ApiState;
use super::{metrics, status};

/// Largest request body accepted (413 beyond).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Paths served other than the health checks (for 405 versus 404).
const PATHS: [&str; 11] = [
    "/patroni",
    "/failsafe",
    "/cluster",
    "/history",
    "/config",
    "/metrics",
    "/switchover",
    "/failover",
    "/restart",
    "/reinitialize",
    "/reload",
];

/// What every request handler shares.
pub struct Ctx {
    pub state: ApiState,
    pub auth: Auth,
    pub limiter: Limiter,
    /// Rate of the refusals' log lines: a flood of bad credentials must not flood the log too.
    pub refusals: RefusalLog,
}

/// The whole API as one warp filter.
pub fn filter(
    ctx: Arc<Ctx>,
) -> impl Filter<Extract = (Response<Body>,), Error = warp::Rejection> + Clone + Send + Sync + 'static
{
    let query = warp::query::raw().or(warp::any().map(String::new)).unify();
    warp::method()
        .and(warp::path::full())
        .and(query)
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<PeerAddr>())
        .and(warp::body::stream())
        .and_then(
            move |method: Method,
                  path: warp::path::FullPath,
                  query: String,
                  headers,
                  peer: Option<PeerAddr>,
                  body| {
                let ctx = ctx.clone();
                async move {
                    let rq = Rq {
                        method: method.as_str(),
                        path: path.as_str(),
                        headers: &headers,
                        peer: peer.map(|p| p.0),
                    };
                    Ok::<_, Infallible>(handle(&ctx, &rq, &query, body).await)
                }
            },
        )
}

/// What the handlers read of a request besides its query and body.
struct Rq<'a> {
    method: &'a str,
    path: &'a str,
    headers: &'a HeaderMap,
    peer: Option<std::net::SocketAddr>,
}

async fn handle<S, B>(ctx: &Ctx, rq: &Rq<'_>, query: &str, body: S) -> Response<Body>
where
    S: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let (method, path) = (rq.method, rq.path);
    let read = matches!(method, "GET" | "HEAD");
    if let Some(check) = Check::for_path(path) {
        return match method {
            "GET" | "HEAD" | "OPTIONS" => health(ctx, check, query, method != "GET"),
            _ => text(405, "method not allowed"),
        };
    }
    let state = &ctx.state;
    match (read, path) {
        (true, "/patroni") => {
            let p = state.published.borrow();
            let fresh = state.newer_snapshot(&p);
            json(200, &status::patroni_json_fresh(&p, fresh.as_ref()))
        }
        (true, "/cluster") => from_snapshot(ctx, |p, c| (200, status::cluster_json(p, c))),
        (true, "/history") => from_snapshot(ctx, |_, c| {
            (
                200,
                c.history.clone().unwrap_or_else(|| serde_json::json!([])),
            )
        }),
        (true, "/failsafe") => from_snapshot(ctx, |_, c| match &c.cluster.failsafe {
            Some(k) => (200, serde_json::json!(k)),
            None => (502, serde_json::json!("no valid failsafe key in the store")),
        }),
        (true, "/config") => from_snapshot(ctx, |_, c| match &c.config {
            Some((v, _)) => (200, v.clone()),
            None => (502, serde_json::json!("no config in the store")),
        }),
        (true, "/metrics") => {
            let now = (state.clock)();
            let body = metrics::render(&state.published.borrow(), now);
            respond(200, "text/plain; version=0.0.4; charset=utf-8", body)
        }
        _ => match (method, path) {
            ("PATCH" | "PUT", "/config")
            | ("POST" | "DELETE", "/switchover")
            | ("DELETE", "/restart")
            | ("POST", "/failover" | "/restart" | "/reinitialize" | "/reload" | "/failsafe") => {
                control(ctx, rq, body).await
            }
            _ if PATHS.contains(&path) => text(405, "method not allowed"),
            _ => text(404, "not found"),
        },
    }
}

/// A health check: 200 or 503, with `/patroni`'s body on GET except for liveness/readiness.
fn health(ctx: &Ctx, check: Check, query: &str, code_only: bool) -> Response<Body> {
    let q = match HealthQuery::parse(&parse_query(query)) {
        Ok(q) => q,
        Err(message) => return text(400, &message),
    };
    let now = (ctx.state.clock)();
    let p = ctx.state.published.borrow();
    let code = if healthy(check, &q, &p, now) {
        200
    } else {
        503
    };
    if code_only || !check.has_body() {
        return respond(code, "text/plain; charset=utf-8", Vec::new());
    }
    json(code, &status::patroni_json(&p))
}

/// Answer from the freshest store snapshot (the mirror's, or the loop's last read); 503 before the first one.
fn from_snapshot(
    ctx: &Ctx,
    f: impl FnOnce(&super::Published, &crate::dcs::ClusterSnapshot) -> (u16, serde_json::Value),
) -> Response<Body> {
    let p = ctx.state.published.borrow();
    let fresh = ctx.state.newer_snapshot(&p);
    match fresh.as_ref().or(p.cluster.as_ref()) {
        Some(c) => {
            let (code, v) = f(&p, c);
            json(code, &v)
        }
        None => text(
            503,
            "the cluster state is not known yet: no successful read of the store",
        ),
    }
}

/// A mutating request: credentials, then the bounded body, then its parse, then the agent's answer.
async fn control<S, B>(ctx: &Ctx, rq: &Rq<'_>, body: S) -> Response<Body>
where
    S: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let (method, path, headers) = (rq.method, rq.path, rq.headers);
    if let Some(refused) = authorize(ctx, rq) {
        return refused;
    }
    let bytes = match read_body(headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if path == "/failsafe" {
        // Peer to peer, with the same credentials as every control request (Patroni's check_access).
        let now = (ctx.state.clock)();
        let (code, message) = super::failsafe::post(&ctx.state.failsafe, now, &bytes);
        tracing::debug!(code, %message, "REST API: POST /failsafe");
        return text(code, &message);
    }
    let c = &ctx.state.control;
    let outcome: Result<Response<Body>, ControlError> = async {
        Ok(match (method, path) {
            ("PATCH", _) => json(
                200,
                &c.patch_config(bad(requests::config_patch(&bytes))?).await?,
            ),
            ("PUT", _) => json(
                200,
                &c.put_config(bad(requests::config_patch(&bytes))?).await?,
            ),
            ("POST", "/switchover") => accepted(c.switchover(requests::switchover(&bytes)?).await?),
            ("DELETE", "/restart") => {
                bad(requests::no_body(&bytes))?;
                accepted(c.cancel_restart().await?)
            }
            ("DELETE", _) => {
                bad(requests::no_body(&bytes))?;
                accepted(c.cancel_switchover().await?)
            }
            ("POST", "/failover") => match requests::failover(&bytes)? {
                FailoverOrSwitchover::Failover(r) => accepted(c.failover(r).await?),
                FailoverOrSwitchover::Switchover(r) => accepted(c.switchover(r).await?),
            },
            ("POST", "/restart") => accepted(c.restart(requests::restart(&bytes)?).await?),
            ("POST", "/reinitialize") => {
                accepted(c.reinitialize(bad(requests::reinitialize(&bytes))?).await?)
            }
            _ => {
                bad(requests::no_body(&bytes))?;
                accepted(c.reload().await?)
            }
        })
    }
    .await;
    let r = outcome.unwrap_or_else(|e| text(e.status, &e.message));
    tracing::info!(
        method,
        path,
        status = r.status().as_u16(),
        "REST API: control request"
    );
    r
}

/// `None` when the request may go on; else the refusal (401/403, or 429 for a client over the limit),
/// logged with the client's address (a few lines per interval, then a count: `RefusalLog`).
fn authorize(ctx: &Ctx, rq: &Rq<'_>) -> Option<Response<Body>> {
    let now_ms = (ctx.state.clock)().0;
    let client = rq.peer.map(|p| p.ip());
    let log = |status: u16| {
        if !ctx.refusals.admit(now_ms) {
            return;
        }
        let client = client.map(|c| c.to_string()).unwrap_or_else(|| "?".into());
        tracing::warn!(
            method = rq.method,
            path = rq.path,
            status,
            client = %client,
            "REST API: refused a control request"
        );
    };
    if let Some(retry_s) = client.and_then(|c| ctx.limiter.retry_after_s(c, now_ms)) {
        log(429);
        let mut r = text(429, "too many failed authentication attempts: retry later");
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(retry_s));
        return Some(r);
    }
    let checked = ctx
        .auth
        .check(rq.headers.get(AUTHORIZATION).map(HeaderValue::as_bytes));
    match (checked, client) {
        (Ok(()), Some(c)) => ctx.limiter.succeeded(c),
        (Err(Denied::Wrong), Some(c)) => ctx.limiter.failed(c, now_ms),
        _ => {}
    }
    let denied = checked.err()?;
    log(denied.status());
    let mut r = text(denied.status(), denied.message());
    if denied.status() == 401 {
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static(ctx.auth.challenge()),
        );
    }
    Some(r)
}

/// The body, at most `MAX_BODY_BYTES` (413 beyond, whether announced by Content-Length or not).
async fn read_body<S, B>(headers: &HeaderMap, body: S) -> Result<Vec<u8>, Response<Body>>
where
    S: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let too_large = || {
        text(
            413,
            &format!("request body larger than {MAX_BODY_BYTES} bytes"),
        )
    };
    let announced = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = std::pin::pin!(body);
    let mut out = Vec::new();
    while let Some(chunk) = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await {
        let mut chunk =
            chunk.map_err(|e| text(400, &format!("cannot read the request body: {e}")))?;
        if out.len() + chunk.remaining() > MAX_BODY_BYTES {
            return Err(too_large());
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            out.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    Ok(out)
}

/// `a=1&tag_zone=b%20c` into decoded pairs (`+` is a space; a bad escape stays as written).
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() && hex(b[i + 1]).is_some() && hex(b[i + 2]).is_some() => {
                out.push((hex(b[i + 1]).unwrap_or(0) * 16 + hex(b[i + 2]).unwrap_or(0)) as u8);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request body the API refuses: 400 with the parser's message.
fn bad<T>(parsed: Result<T, String>) -> Result<T, ControlError> {
    parsed.map_err(|m| ControlError::new(400, m))
}

fn accepted(a: Accepted) -> Response<Body> {
    text(a.status, &a.message)
}

fn json(status: u16, v: &serde_json::Value) -> Response<Body> {
    respond(status, "application/json", v.to_string())
}

fn text(status: u16, message: &str) -> Response<Body> {
    respond(status, "text/plain; charset=utf-8", message.to_string())
}

fn respond(status: u16, content_type: &'static str, body: impl Into<Body>) -> Response<Body> {
    let mut r = Response::new(body.into());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
