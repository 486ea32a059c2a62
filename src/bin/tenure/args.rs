//! The arguments of `reload`, `dsn`, `topology`, `version`, `edit-config`, `query`, `remove` and `generate`, as patronictl
//! spells them, and the library command each one becomes.
use clap::{Args, Subcommand};

use std::path::PathBuf;

use super::{watch_seconds, FormatArg, Scope, ScopedArgs, EXIT_CODES};
use tenure::cli::{Command, Format, Role};

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct ReloadArgs {
    /// The cluster name, as patronictl requires it; it must be the config's `scope`.
    #[arg(value_name = "CLUSTER")]
    cluster: String,
    /// Reload only these members (default: every member with --role).
    #[arg(value_name = "MEMBER")]
    members: Vec<String>,
    /// Reload only members with this role.
    #[arg(long, short = 'r', value_enum, default_value = "any")]
    role: Role,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    force: bool,
}

impl ReloadArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let command = Command::Reload {
            members: self.members,
            role: self.role,
            force: self.force,
        };
        (Scope(Some(self.cluster)), command)
    }
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct DsnArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// Give the DSN of a member with this role (default: the leader).
    #[arg(long, short = 'r', value_enum, conflicts_with = "member")]
    role: Option<Role>,
    /// Give the DSN of this member.
    #[arg(long, short = 'm', value_name = "NAME")]
    member: Option<String>,
}

impl DsnArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let command = Command::Dsn {
            role: self.role,
            member: self.member,
        };
        (self.client.into(), command)
    }
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct TopologyArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// Show again every 2 seconds until interrupted (patronictl's `-W`).
    #[arg(short = 'W')]
    watch_2s: bool,
    /// Show again every SECONDS until interrupted (patronictl's `-w`).
    #[arg(long = "watch", short = 'w', value_name = "SECONDS", value_parser = watch_seconds)]
    watch: Option<f64>,
}

impl TopologyArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let command = Command::List {
            format: Format::Topology,
            extended: false,
            timestamp: false,
            watch_ms: watch_ms(self.watch, self.watch_2s),
        };
        (self.client.into(), command)
    }
}

/// `-w SECONDS` or `-W` (2 s) as milliseconds.
pub(crate) fn watch_ms(watch: Option<f64>, watch_2s: bool) -> Option<u64> {
    watch
        .map(|s| (s * 1000.0) as u64)
        .or(watch_2s.then_some(2_000))
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct VersionArgs {
    /// The cluster whose members' versions to show too (the config's `scope`); without it, no config is read.
    #[arg(value_name = "CLUSTER")]
    pub(crate) cluster: Option<String>,
    /// Only these members.
    #[arg(value_name = "MEMBER", requires = "cluster")]
    members: Vec<String>,
}

impl VersionArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let command = Command::Version {
            members: self.members,
        };
        (Scope(self.cluster), command)
    }
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct EditConfigArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// KEY=VALUE, e.g. loop_wait=10 or postgresql.parameters.work_mem=8MB; `null` (or nothing) deletes the
    /// key. Without --set, --pg, --apply or --replace, the config opens in $EDITOR.
    #[arg(long, short = 's', value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// NAME=VALUE: a PostgreSQL parameter, short for --set postgresql.parameters.NAME=VALUE.
    #[arg(long, short = 'p', value_name = "NAME=VALUE")]
    pg: Vec<String>,
    /// Merge the YAML in FILE into the config (`-`: stdin, which needs --force).
    #[arg(long, value_name = "FILE")]
    apply: Option<String>,
    /// Replace the config with the YAML in FILE (`-`: stdin, which needs --force).
    #[arg(long, value_name = "FILE")]
    replace: Option<String>,
    /// Do not show the changes.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Do not ask for confirmation (on a terminal; without one the change is applied).
    #[arg(long)]
    force: bool,
}

