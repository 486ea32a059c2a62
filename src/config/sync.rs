//! `bootstrap.dcs`'s synchronous-replication keys: checked as Patroni's validator checks them, and carried
//! into the `config` key a new cluster's leader uploads.
use serde_json::{json, Map, Value};

use super::ctx::Ctx;
use super::raw::{RawDcs, Scalar};

/// `synchronous_mode` as the file sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Off,
    /// Priority mode (`on`).
    On,
    /// Patroni 4's quorum commit (`quorum`).
    Quorum,
}

impl SyncMode {
    /// As the `config` key carries it: a boolean, or the word `quorum`.
    fn json(self) -> Value {
        match self {
            SyncMode::Off => json!(false),
            SyncMode::On => json!(true),
            SyncMode::Quorum => json!("quorum"),
        }
    }
}

/// The keys the file set (only those are uploaded; the store's defaults stand for the rest).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BootstrapSync {
    /// `synchronous_mode`.
    pub mode: Option<SyncMode>,
    pub strict: Option<bool>,
    pub node_count: Option<u32>,
    /// Bytes; `-1` is no limit.
    pub maximum_lag_on_syncnode: Option<i64>,
}

impl BootstrapSync {
    /// The keys as the `config` key carries them.
    pub fn json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                out.insert(k.to_string(), v);
            }
        };
        put("synchronous_mode", self.mode.map(SyncMode::json));
        put("synchronous_mode_strict", self.strict.map(|b| json!(b)));
        put("synchronous_node_count", self.node_count.map(|n| json!(n)));
        put(
            "maximum_lag_on_syncnode",
            self.maximum_lag_on_syncnode.map(|n| json!(n)),
        );
        out
    }
}

/// Read the keys from `bootstrap.dcs`; a value the agents could not use is an error naming its key.
pub(crate) fn bootstrap_sync(dcs: &RawDcs, ctx: &mut Ctx) -> BootstrapSync {
    let node_count = dcs
        .synchronous_node_count
        .and_then(|n| match u32::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                ctx.invalid(
                    "bootstrap.dcs.synchronous_node_count",
                    format!("must be at least 1 (got {n})"),
                    Some("the number of synchronous standbys PostgreSQL waits for"),
                );
                None
            }
        });
    let lag = dcs.maximum_lag_on_syncnode.filter(|n| {
        let ok = *n >= -1;
        if !ok {
            ctx.invalid(
                "bootstrap.dcs.maximum_lag_on_syncnode",
                format!("must be -1 (no limit) or a number of bytes (got {n})"),
                None::<&str>,
            );
        }
        ok
    });
    BootstrapSync {
        mode: dcs.synchronous_mode.as_ref().and_then(|m| mode(m, ctx)),
        strict: dcs.synchronous_mode_strict,
        node_count,
        maximum_lag_on_syncnode: lag,
    }
}

fn mode(m: &Scalar, ctx: &mut Ctx) -> Option<SyncMode> {
    match crate::dcs::values::bool_word(&m.0) {
        Some(true) => Some(SyncMode::On),
        Some(false) => Some(SyncMode::Off),
        None if m.0.trim().eq_ignore_ascii_case("quorum") => Some(SyncMode::Quorum),
        None => {
            let other = m.0.trim().to_ascii_lowercase();
            ctx.invalid(
                "bootstrap.dcs.synchronous_mode",
                format!("expected on, off or quorum, got {other:?}"),
                None::<&str>,
            );
            None
        }
    }
}
