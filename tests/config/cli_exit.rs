//! The CLI's side of the config: `validate-config` and usage errors exit with the documented codes.
use super::*;

#[test]
fn validate_config_exits_0_or_64_naming_file_and_key() {
    let t = template();
    let (code, out, _) = tenure(&["agent", "--validate-config", t.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "config OK"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        format!("{BASE}bootstrap:\n  dcs:\n    loop_waitt: 5\n"),
    )
    .unwrap();
    let (code, out, err) = tenure(&["agent", "--validate-config", bad.to_str().unwrap()]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(
        err.contains("bad.yml") && err.contains("bootstrap.dcs.loop_waitt"),
        "{err}"
    );
    assert!(!out.contains("config OK"));

    let warned = dir.path().join("warned.yml");
    std::fs::write(
        &warned,
        base_with("postgresql.basebackup", "{max-rate: 100M}"),
    )
    .unwrap();
    let (code, out, err) = tenure(&["agent", "--validate-config", warned.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "config OK"), "{err}");
    assert!(
        err.contains("warning") && err.contains("postgresql.basebackup"),
        "{err}"
    );

    let (code, _, err) = tenure(&["agent", "--validate-config", "/nonexistent/tenure.yml"]);
    assert_eq!(code, 64);
    assert!(err.contains("/nonexistent/tenure.yml"), "{err}");
}

#[test]
fn cli_usage_exit_codes() {
    assert_eq!(tenure(&["agent"]).0, 64, "agent needs a file");
    assert_eq!(tenure(&["no-such-command"]).0, 64);
    assert_eq!(tenure(&["--help"]).0, 0);
    // Operator commands need the agent's config file to find the store and the REST API.
    for cmd in ["list", "pause", "resume", "history"] {
        let (code, _, err) = tenure(&[cmd]);
        assert_eq!(code, 64, "{cmd}: {err}");
        assert!(err.contains("--config"), "{cmd}: {err}");
    }
    let t = template();
    let (code, _, err) = tenure(&["agent", "--config", t.to_str().unwrap()]);
    if nix::unistd::geteuid().is_root() {
        assert_eq!(code, 64, "{err}");
        assert!(err.contains("PostgreSQL refuses to run as root"), "{err}");
    }
}

/// Root mode is gone: `tenure.run_as` is refused, naming the key and the fix (it used to be accepted,
/// and let an agent run as root follow paths the PostgreSQL user controls). Patroni's
/// `postgresql.use_unix_socket` is a real key now, no longer ignored with a warning.
#[test]
fn run_as_is_refused_and_use_unix_socket_is_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("root.yml");
    std::fs::write(&f, base_with("tenure.run_as", "postgres")).unwrap();
    let (code, out, err) = tenure(&["agent", "--validate-config", f.to_str().unwrap()]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(
        err.contains("tenure.run_as") && err.contains("run the agent as the PostgreSQL user"),
        "{err}"
    );
    std::fs::write(&f, base_with("postgresql.use_unix_socket", "false")).unwrap();
    let (code, out, err) = tenure(&["agent", "--validate-config", f.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "config OK"), "{err}");
    assert!(!err.contains("use_unix_socket"), "{err}");
    // Through the socket, pg_hba.conf needs a `local` line: said at start, not as a failed probe.
    let hba = "['hostssl all all 0.0.0.0/0 scram-sha-256']";
    std::fs::write(&f, base_with("postgresql.pg_hba", hba)).unwrap();
    let (code, out, err) = tenure(&["agent", "--validate-config", f.to_str().unwrap()]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(
        err.contains("postgresql.pg_hba") && err.contains("local"),
        "{err}"
    );
}
