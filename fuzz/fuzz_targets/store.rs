//! Every value the agent reads from the store, through the code that builds the cluster snapshot from raw
//! key-values (Consul's `?recurse` answer and etcd's range), then everything the agent does with a
//! snapshot: the `config` key applied, `/cluster` rendered, and one `decide()` per local PostgreSQL state.
//!
//! Input: entries separated by 0x1E; each `<key under service/main/>` 0x1F `<value>` [0x1F `<session>`].
//! Beyond "does not panic": a member record read back from its JSON is the same record, a freshly
//! started agent never promotes (or starts as primary) on what it read, whatever the store holds (R1:
//! only after an acknowledged acquire), and what reaches PostgreSQL's config files passes its grammar:
//! every parameter is one line of `tenure.conf` whose value reads back as written, every member the
//! snapshot keeps can be followed with a recovery file of exactly its five lines, and none of the
//! store's parameters that run code is applied (the base config allows none).
#![no_main]
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use tenure::agent::dynamic::{changes, Dynamic};
use tenure::api::{cluster_json, Published};
use tenure::dcs::consul::{snapshot_from_entries, KvEntry};
use tenure::dcs::etcd::{snapshot_from_entries as etcd_snapshot, SnapshotEntry};
use tenure::dcs::{ClusterSnapshot, KeyLayout, MemberRecord};
use tenure::ha::*;
use tenure::pg::recovery::{self, StandbyConfig};
use tenure::pg::{guc, Endpoint};

#[path = "common.rs"]
mod common;

struct Raw<'a> {
    key: &'a str,
    value: &'a [u8],
    session: Option<&'a str>,
}

fn entries(data: &[u8]) -> Vec<Raw<'_>> {
    data.split(|&b| b == 0x1e)
        .filter_map(|e| {
            let mut parts = e.splitn(3, |&b| b == 0x1f);
            let key = std::str::from_utf8(parts.next()?).ok()?;
            let value = parts.next().unwrap_or_default();
            let session = parts.next().and_then(|s| std::str::from_utf8(s).ok());
            Some(Raw {
                key,
                value,
                session,
            })
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let raw = entries(data);
    let layout = KeyLayout::new("service", "main");
    let consul: Vec<KvEntry> = raw
        .iter()
        .enumerate()
        .map(|(i, r)| KvEntry {
            key: format!("{}{}", layout.prefix(), r.key),
            // Consul answers `null` for an empty value, base64 otherwise.
            value: (!r.value.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(r.value)),
            session: r.session.map(str::to_string),
            modify_index: i as u64 + 1,
        })
        .collect();
    if let Ok(snap) = snapshot_from_entries(&layout, &consul, 100) {
        use_snapshot(snap);
    }
    let prefix = format!("/{}", layout.prefix());
    let keys: Vec<String> = raw.iter().map(|r| format!("{prefix}{}", r.key)).collect();
    // The etcd adapter drops keys that are not UTF-8 (`entries` already has); values go in as bytes.
    let etcd = raw
        .iter()
        .zip(&keys)
        .enumerate()
        .map(|(i, (r, key))| SnapshotEntry {
            key,
            value: r.value,
            mod_revision: i as i64 + 1,
            lease: r.session.and_then(|s| s.parse().ok()).unwrap_or(0),
        });
    if let Ok(snap) = etcd_snapshot(&prefix, etcd, 100) {
        use_snapshot(snap);
    }
});

