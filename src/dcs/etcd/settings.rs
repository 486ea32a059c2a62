//! etcd settings and the whole-second lease TTL (the keys: `KeyLayout::rooted`, with Patroni's leading slash).
//!
//! The TLS material is read at construction, so a missing PEM file stops the agent before PostgreSQL is touched.

/// How to reach etcd and who we are in it.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdSettings {
    /// `http://host:port` URLs of the etcd client endpoints.
    pub endpoints: Vec<String>,
    pub scope: String,
    /// Patroni's `namespace` (default `service`); slashes at either end are ignored.
    pub namespace: String,
    /// This member's name: the value of the leader key when we hold it.
    pub name: String,
    /// Lease TTL: the timing's `session_ttl_ms` (the ttl on etcd); rounded *up* to whole seconds (see [`lease_ttl_s`]).
    pub ttl_ms: u64,
    pub user: Option<String>,
    pub password: Option<String>,
    pub tls: Option<EtcdTls>,
}

/// The password never reaches a log line.
impl std::fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("scope", &self.scope)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("ttl_ms", &self.ttl_ms)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// Client TLS material (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca_file: Option<std::path::PathBuf>,
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
}

/// Settings that cannot work; reported once, at construction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdSettingsError {
    #[error("etcd: no endpoints configured (set etcd3.hosts)")]
    NoEndpoints,
    #[error("etcd: ttl_ms must be > 0")]
    ZeroTtl,
    #[error("etcd: user and password must be set together")]
    HalfCredentials,
    #[error("etcd: {key}: cannot read {path}: {error}")]
    TlsFile {
        key: &'static str,
        path: std::path::PathBuf,
        error: String,
    },
    #[error("etcd: https endpoints need etcd3.cacert (the CA that signed etcd's certificate); tenure does not read the system trust store")]
    NoCaCert,
    #[error("etcd: etcd3.cert and etcd3.key go together (a client certificate needs its key)")]
    HalfIdentity,
    #[error("etcd: etcd3.cacert/cert/key are set but endpoint {0} is plain http; use https:// (or no scheme)")]
    PlainEndpointWithTls(String),
}

/// The TLS options for etcd-client, read from the PEM files now so a missing file stops the agent at start.
pub(super) fn tls_options(
    settings: &EtcdSettings,
) -> Result<Option<etcd_client::TlsOptions>, EtcdSettingsError> {
    let https = settings.endpoints.iter().any(|e| e.starts_with("https://"));
    let Some(tls) = settings.tls.as_ref() else {
        return if https {
            Err(EtcdSettingsError::NoCaCert)
        } else {
            Ok(None)
        };
    };
    if let Some(plain) = settings.endpoints.iter().find(|e| e.starts_with("http://")) {
        return Err(EtcdSettingsError::PlainEndpointWithTls(plain.clone()));
    }
    let read = |key: &'static str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| EtcdSettingsError::TlsFile {
            key,
            path: path.to_path_buf(),
            error: e.to_string(),
        })
    };
    let ca = tls.ca_file.as_deref().ok_or(EtcdSettingsError::NoCaCert)?;
    let mut opts = etcd_client::TlsOptions::new().ca_certificate(
        etcd_client::Certificate::from_pem(read("etcd3.cacert", ca)?),
    );
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let identity =
                etcd_client::Identity::from_pem(read("etcd3.cert", cert)?, read("etcd3.key", key)?);
            opts = opts.identity(identity);
        }
        (None, None) => {}
        _ => return Err(EtcdSettingsError::HalfIdentity),
    }
    Ok(Some(opts))
}

/// etcd leases have whole-second TTLs. Round *up*: the core computes its lease deadline from `ttl_ms`, and the
/// store must not free the leader key before that deadline, so a longer store TTL is safe and a shorter one is
/// not. (etcd also raises TTLs below its minimum, about 1.5 election timeouts, which again only lengthens it.)
pub fn lease_ttl_s(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms.div_ceil(1000)).unwrap_or(i64::MAX)
}
