//! A Consul-compatible **test double**, not Consul: an in-process HTTP server on a free loopback port that
//! implements the subset of Consul's API tenure uses, with the documented semantics of
//! /work/shared/reference/consul.md (sessions whose TTL is only a lower bound, lock-delay on invalidation
//! only, `acquire`/`release`/`cas`/`recurse`, `X-Consul-Index` on every KV answer, blocking queries,
//! `?consistent`/`?stale`, ACL tokens) plus fault switches real Consul cannot be asked for.
//! It is what the contract suite runs against when no real Consul is around; where it and Consul disagree,
//! Consul is right and this file is the bug.
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use wire::{parse_go_duration_ms, read_request, write_response, Request, Response};

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct ConsulTestOptions {
    /// Consul's `session_ttl_min` (default 10 s). Tests lower it, as Patroni's own tests do (to 5 s there).
    pub session_ttl_min_ms: u64,
    /// When set, every request must carry this token (`X-Consul-Token` or `Authorization: Bearer`), else 403.
    pub acl_token: Option<String>,
}

impl Default for ConsulTestOptions {
    fn default() -> Self {
        ConsulTestOptions {
            session_ttl_min_ms: 10_000,
            acl_token: None,
        }
    }
}

/// A fault applied to every request from now on (sessions keep expiring meanwhile, as they would).
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
}

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
}

#[derive(Default)]
struct State {
    /// The Raft index: one step per write.
    index: u64,
    /// Index of the last KV change (the `kvs`+`tombstones` table index).
    kv_index: u64,
    kv: BTreeMap<String, Entry>,
    tombstones: BTreeMap<String, u64>,
    sessions: HashMap<String, Session>,
    lock_delays: HashMap<String, Instant>,
    rng: u64,
}

struct Entry {
    value: Vec<u8>,
    flags: u64,
    create_index: u64,
    modify_index: u64,
    lock_index: u64,
    session: Option<String>,
}

struct Session {
    name: String,
    ttl_ms: u64,
    delete: bool,
    lock_delay_ms: u64,
    expires_at: Option<Instant>,
    create_index: u64,
}

const MAX_TTL_MS: u64 = 86_400_000;
const MAX_VALUE_BYTES: usize = 512 * 1024;

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
            ..State::default()
        };
        let shared = Arc::new(Shared {
            opts,
            state: Mutex::new(state),
            changes: watch::channel(0).0,
            fault: watch::channel(Fault::None).0,
        });
        let (shutdown, _) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), shutdown.subscribe()));
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
        format!("http://{}", self.addr)
    }

    pub fn set_fault(&self, fault: Fault) {
        self.shared.fault.send_replace(fault);
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
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let (shared, mut stop) = (shared.clone(), shutdown.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stop.changed() => {}
                        _ = serve(stream, shared) => {}
                    }
                });
            }
        }
    }
}

