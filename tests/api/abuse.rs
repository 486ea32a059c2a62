//! Issue 13 items 7 and 8: repeated wrong credentials are logged with the client and limited; numbers in
//! request bodies are bounded.
use std::io::Write;
use std::sync::{Arc, Mutex};

use reqwest::Method;
use tenure::api;

use super::harness::*;

/// The log lines written while the guard lives (this thread's subscriber: the API runs on it too).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn repeated_wrong_credentials_are_logged_and_limited_per_client() {
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let wrong = Auth::Basic("admin", "guess");
    for i in 0..api::MAX_AUTH_FAILURES {
        let (status, _) = api.send(Method::POST, "/reload", wrong, "").await;
        assert_eq!(status, 401, "attempt {i}");
    }
    let r = api.request(Method::POST, "/reload", wrong, "").await;
    assert_eq!(r.status(), 429, "over the limit");
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=api::AUTH_FAILURE_WINDOW_MS / 1000).contains(&retry),
        "{retry}"
    );
    // Limited means limited: the right password does not get through from that client until the window ends.
    let (status, _) = api.send(Method::POST, "/reload", ADMIN, "").await;
    assert_eq!(status, 429);
    assert!(api.control.calls().is_empty(), "{:?}", api.control.calls());
    let text = log.text();
    assert!(
        text.contains("refused a control request") && text.contains("client=127.0.0.1"),
        "{text}"
    );
    // The window ends (the API's clock is the harness's): the right password works again.
    api.now.fetch_add(
        api::AUTH_FAILURE_WINDOW_MS,
        std::sync::atomic::Ordering::SeqCst,
    );
    let (status, text) = api.send(Method::POST, "/reload", ADMIN, "").await;
    assert!(status.is_success(), "{status} {text}");
    api.shutdown().await;
}

#[tokio::test]
async fn restart_timeout_is_bounded() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    for body in [
        r#"{"timeout": 604801}"#,
        r#"{"timeout": "18446744073709551615"}"#,
        r#"{"timeout": 1e300}"#,
        r#"{"timeout": 0}"#,
    ] {
        let (status, text) = api.send(Method::POST, "/restart", ADMIN, body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(
            text.contains("imeout") && text.contains("604800"),
            "{body}: {text}"
        );
    }
    let (status, text) = api
        .send(Method::POST, "/restart", ADMIN, r#"{"timeout": 604800}"#)
        .await;
    assert!(status.is_success(), "{status} {text}");
    api.shutdown().await;
}

/// A body past the cap is refused with 413 before it is read whole, announced or chunked.
#[tokio::test]
async fn a_config_body_past_the_cap_is_413() {
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let big = format!(
        r#"{{"pause": true, "x": "{}"}}"#,
        "a".repeat(api::MAX_BODY_BYTES)
    );
    let (status, _) = api.send(Method::PATCH, "/config", ADMIN, &big).await;
    assert_eq!(status, 413);
    assert!(api.control.calls().is_empty());
    api.shutdown().await;
}

/// A flood of refused requests writes a few lines, then one line counting the rest (issue 29 item 11).
#[tokio::test]
async fn a_flood_of_refusals_is_logged_a_few_lines_at_a_time() {
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let api = Api::start(settings(), primary(NOW + 10_000)).await;
    let wrong = Auth::Basic("admin", "guess");
    for _ in 0..200 {
        let (status, _) = api.send(Method::POST, "/reload", wrong, "").await;
        assert!(status == 401 || status == 429, "{status}");
    }
    let lines = |t: &str| t.matches("refused a control request").count();
    let flood = lines(&log.text());
    assert!((1..=20).contains(&flood), "{flood} lines for 200 refusals");
    // The interval passes: the next refusal is logged, with how many were left out.
    api.now.fetch_add(
        2 * api::AUTH_FAILURE_WINDOW_MS,
        std::sync::atomic::Ordering::SeqCst,
    );
    let (status, _) = api.send(Method::POST, "/reload", wrong, "").await;
    assert_eq!(status, 401);
    let text = log.text();
    assert_eq!(lines(&text), flood + 1, "{text}");
    assert!(text.contains("suppressed"), "{text}");
    api.shutdown().await;
}
