//! The differential's operator actions that run: edit-config, restart, reinit, a paused WAL replay, a
//! switchover without a candidate and a failover to one; what each answers, writes and leaves PostgreSQL in.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{record, shape, until, Auth, Seen, Target};
use tenure::demo::local::reaper;

/// One member as the actions address it.
#[derive(Clone)]
pub struct Member {
    pub name: String,
    pub api: SocketAddr,
    pub pg_port: u16,
}

impl Target<'_> {
    fn status(&self, at: SocketAddr) -> Value {
        let (_, _, body) = self.call(at, "GET", "/patroni", Auth::None, None);
        serde_json::from_str(&body).unwrap_or_default()
    }

    fn member(&self, name: &str) -> &Member {
        self.members.iter().find(|m| m.name == name).unwrap()
    }

    /// The member answering `GET /primary` with 200, once exactly one does (within `limit`).
    pub(super) fn wait_primary(&self, limit: Duration, not: Option<&str>) -> Option<Member> {
        until(limit, || {
            let p: Vec<&Member> = self
                .members
                .iter()
                .filter(|m| self.call(m.api, "GET", "/primary", Auth::None, None).0 == 200)
                .collect();
            (p.len() == 1 && Some(p[0].name.as_str()) != not).then(|| p[0].clone())
        })
    }

    /// Every member but `primary` runs as a replica.
    fn replicas_running(&self, primary: &str, limit: Duration) -> bool {
        until(limit, || {
            self.members
                .iter()
                .filter(|m| m.name != primary)
                .all(|m| {
                    let v = self.status(m.api);
                    v["role"] == "replica" && v["state"] == "running"
                })
                .then_some(())
        })
        .is_some()
    }

    /// One value of a query on member `name`'s PostgreSQL, as its superuser over TCP (psql, 10 s).
    pub(super) fn sql(&self, name: &str, query: &str) -> Option<String> {
        let m = self.member(name);
        let child = reaper()
            .spawn(
                Command::new("/usr/lib/postgresql/15/bin/psql")
                    .args(["-h", "127.0.0.1", "-d", "postgres", "-Atc", query])
                    .arg("-p")
                    .arg(m.pg_port.to_string())
                    .arg("-U")
                    .arg(self.superuser.0)
                    .env("PGPASSWORD", self.superuser.1)
                    .env("PGCONNECT_TIMEOUT", "10")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null()),
            )
            .ok()?;
        let pid = child.id() as i32;
        let out = child.wait_with_output().ok();
        reaper().release(pid);
        let out = out.filter(|o| o.status.success())?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// The fields of `/patroni` an action is judged by, as kinds, with `state`/`role` and `xlog.paused` values.
fn status_fields(v: &Value, out: &mut BTreeMap<String, String>, prefix: &str) {
    let mut kinds = BTreeMap::new();
    shape(v, "", &mut kinds);
    for k in ["pending_restart", "pending_restart_reason", "xlog.paused"] {
        out.insert(
            format!("{prefix}{k}"),
            kinds.get(k).cloned().unwrap_or("absent".into()),
        );
    }
    out.insert(
        format!("{prefix}=state"),
        v["state"].as_str().unwrap_or("?").into(),
    );
    out.insert(
        format!("{prefix}=xlog.paused"),
        v["xlog"]["paused"].to_string(),
    );
}

/// All of them, in order; `primary` is the current primary's name. Returns the primary afterwards.
pub fn run(t: &Target, seen: &mut Seen, primary: &str) -> String {
    let replica = t
        .members
        .iter()
        .find(|m| m.name != primary)
        .unwrap()
        .clone();
    edit_config_and_restart(t, seen, primary, &replica);
    reinit(t, seen, &replica);
    paused_replay(t, seen, &replica);
    let primary = switchover_without_candidate(t, seen, primary);
    failover_to_candidate(t, seen, &primary)
}

