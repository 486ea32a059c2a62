//! The fencing process: holds the lease deadline in a file and stops PostgreSQL when it passes (R5).
//!
//! The agent writes `armed <deadline_ms>` or `disarmed` (atomically, by rename) to `<data_dir>.fence`; a
//! separate `tenure fencer` process polls that file every 20 ms and, once `CLOCK_MONOTONIC` passes an
//! armed deadline, sends the postmaster SIGQUIT (immediate shutdown: every backend goes with it), then
//! SIGKILL if it is still there. It needs nothing from the agent to do this: an agent killed or frozen
//! leaves a primary that stops writing by its lease deadline.
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::ha::Millis;

/// How often the fencing process looks at the clock and the file.
const POLL_MS: u64 = 20;

/// Errors talking to the fencing process.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("cannot write the fence file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the fencing process: {0}")]
    Spawn(std::io::Error),
}

/// The agent's handle on its fencing process.
pub struct Fence {
    file: PathBuf,
    data_dir: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Fence {
    pub fn new(data_dir: &Path) -> Fence {
        let mut file = data_dir.as_os_str().to_owned();
        file.push(".fence");
        Fence {
            file: PathBuf::from(file),
            data_dir: data_dir.to_path_buf(),
            child: None,
        }
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Set the deadline (and make sure a fencing process watches it).
    pub fn arm(&mut self, deadline: Millis) -> Result<(), FenceError> {
        write_atomically(&self.file, &format!("armed {}\n", deadline.0))?;
        self.ensure_running()
    }

    /// Stand down: PostgreSQL is not primary, or the operator paused HA.
    pub fn disarm(&mut self) -> Result<(), FenceError> {
        write_atomically(&self.file, "disarmed\n")
    }

    /// The agent is exiting with the fence stood down: end the fencing process too (a new agent starts
    /// another when it next arms).
    pub fn stop_process(&mut self) {
        if let Some(pid) = read_pid(&pid_file(&self.file)) {
            if matches!(read_state(&self.file), Some(State::Disarmed) | None) && alive(pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        let _ = std::fs::remove_file(pid_file(&self.file));
    }

    /// Make sure a fencing process runs: one left by a previous agent counts (re-adoption).
    fn ensure_running(&mut self) -> Result<(), FenceError> {
        if let Some(child) = &mut self.child {
            if matches!(child.try_wait(), Ok(None)) {
                return Ok(());
            }
            self.child = None;
        }
        if read_pid(&pid_file(&self.file)).is_some_and(alive) {
            return Ok(());
        }
        // /proc/self/exe still works when the binary was replaced on disk (an upgrade) while we run.
        let mut cmd = tokio::process::Command::new("/proc/self/exe");
        cmd.arg0("tenure");
        cmd.arg("fencer")
            .arg("--file")
            .arg(&self.file)
            .arg("--data-dir")
            .arg(&self.data_dir);
        crate::pg::strip_own_env(cmd.as_std_mut());
        // Its own process group: a signal to the agent's group (or the agent) does not reach it.
        cmd.process_group(0)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(false);
        let child = cmd.spawn().map_err(FenceError::Spawn)?;
        if let Some(id) = child.id() {
            write_atomically(&pid_file(&self.file), &format!("{id}\n"))?;
        }
        self.child = Some(child);
        Ok(())
    }
}

fn pid_file(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".pid");
    PathBuf::from(p)
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

fn write_atomically(path: &Path, text: &str) -> Result<(), FenceError> {
    // The data directory's parent may be writable by the postgres user: never follow a planted link.
    crate::pg::files::replace_file(path, text.as_bytes(), 0o644, None).map_err(|source| {
        FenceError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// What the fence file says.
#[derive(Debug, PartialEq, Eq)]
enum State {
    Armed(u64),
    Disarmed,
}

fn read_state(file: &Path) -> Option<State> {
    let text = std::fs::read_to_string(file).ok()?;
    let mut words = text.split_whitespace();
    match words.next()? {
        "armed" => words.next()?.parse().ok().map(State::Armed),
        "disarmed" => Some(State::Disarmed),
        _ => None,
    }
}

/// `tenure fencer`: runs until the data directory's parent disappears. Synchronous on purpose: no runtime,
/// nothing to starve.
pub fn fencer_main(file: &Path, data_dir: &Path) -> ! {
    let parent = data_dir.parent().map(Path::to_path_buf).unwrap_or_default();
    loop {
        if !parent.exists() {
            std::process::exit(0);
        }
        if let Some(State::Armed(deadline)) = read_state(file) {
            if crate::clock::monotonic().0 >= deadline {
                stop_postmaster(data_dir);
            }
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// SIGQUIT (immediate shutdown of the postmaster and every backend), then SIGKILL if it lingers. A server
/// configured as a standby (`standby.signal`) cannot accept writes and is left alone, so a restarted
/// agent that has not yet stood the fence down can still start its replica.
fn stop_postmaster(data_dir: &Path) {
    if data_dir.join("standby.signal").exists() {
        return;
    }
    let Some(pid) = read_pid(&data_dir.join("postmaster.pid")) else {
        return;
    };
    if !alive(pid) {
        return;
    }
    let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(POLL_MS));
        if !alive(pid) {
            return;
        }
    }
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = Fence::new(&dir.path().join("data"));
        write_atomically(f.file(), "armed 1234\n").unwrap();
        assert_eq!(read_state(f.file()), Some(State::Armed(1234)));
        f.disarm().unwrap();
        assert_eq!(read_state(f.file()), Some(State::Disarmed));
        std::fs::write(f.file(), "garbage").unwrap();
        assert_eq!(read_state(f.file()), None);
    }
}
