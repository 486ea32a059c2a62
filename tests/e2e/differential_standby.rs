//! The differential's standby cluster: one single-node tenure cluster is the source primary; a two-node
//! Patroni 3.0.2 standby cluster and then a two-node tenure one (each on its own etcd, both scoped
//! `pdouble`, both with `bootstrap.dcs.standby_cluster: {host, port, create_replica_methods: [basebackup]}`
//! naming that primary) clone and follow it, so both implementations follow the same primary. What a client
//! sees of each standby cluster is recorded and compared: the health GETs on its standby leader and on its
//! cascading replica, `/patroni`, `/cluster`, the `patroni_standby_leader` (and `patroni_primary`,
//! `patroni_replica`) metric lines, the member keys, the `config` key's `standby_cluster`, a `PATCH /config`
//! that adds `standby_cluster.recovery_min_apply_delay` (its answer, `GET /config`, the key, and the setting
//! reaching the standby leader's PostgreSQL), the bodies 3.0.2 refuses, and a port that is not one (which
//! 3.0.2 stores and tenure refuses).
//!
//! Not probed: everything 3.0.2 has answers these paths; `/metrics` exists in 3.0.2 (api.py `do_GET_metrics`,
//! with `patroni_standby_leader`). 3.0.2 refuses no `PATCH /config` value (it stores any JSON object that is
//! not empty, as 4.x does): what it refuses is the empty object, an array and broken JSON.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::patroni_harness::{PatroniCluster, StandbyOf, SCOPE};
use super::{actions, record, shape, until, values, Auth, KvReader, Seen, Target};
use crate::support::cluster::{Cluster, Layout, StoreKind};
use tenure::demo::local::{http_get, API_USER, REPLICATION, SUPERUSER};

/// Members per standby cluster: a standby leader and one replica cascading from it.
const STANDBY_NODES: usize = 2;
/// A standby cluster's bootstrap: a pg_basebackup from the source, another from the standby leader.
const UP_BUDGET: Duration = Duration::from_secs(120);
/// A reloadable setting reaches PostgreSQL within this (a few loops on a loaded two-core box).
const APPLY_BUDGET: Duration = Duration::from_secs(30);

/// The health and status GETs asked of each member (all of them exist in 3.0.2).
const GETS: [&str; 11] = [
    "/standby-leader",
    "/standby_leader",
    "/leader",
    "/primary",
    "/master",
    "/read-write",
    "/read-only",
    "/replica",
    "/health",
    "/patroni",
    "/cluster",
];

/// The metrics compared, by name (3.0.2 writes them as `name{scope="..."} value`).
const METRICS: [&str; 3] = [
    "patroni_standby_leader",
    "patroni_primary",
    "patroni_replica",
];

/// `bootstrap.dcs` lines that make a tenure cluster a standby cluster of the primary on 127.0.0.1:`port`
/// (the Patroni harness writes the same for its nodes).
fn standby_cluster_section(port: u16) -> String {
    format!(
        "    standby_cluster:\n      host: 127.0.0.1\n      port: {port}\n      \
         create_replica_methods:\n        - basebackup\n"
    )
}

/// The port member `name`'s WAL receiver streams from, while it streams.
fn sender_port(t: &Target, name: &str) -> Option<u16> {
    t.sql(
        name,
        "SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'",
    )?
    .parse()
    .ok()
}

