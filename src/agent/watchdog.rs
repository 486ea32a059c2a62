//! The watchdog (GUIDE §4 R1, R5): a Linux watchdog device set to fire no later than the lease deadline.
//!
//! It covers what the fencing process cannot: the agent and its fencing process frozen together, or a
//! hung host. `ArmFence { deadline }` opens the device (first time), sets its timeout to
//! `floor((deadline - now) / 1 s)` (at least 1 s) and pings it; `DisarmFence` writes the magic close
//! character `V` and closes it, so the driver stops counting.
//!
//! `watchdog.device` may also name a regular file or a FIFO: a test double ("file watchdog") that gets one
//! line per call instead of ioctls (`timeout <s>`, `keepalive <CLOCK_MONOTONIC ms>`, `close`), so tests
//! can watch what a real device would have been told.
//!
//! `watchdog.mode: automatic` leads without the watchdog if the device cannot be opened; `required` makes `ArmFence`
//! fail, so the core never promotes.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::config::WatchdogSettings;
use crate::ha::{Millis, WatchdogMode};

// <linux/watchdog.h>: WDIOC_KEEPALIVE = _IOR('W', 5, int), WDIOC_SETTIMEOUT = _IOWR('W', 6, int).
nix::ioctl_read!(wdioc_keepalive, b'W', 5, nix::libc::c_int);
nix::ioctl_readwrite!(wdioc_settimeout, b'W', 6, nix::libc::c_int);

/// A watchdog call that failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    #[error("cannot open the watchdog device {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("watchdog device {path}: {what} failed: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
}

/// How the open device is driven.
enum Kind {
    /// A character device: ioctls.
    Linux,
    /// A regular file or FIFO: one text line per call (test double).
    File,
}

struct Device {
    file: File,
    kind: Kind,
    /// The timeout last set, in seconds.
    timeout_s: Option<u64>,
    /// The driver has been seen choosing a longer timeout than asked (said once per open).
    rounded_up: bool,
}

/// The agent's handle on the watchdog device (`watchdog.mode` off: it never opens anything).
pub struct Watchdog {
    settings: WatchdogSettings,
    device: Option<Device>,
    /// `automatic` mode has said it leads without a watchdog (said once until the next success).
    warned: bool,
    /// The last arm in `required` mode failed.
    failed: bool,
}

impl Watchdog {
    pub fn new(settings: WatchdogSettings) -> Watchdog {
        Watchdog {
            settings,
            device: None,
            warned: false,
            failed: false,
        }
    }

    pub fn is_open(&self) -> bool {
        self.device.is_some()
    }

    /// Patroni 4.x's test for `/patroni`'s `watchdog_failed`: only `required` can fail, and it fails when
    /// the device is not there to be written to (or the last arm failed: this agent will not lead).
    pub fn is_healthy(&self) -> bool {
        if self.settings.mode != WatchdogMode::Required {
            return true;
        }
        let writable =
            nix::unistd::access(&self.settings.device, nix::unistd::AccessFlags::W_OK).is_ok();
        writable && !self.failed
    }

    /// Make the watchdog fire no later than `deadline` unless pinged again. `Err` means: do not lead.
    /// In `automatic` mode a device that cannot be used is logged and ignored (the fencing process still
    /// stops PostgreSQL at the deadline).
    pub fn arm(&mut self, deadline: Millis, now: Millis) -> Result<(), WatchdogError> {
        if self.settings.mode == WatchdogMode::Off {
            return Ok(());
        }
        let r = self.try_arm(deadline, now);
        self.failed = r.is_err() && self.settings.mode == WatchdogMode::Required;
        match (&r, self.settings.mode) {
            (Ok(()), _) => {
                self.warned = false;
                Ok(())
            }
            (Err(e), WatchdogMode::Automatic) => {
                if !self.warned {
                    tracing::warn!(
                        error = %e,
                        "watchdog.mode is automatic and the watchdog cannot be used: leading without it \
                         (the fencing process still stops PostgreSQL at the lease deadline)"
                    );
                    self.warned = true;
                }
                Ok(())
            }
            _ => r,
        }
    }

    fn try_arm(&mut self, deadline: Millis, now: Millis) -> Result<(), WatchdogError> {
        let timeout_s = timeout_s(deadline, now);
        if self.device.is_none() {
            let dev = open(&self.settings.device)?;
            tracing::info!(device = %self.settings.device.display(), "watchdog opened");
            self.device = Some(dev);
        }
        let path = &self.settings.device;
        let dev = self.device.as_mut().expect("opened above");
        let r = dev.set_timeout(timeout_s).and_then(|()| dev.keepalive());
        r.map_err(|(what, source)| WatchdogError::Io {
            path: path.clone(),
            what,
            source,
        })
    }

    /// Stop the watchdog: magic close, then close. Without a device, nothing to do.
    pub fn disarm(&mut self) -> Result<(), WatchdogError> {
        let Some(mut dev) = self.device.take() else {
            return Ok(());
        };
        let r = match dev.kind {
            Kind::Linux => dev.file.write_all(b"V"),
            Kind::File => dev.file.write_all(b"close\n"),
        };
        drop(dev);
        match r {
            Ok(()) => {
                tracing::info!(device = %self.settings.device.display(), "watchdog closed");
                Ok(())
            }
            Err(source) => Err(WatchdogError::Io {
                path: self.settings.device.clone(),
                what: "magic close",
                source,
            }),
        }
    }
}

/// The timeout that fires no later than `deadline`: whole seconds left, at least 1.
pub fn timeout_s(deadline: Millis, now: Millis) -> u64 {
    (deadline.since(now) / 1_000).max(1)
}

