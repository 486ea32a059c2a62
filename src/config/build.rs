//! Raw sections become typed settings here, in one place; every problem is collected with its key and a fix.
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::ha::{CoreConfig, NodeName, SessionStore, Timing, WatchdogMode};

use super::ctx::Ctx;
use super::pg::{RewindPolicy, TagValues};
use super::raw::{RawConfig, RawDcs, RawFencer, RawTenure, RawWatchdogModeName, Seconds};
use super::store::{consul, etcd};
use super::sync::BootstrapSync;
use super::{defaults, timing, Config, FencerSettings, Store, WatchdogSettings};

/// `bootstrap.dcs`'s and `tenure`'s durations and switches, read in the order their errors are reported.
struct Durations {
    ttl_ms: u64,
    loop_wait_ms: u64,
    retry_timeout_ms: u64,
    fence_budget_ms: u64,
    drift_max_ppm: u64,
    failsafe_mode: bool,
    sync: BootstrapSync,
    failsafe_set: bool,
    failsafe_timeout_ms: u64,
    primary_start_timeout_ms: u64,
}

/// Build the typed config; `None` when `ctx.errors` says why.
pub(crate) fn build(
    mut raw: RawConfig,
    env: &BTreeMap<String, String>,
    ctx: &mut Ctx,
) -> Option<Config> {
    let (scope, name, namespace) = identity(&mut raw, ctx);
    let bootstrap = raw.bootstrap.take().unwrap_or_default();
    let mut dcs = bootstrap.dcs.unwrap_or_default();
    let tenure = raw.tenure.take().unwrap_or_default();
    let d = durations(&dcs, &tenure, ctx);
    let standby = super::standby::bootstrap_standby(dcs.standby_cluster.take(), ctx);
    let peer_sites = super::sites::bootstrap_peer_sites(dcs.peer_sites.take(), ctx);
    let bootstrap_slots = bootstrap_slots(&mut dcs, ctx);
    let is_consul = store_kind(&raw, ctx);
    let timing = timing(is_consul, &d, ctx);

    let restapi = super::restapi::build(raw.restapi.take(), ctx);
    let log = super::log::build(raw.log.take(), ctx);
    let dcs_pg = dcs.postgresql.take().unwrap_or_default();
    let pg = super::pg::build(&mut raw, dcs_pg, name.as_deref(), &tenure, env, ctx);
    let initdb = super::pg::initdb(bootstrap.initdb.unwrap_or_default(), ctx);
    if let Some(m) = bootstrap.method.filter(|m| m != "initdb") {
        ctx.invalid(
            "bootstrap.method",
            format!("custom bootstrap method {m:?} is not supported"),
            Some("remove it; tenure bootstraps with initdb"),
        );
    }
    let tags = super::pg::tags(raw.tags.take().unwrap_or_default(), ctx);
    let pgbouncer = super::pgbouncer::build(raw.pgbouncer.take(), d.retry_timeout_ms, ctx);
    let watchdog = watchdog(&mut raw, &timing, ctx);
    let fencer = fencer(tenure.fencer.unwrap_or_default(), watchdog.as_ref(), ctx);
    let ids = (scope.as_deref(), name.as_deref(), namespace.as_str());
    let store = store(&mut raw, is_consul, ids, &timing, ctx);
    let maximum_lag_on_failover_bytes = dcs
        .maximum_lag_on_failover
        .unwrap_or(defaults::MAXIMUM_LAG_ON_FAILOVER_BYTES);

    if !ctx.errors.is_empty() {
        return None;
    }
    let (scope, name, store, restapi, (pg, rewind, local_pg), tags, watchdog) =
        (scope?, name?, store?, restapi?, pg?, tags?, watchdog?);
    let mut core = CoreConfig::new(NodeName::new(name.clone()), timing).ok()?;
    core.maximum_lag_on_failover_bytes = maximum_lag_on_failover_bytes;
    core.primary_start_timeout_ms = d.primary_start_timeout_ms;
    core.failsafe_timeout_ms = d.failsafe_timeout_ms;
    local_rules(&mut core, &tags, &rewind, &watchdog);
    core.hooks = local_pg.hooks.configured();
    core.pooler = pgbouncer.is_some();
    core.pooler_chain = pgbouncer.as_ref().is_some_and(|p| p.chain);
    let (bootstrap_standby, standby_json) = standby.unzip();
    core.bootstrap_standby = bootstrap_standby;
    core.bootstrap_peer_sites = peer_sites.clone();
    Some(Config {
        file: ctx.file.to_path_buf(),
        scope,
        namespace,
        store,
        core,
        restapi,
        pg,
        initdb: initdb?,
        tags: tags.all,
        clonefrom: tags.clonefrom,
        watchdog,
        fencer,
        bootstrap_failsafe_mode: d.failsafe_mode,
        bootstrap_sync: d.sync,
        bootstrap_standby: standby_json,
        bootstrap_peer_sites: peer_sites,
        bootstrap_slots,
        local_pg,
        log,
        pgbouncer,
    })
}

