//! The hook runner: Patroni's callbacks (one at a time, a newer kills an older one's process group) and the
//! `pre_promote` / `before_stop` scripts (waited for, killed at their deadline).
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::hooks::HookCommands;
use crate::ha::{CallbackEvent, CallbackRole};

/// A callback still running, by the process group it leads.
struct Running {
    pgid: Pid,
    /// Set by the reaper once the leader exited: its group id may then be reused, so it is never signalled.
    exited: Arc<AtomicBool>,
}

/// The configured hooks and the callbacks in flight (on_reload has a slot of its own, as in Patroni).
#[derive(Default)]
pub struct HookRunner {
    pub commands: HookCommands,
    pub scope: String,
    running: Option<Running>,
    running_reload: Option<Running>,
}

impl HookRunner {
    pub fn new(commands: HookCommands, scope: String) -> HookRunner {
        HookRunner {
            commands,
            scope,
            ..HookRunner::default()
        }
    }

    /// Start `<cmd> <event> <role> <scope>` without waiting, after killing the callback still running.
    pub fn callback(&mut self, event: CallbackEvent, role: CallbackRole) {
        let Some(cmd) = self.commands.callbacks.get(&event) else {
            return;
        };
        let mut argv = cmd.clone();
        argv.extend([event.to_string(), role.to_string(), self.scope.clone()]);
        let slot = if event == CallbackEvent::OnReload {
            &mut self.running_reload
        } else {
            &mut self.running
        };
        if let Some(old) = slot.take() {
            kill(&old);
        }
        info!(callback = %argv.join(" "), "running callback");
        match spawn(&argv) {
            Ok(r) => *slot = Some(r),
            Err(e) => warn!(callback = %argv.join(" "), error = %e, "callback failed to start"),
        }
    }

    /// Run `pre_promote` until `deadline`: Ok on exit 0; Err otherwise (killed at the deadline).
    pub async fn pre_promote(&self, deadline: Instant) -> Result<(), String> {
        match &self.commands.pre_promote {
            None => Ok(()),
            Some(argv) => run_until(argv, deadline, "pre_promote").await,
        }
    }

    /// Run `before_stop` until `deadline`; its result is only logged (PostgreSQL is stopped regardless).
    pub async fn before_stop(&self, deadline: Instant) {
        if let Some(argv) = &self.commands.before_stop {
            if let Err(e) = run_until(argv, deadline, "before_stop").await {
                warn!(error = %e, "before_stop script did not succeed; stopping PostgreSQL anyway");
            }
        }
    }
}

/// Start `argv` as the leader of a new process group, reaped by a task of its own.
fn spawn(argv: &[String]) -> std::io::Result<Running> {
    let mut child = command(argv)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()?;
    let pgid = Pid::from_raw(child.id().map_or(0, |id| id as i32));
    let exited = Arc::new(AtomicBool::new(false));
    let flag = exited.clone();
    tokio::spawn(async move {
        let status = child.wait().await;
        flag.store(true, Ordering::SeqCst);
        if let Ok(s) = status {
            if !s.success() {
                info!(status = %s, "callback exited");
            }
        }
    });
    Ok(Running { pgid, exited })
}

/// `argv` as a command whose environment lacks the agent's own `TENURE_*` variables, which can carry
/// credentials (as for the PostgreSQL binaries: issue 13, item 3).
fn command(argv: &[String]) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    crate::pg::strip_own_env(cmd.as_std_mut());
    cmd
}

fn kill(r: &Running) {
    if r.pgid.as_raw() > 0 && !r.exited.load(Ordering::SeqCst) {
        info!(pgid = r.pgid.as_raw(), "killing the callback still running");
        let _ = killpg(r.pgid, Signal::SIGKILL);
    }
}

/// Run `argv` in its own process group and wait, bounded by `deadline` (then the group is killed).
async fn run_until(argv: &[String], deadline: Instant, what: &str) -> Result<(), String> {
    let mut child = command(argv)
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{what} script `{}` could not start: {e}", argv.join(" ")))?;
    let pgid = Pid::from_raw(child.id().map_or(0, |id| id as i32));
    match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(Ok(s)) if s.success() => Ok(()),
        Ok(Ok(s)) => {
            info!(script = %argv.join(" "), status = %s, "{what} script exited");
            Err(format!(
                "{what} script `{}` exited with {s}",
                argv.join(" ")
            ))
        }
        Ok(Err(e)) => Err(format!("{what} script `{}`: {e}", argv.join(" "))),
        Err(_) => {
            if pgid.as_raw() > 0 {
                let _ = killpg(pgid, Signal::SIGKILL);
            }
            let _ = child.wait().await;
            Err(format!(
                "{what} script `{}` ran out of time and was killed",
                argv.join(" ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hook_does_not_see_the_agents_tenure_variables() {
        // Only this test sets the variable; the other tests in this binary do not read it.
        std::env::set_var("TENURE_HOOK_TEST_SECRET", "s3cret");
        let argv: Vec<String> = ["sh", "-c", "env | grep -q '^TENURE_' && exit 3 || exit 0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let deadline = crate::clock::now() + std::time::Duration::from_secs(10);
        let got = run_until(&argv, deadline, "pre_promote").await;
        std::env::remove_var("TENURE_HOOK_TEST_SECRET");
        assert_eq!(got, Ok(()), "the hook saw a TENURE_ variable");
    }
}
