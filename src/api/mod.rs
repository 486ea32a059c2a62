//! The REST API (warp): health checks, status, metrics and control, answered from the agent's published status.
//!
//! Patroni's health paths include the synchronous ones (`/sync`, `/async`, `/read-only-sync`) and quorum commit's
//! (`/quorum`, `/read-only-quorum`), their rules in `ha::health`. `serve` is one of the two places outside the agent
//! runtime that spawn tasks: its server task and one task per connection (`server.rs`); the other is
//! `pg::probe::connect`, for tokio-postgres's connection driver.
mod auth;
pub mod control;
pub mod failsafe;
pub mod health;
mod limiter;
mod metrics;
mod refusals;
pub mod requests;
mod router;
mod server;
pub mod settings;
pub mod state;
mod status;
mod transport;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinHandle;

pub use control::{
    Accepted, Control, ControlError, FailoverRequest, ReinitializeRequest, RestartRequest,
    RestartRole, SwitchoverRequest,
};
pub use health::parse_lag;
pub use limiter::{AUTH_FAILURE_WINDOW_MS, MAX_AUTH_FAILURES};
pub use router::MAX_BODY_BYTES;
pub use server::{
    HEADER_READ_TIMEOUT, IDLE_TIMEOUT, MAX_CONNECTIONS, RESERVED_FOR_HEALTH, SHUTDOWN_TIMEOUT,
};
pub use settings::RestApiSettings;
pub use state::{ApiState, Clock, Published, RuntimeCounters};
pub use status::VERSION;
// For the fuzz targets in `fuzz/`: the real query parser, credential check and `/cluster` rendering.
#[doc(hidden)]
pub use auth::Auth;
#[doc(hidden)]
pub use router::parse_query;
#[doc(hidden)]
pub use status::cluster_json;

/// Why the API could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot listen on {addr} for the REST API: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("REST API listener: {0}")]
    Listener(std::io::Error),
    #[error("REST API TLS: {0}")]
    Tls(String),
}

/// Connections the kernel queues before the server accepts them (tokio's `bind` asks for 128, which a
/// burst of connections overflows while the accept loop waits for a core; the kernel caps it at somaxconn).
const LISTEN_BACKLOG: u32 = 1024;

/// Bind `settings.listen` (the agent's way in; tests bind `127.0.0.1:0` themselves).
pub async fn bind(settings: &RestApiSettings) -> Result<TcpListener, ApiError> {
    let addr = settings.listen;
    let bind = || {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    bind().map_err(|source| ApiError::Bind { addr, source })
}

/// Serve the API on `listener` until `shutdown` completes; returns the bound address and the task, which
/// ends once in-flight requests are answered. TLS files are read here, so a bad file fails start-up.
pub async fn serve(
    settings: RestApiSettings,
    state: ApiState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, JoinHandle<()>), ApiError> {
    let addr = listener.local_addr().map_err(ApiError::Listener)?;
    let tls = transport::tls_acceptor(&settings)?;
    let auth = auth::Auth::from_settings(&settings);
    if auth.is_open() {
        tracing::warn!(
            %addr,
            "REST API: allow_unauthenticated is set: anyone who can reach this port can pause, \
             switch over, fail over, restart and reinitialize"
        );
    } else if !auth.has_credentials() {
        tracing::warn!(
            %addr,
            "REST API: no credentials configured: the control endpoints answer 403"
        );
    }
    let tls_on = tls.is_some();
    let ctx = Arc::new(router::Ctx {
        state,
        auth,
        limiter: limiter::Limiter::default(),
        refusals: refusals::RefusalLog::new("refused control requests"),
    });
    let task = tokio::spawn(async move {
        server::run(listener, tls, router::filter(ctx), shutdown).await;
        tracing::info!(%addr, "REST API stopped");
    });
    tracing::info!(%addr, tls = tls_on, "REST API listening");
    Ok((addr, task))
}
