//! etcd's feed of the store mirror (`dcs::mirror`): one Range of the prefix, then one Watch stream from the next
//! revision; a read sends a progress request on that stream, so a frozen etcd is told from a quiet one.
//!
//! A read is confirmed when the answer to its progress request carries a revision R (at least our last write's) up
//! to which the scope's events are applied; when the answer's R is past them (a write elsewhere in etcd moved the
//! revision on, or an event of the scope is still queued behind the answer, which etcd allows without the fix of
//! etcd-io/etcd#15220), a keys-only Range of the scope settles it: the mirror must show the same keys at the same
//! revisions. A compacted or
//! cancelled watch, a broken stream, or a progress request left unanswered start over with a fresh Range and a new
//! stream (see `dcs::mirror` for why a confirmed read is as fresh as a Range).
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions, Watcher};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use super::call::{bounded, non_negative};
use super::{snapshot, EtcdDcs};
use crate::dcs::mirror::{Mirror, Mirrored};
use crate::dcs::{ClusterSnapshot, DcsError};

/// How long the feed waits before starting over after a failure.
const RETRY_MS: u64 = 500;
/// The bound on the feed's own Range and watch creation.
const SETUP_MS: u64 = 5_000;

/// One key of the scope as the feed holds it.
struct Kv {
    value: Vec<u8>,
    mod_revision: i64,
    lease: i64,
}

/// The adapter's side of the mirror.
#[derive(Default)]
pub(super) struct Feed {
    pub mirror: Arc<Mirror>,
    /// The open stream's request half, for progress requests.
    watcher: tokio::sync::Mutex<Option<Watcher>>,
    /// The highest revision any write of ours was acknowledged at.
    written: AtomicU64,
    /// When the last full Range was sent: one is due once per ttl as a safety net.
    full_read_at: StdMutex<Option<Instant>>,
    /// A read found the stream silent: start over.
    restart: Notify,
    /// `run_mirror` runs: without it the mirror is never read.
    running: AtomicBool,
    /// The send time of the last acknowledged lease keep-alive.
    pub renewed_at: StdMutex<Option<Instant>>,
}

impl EtcdDcs {
    /// Note a write acknowledged at `revision` (a response header's): a mirrored read must show it.
    pub(super) fn wrote(&self, header: Option<&etcd_client::ResponseHeader>) {
        if let Some(h) = header {
            self.feed
                .written
                .fetch_max(non_negative(h.revision()), Ordering::SeqCst);
        }
    }

    /// A full Range is due (none yet, or the last over a ttl ago); `get_cluster` then reads the scope.
    pub(super) fn full_read_due(&self) -> bool {
        let ttl = Duration::from_secs(self.ttl_s().max(1) as u64);
        let at = self
            .feed
            .full_read_at
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        !self.feed.running.load(Ordering::Relaxed) || at.is_none_or(|t| t.elapsed() >= ttl)
    }