fn open(path: &Path) -> Result<Device, WatchdogError> {
    let err = |source| WatchdogError::Open {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(err)?;
    let ft = meta.file_type();
    let kind = if ft.is_char_device() {
        Kind::Linux
    } else if ft.is_file() || ft.is_fifo() {
        Kind::File
    } else {
        return Err(err(std::io::Error::other(
            "neither a character device nor a regular file or FIFO (test double)",
        )));
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if matches!(kind, Kind::File) {
        // A FIFO without a reader fails at once (ENXIO) instead of blocking the agent.
        opts.append(true).custom_flags(nix::libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(err)?;
    Ok(Device {
        file,
        kind,
        timeout_s: None,
        rounded_up: false,
    })
}

impl Device {
    fn set_timeout(&mut self, s: u64) -> Result<(), (&'static str, std::io::Error)> {
        if self.timeout_s == Some(s) {
            return Ok(());
        }
        let fail = |e| ("setting the timeout", e);
        match self.kind {
            Kind::Linux => {
                let mut t: nix::libc::c_int = s.min(i32::MAX as u64) as nix::libc::c_int;
                // SAFETY: the fd is open for as long as `self.file` lives, and WDIOC_SETTIMEOUT reads and
                // writes exactly one c_int through the pointer, which points at a live local.
                unsafe { wdioc_settimeout(self.file.as_raw_fd(), &mut t) }
                    .map_err(|e| fail(e.into()))?;
                if (t as u64) > s && !self.rounded_up {
                    self.rounded_up = true;
                    tracing::warn!(
                        asked_s = s,
                        got_s = t,
                        "the watchdog driver chose a longer timeout than the lease allows"
                    );
                }
            }
            Kind::File => writeln!(self.file, "timeout {s}").map_err(fail)?,
        }
        self.timeout_s = Some(s);
        Ok(())
    }

    fn keepalive(&mut self) -> Result<(), (&'static str, std::io::Error)> {
        let fail = |e| ("keepalive", e);
        match self.kind {
            Kind::Linux => {
                let mut dummy: nix::libc::c_int = 0;
                // SAFETY: the fd is open for as long as `self.file` lives; WDIOC_KEEPALIVE writes at most
                // one c_int through the pointer, which points at a live local.
                unsafe { wdioc_keepalive(self.file.as_raw_fd(), &mut dummy) }
                    .map_err(|e| fail(e.into()))?;
            }
            Kind::File => {
                writeln!(self.file, "keepalive {}", crate::clock::monotonic().0).map_err(fail)?
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(mode: WatchdogMode, device: PathBuf) -> WatchdogSettings {
        WatchdogSettings {
            mode,
            device,
            safety_margin_ms: Some(5_000),
        }
    }

    #[test]
    fn the_timeout_fires_no_later_than_the_deadline() {
        assert_eq!(timeout_s(Millis(10_999), Millis(1_000)), 9);
        assert_eq!(timeout_s(Millis(11_000), Millis(1_000)), 10);
        assert_eq!(timeout_s(Millis(1_500), Millis(1_000)), 1);
        assert_eq!(timeout_s(Millis(900), Millis(1_000)), 1);
    }

    #[test]
    fn a_file_watchdog_gets_timeout_keepalive_and_close_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wd");
        std::fs::write(&path, "").unwrap();
        let mut w = Watchdog::new(settings(WatchdogMode::Required, path.clone()));
        w.arm(Millis(9_000), Millis(1_000)).unwrap();
        w.arm(Millis(9_500), Millis(1_400)).unwrap();
        w.arm(Millis(12_000), Millis(2_000)).unwrap();
        assert!(w.is_open());
        w.disarm().unwrap();
        assert!(!w.is_open());
        w.disarm().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let words: Vec<&str> = text
            .lines()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(
            words,
            [
                "timeout",
                "keepalive",
                "keepalive",
                "timeout",
                "keepalive",
                "close"
            ]
        );
        assert!(text.starts_with("timeout 8\n"));
        assert!(text.contains("timeout 10\n"));
    }

    #[test]
    fn required_fails_and_automatic_leads_without_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-watchdog");
        let mut req = Watchdog::new(settings(WatchdogMode::Required, missing.clone()));
        assert!(
            !req.is_healthy(),
            "required without a device: watchdog_failed"
        );
        assert!(matches!(
            req.arm(Millis(9_000), Millis(1_000)),
            Err(WatchdogError::Open { .. })
        ));
        let mut auto = Watchdog::new(settings(WatchdogMode::Automatic, missing.clone()));
        auto.arm(Millis(9_000), Millis(1_000)).unwrap();
        assert!(!auto.is_open());
        assert!(
            auto.is_healthy(),
            "only required mode reports watchdog_failed"
        );
        let mut off = Watchdog::new(settings(WatchdogMode::Off, missing));
        off.arm(Millis(9_000), Millis(1_000)).unwrap();
        // A directory is no watchdog.
        let mut dirdev = Watchdog::new(settings(WatchdogMode::Required, dir.path().into()));
        assert!(dirdev.arm(Millis(9_000), Millis(1_000)).is_err());
        assert!(!dirdev.is_healthy(), "the arm failed");
        // A file double that can be written is healthy.
        let file = dir.path().join("double");
        std::fs::write(&file, "").unwrap();
        let mut ok = Watchdog::new(settings(WatchdogMode::Required, file));
        assert!(ok.is_healthy());
        ok.arm(Millis(9_000), Millis(1_000)).unwrap();
        assert!(ok.is_healthy());
    }

    #[test]
    fn a_fifo_without_a_reader_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fifo");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut w = Watchdog::new(settings(WatchdogMode::Required, path));
        assert!(w.arm(Millis(9_000), Millis(1_000)).is_err());
    }
}
