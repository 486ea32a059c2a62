//! A Consul-compatible **test double**, not Consul: an in-process HTTP server on a free loopback port that
//! implements the subset of Consul's API tenure uses, with the documented semantics of
//! /work/shared/reference/consul.md (sessions whose TTL is only a lower bound, lock-delay on invalidation
//! only, `acquire`/`release`/`cas`/`recurse`, `X-Consul-Index` on every KV answer, blocking queries,
//! `?consistent`/`?stale`, ACL tokens) plus fault switches real Consul cannot be asked for.
//! It is what the contract suite runs against when no real Consul is around; where it and Consul disagree,
//! Consul is right and this file is the bug.
pub mod pki;
mod state;
mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use state::{session_json, State};
use wire::{parse_go_duration_ms, read_request, write_response, Request, Response};

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct ConsulTestOptions {
    /// Consul's `session_ttl_min` (default 10 s). Tests lower it, as Patroni's own tests do (to 5 s there).
    pub session_ttl_min_ms: u64,
    /// When set, every request must carry this token (`X-Consul-Token` or `Authorization: Bearer`), else 403.
    pub acl_token: Option<String>,
    /// Serve HTTPS instead of HTTP (Consul's `ports.https`).
    pub tls: Option<ServerTls>,
}

/// PEM files for the HTTPS listener.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// When set, clients must present a certificate signed by this CA (Consul's `verify_incoming`).
    pub client_ca: Option<std::path::PathBuf>,
}

impl Default for ConsulTestOptions {
    fn default() -> Self {
        ConsulTestOptions {
            session_ttl_min_ms: 10_000,
            acl_token: None,
            tls: None,
        }
    }
}

/// A fault applied to every request from now on (sessions keep expiring meanwhile, as they would, except
/// under `Stopped`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// 500 `No cluster leader` for everything.
    NoLeader,
    /// Answer normally, but only after this many ms.
    DelayMs(u64),
    /// Read the request, then close the connection without answering.
    DropConnections,
    /// Requests hang until the fault is changed.
    Freeze,
    /// The server process stopped (SIGSTOP): requests hang and no session expires; once it runs again,
    /// requests are answered at once and what expired meanwhile is reaped `STOPPED_REAP_DELAY` later (a
    /// thawed etcd revokes expired leases after its lessor's tick; a restarted Consul resets session TTLs).
    Stopped,
}

/// After `Fault::Stopped`, how long expired sessions (and their keys) stay visible.
pub const STOPPED_REAP_DELAY: Duration = Duration::from_secs(2);

/// The running server. Stops on `stop()` or when dropped.
pub struct ConsulTestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

struct Shared {
    opts: ConsulTestOptions,
    state: Mutex<State>,
    /// Bumped on every KV change; blocking queries wait on it.
    changes: watch::Sender<u64>,
    fault: watch::Sender<Fault>,
    /// Every request received, as `METHOD /path?query`, for tests that check what the client sent.
    log: Mutex<Vec<String>>,
}

impl ConsulTestServer {
    pub async fn start(opts: ConsulTestOptions) -> ConsulTestServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local addr");
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let state = State {
            rng: seed ^ u64::from(addr.port()) | 1,
            // A real cluster's Raft log already holds entries before the first KV write, so that write's index
            // is above the 1 an empty KV table reports; starting at 0 would make it indistinguishable.
            index: 10,
            ..State::default()
        };
        let shared = Arc::new(Shared {
            opts,
            state: Mutex::new(state),
            changes: watch::channel(0).0,
            fault: watch::channel(Fault::None).0,
            log: Mutex::new(Vec::new()),
        });
        let (shutdown, _) = watch::channel(false);
        let acceptor = shared.opts.tls.as_ref().map(pki::acceptor);
        let accept = tokio::spawn(accept_loop(
            listener,
            acceptor,
            shared.clone(),
            shutdown.subscribe(),
        ));
        let reaper = tokio::spawn(reap_loop(shared.clone()));
        ConsulTestServer {
            addr,
            shared,
            shutdown,
            tasks: vec![accept, reaper],
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        let scheme = if self.shared.opts.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    pub fn set_fault(&self, fault: Fault) {
        self.shared.fault.send_replace(fault);
    }

    /// The requests received so far, oldest first, each as `METHOD /path?query`; the log is emptied.
    pub fn take_requests(&self) -> Vec<String> {
        std::mem::take(&mut *self.shared.log.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Live sessions (for assertions about cleanup).
    pub fn session_count(&self) -> usize {
        self.shared.lock().sessions.len()
    }

    /// Stop listening and close every connection: clients then see connection errors.
    pub fn stop(&mut self) {
        self.shutdown.send_replace(true);
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for ConsulTestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                // As Go's net package does for every TCP connection a real Consul accepts.
                let _ = stream.set_nodelay(true);
                let (shared, mut stop, acceptor) = (shared.clone(), shutdown.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let conn = async move {
                        match acceptor {
                            // A failed handshake (no or wrong client certificate) just closes the connection.
                            Some(a) => if let Ok(tls) = a.accept(stream).await { serve(tls, shared).await },
                            None => serve(stream, shared).await,
                        }
                    };
                    tokio::select! {
                        _ = stop.changed() => {}
                        _ = conn => {}
                    }
                });
            }
        }
    }
}

