//! patronictl's `remove`: the cluster listed, three typed answers, then every key of the scope deleted.
use super::prompt::type_in;
use super::{list, CliError, Ctx, Format};

/// The phrase patronictl makes the operator type.
const AWARE: &str = "Yes I am aware";

/// List the cluster, ask for its name, the phrase, and the leader's name when a leader key is held (the
/// store read before the questions), then wipe the scope. A wrong answer deletes nothing (exit 1).
pub async fn remove(ctx: &Ctx, format: Format) -> Result<(), CliError> {
    let scope = ctx.config.scope.as_str();
    let snapshot = ctx.store.read().await?;
    print!("{}", list::listing(scope, &snapshot, format, false));
    if type_in("Please confirm the cluster name to remove")? != scope {
        return Err(CliError::refused("Cluster names specified do not match"));
    }
    let question = format!(
        "You are about to remove all information in DCS for {scope}, please type: \"{AWARE}\""
    );
    if type_in(&question)? != AWARE {
        return Err(CliError::refused(format!(
            "You did not exactly type \"{AWARE}\""
        )));
    }
    if let Some(leader) = snapshot.cluster.leader_name() {
        let question =
            "This cluster currently is healthy. Please specify the leader name to continue";
        if type_in(question)? != leader.as_str() {
            return Err(CliError::refused(
                "You did not specify the current leader of the cluster",
            ));
        }
    }
    ctx.store.delete_cluster().await
}
