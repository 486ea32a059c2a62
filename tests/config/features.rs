//! Settings of single features as Patroni writes them: fencer and watchdog, store addresses, failsafe, etcd TLS,
//! hooks, synchronous modes and tags.
use super::*;

#[test]
fn fencer_and_watchdog_rules() {
    let e = err(&base_with("tenure.fencer", "{enabled: false}"));
    assert!(
        e.contains("tenure.fencer.enabled") && e.contains("watchdog.mode: required"),
        "{e}"
    );
    let text = base_with("tenure.fencer", "{enabled: false}");
    let c = ok(&(text + "watchdog: {mode: required}\n")).config;
    assert!(!c.fencer.enabled);
    assert_eq!(c.core_config().watchdog, WatchdogMode::Required);
    // The fencer stops PostgreSQL immediately at its deadline: a timeout for a fast stop would be a key
    // that does nothing, so setting it says so.
    let loaded = ok(&base_with("tenure.fencer.fast_stop_timeout", "0.5"));
    let w: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        w.len() == 1
            && w[0].contains("tenure.fencer.fast_stop_timeout")
            && w[0].contains("ignored"),
        "{w:?}"
    );
    let c = ok(&base_with("watchdog", "{mode: 'off', safety_margin: -1}")).config;
    assert_eq!(
        (c.watchdog.mode, c.watchdog.timeout_ms(30_000)),
        (WatchdogMode::Off, 15_000)
    );
    let e = err(&base_with("watchdog.safety_margin", "28"));
    assert!(
        e.contains("watchdog.safety_margin") && e.contains("loop_wait"),
        "{e}"
    );
}

#[test]
fn a_consul_ttl_below_20_s_is_a_warning() {
    let loaded = ok(&base_with(
        "bootstrap.dcs",
        "{ttl: 16, loop_wait: 2, retry_timeout: 2}",
    ));
    assert_eq!(loaded.config.timing().session_ttl_ms, 8_000);
    let w: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        w.iter()
            .any(|w| w.contains("bootstrap.dcs.ttl") && w.contains("10 s")),
        "{w:?}"
    );
}

#[test]
fn store_addresses_as_patroni_writes_them() {
    let c = ok(&base_with(
        "consul",
        "{host: 'c1', port: 8501, scheme: https, token: t}",
    ))
    .config;
    let s = c.consul_settings().unwrap();
    assert_eq!(
        (s.url.as_str(), s.token.as_deref()),
        ("https://c1:8501", Some("t"))
    );
    let etcd = base_without("consul");
    let vars = env(&[
        ("TENURE_ETCD3_HOSTS", "['e1:2379','e2']"),
        ("TENURE_ETCD3_PROTOCOL", "https"),
        ("TENURE_ETCD3_CACERT", "/etc/etcd/ca.pem"),
    ]);
    let s = parse_with(&etcd, &vars)
        .unwrap()
        .config
        .etcd_settings()
        .unwrap();
    assert_eq!(s.endpoints, ["https://e1:2379", "https://e2:2379"]);
    let text = etcd + "etcd3: {hosts: [e1], username: u}\n";
    assert!(err(&text).contains("etcd3.username"));
}

#[test]
fn failsafe_settings_parse_and_a_timeout_that_cannot_land_is_refused() {
    let c = ok(&base_with("tenure.failsafe_timeout", "1.5")).config;
    assert_eq!(c.core_config().failsafe_timeout_ms, 1_500);
    // On by default (issue 30; Patroni: off), and `false` turns it off.
    assert!(c.bootstrap_failsafe_mode);
    assert!(
        !ok(&base_with("bootstrap.dcs.failsafe_mode", "false"))
            .config
            .bootstrap_failsafe_mode
    );
    let c = ok(&base_with("bootstrap.dcs.failsafe_mode", "true"));
    assert!(c.config.bootstrap_failsafe_mode);
    assert!(
        c.warnings
            .iter()
            .all(|w| !w.to_string().contains("failsafe")),
        "failsafe_mode is no longer ignored"
    );
    let e = err(&base_with("tenure.failsafe_timeout", "60"));
    assert!(e.contains("tenure.failsafe_timeout"), "{e}");
    assert!(e.contains("failsafe"), "{e}");
}

