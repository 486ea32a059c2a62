//! The `pg_controldata` output parser, and what the agent derives from a parsed output.
//!
//! Beyond "does not panic": a parsed output printed back in `pg_controldata`'s form parses to the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tenure::pg::controldata::{ClusterState, ControlData, HOT_STANDBY_MINIMUMS};

fuzz_target!(|data: &[u8]| {
    // The agent reads the command's output as UTF-8 text.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(c) = ControlData::parse(text) else {
        return;
    };
    let _ = (c.can_rewind(), c.to_core());
    if let Some(pos) = c.local_position() {
        assert!(
            pos.in_recovery || pos.lsn == c.checkpoint_lsn,
            "a position not from recovery is the checkpoint's: {c:?}"
        );
    }
    let printed = print(&c);
    let back = ControlData::parse(&printed).expect("its own output parses");
    assert_eq!(back, c, "changed when printed back:\n{printed}");
});

/// `c` as `pg_controldata` prints it (the lines tenure reads).
fn print(c: &ControlData) -> String {
    let state = match &c.state {
        ClusterState::StartingUp => "starting up",
        ClusterState::ShutDown => "shut down",
        ClusterState::ShutDownInRecovery => "shut down in recovery",
        ClusterState::ShuttingDown => "shutting down",
        ClusterState::InCrashRecovery => "in crash recovery",
        ClusterState::InArchiveRecovery => "in archive recovery",
        ClusterState::InProduction => "in production",
        ClusterState::Other(s) => s,
    };
    let mut out = format!(
        "Database system identifier:           {}\n\
         Database cluster state:               {state}\n\
         Latest checkpoint location:           {}\n\
         Latest checkpoint's TimeLineID:       {}\n\
         Minimum recovery ending location:     {}\n\
         Min recovery ending loc's timeline:   {}\n\
         wal_log_hints setting:                {}\n\
         Data page checksum version:           {}\n",
        c.system_id.0,
        c.checkpoint_lsn,
        c.checkpoint_timeline.0,
        c.min_recovery_lsn,
        c.min_recovery_timeline.0,
        if c.wal_log_hints { "on" } else { "off" },
        c.data_checksum_version,
    );
    for (guc, field) in HOT_STANDBY_MINIMUMS {
        if let Some(v) = c.primary_minimums.get(guc) {
            out.push_str(&format!("{field}:   {v}\n"));
        }
    }
    out
}
