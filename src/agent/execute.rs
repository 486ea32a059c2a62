//! The executor: the one place an `Action` becomes I/O. It translates; it never decides.
//! What an action finds (peer probes, a divergence verdict, failsafe answers) it returns, for the next
//! observation (`cycle::Found`); nothing is parked here between cycles.
//!
//! One translation does a little more than one call: `WriteHistory` appends Patroni's history line to the `history`
//! key. `CheckDivergence` is a pure read. A replica's start (`pg::ctl::start`) raises the hot-standby minimums to the
//! primary's values from `pg_controldata`, as Patroni does. A replica streams through its own physical slot
//! (Patroni's naming) on its upstream: the executor creates it there, if absent, as part of starting, following,
//! cloning or rewinding towards that upstream (and streams without it if the upstream cannot take it right now);
//! `max_slot_wal_keep_size` bounds what the slot of an absent member keeps.
//!
//! Every local step has a bound; a step past it is `Failed` with a message naming the step and the bound
//! (`PgError::StepTimeout`, "CHECKPOINT did not finish within 60000 ms"), and what it started is killed (each binary
//! runs in a process group of its own: `pg::process`). `pg_ctl_timeout` (`PgSettings::local_step_timeout_ms`) bounds
//! `pg_ctl start`/`stop`/`promote`, `pg_controldata`, `CHECKPOINT` (before a graceful stop, and after a promotion),
//! the bootstrap's role statements and the rewind source's checks. Single-user crash recovery has an hour
//! (`crash_recovery_timeout_ms`, or `pg_ctl_timeout` if longer: it replays all WAL since the last checkpoint, and one
//! killed at its bound starts over, so a short bound could keep a member from ever rejoining; Patroni waits without
//! one). `REMOTE_STEP_TIMEOUT_MS` (5 s) bounds the divergence check's history queries to the leader (a timeout leaves
//! the check `Unknown`, retried after `loop_wait / 5`); creating our slot upstream has 2 s. `pg_ctl stop` and
//! `promote` run with `-W` and the shell polls for the outcome every 5-10 ms, where `pg_ctl -w` polls every 100 ms.
//!
//! Jobs (bootstrap, clone, rewind, re-clone) run as tasks the core sees as `JobStatus`, and no job runs forever: past
//! `Executor::job_timeout_ms` (`JOB_TIMEOUT_MS`, 6 h: copying a large database takes hours, so the bound only ends a
//! job that hangs, a source that lets us in and never answers, which no TCP keep-alive notices) its processes are
//! killed (a clone's partial copy removed, as after a failed `pg_basebackup`) and the core sees `Finished(job,
//! Failed(..))`, which it handles as any failed job. `tests/pg_deadlines.rs` shows a hung `CHECKPOINT`, hung history
//! queries and a hung clone ending at their bounds, with nothing left running.
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::dcs::{ClusterSnapshot, Dcs, DcsError, MemberRecord, SwitchoverRecord};
use crate::ha::{
    Action, Divergence, Job, JobResult, JobStatus, NodeName, Outcome, PeerProbe, PgState,
    SyncNames, Timeline,
};
use crate::pg::recovery::StandbyConfig;
use crate::pg::{self, Endpoint, PgSettings};

use super::cycle::Found;
use super::fence::Fence;
use super::watchdog::Watchdog;

/// The bound of a background job. A clone or a rewind copies data, so no short bound fits them all; this one
/// only makes sure a job that hangs (a source that accepts and never answers: no TCP keep-alive notices
/// that) cannot hold the node out of the cluster for good. The job's short steps have bounds of their own.
pub const JOB_TIMEOUT_MS: u64 = 6 * 3_600_000;

