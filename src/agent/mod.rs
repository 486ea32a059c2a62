//! The shell: observe -> `decide` -> execute -> publish -> sleep (or wake on a leader change or a signal).
//!
//! It never branches on domain state: every choice is the core's. It owns the tasks (the REST server,
//! background jobs, peer probes) and the only clock reads (`crate::clock`).
mod api_side;
pub mod control;
pub mod cycle;
pub mod dynamic;
pub mod execute;
pub mod fence;
mod guard;
pub mod hooks;
mod local_pg;
pub mod peers;
pub mod publisher;
pub mod reload;
mod remote;
mod report;
mod runtime;
pub mod seen;
mod settings;
pub mod shell;
#[cfg(test)]
mod shell_tests;
mod store_side;
mod store_writes;
mod sync_names;
pub mod unique;
pub mod watchdog;
mod world;

use std::sync::Arc;

use crate::config::{Config, Store};
use crate::dcs::consul::ConsulDcs;
use crate::dcs::etcd::EtcdDcs;
use crate::dcs::Dcs;

pub use shell::run_loop;

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot set up the store client: {0}")]
    Store(String),
    #[error("cannot start the REST API: {0}")]
    Api(#[from] crate::api::ApiError),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("cannot set up requests to the other members: {0}")]
    PeerClient(String),
    #[error(
        "another agent named {name} is running at {api_url} in this scope; give this node another `name` \
         (or stop the other agent)"
    )]
    DuplicateName { name: String, api_url: String },
    #[error(
        "the decision core's assertion failed: {0}. This is a bug: the agent stops without acting; PostgreSQL \
         is left running and the fencing process stops it if the lease runs out. Please report it with the log"
    )]
    CoreAssertion(String),
}

/// Run the agent until it is told to stop (SIGTERM/SIGINT) and has stopped in order. `env` is the
/// environment the config was loaded with (SIGHUP reloads `config.file` with it).
pub async fn run(
    config: Config,
    env: std::collections::BTreeMap<String, String>,
) -> Result<(), AgentError> {
    let dcs: Arc<dyn Dcs> = match &config.store {
        Store::Consul(s) => {
            Arc::new(ConsulDcs::new(s.clone()).map_err(|e| AgentError::Store(e.to_string()))?)
        }
        Store::Etcd(s) => {
            Arc::new(EtcdDcs::new(s.clone()).map_err(|e| AgentError::Store(e.to_string()))?)
        }
    };
    // Before PostgreSQL is touched: a second agent with our name would fight the first for its keys.
    let check = unique::check(
        dcs.as_ref(),
        &config.scope,
        config.name().as_str(),
        &config.api_url(),
        config.timing().retry_timeout_ms,
    )
    .await;
    match check {
        unique::NameCheck::TakenBy { api_url } => {
            return Err(AgentError::DuplicateName {
                name: config.name().to_string(),
                api_url,
            })
        }
        unique::NameCheck::Unknown(e) => tracing::warn!(
            error = %e,
            "could not read the store to check that no other agent runs under our name; going on"
        ),
        unique::NameCheck::Free => {}
    }
    runtime::run_agent(config, dcs, env).await
}
