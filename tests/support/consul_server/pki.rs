//! A throwaway PKI for HTTPS tests: a CA, a server certificate for 127.0.0.1 and a client certificate, minted
//! with the `openssl` command line into a temporary directory, and the rustls acceptor the test double uses.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::ServerTls;

/// The files of one test PKI; they live as long as `dir`.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    /// `None` (after saying why) when the `openssl` command is not installed.
    pub fn generate() -> Option<Pki> {
        if Command::new("openssl").arg("version").output().is_err() {
            eprintln!("openssl not found: skipping the HTTPS test");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let p = |name: &str| d.join(name);
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "1",
                "-subj",
                "/CN=tenure test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        );
        leaf(
            d,
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        leaf(d, "client", "extendedKeyUsage=clientAuth\n");
        Some(Pki {
            ca: p("ca.pem"),
            server_cert: p("server.pem"),
            server_key: p("server.key"),
            client_cert: p("client.pem"),
            client_key: p("client.key"),
            dir,
        })
    }

    /// Server settings for the test double; `require_client_cert` turns on `verify_incoming`.
    pub fn server_tls(&self, require_client_cert: bool) -> ServerTls {
        ServerTls {
            cert: self.server_cert.clone(),
            key: self.server_key.clone(),
            client_ca: require_client_cert.then(|| self.ca.clone()),
        }
    }
}

fn leaf(d: &Path, name: &str, extensions: &str) {
    let (key, csr, pem, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    std::fs::write(
        d.join(&ext),
        format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{extensions}"),
    )
    .expect("ext");
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            &ext,
        ],
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rustls acceptor for `tls`; panics on bad files (a broken test setup, not a behaviour under test).
pub fn acceptor(tls: &ServerTls) -> TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
        .expect("server cert")
        .collect::<Result<_, _>>()
        .expect("server cert");
    let key = PrivateKeyDer::from_pem_file(&tls.key).expect("server key");
    let builder = ServerConfig::builder();
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).expect("client CA") {
                roots
                    .add(cert.expect("client CA cert"))
                    .expect("add client CA");
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).expect("server config");
    TlsAcceptor::from(Arc::new(config))
}
