//! libpq's `ssl*` settings of an authentication section: as libpq keywords, and as a rustls connector.
// libpq consumers (primary_conninfo, pg_basebackup, pg_rewind) get the settings as keywords and apply them
// themselves. The agent's own connections get the same meaning from rustls: `prefer`/`require` encrypt
// without checking the certificate, `verify-ca` checks the chain against `sslrootcert` only, `verify-full`
// also the host name, as libpq does.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;

mod connect;
pub mod guard;
mod stream;
mod verify;

pub use connect::{connect, PgConnection};

pub use stream::{MakeRustls, RustlsConnect, RustlsStream};

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    const ALL: [SslMode; 6] = [
        SslMode::Disable,
        SslMode::Allow,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// One of libpq's six values, as libpq spells them.
    pub fn parse(s: &str) -> Option<SslMode> {
        SslMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// The `ssl*`, `gssencmode` and `channel_binding` keys of one `postgresql.authentication` section, as given
/// (values checked by the config). `None` is libpq's default.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SslSettings {
    pub mode: Option<SslMode>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The passphrase of an encrypted `sslkey`; libpq consumers only (see [`client_config`]).
    pub password: Option<String>,
    /// A CA file, or libpq's `system`.
    pub rootcert: Option<PathBuf>,
    pub crl: Option<PathBuf>,
    pub crldir: Option<PathBuf>,
    /// `postgres` or `direct`.
    pub negotiation: Option<String>,
    /// `disable`, `prefer` or `require`.
    pub gssencmode: Option<String>,
    /// `disable`, `prefer` or `require`.
    pub channel_binding: Option<String>,
}

/// The passphrase never reaches a log line.
impl std::fmt::Debug for SslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SslSettings")
            .field("mode", &self.mode)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("rootcert", &self.rootcert)
            .field("crl", &self.crl)
            .field("crldir", &self.crldir)
            .field("negotiation", &self.negotiation)
            .field("gssencmode", &self.gssencmode)
            .field("channel_binding", &self.channel_binding)
            .finish()
    }
}

impl SslSettings {
    /// The settings as libpq keywords, in Patroni's order. `with_password` adds `sslpassword`: only into
    /// files (primary_conninfo), never onto a command line.
    pub fn libpq_keywords(&self, with_password: bool) -> Vec<(&'static str, String)> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let password = self.password.clone().filter(|_| with_password);
        [
            ("sslmode", self.mode.map(|m| m.as_str().to_string())),
            ("sslcert", path(&self.cert)),
            ("sslkey", path(&self.key)),
            ("sslpassword", password),
            ("sslrootcert", path(&self.rootcert)),
            ("sslcrl", path(&self.crl)),
            ("sslcrldir", path(&self.crldir)),
            ("gssencmode", self.gssencmode.clone()),
            ("channel_binding", self.channel_binding.clone()),
            ("sslnegotiation", self.negotiation.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
    }

    /// What the agent uses towards its own PostgreSQL over loopback (`use_unix_socket: false`): encryption
    /// as configured (`prefer` when the section does not disable it) and the client certificate, but no
    /// server certificate check: the server's certificate names the member's public address, not
    /// 127.0.0.1. The server is then not verified (any local user can bind the port while PostgreSQL is
    /// down), so [`connect`] answers no cleartext or MD5 password request there.
    pub fn for_loopback(&self) -> SslSettings {
        let mode = match self.mode {
            Some(SslMode::Disable) => SslMode::Disable,
            Some(SslMode::Allow) => SslMode::Allow,
            _ => SslMode::Prefer,
        };
        SslSettings {
            mode: Some(mode),
            rootcert: None,
            crl: None,
            crldir: None,
            ..self.clone()
        }
    }
}

/// A TLS setting the agent's own connections cannot use.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key} {}: {error}", path.display())]
    File {
        key: &'static str,
        path: PathBuf,
        error: String,
    },
    #[error("{key}: {why}")]
    Unsupported { key: &'static str, why: String },
    #[error("cannot build the TLS client: {0}")]
    Build(String),
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        key,
        path: path.to_path_buf(),
        error: e.to_string(),
    })
}

