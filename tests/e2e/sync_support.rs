//! e2e_sync's tools: the `sync` key read straight from the store, and a writer that follows the primary
//! and records every acknowledged commit.
#![allow(dead_code)]
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use tokio_postgres::{Client, NoTls};

use tenure::demo::local;

use crate::support::cluster::Cluster;

/// The `sync` key: `{"leader": "n1", "sync_standby": "n2,n3"}` (Patroni's layout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncKey {
    pub leader: Option<String>,
    pub standbys: BTreeSet<String>,
}

impl SyncKey {
    pub fn parse(raw: &[u8]) -> Option<SyncKey> {
        let v: serde_json::Value = serde_json::from_slice(raw).ok()?;
        let standbys = v
            .get("sync_standby")
            .and_then(|s| s.as_str())
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        Some(SyncKey {
            leader: v.get("leader").and_then(|l| l.as_str()).map(String::from),
            standbys,
        })
    }
}

/// The `sync` key in quorum mode (Patroni 4): `{"leader": "n1", "sync_standby": "n2,n3", "quorum": 1}`, the
/// voters and how many of them beyond one a new leader must see at or behind itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumKey {
    pub leader: Option<String>,
    pub voters: BTreeSet<String>,
    /// None when the key has no readable `quorum`.
    pub quorum: Option<u64>,
}

impl QuorumKey {
    pub fn parse(raw: &[u8]) -> Option<QuorumKey> {
        let key = SyncKey::parse(raw)?;
        let v: serde_json::Value = serde_json::from_slice(raw).ok()?;
        Some(QuorumKey {
            leader: key.leader,
            voters: key.standbys,
            quorum: v.get("quorum").and_then(|q| q.as_u64()),
        })
    }
}

/// Raw reads of the cluster's keys: etcd's v3 JSON gateway, or the Consul HTTP API.
pub struct Store {
    pub rt: tokio::runtime::Runtime,
    pub http: reqwest::Client,
    /// etcd: `Ok(base url)`; Consul: `Err(base url)`.
    pub url: Result<String, String>,
}

