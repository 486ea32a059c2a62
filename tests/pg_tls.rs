//! TLS for tenure's PostgreSQL connections on real PostgreSQL 15 with `ssl = on` and a pg_hba that allows
//! only `hostssl` (issue 13 item 5): the probe connections, the peer SQL probe, client certificates, and a
//! replica cloned and streaming with `sslmode = verify-ca`.
#[path = "support/pg.rs"]
mod pg_support;
#[allow(dead_code)]
#[path = "support/pki.rs"]
mod pki;

use std::path::{Path, PathBuf};

use pg_support::PgNode;
use tenure::dcs::MemberRecord;
use tenure::ha::types::NodeName;
use tenure::ha::PgRole;
use tenure::pg::ctl::{self, InitdbOptions};
use tenure::pg::probe;
use tenure::pg::tls::{SslMode, SslSettings};
use tenure::pg::{Credentials, Endpoint};

/// Only TLS connections from loopback, for every role and for replication.
const HOSTSSL_ONLY: &[&str] = &[
    "hostssl all all 127.0.0.1/32 scram-sha-256",
    "hostssl replication all 127.0.0.1/32 scram-sha-256",
];

/// The test PKIs: `main` signs the servers' and clients' certificates, `other` is a CA that signed none of
/// them. Made once, before any test creates a node: the node harness reaps every child zombie of this
/// process but `runuser`, and would take the openssl runs' exit statuses from under them.
struct Pkis {
    main: pki::Pki,
    other: pki::Pki,
    /// `(cert, key)` with CN `postgres` and with CN `somebody-else`.
    postgres: (PathBuf, PathBuf),
    somebody: (PathBuf, PathBuf),
    /// `(cert, key)` with CN `replicator`, the key encrypted with [`KEY_PASSPHRASE`].
    replicator: (PathBuf, PathBuf),
}

const KEY_PASSPHRASE: &str = "key pass";

fn pkis() -> &'static Pkis {
    static PKIS: std::sync::OnceLock<Pkis> = std::sync::OnceLock::new();
    PKIS.get_or_init(|| {
        let (main, clients) =
            pki::Pki::generate_plain(&["postgres", "somebody-else", "replicator"]);
        let (other, _) = pki::Pki::generate_plain(&[]);
        let (cert, key) = clients[2].clone();
        let encrypted = key.with_extension("enc.key");
        let out = std::process::Command::new("openssl")
            .args(["pkey", "-aes256", "-passout"])
            .arg(format!("pass:{KEY_PASSPHRASE}"))
            .arg("-in")
            .arg(&key)
            .arg("-out")
            .arg(&encrypted)
            .output()
            .expect("openssl pkey");
        assert!(out.status.success(), "{out:?}");
        Pkis {
            postgres: clients[0].clone(),
            somebody: clients[1].clone(),
            replicator: (cert, encrypted),
            other,
            main,
        }
    })
}

/// `src` copied into `dir` for the postgres user (PostgreSQL refuses a key others can read).
fn copy_for_postgres(src: &Path, dir: &Path) -> PathBuf {
    let to = dir.join(src.file_name().unwrap());
    std::fs::copy(src, &to).unwrap();
    let user = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    nix::unistd::chown(&to, Some(user.uid), Some(user.gid)).unwrap();
    std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    to
}

/// A node with `ssl = on`, the PKI's server certificate, its CA for client certificates, and `hba`.
fn tls_node(name: &str, pki: &pki::Pki, hba: &[&str]) -> PgNode {
    let mut node = PgNode::new(name);
    let dir = node.dir.path().to_path_buf();
    let s = &mut node.settings;
    for (guc, file) in [
        ("ssl_cert_file", &pki.server_cert),
        ("ssl_key_file", &pki.server_key),
        ("ssl_ca_file", &pki.ca),
    ] {
        let at = copy_for_postgres(file, &dir);
        s.parameters.insert(guc.into(), at.display().to_string());
    }
    s.parameters.insert("ssl".into(), "on".into());
    s.pg_hba = hba.iter().map(|l| l.to_string()).collect();
    // These pg_hba lists allow TLS over TCP only (no `local` line): the agent's own connections go there.
    s.use_unix_socket = false;
    node
}

