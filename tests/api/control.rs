//! Control endpoints: credentials first, then bounded strict bodies, then the agent's answer or refusal.
use reqwest::Method;
use tenure::api::{ControlError, RestApiSettings};

use super::harness::*;

#[tokio::test]
async fn control_requires_credentials() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let pause = r#"{"pause": true}"#;
    let cases = [
        (Method::PATCH, "/config", pause),
        (Method::POST, "/switchover", r#"{"leader":"pg1"}"#),
        (Method::DELETE, "/switchover", ""),
        (Method::POST, "/failover", r#"{"candidate":"pg2"}"#),
        (Method::POST, "/restart", ""),
        (Method::POST, "/reinitialize", ""),
        (Method::POST, "/reload", ""),
    ];
    for (m, path, body) in &cases {
        let calls_before = api.control.calls().len();
        let r = api
            .http
            .request(m.clone(), format!("{}{path}", api.base))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{m} {path}");
        assert_eq!(
            r.headers()["www-authenticate"],
            "Basic realm=\"Patroni\"",
            "{m} {path}"
        );
        assert_eq!(r.text().await.unwrap(), "no auth header received");
        // Patroni and RFC 7235: a wrong credential is 401 with the challenge too (403 is for allow-lists).
        for wrong in [
            Auth::Basic("admin", "nope"),
            Auth::Basic("root", "s3cret"),
            Auth::Bearer("t0k3n"),
        ] {
            let r = api.request(m.clone(), path, wrong, body).await;
            assert_eq!(r.status(), 401, "{m} {path}");
            assert_eq!(
                r.headers()["www-authenticate"],
                "Basic realm=\"Patroni\"",
                "{m} {path}"
            );
            assert_eq!(r.text().await.unwrap(), "not authenticated");
        }
        assert_eq!(
            api.control.calls().len(),
            calls_before,
            "refused requests reach the agent: {:?}",
            api.control.calls()
        );
        // A success resets this client's failure count (the limiter: `abuse.rs`).
        let (status, text) = api.send(m.clone(), path, ADMIN, body).await;
        assert!(status.is_success(), "{m} {path}: {status} {text}");
    }
    let (status, text) = api
        .send(Method::PATCH, "/config", Auth::Bearer("t0ken"), pause)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["pause"],
        true
    );
    assert_eq!(api.control.calls().len(), cases.len() + 1);
    assert_eq!(api.control.calls()[0], r#"patch_config {"pause":true}"#);
    api.shutdown().await;
}

#[tokio::test]
async fn control_without_configured_credentials_is_closed_unless_explicitly_open() {
    let closed = RestApiSettings::new("127.0.0.1:0".parse().unwrap());
    let api = Api::start(closed.clone(), primary(NOW + 10_000)).await;
    let (status, text) = api
        .send(Method::POST, "/reload", Auth::Bearer("x"), "")
        .await;
    assert_eq!(status, 403);
    assert!(text.contains("no credentials are configured"), "{text}");
    assert_eq!(api.get("/primary").await, 200, "health stays available");
    api.shutdown().await;

    let mut open = closed;
    open.allow_unauthenticated = true;
    let api = Api::start(open, primary(NOW + 10_000)).await;
    let (status, text) = api.send(Method::POST, "/reload", Auth::None, "").await;
    assert_eq!((status.as_u16(), text.as_str()), (202, "reload scheduled"));
    api.shutdown().await;
}

#[tokio::test]
async fn bad_bodies_are_refused_with_a_message() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let cases: [(Method, &str, String, u16, &str); 9] = [
        (
            Method::PATCH,
            "/config",
            "{not json".into(),
            400,
            "invalid JSON",
        ),
        (
            Method::PATCH,
            "/config",
            "".into(),
            400,
            "empty request body",
        ),
        (Method::PATCH, "/config", "[1,2]".into(), 400, "JSON object"),
        (
            Method::POST,
            "/switchover",
            r#"{"leader":"pg1","when":"now"}"#.into(),
            400,
            "unknown field `when`",
        ),
        (
            Method::POST,
            "/switchover",
            r#"{"candidate":"pg2"}"#.into(),
            400,
            "specific leader",
        ),
        (
            Method::POST,
            "/switchover",
            r#"{"leader":"pg1","scheduled_at":"2030-01-01T10:00"}"#.into(),
            400,
            "Timezone information is mandatory",
        ),
        (
            Method::POST,
            "/failover",
            r#"{"leader":null}"#.into(),
            400,
            "specific candidate",
        ),
        (
            Method::POST,
            "/reinitialize",
            r#"{"force":true,"from-leader":true}"#.into(),
            400,
            "unknown field",
        ),
        (
            Method::PATCH,
            "/config",
            format!(r#"{{"pad":"{}"}}"#, "x".repeat(70 * 1024)),
            413,
            "larger than",
        ),
    ];
    for (m, path, body, code, message) in &cases {
        let (status, text) = api.send(m.clone(), path, ADMIN, body).await;
        assert_eq!(status.as_u16(), *code, "{m} {path} {text}");
        assert!(
            text.contains(message),
            "{m} {path}: {text:?} lacks {message:?}"
        );
    }
    assert!(api.control.calls().is_empty(), "{:?}", api.control.calls());
    api.shutdown().await;
}

#[tokio::test]
async fn oversized_chunked_bodies_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let addr = api.base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = "PATCH /config HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0ken\r\n\
                Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("400\r\n{}\r\n", " ".repeat(1024));
    for _ in 0..80 {
        if s.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    api.shutdown().await;
}

#[tokio::test]
async fn refusals_carry_the_agents_status_and_requests_reach_it_parsed() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let (status, text) = api
        .send(
            Method::POST,
            "/switchover",
            ADMIN,
            r#"{"leader":"pg1","candidate":"pg2","scheduled_at":"2030-01-01T00:00:00Z"}"#,
        )
        .await;
    assert_eq!(
        (status.as_u16(), text.as_str()),
        (202, "Switchover scheduled")
    );
    let (status, _) = api
        .send(
            Method::POST,
            "/failover",
            ADMIN,
            r#"{"leader":"pg1","candidate":"pg2"}"#,
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = api
        .send(
            Method::POST,
            "/restart",
            ADMIN,
            r#"{"role":"replica","timeout":"30s"}"#,
        )
        .await;
    assert_eq!(status, 200);
    let calls = api.control.calls();
    assert!(
        calls[0].contains("scheduled_at_ms: Some(1893456000000)"),
        "{calls:?}"
    );
    assert!(
        calls[1].starts_with("switchover "),
        "a failover naming a leader is a switchover: {calls:?}"
    );
    assert!(
        calls[2].contains("role: Some(Replica)") && calls[2].contains("timeout_s: Some(30)"),
        "{calls:?}"
    );
    *api.control.refusal.lock().unwrap() =
        Some(ControlError::new(412, "candidate does not exists"));
    let (status, text) = api
        .send(Method::POST, "/failover", ADMIN, r#"{"candidate":"pg9"}"#)
        .await;
    assert_eq!(
        (status.as_u16(), text.as_str()),
        (412, "candidate does not exists")
    );
    *api.control.refusal.lock().unwrap() = Some(ControlError::new(
        503,
        "I am the leader, can not reinitialize",
    ));
    let (status, text) = api.send(Method::POST, "/reinitialize", ADMIN, "").await;
    assert_eq!(
        (status.as_u16(), text.as_str()),
        (503, "I am the leader, can not reinitialize")
    );
    api.shutdown().await;
}
