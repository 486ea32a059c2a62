//! Physical replication slots on the local primary: one per member, named like Patroni names them.
use super::probe;
use super::{PgError, PgSettings};

/// Create the physical slot `slot` on the local primary, if absent.
pub async fn create_slot(settings: &PgSettings, slot: &str) -> Result<(), PgError> {
    let client = probe::connect_local(settings).await?;
    client
        .execute(
            "SELECT pg_create_physical_replication_slot($1::text::name) \
             WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1::text::name)",
            &[&slot],
        )
        .await?;
    Ok(())
}

/// Create our physical slot `slot` on the `upstream` we are about to stream from, if absent, as its
/// superuser: the upstream then keeps the WAL we still need while we are away (bounded by
/// `max_slot_wal_keep_size`).
pub async fn ensure_on(
    upstream: &super::Endpoint,
    creds: &super::Credentials,
    slot: &str,
) -> Result<(), PgError> {
    let client = probe::connect_to(upstream, creds).await?;
    client
        .execute(
            "SELECT pg_create_physical_replication_slot($1::text::name) \
             WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1::text::name)",
            &[&slot],
        )
        .await?;
    Ok(())
}

/// Drop the slot `slot` on the local primary, if present (an active slot is an error: its walsender holds it).
pub async fn drop_slot(settings: &PgSettings, slot: &str) -> Result<(), PgError> {
    let client = probe::connect_local(settings).await?;
    client
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1::text::name",
            &[&slot],
        )
        .await?;
    Ok(())
}

/// Names of the physical slots on the local PostgreSQL.
pub async fn list_slots(settings: &PgSettings) -> Result<Vec<String>, PgError> {
    let client = probe::connect_local(settings).await?;
    let rows = client
        .query(
            "SELECT slot_name::text FROM pg_replication_slots WHERE slot_type = 'physical' ORDER BY 1",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