/// `PATCH /config` with a setting that needs a restart: what lands in the `config` key, the replica's
/// `pending_restart` (and 4.x's `pending_restart_reason`), then `POST /restart` on it clears them.
fn edit_config_and_restart(t: &Target, seen: &mut Seen, primary: &str, replica: &Member) {
    let p = t.member(primary).api;
    let body = r#"{"postgresql":{"parameters":{"max_connections":50,"work_mem":"5MB"}}}"#;
    let (code, ch, text) = t.call(p, "PATCH", "/config", Auth::Good, Some(body));
    record(
        seen,
        "PATCH /config max_connections, work_mem",
        code,
        ch,
        &text,
    );
    let mut fields = BTreeMap::new();
    if let Some(v) = t.kv_json("config") {
        let mut kinds = BTreeMap::new();
        shape(&v, "", &mut kinds);
        for k in [
            "postgresql.parameters.max_connections",
            "postgresql.parameters.work_mem",
        ] {
            fields.insert(k.into(), kinds.get(k).cloned().unwrap_or("absent".into()));
        }
    }
    // A reloadable setting reaches PostgreSQL without a restart.
    let work_mem = until(Duration::from_secs(30), || {
        (t.sql(replica.name.as_str(), "SHOW work_mem").as_deref() == Some("5MB")).then_some(())
    });
    fields.insert(
        "replica work_mem 5MB".into(),
        work_mem.is_some().to_string(),
    );
    let pending = until(Duration::from_secs(30), || {
        let v = t.status(replica.api);
        (v["pending_restart"] == true).then_some(v)
    })
    .unwrap_or_else(|| t.status(replica.api));
    status_fields(&pending, &mut fields, "replica ");
    // The member key follows at the member's next loop (`/patroni` reads live state).
    let member_key = || t.kv_json(&format!("members/{}", replica.name));
    let v = until(Duration::from_secs(15), || {
        member_key().filter(|v| v["pending_restart"] == true)
    })
    .or_else(member_key);
    let mut key = BTreeMap::new();
    if let Some(v) = v {
        shape(&v, "", &mut key);
    }
    for k in ["pending_restart", "pending_restart_reason"] {
        fields.insert(
            format!("replica member key {k}"),
            key.get(k).cloned().unwrap_or("absent".into()),
        );
    }
    seen.insert("after edit-config".into(), fields);

    let started = t.status(replica.api)["postmaster_start_time"].clone();
    let (code, ch, text) = t.call(replica.api, "POST", "/restart", Auth::Good, Some("{}"));
    record(seen, "POST /restart (replica)", code, ch, &text);
    let mut fields = BTreeMap::new();
    let after = until(Duration::from_secs(60), || {
        let v = t.status(replica.api);
        (v["state"] == "running" && v["postmaster_start_time"] != started).then_some(v)
    });
    fields.insert("restarted and running".into(), after.is_some().to_string());
    status_fields(&after.unwrap_or_default(), &mut fields, "replica ");
    fields.insert(
        "replica max_connections".into(),
        t.sql(&replica.name, "SHOW max_connections")
            .unwrap_or_default(),
    );
    seen.insert("after restart".into(), fields);
    cli_restart(t, seen, replica);
}

/// The operator's CLI, the same words for both (`patronictl`/`tenure -c FILE restart CLUSTER NODE --force`):
/// its exit status, and the member restarted and running again.
fn cli_restart(t: &Target, seen: &mut Seen, replica: &Member) {
    let started = t.status(replica.api)["postmaster_start_time"].clone();
    let argv = (t.restart_cli)(&replica.name);
    let mut fields = BTreeMap::new();
    fields.insert("exit status".into(), run_cli(&argv));
    let after = until(Duration::from_secs(60), || {
        let v = t.status(replica.api);
        (v["state"] == "running" && v["postmaster_start_time"] != started).then_some(v)
    });
    fields.insert("restarted and running".into(), after.is_some().to_string());
    seen.insert("CLI restart (replica)".into(), fields);
}