/// Wait until one member runs as the standby leader streaming from the source on `source_port` and the
/// other as a running replica streaming from it, and `/cluster` lists both running; then point `t` at them.
fn settle(t: &mut Target, source_port: u16, what: &str, t0: Instant) {
    let found = until(UP_BUDGET, || {
        // Nothing may answer yet: asked without `Target::call`, which expects an answer.
        let roles: Vec<Value> = t.members.iter().map(|m| get(m.api, "/patroni")).collect();
        let sl = roles
            .iter()
            .position(|v| v["role"] == "standby_leader" && v["state"] == "running")?;
        let other = (0..t.members.len()).find(|i| *i != sl)?;
        let (leader, replica) = (&t.members[sl], &t.members[other]);
        (roles[other]["role"] == "replica" && roles[other]["state"] == "running").then_some(())?;
        (sender_port(t, &leader.name)? == source_port).then_some(())?;
        (sender_port(t, &replica.name)? == leader.pg_port).then_some(())?;
        // tenure answers from its last loop's probe (Patroni per request): compare once the standby
        // leader's `/patroni` lists the cascading walsender, as a client a loop later would.
        let rows = roles[sl]["replication"].as_array()?;
        let listed = |r: &Value| r["application_name"] == replica.name.as_str();
        rows.iter().any(listed).then_some(())?;
        let cluster = get(leader.api, "/cluster");
        let listed = cluster["members"].as_array()?;
        let running = |m: &Value| m["state"] == "running" || m["state"] == "streaming";
        (listed.len() == t.members.len() && listed.iter().all(running)).then_some((sl, other))
    });
    let (sl, other) =
        found.unwrap_or_else(|| panic!("{what}: no standby leader and cascading replica"));
    eprintln!(
        "[differential standby] {what} up {:.1} s after it was started: standby leader {}",
        t0.elapsed().as_secs_f64(),
        t.members[sl].name
    );
    t.primary = t.members[sl].api;
    t.replica = t.members[other].api;
    t.leader = t.members[sl].name.clone();
}

/// `GET path`'s JSON body (`null` when nothing answers).
fn get(at: SocketAddr, path: &str) -> Value {
    http_get(at, path)
        .and_then(|(_, body)| serde_json::from_str(&body).ok())
        .unwrap_or_default()
}

