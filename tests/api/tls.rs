//! TLS: the API over HTTPS with a throwaway PKI (openssl CLI), with and without client certificates.
use std::path::Path;

use super::harness::{primary, settings, Api, FakeControl, ADMIN, NOW};
use crate::support::pki::pki;

fn client(dir: &Path, with_cert: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("ca.pem")).unwrap()).unwrap();
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(ca);
    if with_cert {
        let mut pem = std::fs::read(dir.join("client.pem")).unwrap();
        pem.extend(std::fs::read(dir.join("client.key")).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b.build().unwrap()
}

#[tokio::test]
async fn https_with_and_without_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pki(d);
    let mut s = settings();
    s.certfile = Some(d.join("server.pem"));
    s.keyfile = Some(d.join("server.key"));
    let api = Api::start_with(s.clone(), primary(NOW + 10_000), "https", client(d, false)).await;
    assert_eq!(api.get("/primary").await, 200);
    let (status, _) = api.send(reqwest::Method::POST, "/reload", ADMIN, "").await;
    assert_eq!(status, 202);
    api.shutdown().await;

    s.cafile = Some(d.join("ca.pem"));
    s.verify_client = true;
    let api = Api::start_with(s.clone(), primary(NOW + 10_000), "https", client(d, true)).await;
    assert_eq!(api.get("/primary").await, 200);
    let anonymous = client(d, false)
        .get(format!("{}/primary", api.base))
        .send()
        .await;
    assert!(
        anonymous.is_err(),
        "a client without a certificate is refused: {anonymous:?}"
    );
    api.shutdown().await;

    s.keyfile = Some(d.join("client.key"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let state = tenure::api::ApiState {
        published: tokio::sync::watch::channel(primary(NOW)).1,
        clock: std::sync::Arc::new(|| tenure::ha::Millis(NOW)),
        control: std::sync::Arc::new(FakeControl::default()),
        failsafe: Default::default(),
        mirror: None,
    };
    let err = tenure::api::serve(s, state, listener, std::future::pending())
        .await
        .err();
    assert!(
        matches!(err, Some(tenure::api::ApiError::Tls(_))),
        "{err:?}"
    );
}

/// The agent's client for its peers' REST APIs (probes, failsafe rounds) trusts `restapi.cafile` and, when
/// the members check client certificates, presents `restapi.certfile`/`keyfile`.
#[tokio::test]
async fn the_peer_client_reaches_members_behind_a_private_ca_and_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pki(d);
    let mut server = settings();
    server.certfile = Some(d.join("server.pem"));
    server.keyfile = Some(d.join("server.key"));
    server.cafile = Some(d.join("ca.pem"));
    server.verify_client = true;
    let api = Api::start_with(server, primary(NOW + 10_000), "https", client(d, true)).await;
    let url = format!("{}/patroni", api.base);

    // What every member's config says, with a certificate this test's CA issued for client use.
    let mut mine = settings();
    mine.cafile = Some(d.join("ca.pem"));
    mine.certfile = Some(d.join("client.pem"));
    mine.keyfile = Some(d.join("client.key"));
    mine.verify_client = true;
    let peer = tenure::agent::peers::client(&mine).expect("peer client");
    let r = peer.get(&url).send().await.expect("reaches the member");
    assert_eq!(r.status(), 200);

    mine.verify_client = false;
    let no_cert = tenure::agent::peers::client(&mine).expect("peer client");
    assert!(
        no_cert.get(&url).send().await.is_err(),
        "without its certificate the member refuses the connection"
    );
    mine.cafile = None;
    mine.verify_client = true;
    let no_ca = tenure::agent::peers::client(&mine).expect("peer client");
    assert!(
        no_ca.get(&url).send().await.is_err(),
        "without the CA the member's certificate is not trusted"
    );
    mine.cafile = Some(d.join("missing.pem"));
    let err = tenure::agent::peers::client(&mine).unwrap_err();
    assert!(err.contains("restapi.cafile"), "{err}");
    api.shutdown().await;
}
