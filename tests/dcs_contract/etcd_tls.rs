//! The contract suite against a real etcd that serves clients over https only and requires client
//! certificates (`--client-cert-auth`), plus what TLS alone can get wrong: no client certificate, a
//! certificate from another CA, an unreadable PEM file.
use std::path::Path;

use tenure::dcs::etcd::{EtcdDcs, EtcdSettings, EtcdSettingsError, EtcdTls};
use tenure::dcs::{Dcs, DcsError};

use crate::etcd::{dl, settings, Etcd};
use crate::support::etcd::{DropProxy, EtcdServer};
use crate::support::pki::pki;

/// The contract's etcd backend, its server serving https only with client certificates required.
pub async fn etcd_tls() -> Option<Etcd> {
    let dir = tempfile::tempdir().expect("pki dir");
    pki(dir.path());
    let server = EtcdServer::start_tls(dir.path());
    let proxy = DropProxy::start(server.host_port());
    let tls = identity(dir.path(), true);
    Some(Etcd {
        server,
        proxy,
        tls: Some((dir, tls)),
    })
}

contract_tests!(etcd_tls);

/// The CA, and the client certificate when `with_cert`.
fn identity(pki: &Path, with_cert: bool) -> EtcdTls {
    EtcdTls {
        ca_file: Some(pki.join("ca.pem")),
        cert_file: with_cert.then(|| pki.join("client.pem")),
        key_file: with_cert.then(|| pki.join("client.key")),
    }
}

fn tls_client(
    endpoint: String,
    tls: EtcdTls,
    scope: &str,
    name: &str,
    ttl_ms: u64,
) -> Result<EtcdDcs, EtcdSettingsError> {
    EtcdDcs::new(EtcdSettings {
        tls: Some(tls),
        ..settings(vec![endpoint], scope, name, ttl_ms)
    })
}

/// Without a client certificate, or trusting another CA, every call fails as an unavailable store (never
/// as "no such key"); with the right material the same server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_refuses_clients_without_the_right_certificates() {
    let b = etcd_tls().await.expect("backend");
    let ours = b.tls.as_ref().expect("tls").0.path();
    let endpoint = b.server.client_url().to_string();
    let no_cert =
        tls_client(endpoint.clone(), identity(ours, false), "s", "a", 1_000).expect("settings");
    let r = no_cert.get_cluster(true, dl(3_000)).await;
    assert!(matches!(r, Err(DcsError::Unavailable(_))), "{r:?}");

    let other = tempfile::tempdir().expect("other pki");
    pki(other.path());
    let wrong_ca = tls_client(
        endpoint.clone(),
        identity(other.path(), true),
        "s",
        "a",
        1_000,
    )
    .expect("settings");
    let r = wrong_ca.get_cluster(true, dl(3_000)).await;
    assert!(matches!(r, Err(DcsError::Unavailable(_))), "{r:?}");

    let good = tls_client(endpoint, identity(ours, true), "s", "a", 1_000).expect("settings");
    good.get_cluster(true, dl(3_000))
        .await
        .expect("read over TLS");
}

/// A PEM file that cannot be read stops the client at construction, naming the config key and the path.
#[test]
fn an_unreadable_pem_file_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let mut tls = identity(dir.path(), true);
    let e = tls_client("https://127.0.0.1:1".into(), tls.clone(), "s", "a", 1_000)
        .err()
        .expect("missing CA file");
    let shown = e.to_string();
    assert!(
        shown.contains("etcd3.cacert") && shown.contains("ca.pem"),
        "{shown}"
    );
    std::fs::write(dir.path().join("ca.pem"), "not a certificate").expect("write");
    tls.key_file = None;
    let e = tls_client("https://127.0.0.1:1".into(), tls, "s", "a", 1_000)
        .err()
        .expect("half identity");
    assert_eq!(e, EtcdSettingsError::HalfIdentity);
    let e = tls_client(
        "https://127.0.0.1:1".into(),
        EtcdTls {
            ca_file: None,
            cert_file: None,
            key_file: None,
        },
        "s",
        "a",
        1_000,
    )
    .err()
    .expect("no CA");
    assert_eq!(e, EtcdSettingsError::NoCaCert);
}
