//! The `pgbouncer:` section: off by default, each refusal naming its key and a fix.
use super::*;

const PB: &str = "\
pgbouncer:
  socket_dir: /var/run/postgresql
  databases: [app, reports]
  databases_file: /etc/pgbouncer/tenure/databases.ini
";

#[test]
fn pgbouncer_is_off_by_default_and_on_with_its_section() {
    let c = ok(BASE).config;
    assert!(c.pgbouncer.is_none() && !c.core_config().pooler);
    let c = ok(&format!("{BASE}{PB}")).config;
    let pb = c.pgbouncer.clone().expect("a pgbouncer section");
    assert!(c.core_config().pooler);
    assert_eq!(
        (pb.port, pb.user.as_str(), pb.step_timeout_ms),
        (6432, "pgbouncer", 2_000)
    );
    assert_eq!(pb.databases, ["app", "reports"]);
    let off = ok(&format!("{BASE}{PB}  enabled: false\n")).config;
    assert!(off.pgbouncer.is_none() && !off.core_config().pooler);
}

#[test]
fn pgbouncer_refusals_name_the_key_and_a_fix() {
    let e = err(&format!(
        "{BASE}pgbouncer:\n  host: 10.0.0.5\n  databases: [app]\n  databases_file: /x.ini\n"
    ));
    assert!(
        e.contains("pgbouncer.host") && e.contains("loopback"),
        "{e}"
    );
    let e = err(&format!(
        "{BASE}pgbouncer:\n  databases: [app]\n  databases_file: /x.ini\n"
    ));
    assert!(e.contains("pgbouncer.socket_dir"), "{e}");
    let e = err(&format!("{BASE}{PB}  step_timeout: 4\n"));
    assert!(
        e.contains("pgbouncer.step_timeout") && e.contains("retry_timeout"),
        "{e}"
    );
    let e = err(&format!(
        "{BASE}pgbouncer:\n  socket_dir: /s\n  databases: ['app = host=evil']\n  databases_file: /x.ini\n"
    ));
    assert!(
        e.contains("pgbouncer.databases") && e.contains("plain database name"),
        "{e}"
    );
    let e = err(&format!(
        "{BASE}pgbouncer:\n  socket_dir: /s\n  databases: [app]\n  databases_file: rel.ini\n"
    ));
    assert!(
        e.contains("pgbouncer.databases_file") && e.contains("absolute"),
        "{e}"
    );
    let e = err(&format!(
        "{BASE}{PB}  password_file: /nonexistent/tenure-pb-pass\n"
    ));
    assert!(e.contains("pgbouncer.password_file"), "{e}");
    let e = err(&format!("{BASE}{PB}  listen_port: 1\n"));
    assert!(e.contains("listen_port"), "{e}");
}

#[test]
fn the_admin_password_is_read_from_its_file_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pass");
    std::fs::write(&f, "s3cret\n").unwrap();
    let c = ok(&format!(
        "{BASE}{PB}  host: 127.0.0.1\n  password_file: {}\n",
        f.display()
    )
    .replace("  socket_dir: /var/run/postgresql\n", ""))
    .config;
    let pb = c.pgbouncer.expect("section");
    assert_eq!(pb.password.as_ref().map(|p| p.0.as_str()), Some("s3cret"));
    assert!(!format!("{pb:?}").contains("s3cret"));
}