async fn bootstrap(node: &PgNode) {
    ctl::bootstrap(&node.settings, &InitdbOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
}

fn with_ssl(creds: &Credentials, ssl: SslSettings) -> Credentials {
    Credentials {
        ssl,
        ..creds.clone()
    }
}

fn verify(mode: SslMode, ca: &Path) -> SslSettings {
    SslSettings {
        mode: Some(mode),
        rootcert: Some(ca.to_path_buf()),
        ..SslSettings::default()
    }
}

/// Whether this session is encrypted, as the server sees it.
async fn encrypted(ep: &Endpoint, creds: &Credentials) -> Result<bool, String> {
    let client = probe::connect_to(ep, creds)
        .await
        .map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// The connections the agent makes to other members (`probe::connect_to`: leader history, rewind source,
/// slots) against a hostssl-only server: `verify-full` with the right CA connects encrypted; a wrong CA, a
/// host name the certificate does not name, and `sslmode=disable` are refused, each with an error that
/// says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_connections_honour_sslmode_against_a_hostssl_only_server() {
    let (pki, other) = (&pkis().main, &pkis().other);
    let node = tls_node("tls-a", pki, HOSTSSL_ONLY);
    bootstrap(&node).await;
    let su = &node.settings.superuser;
    let ep = node.endpoint();

    let full = with_ssl(su, verify(SslMode::VerifyFull, &pki.ca));
    assert_eq!(encrypted(&ep, &full).await, Ok(true));

    let wrong_ca = with_ssl(su, verify(SslMode::VerifyFull, &other.ca));
    let e = encrypted(&ep, &wrong_ca).await.unwrap_err();
    // Both test CAs share a name, so rustls finds the wrong one and reports its signature.
    assert!(e.contains("invalid peer certificate"), "{e}");
    let e = encrypted(&ep, &with_ssl(su, verify(SslMode::VerifyCa, &other.ca)))
        .await
        .unwrap_err();
    assert!(e.contains("invalid peer certificate"), "{e}");

    // The certificate names 127.0.0.1 only: `localhost` fails verify-full, and passes verify-ca.
    let by_name = Endpoint {
        host: "localhost".into(),
        ..ep.clone()
    };
    let e = encrypted(&by_name, &full).await.unwrap_err();
    assert!(e.contains("certificate not valid for name"), "{e}");
    let ca_only = with_ssl(su, verify(SslMode::VerifyCa, &pki.ca));
    assert_eq!(encrypted(&by_name, &ca_only).await, Ok(true));

    let plain = with_ssl(
        su,
        SslSettings {
            mode: Some(SslMode::Disable),
            ..SslSettings::default()
        },
    );
    let e = encrypted(&ep, &plain).await.unwrap_err();
    assert!(
        e.contains("no pg_hba.conf entry") && e.contains("no encryption"),
        "{e}"
    );

    // libpq's default (`prefer`) and `require` encrypt without checking the certificate.
    assert_eq!(encrypted(&ep, su).await, Ok(true));
    let require = with_ssl(
        su,
        SslSettings {
            mode: Some(SslMode::Require),
            ..SslSettings::default()
        },
    );
    assert_eq!(encrypted(&ep, &require).await, Ok(true));
}

/// The peer SQL probe (the agent of a member does not answer; is its PostgreSQL still a primary?) sees
/// a primary whose pg_hba allows only `hostssl`. Before TLS it connected without it, was refused, and
/// reported nothing: the "a peer is still primary" check silently off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_sql_probe_sees_a_primary_that_allows_only_hostssl() {
    let pki = &pkis().main;
    let node = tls_node("tls-b", pki, HOSTSSL_ONLY);
    bootstrap(&node).await;
    let member = MemberRecord {
        conn_url: format!(
            "postgres://127.0.0.1:{}/postgres",
            node.settings.listen_port
        ),
        // No REST API: the probe must fall back to SQL.
        api_url: String::new(),
        ..MemberRecord::default()
    };
    let creds = with_ssl(
        &node.settings.superuser,
        verify(SslMode::VerifyFull, &pki.ca),
    );
    let probes = tenure::agent::peers::probe_all(
        &reqwest::Client::new(),
        &[("peer".into(), member)],
        &NodeName::new("me"),
        creds,
    )
    .await;
    let answer = probes[0].answer.as_ref().expect("the SQL probe answered");
    assert_eq!(answer.role, Some(PgRole::Primary));
}

/// `clientcert=verify-full`: the agent presents `sslcert`/`sslkey` (CN = the role), towards its own
/// PostgreSQL too (the bootstrap creates the roles over loopback); without them it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_pass_clientcert_verify_full() {
    let pki = &pkis().main;
    let mut node = tls_node(
        "tls-c",
        pki,
        &["hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-full"],
    );
    let (cert, key) = pkis().postgres.clone();
    node.settings.superuser.ssl = SslSettings {
        cert: Some(cert),
        key: Some(key),
        ..verify(SslMode::VerifyFull, &pki.ca)
    };
    bootstrap(&node).await;
    let su = node.settings.superuser.clone();
    assert_eq!(encrypted(&node.endpoint(), &su).await, Ok(true));
    let (wrong_cert, wrong_key) = pkis().somebody.clone();
    let wrong_cn = with_ssl(
        &su,
        SslSettings {
            cert: Some(wrong_cert),
            key: Some(wrong_key),
            ..su.ssl.clone()
        },
    );
    // PostgreSQL names the hba line's method (scram) when the CN check after it fails.
    let e = encrypted(&node.endpoint(), &wrong_cn).await.unwrap_err();
    assert!(
        e.contains("authentication failed for user \"postgres\""),
        "{e}"
    );
    let no_cert = with_ssl(&su, verify(SslMode::VerifyFull, &pki.ca));
    let e = encrypted(&node.endpoint(), &no_cert).await.unwrap_err();
    assert!(
        e.contains("connection requires a valid client certificate"),
        "{e}"
    );
}