/// Everything the executor acts on, and what it brings back for the next observation.
pub struct Executor {
    pub dcs: Arc<dyn Dcs>,
    pub pg: PgSettings,
    pub fence: Fence,
    /// Set to the fence's deadline when `watchdog.mode` is not off (the runtime installs it).
    pub watchdog: Watchdog,
    pub initdb: pg::ctl::InitdbOptions,
    /// The dynamic settings the leader uploads when the store has no `config` key.
    pub bootstrap_config: serde_json::Value,
    /// The last good store snapshot, and the member records seen (a dead leader's key vanishes, but it
    /// must still be probed and rewound from; the longest departed are forgotten past a cap).
    pub snapshot: Option<ClusterSnapshot>,
    pub seen: super::seen::SeenMembers,
    /// Who we are in a failsafe round (the runtime fills it in from the config).
    pub failsafe: super::peers::FailsafePoster,
    /// For requests to the other members' REST APIs (`peers::client`; the runtime installs it).
    pub peer_client: reqwest::Client,
    /// Callbacks, `pre_promote`, `before_stop` (the runtime installs the configured commands).
    pub hooks: super::hooks::HookRunner,
    /// The local PgBouncer, when `pgbouncer:` is configured (the runtime installs it).
    pub pgbouncer: Option<crate::pgbouncer::PgBouncer>,
    /// tenure's `synchronous_standby_names` in synchronous mode, kept over the operator's in `pg`.
    pub(crate) sync_names: super::sync_names::OwnedSyncNames,
    /// How long a job (bootstrap, clone, rewind, re-clone) may run: past it, its processes are killed and
    /// the core sees it `Failed` with the bound in its message (`JOB_TIMEOUT_MS` unless a test sets it).
    pub job_timeout_ms: u64,
    /// `postgresql.parameters_from_store_allowed`: a standby cluster's `restore_command` and
    /// `archive_cleanup_command` are taken from the store only when named here (or equal to the file's own).
    pub commands_from_store: std::collections::BTreeSet<String>,
    job: Option<(Job, JoinHandle<Result<(), String>>)>,
    finished: Option<(Job, JobResult)>,
}

impl Executor {
    /// `Action::SetSyncNames`, tenure's value kept over the operator's (`sync_names.rs`).
    pub(crate) async fn set_sync_names(&mut self, names: &SyncNames, deadline: Instant) -> Outcome {
        let sync_mode = self
            .snapshot
            .as_ref()
            .is_some_and(|s| s.cluster.config.sync.enabled);
        let job_running = self.job_running();
        self.sync_names
            .apply(&mut self.pg, names, sync_mode, job_running, deadline)
            .await
    }

    /// Run with new settings (the store's `config` key applied), tenure's value kept over them.
    pub fn set_pg(&mut self, pg: PgSettings) {
        self.pg = self.sync_names.over(pg);
    }

    /// Once after the agent starts: keep a value of tenure's form the running server has (`sync_names.rs`).
    pub fn adopt_sync_names(&mut self, pg: &PgState) {
        self.sync_names.adopt_running(pg, &mut self.pg);
    }

    pub fn new(dcs: Arc<dyn Dcs>, pg: PgSettings, initdb: pg::ctl::InitdbOptions) -> Executor {
        let fence = Fence::new(&pg.data_dir);
        let mut sync_names = super::sync_names::OwnedSyncNames::default();
        let pg = sync_names.over(pg);
        Executor {
            dcs,
            pg,
            fence,
            watchdog: Watchdog::new(crate::config::WatchdogSettings {
                mode: crate::ha::WatchdogMode::Off,
                device: "/dev/watchdog".into(),
                safety_margin_ms: None,
            }),
            initdb,
            commands_from_store: Default::default(),
            bootstrap_config: serde_json::json!({}),
            snapshot: None,
            seen: Default::default(),
            failsafe: Default::default(),
            // Replaced by `peers::client` at start; never a client that honours HTTP(S)_PROXY.
            peer_client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_default(),
            hooks: Default::default(),
            pgbouncer: None,
            sync_names,
            job_timeout_ms: JOB_TIMEOUT_MS,
            job: None,
            finished: None,
        }
    }

    /// The job slot as the core sees it; a finished job is reported once.
    pub fn job_status(&mut self) -> JobStatus {
        if let Some((job, handle)) = &self.job {
            if !handle.is_finished() {
                return JobStatus::Running(job.clone());
            }
            let (job, handle) = self.job.take().expect("checked above");
            let result = match futures_now(handle) {
                Some(Ok(())) => JobResult::Ok,
                Some(Err(e)) => JobResult::Failed(e),
                None => JobResult::Failed("the job panicked".into()),
            };
            self.finished = Some((job, result));
        }
        match self.finished.take() {
            Some((job, result)) => JobStatus::Finished(job, result),
            None => JobStatus::Idle,
        }
    }

    pub fn job_running(&self) -> bool {
        self.job.as_ref().is_some_and(|(_, h)| !h.is_finished())
    }

