//! `tenure query` against a real PostgreSQL 15 that a member key in the store points at.
use super::*;
use tenure::pg::ctl::{self, InitdbOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_runs_sql_on_the_chosen_member_and_keeps_passwords_from_unverified_servers() {
    let f = Fixture::start().await;
    let mut node = pg_support::PgNode::new("q1");
    // trust from loopback: the query connects as the user gives, and no password is asked for.
    node.settings.pg_hba = vec![
        "local all all trust".into(),
        "host all all 127.0.0.1/32 trust".into(),
    ];
    ctl::bootstrap(&node.settings, &InitdbOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
    let pg0 = client(&f.server, "pg0");
    pg0.ensure_session(deadline()).await.unwrap();
    let record = MemberRecord {
        conn_url: format!(
            "postgres://127.0.0.1:{}/postgres",
            node.settings.listen_port
        ),
        api_url: "http://127.0.0.1:9/patroni".into(),
        state: "running".into(),
        role: "replica".into(),
        version: "0.1.0".into(),
        ..MemberRecord::default()
    };
    pg0.publish_member(&record, deadline()).await.unwrap();
    let config = f.config();
    let c = path(&config);
    let sql = "SELECT 1 AS a, NULL AS b, 'x' AS c";
    let base = [
        "query", "-m", "pg0", "-U", "postgres", "-d", "postgres", "--config", c,
    ];
    let query = |extra: &[&str]| {
        let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let run = |args: Vec<String>, env: Vec<(&'static str, String)>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        tenure_env(&args, &env).await
    };

    let (code, out, err) = run(query(&["--command", sql]), vec![]).await;
    assert_eq!((code, out.as_str()), (0, "a\tb\tc\n1\tNone\tx\n"), "{err}");
    let (code, out, err) = run(query(&["--command", sql, "--format", "json"]), vec![]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!([{"a": "1", "b": null, "c": "x"}])
    );
    let (code, out, err) = run(query(&["--command", sql, "--delimiter", ","]), vec![]).await;
    assert_eq!((code, out.as_str()), (0, "a,b,c\n1,None,x\n"), "{err}");
    let file = f.dir.path().join("q.sql");
    std::fs::write(&file, "SELECT current_user AS u").unwrap();
    let (code, out, err) = run(query(&["-f", path(&file)]), vec![]).await;
    assert_eq!((code, out.as_str()), (0, "u\npostgres\n"), "{err}");

    // An SQL error: patronictl's row (the time, the SQLSTATE), exit 1.
    let (code, out, err) = run(query(&["--command", "SELECT * FROM nowhere"]), vec![]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        out.trim_end().ends_with("\tERROR, SQLSTATE: 42P01"),
        "{out}"
    );

    // The store says replica (pg0 comes first of the two), PostgreSQL says primary: by role it is
    // checked, as patronictl does.
    let (code, _, err) = tenure(&[
        "query",
        "-r",
        "replica",
        "-U",
        "postgres",
        "--command",
        "SELECT 1",
        "--config",
        c,
    ])
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("No connection to role replica is available"),
        "{err}"
    );

    // A password is not sent to a server whose identity nobody checked without channel binding:
    // refused before any query runs (this server would take it, in cleartext if it asked).
    let (code, out, err) = run(
        query(&["--command", "SELECT 1"]),
        vec![("PGPASSWORD", "s3cret".to_string())],
    )
    .await;
    assert_eq!(code, 69, "{out}{err}");
    assert!(err.contains("verified server"), "{err}");

    // Usage: --command or --file, and not -c (tenure's --config).
    let (code, _, err) = tenure(&["query", "-m", "pg0", "--config", c]).await;
    assert_eq!(code, 64, "{err}");
}
