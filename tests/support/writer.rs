//! The e2e writer: a client inserting ids one by one into the primary, recording what was acknowledged.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::cluster::connect;

/// What a [`Writer`] saw.
#[derive(Debug, Default)]
pub struct WriteLog {
    /// Committed and acknowledged: id and when the acknowledgement arrived (since the epoch).
    pub acked: Vec<(i64, Duration)>,
    /// Inserts that failed or whose outcome is unknown.
    pub failed: u64,
}

/// A client inserting ids 1, 2, 3, ... into `e2e_writes (id bigint primary key)`, one per ~5 ms,
/// reconnecting after any error; every id is tried once.
pub struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<WriteLog>,
    rt: tokio::runtime::Handle,
}

/// Where the writer connects: one node, or whichever of several answers as a writable primary.
enum Target {
    One(u16),
    AnyWritable { ports: Vec<u16>, next: usize },
}

impl Target {
    /// A new connection, or `None` after a short pause when none was made this time.
    async fn connect(&mut self) -> Option<Client> {
        let (client, pause_ms) = match self {
            Target::One(port) => (connect(*port).await.ok(), 50),
            Target::AnyWritable { ports, next } => {
                let port = ports[*next % ports.len()];
                *next += 1;
                (writable(port).await, 20)
            }
        };
        if client.is_none() {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        client
    }
}

impl Writer {
    pub(super) fn start(rt: &tokio::runtime::Runtime, port: u16, epoch: Instant) -> Writer {
        Writer::spawn(rt, Target::One(port), epoch)
    }

    /// [`Writer::start`] across the nodes on `ports` (the nodes of two sites): it writes through one
    /// connection to a node that answered `pg_is_in_recovery()` false, and after any error looks for a
    /// writable node again, trying every port in turn.
    pub fn start_any(rt: &tokio::runtime::Runtime, ports: Vec<u16>, epoch: Instant) -> Writer {
        Writer::spawn(rt, Target::AnyWritable { ports, next: 0 }, epoch)
    }

    fn spawn(rt: &tokio::runtime::Runtime, mut target: Target, epoch: Instant) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = rt.spawn(async move {
            let mut log = WriteLog::default();
            let mut client: Option<Client> = None;
            let mut id: i64 = 0;
            while !s.load(Ordering::SeqCst) {
                let c = match client.take() {
                    Some(c) if !c.is_closed() => c,
                    _ => match target.connect().await {
                        Some(c) => c,
                        None => continue,
                    },
                };
                id += 1;
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
                let insert = c.execute("INSERT INTO e2e_writes (id) VALUES ($1)", &params);
                match tokio::time::timeout(Duration::from_secs(1), insert).await {
                    Ok(Ok(1)) => {
                        log.acked.push((id, epoch.elapsed()));
                        client = Some(c);
                    }
                    _ => {
                        log.failed += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            log
        });
        Writer {
            stop,
            task,
            rt: rt.handle().clone(),
        }
    }

    /// Stop writing; what was acknowledged.
    pub fn stop(self) -> WriteLog {
        self.stop.store(true, Ordering::SeqCst);
        self.rt.block_on(self.task).expect("writer task panicked")
    }
}

/// A connection to 127.0.0.1:`port` if that node answers as a writable primary.
async fn writable(port: u16) -> Option<Client> {
    let c = connect(port).await.ok()?;
    let row = tokio::time::timeout(
        Duration::from_millis(500),
        c.query_one("SELECT pg_is_in_recovery()", &[]),
    )
    .await
    .ok()?
    .ok()?;
    (!row.get::<_, bool>(0)).then_some(c)
}
