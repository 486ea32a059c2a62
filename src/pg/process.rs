//! Running PostgreSQL binaries (as `run_as` when set) with a bound, and inspecting the postmaster by PID.
//!
//! Each binary runs in a process group of its own, SIGKILLed whole when its future is dropped before it exits
//! (`runuser` does not pass a SIGKILL on to its child; `pg_ctl start`'s postmaster is in a session of its own and
//! survives, as a start that is still recovering must), and without the agent's `TENURE_*` variables in its
//! environment. `super::bounded` gives a step its deadline (`PgError::StepTimeout`).
use std::ffi::OsString;
use std::path::Path;
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
    timeout_ms: Option<u64>,
}

impl<'a> Cmd<'a> {
    pub fn new(settings: &'a PgSettings, bin: &str) -> Self {
        Cmd {
            settings,
            bin: bin.to_string(),
            args: Vec::new(),
            // Output is parsed: pin the C locale so messages are in English.
            env: vec![("LANG".into(), "C".into()), ("LC_ALL".into(), "C".into())],
            timeout_ms: None,
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
        self.timeout_ms = Some(s.saturating_mul(1000));
        self
    }

    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
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
            // A timed-out future is dropped: the child must not outlive it, nor must what it started
            // (`runuser` does not pass a SIGKILL on to its child): it leads a process group of its own,
            // which `GroupKill` kills. A postmaster `pg_ctl start` forks is not in it (pg_ctl puts it in
            // a session of its own).
            .process_group(0)
            .kill_on_drop(true);
        // Binaries run as `run_as` must be able to stat their working directory.
        cmd.current_dir("/");
        let describe = self.describe();
        let child = cmd
            .spawn()
            .map_err(PgError::io(format!("spawn {describe}")))?;
        let mut group = GroupKill(child.id().and_then(|id| i32::try_from(id).ok()));
        let waited = child.wait_with_output();
        let out = match self.timeout_ms {
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), waited)
                .await
                .map_err(|_| PgError::StepTimeout {
                    step: describe.clone(),
                    timeout_ms: ms,
                })?,
            None => waited.await,
        }
        .map_err(PgError::io(format!("wait {describe}")))?;
        group.0 = None;
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

/// The process group of a binary still running when its future is dropped (timed out, or its job
/// abandoned): SIGKILLed whole, so nothing it started is left running.
struct GroupKill(Option<i32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), Signal::SIGKILL);
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

/// Whether `pid` is really `data_dir`'s postmaster, before anything signals it: a stale `postmaster.pid`
/// whose PID now belongs to another process must not get that process killed. As Patroni's
/// `postgresql/postmaster.py` does: the executable must be `postgres` (or `postmaster`), and either its
/// start time matches `postmaster.pid`'s (within 3 s) or its working directory is the data directory.
pub(crate) fn is_postmaster_of(pid: i32, data_dir: &Path) -> bool {
    if !runs_postgres(pid) {
        return false;
    }
    let cwd_matches = match (
        std::fs::read_link(format!("/proc/{pid}/cwd")),
        data_dir.canonicalize(),
    ) {
        (Ok(cwd), Ok(dir)) => cwd == dir,
        _ => false,
    };
    cwd_matches || start_time_matches(pid, data_dir)
}

/// `pid` is another process whose executable is `postgres` (or `postmaster`).
pub(crate) fn runs_postgres(pid: i32) -> bool {
    if pid <= 0 || pid == std::process::id() as i32 {
        return false;
    }
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    // An upgrade replaced the binary under a running server: the link then ends in " (deleted)".
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    matches!(
        name.trim_end_matches(" (deleted)"),
        "postgres" | "postmaster"
    )
}

/// `postmaster.pid` line 3 (start time, epoch seconds) against the process's own start time.
fn start_time_matches(pid: i32, data_dir: &Path) -> bool {
    let from_file = std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().nth(2)?.trim().parse::<u64>().ok());
    match (from_file, process_start_epoch_s(pid)) {
        (Some(a), Some(b)) => a.abs_diff(b) < 3,
        _ => false,
    }
}

/// Linux's USER_HZ (the unit of `/proc/<pid>/stat` times): 100 on every architecture PostgreSQL
/// packages target.
const TICKS_PER_S: u64 = 100;

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks after boot.
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// When `pid` started, in wall-clock nanoseconds since the epoch, to 10 ms (comparable with a file's
/// ctime): its start after boot, placed on the wall clock by reading both clocks now.
pub(crate) fn process_started_at_ns(pid: i32) -> Option<i128> {
    let since_boot_ns = start_ticks(pid)? as i128 * (1_000_000_000 / TICKS_PER_S as i128);
    let (boot_now, wall_now) = crate::clock::boot_and_wall_ns()?;
    Some(wall_now - (boot_now - since_boot_ns))
}

/// `btime` from `/proc/stat` plus the process's start after boot, in seconds.
fn process_start_epoch_s(pid: i32) -> Option<u64> {
    let ticks = start_ticks(pid)?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(btime + ticks / TICKS_PER_S)
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

/// `pg_ctl reload`: re-read config files (primary_conninfo is reloadable on PG13+). Here, below both `ctl` and
/// `recovery`, which use it.
pub async fn reload(settings: &PgSettings) -> Result<(), PgError> {
    Cmd::new(settings, "pg_ctl")
        .arg("reload")
        .arg("-D")
        .arg(&settings.data_dir)
        .timeout_s(settings.pg_ctl_timeout_s)
        .run()
        .await?;
    Ok(())
}