/// The metric lines named in [`METRICS`]: `# HELP`/`# TYPE` lines as present, samples as their values with
/// their label names and whether the scope label names the cluster's scope.
fn metric_lines(body: &str, scope: &str, out: &mut BTreeMap<String, String>) {
    for line in body.lines() {
        let named = |l: &str| {
            METRICS.iter().any(|m| {
                l.strip_prefix(m)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
        };
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let (kind, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            if named(name) {
                let rest = if kind == "TYPE" { words.next() } else { None };
                out.insert(format!("# {kind} {name}"), rest.unwrap_or("present").into());
            }
        } else if named(line) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            out.insert(name.into(), value.into());
            // The label names, and the scope's value (the member's name differs between the clusters).
            let mut names: Vec<&str> = labels
                .trim_end_matches('}')
                .split(',')
                .filter_map(|l| l.split_once('=').map(|(k, _)| k))
                .collect();
            names.sort_unstable();
            out.insert(format!("{name} labels"), names.join(","));
            let scoped = labels.contains(&format!("scope=\"{scope}\""));
            out.insert(format!("{name} scope label"), scoped.to_string());
        }
    }
}

/// A JSON value as a field: its kind's paths and, under `=`, the value itself (keys sorted).
fn as_fields(v: Option<Value>, name: &str, out: &mut BTreeMap<String, String>) {
    match v {
        Some(v) => {
            shape(&v, name, out);
            out.insert(format!("{name} ="), v.to_string());
        }
        None => {
            out.insert(name.into(), "absent".into());
        }
    }
}

/// Drive the standby cluster `t` through the steps; the same for both implementations.
fn observe_standby(t: &Target, source_port: u16) -> Seen {
    let mut seen = Seen::new();
    let replica = t
        .members
        .iter()
        .find(|m| m.api == t.replica)
        .unwrap()
        .name
        .clone();
    for (role, at) in [
        ("standby leader", t.primary),
        ("standby replica", t.replica),
    ] {
        for path in GETS {
            let (code, ch, body) = t.call(at, "GET", path, Auth::None, None);
            record(&mut seen, &format!("GET {path} ({role})"), code, ch, &body);
        }
        let (code, _, body) = t.call(at, "GET", "/metrics", Auth::None, None);
        let mut fields = BTreeMap::from([("status".to_string(), code.to_string())]);
        metric_lines(&body, &t.scope, &mut fields);
        seen.insert(format!("GET /metrics ({role})"), fields);
    }
    for (role, name) in [
        ("standby leader", t.leader.as_str()),
        ("standby replica", &replica),
    ] {
        let mut fields = BTreeMap::new();
        if let Some(v) = t.kv_json(&format!("members/{name}")) {
            shape(&v, "", &mut fields);
            values(&v, &mut fields);
        }
        seen.insert(format!("member key ({role})"), fields);
    }
    let standby_cluster = || {
        t.kv_json("config")
            .and_then(|v| v.get("standby_cluster").cloned())
    };
    let mut fields = BTreeMap::new();
    as_fields(standby_cluster(), "standby_cluster", &mut fields);
    seen.insert("config key (standby cluster)".into(), fields);

    // An operator adds an apply delay through the REST API: its answer, GET /config, the key, PostgreSQL.
    let patch = r#"{"standby_cluster":{"recovery_min_apply_delay":"1s"}}"#;
    let (code, ch, body) = t.call(t.primary, "PATCH", "/config", Auth::Good, Some(patch));
    record(
        &mut seen,
        "PATCH /config standby_cluster.recovery_min_apply_delay",
        code,
        ch,
        &body,
    );
    let mut fields = BTreeMap::new();
    let answer: Option<Value> = serde_json::from_str(&body).ok();
    as_fields(
        answer.and_then(|v| v.get("standby_cluster").cloned()),
        "answer standby_cluster",
        &mut fields,
    );
    // Patroni's replica answers GET /config from the cluster its last loop read: wait for the change to show
    // (read at once, Patroni 3.0.2's answer was a loop old in one CI run), then compare what shows.
    let read = || t.call(t.replica, "GET", "/config", Auth::None, None);
    let delay_shown = |body: &str| {
        serde_json::from_str::<Value>(body)
            .ok()
            .is_some_and(|v| v["standby_cluster"]["recovery_min_apply_delay"].is_string())
    };
    let (code, _, body) = until(APPLY_BUDGET, || {
        let (code, ch, body) = read();
        delay_shown(&body).then_some((code, ch, body))
    })
    .unwrap_or_else(read);
    fields.insert(
        "GET /config (standby replica) status".into(),
        code.to_string(),
    );
    let got: Option<Value> = serde_json::from_str(&body).ok();
    as_fields(
        got.and_then(|v| v.get("standby_cluster").cloned()),
        "GET /config standby_cluster",
        &mut fields,
    );
    as_fields(standby_cluster(), "config key standby_cluster", &mut fields);
    let applied = until(APPLY_BUDGET, || {
        (t.sql(&t.leader, "SHOW recovery_min_apply_delay")? == "1s").then_some(())
    });
    fields.insert(
        "standby leader recovery_min_apply_delay 1s".into(),
        applied.is_some().to_string(),
    );
    let streams = until(APPLY_BUDGET, || {
        let leader_port = t
            .members
            .iter()
            .find(|m| m.name == t.leader)
            .unwrap()
            .pg_port;
        (sender_port(t, &replica)? == leader_port).then_some(())
    });
    fields.insert(
        "the replica still streams from the standby leader".into(),
        streams.is_some().to_string(),
    );
    seen.insert("after PATCH standby_cluster".into(), fields);

    // What 3.0.2 refuses of a PATCH /config: the empty object, a body that is not an object, broken JSON.
    for (what, body) in [
        ("empty object", "{}"),
        ("array", r#"[{"standby_cluster":null}]"#),
        ("broken JSON", r#"{"standby_cluster":"#),
    ] {
        let (code, ch, text) = t.call(t.primary, "PATCH", "/config", Auth::Good, Some(body));
        record(&mut seen, &format!("PATCH /config {what}"), code, ch, &text);
    }
    let mut fields = BTreeMap::new();
    as_fields(standby_cluster(), "standby_cluster", &mut fields);
    seen.insert("config key after the refused PATCHes".into(), fields);

    // A value no standby leader can follow: Patroni stores it, tenure refuses it (422). Then the source's
    // port again, so that Patroni's standby leader follows the source until the end.
    let bad = r#"{"standby_cluster":{"port":"not-a-port"}}"#;
    let (code, ch, text) = t.call(t.primary, "PATCH", "/config", Auth::Good, Some(bad));
    record(
        &mut seen,
        "PATCH /config standby_cluster.port not a port",
        code,
        ch,
        &text,
    );
    let mut fields = BTreeMap::new();
    as_fields(standby_cluster(), "standby_cluster", &mut fields);
    let again = format!(r#"{{"standby_cluster":{{"port":{source_port}}}}}"#);
    let (code, _, _) = t.call(t.primary, "PATCH", "/config", Auth::Good, Some(&again));
    fields.insert(
        "PATCH the source's port again: status".into(),
        code.to_string(),
    );
    as_fields(standby_cluster(), "then standby_cluster", &mut fields);
    seen.insert("config key after the port that is not one".into(), fields);
    seen
}

fn members_of_patroni(p: &PatroniCluster) -> Vec<actions::Member> {
    p.nodes
        .iter()
        .map(|n| actions::Member {
            name: n.name.clone(),
            api: n.api,
            pg_port: n.pg_port,
        })
        .collect()
}

/// Both standby clusters, one after the other, following one tenure primary: what each showed.
pub(super) fn standby_clusters_seen() -> (Seen, Seen) {
    let _serial = crate::support::cluster::serial();
    let t0 = Instant::now();
    let mut source = Cluster::start_site(
        StoreKind::Etcd,
        &Layout {
            scope: "source".into(),
            name_prefix: "s".into(),
            nodes: 1,
        },
        |_| {},
    );
    let sp = source.wait_healthy(Duration::from_secs(90));
    let port = source.nodes[sp].pg_port;
    eprintln!(
        "[differential standby] source primary up on port {port} in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let no_cli = |_: &str| Vec::new();
    let patroni_seen = {
        let t1 = Instant::now();
        let mut p = PatroniCluster::start_standby_on_etcd(
            STANDBY_NODES,
            &StandbyOf {
                port,
                superuser: SUPERUSER,
                replication: REPLICATION,
            },
        );
        let mut t = Target {
            rt: &p.rt,
            primary: p.nodes[0].api,
            replica: p.nodes[1].api,
            leader: String::new(),
            kv: p.kv(),
            scope: SCOPE.into(),
            user: ("admin", "admin-pw"),
            members: members_of_patroni(&p),
            // The clone has the source's users.
            superuser: SUPERUSER,
            restart_cli: &no_cli,
        };
        settle(&mut t, port, "Patroni's standby cluster", t1);
        let seen = observe_standby(&t, port);
        eprintln!(
            "[differential standby] Patroni's standby cluster observed in {:.1} s",
            t1.elapsed().as_secs_f64()
        );
        p.failed = false;
        seen
    };
    let tenure_seen = {
        let t1 = Instant::now();
        let mut c = Cluster::start_site(
            StoreKind::Etcd,
            &Layout {
                scope: SCOPE.into(),
                name_prefix: "t".into(),
                nodes: STANDBY_NODES,
            },
            |n| n.dcs_extra = standby_cluster_section(port),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut t = Target {
            rt: &rt,
            primary: c.nodes[0].api_addr(),
            replica: c.nodes[1].api_addr(),
            leader: String::new(),
            kv: KvReader::Etcd(c.etcd().expect("etcd").client_url().to_string()),
            scope: SCOPE.into(),
            user: API_USER,
            members: c
                .nodes
                .iter()
                .map(|n| actions::Member {
                    name: n.name.clone(),
                    api: n.api_addr(),
                    pg_port: n.pg_port,
                })
                .collect(),
            superuser: SUPERUSER,
            restart_cli: &no_cli,
        };
        settle(&mut t, port, "tenure's standby cluster", t1);
        let seen = observe_standby(&t, port);
        eprintln!(
            "[differential standby] tenure's standby cluster observed in {:.1} s",
            t1.elapsed().as_secs_f64()
        );
        c.assert_never_writable();
        seen
    };
    source.assert_never_two_primaries();
    eprintln!(
        "[differential standby] both standby clusters compared in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    (patroni_seen, tenure_seen)
}
