//! The agent's own SQL connections: TCP or the Unix socket, `sslmode` as libpq means it, and the password guard.
use std::path::PathBuf;

use super::{client_config, guard, MakeRustls, RustlsStream, SslMode, SslSettings};
use crate::pg::PgError;

/// The connection half tokio-postgres hands back, over a guarded socket (and guarded TLS).
pub type PgConnection = tokio_postgres::Connection<
    guard::Guarded<guard::RawSocket>,
    guard::Guarded<RustlsStream<guard::Guarded<guard::RawSocket>>>,
>;

/// Connect to the host and port in `cfg` (one TCP host, or a Unix socket directory) with `ssl`. `allow`
/// tries without TLS first, then with it, as libpq does. A Unix socket takes no TLS (libpq ignores
/// `sslmode` there) and counts as verified: the agent connects only to a socket directory it checked at
/// start. Over anything not verified, a request for a cleartext or MD5 password is refused: the error
/// names the server, and the password is never sent.
pub async fn connect(
    cfg: &mut tokio_postgres::Config,
    ssl: &SslSettings,
) -> Result<(tokio_postgres::Client, PgConnection), PgError> {
    use tokio_postgres::config::{ChannelBinding as Cb, Host, SslMode as Tm, SslNegotiation};
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let (target, name) = match cfg.get_hosts().first() {
        Some(Host::Unix(dir)) => {
            let path = dir.join(format!(".s.PGSQL.{port}"));
            let name = path.display().to_string();
            (Err(path), name)
        }
        Some(Host::Tcp(host)) => (Ok(host.clone()), format!("{host}:{port}")),
        None => return Err(PgError::Parse("no host to connect to".into())),
    };
    let unix = target.is_err();
    let mode = if unix {
        SslMode::Disable
    } else {
        ssl.mode.unwrap_or_default()
    };
    let verified = unix || ssl.verifies_server();
    let direct = ssl.negotiation.as_deref() == Some("direct");
    if direct {
        cfg.ssl_negotiation(SslNegotiation::Direct);
    }
    cfg.channel_binding(match ssl.channel_binding.as_deref() {
        Some("disable") => Cb::Disable,
        Some("require") => Cb::Require,
        _ => Cb::Prefer,
    });
    let tls = MakeRustls::new(client_config(ssl)?);
    let server_name = target.as_ref().map_or("localhost", String::as_str);
    let attempt = |tm: Tm| {
        let mut cfg = cfg.clone();
        cfg.ssl_mode(tm);
        let (target, mut tls, name) = (target.clone(), tls.clone(), name.clone());
        let tripped = guard::Tripped::default();
        let (raw_scan, tls_scan) = match (verified, tm, direct) {
            (true, _, _) => (guard::Scan::Off, guard::Scan::Off),
            (false, Tm::Disable, _) => (guard::Scan::messages(), guard::Scan::Off),
            (false, _, true) => (guard::Scan::Off, guard::Scan::messages()),
            (false, _, false) => (guard::Scan::SslReply, guard::Scan::messages()),
        };
        async move {
            let bound = cfg
                .get_connect_timeout()
                .copied()
                .unwrap_or(std::time::Duration::from_secs(30));
            let socket = tokio::time::timeout(bound, open(&target, port))
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connection timed out",
                    ))
                })
                .map_err(PgError::io(format!("connect to {name}")))?;
            let connect = tokio_postgres::tls::MakeTlsConnect::<
                guard::Guarded<guard::RawSocket>,
            >::make_tls_connect(&mut tls, server_name)
            .map_err(PgError::io(format!("TLS name {server_name}")))?;
            let guarded = guard::GuardedConnect {
                inner: connect,
                scan: tls_scan,
                tripped: tripped.clone(),
            };
            let raw = guard::Guarded::new(socket, raw_scan, tripped.clone());
            let result = cfg.connect_raw(raw, guarded).await;
            let refused = tripped.lock().ok().and_then(|t| *t);
            match (result, refused) {
                (_, Some(method)) => Err(PgError::PasswordRefused {
                    server: name,
                    method,
                }),
                (r, None) => Ok(r?),
            }
        }
    };
    match attempt(match mode {
        SslMode::Disable | SslMode::Allow => Tm::Disable,
        SslMode::Prefer => Tm::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Tm::Require,
    })
    .await
    {
        Err(e) if mode == SslMode::Allow && !matches!(e, PgError::PasswordRefused { .. }) => {
            attempt(Tm::Require).await
        }
        other => other,
    }
}

/// Open a TCP connection to `host:port`, or the Unix socket at `path`.
async fn open(target: &Result<String, PathBuf>, port: u16) -> std::io::Result<guard::RawSocket> {
    Ok(match target {
        Ok(host) => {
            let s = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            s.set_nodelay(true)?;
            guard::RawSocket::Tcp(s)
        }
        Err(path) => guard::RawSocket::Unix(tokio::net::UnixStream::connect(path).await?),
    })
}