    /// Run one action, bounded by `deadline` for store calls; with what it found, if it is a read.
    pub async fn run(&mut self, action: &Action, deadline: Instant) -> (Outcome, Option<Found>) {
        match action {
            Action::CheckDivergence { leader } => {
                let d = self.check_divergence(leader).await;
                (Outcome::Done, Some(Found::Divergence(d)))
            }
            Action::ProbePeers => (Outcome::Done, Some(Found::Peers(self.probe_peers().await))),
            Action::ProbeSites(urls) => {
                let found = super::peers::probe_sites(&self.peer_client, urls).await;
                (Outcome::Done, Some(Found::Sites(found)))
            }
            Action::PostFailsafe {
                members,
                timeout_ms,
            } => {
                let (client, me) = (&self.peer_client, &self.failsafe);
                let replies = super::peers::post_failsafe(client, members, me, *timeout_ms).await;
                let missing: Vec<String> = replies
                    .iter()
                    .filter(|r| !r.accepted)
                    .map(|r| r.name.to_string())
                    .collect();
                let outcome = if missing.is_empty() {
                    Outcome::Done
                } else {
                    Outcome::Failed(format!("not confirmed by {}", missing.join(", ")))
                };
                (outcome, Some(Found::FailsafeReplies(replies)))
            }
            other => (self.act(other, deadline).await, None),
        }
    }

    /// Our timeline against `leader`'s history: a read (the core asked for `RecoverCrashed` first when
    /// pg_control needed it).
    async fn check_divergence(&self, leader: &NodeName) -> Divergence {
        let Some(ep) = self.endpoint(leader) else {
            return Divergence::Unknown {
                leader: leader.clone(),
                why: "no conn_url known".to_string(),
            };
        };
        let d = pg::rewind::check_divergence(&self.pg, &ep).await;
        if let Divergence::Unknown { why, .. } = &d {
            tracing::info!(%leader, %why, "divergence unknown");
        }
        d
    }

    /// Every member seen (the departed up to a cap), asked over REST (or PostgreSQL) what it is.
    async fn probe_peers(&self) -> Vec<PeerProbe> {
        let members: Vec<(String, MemberRecord)> = self
            .seen
            .iter()
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect();
        let creds = self.pg.superuser.clone();
        super::peers::probe_all(&self.peer_client, &members, &self.pg.name, creds).await
    }

    /// Every action that finds nothing but its outcome.
    async fn act(&mut self, action: &Action, deadline: Instant) -> Outcome {
        // The deadline holds even for a store call that overruns it: a hung renewal never delays the fence.
        match tokio::time::timeout_at(deadline, self.store_act(action, deadline)).await {
            Ok(Some(outcome)) => outcome,
            Ok(None) => self.local_act(action, deadline).await,
            Err(_) => Outcome::Unknown,
        }
    }