    pub(super) fn full_read_sent(&self, at: Instant) {
        *self
            .feed
            .full_read_at
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    /// A read from the mirror, confirmed by a progress request answered before `until` (see the module doc).
    /// `None` when it cannot be confirmed in time (the caller reads the scope instead).
    pub(super) async fn mirrored_read(&self, until: Instant) -> Option<ClusterSnapshot> {
        let mark = self.own_member.read_started();
        let written = self.feed.written.load(Ordering::SeqCst);
        let mirror = &self.feed.mirror;
        let asked = {
            let mut w = bounded(until, "progress", self.feed.watcher.lock())
                .await
                .ok()?;
            let w = w.as_mut()?;
            let asked = mirror.ask()?;
            if w.request_progress().await.is_err() {
                self.feed.restart.notify_one(); // the stream is gone: its numbering with it
                return None;
            }
            asked
        };
        let Some(at) = mirror.answer(asked, until).await else {
            debug!("etcd mirror: no progress answer in time; starting the watch over");
            self.next_endpoint();
            self.feed.restart.notify_one();
            return None;
        };
        let (snap, own) = match mirror.applied_to(at.max(written)) {
            Some(m) => m,
            None => self.keys_match(until).await?,
        };
        let own = own.as_ref().map(|(v, o)| (v.as_str(), o.as_str()));
        self.own_member.observed(mark, own);
        Some((*snap).clone())
    }

    /// A full read failed: the mirror's stream may be served by a member that lost its quorum (it answers
    /// progress requests from its own revision, and a Range through it fails), so start it over, on the next
    /// endpoint when there are several. Staleness there is thus bounded by the safety net's period, a ttl.
    pub(super) fn mirror_suspect(&self) {
        self.feed.restart.notify_one();
    }

    /// A keys-only Range of the scope, and the mirror once it shows the same keys at the same revisions.
    async fn keys_match(&self, until: Instant) -> Option<Mirrored> {
        let p = self.layout.prefix();
        let opts = GetOptions::new().with_prefix().with_keys_only();
        let resp = self
            .call(until, "mirror check", |mut c| async move {
                c.get(p, Some(opts)).await
            })
            .await
            .ok()?;
        let at = non_negative(resp.header().map_or(0, |h| h.revision()));
        let keys = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                Some((
                    kv.key_str().ok()?.to_string(),
                    non_negative(kv.mod_revision()),
                ))
            })
            .collect();
        self.feed.mirror.matches(&keys, at, until).await
    }

    /// A full read's key-values: the mirror is confirmed for the leader's check if it shows the same keys.
    pub(super) fn full_read_checks_mirror(&self, kvs: &[(&etcd_client::KeyValue, &str)]) {
        let keys = kvs
            .iter()
            .map(|(kv, key)| (key.to_string(), non_negative(kv.mod_revision())))
            .collect();
        self.feed.mirror.checked(&keys);
    }

    /// The mirror, as this cycle's read confirmed it, shows the leader key holding our name under `lease`.
    pub(super) fn leader_confirmed(&self, lease: i64) -> bool {
        let Some(snap) = self.feed.mirror.confirmed() else {
            return false;
        };
        snap.cluster.leader.as_ref().is_some_and(|l| {
            l.name.as_str() == self.settings.name
                && l.session.as_ref().map(|s| s.0.as_str()) == Some(lease.to_string().as_str())
        })
    }

    /// Feed the mirror until the agent stops: a Range, a watch from the next revision, events applied.
    pub(super) async fn feed_mirror(&self) {
        self.feed.running.store(true, Ordering::Relaxed);
        loop {
            let why = self.feed_once().await;
            self.feed.mirror.down();
            *self.feed.watcher.lock().await = None;
            debug!(error = %why, "etcd mirror: starting over");
            tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
        }
    }

    /// One Range and one watch stream, until the stream ends; returns why it ended.
    async fn feed_once(&self) -> DcsError {
        let setup = crate::clock::now() + Duration::from_millis(SETUP_MS);
        let prefix = self.layout.prefix().to_string();
        let opts = GetOptions::new().with_prefix();
        let p = prefix.as_str();
        let resp = match self
            .call(setup, "mirror range", |mut c| async move {
                c.get(p, Some(opts)).await
            })
            .await
        {
            Ok(r) => r,
            Err(e) => return e,
        };
        let revision = resp.header().map_or(0, |h| h.revision());
        let mut kvs: BTreeMap<String, Kv> = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = kv.key_str().ok()?.to_string();
                let v = Kv {
                    value: kv.value().to_vec(),
                    mod_revision: kv.mod_revision(),
                    lease: kv.lease(),
                };
                Some((key, v))
            })
            .collect();
        self.publish(&kvs, revision);
        let mut c = match self.client(setup).await {
            Ok(c) => c,
            Err(e) => return e,
        };
        let wopts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let (watcher, mut stream) =
            match bounded(setup, "mirror watch", c.watch(p, Some(wopts))).await {
                Ok(Ok(w)) => w,
                Ok(Err(e)) => return self.fail(e),
                Err(e) => return e,
            };
        *self.feed.watcher.lock().await = Some(watcher);
        self.feed.mirror.answered(non_negative(revision), false);
        loop {
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = self.feed.restart.notified() => {
                    return DcsError::Unavailable("a read found the stream silent or the store unreadable".into());
                }
            };
            let msg = match msg {
                Ok(Some(m)) => m,
                Ok(None) => return DcsError::Unavailable("etcd watch stream ended".into()),
                Err(e) => return self.fail(e),
            };
            if msg.canceled() || msg.compact_revision() > 0 {
                return DcsError::Unavailable(format!(
                    "etcd watch cancelled (compacted to {}): {}",
                    msg.compact_revision(),
                    msg.cancel_reason()
                ));
            }
            let at = msg.header().map_or(0, |h| h.revision());
            let progress = msg.events().is_empty();
            if !progress {
                // Applied up to the events' own revision (a delete's kv carries the deletion's).
                let mut applied = 0;
                for ev in msg.events() {
                    let Some(kv) = ev.kv() else { continue };
                    applied = applied.max(kv.mod_revision());
                    let Ok(key) = kv.key_str() else { continue };
                    match ev.event_type() {
                        EventType::Put => {
                            let v = Kv {
                                value: kv.value().to_vec(),
                                mod_revision: kv.mod_revision(),
                                lease: kv.lease(),
                            };
                            kvs.insert(key.to_string(), v);
                        }
                        EventType::Delete => {
                            kvs.remove(key);
                        }
                    }
                }
                self.publish(&kvs, applied);
            }
            self.feed.mirror.answered(non_negative(at), progress);
        }
    }

    /// Build the snapshot of `kvs` at `revision` and hand it to the mirror.
    fn publish(&self, kvs: &BTreeMap<String, Kv>, revision: i64) {
        let entries = kvs.iter().map(|(key, kv)| snapshot::Entry {
            key,
            value: &kv.value,
            mod_revision: kv.mod_revision,
            lease: kv.lease,
        });
        // As a Range of the scope reads it, so a mirrored read equals a full one.
        let Ok(snap) = snapshot::build(self.layout.prefix(), entries, revision) else {
            return;
        };
        let own = kvs.get(&self.member_key).and_then(|kv| {
            let value = std::str::from_utf8(&kv.value).ok()?;
            Some((value.to_string(), kv.lease.to_string()))
        });
        let keys = kvs
            .iter()
            .map(|(k, kv)| (k.clone(), non_negative(kv.mod_revision)))
            .collect();
        self.feed
            .mirror
            .set(snap, own, keys, non_negative(revision));
    }
}
