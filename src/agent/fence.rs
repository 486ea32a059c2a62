//! The fencing process: holds the lease deadline in a file and stops PostgreSQL when it passes (R5).
//!
//! The agent writes `armed <deadline_ms>` or `disarmed` (atomically, by rename) to `fence` in its runtime
//! folder `<data_dir>.fence.d/`; a separate `tenure fencer` process (`fencer.rs`) sleeps on that file and
//! a timer (`wake.rs`) and, once `CLOCK_MONOTONIC` passes an armed deadline, sends the postmaster SIGQUIT (immediate
//! shutdown: every backend goes with it), then SIGKILL if it is still there. It needs nothing from the
//! agent to do this: an agent killed or frozen leaves a primary that stops writing by its lease deadline.
//!
//! Nothing here trusts a path another user could have changed: the runtime folder is a directory owned
//! by the agent's user, mode 0700, checked before every write; the fencer holds it and the data directory
//! open and reads every file relative to them (`O_NOFOLLOW|O_NONBLOCK`, regular files only, the fence file
//! and the lock owned by its own user), so a link, a FIFO or a renamed parent changes nothing. It proves
//! it runs by holding an exclusive `flock` on `fence.lock` (the agent try-locks it: a lock cannot go stale
//! the way a PID file does), checks a process is this data directory's postmaster before signalling it,
//! and takes `standby.signal` as proof of a standby only together with evidence the server wrote itself.
//!
//! A standby is left alone, so a restarted agent can start its replica before it stands the old fence down;
//! `standby.signal` counts as proof only when it predates the postmaster or `global/pg_control` says archive recovery
//! (a database superuser can create the file under a running primary). The postmaster is checked by
//! `/proc/<pid>/exe`, start time or working directory, as Patroni does. The fencer ends when the agent writes `exit`
//! into the fence file; a restarted agent re-arms the same fencing process (docs/security.md covers the folder).
//!
//! Why a separate process: the alternative, "PostgreSQL cannot outlive its agent", turns every agent restart
//! (upgrade, crash) into a PostgreSQL outage, and does nothing for a frozen agent. The watchdog (`watchdog.rs`)
//! covers what the fencer cannot. In the simulator the fencing process is modelled apart from the agent and the
//! watchdog apart from both; the faults include freezing the agent alone, and the agent with its fencing process.
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::ha::Millis;

mod fencer;
mod wake;
pub use fencer::fencer_main;

/// The fencing process's own binary, looked for beside the agent's.
const FENCER_BIN: &str = "tenure-fencer";

/// The fence file's name in the runtime folder; the lock is `<name>.lock`.
const FENCE_FILE: &str = "fence";

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
    /// The runtime folder is not a directory of the agent's own, mode 0700: another user could write it.
    #[error("the fence's runtime folder {path} {why}: remove it (the agent creates it again, mode 0700)")]
    Unsafe { path: PathBuf, why: String },
}

