//! The agent's own control (`StoreControl`) behind the REST API: `POST /restart` and `/reinitialize` go to
//! the runtime loop and come back with the core's answer and the actions' outcomes; `POST /reload` wakes it.
use std::sync::Arc;

use tenure::agent::control::{request_result, PendingRequest, StoreControl};
use tenure::api::{self, ApiState};
use tenure::ha::{
    Action, ActionOutcome, Job, Millis, NodeName, OperatorRequest, Outcome, PgRole, Refusal,
    RequestAnswer, RestartFilter, StopMode,
};
use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::harness::*;

/// The API over a real `StoreControl`; the test plays the runtime loop on the other end of `requests`.
pub(super) struct AgentApi {
    pub(super) base: String,
    pub(super) http: reqwest::Client,
    requests: mpsc::Receiver<PendingRequest>,
    reload: Arc<Notify>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

async fn start() -> AgentApi {
    start_with(primary(NOW + 10_000)).await
}

pub(super) async fn start_with(published: tenure::api::Published) -> AgentApi {
    // Never contacted by these requests: they go to the loop, not to the store.
    let dcs = consul_dcs("http://127.0.0.1:9", "pg1", TTL_MS);
    start_on(published, Arc::new(dcs)).await
}

pub(super) async fn start_on(
    published: tenure::api::Published,
    dcs: Arc<dyn tenure::dcs::Dcs>,
) -> AgentApi {
    let (_tx, rx) = watch::channel(published);
    let (request_tx, requests) = mpsc::channel(1);
    let reload = Arc::new(Notify::new());
    let control = Arc::new(StoreControl {
        dcs,
        published: rx.clone(),
        timeout_ms: 1_000,
        requests: request_tx,
        reload: reload.clone(),
        wake: Arc::new(Notify::new()),
        check_config: tenure::agent::control::accept_any_config(),
    });
    let state = ApiState {
        published: rx,
        clock: Arc::new(|| Millis(NOW)),
        control,
        failsafe: Default::default(),
        mirror: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (addr, task) = api::serve(settings(), state, listener, async {
        let _ = stopped.await;
    })
    .await
    .expect("serve");
    AgentApi {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        requests,
        reload,
        stop,
        task,
    }
}

impl AgentApi {
    pub(super) fn post(&self, path: &str, body: &str, auth: bool) -> reqwest::RequestBuilder {
        let rq = self
            .http
            .post(format!("{}{path}", self.base))
            .body(body.to_string());
        if auth {
            rq.basic_auth("admin", Some("s3cret"))
        } else {
            rq
        }
    }

    /// Send `path`, answer it as the loop would (`answer`, `outcomes`), and return what the caller got.
    async fn round_trip(
        &mut self,
        path: &str,
        body: &str,
        expect: OperatorRequest,
        answer: RequestAnswer,
        outcomes: Vec<ActionOutcome>,
    ) -> (u16, String) {
        let send = self.post(path, body, true).send();
        let serve = async {
            let p = self
                .requests
                .recv()
                .await
                .expect("a request reaches the loop");
            assert_eq!(p.request, expect);
            let _ = p
                .reply
                .send(request_result(&p.request, Some(&answer), &outcomes));
        };
        let (r, ()) = tokio::join!(send, serve);
        let r = r.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    pub(super) async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

fn done(action: Action) -> ActionOutcome {
    ActionOutcome {
        action,
        sent_at: Millis(NOW),
        result: Outcome::Done,
    }
}

#[tokio::test]
async fn restart_answers_200_once_postgres_is_back_and_503_when_it_is_not() {
    let mut api = start().await;
    let stop = Action::Stop {
        mode: StopMode::Fast,
    };
    let ok = vec![done(stop.clone()), done(Action::StartPrimary)];
    let restart = OperatorRequest::Restart {
        at_wall_ms: None,
        filter: RestartFilter::default(),
    };
    let got = api
        .round_trip("/restart", "", restart.clone(), RequestAnswer::Accepted, ok)
        .await;
    assert_eq!(got, (200, "restarted successfully".into()));

    let failed = vec![
        done(stop),
        ActionOutcome {
            action: Action::StartPrimary,
            sent_at: Millis(NOW),
            result: Outcome::Failed("pg_ctl start failed".into()),
        },
    ];
    let (status, text) = api
        .round_trip("/restart", "{}", restart, RequestAnswer::Accepted, failed)
        .await;
    assert_eq!(status, 503);
    assert!(text.starts_with("restart failed"), "{text}");
    assert!(text.contains("pg_ctl start failed"), "{text}");

    let mismatch = Refusal::RestartConditions {
        why: "the role filter does not match".into(),
    };
    let (status, text) = api
        .round_trip(
            "/restart",
            r#"{"role":"replica"}"#,
            OperatorRequest::Restart {
                at_wall_ms: None,
                filter: RestartFilter {
                    role: Some(PgRole::Replica),
                    pending_only: false,
                    below_version: None,
                },
            },
            RequestAnswer::Refused(mismatch),
            vec![],
        )
        .await;
    assert_eq!(status, 503);
    assert!(
        text.starts_with("restart conditions are not satisfied"),
        "{text}"
    );

    // `restart_pending` reaches the core as its filter; the core's refusal is relayed.
    let nothing_pending = Refusal::RestartConditions {
        why: "no restart is pending".into(),
    };
    let (status, text) = api
        .round_trip(
            "/restart",
            r#"{"restart_pending":true}"#,
            OperatorRequest::Restart {
                at_wall_ms: None,
                filter: RestartFilter {
                    role: None,
                    pending_only: true,
                    below_version: None,
                },
            },
            RequestAnswer::Refused(nothing_pending),
            vec![],
        )
        .await;
    assert_eq!(status, 503);
    assert!(text.contains("no restart is pending"), "{text}");

    // `postgres_version` reaches the core as `server_version_num`, read as Patroni reads it.
    for (given, num) in [("15.4", 150_004), ("9.6.3", 90_603), ("16.10", 160_010)] {
        let why = Refusal::RestartConditions {
            why: "the running version is not below postgres_version".into(),
        };
        let (status, _) = api
            .round_trip(
                "/restart",
                &format!(r#"{{"postgres_version":"{given}"}}"#),
                OperatorRequest::Restart {
                    at_wall_ms: None,
                    filter: RestartFilter {
                        below_version: Some(num),
                        ..RestartFilter::default()
                    },
                },
                RequestAnswer::Refused(why),
                vec![],
            )
            .await;
        assert_eq!(status, 503, "{given}");
    }
    api.shutdown().await;
}

#[tokio::test]
async fn scheduled_restart_answers_202_409_500_422_with_patronis_texts() {
    let mut api = start().await;
    let body = r#"{"schedule":"2030-01-01T01:00:00+01:00","role":"replica"}"#;
    let request = OperatorRequest::Restart {
        at_wall_ms: Some(1_893_456_000_000),
        filter: RestartFilter {
            role: Some(PgRole::Replica),
            pending_only: false,
            below_version: None,
        },
    };
    let cases = [
        (RequestAnswer::Accepted, 202, "Restart scheduled"),
        (
            RequestAnswer::Refused(Refusal::RestartAlreadyScheduled),
            409,
            "Another restart is already scheduled",
        ),
        (
            RequestAnswer::Refused(Refusal::ScheduleInPause),
            500,
            "Can't schedule restart in the paused state",
        ),
        (
            RequestAnswer::Refused(Refusal::ScheduleInPast),
            422,
            "Cannot schedule restart in the past",
        ),
    ];
    for (answer, code, text) in cases {
        let got = api
            .round_trip("/restart", body, request.clone(), answer, vec![])
            .await;
        assert_eq!(got, (code, text.to_string()));
    }
    api.shutdown().await;
}

#[tokio::test]
async fn delete_restart_answers_200_when_one_was_scheduled_and_404_otherwise() {
    let mut api = start().await;
    for (answer, code, text) in [
        (RequestAnswer::Accepted, 200, "scheduled restart deleted"),
        (
            RequestAnswer::Refused(Refusal::NoRestartScheduled),
            404,
            "no restarts are scheduled",
        ),
    ] {
        let send = api
            .http
            .delete(format!("{}/restart", api.base))
            .basic_auth("admin", Some("s3cret"))
            .send();
        let serve = async {
            let p = api.requests.recv().await.expect("reaches the loop");
            assert_eq!(p.request, OperatorRequest::CancelRestart);
            let _ = p.reply.send(request_result(&p.request, Some(&answer), &[]));
        };
        let (r, ()) = tokio::join!(send, serve);
        let r = r.unwrap();
        assert_eq!(
            (r.status().as_u16(), r.text().await.unwrap()),
            (code, text.into())
        );
    }
    api.shutdown().await;
}

#[tokio::test]
async fn reinitialize_answers_200_when_the_job_started_and_503_with_patronis_reasons() {
    let mut api = start().await;
    let reinit = OperatorRequest::Reinitialize { force: false };
    let started = vec![
        done(Action::Stop {
            mode: StopMode::Immediate,
        }),
        done(Action::StartJob(Job::Reinit {
            from: NodeName::new("pg1"),
        })),
    ];
    let got = api
        .round_trip(
            "/reinitialize",
            "",
            reinit.clone(),
            RequestAnswer::Accepted,
            started,
        )
        .await;
    assert_eq!(got, (200, "reinitialize started".into()));
    for why in [Refusal::IAmTheLeader, Refusal::NoLeader] {
        let got = api
            .round_trip(
                "/reinitialize",
                r#"{"force":false}"#,
                reinit.clone(),
                RequestAnswer::Refused(why.clone()),
                vec![],
            )
            .await;
        assert_eq!(got, (503, why.to_string()));
    }
    let got = api
        .round_trip(
            "/reinitialize",
            r#"{"force":true,"from_leader":true}"#,
            OperatorRequest::Reinitialize { force: true },
            RequestAnswer::Refused(Refusal::JobRunning {
                job: Job::Clone {
                    from: NodeName::new("pg1"),
                },
            }),
            vec![],
        )
        .await;
    assert_eq!(got, (503, "clone from pg1 already in progress".into()));
    api.shutdown().await;
}

#[tokio::test]
async fn bad_restart_options_are_refused_before_reaching_the_loop() {
    let mut api = start().await;
    let cases = [
        (
            r#"{"schedule":"2030-01-01T00:00:00"}"#,
            400,
            "Timezone information is mandatory for the scheduled restart",
        ),
        (
            r#"{"schedule":"tomorrow at noon"}"#,
            422,
            "Unable to parse scheduled timestamp",
        ),
        (r#"{"postgres_version":"16"}"#, 400, "X.Y or X.Y.Z"),
        (r#"{"postgres_version":"9.6"}"#, 400, "X.Y or X.Y.Z"),
        (r#"{"postgres_version":"15.x"}"#, 400, "X.Y or X.Y.Z"),
        (r#"{"role":"leader"}"#, 400, "primary or replica"),
    ];
    for (body, code, text) in cases {
        let r = api.post("/restart", body, true).send().await.unwrap();
        let status = r.status().as_u16();
        let got = r.text().await.unwrap();
        assert_eq!(status, code, "{body}: {got}");
        assert!(got.contains(text), "{body}: {got}");
    }
    assert!(api.requests.try_recv().is_err(), "nothing reached the loop");
    api.shutdown().await;
}

#[tokio::test]
async fn the_agents_control_endpoints_need_credentials() {
    let mut api = start().await;
    for path in ["/restart", "/reinitialize", "/reload"] {
        let r = api.post(path, "", false).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    let scheduled = api.post("/restart", r#"{"schedule":"2030-01-01T00:00:00Z"}"#, false);
    assert_eq!(scheduled.send().await.unwrap().status(), 401);
    let cancel = api.http.delete(format!("{}/restart", api.base));
    assert_eq!(cancel.send().await.unwrap().status(), 401);
    assert!(api.requests.try_recv().is_err(), "nothing reached the loop");
    api.shutdown().await;
}

#[tokio::test]
async fn reload_answers_202_and_wakes_the_loop() {
    let api = start().await;
    let r = api.post("/reload", "", true).send().await.unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.text().await.unwrap(), "reload scheduled");
    tokio::time::timeout(std::time::Duration::from_secs(1), api.reload.notified())
        .await
        .expect("the loop is told to reload");
    api.shutdown().await;
}

#[tokio::test]
async fn a_request_the_loop_never_answers_times_out_with_503() {
    let api = start().await;
    let r = api
        .post("/restart", r#"{"timeout":1}"#, true)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let text = r.text().await.unwrap();
    assert!(text.contains("status unknown after 1 seconds"), "{text}");
    api.shutdown().await;
}