/// Sessions expire by timer; a coarse 5 ms tick is plenty against TTLs of hundreds of ms.
async fn reap_loop(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
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

async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    while let Ok(Some(req)) = read_request(&mut r).await {
        let mut fault_rx = shared.fault.subscribe();
        loop {
            let fault = *fault_rx.borrow_and_update();
            match fault {
                Fault::Freeze => {
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

fn session_json(id: &str, s: &Session) -> Value {
    json!({
        "ID": id, "Name": s.name, "Node": "test-double", "LockDelay": s.lock_delay_ms * 1_000_000,
        "Behavior": if s.delete { "delete" } else { "release" },
        "TTL": if s.ttl_ms > 0 { format!("{}ms", s.ttl_ms) } else { String::new() },
        "NodeChecks": [], "ServiceChecks": [], "CreateIndex": s.create_index, "ModifyIndex": s.create_index,
    })
}

fn entry_json(key: &str, e: &Entry) -> Value {
    let mut v = json!({
        "Key": key, "Flags": e.flags, "LockIndex": e.lock_index, "CreateIndex": e.create_index,
        "ModifyIndex": e.modify_index,
        "Value": if e.value.is_empty() { Value::Null } else { Value::String(base64::engine::general_purpose::STANDARD.encode(&e.value)) },
    });
    if let Some(s) = &e.session {
        v["Session"] = json!(s);
    }
    v
}

impl State {
    /// xorshift64: the test double needs unpredictability, not quality.
    fn random(&mut self, below: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        if below == 0 {
            0
        } else {
            self.rng % (below + 1)
        }
    }

    fn next_index(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    fn kv_changed(&mut self, index: u64, changes: &watch::Sender<u64>) {
        self.kv_index = index;
        changes.send_replace(index);
    }

    /// Consul will not expire a session before its TTL, and may take up to twice as long (consul.md §1).
    fn arm(&mut self, id: &str) {
        let Some(ttl_ms) = self.sessions.get(id).map(|s| s.ttl_ms) else {
            return;
        };
        let extra = self.random(ttl_ms);
        if let Some(s) = self.sessions.get_mut(id) {
            s.expires_at =
                (ttl_ms > 0).then(|| Instant::now() + Duration::from_millis(ttl_ms + extra));
        }
    }

    fn session_create(&mut self, opts: &ConsulTestOptions, body: &[u8]) -> Response {
        let req: Value = if body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(e) => return Response::text(400, &format!("Request decode failed: {e}")),
            }
        };
        let ttl_ms = match req
            .get("TTL")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            None => 0,
            Some(t) => match parse_go_duration_ms(t) {
                Some(ms) if (opts.session_ttl_min_ms..=MAX_TTL_MS).contains(&ms) => ms,
                _ => {
                    let why = format!(
                        "Invalid Session TTL '{t}', must be between [{}ms={}ms]",
                        opts.session_ttl_min_ms, MAX_TTL_MS
                    );
                    return Response::text(500, &why);
                }
            },
        };
        // Default 15 s; a bare number below 1000 means seconds, else nanoseconds (`FixupLockDelay`).
        let lock_delay_ms = match req.get("LockDelay") {
            None | Some(Value::Null) => Some(15_000),
            Some(Value::String(s)) => parse_go_duration_ms(s),
            Some(Value::Number(n)) => n.as_f64().map(|n| {
                if n < 1000.0 {
                    (n * 1000.0) as u64
                } else {
                    (n / 1e6) as u64
                }
            }),
            Some(_) => None,
        };
        let Some(lock_delay_ms) = lock_delay_ms.filter(|ms| *ms <= 60_000) else {
            return Response::text(400, "Request decode failed: bad LockDelay");
        };
        let delete = match req
            .get("Behavior")
            .and_then(Value::as_str)
            .unwrap_or("release")
        {
            "delete" => true,
            "release" | "" => false,
            other => return Response::text(400, &format!("Invalid Behavior setting '{other}'")),
        };
        let name = req
            .get("Name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let id = format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            self.random(u64::from(u32::MAX)),
            self.random(0xffff),
            self.random(0xffff),
            self.random(0xffff),
            self.random(0xffff_ffff_ffff)
        );
        let create_index = self.next_index();
        self.sessions.insert(
            id.clone(),
            Session {
                name,
                ttl_ms,
                delete,
                lock_delay_ms,
                expires_at: None,
                create_index,
            },
        );
        self.arm(&id);
        Response::json(200, &json!({ "ID": id }))
    }

    fn session_renew(&mut self, id: &str) -> Response {
        if !self.sessions.contains_key(id) {
            return Response::text(404, &format!("Session id '{id}' not found"));
        }
        self.arm(id);
        let info = self
            .sessions
            .get(id)
            .map(|s| session_json(id, s))
            .unwrap_or(Value::Null);
        Response::json(200, &json!([info]))
    }

    /// Destroy or expiry: held keys are deleted or released, and lock-delay starts on each.
    fn invalidate(&mut self, id: &str, changes: &watch::Sender<u64>) {
        let Some(session) = self.sessions.remove(id) else {
            return;
        };
        let held: Vec<String> = self
            .kv
            .iter()
            .filter(|(_, e)| e.session.as_deref() == Some(id))
            .map(|(k, _)| k.clone())
            .collect();
        if held.is_empty() {
            return;
        }
        let index = self.next_index();
        for key in held {
            if session.lock_delay_ms > 0 {
                self.lock_delays.insert(
                    key.clone(),
                    Instant::now() + Duration::from_millis(session.lock_delay_ms),
                );
            }
            if session.delete {
                self.kv.remove(&key);
                self.tombstones.insert(key, index);
            } else if let Some(e) = self.kv.get_mut(&key) {
                e.session = None;
                e.modify_index = index;
            }
        }
        self.kv_changed(index, changes);
    }

    /// The answer to a read and the index a blocking query compares (consul.md §3).
    fn kv_read(&self, key: &str, recurse: bool) -> (Response, u64) {
        if recurse {
            let entries: Vec<(&String, &Entry)> = self
                .kv
                .range(key.to_string()..)
                .take_while(|(k, _)| k.starts_with(key))
                .collect();
            let tomb = self
                .tombstones
                .range(key.to_string()..)
                .take_while(|(k, _)| k.starts_with(key))
                .map(|(_, i)| *i);
            let max = entries
                .iter()
                .map(|(_, e)| e.modify_index)
                .chain(tomb)
                .max()
                .unwrap_or(0);
            let index = if max == 0 { self.kv_index } else { max }.max(1);
            if entries.is_empty() {
                return (Response::text(404, "").with_index(index), index);
            }
            let list: Vec<Value> = entries.iter().map(|(k, e)| entry_json(k, e)).collect();
            return (
                Response::json(200, &Value::Array(list)).with_index(index),
                index,
            );
        }
        match self.kv.get(key) {
            Some(e) => (
                Response::json(200, &json!([entry_json(key, e)])).with_index(e.modify_index),
                e.modify_index,
            ),
            None => {
                let index = self.kv_index.max(1);
                (Response::text(404, "").with_index(index), index)
            }
        }
    }

    fn kv_put(&mut self, req: &Request, key: &str, changes: &watch::Sender<u64>) -> Response {
        let modes = ["cas", "acquire", "release"]
            .iter()
            .filter(|m| req.has(m))
            .count();
        if modes > 1 {
            return Response::text(
                400,
                "Conflicting flags: cas, acquire and release are exclusive",
            );
        }
        if req.body.len() > MAX_VALUE_BYTES {
            return Response::text(
                413,
                &format!("Request body too large, max size: {MAX_VALUE_BYTES} bytes"),
            );
        }
        let flags = req.param("flags").and_then(|f| f.parse().ok()).unwrap_or(0);
        let existing = self.kv.get(key);
        let old_create_index = existing.map(|e| e.create_index);
        let mut lock_index = existing.map_or(0, |e| e.lock_index);
        let mut session = existing.and_then(|e| e.session.clone());
        if let Some(s) = req.param("acquire") {
            if !self.sessions.contains_key(s) {
                return Response::text(500, &format!("invalid session \"{s}\""));
            }
            let held_by_us = session.as_deref() == Some(s);
            let delayed = self
                .lock_delays
                .get(key)
                .is_some_and(|t| *t > Instant::now());
            // Held by another session, or within a lock-delay after an invalidation: refused.
            if !held_by_us && (session.is_some() || delayed) {
                return Response::json(200, &json!(false));
            }
            // Re-acquiring by the holder only updates the value; LockIndex counts grants.
            if !held_by_us {
                lock_index += 1;
                session = Some(s.to_string());
            }
        } else if let Some(s) = req.param("release") {
            if session.as_deref() != Some(s) {
                return Response::json(200, &json!(false));
            }
            session = None;
        } else if let Some(cas) = req.param("cas") {
            let Ok(cas) = cas.parse::<u64>() else {
                return Response::text(400, "Invalid cas index");
            };
            let ok = match existing {
                None => cas == 0,
                Some(e) => cas != 0 && e.modify_index == cas,
            };
            if !ok {
                return Response::json(200, &json!(false));
            }
        }
        let index = self.next_index();
        let create_index = old_create_index.unwrap_or(index);
        self.kv.insert(
            key.to_string(),
            Entry {
                value: req.body.clone(),
                flags,
                create_index,
                modify_index: index,
                lock_index,
                session,
            },
        );
        self.tombstones.remove(key);
        self.kv_changed(index, changes);
        Response::json(200, &json!(true))
    }

    fn kv_delete(&mut self, req: &Request, key: &str, changes: &watch::Sender<u64>) -> Response {
        let keys: Vec<String> = if req.has("recurse") {
            self.kv
                .range(key.to_string()..)
                .take_while(|(k, _)| k.starts_with(key))
                .map(|(k, _)| k.clone())
                .collect()
        } else {
            vec![key.to_string()]
        };
        if let Some(cas) = req.param("cas") {
            let Ok(cas) = cas.parse::<u64>() else {
                return Response::text(400, "Invalid cas index");
            };
            if cas == 0 || self.kv.get(key).map(|e| e.modify_index) != Some(cas) {
                return Response::json(200, &json!(false));
            }
        }
        let index = self.next_index();
        for k in keys {
            if self.kv.remove(&k).is_some() {
                self.tombstones.insert(k, index);
            }
        }
        self.kv_changed(index, changes);
        Response::json(200, &json!(true))
    }
}
