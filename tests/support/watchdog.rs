//! A test watchdog: a thread that reads the "file watchdog" an agent writes (`watchdog.device` pointing
//! at a regular file: lines `timeout <s>`, `keepalive <CLOCK_MONOTONIC ms>`, `close`) and plays the
//! driver. It "fires" when it is armed and `timeout` seconds pass after the last keepalive; it records
//! that instant instead of resetting the host.
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the test watchdog has seen (times on `CLOCK_MONOTONIC`, ms).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchdogState {
    /// Opened and not closed since.
    pub armed: bool,
    /// The last `timeout` line, in seconds.
    pub timeout_s: Option<u64>,
    /// The last keepalive's timestamp, as the agent wrote it.
    pub last_keepalive_ms: Option<u64>,
    pub keepalives: u64,
    pub closes: u64,
    /// When it fired, and the keepalive it fired after.
    pub fired: Option<Fired>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fired {
    pub at_ms: u64,
    pub last_keepalive_ms: u64,
    pub timeout_s: u64,
}

/// The daemon: stops its thread on drop.
pub struct TestWatchdog {
    pub path: PathBuf,
    state: Arc<Mutex<WatchdogState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestWatchdog {
    /// Create `path` (empty, owned by `owner` so the agent can write it) and start watching it.
    pub fn start(path: &Path, owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>) -> TestWatchdog {
        std::fs::write(path, "").expect("create the test watchdog file");
        if let Some((uid, gid)) = owner {
            nix::unistd::chown(path, Some(uid), Some(gid)).expect("chown the test watchdog file");
        }
        let state = Arc::new(Mutex::new(WatchdogState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (path, state, stop) = (path.to_path_buf(), state.clone(), stop.clone());
            std::thread::spawn(move || watch(&path, &state, &stop))
        };
        TestWatchdog {
            path: path.to_path_buf(),
            state,
            stop,
            thread: Some(thread),
        }
    }

    pub fn state(&self) -> WatchdogState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for TestWatchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(path: &Path, state: &Mutex<WatchdogState>, stop: &AtomicBool) {
    let mut offset = 0u64;
    let mut pending = String::new();
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut f) = std::fs::File::open(path) {
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                let mut buf = String::new();
                if let Ok(n) = f.read_to_string(&mut buf) {
                    offset += n as u64;
                    pending.push_str(&buf);
                }
            }
        }
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(nl) = pending.find('\n') {
            let line: String = pending.drain(..=nl).collect();
            apply(&mut s, line.trim());
        }
        let now = tenure::clock::monotonic().0;
        if let (true, None, Some(t), Some(k)) = (s.armed, s.fired, s.timeout_s, s.last_keepalive_ms)
        {
            if now >= k + t * 1_000 {
                s.fired = Some(Fired {
                    at_ms: now,
                    last_keepalive_ms: k,
                    timeout_s: t,
                });
            }
        }
        drop(s);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn apply(s: &mut WatchdogState, line: &str) {
    let mut words = line.split_whitespace();
    let value = |w: Option<&str>| w.and_then(|v| v.parse::<u64>().ok());
    match words.next() {
        Some("timeout") => {
            s.armed = true;
            s.timeout_s = value(words.next());
        }
        Some("keepalive") => {
            s.armed = true;
            s.keepalives += 1;
            s.last_keepalive_ms = value(words.next());
        }
        Some("close") => {
            s.armed = false;
            s.closes += 1;
        }
        _ => {}
    }
}
