//! One read of the scope (`ClusterSnapshot`) and what the core derives from it.
use std::collections::BTreeMap;

use super::records::{
    timeline_from_history, timeline_owner_from_history, MemberRecord, SwitchoverRecord,
};
use crate::ha::observation::Cluster;

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

/// Fill what the core derives from the raw snapshot: whether `config` exists, and the timeline fields.
pub fn fill_derived(snap: &mut ClusterSnapshot) {
    snap.cluster.config.missing = snap.config.is_none();
    fill_timeline(snap);
}

/// Fill the core's `timeline` and `timeline_owner` from the snapshot's `history` (both backends).
pub fn fill_timeline(snap: &mut ClusterSnapshot) {
    snap.cluster.timeline = snap.history.as_ref().and_then(timeline_from_history);
    snap.cluster.timeline_owner = snap.history.as_ref().and_then(timeline_owner_from_history);
}
