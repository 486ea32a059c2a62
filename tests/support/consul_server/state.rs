//! The Consul test double's data: sessions, KV entries, tombstones and lock-delays, and the operations on
//! them, each applied atomically under the server's one lock (as Consul applies one Raft entry).
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::wire::{parse_go_duration_ms, Request, Response};
use super::ConsulTestOptions;

#[derive(Default)]
pub struct State {
    /// The Raft index: one step per write.
    pub index: u64,
    /// Index of the last KV change (the `kvs`+`tombstones` table index).
    pub kv_index: u64,
    pub kv: BTreeMap<String, Entry>,
    pub tombstones: BTreeMap<String, u64>,
    pub sessions: HashMap<String, Session>,
    pub lock_delays: HashMap<String, Instant>,
    pub rng: u64,
}

pub struct Entry {
    pub value: Vec<u8>,
    pub flags: u64,
    pub create_index: u64,
    pub modify_index: u64,
    pub lock_index: u64,
    pub session: Option<String>,
}

pub struct Session {
    pub name: String,
    pub ttl_ms: u64,
    /// The TTL as the client wrote it: Consul stores and reports that string.
    pub ttl: String,
    pub delete: bool,
    pub lock_delay_ms: u64,
    pub expires_at: Option<Instant>,
    pub create_index: u64,
    /// Bound node checks; nothing invalidates on them here (there are no nodes), they are only reported.
    pub node_checks: Vec<String>,
}

pub const MAX_TTL_MS: u64 = 86_400_000;
pub const MAX_VALUE_BYTES: usize = 512 * 1024;

pub fn session_json(id: &str, s: &Session) -> Value {
    json!({
        "ID": id, "Name": s.name, "Node": "test-double", "LockDelay": s.lock_delay_ms * 1_000_000,
        "Behavior": if s.delete { "delete" } else { "release" },
        "TTL": s.ttl,
        "NodeChecks": s.node_checks, "ServiceChecks": [], "CreateIndex": s.create_index, "ModifyIndex": s.create_index,
    })
}

pub fn entry_json(key: &str, e: &Entry) -> Value {
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
    pub fn random(&mut self, below: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        if below == 0 {
            0
        } else {
            self.rng % (below + 1)
        }
    }

    pub fn next_index(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    pub fn kv_changed(&mut self, index: u64, changes: &watch::Sender<u64>) {
        self.kv_index = index;
        changes.send_replace(index);
    }

    /// Consul will not expire a session before its TTL, and may take up to twice as long (consul.md §1).
    pub fn arm(&mut self, id: &str) {
        let Some(ttl_ms) = self.sessions.get(id).map(|s| s.ttl_ms) else {
            return;
        };
        let extra = self.random(ttl_ms);
        if let Some(s) = self.sessions.get_mut(id) {
            s.expires_at =
                (ttl_ms > 0).then(|| Instant::now() + Duration::from_millis(ttl_ms + extra));
        }
    }

    pub fn session_create(&mut self, opts: &ConsulTestOptions, body: &[u8]) -> Response {
        // Consul decodes the body with Go's encoding/json into `structs.Session`: field names match
        // case-insensitively (python-consul sends `ttl`, `behavior`, `lockdelay`, `checks`), unknown fields
        // are ignored, and a value of the wrong type is a decode error (400).
        let req: Value = if body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice(body) {
                Ok(v @ Value::Object(_)) | Ok(v @ Value::Null) => v,
                Ok(other) => {
                    return Response::text(
                        400,
                        &format!("Request decode failed: json: cannot unmarshal {} into Go value of type structs.Session", go_kind(&other)),
                    )
                }
                Err(e) => return Response::text(400, &format!("Request decode failed: {e}")),
            }
        };
        let text = |name: &str| -> Result<Option<String>, Response> {
            match go_field(&req, name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(Response::text(
                    400,
                    &format!(
                        "Request decode failed: json: cannot unmarshal {} into Go struct field Session.{name} of type string",
                        go_kind(other)
                    ),
                )),
            }
        };
        let (ttl, behavior, name) = match (text("TTL"), text("Behavior"), text("Name")) {
            (Ok(t), Ok(b), Ok(n)) => (t, b, n),
            (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return r,
        };
        let ttl_ms = match ttl.as_deref().filter(|s| !s.is_empty()) {
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
        // Default 15 s; a bare number below 1000 means seconds, else nanoseconds (`FixupLockDelay`, which
        // also finds the key case-insensitively).
        let lock_delay_ms = match go_field(&req, "LockDelay") {
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
        let delete = match behavior.as_deref().unwrap_or("release") {
            "delete" => true,
            "release" | "" => false,
            other => return Response::text(400, &format!("Invalid Behavior setting '{other}'")),
        };
        let name = name.unwrap_or_default();
        let id = format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            self.random(u64::from(u32::MAX)),
            self.random(0xffff),
            self.random(0xffff),
            self.random(0xffff),
            self.random(0xffff_ffff_ffff)
        );
        // `FixupChecks`: given neither `Checks` nor `NodeChecks`, Consul binds the session to `serfHealth`.
        let node_checks = match go_field(&req, "Checks").or_else(|| go_field(&req, "NodeChecks")) {
            None => vec!["serfHealth".to_string()],
            Some(v) => v
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let create_index = self.next_index();
        self.sessions.insert(
            id.clone(),
            Session {
                name,
                ttl_ms,
                ttl: if ttl_ms > 0 {
                    ttl.unwrap_or_default()
                } else {
                    String::new()
                },
                delete,
                lock_delay_ms,
                expires_at: None,
                create_index,
                node_checks,
            },
        );
        self.arm(&id);
        Response::json(200, &json!({ "ID": id }))
    }

    pub fn session_renew(&mut self, id: &str) -> Response {
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
    pub fn invalidate(&mut self, id: &str, changes: &watch::Sender<u64>) {
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
    pub fn kv_read(&self, key: &str, recurse: bool) -> (Response, u64) {
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

    pub fn kv_put(&mut self, req: &Request, key: &str, changes: &watch::Sender<u64>) -> Response {
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

    pub fn kv_delete(
        &mut self,
        req: &Request,
        key: &str,
        changes: &watch::Sender<u64>,
    ) -> Response {
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

/// A field of a JSON object as Go's encoding/json finds it for a struct field: the exact name first, else
/// any key equal to it ignoring ASCII case.
pub fn go_field<'a>(obj: &'a Value, name: &str) -> Option<&'a Value> {
    let map = obj.as_object()?;
    map.get(name).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

/// How Go's decoder names a JSON value's kind in its errors.
fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