/// Run `argv` (60 s at most, then killed); its exit code, or `timeout`.
fn run_cli(argv: &[String]) -> String {
    let mut child = reaper()
        .spawn(
            Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("run the CLI");
    let pid = child.id() as i32;
    let code = until(Duration::from_secs(60), || child.try_wait().ok().flatten());
    if code.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    reaper().release(pid);
    code.map_or("timeout".into(), |s| s.code().unwrap_or(-1).to_string())
}

/// `POST /reinitialize` on a replica: it starts over from a fresh base backup and streams again.
fn reinit(t: &Target, seen: &mut Seen, replica: &Member) {
    let marker = "CREATE TABLE IF NOT EXISTS differential_reinit(x int)";
    let _ = t.sql(replica.name.as_str(), marker);
    let started = t.status(replica.api)["postmaster_start_time"].clone();
    let (code, ch, text) = t.call(
        replica.api,
        "POST",
        "/reinitialize",
        Auth::Good,
        Some(r#"{"force":true}"#),
    );
    record(seen, "POST /reinitialize (replica)", code, ch, &text);
    let after = until(Duration::from_secs(90), || {
        let v = t.status(replica.api);
        (v["state"] == "running" && v["postmaster_start_time"] != started).then_some(v)
    });
    let mut fields = BTreeMap::new();
    fields.insert(
        "reinitialized and running".into(),
        after.is_some().to_string(),
    );
    let v = after.unwrap_or_default();
    fields.insert("=role".into(), v["role"].as_str().unwrap_or("?").into());
    let streaming = until(Duration::from_secs(30), || {
        (t.sql(&replica.name, "SELECT status FROM pg_stat_wal_receiver")
            .as_deref()
            == Some("streaming"))
        .then_some(())
    });
    fields.insert("streams again".into(), streaming.is_some().to_string());
    seen.insert("after reinit".into(), fields);
}

/// `pg_wal_replay_pause()` on a replica: `/patroni`'s `xlog.paused` says so; resumed, it says so again.
fn paused_replay(t: &Target, seen: &mut Seen, replica: &Member) {
    let mut fields = BTreeMap::new();
    let _ = t.sql(&replica.name, "SELECT pg_wal_replay_pause()");
    let v = until(Duration::from_secs(30), || {
        let v = t.status(replica.api);
        (v["xlog"]["paused"] == true).then_some(v)
    })
    .unwrap_or_else(|| t.status(replica.api));
    status_fields(&v, &mut fields, "paused ");
    let _ = t.sql(&replica.name, "SELECT pg_wal_replay_resume()");
    let v = until(Duration::from_secs(30), || {
        let v = t.status(replica.api);
        (v["xlog"]["paused"] == false).then_some(v)
    })
    .unwrap_or_else(|| t.status(replica.api));
    status_fields(&v, &mut fields, "resumed ");
    seen.insert("replica with WAL replay paused".into(), fields);
}

/// `POST /switchover` naming only the leader: some replica takes over, the old leader rejoins.
fn switchover_without_candidate(t: &Target, seen: &mut Seen, primary: &str) -> String {
    let p = t.member(primary).api;
    let body = format!(r#"{{"leader":"{primary}"}}"#);
    let (code, ch, text) = t.call(p, "POST", "/switchover", Auth::Good, Some(&body));
    record(seen, "POST /switchover without candidate", code, ch, &text);
    let new = t.wait_primary(Duration::from_secs(60), Some(primary));
    let mut fields = BTreeMap::new();
    fields.insert(
        "another member is primary".into(),
        new.is_some().to_string(),
    );
    let name = new.map_or(primary.to_string(), |m| m.name);
    fields.insert(
        "leader key names it".into(),
        (t.kv_raw("leader").as_deref() == Some(name.as_str())).to_string(),
    );
    fields.insert(
        "the others run as replicas".into(),
        t.replicas_running(&name, Duration::from_secs(60))
            .to_string(),
    );
    seen.insert("after the switchover without candidate".into(), fields);
    name
}

/// `POST /failover` naming a candidate while the leader is healthy: the candidate takes over.
fn failover_to_candidate(t: &Target, seen: &mut Seen, primary: &str) -> String {
    let p = t.member(primary).api;
    let candidate = t
        .members
        .iter()
        .find(|m| m.name != primary)
        .unwrap()
        .name
        .clone();
    let body = format!(r#"{{"candidate":"{candidate}"}}"#);
    let (code, ch, text) = t.call(p, "POST", "/failover", Auth::Good, Some(&body));
    record(seen, "POST /failover to a candidate", code, ch, &text);
    let new = t.wait_primary(Duration::from_secs(60), Some(primary));
    let mut fields = BTreeMap::new();
    let name = new.map_or(primary.to_string(), |m| m.name);
    fields.insert(
        "the candidate is primary".into(),
        (name == candidate).to_string(),
    );
    fields.insert(
        "leader key names it".into(),
        (t.kv_raw("leader").as_deref() == Some(candidate.as_str())).to_string(),
    );
    fields.insert(
        "the others run as replicas".into(),
        t.replicas_running(&name, Duration::from_secs(60))
            .to_string(),
    );
    let mut key = BTreeMap::new();
    if let Some(v) = t.kv_json("failover") {
        shape(&v, "failover key", &mut key);
    }
    if key.is_empty() {
        let raw = t.kv_raw("failover");
        key.insert(
            "failover key".into(),
            raw.map_or("absent", |_| "not JSON").into(),
        );
    }
    fields.extend(key);
    seen.insert("after the failover to a candidate".into(), fields);
    name
}
