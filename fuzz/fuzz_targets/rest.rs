//! REST request input: the bodies of `PATCH`/`PUT /config`, `POST /switchover`, `/failover`, `/restart`,
//! `/reinitialize`, `/failsafe`, bodyless endpoints, health query strings and the `Authorization` header,
//! each through the function `src/api` calls.
//!
//! Input: one byte choosing the endpoint, then the body (or query string, or header value).
#![no_main]
use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use tenure::agent::control::merge_patch;
use tenure::api::failsafe::{self, FailsafeCell};
use tenure::api::health::{healthy, Check, HealthQuery};
use tenure::api::requests::{self, FailoverOrSwitchover};
use tenure::api::{parse_lag, parse_query, Auth, Published, RestApiSettings};
use tenure::ha::{FailsafeAnswer, Millis};

#[path = "common.rs"]
mod common;

const CHECKS: [Check; 6] = [
    Check::Primary,
    Check::Replica,
    Check::ReadOnly,
    Check::Running,
    Check::Liveness,
    Check::Readiness,
];

fuzz_target!(|data: &[u8]| {
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    match which % 11 {
        0 => patch_config(input),
        1 => {
            if let Ok(v) = requests::config_patch(input) {
                let _ = common::config()
                    .check_dynamic(&v)
                    .map_err(|e| e.to_string());
            }
        }
        2 => match requests::switchover(input) {
            Ok(r) => {
                assert_ne!(r.candidate.as_ref(), Some(&r.leader), "{r:?}");
                assert_eq!(
                    r.scheduled_at.is_some(),
                    r.scheduled_at_ms.is_some(),
                    "{r:?}"
                );
            }
            Err(e) => assert!(matches!(e.status, 400 | 422), "{e}"),
        },
        3 => match requests::failover(input) {
            Ok(FailoverOrSwitchover::Switchover(r)) => {
                assert_ne!(r.candidate.as_ref(), Some(&r.leader), "{r:?}");
                assert!(r.candidate.is_some() && r.scheduled_at.is_none(), "{r:?}");
            }
            Ok(FailoverOrSwitchover::Failover(_)) => {}
            Err(e) => assert!(matches!(e.status, 400 | 422), "{e}"),
        },
        4 => match requests::restart(input) {
            Ok(r) => {
                let max_s = tenure::config::defaults::MAX_DURATION_S;
                assert!(
                    r.timeout_s.is_none_or(|t| (1..=max_s).contains(&t)),
                    "{r:?}"
                );
                assert_eq!(r.schedule.is_some(), r.schedule_ms.is_some(), "{r:?}");
            }
            Err(e) => assert!(matches!(e.status, 400 | 422), "{e}"),
        },
        5 => {
            let _ = requests::reinitialize(input);
        }
        6 => failsafe_post(input),
        7 => {
            let _ = requests::no_body(input);
        }
        8 => health_query(input),
        9 => authorization(input),
        _ => {
            if let Ok(v) = std::str::from_utf8(input) {
                let _ = requests::version_num(v);
            }
        }
    }
});

/// `PATCH /config`: the patch merged over the store's value, then the agents' check. RFC 7386 merge
/// patches are idempotent: applying one twice changes nothing more.
fn patch_config(body: &[u8]) {
    let Ok(patch) = requests::config_patch(body) else {
        return;
    };
    let mut value = json!({
        "ttl": 30, "loop_wait": 5, "retry_timeout": 5, "maximum_lag_on_failover": 1048576,
        "postgresql": {"use_pg_rewind": true, "parameters": {"max_connections": 100}},
    });
    merge_patch(&mut value, &patch);
    let once = value.clone();
    merge_patch(&mut value, &patch);
    assert_eq!(once, value, "a merge patch applied twice differs from once");
    let _ = common::config()
        .check_dynamic(&value)
        .map_err(|e| e.to_string());
}

/// `POST /failsafe` on a replica that accepts: a grant is recorded exactly when the answer is 200.
fn failsafe_post(body: &[u8]) {
    let cell = Arc::new(Mutex::new(FailsafeCell {
        answer: FailsafeAnswer::Accept,
        grant: None,
    }));
    let (code, _) = failsafe::post(&cell, Millis(1), body);
    let granted = cell.lock().expect("not poisoned").grant.is_some();
    assert_eq!(code == 200, granted, "code {code}");
}

/// A health query string, decoded and parsed as the router does, then every check answered.
fn health_query(input: &[u8]) {
    let Ok(query) = std::str::from_utf8(input) else {
        return;
    };
    let pairs = parse_query(query);
    let Ok(q) = HealthQuery::parse(&pairs) else {
        return;
    };
    if let Some(bytes) = q.max_lag_bytes {
        assert_eq!(
            parse_lag(&bytes.to_string()),
            Ok(bytes),
            "lag {bytes} does not read back"
        );
    }
    let p = Published::starting("main", "pg1", Millis(0), 30_000);
    for check in CHECKS {
        let _ = healthy(check, &q, &p, Millis(1));
    }
}

/// The `Authorization` header of a control request: only the configured credentials pass.
fn authorization(header: &[u8]) {
    static AUTH: std::sync::OnceLock<Auth> = std::sync::OnceLock::new();
    let auth = AUTH.get_or_init(|| {
        let mut s = RestApiSettings::new("127.0.0.1:8008".parse().expect("an address"));
        s.username = Some("admin".into());
        s.password = Some("secret".into());
        s.token = Some("t0ken".into());
        Auth::from_settings(&s)
    });
    if auth.check(Some(header)).is_ok() {
        let text = std::str::from_utf8(header)
            .expect("only UTF-8 passes")
            .trim();
        let (scheme, value) = text.split_once(' ').expect("a scheme and a value");
        let value = value.trim();
        match scheme.to_ascii_lowercase().as_str() {
            // Base64 of `admin:secret` has one canonical form; padding-free or other forms must not pass.
            "basic" => assert_eq!(value, "YWRtaW46c2VjcmV0", "{text:?}"),
            "bearer" => assert_eq!(value, "t0ken", "{text:?}"),
            other => panic!("scheme {other:?} passed"),
        }
    }
}
