//! The `tenure` command line: `agent` and the operator commands; exit codes per GUIDE §6.
//!
//! The fencing process's exact argv skips clap (`tenure fencer`, started by the agent).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use tenure::agent::fence::fencer_argv;

mod args;
mod commands;
mod generate;
mod site_args;
use args::{
    DsnArgs, EditConfigArgs, GenerateWhat, QueryArgs, ReloadArgs, RemoveArgs, TopologyArgs,
    VersionArgs,
};
use commands::{agent, demo, operator, usage, validate, EXIT_USAGE};
use site_args::{DemoteClusterArgs, PromoteClusterArgs};

pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  0   success
  1   refused: the REST API answered 4xx/5xx (its status and message are printed), the cluster's state
      does not allow the request, or the confirmation was declined
  64  bad usage, or a config file that is missing or invalid
  69  the store, or every member's REST API, could not be reached (the address is printed)
  70  internal error

The operator commands read the agent's config file (--config FILE, or TENURE_CONFIG) to find the store
and the REST API credentials.";

#[derive(Parser)]
#[command(
    name = "tenure",
    version,
    about = "A PostgreSQL high-availability agent in the tradition of Patroni",
    after_help = EXIT_CODES
)]
struct Cli {
    /// The agent config file (to find the store and the REST API; for `agent`, the file it runs with);
    /// default: $TENURE_CONFIG. Before or after the command, as `patronictl -c FILE list`.
    #[arg(short = 'c', long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent for one PostgreSQL node, or check its config file.
    Agent(AgentArgs),
    /// Show the cluster's members, roles, timelines and lag (read from the store).
    List(ListArgs),
    /// Put the cluster in maintenance mode: no automatic failover (PATCH /config on the leader's API).
    Pause(PauseArgs),
    /// Leave maintenance mode (PATCH /config on the leader's API).
    Resume(PauseArgs),
    /// Planned change of primary (POST /switchover on the leader's API).
    Switchover(SwitchoverArgs),
    /// Manual failover to a candidate (POST /failover).
    Failover(FailoverArgs),
    /// Show the timeline history (read from the store).
    History(HistoryArgs),
    /// Print the dynamic configuration (the store's `config` key) as YAML.
    ShowConfig(ScopedArgs),
    /// Change the dynamic configuration (PATCH /config): --set KEY=VALUE (dotted keys, YAML values),
    /// --pg NAME=VALUE, --apply FILE, --replace FILE, or in $EDITOR; the diff is shown first.
    EditConfig(EditConfigArgs),
    /// Re-read the members' config files (POST /reload on each member's API).
    Reload(ReloadArgs),
    /// Show the members as a tree: the leader, its replicas below it.
    Topology(TopologyArgs),
    /// Print a member's connection string, `host=H port=P` (the leader's by default).
    Dsn(DsnArgs),
    /// Print tenure's version; with CLUSTER, each member's too (from its GET /patroni).
    Version(VersionArgs),
    /// Run SQL on a member (the leader by default), connecting as -U / --password / $PGUSER / $PGPASSWORD.
    Query(QueryArgs),
    /// Write the man page or a shell's completions to stdout (for packagers).
    #[command(hide = true)]
    Generate {
        #[command(subcommand)]
        what: GenerateWhat,
    },
    /// Restart PostgreSQL on one member, in its current role; allowed in pause (POST /restart on its API).
    /// With --scheduled, the member restarts at that time (not in pause).
    Restart(RestartArgs),
    /// Forget a member's scheduled restart (DELETE /restart on its API): `tenure flush NODE restart`.
    Flush(FlushArgs),
    /// Throw a replica's data away and clone it again from the leader; allowed in pause
    /// (POST /reinitialize on its API).
    Reinit(NodeArgs),
    /// Delete every key of the cluster from the store, after typing its name, "Yes I am aware" and the
    /// leader's name (read from stdin, terminal or not, as patronictl).
    Remove(RemoveArgs),
    /// Make this site a standby cluster of another (Patroni 4.1): stop writes, print the handover token.
    DemoteCluster(DemoteClusterArgs),
    /// Promote this standby cluster: with the handover token, or --force when the primary site is lost.
    PromoteCluster(PromoteClusterArgs),
    /// The fencing process an agent starts (internal): stops PostgreSQL when the lease deadline passes.
    #[command(hide = true)]
    Fencer(FencerArgs),
    /// Start a local demo cluster: etcd and three nodes on loopback, shown until Ctrl-C.
    Demo(DemoArgs),
}

#[derive(Args)]
struct DemoArgs {
    /// Crash the primary (agent and PostgreSQL), show the failover and the old node rejoining, then exit.
    #[arg(long)]
    failover: bool,
}

#[derive(Args)]
struct AgentArgs {
    /// Check this config file, print "config OK" or the errors, and exit (0 or 64).
    #[arg(long, value_name = "FILE")]
    validate_config: Option<PathBuf>,
}

