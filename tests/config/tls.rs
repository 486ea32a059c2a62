//! Issue 13 item 5: the `ssl*` keys of each `postgresql.authentication` section are settings, checked.
use super::*;
use tenure::pg::tls::SslMode;

fn with_auth(section: &str, value: &str) -> String {
    base_with(&format!("postgresql.authentication.{section}"), value)
}

/// Each section's keys reach its credentials (the rewind section, absent, takes the superuser's), with no
/// "is ignored" warning left.
#[test]
fn ssl_keys_become_settings_of_their_section() {
    let text = with_auth(
        "replication",
        "{username: replicator, password: r, sslmode: verify-ca, sslrootcert: /etc/ca.pem, \
         sslcert: /etc/r.pem, sslkey: /etc/r.key, sslpassword: kp, sslcrl: /etc/crl.pem, \
         sslcrldir: /etc/crl.d, sslnegotiation: postgres, gssencmode: disable, channel_binding: require}",
    );
    let doc = text.replace(
        "superuser:\n",
        "superuser:\n      sslmode: verify-full\n      sslrootcert: /etc/su-ca.pem\n",
    );
    let loaded = ok(&doc);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let pg = loaded.config.pg_settings();
    let r = &pg.replication.ssl;
    assert_eq!(r.mode, Some(SslMode::VerifyCa));
    assert_eq!(r.rootcert.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert_eq!(r.key.as_deref(), Some(Path::new("/etc/r.key")));
    assert_eq!(r.password.as_deref(), Some("kp"));
    assert_eq!(r.crldir.as_deref(), Some(Path::new("/etc/crl.d")));
    assert_eq!(r.channel_binding.as_deref(), Some("require"));
    assert_eq!(pg.superuser.ssl.mode, Some(SslMode::VerifyFull));
    assert_eq!(pg.rewind.ssl, pg.superuser.ssl);
    assert!(!format!("{:?}", pg.replication).contains("kp"));
}

#[test]
fn sslmode_is_one_of_libpqs_six_values() {
    let e = err(&with_auth(
        "replication",
        "{username: replicator, password: r, sslmode: verify_full}",
    ));
    assert!(
        e.contains("postgresql.authentication.replication.sslmode")
            && e.contains("disable, allow, prefer, require, verify-ca, verify-full"),
        "{e}"
    );
    for mode in ["disable", "allow", "prefer", "require"] {
        ok(&with_auth(
            "superuser",
            &format!("{{username: postgres, password: s, sslmode: {mode}}}"),
        ));
    }
}

/// What the agent could not honour is refused at load, with the key: a verify mode without its CA (libpq
/// would fall back to ~/.postgresql/root.crt), half a client identity, GSSAPI encryption, bad enum values.
#[test]
fn ssl_settings_the_agent_cannot_honour_are_refused_with_their_key() {
    for (value, key, says) in [
        ("sslmode: verify-full", "superuser.sslrootcert", "root.crt"),
        ("sslcert: /etc/c.pem", "superuser.sslcert", "together"),
        ("gssencmode: require", "superuser.gssencmode", "GSSAPI"),
        ("gssencmode: maybe", "superuser.gssencmode", "not one of"),
        (
            "channel_binding: on",
            "superuser.channel_binding",
            "not one of",
        ),
        (
            "sslnegotiation: tls",
            "superuser.sslnegotiation",
            "postgres, direct",
        ),
    ] {
        let e = err(&with_auth(
            "superuser",
            &format!("{{username: postgres, password: s, {value}}}"),
        ));
        assert!(
            e.contains(&format!("postgresql.authentication.{key}")) && e.contains(says),
            "{value}: {e}"
        );
    }
}

/// The files are read when the agent starts (`pg::tls::check`), as the etcd TLS files are: a missing one
/// is named with its section, key and path.
#[test]
fn tls_files_are_checked_at_start_with_key_and_path() {
    let text = with_auth(
        "replication",
        "{username: replicator, password: r, sslmode: verify-ca, sslrootcert: /nonexistent/ca.pem}",
    );
    let pg = ok(&text).config.pg_settings();
    let e = tenure::pg::tls::check(&pg).unwrap_err();
    assert!(
        e.starts_with("postgresql.authentication.replication.sslrootcert /nonexistent/ca.pem:"),
        "{e}"
    );
    assert!(tenure::pg::tls::check(&ok(BASE).config.pg_settings()).is_ok());
}