/// `scope`, `name` and `namespace` (without slashes at either end).
fn identity(raw: &mut RawConfig, ctx: &mut Ctx) -> (Option<String>, Option<String>, String) {
    let scope = ctx.required(
        raw.scope.take(),
        "scope",
        "name the cluster, e.g. `scope: main`",
    );
    let name = ctx.required(
        raw.name.take(),
        "name",
        "name this member, unique in the cluster, e.g. `name: pg1`",
    );
    let namespace = raw.namespace.take().unwrap_or_else(|| "/service/".into());
    let namespace = namespace.trim_matches('/').to_string();
    if namespace.is_empty() {
        ctx.invalid(
            "namespace",
            "must name a key prefix",
            Some("e.g. `namespace: /service/`"),
        );
    }
    (scope, name, namespace)
}

fn durations(dcs: &RawDcs, tenure: &RawTenure, ctx: &mut Ctx) -> Durations {
    let ttl_ms = ctx.ms(dcs.ttl, "bootstrap.dcs.ttl", defaults::TTL_MS);
    let loop_wait_ms = ctx.ms(
        dcs.loop_wait,
        "bootstrap.dcs.loop_wait",
        defaults::LOOP_WAIT_MS,
    );
    let retry_timeout_ms = ctx.ms(
        dcs.retry_timeout,
        "bootstrap.dcs.retry_timeout",
        defaults::RETRY_TIMEOUT_MS,
    );
    let fence_budget_ms = ctx.ms(
        tenure.fence_budget,
        "tenure.fence_budget",
        defaults::FENCE_BUDGET_MS,
    );
    let drift_max_ppm = tenure.drift_max_ppm.unwrap_or(defaults::DRIFT_MAX_PPM);
    let failsafe_mode = dcs.failsafe_mode.unwrap_or(defaults::FAILSAFE_MODE);
    let sync = super::sync::bootstrap_sync(dcs, ctx);
    let failsafe_timeout_ms = ctx.ms(
        tenure.failsafe_timeout,
        "tenure.failsafe_timeout",
        crate::ha::config::DEFAULT_FAILSAFE_TIMEOUT_MS,
    );
    let primary_start_timeout_ms = ctx.ms(
        dcs.primary_start_timeout,
        "bootstrap.dcs.primary_start_timeout",
        defaults::PRIMARY_START_TIMEOUT_MS,
    );
    Durations {
        ttl_ms,
        loop_wait_ms,
        retry_timeout_ms,
        fence_budget_ms,
        drift_max_ppm,
        failsafe_mode,
        sync,
        failsafe_set: tenure.failsafe_timeout.is_some(),
        failsafe_timeout_ms,
        primary_start_timeout_ms,
    }
}

/// Which store section the file has: `Some(true)` Consul, `Some(false)` etcd, `None` neither or both (an error).
fn store_kind(raw: &RawConfig, ctx: &mut Ctx) -> Option<bool> {
    match (&raw.consul, &raw.etcd3) {
        (Some(_), None) => Some(true),
        (None, Some(_)) => Some(false),
        (Some(_), Some(_)) => {
            ctx.invalid(
                "consul/etcd3",
                "both consul and etcd3 are configured",
                Some("keep exactly one store section"),
            );
            None
        }
        (None, None) => {
            let fix = if raw.etcd.is_some() {
                "add a consul or etcd3 section (etcd's v2 API, the `etcd` section, is not supported: rename it to `etcd3`)"
            } else {
                "add a consul section (e.g. `consul: {host: 127.0.0.1:8500}`) or an etcd3 section"
            };
            ctx.invalid("consul/etcd3", "no store section", Some(fix));
            None
        }
    }
}

/// The one `Timing` (its session TTL derived once, by `Timing::new`), checked against the safety rules.
fn timing(is_consul: Option<bool>, d: &Durations, ctx: &mut Ctx) -> Timing {
    // Without a store section the file is already invalid; etcd's rule stands in so the rest is still checked.
    let session_store = if is_consul == Some(true) {
        SessionStore::Consul
    } else {
        SessionStore::Etcd
    };
    let timing = Timing::new(
        session_store,
        d.ttl_ms,
        d.loop_wait_ms,
        d.retry_timeout_ms,
        d.drift_max_ppm,
        d.fence_budget_ms,
    );
    if is_consul.is_some() {
        timing::check(&timing, session_store, ctx);
    }
    // Only an explicit setting is an error: the default (2 s) is shortened to the room the timing leaves
    // (`CoreConfig::failsafe_round_ms`); failsafe extends nothing only where not even 100 ms fits.
    if let (true, Err(e)) = (
        d.failsafe_set,
        timing.validate_failsafe(d.failsafe_timeout_ms),
    ) {
        ctx.invalid(
            "tenure.failsafe_timeout",
            e.to_string(),
            Some("lower tenure.failsafe_timeout, or raise ttl"),
        );
    }
    timing
}

