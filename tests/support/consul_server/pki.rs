//! The test double's side of HTTPS: its server settings from a test PKI (`support::pki`), and the rustls
//! acceptor it serves with.
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::ServerTls;

pub use super::super::pki::Pki;

impl Pki {
    /// Server settings for the test double; `require_client_cert` turns on `verify_incoming`.
    pub fn server_tls(&self, require_client_cert: bool) -> ServerTls {
        ServerTls {
            cert: self.server_cert.clone(),
            key: self.server_key.clone(),
            client_ca: require_client_cert.then(|| self.ca.clone()),
        }
    }
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
