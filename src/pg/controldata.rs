//! `pg_controldata` output parsed into the facts tenure uses about a stopped cluster.
use std::collections::BTreeMap;

use super::process::Cmd;
use super::{PgError, PgSettings};
use crate::ha::observation::Controldata;
use crate::ha::types::{Lsn, SystemId, Timeline};

/// `Database cluster state`, as `pg_controldata` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterState {
    StartingUp,
    ShutDown,
    ShutDownInRecovery,
    ShuttingDown,
    InCrashRecovery,
    InArchiveRecovery,
    InProduction,
    Other(String),
}

impl ClusterState {
    fn parse(s: &str) -> ClusterState {
        match s {
            "starting up" => ClusterState::StartingUp,
            "shut down" => ClusterState::ShutDown,
            "shut down in recovery" => ClusterState::ShutDownInRecovery,
            "shutting down" => ClusterState::ShuttingDown,
            "in crash recovery" => ClusterState::InCrashRecovery,
            "in archive recovery" => ClusterState::InArchiveRecovery,
            "in production" => ClusterState::InProduction,
            other => ClusterState::Other(other.to_string()),
        }
    }
}

/// The `pg_controldata` fields tenure reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlData {
    pub system_id: SystemId,
    pub state: ClusterState,
    pub checkpoint_lsn: Lsn,
    pub checkpoint_timeline: Timeline,
    pub min_recovery_lsn: Lsn,
    pub min_recovery_timeline: Timeline,
    pub wal_log_hints: bool,
    /// The primary's values of the settings a hot standby may not have lower (`max_connections setting`,
    /// ...), by GUC name; absent when `pg_controldata` does not print them.
    pub primary_minimums: BTreeMap<&'static str, u64>,
    /// 0 when data checksums are off.
    pub data_checksum_version: u32,
}

/// Where local WAL ends, and whether that WAL was written as a standby (patroni-compat §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPosition {
    pub timeline: Timeline,
    pub lsn: Lsn,
    /// The data was last a standby: its position is a replay position, not its own writes.
    pub in_recovery: bool,
}

/// The settings a hot standby must have at least as high as its primary, and their `pg_controldata` lines.
pub const HOT_STANDBY_MINIMUMS: [(&str, &str); 5] = [
    ("max_connections", "max_connections setting"),
    ("max_worker_processes", "max_worker_processes setting"),
    ("max_wal_senders", "max_wal_senders setting"),
    ("max_prepared_transactions", "max_prepared_xacts setting"),
    ("max_locks_per_transaction", "max_locks_per_xact setting"),
];

