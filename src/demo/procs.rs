//! The processes a local cluster leaves behind: this process as their subreaper, their trees, and stopping them by PID.
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// This process as subreaper of everything it starts: daemonized postmasters and fencing processes are
/// re-parented here when their agent dies, and reaped here (PID 1 in a container may not reap).
pub struct Reaper {
    /// PIDs of children someone holds a `Child` for: those are theirs to wait for.
    held: Mutex<HashSet<i32>>,
    /// Zombies not held, with the rounds each has been seen for: one is reaped only after
    /// `ZOMBIE_GRACE_ROUNDS`, so a child spawned with plain `Command` is left to its own waiter.
    zombies: Mutex<HashMap<i32, u32>>,
}

/// 20 rounds of at least 100 ms: a waiter that has not reaped its own exited child in 2 s is not coming.
const ZOMBIE_GRACE_ROUNDS: u32 = 20;

/// The process-wide reaper, started on first use.
pub fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| {
        let _ = nix::sys::prctl::set_child_subreaper(true);
        std::thread::spawn(|| loop {
            reaper().reap_orphans();
            std::thread::sleep(Duration::from_millis(100));
        });
        Reaper {
            held: Mutex::new(HashSet::new()),
            zombies: Mutex::new(HashMap::new()),
        }
    })
}

impl Reaper {
    fn held(&self) -> MutexGuard<'_, HashSet<i32>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawn `cmd`, keeping the reaper off it (the caller waits for it).
    pub fn spawn(&self, cmd: &mut Command) -> std::io::Result<Child> {
        let mut held = self.held();
        let child = cmd.spawn()?;
        held.insert(child.id() as i32);
        Ok(child)
    }

    /// Run `start` (which spawns children it waits for itself, e.g. a store) with the reaper held off, and
    /// keep it off the PIDs it returns.
    pub fn spawn_with<T>(&self, start: impl FnOnce() -> (T, Vec<i32>)) -> T {
        let mut held = self.held();
        let (value, pids) = start();
        held.extend(pids);
        value
    }

    /// `cmd`'s exit status and output, as `Command::output` gives them, with the reaper kept off the child
    /// (otherwise it may reap the exited child first, and the wait fails with ECHILD).
    pub fn output(&self, cmd: &mut Command) -> std::io::Result<std::process::Output> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = self.spawn(cmd)?;
        let pid = child.id() as i32;
        let out = child.wait_with_output();
        self.release(pid);
        out
    }

    /// The child was waited for: its PID may be reused.
    pub fn release(&self, pid: i32) {
        self.held().remove(&pid);
    }

    fn reap_orphans(&self) {
        let held = self.held().clone();
        let mut zombies = self.zombies.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = HashMap::new();
        for (pid, state) in children_of(Pid::this()) {
            if state != 'Z' || held.contains(&pid.as_raw()) {
                continue;
            }
            let rounds = zombies.get(&pid.as_raw()).copied().unwrap_or(0) + 1;
            if rounds >= ZOMBIE_GRACE_ROUNDS {
                let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
            } else {
                seen.insert(pid.as_raw(), rounds);
            }
        }
        *zombies = seen;
    }

    /// Wait up to `within` (in 1 ms rounds) until the SIGKILLed `pids` are gone, reaping those re-parented to us now rather
    /// than at the next round: PostgreSQL refuses to start while its old postmaster's PID answers
    /// `kill(pid, 0)`, and a zombie does ("Is another postmaster (PID ...) using socket file").
    pub fn reap_killed(&self, pids: &[Pid], within: Duration) {
        let mut rounds_left = within.as_millis();
        for &pid in pids {
            while rounds_left > 0 {
                rounds_left -= 1;
                if !self.held().contains(&pid.as_raw()) {
                    let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
                }
                if kill(pid, None).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// SIGKILL every process re-parented to us that nobody holds a `Child` for (postmasters, backends and
    /// fencing processes whose agent is gone): all of them descend from processes we started.
    pub fn kill_orphans(&self) {
        let held = self.held().clone();
        for (pid, _) in children_of(Pid::this()) {
            if !held.contains(&pid.as_raw()) {
                let _ = kill(pid, Signal::SIGKILL);
            }
        }
    }
}

/// `(pid, state)` of every process whose parent is `parent`, from /proc.
pub fn children_of(parent: Pid) -> Vec<(Pid, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent = parent.as_raw().to_string();
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if fields.next() == Some(parent.as_str()) {
            out.push((Pid::from_raw(pid), state));
        }
    }
    out
}

/// `pid` and all its descendants (found through /proc, children before their parent is gone).
pub fn process_tree(pid: Pid) -> Vec<Pid> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let kids: Vec<Pid> = children_of(out[i]).into_iter().map(|(p, _)| p).collect();
        out.extend(kids);
        i += 1;
    }
    out
}

/// Whether a process with this PID exists and is not a zombie.
pub fn alive(pid: Pid) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|s| s != 'Z' && s != 'X'),
        Err(_) => false,
    }
}

/// The postmaster's PID from `postmaster.pid`, if the file is there.
pub fn postmaster_pid(data_dir: &Path) -> Option<Pid> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok().map(Pid::from_raw)
}

/// The fencing process's PID, from the file the agent keeps next to the data directory.
pub fn fencer_pid(data_dir: &Path) -> Option<Pid> {
    let mut p = data_dir.as_os_str().to_owned();
    p.push(".fence.pid");
    let text = std::fs::read_to_string(PathBuf::from(p)).ok()?;
    text.lines().next()?.trim().parse().ok().map(Pid::from_raw)
}

/// Stop a postmaster left running: SIGQUIT (immediate shutdown), SIGKILL after `grace`.
pub fn stop_postmaster(data_dir: &Path, grace: Duration) {
    let Some(pid) = postmaster_pid(data_dir).filter(|p| alive(*p)) else {
        return;
    };
    let _ = kill(pid, Signal::SIGQUIT);
    let until = crate::clock::now() + grace;
    while alive(pid) && crate::clock::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in process_tree(pid) {
        let _ = kill(p, Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child someone spawned with plain `Command` (not through the reaper) and waits for a moment after
    /// it exited is theirs to wait for: the reaper's rounds must not take it first (CI on e4d558e: ECHILD).
    #[test]
    fn a_child_spawned_without_the_reaper_is_left_to_its_waiter() {
        reaper();
        let mut child = Command::new("true").spawn().expect("spawn true");
        std::thread::sleep(Duration::from_millis(500));
        let status = child.wait().expect("the waiter reaps its own child");
        assert!(status.success());
    }
}
