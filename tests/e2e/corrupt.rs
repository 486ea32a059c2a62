//! Store corruption end to end (issue 13): garbage written into every key of a running cluster's namespace
//! (three real agents, PostgreSQL 15, a real etcd or the Consul test double). What a DBA cares about:
//! the primary stays primary and writable, no replica promotes, never two primaries (the checker samples
//! every 100 ms), every agent stays alive and logs a line naming the key, and once the key is repaired the
//! cluster works again (a repaired config applies, a failover still happens).
//!
//! Run with `cargo test --test e2e_corrupt -- --nocapture` (as root or as `postgres`).
//!
//! What "safe" means, key by key (Patroni's `dcs/__init__.py` `from_node` parsers for comparison):
//! - `members/<name>`: Patroni reads an unreadable record as `{}`, a member with no role, state or LSN,
//!   so never a candidate. tenure skips the record with a warning: the same, the peer is no candidate. The
//!   owner rewrites its record every loop, which is the repair.
//! - `config`: Patroni falls back to `{}` (its defaults). tenure cannot guess `pause` (an unpaused guess
//!   would make the core act), so a `config` that is not a JSON object is unreadable: every agent acts on
//!   the last valid one it read (a crashed primary is still replaced: `..._garbage_config_then_the_primary_
//!   crashes`), and one that never read a valid one stands still as in a store outage; JSON of the wrong
//!   types is refused by the settings parser and the last valid settings are kept. See docs/differences.md.
//! - `failover`: ignored with a warning, as Patroni ignores what it cannot parse; no switchover happens.
//! - `history`, `status`, `failsafe`, `initialize`: an unreadable value counts as absent (Patroni: an
//!   empty history, optime 0, no failsafe); the leader rewrites `status` each loop and `initialize` with
//!   its system identifier, which repairs them. A numeric `initialize` that is not our system identifier
//!   makes replicas refuse to follow it (Patroni exits), until the leader rewrote it.
//! - `sync`: tenure does not read it (no synchronous mode yet), so garbage there changes nothing.
//! - `leader`: the one key where garbage cannot leave the primary alone. A put replaces the value (etcd:
//!   and drops the lease), so the primary no longer holds the key and steps down, as Patroni's does; the
//!   key still exists, so no replica races (Patroni: a leader key with any name but an empty one is
//!   present; tenure counts an empty one too, see docs/differences.md). Deleting it is the repair: one
//!   member takes the key again and the cluster converges.
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use base64::Engine as _;
use support::cluster::{Cluster, StoreKind, NODES};

use common::{create_table, log, others, CONVERGE_BUDGET, REJOIN_BUDGET, TTL};

/// How long each garbage value stays in the store at least: two agent loops (loop_wait 1 s)...
const HOLD_MIN: Duration = Duration::from_secs(2);
/// ... and at most, if some agent has not logged it yet.
const HOLD_MAX: Duration = Duration::from_secs(8);
/// How often an owned key is checked while it is held, and the garbage written again once its owner (a
/// member, the leader's `status`) rewrote it: every agent must read the garbage at least once. Writing it
/// again every 250 ms was too coarse: agents loop at the same 1 s period, so a reader that reads shortly
/// after the owner's rewrite stayed phase-locked there and never saw the garbage in 8 s (seen in CI and
/// here, after the member key moved to the end of the owner's cycle). Put again only when it changed, so a
/// large value is not written 200 times a second.
const REWRITE_EVERY: Duration = Duration::from_millis(5);
/// How often the agents' logs are read while a key is held.
const LOG_CHECK_EVERY: Duration = Duration::from_millis(250);

/// Raw access to the store's keys under `/service/e2e/`, as an operator's tool (or a bug) would write them.
struct Kv {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    store: Store,
}

enum Store {
    /// etcd's v3 JSON gateway base URL.
    Etcd(String),
    /// The Consul HTTP API's base URL.
    Consul(String),
}

impl Kv {
    fn new(c: &Cluster) -> Kv {
        let store = match (c.etcd(), c.consul()) {
            (Some(e), _) => Store::Etcd(e.client_url().trim_end_matches('/').to_string()),
            (None, Some(s)) => Store::Consul(s.url().trim_end_matches('/').to_string()),
            _ => panic!("a single etcd or the Consul test double"),
        };
        Kv {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
            store,
        }
    }

