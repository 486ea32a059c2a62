//! The fencer's sleep: until its deadline (a `CLOCK_MONOTONIC` timer), a change in its folders (inotify), or a slow tick.
// Polling the fence file every 20 ms cost 50 wake-ups a second (issue 30). The fencer now sleeps in poll(2) on
// two descriptors: a timerfd armed at the deadline itself (TFD_TIMER_ABSTIME on CLOCK_MONOTONIC, the clock the
// agent computes the deadline on, so nothing is rounded or drifts), and an inotify instance watching the
// runtime folder (the agent replaces the fence file by rename: IN_MOVED_TO; a plain write: IN_CLOSE_WRITE) and
// the data directory (a postmaster.pid created under an expired fence, or the directory removed). Both watches
// go through the descriptors the fencer holds (`/proc/self/fd/N`), so a renamed parent changes nothing here either.
//
// Why a safety-net tick all the same: inotify does not report everything that can change what the fencer
// must see. A writer that modifies the file in place and keeps it open sends only IN_MODIFY; a runtime
// folder removed and created anew (the agent does that when it is missing) is another inode the watch does
// not follow; the event queue can overflow. None is how the agent writes, but the fencer's promise must not
// rest on how the file is written: it looks again at least once a second (SAFETY_NET_MS), as it did every
// 20 ms before, and also when inotify or the timer cannot be had (a per-user inotify limit), every POLL_MS.
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

/// The longest the fencer sleeps without looking at the file, whatever inotify says.
const SAFETY_NET_MS: u16 = 1_000;

/// How often it looks when it cannot sleep on events (no inotify or no timer): the old poll.
const POLL_MS: u16 = 20;

/// What the fencer sleeps on.
pub(super) struct Wake {
    /// The watches and the deadline's timer; `None` when either could not be set up (then: poll).
    events: Option<(Inotify, TimerFd)>,
}

impl Wake {
    /// Watch the runtime folder `run` and the data directory `data`, both through the descriptors held.
    /// Set up before the first read of the fence file, so that no write after that read goes unseen.
    pub(super) fn new(run: &File, data: &File) -> Wake {
        let set_up = || -> nix::Result<(Inotify, TimerFd)> {
            let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
            let dir = |f: &File| format!("/proc/self/fd/{}", f.as_raw_fd());
            inotify.add_watch(
                dir(run).as_str(),
                AddWatchFlags::IN_MOVED_TO
                    | AddWatchFlags::IN_CLOSE_WRITE
                    | AddWatchFlags::IN_ONLYDIR,
            )?;
            inotify.add_watch(
                dir(data).as_str(),
                AddWatchFlags::IN_CREATE
                    | AddWatchFlags::IN_MOVED_TO
                    | AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_ONLYDIR,
            )?;
            let timer = TimerFd::new(
                ClockId::CLOCK_MONOTONIC,
                TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
            )?;
            Ok((inotify, timer))
        };
        let events = set_up()
            .inspect_err(|e| {
                eprintln!("tenure fencer: cannot watch the fence ({e}): looking every {POLL_MS} ms")
            })
            .ok();
        Wake { events }
    }

    /// Sleep until `deadline_ms` on the monotonic clock (when given), until something changed in the
    /// watched folders, or for at most the safety net. Why it woke does not matter: the caller looks again.
    pub(super) fn sleep(&mut self, deadline_ms: Option<u64>) {
        let Some((inotify, timer)) = &self.events else {
            std::thread::sleep(Duration::from_millis(POLL_MS.into()));
            return;
        };
        // Setting the timer also clears an expiry not yet read, so a fired timer wakes us once.
        let set = match deadline_ms {
            Some(ms) => timer.set(
                Expiration::OneShot(TimeSpec::from_duration(Duration::from_millis(ms))),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME,
            ),
            None => timer.unset(),
        };
        let timeout = if set.is_ok() { SAFETY_NET_MS } else { POLL_MS };
        let mut fds = [
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(timer.as_fd(), PollFlags::POLLIN),
        ];
        // EINTR (a stop and continue) is one more early look.
        let _ = poll(&mut fds, PollTimeout::from(timeout));
        // Drain the queue (a read returns EAGAIN once empty, or an error: either way the next look reads the file).
        while inotify.read_events().is_ok_and(|events| !events.is_empty()) {}
    }
}
