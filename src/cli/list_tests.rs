//! `tenure list`'s unit tests: roles, hosts, positions, columns and title.
use super::*;

/// patronictl's rule (`cluster_as_json`): synchronous mode on and the `sync` key (with a leader) lists
/// the member; the key's leader itself is not a standby.
#[test]
fn a_listed_member_is_a_sync_standby_while_the_mode_is_on() {
    use crate::ha::observation::{LeaderKey, SyncKey};
    use crate::ha::types::NodeName;
    let mut snap = ClusterSnapshot::default();
    for n in ["pg1", "pg2", "pg3"] {
        snap.members.insert(n.into(), MemberRecord::default());
    }
    snap.cluster.leader = Some(LeaderKey {
        name: NodeName::new("pg1"),
        session: None,
        index: 1,
    });
    snap.cluster.sync = Some(SyncKey {
        leader: Some(NodeName::new("pg1")),
        standbys: [NodeName::new("pg2"), NodeName::new("pg1")].into(),
        quorum: 0,
        index: 2,
    });
    let roles = |s: &ClusterSnapshot| rows(s).iter().map(|r| r.role).collect::<Vec<_>>();
    assert_eq!(roles(&snap), ["Leader", "Replica", "Replica"], "mode off");
    snap.cluster.config.sync.enabled = true;
    assert_eq!(roles(&snap), ["Leader", "Sync Standby", "Replica"]);
    if let Some(k) = snap.cluster.sync.as_mut() {
        k.leader = None;
    }
    assert_eq!(
        roles(&snap),
        ["Leader", "Replica", "Replica"],
        "a key with no leader lists nobody"
    );
    // Quorum mode: the voters are quorum standbys.
    if let Some(k) = snap.cluster.sync.as_mut() {
        k.leader = Some(NodeName::new("pg1"));
        k.quorum = 1;
    }
    snap.cluster.config.sync.quorum = true;
    assert_eq!(roles(&snap), ["Leader", "Quorum Standby", "Replica"]);
}

fn replica(conn_url: &str) -> MemberRecord {
    MemberRecord {
        conn_url: conn_url.into(),
        state: "running".into(),
        ..MemberRecord::default()
    }
}

/// patronictl's rule: `host:port` only when some member is off 5432 or two share a host.
#[test]
fn host_shows_the_port_only_when_it_tells_members_apart() {
    let hosts = |urls: &[&str]| {
        let mut snap = ClusterSnapshot::default();
        for (i, u) in urls.iter().enumerate() {
            snap.members.insert(format!("pg{i}"), replica(u));
        }
        rows(&snap).into_iter().map(|r| r.host).collect::<Vec<_>>()
    };
    assert_eq!(
        hosts(&[
            "postgres://u@10.0.0.1:5432/postgres",
            "postgres://10.0.0.2/x"
        ]),
        ["10.0.0.1", "10.0.0.2"]
    );
    assert_eq!(
        hosts(&[
            "postgres://10.0.0.1:5432/postgres",
            "postgres://u:p@h:5433/db?sslmode=require"
        ]),
        ["10.0.0.1:5432", "h:5433"]
    );
    assert_eq!(
        hosts(&["postgres://h:5432/a", "postgres://h:5432/b", ""]),
        ["h:5432", "h:5432", ""]
    );
}

/// patronictl 4.1's columns: received and replayed WAL behind the optime, `unknown` with a blank lag
/// while a position is not published, the old `xlog_location` shown as received while streaming, lags in
/// MB rounded half to even as Python's `round`.
#[test]
fn replicas_show_received_and_replayed_wal_behind_the_optime() {
    use crate::ha::types::Lsn;
    let mut snap = ClusterSnapshot::default();
    snap.cluster.optime = Some(Lsn(0x1_0600_0000));
    let mut a = replica("postgres://a:5432/x");
    a.receive_lsn = Some(0x1_0600_0000 - (5 << 19)); // 2.5 MB behind: 2
    a.replay_lsn = Some(0x1_0600_0000 - (7 << 19)); // 3.5 MB behind: 4
    let mut b = replica("postgres://b:5432/x");
    b.xlog_location = Some(0x1_0580_0000);
    b.replication_state = Some("streaming".into());
    let mut c = replica("postgres://c:5432/x");
    c.xlog_location = Some(0x1_0700_0000);
    snap.members.insert("a".into(), a);
    snap.members.insert("b".into(), b);
    snap.members.insert("c".into(), c);
    snap.members
        .insert("d".into(), replica("postgres://d:5432/x"));
    let p = |lsn: &str, lag_mb: Option<u64>| Position {
        lsn: lsn.into(),
        lag_mb,
    };
    let unknown = p("unknown", None);
    let got: Vec<_> = rows(&snap).into_iter().map(|r| r.positions).collect();
    assert_eq!(
        got,
        [
            Some([p("1/5D80000", Some(2)), p("1/5C80000", Some(4))]),
            Some([p("1/5800000", Some(8)), unknown.clone()]),
            Some([unknown.clone(), p("1/7000000", Some(0))]),
            Some([unknown.clone(), unknown]),
        ]
    );
    let json = row_json("s", &rows(&snap)[0]);
    assert_eq!(json["Receive LSN"], "1/5D80000");
    assert_eq!(json["Replay Lag"], 4);
    let json = row_json("s", &rows(&snap)[3]);
    assert_eq!(json["Replay LSN"], "unknown");
    assert!(
        json.get("Replay Lag").is_none(),
        "a blank lag is left out: {json}"
    );
}

/// patronictl's optional columns show only while some member has a value, and always with `-e`.
#[test]
fn extended_shows_every_optional_column() {
    let mut snap = ClusterSnapshot::default();
    snap.members
        .insert("a".into(), replica("postgres://a:5432/x"));
    let header = |extended: bool| {
        let out = render("b", &snap, &rows(&snap), extended, false);
        out.lines().nth(1).unwrap_or("").to_string()
    };
    assert!(
        header(false).ends_with("| Replay LSN | Lag |"),
        "{}",
        header(false)
    );
    let extended = header(true);
    assert!(
        extended.ends_with(
            "| Lag | Pending restart | Pending restart reason | Scheduled restart | Tags |"
        ),
        "{extended}"
    );
}

#[test]
fn the_title_says_where_bootstrap_stands() {
    let mut snap = ClusterSnapshot::default();
    let title = |s: &ClusterSnapshot| {
        render("b", s, &[], false, false)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert!(title(&snap).starts_with("+ Cluster: b (uninitialized) "));
    snap.cluster.initialize = Some(String::new());
    assert!(title(&snap).starts_with("+ Cluster: b (initializing) "));
    snap.cluster.initialize = Some("pg1".into());
    assert!(
        title(&snap).starts_with("+ Cluster: b (initializing) "),
        "the winner's name"
    );
    snap.cluster.initialize = Some("7268".into());
    assert!(title(&snap).starts_with("+ Cluster: b (7268) "));
}