impl ControlData {
    /// Parse the full text `pg_controldata` prints (C locale).
    pub fn parse(text: &str) -> Result<ControlData, PgError> {
        let fields: BTreeMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let get = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| PgError::Parse(format!("pg_controldata: no {k:?}")))
        };
        let lsn = |k: &str| -> Result<Lsn, PgError> {
            get(k)?
                .parse()
                .map_err(|e| PgError::Parse(format!("pg_controldata {k:?}: {e}")))
        };
        let num = |k: &str| -> Result<u64, PgError> {
            get(k)?
                .parse()
                .map_err(|e| PgError::Parse(format!("pg_controldata {k:?}: {e}")))
        };
        let tl = |k: &str| -> Result<Timeline, PgError> {
            let n = num(k)?;
            u32::try_from(n)
                .map(Timeline)
                .map_err(|_| PgError::Parse(format!("pg_controldata {k:?}: {n}")))
        };
        Ok(ControlData {
            system_id: SystemId(num("Database system identifier")?),
            state: ClusterState::parse(get("Database cluster state")?),
            checkpoint_lsn: lsn("Latest checkpoint location")?,
            checkpoint_timeline: tl("Latest checkpoint's TimeLineID")?,
            min_recovery_lsn: lsn("Minimum recovery ending location")?,
            min_recovery_timeline: tl("Min recovery ending loc's timeline")?,
            wal_log_hints: get("wal_log_hints setting")? == "on",
            primary_minimums: HOT_STANDBY_MINIMUMS
                .iter()
                .filter_map(|(guc, field)| Some((*guc, fields.get(field)?.parse().ok()?)))
                .collect(),
            data_checksum_version: num("Data page checksum version")? as u32,
        })
    }

    /// pg_rewind can run only if hint bits are WAL-logged (`wal_log_hints` or checksums).
    pub fn can_rewind(&self) -> bool {
        self.wal_log_hints || self.data_checksum_version != 0
    }

    /// Patroni's `_get_local_timeline_lsn_from_controldata`: a standby shut down (or stopped in archive recovery)
    /// reports its minimum recovery point; a cleanly shut down primary its last checkpoint. A standby with a
    /// `0/0` recovery point was a primary that crashed. `None` when not cleanly shut down: crash recovery first.
    pub fn local_position(&self) -> Option<LocalPosition> {
        let recovering = matches!(
            self.state,
            ClusterState::ShutDownInRecovery | ClusterState::InArchiveRecovery
        );
        if recovering && self.min_recovery_lsn != Lsn::ZERO && self.min_recovery_timeline.0 != 0 {
            return Some(LocalPosition {
                timeline: self.min_recovery_timeline,
                lsn: self.min_recovery_lsn,
                in_recovery: true,
            });
        }
        if recovering || self.state == ClusterState::ShutDown {
            return Some(LocalPosition {
                timeline: self.checkpoint_timeline,
                lsn: self.checkpoint_lsn,
                in_recovery: false,
            });
        }
        None
    }

    /// The core's view of a stopped cluster.
    pub fn to_core(&self) -> Controldata {
        let clean = matches!(
            self.state,
            ClusterState::ShutDown | ClusterState::ShutDownInRecovery
        );
        let pos = self.local_position().unwrap_or(LocalPosition {
            timeline: self.checkpoint_timeline,
            lsn: self.checkpoint_lsn,
            in_recovery: false,
        });
        let was_primary = match self.state {
            ClusterState::ShutDownInRecovery | ClusterState::InArchiveRecovery => !pos.in_recovery,
            ClusterState::ShutDown
            | ClusterState::InProduction
            | ClusterState::InCrashRecovery
            | ClusterState::ShuttingDown => true,
            ClusterState::StartingUp | ClusterState::Other(_) => false,
        };
        Controldata {
            system_id: self.system_id,
            timeline: pos.timeline,
            lsn: pos.lsn,
            was_primary,
            clean,
            needs_crash_recovery: self.local_position().is_none(),
        }
    }
}

/// Run `pg_controldata` on the data directory and parse it.
pub async fn read(settings: &PgSettings) -> Result<ControlData, PgError> {
    let out = Cmd::new(settings, "pg_controldata")
        .arg("-D")
        .arg(&settings.data_dir)
        .timeout_s(settings.pg_ctl_timeout_s)
        .run()
        .await?;
    ControlData::parse(&out.stdout)
}

/// `DBState` values of a standby: shut down in recovery, in archive recovery.
const STANDBY_STATES: [i32; 2] = [2, 5];

