//! `tenure fencer`: reads the fence file through descriptors it holds; stops the postmaster past an armed deadline.
// Every file is opened relative to a directory descriptor taken at start (through `/proc/self/fd/N`, so
// no unsafe code): renaming the data directory's parent or the runtime folder's changes nothing, a link
// is never followed (`O_NOFOLLOW`), a FIFO never blocks (`O_NONBLOCK`, then only regular files are read).
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::wake::Wake;
use super::{parse_state, State};

/// How often, after SIGQUIT, the fencer looks whether the postmaster is gone (25 looks, then SIGKILL).
const GONE_CHECK_MS: u64 = 20;

/// `path` relative to the directory `dir` holds, wherever that directory now is.
fn at(dir: &File, name: impl AsRef<Path>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name)
}

const NO_FOLLOW_NO_BLOCK: i32 =
    nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC;

fn open_dir(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

/// A regular file in `dir` (owned by us when `own`), read whole up to `limit` bytes; anything else, a
/// link, a FIFO or a device, reads as nothing.
fn read_regular(dir: &File, name: impl AsRef<Path>, own: bool, limit: u64) -> Option<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(NO_FOLLOW_NO_BLOCK)
        .open(at(dir, name))
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || (own && meta.uid() != nix::unistd::geteuid().as_raw()) {
        return None;
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, limit), &mut bytes).ok()?;
    Some(bytes)
}

/// The fence file as the fencer trusts it: a regular file owned by its own user (the agent's); anything
/// else (or garbage) is no state at all.
fn read_trusted_state(run: &File, name: &OsStr) -> Option<State> {
    parse_state(std::str::from_utf8(&read_regular(run, name, true, 256)?).ok()?)
}

