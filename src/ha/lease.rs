//! Lease arithmetic (GUIDE §4): deadlines come only from acknowledged requests, counted from their send time.
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
    pub fn extended(self, timing: &Timing, sent_at: Millis) -> Lease {
        if sent_at > self.acked_sent_at {
            Lease::from_ack(timing, sent_at)
        } else {
            self
        }
    }
}

/// The budget for one store call: never past the lease deadline, never more than `retry_timeout`.
pub fn call_budget_ms(timing: &Timing, lease: Option<&Lease>, now: Millis) -> u64 {
    match lease {
        Some(l) => timing.retry_timeout_ms.min(l.remaining_ms(now)),
        None => timing.retry_timeout_ms,
    }
}
