//! The harness's queries of a running cluster: a node's REST API and SQL, who is primary, who streams from
//! whom, and the superuser connection they (and the checker) open.
use std::time::Duration;

use tenure::demo::local;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::Cluster;

/// Budget for a connection or a query from the harness.
const SQL_TIMEOUT: Duration = Duration::from_millis(500);

impl Cluster {
    /// `GET path` on node `i`'s REST API: `(status, body)`, `(0, "")` when nothing answers.
    pub fn rest_get(&self, i: usize, path: &str) -> (u16, String) {
        local::http_get(self.nodes[i].api_addr(), path).unwrap_or((0, String::new()))
    }

    /// `GET /patroni` as JSON (Null when nothing answers).
    pub fn patroni(&self, i: usize) -> serde_json::Value {
        let (status, body) = self.rest_get(i, "/patroni");
        if status == 0 {
            return serde_json::Value::Null;
        }
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null)
    }

    /// Run `query` (simple protocol) on node `i` as the superuser: rows of text values ("" for NULL).
    pub fn sql(&self, i: usize, query: &str) -> Result<Vec<Vec<String>>, String> {
        let port = self.nodes[i].pg_port;
        self.rt().block_on(async move {
            // A loaded two-core box can take longer than SQL_TIMEOUT to fork a backend: a connect that timed
            // out (nothing was sent) is tried again, for 5 s in all; a refused one is an answer. (A run
            // beside four compiling worktrees, load 10 to 15, failed on "timed out" with three tries.)
            let mut client = connect(port).await;
            for _ in 0..9 {
                match &client {
                    Err(e) if e.ends_with("timed out") => client = connect(port).await,
                    _ => break,
                }
            }
            let client = client?;
            let msgs = tokio::time::timeout(Duration::from_secs(10), client.simple_query(query))
                .await
                .map_err(|_| format!("query timed out: {query}"))?
                .map_err(|e| format!("{query}: {e}"))?;
            Ok(msgs
                .into_iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|k| row.get(k).unwrap_or("").to_string())
                            .collect(),
                    ),
                    _ => None,
                })
                .collect())
        })
    }

    /// The one value of a one-row, one-column query.
    pub fn sql_one(&self, i: usize, query: &str) -> Result<String, String> {
        let rows = self.sql(i, query)?;
        rows.first()
            .and_then(|r| r.first())
            .cloned()
            .ok_or_else(|| format!("{query}: no rows"))
    }

    /// `pg_is_in_recovery()` on every node: `Some(false)` is a writable primary, None no answer.
    pub fn recovery_states(&self) -> Vec<Option<bool>> {
        (0..self.nodes.len())
            .map(|i| {
                self.sql_one(i, "SELECT pg_is_in_recovery()")
                    .ok()
                    .map(|v| v == "t")
            })
            .collect()
    }

    /// The node that is the one writable primary, if exactly one is.
    pub fn primary(&self) -> Option<usize> {
        let writable: Vec<usize> = self
            .recovery_states()
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == Some(false))
            .map(|(i, _)| i)
            .collect();
        (writable.len() == 1).then(|| writable[0])
    }

    /// Whether node `i` is a replica streaming from node `from`.
    pub fn streams_from(&self, i: usize, from: usize) -> bool {
        let port = self.nodes[from].pg_port;
        self.sql_one(
            i,
            "SELECT status || ':' || sender_port FROM pg_stat_wal_receiver",
        )
        .is_ok_and(|v| v == format!("streaming:{port}"))
    }

    /// The timeline node `i` runs on (a replica: the one it receives).
    pub fn timeline(&self, i: usize) -> Option<u64> {
        let q = "SELECT CASE WHEN pg_is_in_recovery() \
                 THEN (SELECT received_tli FROM pg_stat_wal_receiver) \
                 ELSE (SELECT timeline_id FROM pg_control_checkpoint()) END";
        self.sql_one(i, q).ok()?.parse().ok()
    }
}

/// A fresh superuser connection to 127.0.0.1:`port` within [`SQL_TIMEOUT`].
pub(in crate::support) async fn connect(port: u16) -> Result<Client, String> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(port)
        .user(local::SUPERUSER.0)
        .password(local::SUPERUSER.1)
        .dbname("postgres")
        .application_name("tenure-e2e")
        .connect_timeout(SQL_TIMEOUT);
    let (client, conn) = tokio::time::timeout(SQL_TIMEOUT, cfg.connect(NoTls))
        .await
        .map_err(|_| format!("connect to port {port} timed out"))?
        .map_err(|e| format!("connect to port {port}: {e}"))?;
    tokio::spawn(conn);
    Ok(client)
}
