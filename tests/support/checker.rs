//! The e2e checker: `pg_is_in_recovery()` and `GET /primary` sampled on every node every 100 ms, so a test
//! can assert there were never two primaries.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::cluster::connect;

/// One round of the checker: per node, `Some(true)` = answered "not in recovery" (writable primary), or
/// for the REST samples, answered 200 on `GET /primary`; None = no answer.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When the round's last answer arrived, since the cluster's epoch.
    pub at: Duration,
    pub writable: Vec<Option<bool>>,
}

impl Sample {
    pub fn render(&self, names: &[String]) -> String {
        let cols: Vec<String> = self
            .writable
            .iter()
            .zip(names)
            .map(|(w, n)| {
                let c = match w {
                    Some(true) => "P",
                    Some(false) => "r",
                    None => "-",
                };
                format!("{n}={c}")
            })
            .collect();
        format!("{:>8.2}s  {}", self.at.as_secs_f64(), cols.join(" "))
    }
}

/// Samples `SELECT pg_is_in_recovery()` on every node every 100 ms, each on a kept connection
/// (reconnected with a short timeout after any error), and, in a task of its own, `GET /primary`.
pub struct Checker {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    health: Arc<Mutex<Vec<Sample>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    rt: tokio::runtime::Handle,
}

impl Checker {
    pub fn start(
        rt: &tokio::runtime::Runtime,
        ports: Vec<u16>,
        api_ports: Vec<u16>,
        epoch: Instant,
    ) -> Checker {
        let stop = Arc::new(AtomicBool::new(false));
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let health: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let (s, out) = (stop.clone(), samples.clone());
        let sql = rt.spawn(async move {
            let mut clients: Vec<Option<Arc<Client>>> = ports.iter().map(|_| None).collect();
            while !s.load(Ordering::SeqCst) {
                let tick = tokio::time::Instant::now();
                let probes: Vec<_> = ports
                    .iter()
                    .zip(clients.iter_mut())
                    .map(|(port, c)| tokio::spawn(probe(c.take(), *port)))
                    .collect();
                let mut writable = Vec::with_capacity(ports.len());
                for (k, p) in probes.into_iter().enumerate() {
                    let (client, w) = p.await.unwrap_or((None, None));
                    clients[k] = client;
                    writable.push(w);
                }
                let at = epoch.elapsed();
                out.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Sample { at, writable });
                tokio::time::sleep_until(tick + Duration::from_millis(100)).await;
            }
        });
        // The REST side of the same promise (R4): `GET /primary` answers 200 on at most one node at a time.
        let (s, out) = (stop.clone(), health.clone());
        let rest = rt.spawn(async move {
            while !s.load(Ordering::SeqCst) {
                let tick = tokio::time::Instant::now();
                let probes: Vec<_> = api_ports
                    .iter()
                    .map(|port| tokio::spawn(primary_endpoint(*port)))
                    .collect();
                let mut writable = Vec::with_capacity(api_ports.len());
                for p in probes {
                    writable.push(p.await.unwrap_or(None));
                }
                let at = epoch.elapsed();
                out.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Sample { at, writable });
                tokio::time::sleep_until(tick + Duration::from_millis(100)).await;
            }
        });
        Checker {
            stop,
            samples,
            health,
            tasks: vec![sql, rest],
            rt: rt.handle().clone(),
        }
    }

    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn health_samples(&self) -> Vec<Sample> {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stop sampling: the `pg_is_in_recovery()` samples and the `GET /primary` samples.
    pub fn stop(self) -> (Vec<Sample>, Vec<Sample>) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(3), task).await });
        }
        let lock = |m: &Mutex<Vec<Sample>>| m.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (lock(&self.samples), lock(&self.health))
    }
}

/// `GET /primary` on 127.0.0.1:`port` within 300 ms: `Some(status == 200)`, None when nothing answered.
async fn primary_endpoint(port: u16) -> Option<bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"GET /primary HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        let status: u16 = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(status == 200)
    };
    tokio::time::timeout(Duration::from_millis(300), get)
        .await
        .ok()
        .flatten()
}

/// One probe: `(connection to keep, Some(!in_recovery))`, or `(None, None)` when the node did not answer.
async fn probe(client: Option<Arc<Client>>, port: u16) -> (Option<Arc<Client>>, Option<bool>) {
    let client = match client {
        Some(c) if !c.is_closed() => c,
        _ => match connect(port).await {
            Ok(c) => Arc::new(c),
            Err(_) => return (None, None),
        },
    };
    match tokio::time::timeout(
        Duration::from_millis(300),
        client.query_one("SELECT pg_is_in_recovery()", &[]),
    )
    .await
    {
        Ok(Ok(row)) => {
            let in_recovery: bool = row.get(0);
            (Some(client), Some(!in_recovery))
        }
        _ => (None, None),
    }
}
