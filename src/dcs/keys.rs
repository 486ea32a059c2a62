//! Patroni's key layout under `service/<scope>/` and the JSON of its values (patroni-compat §2.2).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ha::observation::Cluster;

/// Where each key lives for one scope, under a namespace (`service` by default, as in Patroni).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// `namespace` without slashes at either end, e.g. `service`; `scope` the cluster name.
    pub fn new(namespace: &str, scope: &str) -> Self {
        let ns = namespace.trim_matches('/');
        KeyLayout { prefix: format!("{ns}/{scope}/") }
    }
    /// `service/<scope>/`
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    pub fn leader(&self) -> String {
        format!("{}leader", self.prefix)
    }
    pub fn member(&self, name: &str) -> String {
        format!("{}members/{name}", self.prefix)
    }
    pub fn members_prefix(&self) -> String {
        format!("{}members/", self.prefix)
    }
    pub fn config(&self) -> String {
        format!("{}config", self.prefix)
    }
    pub fn initialize(&self) -> String {
        format!("{}initialize", self.prefix)
    }
    pub fn failover(&self) -> String {
        format!("{}failover", self.prefix)
    }
    pub fn sync(&self) -> String {
        format!("{}sync", self.prefix)
    }
    pub fn history(&self) -> String {
        format!("{}history", self.prefix)
    }
    pub fn status(&self) -> String {
        format!("{}status", self.prefix)
    }
}

/// The `members/<name>` JSON, field for field as Patroni writes it (patroni-compat §2.2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub conn_url: String,
    pub api_url: String,
    pub state: String,
    pub role: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xlog_location: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_lsn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_lsn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_state: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_after_promote: Option<bool>,
}

/// The `failover` key: `{"leader": .., "member": .., "scheduled_at": ..}` (ISO 8601 time).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchoverRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<String>,
}

/// One read of the scope: the core's `Cluster` plus the raw values the REST API and CLI show.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterSnapshot {
    pub cluster: Cluster,
    /// Raw `config` JSON and its modify index (for CAS).
    pub config: Option<(serde_json::Value, u64)>,
    pub members: BTreeMap<String, MemberRecord>,
    pub history: Option<serde_json::Value>,
    pub switchover: Option<SwitchoverRecord>,
    /// The store's index/revision at the time of the read.
    pub index: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_patroni() {
        let k = KeyLayout::new("/service/", "batman");
        assert_eq!(k.leader(), "service/batman/leader");
        assert_eq!(k.member("pg1"), "service/batman/members/pg1");
        assert_eq!(k.config(), "service/batman/config");
        assert_eq!(k.initialize(), "service/batman/initialize");
        assert_eq!(k.failover(), "service/batman/failover");
        assert_eq!(k.status(), "service/batman/status");
    }

    #[test]
    fn member_json_round_trips_with_patroni_field_names() {
        let json = r#"{"conn_url":"postgres://10.0.0.1:5432/postgres","api_url":"http://10.0.0.1:8008/patroni",
            "state":"running","role":"replica","version":"3.0.2","xlog_location":123,"timeline":2,
            "tags":{"nofailover":true}}"#;
        let m: MemberRecord = serde_json::from_str(json).unwrap();
        assert_eq!(m.role, "replica");
        assert_eq!(m.timeline, Some(2));
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(back["api_url"], "http://10.0.0.1:8008/patroni");
        assert_eq!(back["tags"]["nofailover"], true);
    }
}
