//! The `tenure` command line: `agent` and the operator commands; exit codes per GUIDE §6.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Bad usage or bad config.
const EXIT_USAGE: u8 = 64;
/// Store or PostgreSQL unreachable at start-up.
const EXIT_UNAVAILABLE: u8 = 69;
/// Internal error (and, for now, "not implemented yet").
const EXIT_INTERNAL: u8 = 70;

#[derive(Parser)]
#[command(
    name = "tenure",
    version,
    about = "A PostgreSQL high-availability agent in the tradition of Patroni"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent for one PostgreSQL node, or check its config file.
    Agent(AgentArgs),
    /// Show the cluster's members, roles, timelines and lag.
    List(ClientArgs),
    /// Put the cluster in maintenance mode: no automatic failover.
    Pause(ClientArgs),
    /// Leave maintenance mode.
    Resume(ClientArgs),
    /// Planned change of primary.
    Switchover(ClientArgs),
    /// Manual failover to a named candidate.
    Failover(ClientArgs),
    /// Show the timeline history.
    History(ClientArgs),
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
#[group(required = true, multiple = false)]
struct AgentArgs {
    /// Run the agent with this config file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
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

#[derive(Args)]
struct ClientArgs {
    /// The agent config file (to find the store and the REST API).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    // The only place that reads the environment; the library gets it injected.
    let env: BTreeMap<String, String> = std::env::vars().collect();
    match cli.command {
        Command::Agent(AgentArgs {
            validate_config: Some(file),
            ..
        }) => validate(&file, &env),
        Command::Agent(AgentArgs {
            config: Some(file), ..
        }) => agent(&file, &env),
        Command::Agent(_) => usage("tenure agent needs --config FILE or --validate-config FILE"),
        Command::Fencer(args) => tenure::agent::fence::fencer_main(&args.file, &args.data_dir),
        // TODO(operator CLI): list/pause/resume/switchover/failover/history, through the store and REST API.
        Command::List(_)
        | Command::Pause(_)
        | Command::Resume(_)
        | Command::Switchover(_)
        | Command::Failover(_)
        | Command::History(_) => not_implemented(),
        Command::Demo(args) => demo(args.failover),
    }
}

fn demo(failover: bool) -> ExitCode {
    let bin = match std::env::current_exe() {
        Ok(bin) => bin,
        Err(e) => {
            eprintln!("tenure demo: cannot find the tenure executable: {e}");
            return ExitCode::from(EXIT_INTERNAL);
        }
    };
    match tenure::demo::run(&bin, tenure::demo::DemoOptions { failover }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ tenure::demo::DemoError::Missing(_)) => {
            eprintln!("tenure demo: {e}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
        Err(e) => {
            eprintln!("tenure demo: {e}");
            ExitCode::from(EXIT_INTERNAL)
        }
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("tenure: {msg}");
    ExitCode::from(EXIT_USAGE)
}

fn not_implemented() -> ExitCode {
    eprintln!("tenure: not implemented yet");
    ExitCode::from(EXIT_INTERNAL)
}

/// Load the config, printing warnings to stderr; on errors print them and give the exit code.
fn load(file: &Path, env: &BTreeMap<String, String>) -> Result<tenure::config::Loaded, ExitCode> {
    match tenure::config::load(file, env) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            Ok(loaded)
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("error: {e}");
            }
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

fn validate(file: &Path, env: &BTreeMap<String, String>) -> ExitCode {
    match load(file, env) {
        Ok(_) => {
            println!("config OK");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn agent(file: &Path, env: &BTreeMap<String, String>) -> ExitCode {
    let loaded = match load(file, env) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let config = loaded.config;
    if nix::unistd::geteuid().is_root() && config.run_as().is_none() {
        return usage(
            "PostgreSQL refuses to run as root; run tenure as the postgres user \
             (or set tenure.run_as to the user PostgreSQL runs as)",
        );
    }
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_INTERNAL);
        }
    };
    match runtime.block_on(tenure::agent::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ tenure::agent::AgentError::WatchdogUnsupported) => {
            eprintln!("tenure: {e}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(e @ tenure::agent::AgentError::Store(_)) => {
            eprintln!("tenure: {e}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
        Err(e) => {
            eprintln!("tenure: {e}");
            ExitCode::from(EXIT_INTERNAL)
        }
    }
}

/// One key=value line per event on stderr; `RUST_LOG` filters (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
