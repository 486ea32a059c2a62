//! The `restapi:` section: where the REST API listens, what it publishes, who may call unsafe endpoints.
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::api::RestApiSettings;

use super::ctx::Ctx;
use super::raw::{RawBasicAuth, RawRestApi, RawVerifyClient};

/// The `restapi:` section, typed. [`RestApiConfig::server_settings`] gives what `api::serve` takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestApiConfig {
    /// Where the server binds (`*:8008` and `:8008` mean every IPv4 address).
    pub listen: SocketAddr,
    /// `host:port` other members and load balancers use; published as `api_url`.
    pub connect_address: String,
    pub auth: RestAuth,
    /// `None`: plain HTTP.
    pub tls: Option<RestTls>,
}

/// Who may call the unsafe (non-GET) endpoints. At least one way is configured unless
/// `allow_unauthenticated` says otherwise.
#[derive(Clone, PartialEq, Eq)]
pub struct RestAuth {
    /// Patroni's `restapi.authentication` (HTTP basic auth, what patronictl sends).
    pub basic: Option<BasicAuth>,
    /// tenure's `restapi.token`: `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Unsafe endpoints open to anyone who reaches the port.
    pub allow_unauthenticated: bool,
}

#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    pub username: String,
    pub password: String,
}

/// Secrets never reach a log line.
impl fmt::Debug for RestAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestAuth")
            .field("username", &self.basic.as_ref().map(|b| &b.username))
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .finish()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestTls {
    pub certfile: PathBuf,
    pub keyfile: PathBuf,
    /// CA bundle for client certificates.
    pub cafile: Option<PathBuf>,
    pub verify_client: VerifyClient,
}

/// Patroni's `verify_client` (its `optional`, certificates for unsafe endpoints only, is refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyClient {
    None,
    /// A client certificate signed by `cafile` on every connection.
    Required,
}

impl RestApiConfig {
    /// The member key's `api_url`: `http(s)://<connect_address>/patroni`.
    pub fn api_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/patroni", self.connect_address)
    }

    /// What the REST server takes.
    pub fn server_settings(&self) -> RestApiSettings {
        let mut s = RestApiSettings::new(self.listen);
        s.username = self.auth.basic.as_ref().map(|b| b.username.clone());
        s.password = self.auth.basic.as_ref().map(|b| b.password.clone());
        s.token = self.auth.token.clone();
        s.allow_unauthenticated = self.auth.allow_unauthenticated;
        if let Some(tls) = &self.tls {
            s.certfile = Some(tls.certfile.clone());
            s.keyfile = Some(tls.keyfile.clone());
            s.cafile = tls.cafile.clone();
            s.verify_client = tls.verify_client == VerifyClient::Required;
        }
        s
    }
}

/// Parse `host:port` for a listener: an IP, `*`, empty or `localhost` before the port.
fn parse_listen(s: &str) -> Option<SocketAddr> {
    if let Ok(a) = s.parse() {
        return Some(a);
    }
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let ip = match host.trim_start_matches('[').trim_end_matches(']') {
        "" | "*" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        other => other.parse().ok()?,
    };
    Some(SocketAddr::new(ip, port))
}

/// Credentials, or the explicit choice of none: an empty token and credentials that
/// `allow_unauthenticated` would silently override are refused.
fn auth(
    basic: Option<BasicAuth>,
    token: Option<String>,
    allow_unauthenticated: Option<bool>,
    ctx: &mut Ctx,
) -> Option<RestAuth> {
    if token.as_deref() == Some("") {
        ctx.invalid(
            "restapi.token",
            "must not be empty",
            Some("set a token, or remove restapi.token"),
        );
        return None;
    }
    let auth = RestAuth {
        basic,
        token,
        allow_unauthenticated: allow_unauthenticated.unwrap_or(false),
    };
    let has_credentials = auth.basic.is_some() || auth.token.is_some();
    if auth.allow_unauthenticated && has_credentials {
        ctx.invalid(
            "restapi.allow_unauthenticated",
            "is true next to restapi.authentication or restapi.token: the credentials would protect nothing",
            Some("remove allow_unauthenticated to require the credentials, or remove the credentials"),
        );
        return None;
    }
    if !has_credentials && !auth.allow_unauthenticated {
        ctx.missing(
            "restapi.authentication",
            "unsafe endpoints (switchover, pause) need credentials: set restapi.authentication \
             {username, password} or restapi.token, or `allow_unauthenticated: true` to open them to anyone",
        );
        return None;
    }
    Some(auth)
}

