//! Standby configuration: `standby.signal` plus a tenure-owned `tenure.recovery.conf` included from postgresql.conf.
use super::{conninfo_quote, guc, process, write_owned, Endpoint, PgError, PgSettings};
use crate::ha::types::NodeName;

/// The recovery include file, relative to the data directory.
///
/// Why an include file rather than `-c` options or `postgresql.auto.conf`:
/// - `-c` options on the command line cannot be changed by a reload, so following a new leader would need a
///   restart; and a postmaster restarted by anyone else (an operator, a crash-restart) must keep following.
/// - `postgresql.auto.conf` belongs to `ALTER SYSTEM`, which rewrites it whole; tenure would fight operators.
/// - A separate file is replaced atomically, reloadable (`primary_conninfo`/`primary_slot_name` on PG13+),
///   and readable back: its `# tenure-upstream:` line tells the probe which member we follow.
pub const RECOVERY_CONF: &str = "tenure.recovery.conf";
const UPSTREAM_MARK: &str = "# tenure-upstream: ";
/// Marks a standby cluster's leader: the line carries the source's fingerprint (`StandbySource::fingerprint`).
const REMOTE_MARK: &str = "# tenure-remote: ";
/// Ends the remote line: the `config` key's index the source was read from.
const CONFIG_INDEX: &str = "config_index=";

/// What a standby follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbyConfig {
    /// `None`: a standby with no upstream (demoted while nothing is known about the leader, or a standby
    /// cluster's leader that only restores from an archive).
    pub upstream: Option<Endpoint>,
    /// The slot to stream from on the upstream (normally `settings.slot_name()`).
    pub slot: Option<String>,
    /// Set for a standby cluster's leader: `upstream` is the remote source, not a member.
    pub remote: Option<RemoteRecovery>,
}

/// A standby cluster's leader's recovery settings besides the connection (Patroni's `standby_cluster` keys).
/// Commands reach this only where the member's file allows them from the store (the executor checks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteRecovery {
    /// Written as the file's remote line with `config_index`; the probe reads them back.
    pub fingerprint: String,
    pub config_index: u64,
    pub restore_command: Option<String>,
    pub archive_cleanup_command: Option<String>,
    pub recovery_min_apply_delay: Option<String>,
}

impl StandbyConfig {
    /// Follow `upstream` through this member's own slot, as Patroni does with `use_slots`.
    pub fn follow(settings: &PgSettings, upstream: Endpoint) -> StandbyConfig {
        StandbyConfig {
            upstream: Some(upstream),
            slot: Some(settings.slot_name()),
            remote: None,
        }
    }
}

/// The text of `tenure.recovery.conf` for a standby. `Err` names what would add a line to the file or
/// break it: the upstream's name and host come from the store.
pub fn render(settings: &PgSettings, cfg: &StandbyConfig) -> Result<String, PgError> {
    let mut text = String::from("# Written by tenure; edits are lost.\n");
    if let Some(remote) = &cfg.remote {
        guc::check_value(&remote.fingerprint).map_err(|why| {
            PgError::State(format!("refusing the standby_cluster source: it {why}"))
        })?;
        text.push_str(&format!(
            "{REMOTE_MARK}{} {CONFIG_INDEX}{}\n",
            remote.fingerprint, remote.config_index
        ));
        text.push_str(&remote_lines(remote)?);
    }
    if let Some(up) = &cfg.upstream {
        if cfg.remote.is_none() {
            guc::check_member_name(up.name.as_str()).map_err(|why| {
                PgError::State(format!(
                    "refusing to follow {:?}: its name {why}",
                    up.name.as_str()
                ))
            })?;
            text.push_str(&format!("{UPSTREAM_MARK}{}\n", up.name));
        }
        // The password sits in this 0600 file, as Patroni writes it into postgresql.conf: the WAL receiver
        // reconnects on its own, long after any pgpass file we generated might have changed.
        let mut conninfo = format!(
            "host={} port={} user={} password={} application_name={}",
            conninfo_quote(&up.host),
            up.port,
            conninfo_quote(&settings.replication.username),
            conninfo_quote(&settings.replication.password),
            conninfo_quote(settings.name.as_str()),
        );
        // The replication section's TLS settings, passphrase included: this file is 0600, like the password.
        for (k, v) in settings.replication.ssl.libpq_keywords(true) {
            conninfo.push_str(&format!(" {k}={}", conninfo_quote(&v)));
        }
        let refuse = |why| PgError::State(format!("refusing to follow {}: {why}", up.name));
        text.push_str(&guc::line("primary_conninfo", &conninfo).map_err(refuse)?);
        if let Some(slot) = &cfg.slot {
            text.push_str(&guc::line("primary_slot_name", slot).map_err(refuse)?);
        }
    } else {
        text.push_str("primary_conninfo = ''\nprimary_slot_name = ''\n");
    }
    text.push_str("recovery_target_timeline = 'latest'\n");
    Ok(text)
}

