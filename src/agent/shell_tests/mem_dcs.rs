//! An in-memory store for the shell's tests: one cluster snapshot, every call logged with its time, and
//! knobs to make a call hang (ignoring its deadline, as a broken adapter would) or be refused.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::dcs::{CasKey, ClusterSnapshot, Dcs, DcsError, MemberRecord, SwitchoverRecord};
use crate::ha::{LeaderKey, NodeName, SessionId};

/// One store call: its name and when it began (ms since the store was made, on tokio's clock).
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub name: &'static str,
    pub at_ms: u64,
}

#[derive(Default)]
pub struct State {
    pub snap: ClusterSnapshot,
    pub calls: Vec<Call>,
    /// Calls (by name) that never answer, and those answered `Conflict`.
    pub hang: BTreeSet<&'static str>,
    pub refuse: BTreeSet<&'static str>,
    /// When a hung call was given up by its caller (ms), by name.
    pub cut: Vec<Call>,
    pub session_ttl_ms: Option<u64>,
    pub members: BTreeMap<String, MemberRecord>,
    /// Past this many calls every call hangs: a test freezes the loop where it wants to look at it.
    pub hang_after_calls: Option<usize>,
}

pub struct MemDcs {
    pub me: NodeName,
    pub origin: Instant,
    pub state: Arc<Mutex<State>>,
}

/// Records when a hung call's future is dropped: the moment its caller gave up on it.
struct Cut(&'static str, Instant, Arc<Mutex<State>>);

impl Drop for Cut {
    fn drop(&mut self) {
        let at_ms = crate::clock::now().duration_since(self.1).as_millis() as u64;
        let call = Call {
            name: self.0,
            at_ms,
        };
        self.2.lock().unwrap().cut.push(call);
    }
}

impl MemDcs {
    pub fn new(me: &str) -> MemDcs {
        MemDcs {
            me: NodeName::new(me),
            origin: crate::clock::now(),
            state: Default::default(),
        }
    }

    pub fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Log `name`; hang or refuse it when told to.
    async fn call(&self, name: &'static str) -> Result<(), DcsError> {
        let at_ms = crate::clock::now().duration_since(self.origin).as_millis() as u64;
        let (hang, refuse) = {
            let mut st = self.st();
            st.calls.push(Call { name, at_ms });
            let frozen = st.hang_after_calls.is_some_and(|n| st.calls.len() > n);
            (st.hang.contains(name) || frozen, st.refuse.contains(name))
        };
        if hang {
            let _cut = Cut(name, self.origin, self.state.clone());
            std::future::pending::<()>().await;
        }
        if refuse {
            return Err(DcsError::Conflict(format!("{name} refused")));
        }
        Ok(())
    }

    fn bump(&self) -> u64 {
        let mut st = self.st();
        st.snap.index += 1;
        st.snap.index
    }
}

#[async_trait]
impl Dcs for MemDcs {
    async fn get_cluster(&self, _: bool, _: Instant) -> Result<ClusterSnapshot, DcsError> {
        self.call("get_cluster").await?;
        Ok(self.st().snap.clone())
    }
    async fn ensure_session(&self, _: Instant) -> Result<SessionId, DcsError> {
        self.call("ensure_session").await?;
        Ok(SessionId("s1".into()))
    }
    async fn renew_session(&self, _: Instant) -> Result<(), DcsError> {
        self.call("renew_session").await
    }
    async fn acquire_leader(&self, _: Instant) -> Result<(), DcsError> {
        self.call("acquire_leader").await?;
        let index = self.bump();
        self.st().snap.cluster.leader = Some(LeaderKey {
            name: self.me.clone(),
            session: Some(SessionId("s1".into())),
            index,
        });
        Ok(())
    }
    async fn renew_leader(&self, _: Instant) -> Result<(), DcsError> {
        self.call("renew_leader").await
    }
    async fn release_leader(&self, _: Instant) -> Result<(), DcsError> {
        self.call("release_leader").await?;
        self.st().snap.cluster.leader = None;
        Ok(())
    }
    async fn publish_member(&self, r: &MemberRecord, _: Instant) -> Result<(), DcsError> {
        self.call("publish_member").await?;
        self.st().members.insert(self.me.to_string(), r.clone());
        Ok(())
    }
    async fn race_initialize(&self, _: &str, _: Instant) -> Result<(), DcsError> {
        self.call("race_initialize").await
    }
    async fn write_initialize(&self, _: &str, _: Instant) -> Result<(), DcsError> {
        self.call("write_initialize").await
    }
    async fn cancel_initialize(&self, _: Instant) -> Result<(), DcsError> {
        self.call("cancel_initialize").await
    }
    async fn write_switchover(&self, _: &SwitchoverRecord, _: Instant) -> Result<(), DcsError> {
        self.call("write_switchover").await
    }
    async fn clear_switchover(&self, _: Instant) -> Result<(), DcsError> {
        self.call("clear_switchover").await
    }
    async fn compare_and_set(
        &self,
        key: CasKey,
        _: String,
        _: Option<u64>,
        _: Instant,
    ) -> Result<(), DcsError> {
        self.call(match key {
            CasKey::Config => "cas_config",
            CasKey::Sync => "write_sync",
        })
        .await
    }
    async fn write_status(&self, _: u64, _: Instant) -> Result<(), DcsError> {
        self.call("write_status").await
    }
    async fn write_history(&self, _: &serde_json::Value, _: Instant) -> Result<(), DcsError> {
        self.call("write_history").await
    }
    async fn write_failsafe(
        &self,
        _: &BTreeMap<String, String>,
        _: Instant,
    ) -> Result<(), DcsError> {
        self.call("write_failsafe").await
    }
    async fn delete_sync(&self, _: u64, _: Instant) -> Result<(), DcsError> {
        self.call("delete_sync").await
    }
    async fn watch_leader(&self, _: u64, _: u64) -> Result<u64, DcsError> {
        std::future::pending().await
    }
    async fn watch_config(&self, _: u64, _: u64) -> Result<u64, DcsError> {
        std::future::pending().await
    }
    fn set_session_ttl(&self, session_ttl_ms: u64) {
        self.st().session_ttl_ms = Some(session_ttl_ms);
    }
    async fn destroy_session(&self, _: Instant) -> Result<(), DcsError> {
        self.call("destroy_session").await
    }
    async fn delete_cluster(&self, _: Instant) -> Result<(), DcsError> {
        self.call("delete_cluster").await
    }
}
