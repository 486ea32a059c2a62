//! What each `tenure` command does once its arguments are parsed: load and check the config, run the agent,
//! the demo, or an operator command, and map each outcome to its exit code (GUIDE §6).
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

/// Bad usage or bad config.
pub(crate) const EXIT_USAGE: u8 = 64;
/// Store or PostgreSQL unreachable at start-up.
const EXIT_UNAVAILABLE: u8 = 69;
/// Internal error.
const EXIT_INTERNAL: u8 = 70;

/// `tenure demo`: a local cluster from this executable.
pub(crate) fn demo(failover: bool) -> ExitCode {
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

/// Bad usage: `msg` on stderr, exit 64.
pub(crate) fn usage(msg: &str) -> ExitCode {
    eprintln!("tenure: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// An operator command (`src/cli/`): its errors are printed and become the exit code.
pub(crate) fn operator(
    config: Option<&Path>,
    cluster: Option<&str>,
    command: tenure::cli::Command,
    env: &BTreeMap<String, String>,
) -> ExitCode {
    match tenure::cli::run(config, cluster, command, env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure: {e}");
            ExitCode::from(e.code)
        }
    }
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

/// `tenure agent --validate-config FILE`: the config's errors, or "config OK".
pub(crate) fn validate(file: &Path, env: &BTreeMap<String, String>) -> ExitCode {
    match load(file, env) {
        Ok(_) => {
            println!("config OK");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `tenure agent`: load the config and run the agent until it exits.
pub(crate) fn agent(file: &Path, env: &BTreeMap<String, String>) -> ExitCode {
    let loaded = match load(file, env) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let config = loaded.config;
    if nix::unistd::geteuid().is_root() {
        return usage(
            "the agent does not run as root (PostgreSQL refuses to run as root, and root would follow \
             paths the PostgreSQL user controls): run it as the user PostgreSQL runs as \
             (the packaged unit has User=postgres; by hand: runuser -u postgres -- tenure agent --config FILE)",
        );
    }
    // Before anything touches PostgreSQL: the socket the agent will send the superuser's password to.
    if let Err(e) = tenure::pg::socket::check_socket_dir(&config.pg_settings()) {
        return usage(&e);
    }
    tenure::logging::init(&config.log, env.get("RUST_LOG").map(String::as_str));
    // One thread: the agent waits on the store, PostgreSQL and its peers, and computes little; a second worker
    // cost more in cross-thread wake-ups (futex) than it saved (bench/README.md, "Agent footprint").
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_INTERNAL);
        }
    };
    match runtime.block_on(tenure::agent::run(config, env.clone())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ tenure::agent::AgentError::DuplicateName { .. }) => {
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