pub(crate) fn build(raw: Option<RawRestApi>, ctx: &mut Ctx) -> Option<RestApiConfig> {
    let raw = raw.unwrap_or_default();
    let (listen, connect_address) = addresses(raw.listen, raw.connect_address, ctx)?;
    let basic = basic_auth(raw.authentication, ctx)?;
    let auth = auth(basic, raw.token, raw.allow_unauthenticated, ctx)?;
    let files = (raw.certfile, raw.keyfile, raw.cafile);
    let tls = tls(raw.verify_client, files, ctx)?;
    Some(RestApiConfig {
        listen,
        connect_address,
        auth,
        tls,
    })
}

/// `restapi.listen` as an address, and the `connect_address` other members use.
fn addresses(
    listen: Option<String>,
    connect_address: Option<String>,
    ctx: &mut Ctx,
) -> Option<(SocketAddr, String)> {
    let listen_s = ctx.required(listen, "restapi.listen", "e.g. `listen: 0.0.0.0:8008`")?;
    let Some(listen) = parse_listen(&listen_s) else {
        ctx.invalid(
            "restapi.listen",
            format!("{listen_s:?} is not an IP address and port"),
            Some("e.g. `listen: 0.0.0.0:8008`"),
        );
        return None;
    };
    let connect_address = match connect_address {
        Some(c) => c,
        None if !listen.ip().is_unspecified() => listen.to_string(),
        None => {
            ctx.missing(
                "restapi.connect_address",
                "restapi.listen binds every address, so say which one other members use (e.g. `10.0.0.1:8008`)",
            );
            return None;
        }
    };
    Some((listen, connect_address))
}

/// `restapi.authentication`: both a username and a password, neither empty (`Some(None)`: not set).
fn basic_auth(authentication: Option<RawBasicAuth>, ctx: &mut Ctx) -> Option<Option<BasicAuth>> {
    let basic = match authentication {
        None => None,
        Some(a) => match (a.username, a.password) {
            // An empty name or password would make `Authorization: Basic Og==` (":") a valid login.
            (Some(u), Some(p)) if u.is_empty() || p.is_empty() => {
                ctx.invalid(
                    "restapi.authentication",
                    "username and password must not be empty",
                    Some("set both, or remove restapi.authentication"),
                );
                return None;
            }
            (Some(username), Some(password)) => Some(BasicAuth { username, password }),
            _ => {
                ctx.invalid(
                    "restapi.authentication",
                    "needs both username and password",
                    None::<&str>,
                );
                return None;
            }
        },
    };
    Some(basic)
}

/// TLS from `certfile`, `keyfile` and `cafile`, with `verify_client` (`Some(None)`: plain HTTP).
fn tls(
    verify_client: Option<RawVerifyClient>,
    (certfile, keyfile, cafile): (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
    ctx: &mut Ctx,
) -> Option<Option<RestTls>> {
    let verify_client = match verify_client.unwrap_or(RawVerifyClient::None) {
        RawVerifyClient::None => VerifyClient::None,
        RawVerifyClient::Required => VerifyClient::Required,
        RawVerifyClient::Optional => {
            ctx.invalid(
                "restapi.verify_client",
                "`optional` (certificates for unsafe endpoints only) is not supported",
                Some("use `required` (every connection) or `none`"),
            );
            return None;
        }
    };
    let tls = match (certfile, keyfile) {
        (Some(certfile), Some(keyfile)) => Some(RestTls {
            certfile,
            keyfile,
            cafile,
            verify_client,
        }),
        (Some(_), None) => {
            ctx.missing("restapi.keyfile", "TLS needs the key as its own PEM file");
            return None;
        }
        (None, keyfile) => {
            if keyfile.is_some() || verify_client != VerifyClient::None {
                ctx.missing(
                    "restapi.certfile",
                    "restapi.keyfile and restapi.verify_client only apply with TLS",
                );
                return None;
            }
            None
        }
    };
    if let Some(t) = &tls {
        if t.verify_client != VerifyClient::None && t.cafile.is_none() {
            ctx.missing(
                "restapi.cafile",
                "verify_client needs the CA bundle that signs client certificates",
            );
            return None;
        }
    }
    Some(tls)
}
