//! The REST API's settings: where to listen, who may change the cluster, and TLS.
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything `serve` needs from the configuration (the config module converts its raw YAML into this).
#[derive(Clone, PartialEq, Eq)]
pub struct RestApiSettings {
    /// The address the agent binds (`restapi.listen`); `serve` takes an already bound listener.
    pub listen: SocketAddr,
    /// Basic auth for the mutating endpoints (`restapi.authentication.username/password`).
    pub username: Option<String>,
    pub password: Option<String>,
    /// `Authorization: Bearer <token>` for the mutating endpoints.
    pub token: Option<String>,
    /// Serve the mutating endpoints to anyone. Off by default; `serve` warns at start-up when on.
    pub allow_unauthenticated: bool,
    /// TLS: the server certificate chain and key (PEM). Both or neither.
    pub certfile: Option<PathBuf>,
    pub keyfile: Option<PathBuf>,
    /// CA bundle (PEM) that client certificates must chain to.
    pub cafile: Option<PathBuf>,
    /// Require a client certificate signed by `cafile` on every connection.
    pub verify_client: bool,
}

impl RestApiSettings {
    /// Plain HTTP on `listen`, no credentials (so the mutating endpoints answer 401/403). The liveness horizon
    /// is not here: it is the running ttl, which the agent publishes (`Published::ttl_ms`).
    pub fn new(listen: SocketAddr) -> Self {
        RestApiSettings {
            listen,
            username: None,
            password: None,
            token: None,
            allow_unauthenticated: false,
            certfile: None,
            keyfile: None,
            cafile: None,
            verify_client: false,
        }
    }
}

/// Secrets never reach a log line.
impl fmt::Debug for RestApiSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "<hidden>");
        f.debug_struct("RestApiSettings")
            .field("listen", &self.listen)
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("token", &hidden(&self.token))
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .field("certfile", &self.certfile)
            .field("keyfile", &self.keyfile)
            .field("cafile", &self.cafile)
            .field("verify_client", &self.verify_client)
            .finish()
    }
}