impl EditConfigArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let command = Command::EditConfig(tenure::cli::EditArgs {
            set: self.set,
            pg: self.pg,
            apply: self.apply,
            replace: self.replace,
            quiet: self.quiet,
            force: self.force,
        });
        (self.client.into(), command)
    }
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct QueryArgs {
    #[command(flatten)]
    client: ScopedArgs,
    /// The SQL to run (patronictl's `-c/--command`: `-c` is tenure's --config).
    #[arg(
        long,
        value_name = "SQL",
        conflicts_with = "file",
        required_unless_present = "file"
    )]
    command: Option<String>,
    /// Run the SQL in FILE.
    #[arg(long, short = 'f', value_name = "FILE")]
    file: Option<PathBuf>,
    /// Ask for the password (else $PGPASSWORD, if set).
    #[arg(long)]
    password: bool,
    /// The database user (default: $PGUSER, else the OS user).
    #[arg(long, short = 'U', value_name = "NAME")]
    username: Option<String>,
    /// The database (default: $PGDATABASE, else the user's name).
    #[arg(long, short = 'd', value_name = "NAME")]
    dbname: Option<String>,
    /// Query the leader (default), or a member with this role.
    #[arg(long, short = 'r', value_enum, conflicts_with = "member")]
    role: Option<Role>,
    /// Query this member.
    #[arg(long, short = 'm', value_name = "NAME")]
    member: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "tsv")]
    format: FormatArg,
    /// The column delimiter of tsv.
    #[arg(long, default_value = "\t")]
    delimiter: String,
    /// Run again every 2 seconds until interrupted.
    #[arg(short = 'W')]
    watch_2s: bool,
    /// Run again every SECONDS until interrupted.
    #[arg(long = "watch", short = 'w', value_name = "SECONDS", value_parser = watch_seconds)]
    watch: Option<f64>,
}

impl QueryArgs {
    /// The SQL read from --file, the password asked for: errors are usage errors.
    pub(crate) fn command(self) -> Result<(Scope, Command), String> {
        let sql = match (&self.command, &self.file) {
            (Some(sql), _) => sql.clone(),
            (None, Some(f)) => std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read --file {}: {e}", f.display()))?,
            (None, None) => return Err("You need to specify either --command or --file".into()),
        };
        let password = match self.password {
            true => Some(ask_password().map_err(|e| format!("cannot read the password: {e}"))?),
            false => None,
        };
        let command = Command::Query(tenure::cli::QueryArgs {
            sql,
            role: self.role,
            member: self.member,
            username: self.username,
            password,
            dbname: self.dbname,
            format: self.format.into(),
            delimiter: self.delimiter,
            watch_ms: watch_ms(self.watch, self.watch_2s),
        });
        Ok((self.client.into(), command))
    }
}

/// `Password: ` on stderr, the answer read without echo on a terminal (`stty -echo`).
fn ask_password() -> std::io::Result<String> {
    use std::io::{IsTerminal, Write};
    let terminal = std::io::stdin().is_terminal();
    let stty = |arg: &str| std::process::Command::new("stty").arg(arg).status();
    eprint!("Password: ");
    std::io::stderr().flush()?;
    if terminal {
        stty("-echo")?;
    }
    let mut line = String::new();
    let read = std::io::stdin().read_line(&mut line);
    if terminal {
        stty("echo")?;
        eprintln!();
    }
    read?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

#[derive(Subcommand)]
pub(crate) enum GenerateWhat {
    /// The man page, tenure(1), in roff: `tenure generate man > tenure.1`.
    Man,
    /// The completion script for SHELL: `tenure generate completions bash`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct RemoveArgs {
    /// The cluster to wipe, as patronictl requires it; it must be the config's `scope`.
    #[arg(value_name = "CLUSTER")]
    cluster: String,
    /// The format of the listing shown first.
    #[arg(long, short = 'f', value_enum, default_value = "table")]
    format: FormatArg,
}

impl RemoveArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let command = Command::Remove {
            format: self.format.into(),
        };
        (Scope(Some(self.cluster)), command)
    }
}
