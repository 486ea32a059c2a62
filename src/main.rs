//! The `tenure` command line: `agent` and the operator commands; exit codes per GUIDE §6.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Bad usage or bad config.
const EXIT_USAGE: u8 = 64;
/// Store or PostgreSQL unreachable at start-up.
#[allow(dead_code)]
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
    /// Start a local demo cluster.
    Demo,
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
        // TODO(operator CLI): list/pause/resume/switchover/failover/history, through the store and REST API.
        Command::List(_)
        | Command::Pause(_)
        | Command::Resume(_)
        | Command::Switchover(_)
        | Command::Failover(_)
        | Command::History(_) => not_implemented(),
        // TODO(demo): a local three-node cluster.
        Command::Demo => not_implemented(),
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
    // TODO(agent runtime): replace these lines with the runtime's entry point, e.g.
    // `return exit_code(tenure::agent::run(config))`.
    let _ = config;
    eprintln!("tenure: agent runtime not implemented yet");
    ExitCode::from(EXIT_INTERNAL)
}
