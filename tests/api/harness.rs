//! The test harness: `serve` on 127.0.0.1:0 with a status we publish, a clock we move, a recording control.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use reqwest::{Method, StatusCode};
use tenure::api::{
    self, Accepted, ApiState, Control, ControlError, FailoverRequest, Published,
    ReinitializeRequest, RestApiSettings, RestartRequest, SwitchoverRequest,
};
use tenure::dcs::{ClusterSnapshot, MemberRecord, SwitchoverRecord};
use tenure::ha::{LeaderKey, Lsn, Millis, NodeName, NodeRole, Timeline};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

pub const NOW: u64 = 1_000_000;
pub const TTL_MS: u64 = 30_000;

/// Records every call; answers with `refusal` when set.
#[derive(Default)]
pub struct FakeControl {
    pub calls: Mutex<Vec<String>>,
    pub refusal: Mutex<Option<ControlError>>,
}

impl FakeControl {
    fn answer(&self, call: String, ok: Accepted) -> Result<Accepted, ControlError> {
        self.calls.lock().unwrap().push(call);
        match self.refusal.lock().unwrap().clone() {
            Some(e) => Err(e),
            None => Ok(ok),
        }
    }
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Control for FakeControl {
    async fn patch_config(
        &self,
        merge: serde_json::Value,
    ) -> Result<serde_json::Value, ControlError> {
        self.answer(format!("patch_config {merge}"), Accepted::done(""))?;
        Ok(serde_json::json!({"ttl": 30, "pause": merge["pause"]}))
    }
    async fn switchover(&self, req: SwitchoverRequest) -> Result<Accepted, ControlError> {
        let scheduled = req.scheduled_at_ms.is_some();
        let ok = if scheduled {
            Accepted::scheduled("Switchover scheduled")
        } else {
            Accepted::done("Successfully switched over")
        };
        self.answer(format!("switchover {req:?}"), ok)
    }
    async fn cancel_switchover(&self) -> Result<Accepted, ControlError> {
        self.answer(
            "cancel_switchover".into(),
            Accepted::done("scheduled switchover deleted"),
        )
    }
    async fn failover(&self, req: FailoverRequest) -> Result<Accepted, ControlError> {
        self.answer(
            format!("failover {req:?}"),
            Accepted::done("Successfully failed over"),
        )
    }
    async fn restart(&self, req: RestartRequest) -> Result<Accepted, ControlError> {
        let ok = if req.schedule_ms.is_some() {
            Accepted::scheduled("Restart scheduled")
        } else {
            Accepted::done("restarted successfully")
        };
        self.answer(format!("restart {req:?}"), ok)
    }
    async fn cancel_restart(&self) -> Result<Accepted, ControlError> {
        self.answer(
            "cancel_restart".into(),
            Accepted::done("scheduled restart deleted"),
        )
    }
    async fn reinitialize(&self, req: ReinitializeRequest) -> Result<Accepted, ControlError> {
        self.answer(
            format!("reinitialize {req:?}"),
            Accepted::done("reinitialize started"),
        )
    }
    async fn reload(&self) -> Result<Accepted, ControlError> {
        self.answer("reload".into(), Accepted::scheduled("reload scheduled"))
    }
}

/// One running API.
pub struct Api {
    pub base: String,
    pub published: watch::Sender<Published>,
    pub now: Arc<AtomicU64>,
    pub control: Arc<FakeControl>,
    pub failsafe: tenure::api::failsafe::SharedFailsafe,
    pub http: reqwest::Client,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<()>>,
}

pub fn settings() -> RestApiSettings {
    let mut s = RestApiSettings::new("127.0.0.1:0".parse().unwrap());
    s.username = Some("admin".into());
    s.password = Some("s3cret".into());
    s.token = Some("t0ken".into());
    s
}

impl Api {
    pub async fn start(settings: RestApiSettings, p: Published) -> Api {
        Api::start_with(settings, p, "http", reqwest::Client::new()).await
    }

