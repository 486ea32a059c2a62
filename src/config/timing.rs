//! The timing check: `Timing::validate` per store, with an error that names the settings, the rule and a fix.
use crate::ha::{SessionStore, Timing, TimingError};

use super::ctx::Ctx;
use super::defaults;
use super::error::{ConfigError, Origin};

fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{} s", ms as f64 / 1000.0)
    }
}

/// A concrete change that passes: smaller loop_wait/retry_timeout at this ttl, or a larger ttl.
pub(crate) fn fix(t: &Timing, store: SessionStore) -> String {
    let mut options = Vec::new();
    let (lw, rt) = (defaults::LOOP_WAIT_MS, defaults::RETRY_TIMEOUT_MS);
    if t.retimed(store, t.ttl_ms, lw, rt).validate().is_ok() {
        options.push(format!(
            "keep ttl {} and set loop_wait: {} and retry_timeout: {} (tenure's defaults)",
            secs(t.ttl_ms),
            lw / 1000,
            rt / 1000
        ));
    } else if let Some(x) = (1..=t.ttl_ms / 1000).rev().find(|x| {
        t.retimed(store, t.ttl_ms, x * 1000, x * 1000)
            .validate()
            .is_ok()
    }) {
        options.push(format!(
            "keep ttl {} and set loop_wait: {x} and retry_timeout: {x}",
            secs(t.ttl_ms)
        ));
    }
    if let Some(ttl) = (t.ttl_ms / 1000..=3600).find(|s| {
        t.retimed(store, s * 1000, t.loop_wait_ms, t.retry_timeout_ms)
            .validate()
            .is_ok()
    }) {
        options.push(format!(
            "keep loop_wait and retry_timeout and raise ttl to {ttl}"
        ));
    }
    if options.is_empty() {
        return "Fix: lower tenure.fence_budget or tenure.drift_max_ppm".to_string();
    }
    format!("Fix: {}", options.join(", or "))
}

/// Check `t` for the store and record an error naming the file, the settings and the rule.
pub(crate) fn check(t: &Timing, session_store: SessionStore, ctx: &mut Ctx) {
    let Err(source) = t.validate() else { return };
    let consul = session_store == SessionStore::Consul;
    let store = if consul { "Consul" } else { "etcd" };
    let settings = match &source {
        TimingError::TooSmall { setting, .. } => match *setting {
            "fence_budget" => "tenure.fence_budget".to_string(),
            s => format!("bootstrap.dcs.{s}"),
        },
        TimingError::DriftTooLarge(_) => "tenure.drift_max_ppm".to_string(),
        TimingError::FailsafeCannotLand { .. } => format!(
            "bootstrap.dcs.ttl ({}), loop_wait ({}), retry_timeout ({}), tenure.fence_budget ({}) and \
             tenure.failsafe_timeout",
            secs(t.ttl_ms),
            secs(t.loop_wait_ms),
            secs(t.retry_timeout_ms),
            secs(t.fence_budget_ms)
        ),
        TimingError::LoopTooSlowForTtl { .. } => format!(
            "bootstrap.dcs.ttl ({}), loop_wait ({}) and retry_timeout ({})",
            secs(t.ttl_ms),
            secs(t.loop_wait_ms),
            secs(t.retry_timeout_ms)
        ),
        TimingError::RenewalCannotLand { .. } => format!(
            "bootstrap.dcs.ttl ({}; session TTL {}{}), loop_wait ({}), retry_timeout ({}) and tenure.fence_budget ({})",
            secs(t.ttl_ms),
            secs(t.session_ttl_ms),
            if consul { " = ttl/2 on Consul" } else { "" },
            secs(t.loop_wait_ms),
            secs(t.retry_timeout_ms),
            secs(t.fence_budget_ms)
        ),
    };
    let mut fix = fix(t, session_store);
    if consul && (t.ttl_ms, t.loop_wait_ms, t.retry_timeout_ms) == (30_000, 10_000, 10_000) {
        fix = format!(
            "These are Patroni's defaults: they pass Patroni's rule (loop_wait + 2*retry_timeout <= ttl) but \
             not tenure's, because on Consul a renewal must land within the session TTL (ttl/2). {fix}"
        );
    }
    ctx.errors.push(ConfigError::Timing {
        origin: Origin::File {
            file: ctx.file.to_path_buf(),
            line: None,
        },
        store,
        settings,
        source,
        fix,
    });
}