/// The agent's handle on its fencing process.
pub struct Fence {
    /// The runtime folder, `<data_dir>.fence.d`.
    dir: PathBuf,
    file: PathBuf,
    data_dir: PathBuf,
    /// The binary started as `<program> fencer`: the running agent's own.
    program: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Fence {
    pub fn new(data_dir: &Path) -> Fence {
        let mut dir = data_dir.as_os_str().to_owned();
        dir.push(".fence.d");
        let dir = PathBuf::from(dir);
        Fence {
            file: dir.join(FENCE_FILE),
            dir,
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
        self.write(&format!("armed {}\n", deadline.0))?;
        self.ensure_running()
    }

    /// Stand down: PostgreSQL is not primary, or the operator paused HA.
    pub fn disarm(&mut self) -> Result<(), FenceError> {
        self.write("disarmed\n")
    }

    /// Write the fence file, into a runtime folder checked first.
    fn write(&self, text: &str) -> Result<(), FenceError> {
        ensure_dir(&self.dir)?;
        write_atomically(&self.file, text)
    }

    /// The agent is exiting with the fence stood down: tell the fencing process to end (through the
    /// file, never by a signal to a PID read from disk; a new agent starts another when it next arms).
    pub fn stop_process(&mut self) {
        if matches!(read_state(&self.file), Some(State::Disarmed) | None) {
            let _ = self.write("exit\n");
        }
        let _ = std::fs::remove_file(pid_file(&self.data_dir));
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
        let mut cmd = tokio::process::Command::new(fencer_binary(&self.program));
        // The command line the fencer always had, whichever binary runs it: what operators grep for.
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
        // For operators and test harnesses only (`<data_dir>.fence.pid`, where they look): nothing trusts it.
        if let Some(id) = child.id() {
            write_atomically(&pid_file(&self.data_dir), &format!("{id}\n"))?;
        }
        self.child = Some(child);
        Ok(())
    }
}

/// The binary to start as `tenure fencer`: `tenure-fencer` beside the agent's `program` when there is one
/// (it maps a fraction of the agent's pages: issue 30's 2 MiB), else `program` itself, whose `fencer`
/// command is the same code. `/proc/self/exe` is read as the path it names; a binary replaced by an upgrade
/// while the agent runs reads as "<path> (deleted)", and the new `tenure-fencer` beside it is as good.
fn fencer_binary(program: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let exe = std::fs::read_link(program).map_or_else(
        |_| program.to_path_buf(),
        |target| program.parent().map_or(target.clone(), |p| p.join(&target)),
    );
    let bytes = exe.as_os_str().as_bytes();
    let exe = Path::new(std::ffi::OsStr::from_bytes(
        bytes.strip_suffix(b" (deleted)").unwrap_or(bytes),
    ));
    match exe.parent().map(|dir| dir.join(FENCER_BIN)) {
        Some(small)
            if std::fs::metadata(&small)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) =>
        {
            small
        }
        _ => program.to_path_buf(),
    }
}

/// `fencer --file FILE --data-dir DIR`, exactly: the file and the data directory (how the agent starts
/// the fencer; `tenure` then skips clap, whose command tree would cost the fencer resident pages).
pub fn fencer_argv(
    mut args: impl Iterator<Item = std::ffi::OsString>,
) -> Option<(PathBuf, PathBuf)> {
    let mut next_is = |word: &str| args.next().filter(|a| a == word).map(|_| ());
    next_is("fencer")?;
    next_is("--file")?;
    let file = args.next()?;
    let mut next_is = |word: &str| args.next().filter(|a| a == word).map(|_| ());
    next_is("--data-dir")?;
    let data_dir = args.next()?;
    args.next()
        .is_none()
        .then(|| (file.into(), data_dir.into()))
}

fn pid_file(data_dir: &Path) -> PathBuf {
    let mut p = data_dir.as_os_str().to_owned();
    p.push(".fence.pid");
    PathBuf::from(p)
}

fn lock_file(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Create the runtime folder (mode 0700) if needed, and check it: a directory, not a link, owned by us,
/// open to nobody else. A mode that drifted on our own folder is narrowed again; anything else is refused
/// (arming then fails, and the core does not promote on an unwatched fence).
fn ensure_dir(dir: &Path) -> Result<(), FenceError> {
    let unsafe_dir = |why: String| FenceError::Unsafe {
        path: dir.to_path_buf(),
        why,
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unsafe_dir(format!("cannot be created ({e})"))),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| unsafe_dir(e.to_string()))?;
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a directory (a link?)".into()));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(unsafe_dir(format!("is owned by uid {}", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| unsafe_dir(format!("cannot be narrowed to 0700 ({e})")))?;
    }
    Ok(())
}

/// Open one of our own files in the runtime folder: never through a link, never blocking on a FIFO,
/// a regular file owned by our user or nothing.
fn open_own(path: &Path, write: bool) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    (meta.is_file() && meta.uid() == nix::unistd::geteuid().as_raw()).then_some(file)
}

/// Whether a fencing process holds the lock: our non-blocking try-lock fails exactly while one does.
/// A lock file that is missing or not ours counts as "none runs": starting a second fencer is harmless
/// (it exits when it cannot take the lock, and replaces a lock file that is not its own), believing in
/// one that is not there is not.
fn fencer_holds_lock(path: &Path) -> bool {
    let Some(file) = open_own(path, true) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => false,
        Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<(), FenceError> {
    // Never follows a link planted at the temporary name.
    crate::pg::files::replace_file(path, text.as_bytes(), 0o600, None).map_err(|source| {
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
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(open_own(file, false)?, 256),
        &mut text,
    )
    .ok()?;
    parse_state(&text)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = Fence::new(&dir.path().join("data"));
        f.disarm().unwrap();
        write_atomically(f.file(), "armed 1234\n").unwrap();
        assert_eq!(read_state(f.file()), Some(State::Armed(1234)));
        f.disarm().unwrap();
        assert_eq!(read_state(f.file()), Some(State::Disarmed));
        f.stop_process();
        assert_eq!(read_state(f.file()), Some(State::Exit));
        std::fs::write(f.file(), "garbage").unwrap();
        assert_eq!(read_state(f.file()), None);
    }

    /// `tenure-fencer` beside the agent's binary (or a link to it) is the one started; without it (or
    /// not executable), the agent's own binary.
    #[test]
    fn the_small_fencer_binary_beside_the_agents_is_preferred() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let agent = bin.join("tenure");
        std::fs::write(&agent, "").unwrap();
        let link = dir.path().join("tenure-link");
        std::os::unix::fs::symlink("bin/tenure", &link).unwrap();
        assert_eq!(fencer_binary(&agent), agent);
        let small = bin.join(FENCER_BIN);
        std::fs::write(&small, "").unwrap();
        assert_eq!(fencer_binary(&agent), agent, "not executable");
        std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(fencer_binary(&agent), small);
        assert_eq!(fencer_binary(&link), small);
    }

    /// The runtime folder is the agent's own: a link in its place, or a folder of another user, is
    /// refused; a mode that drifted is narrowed back to 0700.
    #[test]
    fn the_runtime_folder_must_be_our_own() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut f = Fence::new(&data);
        f.disarm().unwrap();
        let run = f.file().parent().unwrap().to_path_buf();
        assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
        f.disarm().unwrap();
        assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
        std::fs::remove_dir_all(&run).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &run).unwrap();
        assert!(matches!(f.disarm(), Err(FenceError::Unsafe { .. })));
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
    }
}