/// Whether the bytes of `global/pg_control` say a standby (shut down in recovery, or in archive recovery),
/// read directly (the fencer runs no binary). Trusted only when the file is one PostgreSQL wrote: a layout
/// this code knows (`pg_control_version` 1300, PostgreSQL 13 to 16, whose CRC sits at offset 288) and a
/// CRC-32C over the bytes before it that matches. Garbage, a torn write or another version says no.
pub(crate) fn says_standby(bytes: &[u8]) -> bool {
    const LAYOUTS: [(u32, usize); 1] = [(1300, 288)];
    let word = |at: usize| -> Option<[u8; 4]> { bytes.get(at..at + 4)?.try_into().ok() };
    let Some(version) = word(8).map(u32::from_ne_bytes) else {
        return false;
    };
    let Some(&(_, crc_at)) = LAYOUTS.iter().find(|(v, _)| *v == version) else {
        return false;
    };
    let (Some(stored), Some(state)) = (word(crc_at), word(16)) else {
        return false;
    };
    crc32c(&bytes[..crc_at]) == u32::from_ne_bytes(stored)
        && STANDBY_STATES.contains(&i32::from_ne_bytes(state))
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as PostgreSQL's `COMP_CRC32C`. A 256-entry
/// table built at compile time: 296 bytes are checked every 20 ms at most, and no crate in the lock file
/// provides it (a new dependency for twenty lines is not worth its review).
fn crc32c(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !bytes.iter().fold(!0u32, |c, &b| {
        TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: &str = include_str!("testdata/controldata_primary_shut_down.txt");

    fn with(state: &str, min_lsn: &str, min_tl: &str) -> String {
        PRIMARY
            .replace(
                "state:               shut down",
                &format!("state:               {state}"),
            )
            .replace("location:     0/0\n", &format!("location:     {min_lsn}\n"))
            .replace("timeline:   0\n", &format!("timeline:   {min_tl}\n"))
    }

    #[test]
    fn parses_a_cleanly_shut_down_primary() {
        let cd = ControlData::parse(PRIMARY).unwrap();
        assert_eq!(cd.system_id, SystemId(7713952154071266163));
        assert_eq!(cd.state, ClusterState::ShutDown);
        assert_eq!(cd.checkpoint_lsn, "0/17414F8".parse().unwrap());
        assert_eq!(cd.checkpoint_timeline, Timeline(1));
        assert_eq!(cd.min_recovery_lsn, Lsn::ZERO);
        assert!(!cd.wal_log_hints);
        assert_eq!(cd.data_checksum_version, 1);
        assert!(cd.can_rewind());
        let core = cd.to_core();
        assert!(core.was_primary && core.clean);
        assert_eq!((core.timeline, core.lsn), (Timeline(1), cd.checkpoint_lsn));
    }

    #[test]
    fn a_standby_reports_its_minimum_recovery_point() {
        let cd = ControlData::parse(&with("shut down in recovery", "0/3000100", "2")).unwrap();
        assert_eq!(cd.state, ClusterState::ShutDownInRecovery);
        let pos = cd.local_position().unwrap();
        assert_eq!(
            pos,
            LocalPosition {
                timeline: Timeline(2),
                lsn: Lsn(0x3000100),
                in_recovery: true
            }
        );
        let core = cd.to_core();
        assert!(!core.was_primary && core.clean);
    }

    #[test]
    fn a_recovery_point_of_zero_means_a_crashed_primary() {
        let cd = ControlData::parse(&with("in archive recovery", "0/0", "0")).unwrap();
        let pos = cd.local_position().unwrap();
        assert!(!pos.in_recovery);
        assert_eq!(pos.lsn, cd.checkpoint_lsn);
        assert!(cd.to_core().was_primary && !cd.to_core().clean);
    }

    #[test]
    fn a_crashed_primary_has_no_trustworthy_position() {
        let cd = ControlData::parse(&with("in production", "0/0", "0")).unwrap();
        assert_eq!(cd.state, ClusterState::InProduction);
        assert_eq!(cd.local_position(), None);
        let core = cd.to_core();
        assert!(core.was_primary && !core.clean);
    }

    /// The check value of CRC-32C ("123456789" gives 0xE3069283), and a pg_control image: trusted with
    /// its CRC, not trusted once one byte of it changes (a superuser's `COPY ... TO 'global/pg_control'`
    /// or a torn write).
    #[test]
    fn pg_control_is_trusted_only_with_its_crc() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        let mut image = vec![0u8; 8192];
        image[8..12].copy_from_slice(&1300u32.to_ne_bytes());
        image[16..20].copy_from_slice(&5i32.to_ne_bytes());
        let crc = crc32c(&image[..288]);
        image[288..292].copy_from_slice(&crc.to_ne_bytes());
        assert!(says_standby(&image));
        image[100] ^= 1;
        assert!(!says_standby(&image));
        image[100] ^= 1;
        image[16..20].copy_from_slice(&6i32.to_ne_bytes()); // in production, CRC now stale
        assert!(!says_standby(&image));
        assert!(!says_standby(&image[..100]));
    }

    #[test]
    fn missing_fields_and_garbage_are_errors() {
        assert!(matches!(
            ControlData::parse("nothing here"),
            Err(PgError::Parse(_))
        ));
        let bad = PRIMARY.replace(
            "0/17414F8\nLatest checkpoint's REDO location",
            "zz\nLatest checkpoint's REDO location",
        );
        assert!(ControlData::parse(&bad).is_err());
    }
}
