//! YAML forms a Patroni config file may use, which PyYAML's `safe_load` (Patroni's reader) accepts: merge keys
//! (`<<: *anchor`) and a leading byte-order mark.
use super::{err, ok, BASE};

#[test]
fn merge_keys_are_applied_as_patroni_applies_them() {
    let text = BASE.replace(
        "    replication: {username: replicator, password: r}\n",
        "    replication: &repl {username: replicator, password: r}\n    rewind:\n      <<: *repl\n      username: rewinder\n",
    );
    let loaded = ok(&text);
    let pg = loaded.config.pg_settings();
    assert_eq!(
        pg.rewind.username, "rewinder",
        "a key beside the merge wins over the merged one"
    );
    assert_eq!(pg.rewind.password, "r", "the merged key is there");
    // An unknown key brought in by a merge is still named.
    let text = BASE.replace(
        "    replication: {username: replicator, password: r}\n",
        "    replication: &repl {username: replicator, password: r, colour: blue}\n    rewind:\n      <<: *repl\n",
    );
    let e = err(&text);
    assert!(e.contains("colour"), "{e}");
}

#[test]
fn a_leading_byte_order_mark_is_read_past() {
    let loaded = ok(&format!("\u{feff}{BASE}"));
    assert_eq!(loaded.config.pg_settings().rewind.username, "postgres");
}
