//! A dynamic `ttl` change (`Dcs::set_session_ttl`, given the session TTL `Timing::new` derives): the session in use keeps its TTL until the next acquire, which
//! runs on a new session/lease, so a new leader term always has the TTL the core counts on.
use tenure::ha::types::SessionId;

use super::{client, deadline, scope, snapshot, Backend};

async fn holder_session(c: &dyn tenure::dcs::Dcs) -> Option<SessionId> {
    snapshot(c).await.cluster.leader.and_then(|l| l.session)
}

pub async fn a_new_ttl_applies_from_the_next_acquire(b: &dyn Backend) {
    let s = scope("ttl");
    let c = client(b, &s, "n1").await;
    let first = c.ensure_session(deadline()).await.expect("session");
    c.acquire_leader(deadline()).await.expect("acquire");
    assert_eq!(holder_session(c.as_ref()).await, Some(first.clone()));
    c.release_leader(deadline()).await.expect("release");
    // The same ttl: the session is kept.
    let session_ttl_ms = |ttl_ms| b.session_store().session_ttl_ms(ttl_ms);
    c.set_session_ttl(session_ttl_ms(b.ttl_ms()));
    c.acquire_leader(deadline()).await.expect("acquire");
    assert_eq!(holder_session(c.as_ref()).await, Some(first.clone()));
    // A new ttl while holding the key: nothing changes for the running term.
    c.set_session_ttl(session_ttl_ms(b.ttl_ms() * 2));
    c.renew_leader(deadline()).await.expect("renew");
    assert_eq!(holder_session(c.as_ref()).await, Some(first.clone()));
    c.release_leader(deadline()).await.expect("release");
    // The next term: a new session/lease.
    c.acquire_leader(deadline())
        .await
        .expect("acquire on a new session");
    let second = holder_session(c.as_ref()).await.expect("held");
    assert_ne!(
        second, first,
        "the next term runs on a session of the new ttl"
    );
    c.renew_leader(deadline())
        .await
        .expect("renew the new term");
    let _ = c.destroy_session(deadline()).await;
}