fn fencer(raw: RawFencer, watchdog: Option<&WatchdogSettings>, ctx: &mut Ctx) -> FencerSettings {
    let fencer = FencerSettings {
        enabled: raw.enabled.unwrap_or(true),
    };
    if raw.fast_stop_timeout.is_some() {
        // Accepted so older files load; the fencer stops PostgreSQL immediately (SIGQUIT) at its deadline.
        ctx.warn(
            "tenure.fencer.fast_stop_timeout",
            "the fencer stops PostgreSQL immediately when the lease deadline passes (remove the key)",
        );
    }
    if !fencer.enabled && watchdog.map(|w| w.mode) != Some(WatchdogMode::Required) {
        ctx.invalid(
            "tenure.fencer.enabled",
            "without the fencer a hung agent leaves a writable primary past its lease",
            Some("keep the fencer, or set `watchdog.mode: required`"),
        );
    }
    fencer
}

/// The store section's settings, once the section, `scope` and `name` are known good.
fn store(
    raw: &mut RawConfig,
    is_consul: Option<bool>,
    (scope, name, namespace): (Option<&str>, Option<&str>, &str),
    timing: &Timing,
    ctx: &mut Ctx,
) -> Option<Store> {
    match (is_consul, scope, name) {
        (Some(true), Some(scope), Some(name)) => {
            let section = raw.consul.take().unwrap_or_default();
            consul(section, scope, namespace, name, timing, ctx).map(Store::Consul)
        }
        (Some(false), Some(scope), Some(name)) => {
            let section = raw.etcd3.take().unwrap_or_default();
            etcd(section, scope, namespace, name, timing, ctx).map(Store::Etcd)
        }
        _ => None,
    }
}

/// The member's own rules the core follows: its tags, the rewind policy, the watchdog.
/// `bootstrap.dcs.slots`, `ignore_slots` and `member_slots_ttl`, checked as the store's `config` key is; the
/// ones set, to upload with the rest of `bootstrap.dcs`.
fn bootstrap_slots(dcs: &mut RawDcs, ctx: &mut Ctx) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    let values = [
        ("slots", dcs.slots.take()),
        ("ignore_slots", dcs.ignore_slots.take()),
        ("member_slots_ttl", dcs.member_slots_ttl.take()),
    ];
    for (key, v) in values {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            continue;
        };
        match super::slots::check(key, &v) {
            Ok(()) => {
                out.insert(key.to_string(), v);
            }
            Err((at, why)) => ctx.invalid(
                &format!("bootstrap.dcs.{at}"),
                why,
                Some("see docs/reference/configuration.md, `slots`"),
            ),
        }
    }
    out
}

fn local_rules(
    core: &mut CoreConfig,
    tags: &TagValues,
    rewind: &RewindPolicy,
    watchdog: &WatchdogSettings,
) {
    core.nofailover = tags.nofailover;
    core.failover_priority = tags.failover_priority;
    core.noloadbalance = tags.noloadbalance;
    core.replicatefrom = tags.replicatefrom.as_deref().map(NodeName::new);
    core.nostream = tags.nostream;
    core.use_pg_rewind = rewind.use_pg_rewind;
    core.remove_data_directory_on_rewind_failure = rewind.on_rewind_failure;
    core.remove_data_directory_on_diverged_timelines = rewind.on_diverged_timelines;
    core.watchdog = watchdog.mode;
}

fn watchdog(raw: &mut RawConfig, timing: &Timing, ctx: &mut Ctx) -> Option<WatchdogSettings> {
    let w = raw.watchdog.take().unwrap_or_default();
    let mode = match w.mode.unwrap_or(RawWatchdogModeName::Automatic) {
        RawWatchdogModeName::Off => WatchdogMode::Off,
        RawWatchdogModeName::Automatic => WatchdogMode::Automatic,
        RawWatchdogModeName::Required => WatchdogMode::Required,
    };
    let safety_margin_ms = match w.safety_margin {
        Some(Seconds(-1.0)) => None,
        other => Some(ctx.ms(other, "watchdog.safety_margin", defaults::SAFETY_MARGIN_MS)),
    };
    let settings = WatchdogSettings {
        mode,
        device: w.device.unwrap_or_else(|| PathBuf::from("/dev/watchdog")),
        safety_margin_ms,
    };
    let timeout_ms = settings.timeout_ms(timing.ttl_ms);
    if mode != WatchdogMode::Off && timeout_ms < timing.loop_wait_ms {
        ctx.invalid(
            "watchdog.safety_margin",
            format!(
                "leaves a watchdog timeout of {timeout_ms} ms (ttl less the margin), shorter than loop_wait \
                 ({} ms): the watchdog would fire between two healthy cycles",
                timing.loop_wait_ms
            ),
            Some("lower safety_margin or raise ttl"),
        );
    }
    Some(settings)
}