fn use_snapshot(mut snap: ClusterSnapshot) {
    tenure::dcs::snapshot::fill_derived(&mut snap);
    for (name, record) in &snap.members {
        let text = serde_json::to_string(record).expect("a member record serializes");
        let back: MemberRecord = serde_json::from_str(&text).expect("its own JSON reads back");
        assert_eq!(
            &back, record,
            "member {name:?} changed through its JSON: {text}"
        );
    }
    let config = common::config();
    let local = config.core_config();
    let mut dynamic = Dynamic::default();
    dynamic.observe(config, &local, snap.config.as_ref().map(|(v, _)| v));
    let _ = dynamic.core_view(&mut snap);
    let effective = dynamic.effective(config, &local);
    let _ = changes(&local, &config.pg_settings(), &effective);
    let params = &effective.pg.parameters;
    for (name, value) in params {
        let line = guc::line(name, value)
            .unwrap_or_else(|e| panic!("parameter {name:?} = {value:?} would be written: {e}"));
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        let quoted = line.split_once(" = ").expect("name = value").1.trim_end_matches('\n');
        assert_eq!(guc::unquote_value(quoted).as_deref(), Some(value.as_str()));
        assert!(
            guc::runs_code(name).is_none(),
            "the store set {name} = {value:?}, which runs code"
        );
    }
    let pg = config.pg_settings();
    for m in &snap.cluster.members {
        let up = Endpoint {
            name: m.name.clone(),
            host: "10.0.0.2".into(),
            port: 5432,
        };
        let text = recovery::render(&pg, &StandbyConfig::follow(&pg, up))
            .unwrap_or_else(|e| panic!("member {:?} kept but cannot be followed: {e}", m.name));
        assert_eq!(text.lines().count(), 5, "{text}");
        let names = SyncNames::All([m.name.clone()].into());
        guc::check_value(&tenure::pg::sync::render(&names)).expect("a standby name fits a line");
    }
    let mut published = Published::starting("main", "pg1", Millis(0), 30_000);
    published.cluster = Some(snap.clone());
    let _ = cluster_json(&published, &snap).to_string();
    for pg in pg_states(&snap.cluster) {
        let obs = observation(snap.cluster.clone(), pg);
        let d = decide(&effective.core, &Memory::default(), &obs);
        assert!(
            !d.actions
                .iter()
                .any(|a| matches!(a, Action::Promote | Action::StartPrimary)),
            "a fresh agent acted as primary on the store's word alone: {:?} for {:?}",
            d.actions,
            obs.store
        );
        let _ = d.reason.to_string();
    }
}

/// The local PostgreSQL states a node reads the store in: none, stopped replica, running replica and
/// running primary, on the system the `initialize` key names (when it names one).
fn pg_states(cluster: &Cluster) -> Vec<PgState> {
    let sysid = cluster
        .initialize
        .as_deref()
        .and_then(|s| s.trim().parse().ok())
        .map(SystemId)
        .unwrap_or(SystemId(7_000_000_000_000_000_001));
    let running = |role| {
        PgState::Running(RunningPg {
            system_id: sysid,
            role,
            timeline: Timeline(2),
            lsn: Lsn(50_331_744),
            receive_lsn: (role == PgRole::Replica).then_some(Lsn(50_331_744)),
            replay_lsn: (role == PgRole::Replica).then_some(Lsn(50_331_700)),
            upstream_end_lsn: None,
            upstream: (role == PgRole::Replica).then(|| NodeName::new("pg2")),
            remote: None,
            streaming: role == PgRole::Replica,
            pending_restart: false,
            server_version: 150_004,
            // A primary waiting for pg2, which streams and is synchronous: garbage in `sync` and `config`
            // meets synchronous mode's rules too.
            sync_names: if role == PgRole::Primary {
                SyncNames::All([NodeName::new("pg2")].into())
            } else {
                SyncNames::Off
            },
            standbys: if role == PgRole::Primary {
                vec![ReplicationStat {
                    name: NodeName::new("pg2"),
                    streaming: true,
                    sync: true,
                    flush_lsn: Lsn(50_331_700),
                }]
            } else {
                Vec::new()
            },
            slots: Vec::new(),
        })
    };
    vec![
        PgState::NoData,
        PgState::Stopped(Controldata {
            system_id: sysid,
            timeline: Timeline(2),
            lsn: Lsn(50_331_744),
            was_primary: false,
            clean: true,
            needs_crash_recovery: false,
        }),
        // A primary that crashed: pg_control gives no trustworthy end of its WAL.
        PgState::Stopped(Controldata {
            system_id: sysid,
            timeline: Timeline(2),
            lsn: Lsn(50_331_744),
            was_primary: true,
            clean: false,
            needs_crash_recovery: true,
        }),
        running(PgRole::Replica),
        running(PgRole::Primary),
    ]
}

fn observation(cluster: Cluster, pg: PgState) -> Observation {
    let now = Millis(1_000_000);
    Observation {
        now,
        wall_ms: 1_700_000_000_000,
        pg,
        store: StoreView::Available(cluster),
        store_read_at: now,
        peers: None,
        sites: None,
        outcomes: Vec::new(),
        job: JobStatus::Idle,
        divergence: None,
        shutting_down: false,
        failsafe_replies: None,
        failsafe_grant: None,
        pg_reloaded: false,
        request: None,
    }
}