/// Take the lock in the runtime folder: `None` when another fencer holds it. A lock file that is not a
/// regular file of ours (a link, a FIFO, another user's file: the folder is 0700, so only root could
/// have put it there) is removed itself and made anew with `O_EXCL`.
fn take_lock(run: &File, name: &OsStr) -> std::io::Result<Option<Flock<File>>> {
    let path = at(run, name);
    let mut file = None;
    for _ in 0..3 {
        let existing = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(NO_FOLLOW_NO_BLOCK)
            .open(&path);
        match existing {
            Ok(f)
                if f.metadata()
                    .is_ok_and(|m| m.is_file() && m.uid() == nix::unistd::geteuid().as_raw()) =>
            {
                file = Some(f);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Not ours: unlink the entry itself (unlink never follows a link).
            _ => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
        }
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(NO_FOLLOW_NO_BLOCK)
            .open(&path)
        {
            Ok(f) => {
                file = Some(f);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let file = file.ok_or_else(|| std::io::Error::other("the lock file keeps being replaced"))?;
    Ok(Flock::lock(file, FlockArg::LockExclusiveNonblock).ok())
}

/// `tenure fencer`: runs until told to exit through the file, or until the data directory is removed
/// (not renamed: a rename, of it or of a folder above, leaves the descriptor on the same directory).
/// Synchronous on purpose: no runtime, nothing to starve.
pub fn fencer_main(file: &Path, data_dir: &Path) -> ! {
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("tenure fencer: {what}: {e}");
        std::process::exit(70)
    };
    let (Some(run_path), Some(name)) = (file.parent(), file.file_name()) else {
        fail("no fence file", &file.display());
    };
    let run = open_dir(run_path).unwrap_or_else(|e| fail(&run_path.display().to_string(), &e));
    let data = wait_for_data_dir(data_dir, &run, name)
        .unwrap_or_else(|e| fail(&data_dir.display().to_string(), &e));
    let mut lock_name = name.to_owned();
    lock_name.push(".lock");
    // Held while this process watches: the agent's proof that a fencer does.
    let mut lock = match take_lock(&run, &lock_name) {
        Ok(Some(lock)) => lock,
        Ok(None) => std::process::exit(0), // another fencer watches the file
        Err(e) => fail("cannot take the lock", &e),
    };
    // Watching before the first read: a write after that read wakes us.
    let mut wake = Wake::new(&run, &data);
    // A file that vanished or that we do not trust changes nothing: deleting the fence file must not
    // disarm the fence.
    let mut state = None;
    loop {
        if data.metadata().map_or(true, |m| m.nlink() == 0) {
            std::process::exit(0);
        }
        if let Some(now) = read_trusted_state(&run, name) {
            state = Some(now);
        }
        let mut deadline_ahead = None;
        match state {
            Some(State::Exit) => {
                (lock, state) = leave_or_stay(lock, &run, name);
                continue; // stayed: look at what the new agent wrote
            }
            Some(State::Armed(deadline)) if crate::clock::monotonic().0 >= deadline => {
                stop_postmaster(&data)
            }
            Some(State::Armed(deadline)) => deadline_ahead = Some(deadline),
            _ => {}
        }
        wake.sleep(deadline_ahead);
    }
}

/// The data directory as configured (it may legitimately be reached through a link), held from now on. At
/// bootstrap the leader arms its fence before `initdb` makes the directory: no postmaster can run in a
/// directory that does not exist, so wait for it (looking once a second) rather than end and leave the
/// primary started there unfenced until the agent's next renewal. Told to exit meanwhile, end.
fn wait_for_data_dir(data_dir: &Path, run: &File, name: &OsStr) -> std::io::Result<File> {
    loop {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_CLOEXEC)
            .open(data_dir);
        match opened {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if matches!(read_trusted_state(run, name), Some(State::Exit)) {
                    std::process::exit(0);
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// Told to exit: release the lock, then look once more. An agent arms by writing the file *before* it
/// try-locks, so if one armed after our last read we see it now and stay (unless the fencer it started
/// took the lock meanwhile); otherwise we end.
fn leave_or_stay(lock: Flock<File>, run: &File, name: &OsStr) -> (Flock<File>, Option<State>) {
    let unlocked = lock
        .unlock()
        .map_err(|_| ())
        .unwrap_or_else(|_| std::process::exit(0));
    match read_trusted_state(run, name) {
        Some(again @ (State::Armed(_) | State::Disarmed)) => {
            match Flock::lock(unlocked, FlockArg::LockExclusiveNonblock) {
                Ok(relocked) => (relocked, Some(again)),
                Err(_) => std::process::exit(0),
            }
        }
        _ => std::process::exit(0),
    }
}

/// Device and inode: the identity of a directory, whatever its path.
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

/// SIGQUIT (immediate shutdown of the postmaster and every backend), then SIGKILL if it lingers. The
/// postmaster is the one `postmaster.pid` names, proven, or else the one found in `/proc` (a FIFO or
/// garbage in place of `postmaster.pid` hides nothing). A standby cannot accept writes and is left alone,
/// so a restarted agent that has not yet stood the fence down can still start its replica.
fn stop_postmaster(data: &File) {
    let Ok(id) = data.metadata().map(|m| identity(&m)) else {
        return;
    };
    let named = read_regular(data, "postmaster.pid", false, 4096)
        .and_then(|b| {
            String::from_utf8_lossy(&b)
                .lines()
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .filter(|&pid| is_postmaster_in(pid, id));
    let Some(pid) = named.or_else(|| find_postmaster(id)) else {
        return;
    };
    if is_standby(data, pid) || is_standalone(pid) {
        return;
    }
    let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(GONE_CHECK_MS));
        if !crate::pg::pid_alive(pid) {
            return;
        }
    }
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// A stand-alone backend (`postgres --single`: crash recovery by a restarted agent or by `pg_rewind`;
/// `--boot`: initdb): it listens on nothing and serves no client, so it is no writable primary. Its
/// command line is the one it was started with (PostgreSQL rewrites the process title only of processes
/// under a postmaster), which no SQL can change.
fn is_standalone(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    matches!(
        cmdline.split(|&b| b == 0).nth(1),
        Some(b"--single" | b"--boot")
    )
}

/// A live `postgres` (or `postmaster`) process working in the directory `id` (the postmaster and its
/// children chdir into the data directory): compared by inode, so a renamed path still matches and a
/// process elsewhere never does.
fn is_postmaster_in(pid: i32, id: (u64, u64)) -> bool {
    if !crate::pg::runs_postgres(pid) || !crate::pg::pid_alive(pid) {
        return false;
    }
    std::fs::metadata(format!("/proc/{pid}/cwd")).is_ok_and(|m| identity(&m) == id)
}

/// The postmaster of the directory `id` from `/proc`: of the `postgres` processes working there, the one
/// whose parent is not one of them.
fn find_postmaster(id: (u64, u64)) -> Option<i32> {
    let ours: Vec<i32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| is_postmaster_in(pid, id))
        .collect();
    ours.iter().copied().find(|&pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1)?.parse::<i32>().ok());
        // A stand-alone backend working there too does not hide the postmaster behind it.
        !ppid.is_some_and(|p| ours.contains(&p)) && !is_standalone(pid)
    })
}

/// A standby: `standby.signal` is there, and either it was there before this postmaster started (so
/// the server read it and runs in recovery; promotion removes it) or `pg_control`, with a CRC that
/// matches, says archive recovery. A `standby.signal` a database superuser creates under a running
/// primary (`COPY ... TO`) is newer than the postmaster and leaves pg_control saying "in production": it
/// disarms nothing; nor does a pg_control written over without its CRC.
fn is_standby(data: &File, pid: i32) -> bool {
    let Ok(signal) = std::fs::symlink_metadata(at(data, "standby.signal")) else {
        return false;
    };
    // The start time is known to a clock tick (10 ms, rounded down): allow two, which only admits a
    // file created while that postmaster's startup process was still reading it.
    const SLACK_NS: i128 = 20_000_000;
    let read_at_start = crate::pg::process_started_at_ns(pid).is_some_and(|started_ns| {
        let changed_ns = signal.ctime() as i128 * 1_000_000_000 + signal.ctime_nsec() as i128;
        changed_ns <= started_ns + SLACK_NS
    });
    read_at_start || pg_control_says_standby(data)
}

fn pg_control_says_standby(data: &File) -> bool {
    let Ok(global) = open_dir(&at(data, "global")) else {
        return false;
    };
    read_regular(&global, "pg_control", false, 8192)
        .is_some_and(|bytes| crate::pg::controldata::says_standby(&bytes))
}
