//! etcd settings, the whole-second lease TTL, and Patroni's absolute key names (with the leading slash).
use crate::dcs::KeyLayout;

/// How to reach etcd and who we are in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// `http://host:port` URLs of the etcd client endpoints.
    pub endpoints: Vec<String>,
    pub scope: String,
    /// Patroni's `namespace` (default `service`); slashes at either end are ignored.
    pub namespace: String,
    /// This member's name: the value of the leader key when we hold it.
    pub name: String,
    /// Lease TTL; rounded *up* to whole seconds (see [`lease_ttl_s`]).
    pub ttl_ms: u64,
    pub user: Option<String>,
    pub password: Option<String>,
    pub tls: Option<EtcdTls>,
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
    #[error("etcd: TLS was requested but this build has no TLS support for etcd (enable etcd-client's `tls` feature)")]
    TlsNotBuilt,
}

/// etcd leases have whole-second TTLs. Round *up*: the core computes its lease deadline from `ttl_ms`, and the
/// store must not free the leader key before that deadline, so a longer store TTL is safe and a shorter one is
/// not. (etcd also raises TTLs below its minimum, about 1.5 election timeouts, which again only lengthens it.)
pub fn lease_ttl_s(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms.div_ceil(1000)).unwrap_or(i64::MAX)
}

/// The absolute keys, Patroni style: `/service/<scope>/leader` and so on.
#[derive(Clone, Debug)]
pub(super) struct Keys {
    pub(super) prefix: String,
    pub(super) leader: String,
    pub(super) initialize: String,
    pub(super) config: String,
    pub(super) failover: String,
    pub(super) status: String,
    pub(super) history: String,
    pub(super) failsafe: String,
}

impl Keys {
    pub(super) fn new(namespace: &str, scope: &str) -> Self {
        let layout = KeyLayout::new(namespace, scope);
        let abs = |k: String| format!("/{k}");
        Keys {
            prefix: abs(layout.prefix().to_string()),
            leader: abs(layout.leader()),
            initialize: abs(layout.initialize()),
            config: abs(layout.config()),
            failover: abs(layout.failover()),
            status: abs(layout.status()),
            history: abs(layout.history()),
            failsafe: abs(layout.failsafe()),
        }
    }
}
