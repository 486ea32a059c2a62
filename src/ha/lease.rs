//! Lease arithmetic (GUIDE §4): deadlines come only from acknowledged requests, counted from their send time.
//!
//! A lease term keeps the `Timing` it was granted with (`Lease::timing`), not the one configured since: the store
//! enforces the TTL it granted. A renewal takes over the configured timing only at the same session TTL, so a dynamic
//! `ttl` change applies from the next acquire; the adapters make an acquire always run on a session of the configured
//! TTL (`Dcs::set_session_ttl`), and the simulator's store model gives each session the TTL it was created with
//! (`tests/sim/timing_change.rs`; mutant `TermTakesNewTtl`). Consul's session TTL is `ttl/2`, as in Patroni, because
//! Consul only promises "not before TTL" and may reap as late as 2×TTL.
use super::config::Timing;
use super::types::Millis;

/// The leader lease as we may count on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Send time of the acknowledged acquire or renew this lease counts from (R3).
    pub acked_sent_at: Millis,
    /// After this, PostgreSQL must not be writable (fence budget already subtracted).
    pub deadline: Millis,
    /// When to renew next.
    pub renew_due: Millis,
    /// The timing this lease term runs on: the store fixed the session's TTL when it was created, so a
    /// dynamic `ttl` change applies only to the next term (the next acquire), never to this one.
    pub timing: Timing,
}

impl Lease {
    /// The lease granted by a request sent at `sent_at` and acknowledged.
    pub fn from_ack(timing: &Timing, sent_at: Millis) -> Lease {
        let deadline = sent_at
            .plus_ms(timing.usable_session_ms())
            .minus_ms(timing.fence_budget_ms);
        Lease {
            acked_sent_at: sent_at,
            deadline,
            renew_due: sent_at.plus_ms(timing.loop_wait_ms),
            timing: *timing,
        }
    }

    /// Whether the lease still covers `now`.
    pub fn valid_at(&self, now: Millis) -> bool {
        now < self.deadline
    }

    /// Milliseconds left at `now`.
    pub fn remaining_ms(&self, now: Millis) -> u64 {
        self.deadline.since(now)
    }

    /// Extend with a newer acknowledgement; an older one (a reordered reply) never shortens or extends it.
    /// `current` is the timing configured now: it is taken over only when its session TTL is the one this
    /// term was granted with (a `loop_wait` or `retry_timeout` change applies at once); a different `ttl`
    /// waits for the next term, so the deadline always counts on the TTL the store enforces.
    pub fn extended(self, current: &Timing, sent_at: Millis) -> Lease {
        if sent_at <= self.acked_sent_at {
            return self;
        }
        let timing = if current.session_ttl_ms == self.timing.session_ttl_ms {
            current
        } else {
            &self.timing
        };
        Lease::from_ack(timing, sent_at)
    }
}

/// The budget for one store call: never past the lease deadline, never more than `retry_timeout`.
pub fn call_budget_ms(timing: &Timing, lease: Option<&Lease>, now: Millis) -> u64 {
    match lease {
        Some(l) => timing.retry_timeout_ms.min(l.remaining_ms(now)),
        None => timing.retry_timeout_ms,
    }
}