/// `restore_command`, `archive_cleanup_command`, `recovery_min_apply_delay` of a standby cluster's source,
/// each through the config file's grammar (they come from the store).
fn remote_lines(remote: &RemoteRecovery) -> Result<String, PgError> {
    let mut text = String::new();
    for (name, value) in [
        ("restore_command", &remote.restore_command),
        ("archive_cleanup_command", &remote.archive_cleanup_command),
        ("recovery_min_apply_delay", &remote.recovery_min_apply_delay),
    ] {
        if let Some(v) = value {
            let line = guc::line(name, v).map_err(|why| {
                PgError::State(format!("refusing the standby_cluster source: {why}"))
            })?;
            text.push_str(&line);
        }
    }
    Ok(text)
}

/// Make the next start a standby: write the recovery file and `standby.signal`.
pub fn configure_standby(settings: &PgSettings, cfg: &StandbyConfig) -> Result<(), PgError> {
    write_owned(
        settings,
        &settings.data_path(RECOVERY_CONF),
        &render(settings, cfg)?,
        0o600,
    )?;
    write_owned(settings, &settings.data_path("standby.signal"), "", 0o600)
}

/// Make the next start a primary: no signal files, and no upstream left in the recovery file.
pub fn configure_primary(settings: &PgSettings) -> Result<(), PgError> {
    for signal in ["standby.signal", "recovery.signal"] {
        match std::fs::remove_file(settings.data_path(signal)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(PgError::io(format!("remove {signal}"))(e)),
        }
    }
    let text = "# Written by tenure; this node was last configured as a primary.\n";
    write_owned(settings, &settings.data_path(RECOVERY_CONF), text, 0o600)
}

/// Point a running standby at a new upstream: rewrite the file, then `pg_ctl reload`. The WAL receiver
/// restarts with the new `primary_conninfo` (PG13+), no restart needed.
pub async fn reconfigure_upstream(
    settings: &PgSettings,
    cfg: &StandbyConfig,
) -> Result<(), PgError> {
    configure_standby(settings, cfg)?;
    process::reload(settings).await
}

/// The member the recovery file says we follow, if any.
pub fn configured_upstream(settings: &PgSettings) -> Option<NodeName> {
    let text = std::fs::read_to_string(settings.data_path(RECOVERY_CONF)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(UPSTREAM_MARK))
        .map(|n| NodeName::new(n.trim()))
}

/// The standby-cluster source the recovery file was written for (its fingerprint), if any.
pub fn configured_remote(settings: &PgSettings) -> Option<crate::ha::RemoteFollow> {
    let text = std::fs::read_to_string(settings.data_path(RECOVERY_CONF)).ok()?;
    remote_of(&text)
}

/// The remote line of a recovery file's text.
fn remote_of(text: &str) -> Option<crate::ha::RemoteFollow> {
    let line = text.lines().find_map(|l| l.strip_prefix(REMOTE_MARK))?;
    let (fingerprint, index) = line.trim().rsplit_once(&format!(" {CONFIG_INDEX}"))?;
    Some(crate::ha::RemoteFollow {
        fingerprint: fingerprint.to_string(),
        config_index: index.parse().ok()?,
    })
}