    /// The largest value this store accepts, up to 1 MiB (Consul caps values at 512 KiB).
    fn max_value(&self) -> usize {
        match self.store {
            Store::Etcd(_) => 1 << 20,
            Store::Consul(_) => (512 << 10) - 1,
        }
    }

    fn key(&self, rel: &str) -> String {
        match self.store {
            Store::Etcd(_) => format!("/service/e2e/{rel}"),
            Store::Consul(_) => format!("service/e2e/{rel}"),
        }
    }

    fn put(&self, rel: &str, value: &[u8]) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = self.key(rel);
        let status = self.rt.block_on(async {
            let req = match &self.store {
                Store::Etcd(url) => self.http.post(format!("{url}/v3/kv/put")).json(
                    &serde_json::json!({"key": b64.encode(&key), "value": b64.encode(value)}),
                ),
                Store::Consul(url) => self
                    .http
                    .put(format!("{url}/v1/kv/{key}"))
                    .body(value.to_vec()),
            };
            req.send().await.map(|r| r.status().as_u16())
        });
        assert_eq!(status.ok(), Some(200), "put {key} ({} bytes)", value.len());
    }

    fn delete(&self, rel: &str) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = self.key(rel);
        let status = self.rt.block_on(async {
            let req = match &self.store {
                Store::Etcd(url) => self
                    .http
                    .post(format!("{url}/v3/kv/deleterange"))
                    .json(&serde_json::json!({"key": b64.encode(&key)})),
                Store::Consul(url) => self.http.delete(format!("{url}/v1/kv/{key}")),
            };
            req.send().await.map(|r| r.status().as_u16())
        });
        assert_eq!(status.ok(), Some(200), "delete {key}");
    }

    /// The raw value, None when the key does not exist.
    fn get(&self, rel: &str) -> Option<Vec<u8>> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = self.key(rel);
        self.rt.block_on(async {
            match &self.store {
                Store::Etcd(url) => {
                    let r = self
                        .http
                        .post(format!("{url}/v3/kv/range"))
                        .json(&serde_json::json!({"key": b64.encode(&key)}))
                        .send()
                        .await
                        .expect("etcd range");
                    let v: serde_json::Value = r.json().await.expect("etcd range answer");
                    let kv = v["kvs"].get(0)?;
                    // An empty value is absent from the gateway's JSON.
                    Some(
                        b64.decode(kv["value"].as_str().unwrap_or(""))
                            .expect("base64"),
                    )
                }
                Store::Consul(url) => {
                    let r = self
                        .http
                        .get(format!("{url}/v1/kv/{key}"))
                        .send()
                        .await
                        .expect("consul get");
                    if r.status() == 404 {
                        return None;
                    }
                    // The double has no `?raw`: the entry's `Value` is base64, null for an empty value.
                    let v: serde_json::Value = r.json().await.expect("consul entries");
                    Some(
                        b64.decode(v[0]["Value"].as_str().unwrap_or(""))
                            .expect("base64"),
                    )
                }
            }
        })
    }
}

/// Garbage every key gets: not JSON, JSON of the wrong shape, wrong types, numbers no type holds, an empty
/// value, bytes that are not UTF-8, and a huge value (1 MiB where the store takes it).
///
/// A key its owner rewrites every loop (members, `status`, `initialize`) must be written again 4 times a
/// second to be read at all; 1 MiB at that rate loads etcd until reads time out and the primary fences
/// itself, as in a store outage (seen in a run: safe, but it tests the store, not the agent). Those keys
/// get 64 KiB instead.
fn garbage(kv: &Kv, owned: bool) -> Vec<(&'static str, Vec<u8>)> {
    // Truncated: a huge value that is valid JSON would be a valid (if odd) `config`.
    let mut huge = b"{\"x\": \"".to_vec();
    huge.resize(if owned { 64 << 10 } else { kv.max_value() }, b'x');
    vec![
        ("not JSON", b"{not json".to_vec()),
        ("a JSON array", b"[1, 2, 3]".to_vec()),
        ("a JSON string", b"\"garbage\"".to_vec()),
        (
            "wrong types",
            br#"{"role": 7, "state": [], "leader": 5, "member": ["n2"], "timeline": "two", "optime": "x",
                "ttl": "soon", "pause": {"x": 1}, "xlog_location": -1}"#
                .to_vec(),
        ),
        (
            "huge numbers",
            br#"{"member": 99999999999999999999999, "timeline": 99999999999999999999999, "xlog_location": 1e308, "optime": 1e999,
                "ttl": 1e300, "loop_wait": 9223372036854776000}"#
                .to_vec(),
        ),
        ("empty", Vec::new()),
        ("not UTF-8", b"\xff\xfe\x00garbage\xc3".to_vec()),
        ("huge truncated JSON (1 MiB, the store's maximum, or 64 KiB)", huge),
    ]
}

