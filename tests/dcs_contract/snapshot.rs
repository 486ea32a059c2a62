//! One snapshot builder for both stores: the same key-values, as Consul's `?recurse` answer and as etcd's
//! range, read into the same `ClusterSnapshot`, garbage included. No store runs here: each case goes through
//! both adapters' translations (`consul::snapshot_from_entries`, `etcd::snapshot_from_entries`).
use base64::Engine as _;
use tenure::dcs::consul::{snapshot_from_entries as consul_snapshot, KvEntry};
use tenure::dcs::etcd::{snapshot_from_entries as etcd_snapshot, SnapshotEntry};
use tenure::dcs::snapshot::fill_derived;
use tenure::dcs::{ClusterSnapshot, DcsError, KeyLayout, SwitchoverRecord};

/// One key under the scope, its raw value and its owner (a session id; for etcd a lease in decimal).
type Kv<'a> = (&'a str, &'a [u8], Option<&'a str>);

/// The snapshot each store's adapter builds from `kvs`: `[consul, etcd]`.
fn both(kvs: &[Kv]) -> [Result<ClusterSnapshot, DcsError>; 2] {
    let layout = KeyLayout::new("service", "b");
    let consul: Vec<KvEntry> = kvs
        .iter()
        .enumerate()
        .map(|(i, (rel, value, owner))| KvEntry {
            key: format!("service/{}", scoped(rel)),
            // Consul answers `null` for an empty value, base64 otherwise.
            value: (!value.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(value)),
            session: owner.map(str::to_string),
            modify_index: i as u64 + 1,
        })
        .collect();
    let keys: Vec<String> = kvs
        .iter()
        .map(|(rel, ..)| format!("/service/{}", scoped(rel)))
        .collect();
    let etcd = kvs
        .iter()
        .zip(&keys)
        .enumerate()
        .map(|(i, ((_, value, owner), key))| SnapshotEntry {
            key,
            value,
            mod_revision: i as i64 + 1,
            lease: owner.map_or(0, |o| o.parse().expect("a lease in decimal")),
        });
    [
        consul_snapshot(&layout, &consul, 11),
        etcd_snapshot("/service/b/", etcd, 11),
    ]
}

/// `b/<rel>`, or `<scope>/<key>` for a `rel` of `../<scope>/<key>`.
fn scoped(rel: &str) -> String {
    rel.strip_prefix("../")
        .map_or_else(|| format!("b/{rel}"), str::to_string)
}

/// Each store's snapshot, which must have been read.
fn read(kvs: &[Kv]) -> [ClusterSnapshot; 2] {
    both(kvs).map(|s| s.expect("the read succeeds"))
}

const MEMBER: &[u8] =
    br#"{"conn_url":"postgres://h:5432/postgres","api_url":"http://h:8008/patroni",
    "state":"running","role":"primary","version":"3.0.2","xlog_location":5,"timeline":2}"#;