#[derive(Args)]
struct FencerArgs {
    /// The fence file the agent writes (`armed <deadline_ms>` or `disarmed`).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// The PostgreSQL data directory whose postmaster is stopped.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
}

/// What every operator command shares (the config file is the global `-c/--config`).
#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct ClientArgs {}

/// The cluster argument patronictl takes (`patronictl -c FILE list batman`).
#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct ScopedArgs {
    /// The cluster name, as patronictl takes it; optional, and it must be the config's `scope`.
    #[arg(value_name = "CLUSTER")]
    cluster: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum FormatArg {
    /// patronictl's default word for the table is `pretty`.
    #[value(alias = "pretty")]
    Table,
    Json,
    #[value(alias = "yml")]
    Yaml,
    Tsv,
}

impl From<FormatArg> for tenure::cli::Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Table => tenure::cli::Format::Table,
            FormatArg::Json => tenure::cli::Format::Json,
            FormatArg::Yaml => tenure::cli::Format::Yaml,
            FormatArg::Tsv => tenure::cli::Format::Tsv,
        }
    }
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct ListArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value = "table")]
    format: FormatArg,
    /// Always show the Pending restart, Pending restart reason, Scheduled restart and Tags columns
    /// (patronictl's `-e`).
    #[arg(long, short = 'e')]
    extended: bool,
    /// Print the time (UTC) above the listing (patronictl's `-t`).
    #[arg(long, short = 't')]
    timestamp: bool,
    /// List again every 2 seconds until interrupted (patronictl's `-W`).
    #[arg(short = 'W')]
    watch_2s: bool,
    /// List again every SECONDS until interrupted (patronictl's `-w`).
    #[arg(long = "watch", short = 'w', value_name = "SECONDS", value_parser = watch_seconds)]
    watch: Option<f64>,
}

/// `-w SECONDS`: a positive number, at least a tenth of a second.
pub(crate) fn watch_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds between 0.1 and 86400"
        )),
    }
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct HistoryArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value = "table")]
    format: FormatArg,
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct PauseArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// Wait (up to 30 s) until every member reports the new state.
    #[arg(long)]
    wait: bool,
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct SwitchoverArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// The current leader (patronictl's `--leader`/`--primary`); refused when it is not (default: the
    /// leader in the store).
    #[arg(long, visible_alias = "primary", value_name = "NAME")]
    leader: Option<String>,
    /// The member to promote (default: the healthiest replica, chosen by the leader).
    #[arg(long, value_name = "NAME")]
    candidate: Option<String>,
    /// When: ISO 8601 with a time zone (2030-01-01T12:00+00:00), or `now`.
    #[arg(long, value_name = "TIME")]
    scheduled: Option<String>,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct FailoverArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// The member to promote (asked for on a terminal when not given, as patronictl does; a failover
    /// needs one).
    #[arg(long, value_name = "NAME")]
    candidate: Option<String>,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct NodeArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The member (its name in `tenure list`), optionally after the cluster name as patronictl takes it
    /// (`restart CLUSTER NODE`; the cluster must be the config's `scope`).
    #[arg(value_name = "[CLUSTER] NODE", num_args = 1..=2, required = true)]
    names: Vec<String>,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct RestartArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// When: ISO 8601 with a time zone (2030-01-01T12:00+00:00), or `now`. The member keeps it in memory
    /// (an agent restart forgets it) and shows it as `scheduled_restart` in GET /patroni.
    #[arg(long, value_name = "TIME")]
    scheduled: Option<String>,
    /// Only if PostgreSQL reports a setting pending a restart (`restart_pending`, as `patronictl restart
    /// --pending`); otherwise the member refuses with 503.
    #[arg(long)]
    pending: bool,
    /// Only if the running PostgreSQL is older than this version (`postgres_version`, as `patronictl
    /// restart --pg-version`): X.Y from 10 on (15.8), X.Y.Z before.
    #[arg(long, value_name = "VERSION")]
    pg_version: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FlushWhat {
    /// The member's scheduled restart.
    Restart,
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
struct FlushArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The member (its name in `tenure list`).
    #[arg(value_name = "NODE")]
    node: String,
    /// What to forget.
    #[arg(value_name = "WHAT", value_enum)]
    what: FlushWhat,
}

