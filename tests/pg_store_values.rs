//! Store values that reach PostgreSQL's config files, on real PostgreSQL 15 (issue 29, item 4): a parameter
//! name, a value or a leader name holding a line break adds no line to `tenure.conf` or the recovery file,
//! and PostgreSQL still reads every line tenure writes (its `pg_file_settings` shows no error).
#[path = "support/pg.rs"]
mod pg_support;

use pg_support::PgNode;
use tenure::config::dynamic::DynamicSettings;
use tenure::pg::recovery::{self, StandbyConfig};
use tenure::pg::{config, ctl, probe, Endpoint};

/// The issue's payload: on the code before the fix every member wrote and applied `archive_command`.
const HOSTILE_NAME: &str = "work_mem = '5MB'\narchive_command";
const COMMAND: &str = "/bin/true tenure-was-here";

/// What PostgreSQL read from the files tenure writes: `(file, name, setting, error)` per line.
async fn file_settings(node: &PgNode) -> Vec<(String, String, String, Option<String>)> {
    let client = probe::connect_local(&node.settings).await.expect("connect");
    let rows = client
        .query(
            "SELECT sourcefile, name, setting, error FROM pg_file_settings \
             WHERE sourcefile LIKE '%tenure%' ORDER BY sourcefile, sourceline",
            &[],
        )
        .await
        .expect("pg_file_settings");
    rows.iter()
        .map(|r| {
            let file: String = r.get(0);
            let file = file.rsplit('/').next().unwrap_or_default().to_string();
            (file, r.get(1), r.get(2), r.get(3))
        })
        .collect()
}

async fn show(node: &PgNode, guc: &str) -> String {
    let client = probe::connect_local(&node.settings).await.expect("connect");
    let row = client
        .query_one(&format!("SHOW {guc}"), &[])
        .await
        .expect("SHOW");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_and_values_from_the_store_add_no_line_and_postgresql_reads_every_line() {
    let mut node = PgNode::new("guc-a");
    ctl::bootstrap(&node.settings, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));

    // 1. The store's `config` key as the issue shows it, taken the way the agent takes it: parsed, and
    //    its parameters written. The parser must refuse it (the agent then keeps its running settings).
    let key = serde_json::json!({"postgresql": {"parameters": {HOSTILE_NAME: COMMAND}}});
    let from_store = DynamicSettings::parse(&key)
        .ok()
        .and_then(|d| d.parameters)
        .unwrap_or_default();
    node.settings.parameters.extend(from_store);
    let _ = config::write_config(&node.settings);

    // 2. The same name, and a value with a line break, handed to the writer directly: it must refuse.
    let mut direct = node.settings.clone();
    direct
        .parameters
        .insert(HOSTILE_NAME.into(), COMMAND.into());
    let refused_name = config::write_config(&direct);
    let mut direct = node.settings.clone();
    direct.parameters.insert(
        "work_mem".into(),
        format!("5MB'\narchive_command = '{COMMAND}"),
    );
    let refused_value = config::write_config(&direct);

    // 3. A leader whose name holds a line break: the recovery file must not gain its line.
    let leader = Endpoint {
        name: format!("pg0\nrestore_command = '{COMMAND}'")
            .as_str()
            .into(),
        host: "127.0.0.1".into(),
        port: 1,
    };
    let refused_leader = recovery::configure_standby(
        &node.settings,
        &StandbyConfig {
            upstream: Some(leader),
            slot: None,
            remote: None,
        },
    );
    // The standby signal must not make the reload below a standby's: only the files are under test.
    let _ = std::fs::remove_file(node.settings.data_dir.join("standby.signal"));

    // 4. What an operator may legitimately write: quotes and backslashes, read back exactly.
    let quoted = r"it's a \ backslash, '' and \n";
    node.settings
        .parameters
        .insert("tenure_test.quoted".into(), quoted.into());
    node.settings
        .parameters
        .insert("tenure_test.other".into(), "a'b\\c".into());
    config::write_config(&node.settings).expect("write_config with quotes and backslashes");
    ctl::reload(&node.settings).await.expect("reload");
    std::thread::sleep(std::time::Duration::from_millis(500));

    let read = file_settings(&node).await;
    let names: Vec<&str> = read.iter().map(|(_, n, _, _)| n.as_str()).collect();
    let conf = std::fs::read_to_string(node.settings.data_dir.join("tenure.conf")).unwrap();
    let rec = std::fs::read_to_string(node.settings.data_dir.join(recovery::RECOVERY_CONF))
        .unwrap_or_default();
    assert!(
        !names.contains(&"archive_command") && !names.contains(&"restore_command"),
        "a store value added a line PostgreSQL read: {read:?}\ntenure.conf:\n{conf}\nrecovery:\n{rec}"
    );
    assert_ne!(show(&node, "archive_command").await, COMMAND);
    assert_ne!(show(&node, "restore_command").await, COMMAND);
    assert!(
        read.iter().all(|(_, _, _, e)| e.is_none()),
        "PostgreSQL refused a line tenure wrote: {read:?}\n{conf}"
    );
    assert!(
        refused_name.is_err() && refused_value.is_err() && refused_leader.is_err(),
        "the writers took a line break: name {refused_name:?}, value {refused_value:?}, leader {refused_leader:?}"
    );
    assert_eq!(show(&node, "tenure_test.quoted").await, quoted);
    assert_eq!(show(&node, "tenure_test.other").await, "a'b\\c");
}
