//! What the last read showed of our own member key, so that an unchanged record is not written again.
//!
//! Patroni's `touch_member` skips the write when the member key it read holds the same data under its own
//! session or lease. In an idle cluster that is every cycle: the write was the largest part of the store's
//! load (one raft proposal per member per loop on etcd; `examples/many_clusters.rs`). The skip only trusts a read
//! that started after our last write finished, so a read racing our own in-flight write never hides it.
use std::sync::Mutex;

#[derive(Default)]
struct Seen {
    /// Bumped when a write of our key starts and when it ends.
    writes: u64,
    /// `(writes when the read started, value, owner)` of our key in the last read.
    read: Option<(u64, String, String)>,
}

/// Per adapter; `owner` is the lease id (etcd) or session id (Consul) the key is bound to.
#[derive(Default)]
pub struct OwnMember {
    seen: Mutex<Seen>,
}

impl OwnMember {
    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Call before a read of the scope; hand the returned mark to [`OwnMember::observed`].
    pub fn read_started(&self) -> u64 {
        self.lock().writes
    }

    /// What the read (started at `mark`) showed of our key: its value and owner, or nothing.
    pub fn observed(&self, mark: u64, key: Option<(&str, &str)>) {
        self.lock().read = key.map(|(value, owner)| (mark, value.to_string(), owner.to_string()));
    }

    /// Whether the store already holds `value` under `owner`, as a read that no write of ours overlapped
    /// showed. If not, the caller writes through [`OwnMember::write`].
    pub fn unchanged(&self, value: &str, owner: &str) -> bool {
        let seen = self.lock();
        matches!(&seen.read, Some((mark, v, o)) if *mark == seen.writes && v == value && o == owner)
    }

    /// Run `write`, a write of our key: no read that started before it ended is trusted afterwards.
    pub async fn write<T>(&self, write: impl std::future::Future<Output = T>) -> T {
        self.lock().writes += 1;
        let out = write.await;
        self.lock().writes += 1;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::OwnMember;

    #[test]
    fn an_unchanged_record_under_our_owner_is_not_written_again() {
        let own = OwnMember::default();
        assert!(!own.unchanged("v", "7"), "nothing read yet");
        let mark = own.read_started();
        own.observed(mark, Some(("v", "7")));
        assert!(own.unchanged("v", "7"));
        assert!(!own.unchanged("w", "7"), "another value");
        assert!(
            !own.unchanged("v", "8"),
            "bound to another lease or session"
        );
        own.observed(own.read_started(), None);
        assert!(!own.unchanged("v", "7"), "the key is gone");
    }

    #[tokio::test]
    async fn a_read_overlapping_our_write_is_not_trusted() {
        let own = OwnMember::default();
        let before_write = own.read_started();
        let during_write = own.write(async { own.read_started() }).await;
        // Both reads may show the old value (the write had not landed when they ran).
        own.observed(before_write, Some(("old", "7")));
        assert!(!own.unchanged("old", "7"));
        own.observed(during_write, Some(("old", "7")));
        assert!(!own.unchanged("old", "7"));
        // A read started after the write ended is trusted.
        own.observed(own.read_started(), Some(("new", "7")));
        assert!(own.unchanged("new", "7"));
    }
}
