//! The contract suite against a real etcd that serves clients over https only and requires client
//! certificates (`--client-cert-auth`), plus what TLS alone can get wrong: no client certificate, a
//! certificate from another CA, an unreadable PEM file.
use std::path::Path;

use async_trait::async_trait;
use tenure::dcs::etcd::{lease_ttl_s, EtcdDcs, EtcdSettings, EtcdSettingsError, EtcdTls};
use tenure::dcs::{Dcs, DcsError};
use tokio::time::Instant;

use crate::contract::{Backend, Fault};
use crate::support::etcd::{DropProxy, EtcdServer};
use crate::support::pki::pki;

/// A private TLS etcd per case, reached through a proxy that can drop connections.
pub struct EtcdOverTls {
    server: EtcdServer,
    proxy: DropProxy,
    pki: tempfile::TempDir,
}

#[async_trait]
impl Backend for EtcdOverTls {
    async fn make_client(&self, scope: &str, name: &str, ttl_ms: u64) -> Box<dyn Dcs> {
        let endpoint = self.proxy.url().replace("http://", "https://");
        let tls = identity(self.pki.path(), true);
        Box::new(tls_client(endpoint, tls, scope, name, ttl_ms).expect("valid settings"))
    }
    fn ttl_ms(&self) -> u64 {
        1_000
    }
    fn expiry_window_ms(&self, ttl_ms: u64) -> (u64, u64) {
        // As for plain etcd: never before the rounded-up TTL, revoked within about 600 ms after it.
        let ttl = u64::try_from(lease_ttl_s(ttl_ms)).unwrap_or(u64::MAX / 2) * 1000;
        (ttl, ttl + 600)
    }
    async fn set_fault(&self, fault: Fault) -> bool {
        match fault {
            Fault::Healthy => {
                self.server.sigcont();
                self.proxy.set_dropping(false);
            }
            Fault::Frozen => self.server.sigstop(),
            Fault::DropConnections => self.proxy.set_dropping(true),
            Fault::NoLeader => return false,
        }
        true
    }
}

pub async fn etcd_tls() -> Option<EtcdOverTls> {
    let dir = tempfile::tempdir().expect("pki dir");
    pki(dir.path());
    let server = EtcdServer::start_tls(dir.path());
    let proxy = DropProxy::start(server.host_port());
    Some(EtcdOverTls {
        server,
        proxy,
        pki: dir,
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
        endpoints: vec![endpoint],
        scope: scope.into(),
        namespace: "/service/".into(),
        name: name.into(),
        ttl_ms,
        user: None,
        password: None,
        tls: Some(tls),
    })
}

fn soon() -> Instant {
    Instant::now() + std::time::Duration::from_secs(3)
}

/// Without a client certificate, or trusting another CA, every call fails as an unavailable store (never
/// as "no such key"); with the right material the same server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_refuses_clients_without_the_right_certificates() {
    let b = etcd_tls().await.expect("backend");
    let endpoint = b.server.client_url().to_string();
    let no_cert = tls_client(
        endpoint.clone(),
        identity(b.pki.path(), false),
        "s",
        "a",
        1_000,
    )
    .expect("settings");
    let r = no_cert.get_cluster(true, soon()).await;
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
    let r = wrong_ca.get_cluster(true, soon()).await;
    assert!(matches!(r, Err(DcsError::Unavailable(_))), "{r:?}");

    let good =
        tls_client(endpoint, identity(b.pki.path(), true), "s", "a", 1_000).expect("settings");
    good.get_cluster(true, soon()).await.expect("read over TLS");
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
