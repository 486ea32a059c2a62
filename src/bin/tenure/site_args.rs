//! The arguments of `demote-cluster` and `promote-cluster` (Patroni 4.1's names and options, plus the
//! handover token and a deadline), and the library command each one becomes.
use clap::Args;

use super::{Scope, EXIT_CODES};
use tenure::cli::{Command, DemoteArgs};

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct DemoteClusterArgs {
    /// The cluster name, as patronictl takes it; optional, and it must be the config's `scope`.
    #[arg(value_name = "CLUSTER")]
    cluster: Option<String>,
    /// Address of the other site's primary (or its standby leader before a planned switchover).
    #[arg(long)]
    host: Option<String>,
    /// Port of the other site's PostgreSQL.
    #[arg(long)]
    port: Option<u16>,
    /// Command to restore WAL records from the other site's archive.
    #[arg(long)]
    restore_command: Option<String>,
    /// Name of the slot on the other site to replicate through.
    #[arg(long)]
    primary_slot_name: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long)]
    force: bool,
    /// Seconds to wait for the demotion, then for the other site to replay the handover token.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
}

impl DemoteClusterArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let args = DemoteArgs {
            host: self.host,
            port: self.port,
            restore_command: self.restore_command,
            primary_slot_name: self.primary_slot_name,
            force: self.force,
            timeout_s: self.timeout,
        };
        (Scope(self.cluster), Command::DemoteCluster(args))
    }
}

#[derive(Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct PromoteClusterArgs {
    /// The cluster name, as patronictl takes it; optional, and it must be the config's `scope`.
    #[arg(value_name = "CLUSTER")]
    cluster: Option<String>,
    /// The handover token `demote-cluster` printed on the other site (TIMELINE:LSN).
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Promote without a token, the other site being lost (asks for confirmation on stdin).
    #[arg(long, conflicts_with = "token")]
    force: bool,
    /// Seconds to wait until the site's leader runs as primary.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
}

impl PromoteClusterArgs {
    pub(crate) fn command(self) -> (Scope, Command) {
        let command = Command::PromoteCluster {
            token: self.token,
            force: self.force,
            timeout_s: self.timeout,
        };
        (Scope(self.cluster), command)
    }
}