/// Sessions expire by timer; a coarse 5 ms tick is plenty against TTLs of hundreds of ms.
async fn reap_loop(shared: Arc<Shared>) {
    let mut was_stopped = false;
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if *shared.fault.borrow() == Fault::Stopped {
            was_stopped = true;
            continue;
        }
        if std::mem::take(&mut was_stopped) {
            tokio::time::sleep(STOPPED_REAP_DELAY).await;
        }
        let now = Instant::now();
        let mut st = shared.lock();
        let due: Vec<String> = st
            .sessions
            .iter()
            .filter(|(_, s)| s.expires_at.is_some_and(|t| t <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            st.invalidate(&id, &shared.changes);
        }
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S, shared: Arc<Shared>) {
    let (r, mut w) = tokio::io::split(stream);
    let mut r = BufReader::new(r);
    while let Ok(Some(req)) = read_request(&mut r).await {
        shared
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(req.line());
        let mut fault_rx = shared.fault.subscribe();
        loop {
            let fault = *fault_rx.borrow_and_update();
            match fault {
                Fault::Freeze | Fault::Stopped => {
                    if fault_rx.changed().await.is_err() {
                        return;
                    }
                }
                Fault::DropConnections => return,
                Fault::DelayMs(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    break;
                }
                Fault::NoLeader | Fault::None => break,
            }
        }
        let resp = if *shared.fault.borrow() == Fault::NoLeader {
            Response::text(500, "No cluster leader")
        } else {
            handle(&shared, &req).await
        };
        if write_response(&mut w, &resp).await.is_err() || req.wants_close() {
            return;
        }
    }
}

async fn handle(shared: &Shared, req: &Request) -> Response {
    if let Some(expected) = &shared.opts.acl_token {
        let given = req.headers.get("x-consul-token").cloned().or_else(|| {
            req.headers
                .get("authorization")
                .and_then(|a| a.strip_prefix("Bearer "))
                .map(str::to_string)
        });
        match given {
            Some(t) if &t == expected => {}
            Some(_) => return Response::text(403, "ACL not found"),
            None => return Response::text(403, "Permission denied"),
        }
    }
    if req.has("consistent") && req.has("stale") {
        return Response::text(
            400,
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        );
    }
    let path = req.path.as_str();
    if let Some(key) = path.strip_prefix("/v1/kv/") {
        return match req.method.as_str() {
            "GET" => kv_get(shared, req, key).await,
            "PUT" => shared.lock().kv_put(req, key, &shared.changes),
            "DELETE" => shared.lock().kv_delete(req, key, &shared.changes),
            _ => Response::text(405, "method not allowed"),
        };
    }
    let mut st = shared.lock();
    match (req.method.as_str(), path) {
        ("GET", "/v1/agent/self") => Response::json(200, &agent_self(&shared.opts)),
        ("PUT", "/v1/session/create") => st.session_create(&shared.opts, &req.body),
        ("PUT", p) if p.starts_with("/v1/session/renew/") => {
            st.session_renew(&p["/v1/session/renew/".len()..])
        }
        ("PUT", p) if p.starts_with("/v1/session/destroy/") => {
            st.invalidate(&p["/v1/session/destroy/".len()..], &shared.changes);
            Response::json(200, &json!(true))
        }
        ("GET", p) if p.starts_with("/v1/session/info/") => {
            let id = &p["/v1/session/info/".len()..];
            let info: Vec<Value> = st
                .sessions
                .get(id)
                .map(|s| session_json(id, s))
                .into_iter()
                .collect();
            Response::json(200, &Value::Array(info)).with_index(st.index)
        }
        _ => Response::text(404, "no such endpoint in the Consul test double"),
    }
}

/// `GET /v1/agent/self`, the parts a client reads: today's Consul reports the agent's `session_ttl_min` in
/// `DebugConfig.SessionTTLMin` (a Go duration string); Consul before 1.0 had it in `Config` as nanoseconds,
/// which is where Patroni's `adjust_ttl` still looks (it calls this after an "Invalid Session TTL" answer),
/// so both are served.
fn agent_self(opts: &ConsulTestOptions) -> Value {
    json!({
        "Config": {
            "Datacenter": "dc1",
            "PrimaryDatacenter": "dc1",
            "NodeName": "test-double",
            "NodeID": "00000000-0000-0000-0000-000000000001",
            "Revision": "test-double",
            "Server": true,
            "Version": "1.16.0",
            "SessionTTLMin": opts.session_ttl_min_ms * 1_000_000,
        },
        "DebugConfig": {
            "SessionTTLMin": format!("{}ms", opts.session_ttl_min_ms),
        },
        "Member": {"Name": "test-double", "Addr": "127.0.0.1", "Port": 8301, "Status": 1},
        "Meta": {},
    })
}

/// `GET /v1/kv/<key>`: plain, `?recurse`, or blocking with `?index=&wait=`.
async fn kv_get(shared: &Shared, req: &Request, key: &str) -> Response {
    let min_index: u64 = req.param("index").and_then(|i| i.parse().ok()).unwrap_or(0);
    let wait_ms = req
        .param("wait")
        .and_then(parse_go_duration_ms)
        .unwrap_or(300_000)
        .min(600_000);
    let mut changes = shared.changes.subscribe();
    let jitter_ms = if wait_ms >= 16 {
        shared.lock().random(wait_ms / 16)
    } else {
        0
    };
    let give_up = Instant::now() + Duration::from_millis(wait_ms + jitter_ms);
    loop {
        changes.borrow_and_update();
        let (resp, index) = shared.lock().kv_read(key, req.has("recurse"));
        // Consul answers when the index moved past the one the client holds, or when the wait runs out.
        if min_index == 0 || index > min_index || Instant::now() >= give_up {
            return resp;
        }
        if tokio::time::timeout_at(give_up, changes.changed())
            .await
            .is_err()
        {
            let (resp, _) = shared.lock().kv_read(key, req.has("recurse"));
            return resp;
        }
    }
}