/// Whether an agent rewrites key `rel` on its own every loop.
fn owned(rel: &str) -> bool {
    rel.starts_with("members/") || rel == "status" || rel == "initialize"
}

/// Node `i`'s agent log from byte `from` on, colour codes removed.
fn log_since(c: &Cluster, i: usize, from: u64) -> String {
    let bytes = std::fs::read(c.nodes[i].agent_log()).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes[(from as usize).min(bytes.len())..]).into_owned();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

fn log_sizes(c: &Cluster) -> Vec<u64> {
    (0..NODES)
        .map(|i| {
            std::fs::metadata(c.nodes[i].agent_log())
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .collect()
}

/// The primary `p` is still the one writable primary and takes a write.
fn assert_primary_writable(c: &mut Cluster, p: usize, what: &str) {
    c.check_agents();
    let states = c.recovery_states();
    assert_eq!(
        c.primary(),
        Some(p),
        "{what}: {} must stay the one primary (pg_is_in_recovery() on each node: {states:?})",
        c.nodes[p].name
    );
    let n = c.now_s() * 1000.0;
    c.sql(
        p,
        &format!(
            "INSERT INTO e2e_writes VALUES ({}) ON CONFLICT DO NOTHING",
            n as i64
        ),
    )
    .unwrap_or_else(|e| panic!("{what}: the primary refused a write: {e}"));
}

/// Write `value` to `rel` and keep it there (written again every `REWRITE_EVERY`) until every agent logged
/// a line naming the key, for at most `HOLD_MAX`, checking that every agent stays alive; then check that
/// the primary is still the one primary and takes a write.
fn hold_garbage(c: &mut Cluster, kv: &Kv, p: usize, rel: &str, what: &str, value: &[u8]) {
    let before = log_sizes(c);
    let needle = kv.key(rel);
    // The settings parser reports a `config` of the wrong types once per value, naming the key in words.
    // A garbage `initialize` is not logged by key: the leader's cycle line shows it rewriting the key with
    // the system identifier, and replicas ignore a value that is no number (as during a bootstrap).
    let alias = match rel {
        "config" => Some("the store's config key"),
        "initialize" => Some("WriteInitialize"),
        _ => None,
    };
    // An empty `failover` is Patroni's "nothing requested" ({}); the snapshot builder takes it so, silently.
    let silent_ok = rel == "failover" && value.is_empty();
    let logged = |c: &Cluster, i: usize| {
        silent_ok
            || (rel == "initialize" && i != p)
            || log_since(c, i, before[i])
                .lines()
                .any(|l| l.contains(&needle) || alias.is_some_and(|a| l.contains(a)))
    };
    // Only the keys an agent rewrites on its own need writing again; the others are written once (a
    // 1 MiB value written again and again would load etcd until reads time out).
    let owned = owned(rel);
    kv.put(rel, value);
    let t0 = Instant::now();
    let until = t0 + HOLD_MAX;
    // At least two agent loops, so that the primary had a chance to act on the garbage.
    while Instant::now() < until && (t0.elapsed() < HOLD_MIN || !(0..NODES).all(|i| logged(c, i))) {
        let check_at = Instant::now() + LOG_CHECK_EVERY;
        while owned && Instant::now() < check_at {
            std::thread::sleep(REWRITE_EVERY);
            if kv.get(rel).as_deref() != Some(value) {
                kv.put(rel, value);
            }
        }
        std::thread::sleep(check_at.saturating_duration_since(Instant::now()));
        c.check_agents();
    }
    assert_primary_writable(c, p, &format!("{rel} = {what}"));
    for (i, from) in before.iter().enumerate() {
        let text = log_since(c, i, *from);
        assert!(
            logged(c, i),
            "{rel} = {what}: agent {} logged no line naming {needle} in {HOLD_MAX:?}; its log since:\n{}",
            c.nodes[i].name,
            text.lines().rev().take(15).collect::<Vec<_>>().join("\n")
        );
    }
    log(
        c,
        &format!(
            "{rel} = {what}: primary kept, every agent logged it within {:.1} s",
            t0.elapsed().as_secs_f64()
        ),
    );
}

/// Put the value saved before back (or delete the key if there was none).
fn restore(kv: &Kv, rel: &str, saved: &Option<Vec<u8>>) {
    match saved {
        Some(v) => kv.put(rel, v),
        None => kv.delete(rel),
    }
}

/// Every key but `leader`: garbage must leave the primary alone.
fn corrupt_keys_the_primary_survives(c: &mut Cluster, kv: &Kv, p: usize) {
    let replica = others(p).next().expect("a replica");
    let keys = [
        format!("members/{}", c.nodes[replica].name),
        format!("members/{}", c.nodes[p].name),
        "config".to_string(),
        "failover".to_string(),
        "history".to_string(),
        "status".to_string(),
        "failsafe".to_string(),
        "initialize".to_string(),
    ];
    for (k, rel) in keys.iter().enumerate() {
        let saved = kv.get(rel);
        // The keys whose values are parsed field by field get every kind of garbage; the others, whose
        // readers take the value whole, a few kinds (the target's run time).
        let few = ["not JSON", "wrong types", "not UTF-8"];
        for (what, value) in garbage(kv, owned(rel))
            .into_iter()
            .filter(|(what, _)| k < 4 || few.contains(what) || what.starts_with("huge"))
        {
            hold_garbage(c, kv, p, rel, what, &value);
        }
        restore(kv, rel, &saved);
        // Members, `status` and `initialize` are rewritten by their owners; the rest by the restore.
        c.wait_until(&format!("{rel} repaired"), CONVERGE_BUDGET, |c| {
            let now = kv.get(rel);
            let ok = match rel.as_str() {
                r if r.starts_with("members/") => now
                    .as_deref()
                    .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
                    .is_some_and(|v| v["role"].is_string()),
                "initialize" => now.as_deref().is_some_and(|v| {
                    std::str::from_utf8(v).is_ok_and(|s| s.parse::<u64>().is_ok())
                }),
                _ => now == saved || rel == "status",
            };
            (ok && c.primary() == Some(p)).then_some(())
        });
        log(c, &format!("{rel} repaired"));
    }
    // `sync`: read, but acted on only in synchronous mode (off here); garbage there must change nothing.
    for (what, value) in garbage(kv, false) {
        kv.put("sync", &value);
        std::thread::sleep(Duration::from_millis(500));
        assert_primary_writable(c, p, &format!("sync = {what}"));
    }
    kv.delete("sync");
}

/// A repaired `config` applies: a reloadable parameter set in it reaches every node.
fn repaired_config_applies(c: &mut Cluster, kv: &Kv) {
    let raw = kv.get("config").expect("a config key");
    let mut config: serde_json::Value = serde_json::from_slice(&raw).expect("config JSON");
    config["postgresql"]["parameters"]["work_mem"] = "7MB".into();
    kv.put("config", config.to_string().as_bytes());
    c.wait_until("work_mem 7MB on every node", Duration::from_secs(30), |c| {
        (0..NODES)
            .all(|i| c.sql_one(i, "SHOW work_mem").ok().as_deref() == Some("7MB"))
            .then_some(())
    });
    log(c, "the repaired config applies: work_mem 7MB on every node");
}

/// Garbage in `leader`: the primary steps down (it no longer holds the key), nobody promotes while the
/// key exists; deleted, the cluster converges on one primary again. Returns the new primary.
fn corrupt_leader(c: &mut Cluster, kv: &Kv, mut p: usize) -> usize {
    // Two values stand for the rest: what a put does to the key is the same for any value.
    let values: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"{not json".to_vec()),
        ("1 MiB", vec![b'x'; kv.max_value()]),
    ];
    for (what, value) in values {
        let before = log_sizes(c);
        let fault = c.epoch.elapsed();
        kv.put("leader", &value);
        log(c, &format!("leader = {what}"));
        // Past the ttl: a lease the garbage did not take away would have run out by now.
        let until = Instant::now() + TTL + Duration::from_secs(2);
        while Instant::now() < until {
            c.check_agents();
            let writable: Vec<usize> = c
                .recovery_states()
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == Some(false))
                .map(|(i, _)| i)
                .collect();
            assert!(
                writable.iter().all(|w| *w == p),
                "leader = {what}: {:?} promoted while the leader key held garbage",
                writable
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        for i in others(p) {
            assert_eq!(
                c.first_writable(i, fault),
                None,
                "leader = {what}: {} was writable while the leader key held garbage",
                c.nodes[i].name
            );
        }
        for (i, from) in before.iter().enumerate() {
            let text = log_since(c, i, *from);
            assert!(
                text.lines().any(|l| l.contains("leader")),
                "leader = {what}: agent {} logged nothing about the leader key:\n{}",
                c.nodes[i].name,
                text.lines().rev().take(15).collect::<Vec<_>>().join("\n")
            );
        }
        kv.delete("leader");
        let t0 = Instant::now();
        let now = c.wait_healthy(CONVERGE_BUDGET + REJOIN_BUDGET);
        log(
            c,
            &format!(
                "leader = {what}, then deleted: {} primary with two streaming replicas after {:.1} s",
                c.nodes[now].name,
                t0.elapsed().as_secs_f64()
            ),
        );
        p = now;
    }
    p
}

fn corrupt_every_key(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let kv = Kv::new(&c);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    corrupt_keys_the_primary_survives(&mut c, &kv, p);
    repaired_config_applies(&mut c, &kv);
    let p = corrupt_leader(&mut c, &kv, p);
    // After all that, a failover still works: the primary's host crashes, a replica takes over.
    let fault = c.epoch.elapsed();
    c.crash_host(p);
    let next = c.wait_until("a new primary after the crash", CONVERGE_BUDGET, |c| {
        others(p).find(|i| c.first_writable(*i, fault).is_some())
    });
    log(
        &c,
        &format!(
            "{} crashed: {} took over",
            c.nodes[p].name, c.nodes[next].name
        ),
    );
    c.start_agent(p);
    common::wait_rejoined(&mut c, p, next);
    c.assert_never_two_primaries();
}

#[test]
fn etcd_garbage_in_every_key() {
    corrupt_every_key(StoreKind::Etcd);
}

#[test]
fn consul_garbage_in_every_key() {
    corrupt_every_key(StoreKind::Consul);
}

/// Issue 29: a `config` that is not JSON failed every agent's read, as a store outage does, so nobody
/// could take over from a crashed primary. With garbage held in `config`, the primary's host crashes: a
/// replica takes over on the last valid config it read, and nobody overwrites the garbage (the operator's
/// value to repair, not the agents').
fn garbage_config_then_the_primary_crashes(kind: StoreKind) {
    let mut c = Cluster::start(kind);
    let kv = Kv::new(&c);
    let p = c.primary().expect("one primary");
    create_table(&c, p);
    let garbage = b"{not json".to_vec();
    kv.put("config", &garbage);
    // Two agent loops: every agent has read the garbage.
    std::thread::sleep(HOLD_MIN);
    assert_primary_writable(&mut c, p, "config = not JSON");
    let fault = c.epoch.elapsed();
    c.crash_host(p);
    let next = c.wait_until(
        "a new primary after the crash, with garbage in config",
        CONVERGE_BUDGET,
        |c| others(p).find(|i| c.first_writable(*i, fault).is_some()),
    );
    log(
        &c,
        &format!(
            "config = not JSON, {} crashed: {} took over after {:.1} s",
            c.nodes[p].name,
            c.nodes[next].name,
            (c.epoch.elapsed() - fault).as_secs_f64()
        ),
    );
    assert_eq!(
        kv.get("config"),
        Some(garbage),
        "the garbage was overwritten"
    );
    c.assert_never_two_primaries();
}

#[test]
fn etcd_garbage_config_then_the_primary_crashes() {
    garbage_config_then_the_primary_crashes(StoreKind::Etcd);
}

#[test]
fn consul_garbage_config_then_the_primary_crashes() {
    garbage_config_then_the_primary_crashes(StoreKind::Consul);
}