impl Store {
    pub fn new(c: &Cluster) -> Store {
        let url = match (c.etcd(), c.consul()) {
            (Some(e), _) => Ok(e.client_url().trim_end_matches('/').to_string()),
            (None, Some(s)) => Err(s.url().trim_end_matches('/').to_string()),
            _ => panic!("a single etcd or the Consul test double"),
        };
        Store {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(3))
                .build()
                .expect("client"),
            url,
        }
    }

    /// The `sync` key; None when it is absent, unreadable or the store did not answer.
    pub fn sync(&self) -> Option<SyncKey> {
        SyncKey::parse(&self.get("sync")?)
    }

    /// The `sync` key read as quorum mode writes it; None as for [`Store::sync`].
    pub fn quorum_key(&self) -> Option<QuorumKey> {
        QuorumKey::parse(&self.get("sync")?)
    }

    pub fn get(&self, rel: &str) -> Option<Vec<u8>> {
        let b64 = base64::engine::general_purpose::STANDARD;
        self.rt.block_on(async {
            match &self.url {
                Ok(url) => {
                    let key = b64.encode(format!("/service/e2e/{rel}"));
                    let r = self
                        .http
                        .post(format!("{url}/v3/kv/range"))
                        .json(&serde_json::json!({ "key": key }))
                        .send()
                        .await
                        .ok()?;
                    let v: serde_json::Value = r.json().await.ok()?;
                    b64.decode(v["kvs"].get(0)?["value"].as_str().unwrap_or(""))
                        .ok()
                }
                Err(url) => {
                    let r = self
                        .http
                        .get(format!("{url}/v1/kv/service/e2e/{rel}"))
                        .send()
                        .await
                        .ok()?;
                    if r.status() != 200 {
                        return None;
                    }
                    let v: serde_json::Value = r.json().await.ok()?;
                    b64.decode(v[0]["Value"].as_str().unwrap_or("")).ok()
                }
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------------------
// A writer that follows the primary

/// One acknowledged commit.
#[derive(Clone, Copy, Debug)]
pub struct Ack {
    pub id: i64,
    /// When the acknowledgement arrived, since the cluster's epoch.
    pub at: Duration,
    /// The node that acknowledged it.
    pub node: usize,
}

#[derive(Default)]
pub struct Acks {
    pub acked: Vec<Ack>,
    pub failed: u64,
}

/// A client inserting ids 1, 2, 3, ... into `e2e_writes`, one per ~5 ms, on whichever node answers
/// `pg_is_in_recovery() = false` (asked again after any error); each id is tried once, and an insert not
/// acknowledged within 1 s counts as failed (its outcome unknown). Runs on a thread of its own.
pub struct FollowingWriter {
    pub stop: Arc<AtomicBool>,
    pub acks: Arc<Mutex<Acks>>,
    pub thread: Option<std::thread::JoinHandle<()>>,
}

impl FollowingWriter {
    pub fn start(c: &Cluster) -> FollowingWriter {
        let ports: Vec<u16> = c.nodes.iter().map(|n| n.pg_port).collect();
        let epoch = c.epoch;
        let stop = Arc::new(AtomicBool::new(false));
        let acks: Arc<Mutex<Acks>> = Arc::default();
        let (s, out) = (stop.clone(), acks.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("writer runtime");
            rt.block_on(write_loop(ports, epoch, s, out));
        });
        FollowingWriter {
            stop,
            acks,
            thread: Some(thread),
        }
    }

    pub fn acked(&self) -> Vec<Ack> {
        self.acks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .acked
            .clone()
    }

    pub fn failed(&self) -> u64 {
        self.acks.lock().unwrap_or_else(|e| e.into_inner()).failed
    }

    pub fn stop(mut self) {
        self.halt();
    }

    pub fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("writer thread panicked");
        }
    }
}

impl Drop for FollowingWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn write_loop(ports: Vec<u16>, epoch: Instant, stop: Arc<AtomicBool>, out: Arc<Mutex<Acks>>) {
    let mut current: Option<(usize, Client)> = None;
    let mut id: i64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let (node, client) = match current.take() {
            Some((n, c)) if !c.is_closed() => (n, c),
            _ => match find_primary(&ports).await {
                Some(found) => found,
                None => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        id += 1;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
        let insert = client.execute("INSERT INTO e2e_writes (id) VALUES ($1)", &params);
        let outcome = tokio::time::timeout(Duration::from_secs(1), insert).await;
        let acked = matches!(outcome, Ok(Ok(1)));
        {
            let mut acks = out.lock().unwrap_or_else(|e| e.into_inner());
            if acked {
                acks.acked.push(Ack {
                    id,
                    at: epoch.elapsed(),
                    node,
                });
            } else {
                acks.failed += 1;
            }
        }
        if acked {
            current = Some((node, client));
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The one node answering `pg_is_in_recovery() = false`, with a connection to it (asked in parallel).
async fn find_primary(ports: &[u16]) -> Option<(usize, Client)> {
    let probes: Vec<_> = ports
        .iter()
        .map(|port| tokio::spawn(writable(*port)))
        .collect();
    let mut found = Vec::new();
    for (n, p) in probes.into_iter().enumerate() {
        if let Ok(Some(client)) = p.await {
            found.push((n, client));
        }
    }
    // Two writable nodes: the checker's business; write nowhere until one is left.
    (found.len() == 1).then(|| found.remove(0))
}

async fn writable(port: u16) -> Option<Client> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(port)
        .user(local::SUPERUSER.0)
        .password(local::SUPERUSER.1)
        .dbname("postgres")
        .application_name("tenure-e2e-writer")
        .connect_timeout(Duration::from_millis(500));
    let (client, conn) = tokio::time::timeout(Duration::from_millis(500), cfg.connect(NoTls))
        .await
        .ok()?
        .ok()?;
    tokio::spawn(conn);
    let row = tokio::time::timeout(
        Duration::from_millis(500),
        client.query_one("SELECT pg_is_in_recovery()", &[]),
    )
    .await
    .ok()?
    .ok()?;
    let in_recovery: bool = row.get(0);
    (!in_recovery).then_some(client)
}
