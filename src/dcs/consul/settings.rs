//! What the Consul client is told: address, credentials, read mode, and who this member is.
use std::path::PathBuf;

/// Which read mode `get_cluster` uses when the caller does not demand a consistent read (consul.md §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Consistency {
    /// Leader-lease reads: strong in almost all cases.
    #[default]
    Default,
    /// Quorum-confirmed reads; one more round-trip.
    Consistent,
    /// Any server answers, even without a leader.
    Stale,
}

impl Consistency {
    /// The query flag Consul expects for this mode (`None`: the default).
    pub(super) fn flag(self) -> Option<&'static str> {
        match self {
            Consistency::Default => None,
            Consistency::Consistent => Some("consistent"),
            Consistency::Stale => Some("stale"),
        }
    }
}

/// Everything the client needs to know.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsulSettings {
    /// `http://127.0.0.1:8500` (the local agent) or `https://...:8501`.
    pub url: String,
    /// Sent as `X-Consul-Token`, never in the query string (it would land in logs).
    pub token: Option<String>,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub consistency: Consistency,
    pub scope: String,
    /// Key namespace, `service` by default as in Patroni.
    pub namespace: String,
    /// This member's name: the leader key's value and the `members/<name>` key.
    pub name: String,
    /// The session TTL sent to Consul: the timing's `session_ttl_ms` (`ha::Timing::new` derives it).
    pub session_ttl_ms: u64,
    /// Consul's lock-delay after a session invalidation. Patroni sends 0.001 s: Consul's default of 15 s
    /// would add straight to failover time, and the TTL already gave the old primary its time to fence.
    /// (Consul reads bare numbers below 1000 as seconds, so it is always sent as a duration string.)
    pub lock_delay_ms: u64,
}

/// The token never reaches a log line.
impl std::fmt::Debug for ConsulSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsulSettings")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("cacert", &self.cacert)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("consistency", &self.consistency)
            .field("scope", &self.scope)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("session_ttl_ms", &self.session_ttl_ms)
            .field("lock_delay_ms", &self.lock_delay_ms)
            .finish()
    }
}

impl ConsulSettings {
    /// Defaults as Patroni's: namespace `service`, default consistency, lock-delay 1 ms, no TLS, no token.
    pub fn new(url: &str, scope: &str, name: &str, session_ttl_ms: u64) -> Self {
        ConsulSettings {
            url: url.to_string(),
            token: None,
            cacert: None,
            cert: None,
            key: None,
            consistency: Consistency::Default,
            scope: scope.to_string(),
            namespace: "service".to_string(),
            name: name.to_string(),
            session_ttl_ms,
            lock_delay_ms: 1,
        }
    }
}