/// A replica cloned (`pg_basebackup`) and streaming (`primary_conninfo`) from a hostssl-only primary with
/// the replication section's `sslmode = verify-ca`: the primary's walsender is encrypted and the WAL
/// receiver's conninfo carries `sslmode=verify-ca`. With a CA that did not sign the server's certificate
/// the clone is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_clones_and_streams_over_hostssl_with_verify_ca() {
    use tenure::pg::recovery::StandbyConfig;
    let (pki, other) = (&pkis().main, &pkis().other);
    let primary = tls_node("tls-p", pki, HOSTSSL_ONLY);
    bootstrap(&primary).await;

    let mut wrong = tls_node("tls-w", pki, HOSTSSL_ONLY);
    let other_ca = copy_for_postgres(&other.ca, wrong.dir.path());
    wrong.settings.replication.ssl = verify(SslMode::VerifyCa, &other_ca);
    let follow = StandbyConfig::follow(&wrong.settings, primary.endpoint());
    let e = ctl::basebackup(&wrong.settings, &primary.endpoint(), &follow)
        .await
        .expect_err("a clone through a CA that did not sign the server's certificate");
    assert!(e.to_string().contains("certificate verify failed"), "{e}");

    let mut replica = tls_node("tls-r", pki, HOSTSSL_ONLY);
    let ca = copy_for_postgres(&pki.ca, replica.dir.path());
    replica.settings.replication.ssl = verify(SslMode::VerifyCa, &ca);
    let rs = &replica.settings;
    tenure::pg::slots::create_slot(&primary.settings, &rs.slot_name())
        .await
        .expect("slot");
    let follow = StandbyConfig::follow(rs, primary.endpoint());
    ctl::basebackup(rs, &primary.endpoint(), &follow)
        .await
        .unwrap_or_else(|e| panic!("basebackup: {e}"));
    ctl::start(rs)
        .await
        .unwrap_or_else(|e| panic!("start replica: {e}\n{}", replica.log()));
    let local = probe::connect_local(rs).await.expect("replica connects");
    let conninfo: String = pg_support::eventually(30, "the replica streams", || async {
        let row = local
            .query_opt(
                "SELECT conninfo FROM pg_stat_wal_receiver WHERE status = 'streaming'",
                &[],
            )
            .await
            .ok()??;
        Some(row.get(0))
    })
    .await;
    assert!(conninfo.contains("sslmode=verify-ca"), "{conninfo}");
    let on_primary = probe::connect_local(&primary.settings).await.unwrap();
    let row = on_primary
        .query_one(
            "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) \
             WHERE r.application_name = $1",
            &[&rs.name.as_str()],
        )
        .await
        .expect("the replica's walsender");
    assert!(row.get::<_, bool>(0), "the walsender is not encrypted");
}

/// The replication section's client certificate with an encrypted key (`clientcert=verify-full` for
/// replication): `pg_basebackup` gets the passphrase from the 0600 service file, never on its command
/// line. The start check lets the replication section have it (only libpq uses that section) and refuses
/// it in the superuser section, whose key the agent itself must load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_replication_key_reaches_pg_basebackup_through_a_service_file() {
    use std::os::unix::fs::PermissionsExt;
    use tenure::pg::recovery::StandbyConfig;
    let p = pkis();
    let primary = tls_node(
        "tls-k",
        &p.main,
        &[
            "hostssl replication all 127.0.0.1/32 scram-sha-256 clientcert=verify-full",
            "hostssl all all 127.0.0.1/32 scram-sha-256",
        ],
    );
    bootstrap(&primary).await;
    let mut replica = tls_node("tls-l", &p.main, HOSTSSL_ONLY);
    let dir = replica.dir.path().to_path_buf();
    replica.settings.replication.ssl = SslSettings {
        cert: Some(copy_for_postgres(&p.replicator.0, &dir)),
        key: Some(copy_for_postgres(&p.replicator.1, &dir)),
        password: Some(KEY_PASSPHRASE.into()),
        ..verify(SslMode::VerifyCa, &copy_for_postgres(&p.main.ca, &dir))
    };
    tenure::pg::tls::check(&replica.settings).expect("the replication key is libpq's to open");
    let nobody = StandbyConfig {
        upstream: None,
        slot: None,
        remote: None,
    };
    ctl::basebackup(&replica.settings, &primary.endpoint(), &nobody)
        .await
        .unwrap_or_else(|e| panic!("basebackup: {e}"));
    let service = replica.settings.pgpass_path.with_extension("service");
    assert_eq!(
        std::fs::read_to_string(&service).unwrap(),
        format!("[tenure]\nsslpassword={KEY_PASSPHRASE}\n")
    );
    let mode = std::fs::metadata(&service).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let mut su = replica.settings.clone();
    su.superuser.ssl = su.replication.ssl.clone();
    let e = tenure::pg::tls::check(&su).unwrap_err();
    assert!(
        e.starts_with("postgresql.authentication.superuser.sslkey") && e.contains("encrypted"),
        "{e}"
    );
}
