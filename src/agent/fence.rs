//! The fencing process: holds the lease deadline in a file and stops PostgreSQL when it passes (R5).
//!
//! The agent writes `armed <deadline_ms>` or `disarmed` (atomically, by rename) to `<data_dir>.fence`; a
//! separate `tenure fencer` process polls that file every 20 ms and, once `CLOCK_MONOTONIC` passes an
//! armed deadline, sends the postmaster SIGQUIT (immediate shutdown: every backend goes with it), then
//! SIGKILL if it is still there. It needs nothing from the agent to do this: an agent killed or frozen
//! leaves a primary that stops writing by its lease deadline.
//!
//! Nothing here trusts a file another user could have written: the fencer proves it runs by holding an
//! exclusive `flock` on `<data_dir>.fence.lock` (the agent try-locks it: a lock cannot go stale the way a
//! PID file does), reads the fence file only when it is owned by its own user (and otherwise keeps the
//! last state it trusted), checks a PID is really this data directory's postmaster before signalling it,
//! and takes `standby.signal` as proof of a standby only together with evidence the server wrote itself.
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
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
    /// The binary started as `<program> fencer`: the running agent's own.
    program: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Fence {
    pub fn new(data_dir: &Path) -> Fence {
        let mut file = data_dir.as_os_str().to_owned();
        file.push(".fence");
        Fence {
            file: PathBuf::from(file),
            data_dir: data_dir.to_path_buf(),
            // /proc/self/exe still works when the binary was replaced on disk (an upgrade) while we run.
            program: PathBuf::from("/proc/self/exe"),
            child: None,
        }
    }

    /// The same, with the fencer started from `program` (tests, whose own executable is not tenure).
    pub fn with_program(data_dir: &Path, program: &Path) -> Fence {
        Fence {
            program: program.to_path_buf(),
            ..Fence::new(data_dir)
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

    /// The agent is exiting with the fence stood down: tell the fencing process to end (through the
    /// file, never by a signal to a PID read from disk; a new agent starts another when it next arms).
    pub fn stop_process(&mut self) {
        if matches!(read_state(&self.file), Some(State::Disarmed) | None) {
            let _ = write_atomically(&self.file, "exit\n");
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
        if fencer_holds_lock(&lock_file(&self.file)) {
            return Ok(());
        }
        let mut cmd = tokio::process::Command::new(&self.program);
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
        // For operators and test harnesses only: nothing here trusts it.
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

fn lock_file(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Open the lock file without following a link; it is never replaced, so every fencer locks one inode.
fn open_lock(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// Whether a fencing process holds the lock: our non-blocking try-lock fails exactly while one does.
/// A lock file we cannot open counts as "none runs": starting a second fencer is harmless (it exits
/// when it cannot take the lock), believing in one that is not there is not.
fn fencer_holds_lock(path: &Path) -> bool {
    let Ok(file) = open_lock(path) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => false,
        Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
    }
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
    /// The agent exited with the fence stood down: the fencing process ends.
    Exit,
}

fn read_state(file: &Path) -> Option<State> {
    parse_state(&std::fs::read_to_string(file).ok()?)
}

fn parse_state(text: &str) -> Option<State> {
    let mut words = text.split_whitespace();
    match words.next()? {
        "armed" => words.next()?.parse().ok().map(State::Armed),
        "disarmed" => Some(State::Disarmed),
        "exit" => Some(State::Exit),
        _ => None,
    }
}

/// The fence file as the fencer trusts it: not a link, owned by the fencer's own user (the agent's);
/// a file someone else put there (or garbage) is no state at all.
fn read_trusted_state(file: &Path) -> Option<State> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(file)
        .ok()?;
    if f.metadata().ok()?.uid() != nix::unistd::geteuid().as_raw() {
        return None;
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut f, &mut text).ok()?;
    parse_state(&text)
}

/// `tenure fencer`: runs until the data directory's parent disappears. Synchronous on purpose: no runtime,
/// nothing to starve.
pub fn fencer_main(file: &Path, data_dir: &Path) -> ! {
    let parent = data_dir.parent().map(Path::to_path_buf).unwrap_or_default();
    // Held while this process watches: the agent's proof that a fencer does.
    let mut lock = match open_lock(&lock_file(file)) {
        Ok(f) => Flock::lock(f, FlockArg::LockExclusiveNonblock)
            .unwrap_or_else(|_| std::process::exit(0)), // another fencer watches the file
        Err(e) => {
            eprintln!(
                "tenure fencer: cannot open {}: {e}",
                lock_file(file).display()
            );
            std::process::exit(70);
        }
    };
    // A file that vanished or that we do not trust changes nothing: deleting the fence file must not
    // disarm the fence.
    let mut state = None;
    loop {
        if !parent.exists() {
            std::process::exit(0);
        }
        if let Some(now) = read_trusted_state(file) {
            state = Some(now);
        }
        match state {
            Some(State::Exit) => {
                (lock, state) = leave_or_stay(lock, file);
            }
            Some(State::Armed(deadline)) if crate::clock::monotonic().0 >= deadline => {
                stop_postmaster(data_dir)
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// Told to exit: release the lock, then look once more. An agent arms by writing the file *before* it
/// try-locks, so if one armed after our last read we see it now and stay (unless the fencer it started
/// took the lock meanwhile); otherwise we end.
fn leave_or_stay(lock: Flock<File>, file: &Path) -> (Flock<File>, Option<State>) {
    let unlocked = lock
        .unlock()
        .map_err(|_| ())
        .unwrap_or_else(|_| std::process::exit(0));
    match read_trusted_state(file) {
        Some(again @ (State::Armed(_) | State::Disarmed)) => {
            match Flock::lock(unlocked, FlockArg::LockExclusiveNonblock) {
                Ok(relocked) => (relocked, Some(again)),
                Err(_) => std::process::exit(0),
            }
        }
        _ => std::process::exit(0),
    }
}

/// SIGQUIT (immediate shutdown of the postmaster and every backend), then SIGKILL if it lingers, once
/// the PID is proven to be this data directory's postmaster. A standby cannot accept writes and is left
/// alone, so a restarted agent that has not yet stood the fence down can still start its replica.
fn stop_postmaster(data_dir: &Path) {
    let Some(pid) = first_line_pid(&data_dir.join("postmaster.pid")) else {
        return;
    };
    if !alive(pid) || !crate::pg::is_postmaster_of(pid, data_dir) || is_standby(data_dir, pid) {
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

fn first_line_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// A standby: `standby.signal` is there, and either it was there before this postmaster started (so
/// the server read it and runs in recovery; promotion removes it) or `pg_control` says archive
/// recovery. A `standby.signal` a database superuser creates under a running primary (`COPY ... TO`)
/// is newer than the postmaster and leaves pg_control saying "in production": it disarms nothing.
fn is_standby(data_dir: &Path, pid: i32) -> bool {
    let Ok(signal) = std::fs::symlink_metadata(data_dir.join("standby.signal")) else {
        return false;
    };
    // The start time is known to a clock tick (10 ms, rounded down): allow two, which only admits a
    // file created while that postmaster's startup process was still reading it.
    const SLACK_NS: i128 = 20_000_000;
    let read_at_start = crate::pg::process_started_at_ns(pid).is_some_and(|started_ns| {
        let changed_ns = signal.ctime() as i128 * 1_000_000_000 + signal.ctime_nsec() as i128;
        changed_ns <= started_ns + SLACK_NS
    });
    read_at_start || crate::pg::pg_control_says_standby(data_dir)
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
        assert_eq!(read_trusted_state(f.file()), Some(State::Disarmed));
        f.stop_process();
        assert_eq!(read_state(f.file()), Some(State::Exit));
        std::fs::write(f.file(), "garbage").unwrap();
        assert_eq!(read_state(f.file()), None);
    }
}