    /// PostgreSQL, jobs, hooks, the fence and the pooler: every action but reads and store writes.
    async fn local_act(&mut self, action: &Action, deadline: Instant) -> Outcome {
        match action {
            Action::SetSyncNames(names) => self.set_sync_names(names, deadline).await,
            // Best effort (`Action::blocks_on_failure`): a failed change is logged and looked at next cycle.
            Action::SyncSlots(changes) => {
                let apply = pg::slots::apply(&self.pg, changes);
                match tokio::time::timeout_at(deadline, apply).await {
                    Ok(Ok(())) => Outcome::Done,
                    Ok(Err(why)) => Outcome::Failed(why),
                    Err(_) => Outcome::Unknown,
                }
            }
            Action::StartReplica { upstream } => {
                let cfg = self.standby_config(upstream.as_ref()).await;
                self.start_standby(&cfg).await
            }
            Action::StartStandbyLeader(source) => {
                let cfg = self.remote_config(source);
                self.start_standby(&cfg).await
            }
            Action::FollowRemote(source) => {
                let cfg = self.remote_config(source);
                local(pg::recovery::reconfigure_upstream(&self.pg, &cfg)).await
            }
            Action::StartPrimary => {
                local(async {
                    pg::recovery::configure_primary(&self.pg)?;
                    pg::ctl::start(&self.pg).await
                })
                .await
            }
            Action::Follow { upstream } => {
                let cfg = self.standby_config(upstream.as_ref()).await;
                local(pg::recovery::reconfigure_upstream(&self.pg, &cfg)).await
            }
            Action::Promote => local(pg::ctl::promote(&self.pg)).await,
            Action::Stop { mode } => {
                local(async { pg::ctl::stop(&self.pg, *mode).await.map(|_| ()) }).await
            }
            Action::Checkpoint => local(pg::ctl::checkpoint(&self.pg)).await,
            // PostgreSQL cannot even run in single-user mode: a failed start, as far as the core's
            // back-off goes.
            Action::RecoverCrashed => match pg::ctl::ensure_clean_shutdown(&self.pg).await {
                Ok(()) => Outcome::Done,
                Err(e) => {
                    Outcome::Failed(format!("crash recovery in single-user mode failed: {e}"))
                }
            },
            Action::StartJob(job) => self.start_job(job.clone()).await,
            Action::Callback { event, role } => {
                self.hooks.callback(*event, *role);
                Outcome::Done
            }
            Action::PrePromote => match self.hooks.pre_promote(deadline).await {
                Ok(()) => Outcome::Done,
                Err(why) => Outcome::Failed(why),
            },
            Action::BeforeStop => {
                self.hooks.before_stop(deadline).await;
                Outcome::Done
            }
            Action::ArmFence { deadline } => {
                if let Err(e) = self.fence.arm(*deadline) {
                    return Outcome::Failed(e.to_string());
                }
                // `required`: no watchdog, no leading (the core stops at this failed action).
                match self.watchdog.arm(*deadline, crate::clock::monotonic()) {
                    Ok(()) => Outcome::Done,
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
            Action::DisarmFence => {
                if let Err(e) = self.watchdog.disarm() {
                    // The driver may still fire (and reset the host): a human must look.
                    tracing::error!(error = %e, "could not stop the watchdog");
                }
                fence(self.fence.disarm())
            }
            Action::PoolerPause | Action::PoolerRoute { .. } => self.pooler(action, deadline).await,
            Action::Exit => {
                self.fence.stop_process();
                Outcome::Done
            }
            Action::CheckDivergence { .. }
            | Action::ProbePeers
            | Action::ProbeSites(_)
            | Action::PostFailsafe { .. } => {
                unreachable!("a read is run by Executor::run")
            }
            _ => unreachable!("a store write is run by Executor::store_act"),
        }
    }

    /// Start PostgreSQL as a standby following `cfg`.
    async fn start_standby(&self, cfg: &StandbyConfig) -> Outcome {
        local(async {
            pg::recovery::configure_standby(&self.pg, cfg)?;
            pg::ctl::start(&self.pg).await
        })
        .await
    }

    /// Stream from `upstream` through our own slot there (created if absent). If the slot cannot be made
    /// right now (the upstream is busy or just promoted), stream without it rather than not at all.
    async fn standby_config(&self, upstream: Option<&NodeName>) -> StandbyConfig {
        let Some(ep) = upstream.and_then(|u| self.endpoint(u)) else {
            return StandbyConfig {
                upstream: None,
                slot: None,
                remote: None,
            };
        };
        let slot = self.pg.slot_name();
        let ensure = pg::slots::ensure_on(&ep, &self.pg.superuser, &slot);
        let made = matches!(
            tokio::time::timeout(std::time::Duration::from_secs(2), ensure).await,
            Ok(Ok(()))
        );
        if !made {
            tracing::warn!(upstream = %ep.name, %slot, "could not create our replication slot upstream; streaming without it");
        }
        StandbyConfig {
            upstream: Some(ep),
            slot: made.then_some(slot),
            remote: None,
        }
    }

    /// A step on the local PgBouncer; a failure is logged here and reported (the core counts it, the REST API
    /// shows it) and does not stop the plan (`Action::blocks_on_failure`).
    async fn pooler(&self, action: &Action, deadline: Instant) -> Outcome {
        let Some(pb) = &self.pgbouncer else {
            // Only a configured `pgbouncer:` section makes the core ask for these.
            return Outcome::Failed("no pgbouncer section configured".into());
        };
        let result = match action {
            Action::PoolerRoute { to } => {
                let ep = if *to == self.pg.name {
                    Endpoint::from_conn_url(to.clone(), &self.pg.conn_url()).ok()
                } else if pb.settings.chain {
                    // The leader's PgBouncer: its host, and the port its tag names (else ours).
                    self.endpoint(to).map(|mut ep| {
                        let tag = self.seen.get(to.as_str()).and_then(|r| {
                            let v = r.tags.get(crate::pgbouncer::PORT_TAG)?;
                            v.as_u64().or_else(|| v.as_str()?.parse().ok())
                        });
                        ep.port = tag
                            .and_then(|p| u16::try_from(p).ok())
                            .unwrap_or(pb.settings.port);
                        ep
                    })
                } else {
                    self.endpoint(to)
                };
                match ep {
                    None => Err(format!("no conn_url known for {to}")),
                    Some(ep) => match crate::pgbouncer::Target::new(&ep.host, ep.port) {
                        Ok(t) => pb.route(&t, deadline).await.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    },
                }
            }
            _ => pb.pause(deadline).await.map_err(|e| e.to_string()),
        };
        match result {
            Ok(()) => {
                tracing::info!(?action, "PgBouncer step done");
                Outcome::Done
            }
            Err(why) => {
                tracing::warn!(?action, error = %why, "PgBouncer step failed; the handover goes on without it");
                Outcome::Failed(why)
            }
        }
    }

    fn endpoint(&self, name: &NodeName) -> Option<Endpoint> {
        let rec = self.seen.get(name.as_str())?;
        Endpoint::from_conn_url(name.clone(), &rec.conn_url).ok()
    }

    /// The `history` value with a line for the switch to `tl` (Patroni's `[tl-1, lsn, reason, time, leader]`).
    pub(super) fn history_with(&self, tl: Timeline) -> serde_json::Value {
        let mut lines = self
            .snapshot
            .as_ref()
            .and_then(|s| s.history.clone())
            .and_then(|h| h.as_array().cloned())
            .unwrap_or_default();
        let lsn = self
            .seen
            .get(self.pg.name.as_str())
            .and_then(|r| r.xlog_location)
            .unwrap_or(0);
        lines.push(serde_json::json!([
            tl.0.saturating_sub(1),
            lsn,
            "no recovery target specified",
            crate::clock::wall_s(),
            self.pg.name.as_str()
        ]));
        serde_json::Value::Array(lines)
    }

    async fn start_job(&mut self, job: Job) -> Outcome {
        if self.job_running() {
            return Outcome::Failed("another job is running".into());
        }
        let pg = self.pg.clone();
        let initdb = self.initdb.clone();
        let source = match &job {
            Job::Bootstrap => None,
            Job::CloneRemote(source) => Some(self.remote_config(source)),
            Job::Clone { from } | Job::Rewind { from } | Job::Reinit { from } => {
                if self.endpoint(from).is_none() {
                    return Outcome::Failed(format!("no conn_url known for {from}"));
                }
                Some(self.standby_config(Some(from)).await)
            }
        };
        let kind = job.clone();
        let timeout_ms = self.job_timeout_ms;
        let handle = tokio::spawn(async move {
            let work = async {
                match (
                    &kind,
                    source.and_then(|cfg| cfg.upstream.clone().map(|ep| (ep, cfg))),
                ) {
                    (Job::Bootstrap, _) => pg::ctl::bootstrap(&pg, &initdb).await,
                    (Job::Clone { .. } | Job::CloneRemote(_), Some((ep, cfg))) => {
                        pg::ctl::basebackup(&pg, &ep, &cfg).await
                    }
                    (Job::Rewind { .. }, Some((ep, cfg))) => {
                        pg::rewind::run_rewind(&pg, &ep, &cfg).await.map(|_| ())
                    }
                    (Job::Reinit { .. }, Some((ep, cfg))) => pg::ctl::reinit(&pg, &ep, &cfg).await,
                    _ => Ok(()),
                }
            };
            let bound = std::time::Duration::from_millis(timeout_ms);
            match tokio::time::timeout(bound, work).await {
                Ok(result) => result.map_err(|e| e.to_string()),
                Err(_) => {
                    if matches!(
                        kind,
                        Job::Clone { .. } | Job::CloneRemote(_) | Job::Reinit { .. }
                    ) {
                        // As after a failed pg_basebackup: the partial copy goes, so a retry starts empty.
                        if let Err(e) = pg::ctl::remove_data_dir_contents(&pg) {
                            tracing::warn!(error = %e, "could not remove a timed-out clone's partial copy");
                        }
                    }
                    Err(format!("{kind} did not finish within {timeout_ms} ms"))
                }
            }
        });
        self.job = Some((job, handle));
        Outcome::Done
    }

    /// Remember a fresh snapshot and its member records.
    pub fn remember(&mut self, snap: &ClusterSnapshot) {
        self.seen.remember(&snap.members);
        self.snapshot = Some(snap.clone());
    }

    /// Write a switchover request (the CLI and REST control path use the same translation).
    pub async fn write_switchover(
        &self,
        rec: &SwitchoverRecord,
        deadline: Instant,
    ) -> Result<(), DcsError> {
        self.dcs.write_switchover(rec, deadline).await
    }
}

/// A finished task's result without awaiting (the caller checked `is_finished`).
fn futures_now(handle: JoinHandle<Result<(), String>>) -> Option<Result<(), String>> {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let mut handle = handle;
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::Pin::new(&mut handle).poll(&mut cx) {
        Poll::Ready(Ok(r)) => Some(r),
        _ => None,
    }
}

async fn local(f: impl std::future::Future<Output = Result<(), pg::PgError>>) -> Outcome {
    match f.await {
        Ok(()) => Outcome::Done,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

fn fence(r: Result<(), super::fence::FenceError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Done,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}
