//! Running PostgreSQL binaries (as `run_as` when set) with a bound, and inspecting the postmaster by PID.
use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use super::{PgError, PgSettings};

/// What a finished binary printed.
#[derive(Debug)]
pub(crate) struct Output {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr).trim().to_string()
    }
}

/// One invocation of a PostgreSQL binary.
pub(crate) struct Cmd<'a> {
    settings: &'a PgSettings,
    bin: String,
    args: Vec<OsString>,
    env: Vec<(String, OsString)>,
    timeout_s: Option<u64>,
}

impl<'a> Cmd<'a> {
    pub fn new(settings: &'a PgSettings, bin: &str) -> Self {
        Cmd {
            settings,
            bin: bin.to_string(),
            args: Vec::new(),
            // Output is parsed: pin the C locale so messages are in English.
            env: vec![("LANG".into(), "C".into()), ("LC_ALL".into(), "C".into())],
            timeout_s: None,
        }
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn env(mut self, k: &str, v: impl Into<OsString>) -> Self {
        self.env.push((k.to_string(), v.into()));
        self
    }

    pub fn timeout_s(mut self, s: u64) -> Self {
        self.timeout_s = Some(s);
        self
    }

    fn describe(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        format!("{} {}", self.bin, args.join(" "))
    }

    /// Run to completion; a non-zero exit is returned as `Output { success: false }`, not as an error.
    pub async fn output(self) -> Result<Output, PgError> {
        let program = self.settings.bin(&self.bin);
        let mut cmd = match &self.settings.run_as {
            Some(user) => {
                let mut c = tokio::process::Command::new("runuser");
                c.arg("-u").arg(user).arg("--").arg(&program);
                c
            }
            None => tokio::process::Command::new(&program),
        };
        strip_own_env(cmd.as_std_mut());
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A timed-out future is dropped: the child must not outlive it.
            .kill_on_drop(true);
        // Binaries run as `run_as` must be able to stat their working directory.
        cmd.current_dir("/");
        let describe = self.describe();
        let child = cmd
            .spawn()
            .map_err(PgError::io(format!("spawn {describe}")))?;
        let waited = child.wait_with_output();
        let out = match self.timeout_s {
            Some(s) => tokio::time::timeout(Duration::from_secs(s), waited)
                .await
                .map_err(|_| PgError::Timeout {
                    cmd: describe.clone(),
                    after_s: s,
                })?,
            None => waited.await,
        }
        .map_err(PgError::io(format!("wait {describe}")))?;
        Ok(Output {
            success: out.status.success(),
            status: out.status.to_string(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Run and require exit 0.
    pub async fn run(self) -> Result<Output, PgError> {
        let describe = self.describe();
        let out = self.output().await?;
        if out.success {
            Ok(out)
        } else {
            Err(PgError::Command {
                cmd: describe,
                status: out.status.clone(),
                output: out.combined(),
            })
        }
    }
}

/// Remove the agent's own `TENURE_*` variables (they can carry credentials) from a child's environment:
/// through `pg_ctl` they would reach the postmaster, every backend and `archive_command`. Patroni strips
/// its `PATRONI_*` the same way.
pub(crate) fn strip_own_env(cmd: &mut std::process::Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TENURE_") {
            cmd.env_remove(key);
        }
    }
}

/// The postmaster's PID and status line from `postmaster.pid`, if the file exists.
pub(crate) fn read_postmaster_pid(settings: &PgSettings) -> Option<(i32, String)> {
    let text = std::fs::read_to_string(settings.data_path("postmaster.pid")).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    // Line 8 (PG10+) is the status: starting, ready, stopping, standby.
    let status = lines.nth(6).unwrap_or("").trim().to_string();
    Some((pid, status))
}

/// State letter and parent PID from `/proc/<pid>/stat`; `None` when there is no such process.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `pid` is a live process. A zombie is dead: it only waits for its parent to reap it.
pub(crate) fn pid_alive(pid: i32) -> bool {
    matches!(proc_stat(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// PIDs whose parent is `pid` (the postmaster's backends and auxiliary processes).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| matches!(proc_stat(p), Some((_, ppid)) if ppid == pid))
        .collect()
}

/// SIGKILL the postmaster and its children, then wait (reaping when they are ours) until none is alive.
pub(crate) async fn kill_postmaster(pid: i32, timeout_s: u64) -> Result<(), PgError> {
    // Collect children first: once the postmaster dies they are re-parented and harder to find.
    let mut victims = children_of(pid);
    victims.insert(0, pid);
    for &p in &victims {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    if wait_gone(&victims, timeout_s * 1000).await {
        Ok(())
    } else {
        Err(PgError::Timeout {
            cmd: format!("SIGKILL postmaster {pid}"),
            after_s: timeout_s,
        })
    }
}

/// Wait up to `bound_ms` until none of `pids` is alive, reaping those that are ours (our children, or
/// orphans when we are the subreaper); ECHILD means their parent reaps them.
pub(crate) async fn wait_gone(pids: &[i32], bound_ms: u64) -> bool {
    let poll = async {
        loop {
            for &p in pids {
                let _ = waitpid(Pid::from_raw(p), Some(WaitPidFlag::WNOHANG));
            }
            if !pids.iter().any(|&p| pid_alive(p)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_millis(bound_ms), poll)
        .await
        .is_ok()
}
