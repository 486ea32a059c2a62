//! The operator commands, as patronictl has them: `list`, `topology`, `history`, `show-config` and `dsn`
//! read the store through the `Dcs` adapter; `pause`, `resume`, `switchover`, `failover` and `edit-config`
//! go through a member's REST API (the leader first), `restart`, `reinit`, `reload` and `version` through
//! the named members' own APIs, so the agents act on them through `decide()`; `query` runs SQL on a member.
//!
//! Only `remove` writes to the store (it deletes the scope, as patronictl's does): when no member's API
//! answers, the others fail (exit 69) instead of falling back to writing the `config` or `failover` key as
//! patronictl does.
mod control;
mod diff;
mod edit;
mod list;
mod members;
mod prompt;
mod pyyaml;
mod query;
mod remove;
mod rest;
mod show;
mod sites;
mod store;
mod table;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::Config;
pub use edit::EditArgs;
pub use members::{version_line, Role};
pub use query::QueryArgs;
pub use sites::DemoteArgs;

/// The request was refused (by the API, by the cluster's state, or by the operator at the prompt).
pub const EXIT_REFUSED: u8 = 1;
/// Bad usage, or a config file that is missing or invalid.
pub const EXIT_USAGE: u8 = 64;
/// The store or every member's REST API could not be reached.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Internal error.
pub const EXIT_INTERNAL: u8 = 70;

/// The variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "TENURE_CONFIG";

/// How `list` and `history` print: patronictl's `pretty` (the table), `json`, `yaml` and `tsv`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Table,
    Json,
    Yaml,
    Tsv,
    /// patronictl's `topology`: the table, replicas indented below their leader.
    Topology,
}

/// One operator command, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    List {
        format: Format,
        /// patronictl's `-e`: the optional columns always.
        extended: bool,
        /// patronictl's `-t`: the time above each listing.
        timestamp: bool,
        /// patronictl's `-w`/`-W`: list again this often until interrupted.
        watch_ms: Option<u64>,
    },
    Pause {
        wait: bool,
    },
    Resume {
        wait: bool,
    },
    Switchover {
        /// The leader the operator means (`--leader`/`--primary`); refused when it is not the leader.
        leader: Option<String>,
        candidate: Option<String>,
        /// ISO 8601 with a time zone, or `now`.
        scheduled: Option<String>,
        force: bool,
    },
    Failover {
        candidate: Option<String>,
        force: bool,
    },
    History {
        format: Format,
    },
    ShowConfig,
    EditConfig(EditArgs),
    /// `POST /reload` on each member with `role`, narrowed to `members` when some are named.
    Reload {
        members: Vec<String>,
        role: Role,
        force: bool,
    },
    /// Print a member's `host=H port=P` (the leader's by default).
    Dsn {
        role: Option<Role>,
        member: Option<String>,
    },
    /// This program's version, then each member's (all, or those named).
    Version {
        members: Vec<String>,
    },
    /// SQL on a member, connecting as the user gives.
    Query(QueryArgs),
    /// Restart PostgreSQL on one member (`POST /restart` on its API).
    Restart {
        node: String,
        /// ISO 8601 with a time zone, or `now`: the member restarts then (`POST /restart` `schedule`).
        scheduled: Option<String>,
        /// Only if a restart is pending (`restart_pending`).
        pending: bool,
        /// Only if the running version is older than this (`postgres_version`).
        pg_version: Option<String>,
        force: bool,
    },
    /// Forget one member's scheduled restart (`DELETE /restart` on its API).
    FlushRestart {
        node: String,
    },
    /// Re-clone one replica from the leader (`POST /reinitialize` on its API).
    Reinit {
        node: String,
        force: bool,
    },
    /// Delete every key of the scope after patronictl's three typed answers (the listing in `format`).
    Remove {
        format: Format,
    },
    /// Patroni 4.1's `demote-cluster`: make this site a standby of another, print the handover token.
    DemoteCluster(DemoteArgs),
    /// Patroni 4.1's `promote-cluster`: with the handover token, or `--force` for a lost primary site.
    PromoteCluster {
        token: Option<String>,
        force: bool,
        timeout_s: u64,
    },
}

/// Why a command failed: the message for stderr and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn refused(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_REFUSED,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_UNAVAILABLE,
            message: message.into(),
        }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_INTERNAL,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Unexpected failures (I/O on stdout, a runtime that cannot start) are internal.
impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::internal(format!("{e:#}"))
    }
}

/// What every command works with: the loaded config, the store client, the REST client.
pub(crate) struct Ctx {
    pub config: Config,
    pub store: store::Store,
    pub rest: rest::Rest,
    /// The environment (`EDITOR`, `PATH`, `TMPDIR` for `edit-config`), read once by the binary.
    pub env: BTreeMap<String, String>,
}

/// Run `command` with the config file `config` (or `$TENURE_CONFIG` from `env`).
/// `cluster`, when given (patronictl's positional CLUSTER), must be the config's scope.
pub fn run(
    config: Option<&Path>,
    cluster: Option<&str>,
    command: Command,
    env: &BTreeMap<String, String>,
) -> Result<(), CliError> {
    let file = config_file(config, env)?;
    let config = load_config(&file, env)?;
    if let Some(c) = cluster.filter(|c| *c != config.scope) {
        return Err(CliError::usage(format!(
            "cluster {c} is not the one {} manages (scope {}); tenure works on its config's scope",
            file.display(),
            config.scope
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let ctx = Ctx {
            store: store::Store::connect(&config)?,
            rest: rest::Rest::new(&config.restapi)?,
            config,
            env: env.clone(),
        };
        dispatch(&ctx, command).await
    })
}

async fn dispatch(ctx: &Ctx, command: Command) -> Result<(), CliError> {
    match command {
        Command::List {
            format,
            extended,
            timestamp,
            watch_ms,
        } => list::watch(ctx, format, extended, timestamp, watch_ms).await,
        Command::History { format } => show::history(ctx, format).await,
        Command::ShowConfig => show::show_config(ctx).await,
        Command::Pause { wait } => control::pause(ctx, true, wait).await,
        Command::Resume { wait } => control::pause(ctx, false, wait).await,
        Command::Switchover {
            leader,
            candidate,
            scheduled,
            force,
        } => control::switchover(ctx, leader, candidate, scheduled, force).await,
        Command::Failover { candidate, force } => control::failover(ctx, candidate, force).await,
        Command::EditConfig(args) => edit::edit_config(ctx, &args).await,
        Command::Reload {
            members,
            role,
            force,
        } => members::reload(ctx, members, role, force).await,
        Command::Dsn { role, member } => members::dsn(ctx, role, member).await,
        Command::Version { members } => members::version(ctx, members).await,
        Command::Query(args) => query::query(ctx, &args).await,
        Command::Restart {
            node,
            scheduled,
            pending,
            pg_version,
            force,
        } => {
            let action = control::NodeAction::Restart {
                scheduled,
                pending,
                pg_version,
            };
            control::node_action(ctx, node, action, force).await
        }
        Command::FlushRestart { node } => {
            control::node_action(ctx, node, control::NodeAction::FlushRestart, true).await
        }
        Command::Reinit { node, force } => {
            control::node_action(ctx, node, control::NodeAction::Reinitialize, force).await
        }
        Command::Remove { format } => remove::remove(ctx, format).await,
        Command::DemoteCluster(args) => sites::demote_cluster(ctx, &args).await,
        Command::PromoteCluster {
            token,
            force,
            timeout_s,
        } => sites::promote_cluster(ctx, token.as_deref(), force, timeout_s).await,
    }
}

fn config_file(given: Option<&Path>, env: &BTreeMap<String, String>) -> Result<PathBuf, CliError> {
    match given {
        Some(p) => Ok(p.to_path_buf()),
        None => env
            .get(CONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| {
                CliError::usage(format!(
                    "no config file: pass --config FILE (the agent's config) or set {CONFIG_ENV}"
                ))
            }),
    }
}

/// The agent's config file; its warnings (ignored Patroni keys) are the agent's business, not printed here.
fn load_config(file: &Path, env: &BTreeMap<String, String>) -> Result<Config, CliError> {
    // TENURE_CONFIG names the file; it is not a setting, so the config loader must not see it.
    let mut env = env.clone();
    env.remove(CONFIG_ENV);
    match crate::config::load(file, &env) {
        Ok(loaded) => Ok(loaded.config),
        Err(errors) => {
            let lines: Vec<String> = errors.0.iter().map(|e| format!("  {e}")).collect();
            Err(CliError::usage(format!(
                "cannot use the config file {}:\n{}",
                file.display(),
                lines.join("\n")
            )))
        }
    }
}
