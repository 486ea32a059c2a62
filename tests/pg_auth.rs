//! The agent's own SQL connections never send a password in cleartext or MD5 to a server whose identity
//! was not verified (issue 29 item 1): a fake server where the probe connects asks for one and records
//! what the agent sends.
#[path = "support/pg.rs"]
mod pg_support;

use std::time::Duration;

use pg_support::PgNode;
use tenure::pg::tls::SslMode;
use tenure::pg::{probe, PgError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// PostgreSQL's SSLRequest code.
const SSL_REQUEST: i32 = 80877103;

/// A one-connection fake server on `listener`: declines TLS, reads the startup message, asks for a
/// password with `code` (3 cleartext, 5 MD5) and returns everything the client sent after that.
async fn fake_server(listener: tokio::net::TcpListener, code: i32) -> Vec<u8> {
    let (mut conn, _) = listener.accept().await.unwrap();
    loop {
        let len = conn.read_i32().await.unwrap();
        let mut body = vec![0; len as usize - 4];
        conn.read_exact(&mut body).await.unwrap();
        if len == 8 && i32::from_be_bytes(body[..4].try_into().unwrap()) == SSL_REQUEST {
            conn.write_all(b"N").await.unwrap();
            continue;
        }
        break; // the startup message
    }
    let mut request = vec![b'R'];
    let body_len = if code == 5 { 12 } else { 8 };
    request.extend_from_slice(&i32::to_be_bytes(body_len));
    request.extend_from_slice(&code.to_be_bytes());
    if code == 5 {
        request.extend_from_slice(b"salt");
    }
    conn.write_all(&request).await.unwrap();
    let mut sent = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_to_end(&mut sent)).await;
    sent
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The local probe over loopback (`use_unix_socket: false`), TLS preferred or off: a server on its port
/// asking for a cleartext or an MD5 password gets neither (the MD5 answer would be `md5` and 32 hex
/// digits), and the error names the server. Seen failing before the fix: the password arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_probe_sends_no_cleartext_or_md5_password_to_an_unverified_server() {
    let node = PgNode::new("auth-a");
    for (code, method) in [(3, "cleartext"), (5, "MD5")] {
        for mode in [None, Some(SslMode::Disable)] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let server = tokio::spawn(fake_server(listener, code));
            let mut settings = node.settings.clone();
            settings.use_unix_socket = false;
            settings.listen_port = port;
            settings.superuser.ssl.mode = mode;
            let password = settings.superuser.password.clone();
            let result = probe::connect_local(&settings).await;
            let sent = server.await.unwrap();
            assert!(
                !contains(&sent, password.as_bytes()) && !contains(&sent, b"md5"),
                "{method}, sslmode {mode:?}: the agent answered: {:?}",
                String::from_utf8_lossy(&sent)
            );
            match result {
                Err(e @ PgError::PasswordRefused { .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.contains(&format!("127.0.0.1:{port}")) && text.contains(method),
                        "{text}"
                    );
                }
                Err(e) => panic!("{method}, sslmode {mode:?}: another error: {e}"),
                Ok(_) => panic!("{method}, sslmode {mode:?}: connected"),
            }
        }
    }
}

/// The peer probe's and the rewind source's path (`probe::connect` to another member, TLS settings as
/// configured): the same refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_to_another_member_sends_no_cleartext_password() {
    let node = PgNode::new("auth-b");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(fake_server(listener, 3));
    let creds = node.settings.rewind.clone();
    let result = probe::connect("127.0.0.1", port, &creds, "postgres").await;
    let sent = server.await.unwrap();
    assert!(
        !contains(&sent, creds.password.as_bytes()),
        "the agent answered: {:?}",
        String::from_utf8_lossy(&sent)
    );
    let Err(e) = result else { panic!("connected") };
    let e = e.to_string();
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
}

/// The default: the agent reaches its own PostgreSQL through the Unix socket in `unix_socket_directories`
/// (scram-sha-256 there, as tenure's pg_hba says), and probes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_probe_goes_through_the_unix_socket() {
    let node = PgNode::new("auth-c");
    tenure::pg::ctl::bootstrap(&node.settings, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
    assert!(node.settings.use_unix_socket);
    let client = probe::connect_local(&node.settings).await.expect("connect");
    let row = client
        .query_one(
            "SELECT inet_server_addr() IS NULL, current_setting('unix_socket_directories')",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "not a Unix socket connection");
    assert_eq!(
        row.get::<_, String>(1),
        node.settings.socket_dir().display().to_string()
    );
}