fn main() -> ExitCode {
    // The fencing process, in the exact form the agent starts it, skips clap: building the whole command
    // tree touches pages of code and heap that count in its resident memory (issue 14: <= 2 MiB). Any
    // other form (`--help`, another order) goes through clap below. No async runtime either: only the
    // commands that need one build it.
    if let Some((file, data_dir)) = fencer_argv(std::env::args_os().skip(1)) {
        tenure::agent::fence::fencer_main(&file, &data_dir);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    // The only place that reads the environment; the library gets it injected.
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let config = cli.config;
    let operator = |scope: Scope, command, env: &BTreeMap<String, String>| {
        operator(config.as_deref(), scope.0.as_deref(), command, env)
    };
    match cli.command {
        Command::Agent(AgentArgs {
            validate_config: Some(file),
        }) => validate(&file, &env),
        Command::Agent(_) => match config.as_deref() {
            Some(file) => agent(file, &env),
            None => usage("tenure agent needs --config FILE or --validate-config FILE"),
        },
        Command::Fencer(args) => tenure::agent::fence::fencer_main(&args.file, &args.data_dir),
        Command::List(a) => operator(
            a.client.into(),
            tenure::cli::Command::List {
                format: a.format.into(),
                extended: a.extended,
                timestamp: a.timestamp,
                watch_ms: args::watch_ms(a.watch, a.watch_2s),
            },
            &env,
        ),
        Command::Pause(a) => operator(
            a.client.into(),
            tenure::cli::Command::Pause { wait: a.wait },
            &env,
        ),
        Command::Resume(a) => operator(
            a.client.into(),
            tenure::cli::Command::Resume { wait: a.wait },
            &env,
        ),
        Command::Switchover(a) => operator(
            a.client.into(),
            tenure::cli::Command::Switchover {
                leader: a.leader,
                candidate: a.candidate,
                scheduled: a.scheduled,
                force: a.force,
            },
            &env,
        ),
        Command::Failover(a) => operator(
            a.client.into(),
            tenure::cli::Command::Failover {
                candidate: a.candidate,
                force: a.force,
            },
            &env,
        ),
        Command::History(a) => operator(
            a.client.into(),
            tenure::cli::Command::History {
                format: a.format.into(),
            },
            &env,
        ),
        Command::ShowConfig(a) => operator(a.into(), tenure::cli::Command::ShowConfig, &env),
        Command::EditConfig(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        Command::Reload(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        Command::Topology(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        Command::Dsn(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        Command::Remove(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        Command::DemoteCluster(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        Command::PromoteCluster(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        // Without a cluster, the version alone: no config file needed, as `patronictl version`.
        Command::Version(VersionArgs { cluster: None, .. }) => {
            println!("{}", tenure::cli::version_line());
            ExitCode::SUCCESS
        }
        Command::Version(a) => {
            let (scope, command) = a.command();
            operator(scope, command, &env)
        }
        Command::Query(a) => match a.command() {
            Ok((scope, command)) => operator(scope, command, &env),
            Err(why) => usage(&why),
        },
        Command::Generate { what } => generate::generate(what, Cli::command()),
        Command::Restart(a) => {
            let (scope, node) = a.node.target();
            operator(
                scope,
                tenure::cli::Command::Restart {
                    node,
                    scheduled: a.scheduled,
                    pending: a.pending,
                    pg_version: a.pg_version,
                    force: a.node.force,
                },
                &env,
            )
        }
        Command::Flush(a) => operator(
            a.client.into(),
            match a.what {
                FlushWhat::Restart => tenure::cli::Command::FlushRestart { node: a.node },
            },
            &env,
        ),
        Command::Reinit(a) => {
            let (scope, node) = a.target();
            operator(
                scope,
                tenure::cli::Command::Reinit {
                    node,
                    force: a.force,
                },
                &env,
            )
        }
        Command::Demo(args) => demo(args.failover),
    }
}

/// The cluster an operator command names, if it does (patronictl's positional CLUSTER).
pub(crate) struct Scope(pub(crate) Option<String>);

impl From<ScopedArgs> for Scope {
    fn from(a: ScopedArgs) -> Self {
        Scope(a.cluster)
    }
}

impl NodeArgs {
    /// `[CLUSTER] NODE`: the cluster (checked against the config's scope) and the member.
    fn target(&self) -> (Scope, String) {
        match self.names.as_slice() {
            [cluster, node] => (Scope(Some(cluster.clone())), node.clone()),
            names => (Scope(None), names.last().cloned().unwrap_or_default()),
        }
    }
}

impl From<ClientArgs> for Scope {
    fn from(_: ClientArgs) -> Self {
        Scope(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Option<(PathBuf, PathBuf)> {
        fencer_argv(words.iter().map(std::ffi::OsString::from))
    }

    #[test]
    fn only_the_agents_exact_fencer_command_skips_clap() {
        assert_eq!(
            argv(&["fencer", "--file", "/d.fence", "--data-dir", "/d"]),
            Some(("/d.fence".into(), "/d".into()))
        );
        assert_eq!(argv(&["fencer", "--help"]), None);
        assert_eq!(argv(&["fencer", "--data-dir", "/d", "--file", "/f"]), None);
        assert_eq!(argv(&["fencer", "--file", "/f", "--data-dir"]), None);
        assert_eq!(
            argv(&["fencer", "--file", "/f", "--data-dir", "/d", "x"]),
            None
        );
        assert_eq!(argv(&["agent", "--config", "/c"]), None);
    }
}