fn bad_pem(key: &'static str, path: &Path, what: &str) -> TlsError {
    TlsError::File {
        key,
        path: path.to_path_buf(),
        error: format!("no {what} in PEM form"),
    }
}

fn pem_certs(
    key: &'static str,
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let bytes = read(key, path)?;
    let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| bad_pem(key, path, &format!("certificate ({e})")))?;
    if certs.is_empty() {
        return Err(bad_pem(key, path, "certificate"));
    }
    Ok(certs)
}

fn pem_crls(
    key: &'static str,
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateRevocationListDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let bytes = read(key, path)?;
    rustls::pki_types::CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| bad_pem(key, path, &format!("CRL ({e})")))
}

/// The CRLs of `sslcrl` and of every file in `sslcrldir`.
fn crls(
    ssl: &SslSettings,
) -> Result<Vec<rustls::pki_types::CertificateRevocationListDer<'static>>, TlsError> {
    let mut out = Vec::new();
    if let Some(file) = &ssl.crl {
        out.extend(pem_crls("sslcrl", file)?);
    }
    if let Some(dir) = &ssl.crldir {
        let entries = std::fs::read_dir(dir).map_err(|e| TlsError::File {
            key: "sslcrldir",
            path: dir.clone(),
            error: e.to_string(),
        })?;
        for entry in entries.flatten() {
            if entry.path().is_file() {
                out.extend(pem_crls("sslcrldir", &entry.path())?);
            }
        }
    }
    Ok(out)
}