/// Whether `standby.signal` is present (the next start is a standby).
pub fn is_standby_configured(settings: &PgSettings) -> bool {
    settings.data_path("standby.signal").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> PgSettings {
        let creds = |u: &str, p: &str| super::super::Credentials {
            username: u.into(),
            password: p.into(),
            ssl: Default::default(),
        };
        PgSettings {
            name: "node-1".into(),
            bin_dir: "/bin".into(),
            data_dir: "/nonexistent".into(),
            listen_host: "*".into(),
            listen_port: 5432,
            connect_address: "10.0.0.1:5432".into(),
            use_unix_socket: false,
            superuser: creds("postgres", "x"),
            replication: creds("repl", r"it's\secret"),
            rewind: creds("rewind", "y"),
            parameters: Default::default(),
            pg_hba: Vec::new(),
            run_as: None,
            pgpass_path: "/nonexistent/pgpass".into(),
            log_file: "/nonexistent/log".into(),
            pg_ctl_timeout_s: 10,
        }
    }

    #[test]
    fn a_standby_file_names_its_upstream_slot_and_quotes_twice() {
        let s = settings();
        let up = Endpoint {
            name: "node-0".into(),
            host: "10.0.0.2".into(),
            port: 5433,
        };
        let text = render(&s, &StandbyConfig::follow(&s, up)).unwrap();
        assert!(text.contains("# tenure-upstream: node-0\n"));
        // conninfo quoting ('it\'s\\secret') inside GUC quoting ('' and \\ doubled).
        assert!(text.contains(r"password=''it\\''s\\\\secret''"), "{text}");
        assert!(text.contains("application_name=''node-1''"));
        assert!(text.contains("primary_slot_name = 'node_1'\n"));
        assert!(text.contains("recovery_target_timeline = 'latest'\n"));
        let none = render(
            &s,
            &StandbyConfig {
                upstream: None,
                slot: None,
                remote: None,
            },
        )
        .unwrap();
        assert!(none.contains("primary_conninfo = ''\n") && !none.contains(UPSTREAM_MARK));
    }

    #[test]
    fn a_standby_leader_file_follows_the_remote_source_and_says_so() {
        let s = settings();
        let remote = RemoteRecovery {
            fingerprint: "host=10.1.0.5 port=5433 slot=site_b".into(),
            config_index: 42,
            restore_command: Some("cp /archive/%f '%p'".into()),
            archive_cleanup_command: None,
            recovery_min_apply_delay: Some("5min".into()),
        };
        let cfg = StandbyConfig {
            upstream: Some(Endpoint {
                name: "standby_cluster".into(),
                host: "10.1.0.5".into(),
                port: 5433,
            }),
            slot: Some("site_b".into()),
            remote: Some(remote.clone()),
        };
        let text = render(&s, &cfg).unwrap();
        assert!(
            !text.contains(UPSTREAM_MARK),
            "no member is followed: {text}"
        );
        assert!(text.contains("host=''10.1.0.5'' port=5433"), "{text}");
        assert!(text.contains("primary_slot_name = 'site_b'\n"));
        assert!(
            text.contains("restore_command = 'cp /archive/%f ''%p'''\n"),
            "{text}"
        );
        assert!(text.contains("recovery_min_apply_delay = '5min'\n"));
        assert_eq!(
            remote_of(&text),
            Some(crate::ha::RemoteFollow {
                fingerprint: remote.fingerprint.clone(),
                config_index: 42,
            })
        );
        // A command from the store that would add a line to the file is refused, not written.
        let mut hostile = cfg.clone();
        hostile.remote = Some(RemoteRecovery {
            restore_command: Some("true'\narchive_command = 'curl evil".into()),
            ..remote
        });
        assert!(render(&s, &hostile).is_err());
    }

    #[test]
    fn a_standby_file_carries_the_replication_tls_settings() {
        let mut s = settings();
        s.replication.ssl = crate::pg::tls::SslSettings {
            mode: Some(crate::pg::tls::SslMode::VerifyCa),
            rootcert: Some("/etc/ca's.pem".into()),
            password: Some("pass".into()),
            ..Default::default()
        };
        let up = Endpoint {
            name: "node-0".into(),
            host: "10.0.0.2".into(),
            port: 5433,
        };
        let text = render(&s, &StandbyConfig::follow(&s, up)).unwrap();
        assert!(
            text.contains(
                r"sslmode=''verify-ca'' sslpassword=''pass'' sslrootcert=''/etc/ca\\''s.pem''"
            ),
            "{text}"
        );
    }
}
