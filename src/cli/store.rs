//! The store through the agent's own `Dcs` adapter: one consistent read of the scope, and `remove`'s wipe.
use tokio::time::Duration;

use super::CliError;
use crate::config::{Config, Store as StoreSettings};
use crate::dcs::consul::ConsulDcs;
use crate::dcs::etcd::EtcdDcs;
use crate::dcs::{ClusterSnapshot, Dcs, DcsError};

/// A read gets at least this long, even with a short `retry_timeout`.
const MIN_READ_MS: u64 = 5_000;

/// A store client and where it points (for messages).
pub struct Store {
    dcs: Box<dyn Dcs>,
    /// `http://127.0.0.1:8500` or the etcd endpoints, comma-separated.
    pub address: String,
    read_ms: u64,
}

impl Store {
    /// The adapter the agent would use; no request is sent yet.
    pub fn connect(config: &Config) -> Result<Store, CliError> {
        let bad =
            |e: String| CliError::usage(format!("{}: store settings: {e}", config.file.display()));
        let (dcs, address): (Box<dyn Dcs>, String) = match &config.store {
            StoreSettings::Consul(s) => (
                Box::new(ConsulDcs::new(s.clone()).map_err(|e| bad(e.to_string()))?),
                s.url.clone(),
            ),
            StoreSettings::Etcd(s) => (
                Box::new(EtcdDcs::new(s.clone()).map_err(|e| bad(e.to_string()))?),
                s.endpoints.join(","),
            ),
        };
        Ok(Store {
            dcs,
            address,
            read_ms: config.timing().retry_timeout_ms.max(MIN_READ_MS),
        })
    }

    /// A quorum-confirmed read of the whole scope, as patronictl does.
    pub async fn read(&self) -> Result<ClusterSnapshot, CliError> {
        let deadline = crate::clock::now() + Duration::from_millis(self.read_ms);
        self.dcs
            .get_cluster(true, deadline)
            .await
            .map_err(|e| self.error("reading", e))
    }

    /// Delete every key of the scope (`tenure remove`), with a read's time budget.
    pub async fn delete_cluster(&self) -> Result<(), CliError> {
        let deadline = crate::clock::now() + Duration::from_millis(self.read_ms);
        self.dcs
            .delete_cluster(deadline)
            .await
            .map_err(|e| self.error("deleting the cluster's keys in", e))
    }

    /// 69 when the store did not answer (nothing may be inferred); anything else is internal.
    fn error(&self, doing: &str, e: DcsError) -> CliError {
        match e {
            DcsError::Unavailable(why) => {
                CliError::unavailable(format!("cannot reach the store at {}: {why}", self.address))
            }
            other => CliError::internal(format!("{doing} the store at {}: {other}", self.address)),
        }
    }
}