#[test]
fn every_key_is_read_and_other_scopes_are_not() {
    let kvs: &[Kv] = &[
        ("config", br#"{"pause":true}"#, None),
        ("failover", br#"{"leader":"pg1","member":"pg2"}"#, None),
        ("initialize", b"7000", None),
        ("leader", b"pg1", Some("31")),
        ("members/pg1", MEMBER, Some("31")),
        ("members/pg1/extra", MEMBER, None), // not a direct child: no member
        ("status", br#"{"optime":42}"#, None),
        (
            "history",
            br#"[[1,100,"no recovery target specified"]]"#,
            None,
        ),
        ("failsafe", br#"{"pg1":"http://h:8008/patroni"}"#, None),
        ("../other/leader", b"x", None), // another scope
    ];
    for s in read(kvs) {
        assert_eq!(s.index, 11);
        assert!(s.cluster.config.pause);
        assert_eq!(s.config.as_ref().map(|c| c.1), Some(1));
        assert_eq!(s.cluster.initialize.as_deref(), Some("7000"));
        let leader = s.cluster.leader.expect("leader");
        assert_eq!(
            (
                leader.name.as_str(),
                leader.session.map(|s| s.0),
                leader.index
            ),
            ("pg1", Some("31".to_string()), 4)
        );
        assert_eq!(s.cluster.members.len(), 1);
        assert_eq!(s.members.keys().collect::<Vec<_>>(), ["pg1"]);
        assert_eq!(s.cluster.optime.map(|l| l.0), Some(42));
        assert_eq!(s.cluster.timeline.map(|t| t.0), Some(2));
        assert!(s.cluster.failsafe.is_some());
        let sw = s.cluster.switchover.expect("a switchover");
        assert_eq!(sw.candidate.map(|c| c.0), Some("pg2".to_string()));
    }
}

#[test]
fn unreadable_values_are_skipped_except_config() {
    let kvs: &[Kv] = &[
        ("members/pg2", b"{not json", Some("1")),
        ("failover", br#""pg2""#, None),
        ("status", b"?", None),
        ("history", b"{", None),
        ("failsafe", b"[1]", None),
        ("leader", b"pg1", None),
    ];
    for s in read(kvs) {
        assert!(
            s.cluster.members.is_empty(),
            "a bad member is left out, not guessed"
        );
        assert_eq!((s.cluster.switchover, s.switchover), (None, None));
        assert_eq!(s.cluster.optime, None);
        assert_eq!((s.history, s.cluster.timeline), (None, None));
        assert_eq!(s.cluster.failsafe, None);
        assert_eq!(
            s.cluster.leader.and_then(|l| l.session),
            None,
            "no owner: no session"
        );
    }
}

/// Issue 29: a `config` that is not a JSON object failed the whole read, so every agent behaved as in a
/// store outage and no failover could happen. The snapshot is read; the value is marked unreadable (not
/// missing: the leader must not overwrite it) and the agent acts on the last valid one it read.
#[test]
fn an_unreadable_config_is_marked_and_the_rest_is_read() {
    for config in [
        &b"{"[..],
        b"[1, 2]",
        b"",
        b"{\"pause\": true, \"x\": \"\xff\"}",
    ] {
        let kvs: &[Kv] = &[("config", config, None), ("leader", b"pg1", Some("7"))];
        for s in both(kvs) {
            let mut s = s.unwrap_or_else(|e| panic!("config {config:?} failed the read: {e}"));
            fill_derived(&mut s);
            assert_eq!(s.config, None, "config {config:?}");
            assert!(s.config_unreadable.is_some(), "config {config:?}");
            assert!(
                !s.cluster.config.missing,
                "config {config:?} read as missing"
            );
            assert_eq!(
                s.cluster.leader.map(|l| l.name.to_string()),
                Some("pg1".into())
            );
        }
    }
}

/// Issue 29: a member name reaches files (`synchronous_standby_names`, the recovery file's upstream line):
/// one with a line break is left out, as an unreadable member is.
#[test]
fn a_member_whose_name_holds_a_line_break_is_left_out() {
    let kvs: &[Kv] = &[
        ("members/pg2\nrestore_command = 'x'", MEMBER, Some("1")),
        ("members/pg3", MEMBER, Some("2")),
    ];
    for s in read(kvs) {
        let names: Vec<String> = s
            .cluster
            .members
            .iter()
            .map(|m| m.name.to_string())
            .collect();
        assert_eq!(names, ["pg3"]);
    }
}

/// Consul's builder read an empty `leader` as no leader: replicas raced while the key, maybe held by a
/// session, was there. Patroni reads it as unlocked and leaves the refusal to the store's compare-and-set;
/// tenure never starts a race for a key that exists.
#[test]
fn an_empty_leader_value_is_a_held_key() {
    for s in read(&[("leader", b"", Some("31"))]) {
        let leader = s.cluster.leader.expect("the key is there: held");
        assert_eq!(
            (leader.name.as_str(), leader.session.map(|s| s.0)),
            ("", Some("31".into()))
        );
    }
}

/// Consul's builder failed the whole read on a `leader` or `initialize` that is not UTF-8 (every agent then
/// behaved as in a store outage); etcd's read them with replacement characters, as any other garbage there.
#[test]
fn a_leader_or_initialize_that_is_not_utf8_is_read_as_garbage() {
    let kvs: &[Kv] = &[
        ("leader", b"\xffpg1", Some("31")),
        ("initialize", b"70\xfe00", None),
    ];
    for s in read(kvs) {
        assert_eq!(s.cluster.leader.expect("held").name.as_str(), "\u{fffd}pg1");
        assert_eq!(s.cluster.initialize.as_deref(), Some("70\u{fffd}00"));
    }
}

/// etcd's adapter read a value that is not UTF-8 with replacement characters before its builder saw it, so
/// bytes inside a JSON string made a valid `config` (and member): a value nobody wrote, read as written.
/// Patroni cannot read such a value at all; tenure reads it as garbage: `config` is marked unreadable, a member is
/// left out.
#[test]
fn json_that_is_not_utf8_is_garbage() {
    let config: &[u8] = b"{\"pause\": true, \"x\": \"\xff\"}";
    for s in read(&[("config", config, None)]) {
        assert!(s.config.is_none() && s.config_unreadable.is_some(), "{s:?}");
    }
    let member: &[u8] =
        b"{\"conn_url\":\"\xff\",\"api_url\":\"\",\"state\":\"running\",\"role\":\"replica\",\"version\":\"1\"}";
    for s in read(&[("members/pg2", member, Some("1"))]) {
        assert!(s.members.is_empty(), "{:?}", s.members);
    }
}

/// etcd's builder warned about an empty `failover` and left it out; Consul's read it as Patroni does, the
/// cleared form `{}`: nothing requested.
#[test]
fn an_empty_failover_is_nothing_requested() {
    for s in read(&[("failover", b"", None)]) {
        assert_eq!(s.cluster.switchover, None);
        assert_eq!(s.switchover, Some(SwitchoverRecord::default()));
    }
}

/// etcd's builder kept the raw record of a request whose `scheduled_at` it could not read, so `tenure list`
/// showed a scheduled switchover that no agent would carry out; Consul's left it out whole.
#[test]
fn a_failover_with_an_unreadable_time_is_left_out_whole() {
    let kvs: &[Kv] = &[(
        "failover",
        br#"{"leader":"pg1","scheduled_at":"soon"}"#,
        None,
    )];
    for s in read(kvs) {
        assert_eq!((s.cluster.switchover, s.switchover), (None, None));
    }
}

/// serde reads a struct from a JSON array field by field, so `["pg1","pg2"]` in `failover` read as a switchover
/// from pg1 to pg2 that nobody asked for, and an array of strings in a member key as a member. Patroni reads
/// JSON that is not an object as `{}`: a record is an object or garbage.
#[test]
fn a_json_array_is_no_record() {
    let member: &[u8] =
        br#"["postgres://h:5432/postgres","http://h:8008/patroni","running","primary","3.0.2"]"#;
    let kvs: &[Kv] = &[
        ("failover", br#"["pg1","pg2"]"#, None),
        ("members/pg2", member, Some("1")),
    ];
    for s in read(kvs) {
        assert_eq!((s.cluster.switchover, s.switchover), (None, None));
        assert!(s.cluster.members.is_empty(), "{:?}", s.cluster.members);
    }
}

/// The `sync` key as Patroni's `SyncState.from_node` reads it: `sync_standby` a comma-separated string
/// (blanks and empty names dropped), null or absent for nobody; `quorum` (Patroni 4) as Python's `int()`
/// takes it, 0 when absent, null, false or 0 (`int(quorum) if leader and quorum else 0`).
#[test]
fn the_sync_key_is_read_as_patroni_reads_it() {
    // (value, leader, standbys, quorum)
    type Case<'a> = (&'a [u8], Option<&'a str>, &'a [&'a str], u32);
    let cases: &[Case] = &[
        (
            br#"{"leader":"pg1","sync_standby":"pg2,pg3","quorum":0}"#,
            Some("pg1"),
            &["pg2", "pg3"],
            0,
        ),
        (
            br#"{"leader":"pg1","sync_standby":" pg2 ,,pg3, "}"#,
            Some("pg1"),
            &["pg2", "pg3"],
            0,
        ),
        (
            br#"{"leader":"pg1","sync_standby":null}"#,
            Some("pg1"),
            &[],
            0,
        ),
        (br#"{"leader":"pg1"}"#, Some("pg1"), &[], 0),
        (
            br#"{"leader":"pg1","quorum":1,"sync_standby":"pg2,pg3"}"#,
            Some("pg1"),
            &["pg2", "pg3"],
            1,
        ),
        (
            br#"{"leader":"pg1","quorum":"2","sync_standby":"a,b,c"}"#,
            Some("pg1"),
            &["a", "b", "c"],
            2,
        ),
        (
            br#"{"leader":"pg1","quorum":" 2 ","sync_standby":"a,b,c"}"#,
            Some("pg1"),
            &["a", "b", "c"],
            2,
        ),
        (
            br#"{"leader":"pg1","quorum":2.7,"sync_standby":"a,b,c"}"#,
            Some("pg1"),
            &["a", "b", "c"],
            2,
        ),
        (
            br#"{"leader":"pg1","quorum":true,"sync_standby":"a"}"#,
            Some("pg1"),
            &["a"],
            1,
        ),
        (
            br#"{"leader":"pg1","quorum":null,"sync_standby":"a"}"#,
            Some("pg1"),
            &["a"],
            0,
        ),
        (
            br#"{"leader":"pg1","quorum":false,"sync_standby":"a"}"#,
            Some("pg1"),
            &["a"],
            0,
        ),
        (
            br#"{"leader":"pg1","quorum":"","sync_standby":"a"}"#,
            Some("pg1"),
            &["a"],
            0,
        ),
        (
            br#"{"leader":"pg1","quorum":[],"sync_standby":"a"}"#,
            Some("pg1"),
            &["a"],
            0,
        ),
        // Patroni keeps a negative int and lets a racer in without votes; tenure reads it as garbage.
        (
            br#"{"leader":"pg1","quorum":-1,"sync_standby":"a"}"#,
            None,
            &[],
            0,
        ),
        // No leader: Patroni does not read `quorum` at all.
        (br#"{"leader":"","quorum":"x"}"#, None, &[], 0),
    ];
    for (value, leader, standbys, quorum) in cases {
        for s in read(&[("sync", value, None)]) {
            let key = s.cluster.sync.expect("a key");
            assert_eq!(
                key.leader.as_ref().map(|l| l.as_str()),
                *leader,
                "{value:?}"
            );
            let got: Vec<&str> = key.standbys.iter().map(|n| n.as_str()).collect();
            assert_eq!(got, *standbys, "{value:?}");
            assert_eq!(key.quorum, *quorum, "{value:?}");
            assert_eq!(key.index, 1);
        }
    }
}

/// A `sync` value nobody can read is a key with no leader (Patroni's empty `SyncState`): it matches
/// nobody, and its index still lets a leader replace it.
#[test]
fn a_garbage_sync_key_has_no_leader() {
    let garbage: &[&[u8]] = &[
        b"{",
        b"[]",
        b"",
        br#"{}"#,
        br#"{"leader":""}"#,
        br#"{"leader":5,"sync_standby":"pg2"}"#,
        br#"{"leader":"pg1","sync_standby":["pg2"]}"#,
        b"{\"leader\":\"pg\xff\"}",
        // A `quorum` Python's `int()` refuses makes Patroni's whole key empty.
        br#"{"leader":"pg1","quorum":"two","sync_standby":"pg2"}"#,
        br#"{"leader":"pg1","quorum":"2.5","sync_standby":"pg2"}"#,
        br#"{"leader":"pg1","quorum":[1],"sync_standby":"pg2"}"#,
        br#"{"leader":"pg1","quorum":{"n":1},"sync_standby":"pg2"}"#,
    ];
    for value in garbage {
        for s in read(&[("sync", value, None)]) {
            let key = s.cluster.sync.expect("the key is there");
            assert_eq!(
                (key.leader, key.standbys.len(), key.index),
                (None, 0, 1),
                "{value:?}"
            );
        }
    }
    for s in read(&[]) {
        assert_eq!(s.cluster.sync, None, "no key, no sync state");
    }
}