/// etcd over TLS, as Patroni reads it: certificates without a protocol mean https; a half identity, an
/// https endpoint without a CA, or certificates with an explicit http endpoint are refused by key.
#[test]
fn etcd_tls_settings_and_their_refusals() {
    let etcd = |body: &str| base_without("consul") + &format!("etcd3: {{{body}}}\n");
    let c = ok(&etcd(
        "hosts: 'a:2379,b', cacert: /etc/ca.pem, cert: /etc/c.pem, key: /etc/k.pem",
    ))
    .config;
    let s = c.etcd_settings().unwrap();
    assert_eq!(s.endpoints, ["https://a:2379", "https://b:2379"]);
    let tls = s.tls.as_ref().expect("tls");
    assert_eq!(tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert_eq!(tls.key_file.as_deref(), Some(Path::new("/etc/k.pem")));

    let e = err(&etcd("hosts: a, cacert: /etc/ca.pem, cert: /etc/c.pem"));
    assert!(
        e.contains("etcd3.cert") && e.contains("etcd3.key go together"),
        "{e}"
    );
    let e = err(&etcd("hosts: a, protocol: https"));
    assert!(
        e.contains("etcd3.cacert") && e.contains("trust store"),
        "{e}"
    );
    let e = err(&etcd("hosts: 'http://a:2379', cacert: /etc/ca.pem"));
    assert!(e.contains("etcd3.hosts") && e.contains("plain http"), "{e}");
}

#[test]
fn hooks_are_split_as_patroni_splits_them() {
    let mut doc: yaml_serde::Value = yaml_serde::from_str(BASE).unwrap();
    let pg = doc["postgresql"].as_mapping_mut().unwrap();
    let hooks: yaml_serde::Value = yaml_serde::from_str(
        "{callbacks: {on_start: \"/usr/local/bin/cb.sh 'a b'\", on_role_change: /usr/local/bin/cb.sh}, \
         pre_promote: /usr/local/bin/fence.sh --check, before_stop: /bin/sync}",
    )
    .unwrap();
    pg.extend(hooks.as_mapping().unwrap().clone());
    let text = yaml_serde::to_string(&doc).unwrap();
    let c = ok(&text).config;
    let hooks = &c.local_pg.hooks;
    assert_eq!(
        hooks.callbacks.get(&tenure::ha::CallbackEvent::OnStart),
        Some(&vec!["/usr/local/bin/cb.sh".to_string(), "a b".to_string()])
    );
    assert_eq!(hooks.callbacks.len(), 2);
    assert_eq!(
        hooks.pre_promote,
        Some(vec!["/usr/local/bin/fence.sh".into(), "--check".into()])
    );
    assert_eq!(hooks.before_stop, Some(vec!["/bin/sync".into()]));
    let core = c.core_config();
    assert!(core.hooks.callbacks && core.hooks.pre_promote && core.hooks.before_stop);
}

#[test]
fn a_bad_hook_names_its_key() {
    let e = err(&base_with(
        "postgresql.callbacks",
        "{on_promote: /bin/true}",
    ));
    assert!(e.contains("on_promote"), "{e}");
    let e = err(&base_with("postgresql.pre_promote", "\"/bin/fence 'x\""));
    assert!(
        e.contains("postgresql.pre_promote") && e.contains("unclosed quote"),
        "{e}"
    );
}

/// `bootstrap.dcs`'s synchronous-replication keys are read (no longer ignored), checked, and carried into
/// the `config` key a new cluster's leader uploads; `quorum` (Patroni 4's quorum commit) is uploaded as the
/// word `quorum`, which the agents read as quorum mode.
#[test]
fn synchronous_mode_keys_are_carried_into_the_bootstrap_config() {
    let text = base_with(
        "bootstrap.dcs",
        "{synchronous_mode: on, synchronous_mode_strict: true, \
         synchronous_node_count: 2, maximum_lag_on_syncnode: -1}",
    );
    let c = ok(&text);
    assert!(
        c.warnings
            .iter()
            .all(|w| !w.to_string().contains("synchronous") && !w.to_string().contains("syncnode")),
        "{:?}",
        c.warnings
    );
    let uploaded = serde_json::Value::Object(c.config.bootstrap_sync.json());
    assert_eq!(
        uploaded,
        serde_json::json!({"synchronous_mode": true, "synchronous_mode_strict": true,
                           "synchronous_node_count": 2, "maximum_lag_on_syncnode": -1})
    );
    let d = tenure::config::dynamic::DynamicSettings::parse(&uploaded).unwrap();
    assert!(d.sync.enabled && d.sync.strict && d.sync.node_count == 2);
    assert!(!d.sync.quorum, "on is priority mode");
    let quorum = ok(&base_with("bootstrap.dcs.synchronous_mode", "Quorum"));
    let uploaded = serde_json::Value::Object(quorum.config.bootstrap_sync.json());
    assert_eq!(uploaded, serde_json::json!({"synchronous_mode": "quorum"}));
    let d = tenure::config::dynamic::DynamicSettings::parse(&uploaded).unwrap();
    assert!(d.sync.enabled && d.sync.quorum, "{:?}", d.sync);
    let off = ok(&base_with("bootstrap.dcs.synchronous_mode", "off"));
    assert_eq!(
        off.config.bootstrap_sync.json().get("synchronous_mode"),
        Some(&serde_json::json!(false))
    );
    let none = ok(BASE);
    assert!(
        none.config.bootstrap_sync.json().is_empty(),
        "nothing set, nothing uploaded"
    );
    for (key, value) in [
        ("bootstrap.dcs.synchronous_mode", "maybe"),
        ("bootstrap.dcs.synchronous_node_count", "0"),
        ("bootstrap.dcs.maximum_lag_on_syncnode", "-2"),
    ] {
        let e = err(&base_with(key, value));
        assert!(e.contains(key), "{key}: {e}");
    }
}

/// The `nosync` tag is a flag like `nofailover`: it reaches the member key, and a value that is not
/// true or false is refused.
#[test]
fn the_nosync_tag_is_a_flag() {
    let c = ok(&base_with("tags", "{nosync: true}")).config;
    assert_eq!(c.tags.get("nosync"), Some(&serde_json::json!(true)));
    let e = err(&base_with("tags", "{nosync: perhaps}"));
    assert!(e.contains("tags.nosync"), "{e}");
}

/// One word list for every yes/no value (issue 15): a tag in the file, `bootstrap.dcs.synchronous_mode`,
/// a flag of the `config` key and a member's tag as its peers read it agree on each word, in any case.
#[test]
fn every_yes_no_value_reads_the_same_words() {
    use tenure::config::dynamic::DynamicSettings;
    use tenure::dcs::values::tags_from_value;
    for (word, yes) in [
        ("Yes", true),
        ("on", true),
        ("1", true),
        ("TRUE", true),
        ("no", false),
        ("Off", false),
        ("0", false),
        ("false", false),
    ] {
        let file = ok(&base_with("tags", &format!("{{nofailover: '{word}'}}")));
        assert_eq!(
            file.config.core_config().nofailover,
            yes,
            "tags.nofailover {word:?}"
        );
        let peers = tags_from_value(&serde_json::json!({ "nofailover": word }));
        assert_eq!(peers.nofailover, yes, "a peer's nofailover {word:?}");
        let key = DynamicSettings::parse(&serde_json::json!({ "pause": word })).expect(word);
        assert_eq!(key.pause, yes, "the config key's pause {word:?}");
        let sync = ok(&base_with(
            "bootstrap.dcs.synchronous_mode",
            &format!("'{word}'"),
        ));
        let uploaded = serde_json::Value::Object(sync.config.bootstrap_sync.json());
        assert_eq!(
            uploaded["synchronous_mode"], yes,
            "synchronous_mode {word:?}"
        );
    }
}

/// `bootstrap.dcs.standby_cluster` (Patroni's keys) is accepted, checked and carried into the `config` key a
/// new standby cluster's first member uploads, and into the core (the source before the store has a config).
#[test]
fn standby_cluster_is_checked_and_carried_into_the_bootstrap_config() {
    let c = ok(&base_with(
        "bootstrap.dcs.standby_cluster",
        "{host: 10.1.0.5, port: 5433, primary_slot_name: site_b, create_replica_methods: [basebackup]}",
    ));
    assert_eq!(
        c.config.bootstrap_standby,
        Some(
            serde_json::json!({"host": "10.1.0.5", "port": 5433, "primary_slot_name": "site_b",
                                "create_replica_methods": ["basebackup"]})
        )
    );
    let source = c
        .config
        .core_config()
        .bootstrap_standby
        .expect("the core's source");
    assert_eq!(source.host.as_deref(), Some("10.1.0.5"));
    assert_eq!(source.port, Some(5433));
    assert!(ok(BASE).config.core_config().bootstrap_standby.is_none());
    for (key, value, says) in [
        (
            "bootstrap.dcs.standby_cluster",
            "{host: h, port: 70000}",
            "bootstrap.dcs.standby_cluster.port",
        ),
        (
            "bootstrap.dcs.standby_cluster",
            "{host: h, primary_slot_name: Site-B}",
            "primary_slot_name",
        ),
        (
            "bootstrap.dcs.standby_cluster",
            "{primary_slot_name: s}",
            "names no source",
        ),
        (
            "bootstrap.dcs.standby_cluster",
            "{host: h, hots: x}",
            "hots",
        ),
    ] {
        let e = err(&base_with(key, value));
        assert!(e.contains(says), "{value}: {e}");
    }
}

/// The `replicatefrom` tag names a member: read into the core, published with the other tags; a value that is
/// no member name is refused naming the key.
#[test]
fn replicatefrom_names_a_member() {
    let c = ok(&base_with("tags", "{replicatefrom: pg2}"));
    assert_eq!(
        c.config.core_config().replicatefrom,
        Some(tenure::ha::NodeName::new("pg2"))
    );
    assert_eq!(c.config.tags["replicatefrom"], "pg2");
    for bad in ["{replicatefrom: [pg2]}", "{replicatefrom: ' pg2'}"] {
        let e = err(&base_with("tags", bad));
        assert!(e.contains("tags.replicatefrom"), "{bad}: {e}");
    }
}

/// `bootstrap.dcs.peer_sites` (tenure's two-site key): URLs, checked, carried into the `config` key the first
/// member uploads and into the core (the other site before the store has a config); a bad one names the key.
#[test]
fn peer_sites_are_checked_and_carried_into_the_bootstrap_config() {
    let c = ok(&base_with(
        "bootstrap.dcs.peer_sites",
        "[http://10.2.0.1:8008, 'https://b2:8008']",
    ));
    let urls = vec!["http://10.2.0.1:8008".to_string(), "https://b2:8008".into()];
    assert_eq!(c.config.bootstrap_peer_sites, urls);
    assert_eq!(c.config.core_config().bootstrap_peer_sites, urls);
    for bad in [
        "[ftp://h]",
        "['http://u:p@h:1']",
        "[10.2.0.1:8008]",
        "http://h:1",
    ] {
        let e = err(&base_with("bootstrap.dcs.peer_sites", bad));
        assert!(e.contains("bootstrap.dcs.peer_sites"), "{bad}: {e}");
    }
}
/// `bootstrap.dcs.slots`, `ignore_slots` and `member_slots_ttl` (Patroni's keys) are checked and carried into the
/// `config` key the first member uploads; a bad value is refused naming the key (exit 64), a logical slot too.
#[test]
fn slots_are_checked_and_carried_into_the_bootstrap_config() {
    let c = ok(&base_with(
        "bootstrap.dcs",
        "{slots: {dr_site: {type: physical}, other: null}, ignore_slots: [{name: backup}, {type: logical}], \
         member_slots_ttl: 30min}",
    ));
    let s = &c.config.bootstrap_slots;
    assert_eq!(
        s.get("slots"),
        Some(&serde_json::json!({"dr_site": {"type": "physical"}, "other": null}))
    );
    assert_eq!(s.get("member_slots_ttl"), Some(&serde_json::json!("30min")));
    assert!(s.contains_key("ignore_slots"));
    for (value, says) in [
        (
            "{slots: {Dr-Site: {type: physical}}}",
            "bootstrap.dcs.slots.Dr-Site",
        ),
        (
            "{slots: {dr: {type: logical, database: app, plugin: pgoutput}}}",
            "PostgreSQL 17",
        ),
        (
            "{slots: {dr: {database: app, plugin: pgoutput}}}",
            "bootstrap.dcs.slots.dr.database",
        ),
        (
            "{slots: {dr: {type: physcal}}}",
            "bootstrap.dcs.slots.dr.type",
        ),
        ("{slots: [dr]}", "bootstrap.dcs.slots"),
        (
            "{ignore_slots: [{nam: x}]}",
            "bootstrap.dcs.ignore_slots[0].nam",
        ),
        (
            "{ignore_slots: [{type: both}]}",
            "bootstrap.dcs.ignore_slots[0].type",
        ),
        ("{member_slots_ttl: -5}", "bootstrap.dcs.member_slots_ttl"),
        (
            "{member_slots_ttl: 5 weeks}",
            "bootstrap.dcs.member_slots_ttl",
        ),
    ] {
        let e = err(&base_with("bootstrap.dcs", value));
        assert!(e.contains(says), "{value}: {e}");
    }
}

/// The `nostream` tag is read into the core (no upstream, no slot) and published with the other tags.
#[test]
fn nostream_is_read_into_the_core() {
    let c = ok(&base_with("tags", "{nostream: true}"));
    assert!(c.config.core_config().nostream);
    assert!(!ok(BASE).config.core_config().nostream);
    let e = err(&base_with("tags", "{nostream: perhaps}"));
    assert!(e.contains("tags.nostream"), "{e}");
}