    pub async fn start_with(
        settings: RestApiSettings,
        p: Published,
        scheme: &str,
        http: reqwest::Client,
    ) -> Api {
        let (tx, rx) = watch::channel(p);
        let now = Arc::new(AtomicU64::new(NOW));
        let clock_now = now.clone();
        let control = Arc::new(FakeControl::default());
        let failsafe = tenure::api::failsafe::SharedFailsafe::default();
        let state = ApiState {
            published: rx,
            clock: Arc::new(move || Millis(clock_now.load(Ordering::SeqCst))),
            control: control.clone(),
            failsafe: failsafe.clone(),
            mirror: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let (addr, task) = api::serve(settings, state, listener, async {
            let _ = stopped.await;
        })
        .await
        .expect("serve");
        Api {
            base: format!("{scheme}://{addr}"),
            published: tx,
            now,
            control,
            failsafe,
            http,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub async fn code(&self, method: Method, path: &str) -> (StatusCode, String) {
        let r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    }

    pub async fn get(&self, path: &str) -> StatusCode {
        self.code(Method::GET, path).await.0
    }

    pub fn set(&self, f: impl FnOnce(&mut Published)) {
        self.published.send_modify(f);
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        auth: Auth,
        body: &str,
    ) -> (StatusCode, String) {
        let r = self.request(method, path, auth, body).await;
        (r.status(), r.text().await.unwrap())
    }

    /// The whole response, headers included.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        auth: Auth,
        body: &str,
    ) -> reqwest::Response {
        let mut rq = self
            .http
            .request(method, format!("{}{path}", self.base))
            .body(body.to_string());
        rq = match auth {
            Auth::None => rq,
            Auth::Basic(u, p) => rq.basic_auth(u, Some(p)),
            Auth::Bearer(t) => rq.bearer_auth(t),
        };
        rq.send().await.unwrap()
    }

    pub async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(std::time::Duration::from_secs(5), self.task.take().unwrap())
            .await
            .expect("the server stops after its shutdown signal")
            .unwrap();
    }
}

#[derive(Clone, Copy)]
pub enum Auth {
    None,
    Basic(&'static str, &'static str),
    Bearer(&'static str),
}

pub const ADMIN: Auth = Auth::Basic("admin", "s3cret");

pub fn primary(deadline_ms: u64) -> Published {
    let mut p = Published::starting("batman", "pg1", Millis(NOW), TTL_MS);
    p.status.role = NodeRole::Primary;
    p.status.running = true;
    p.status.lease_deadline = Some(Millis(deadline_ms));
    p.status.timeline = Some(Timeline(3));
    p.status.lsn = Some(Lsn(0x3000060));
    p.member = MemberRecord {
        conn_url: "postgres://10.0.0.1:5432/postgres".into(),
        api_url: "http://10.0.0.1:8008/patroni".into(),
        state: "running".into(),
        role: "primary".into(),
        version: "0.1.0".into(),
        xlog_location: Some(0x3000060),
        timeline: Some(3),
        ..MemberRecord::default()
    };
    p.server_version = Some(160004);
    p
}

pub fn replica(lag_bytes: u64) -> Published {
    let mut p = Published::starting("batman", "pg2", Millis(NOW), TTL_MS);
    p.status.role = NodeRole::Replica;
    p.status.running = true;
    p.status.streaming = true;
    p.status.lag_bytes = Some(lag_bytes);
    p.status.timeline = Some(Timeline(3));
    p.member = MemberRecord {
        conn_url: "postgres://10.0.0.2:5433/postgres".into(),
        api_url: "http://10.0.0.2:8008/patroni".into(),
        state: "running".into(),
        role: "replica".into(),
        version: "0.1.0".into(),
        receive_lsn: Some(100),
        replay_lsn: Some(90),
        timeline: Some(3),
        replication_state: Some("streaming".into()),
        ..MemberRecord::default()
    };
    p.tags.insert("zone".into(), serde_json::json!("a"));
    p.tags.insert("nofailover".into(), serde_json::json!(true));
    p
}

/// Every health path, and the code it must answer.
pub async fn assert_codes(api: &Api, expected: &[(&str, u16)]) {
    for (path, code) in expected {
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            let (status, body) = api.code(method.clone(), path).await;
            assert_eq!(status.as_u16(), *code, "{method} {path}");
            let bodyless = method != Method::GET
                || path.starts_with("/liveness")
                || path.starts_with("/readiness");
            assert_eq!(body.is_empty(), bodyless, "{method} {path} body: {body:?}");
        }
    }
}

pub fn with_cluster(mut p: Published) -> Published {
    let mut snapshot = ClusterSnapshot::default();
    snapshot.cluster.leader = Some(LeaderKey {
        name: NodeName::new("pg1"),
        session: None,
        index: 7,
    });
    snapshot.cluster.optime = Some(Lsn(1000));
    snapshot.members.insert("pg1".into(), primary(NOW).member);
    snapshot.members.insert("pg2".into(), replica(0).member);
    snapshot.config = Some((serde_json::json!({"ttl": 30, "loop_wait": 10}), 5));
    snapshot.history = Some(serde_json::json!([[
        1,
        25165984,
        "no recovery target specified",
        "2024-01-01T00:00:00+00:00",
        "pg1"
    ]]));
    snapshot.switchover = Some(SwitchoverRecord {
        leader: Some("pg1".into()),
        member: Some("pg2".into()),
        scheduled_at: Some("2030-01-01T00:00:00+00:00".into()),
    });
    p.cluster = Some(snapshot);
    p
}

/// A Consul store client of member `name` of scope `batman` at `url`, its sessions derived from `ttl_ms` as the
/// agent derives them.
pub fn consul_dcs(url: &str, name: &str, ttl_ms: u64) -> tenure::dcs::consul::ConsulDcs {
    tenure::dcs::consul::ConsulDcs::new(tenure::dcs::consul::ConsulSettings::new(
        url,
        "batman",
        name,
        tenure::ha::SessionStore::Consul.session_ttl_ms(ttl_ms),
    ))
    .expect("consul settings")
}