/// The rustls client for `ssl`, reading every file it names (so a missing or unreadable one is named with
/// its key). Differences with libpq, each refused here rather than ignored: `sslrootcert=system`, an
/// encrypted `sslkey` (`sslpassword`), `gssencmode=require` (no GSSAPI); and no default files under
/// `~/.postgresql/` are read.
pub fn client_config(ssl: &SslSettings) -> Result<rustls::ClientConfig, TlsError> {
    let mode = ssl.mode.unwrap_or_default();
    if ssl.gssencmode.as_deref() == Some("require") {
        return Err(TlsError::Unsupported {
            key: "gssencmode",
            why: "the agent's own connections have no GSSAPI encryption; use sslmode".into(),
        });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let checks_chain = mode.verifies() || (mode == SslMode::Require && ssl.rootcert.is_some());
    let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = match &ssl.rootcert {
        Some(root) if checks_chain => {
            if root.as_os_str() == "system" {
                return Err(TlsError::Unsupported {
                    key: "sslrootcert",
                    why: "`system` is not supported by the agent's own connections; name a CA file"
                        .into(),
                });
            }
            let mut roots = rustls::RootCertStore::empty();
            for cert in pem_certs("sslrootcert", root)? {
                roots
                    .add(cert)
                    .map_err(|e| bad_pem("sslrootcert", root, &format!("CA certificate ({e})")))?;
            }
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .with_crls(crls(ssl)?)
            .build()
            .map_err(|e| TlsError::Build(e.to_string()))?;
            // libpq: `require` with a root certificate checks the chain as `verify-ca` does.
            if mode == SslMode::VerifyFull {
                inner
            } else {
                Arc::new(verify::ChainOnly(inner))
            }
        }
        None if checks_chain => {
            return Err(TlsError::Unsupported {
                key: "sslrootcert",
                why: format!(
                    "sslmode {} needs sslrootcert (tenure reads no ~/.postgresql/root.crt)",
                    mode.as_str()
                ),
            })
        }
        _ => Arc::new(verify::Anything(provider.clone())),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Build(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&ssl.cert, &ssl.key) {
        (Some(cert), Some(key)) => {
            use rustls::pki_types::pem::PemObject;
            let certs = pem_certs("sslcert", cert)?;
            let bytes = read("sslkey", key)?;
            if String::from_utf8_lossy(&bytes).contains("ENCRYPTED") {
                return Err(TlsError::Unsupported {
                    key: "sslkey",
                    why: format!(
                        "{} is encrypted; the agent's own connections cannot use sslpassword, give an unencrypted key (mode 0600)",
                        key.display()
                    ),
                });
            }
            let private = rustls::pki_types::PrivateKeyDer::from_pem_slice(&bytes)
                .map_err(|e| bad_pem("sslkey", key, &format!("private key ({e})")))?;
            builder
                .with_client_auth_cert(certs, private)
                .map_err(|e| TlsError::File {
                    key: "sslcert",
                    path: cert.clone(),
                    error: format!("does not go with sslkey {}: {e}", key.display()),
                })?
        }
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) | (None, Some(_)) => return Err(TlsError::Unsupported {
            key: "sslcert",
            why: "give sslcert and sslkey together (tenure reads no ~/.postgresql/postgresql.crt)"
                .into(),
        }),
    };
    // What libpq 17 offers; PostgreSQL 17 requires it for `sslnegotiation=direct`, older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

impl SslSettings {
    /// Whether TLS with these settings proves the server's identity: the chain is checked (`verify-ca`,
    /// `verify-full`, or `require` with a root certificate, as libpq does).
    pub fn verifies_server(&self) -> bool {
        let mode = self.mode.unwrap_or_default();
        mode.verifies() || (mode == SslMode::Require && self.rootcert.is_some())
    }
}

/// Check every file the three authentication sections name, at start: a missing CA or key is named with
/// its key and path now, not as a failed probe in the middle of a failover. The superuser and rewind
/// sections serve the agent's own connections too, so they must build its TLS client; the replication
/// section serves only libpq (`primary_conninfo`, `pg_basebackup`), so its files need only be readable
/// (an encrypted key with `sslpassword`, `sslrootcert: system` are libpq's to judge).
pub fn check(settings: &super::PgSettings) -> Result<(), String> {
    for (section, creds) in [
        ("superuser", &settings.superuser),
        ("rewind", &settings.rewind),
    ] {
        client_config(&creds.ssl)
            .map_err(|e| format!("postgresql.authentication.{section}.{e}"))?;
    }
    let ssl = &settings.replication.ssl;
    let system = Path::new("system");
    for (key, file) in [
        ("sslcert", &ssl.cert),
        ("sslkey", &ssl.key),
        ("sslrootcert", &ssl.rootcert),
        ("sslcrl", &ssl.crl),
    ] {
        if let Some(path) = file.as_deref().filter(|p| *p != system) {
            read(key, path).map_err(|e| format!("postgresql.authentication.replication.{e}"))?;
        }
    }
    if let Some(dir) = &ssl.crldir {
        std::fs::read_dir(dir).map_err(|e| {
            format!(
                "postgresql.authentication.replication.sslcrldir {}: {e}",
                dir.display()
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_takes_libpqs_six_values_only() {
        for m in SslMode::ALL {
            assert_eq!(SslMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(SslMode::parse("verify_full"), None);
        assert_eq!(SslMode::parse("REQUIRE"), None);
    }

    #[test]
    fn keywords_leave_the_passphrase_off_command_lines() {
        let ssl = SslSettings {
            mode: Some(SslMode::VerifyCa),
            rootcert: Some("/etc/ca.pem".into()),
            password: Some("pw".into()),
            ..SslSettings::default()
        };
        let keys = |w| {
            ssl.libpq_keywords(w)
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(false), ["sslmode", "sslrootcert"]);
        assert_eq!(keys(true), ["sslmode", "sslpassword", "sslrootcert"]);
        assert!(!format!("{ssl:?}").contains("pw\""));
    }

    #[test]
    fn verify_modes_need_a_root_certificate_and_name_the_key() {
        let ssl = SslSettings {
            mode: Some(SslMode::VerifyFull),
            ..SslSettings::default()
        };
        let e = client_config(&ssl).unwrap_err().to_string();
        assert!(e.starts_with("sslrootcert:"), "{e}");
        let ssl = SslSettings {
            rootcert: Some("/nonexistent/ca.pem".into()),
            ..ssl
        };
        let e = client_config(&ssl).unwrap_err().to_string();
        assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
        // Without a check of the chain, no CA is needed.
        assert!(client_config(&SslSettings::default()).is_ok());
    }
}
