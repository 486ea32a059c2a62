//! Replication slots on PostgreSQL: a replica's own slot on its upstream (named like Patroni names it), the local
//! slots read for the core each cycle, and the changes the core decides (`Action::SyncSlots`) carried out.
//! Names reach SQL only as bound parameters; the core checked each against PostgreSQL's slot-name grammar.
use tokio_postgres::Client;

use super::probe;
use super::{PgError, PgSettings};
use crate::ha::{LocalSlot, Lsn, SlotChanges};

const CREATE: &str = "SELECT pg_create_physical_replication_slot($1::text::name, true) \
     WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1::text::name)";

/// Create the physical slot `slot` on the local primary, if absent.
pub async fn create_slot(settings: &PgSettings, slot: &str) -> Result<(), PgError> {
    let client = probe::connect_local(settings).await?;
    client.execute(CREATE, &[&slot]).await?;
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
    client.execute(CREATE, &[&slot]).await?;
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

/// The local slots as the core sees them, temporary ones (a running `pg_basebackup`'s) left out.
pub async fn local(client: &Client) -> Result<Vec<LocalSlot>, PgError> {
    let rows = client
        .query(
            "SELECT slot_name::text, slot_type = 'physical', database::text, plugin::text, active, \
             restart_lsn::text FROM pg_replication_slots WHERE NOT temporary ORDER BY 1",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let restart: Option<String> = r.get(5);
            let restart_lsn = restart
                .map(|t| t.parse::<Lsn>())
                .transpose()
                .map_err(|e| PgError::Parse(format!("restart_lsn {:?}", e.0)))?;
            Ok(LocalSlot {
                name: r.get(0),
                physical: r.get(1),
                database: r.get(2),
                plugin: r.get(3),
                active: r.get(4),
                restart_lsn,
            })
        })
        .collect()
}

/// Carry out the core's slot changes on the local PostgreSQL, each on its own: one that fails (a slot that
/// became active before its drop, an advance PostgreSQL refuses) is logged and the others still run. `Err`
/// names the first failure.
pub async fn apply(settings: &PgSettings, changes: &SlotChanges) -> Result<(), String> {
    let client = probe::connect_local(settings)
        .await
        .map_err(|e| e.to_string())?;
    let mut first = None;
    let mut note = |what: String| {
        tracing::warn!("{what}");
        first.get_or_insert(what);
    };
    for name in &changes.create {
        match client.execute(CREATE, &[name]).await {
            Ok(_) => tracing::info!(slot = %name, "created physical replication slot"),
            Err(e) => note(format!("could not create replication slot {name}: {e}")),
        }
    }
    for name in &changes.drop {
        // Only if still inactive: a walsender that took it since the probe keeps it.
        let sql = "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                   WHERE slot_name = $1::text::name AND NOT active AND slot_type = 'physical'";
        match client.execute(sql, &[name]).await {
            Ok(_) => tracing::info!(slot = %name, "dropped replication slot"),
            Err(e) => note(format!("could not drop replication slot {name}: {e}")),
        }
    }
    for (name, lsn) in &changes.advance {
        let sql = "SELECT pg_replication_slot_advance($1::text::name, $2::text::pg_lsn)";
        if let Err(e) = client.execute(sql, &[name, &lsn.to_string()]).await {
            note(format!(
                "could not advance replication slot {name} to {lsn}: {e}"
            ));
        }
    }
    first.map_or(Ok(()), Err)
}
