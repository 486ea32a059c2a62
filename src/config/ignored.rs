//! The one table of Patroni keys tenure accepts but ignores (each a warning), and of those it refuses.
use yaml_serde::Value;

/// Patroni keys tenure accepts and ignores, with the reason given in the warning. A `*` segment matches any
/// key. Every row needs an `Option<Ignored>` field in `raw.rs` (a test checks each row parses).
pub const IGNORED: &[(&str, &str)] = &[
    ("log.traceback_level", "tenure logs no Python tracebacks"),
    (
        "log.format",
        "tenure's line format is fixed (plain key=value, or JSON with `log.type: json`)",
    ),
    ("log.dateformat", "timestamps are RFC 3339 UTC"),
    (
        "log.static_fields",
        "not supported; add fields in the log pipeline",
    ),
    (
        "log.max_queue_size",
        "tenure writes log lines synchronously",
    ),
    (
        "log.dir",
        "tenure logs to stderr: let the service manager (journald) keep files",
    ),
    (
        "log.mode",
        "tenure logs to stderr: let the service manager (journald) keep files",
    ),
    (
        "log.file_num",
        "tenure logs to stderr: let the service manager (journald) keep files",
    ),
    (
        "log.file_size",
        "tenure logs to stderr: let the service manager (journald) keep files",
    ),
    ("log.loggers", "filter per module with RUST_LOG"),
    (
        "log.deduplicate_heartbeat_logs",
        "tenure logs one line per cycle at INFO; raise log.level to quiet it",
    ),
    (
        "ctl",
        "patronictl's client settings; tenure's CLI reads this file's restapi section",
    ),
    ("citus", "Citus clusters are not supported"),
    (
        "etcd",
        "etcd's v2 API is not supported; use an etcd3 section",
    ),
    ("kubernetes", "tenure's stores are consul and etcd3"),
    ("raft", "tenure's stores are consul and etcd3"),
    ("zookeeper", "tenure's stores are consul and etcd3"),
    ("exhibitor", "tenure's stores are consul and etcd3"),
    ("thread_pool_size", "a Python runtime setting"),
    ("thread_stack_size", "a Python runtime setting"),
    (
        "bootstrap.users",
        "deprecated in Patroni; create application roles yourself",
    ),
    (
        "bootstrap.post_bootstrap",
        "no post-bootstrap script runs; tenure creates its own roles",
    ),
    (
        "bootstrap.post_init",
        "no post-bootstrap script runs; tenure creates its own roles",
    ),
    (
        "bootstrap.dcs.check_timeline",
        "tenure always checks timelines",
    ),
    (
        "bootstrap.dcs.max_timelines_history",
        "the history key is kept whole",
    ),
    (
        "bootstrap.dcs.primary_stop_timeout",
        "tenure escalates stops within its fence budget",
    ),
    (
        "bootstrap.dcs.postgresql.use_slots",
        "tenure always keeps one physical slot per member",
    ),
    (
        "bootstrap.dcs.postgresql.recovery_conf",
        "extra recovery settings are not written",
    ),
    (
        "postgresql.create_replica_methods",
        "replicas are always cloned with pg_basebackup",
    ),
    (
        "postgresql.basebackup",
        "pg_basebackup runs with tenure's own options",
    ),
    ("postgresql.proxy_address", "no proxy_url is published"),
    (
        "postgresql.use_unix_socket_repl",
        "replication connections go over TCP",
    ),
    ("postgresql.pg_ident", "pg_ident.conf is left as it is"),
    (
        "postgresql.parameters_primary",
        "role-specific parameters are not supported",
    ),
    (
        "postgresql.parameters_replica",
        "role-specific parameters are not supported",
    ),
    (
        "postgresql.parameters_standby_leader",
        "role-specific parameters are not supported",
    ),
    (
        "postgresql.pg_hba_primary",
        "role-specific pg_hba is not supported",
    ),
    (
        "postgresql.pg_hba_replica",
        "role-specific pg_hba is not supported",
    ),
    (
        "postgresql.pg_hba_standby_leader",
        "role-specific pg_hba is not supported",
    ),
    (
        "postgresql.pg_ident_primary",
        "pg_ident.conf is left as it is",
    ),
    (
        "postgresql.pg_ident_replica",
        "pg_ident.conf is left as it is",
    ),
    (
        "postgresql.pg_ident_standby_leader",
        "pg_ident.conf is left as it is",
    ),
    (
        "postgresql.rewind",
        "pg_rewind runs with tenure's own options",
    ),
    (
        "postgresql.recovery_conf",
        "extra recovery settings are not written",
    ),
    (
        "postgresql.krbsrvname",
        "Kerberos is not configured by tenure",
    ),
    (
        "restapi.allowlist",
        "unsafe endpoints are protected by authentication, not by address",
    ),
    (
        "restapi.allowlist_include_members",
        "unsafe endpoints are protected by authentication, not by address",
    ),
    ("restapi.ciphers", "TLS uses rustls' default cipher suites"),
    ("restapi.http_extra_headers", "no extra headers are sent"),
    ("restapi.https_extra_headers", "no extra headers are sent"),
    ("restapi.request_queue_size", "a Python runtime setting"),
    ("restapi.server_tokens", "no Server header is configured"),
    ("restapi.thread_pool_size", "a Python runtime setting"),
    (
        "consul.verify",
        "TLS certificates are always verified (give consul.cacert for a private CA)",
    ),
    ("consul.dc", "tenure talks to the local agent's datacenter"),
    (
        "consul.register_service",
        "no Consul service is registered; route with the REST health checks",
    ),
    ("consul.service_tags", "no Consul service is registered"),
    (
        "consul.service_check_interval",
        "no Consul service is registered",
    ),
    (
        "consul.service_check_tls_server_name",
        "no Consul service is registered",
    ),
    (
        "etcd3.use_proxies",
        "tenure always uses the listed endpoints as given, as with use_proxies: true",
    ),
    (
        "watchdog.driver",
        "only the Linux watchdog device is supported",
    ),
];

/// Patroni keys whose absence would change what the cluster does: refused with the reason and the fix.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "bootstrap.dcs.pause",
        "start the cluster, then run `tenure pause`",
    ),
    (
        "postgresql.config_dir",
        "tenure keeps configuration in data_dir; remove config_dir",
    ),
    (
        "postgresql.custom_conf",
        "put the settings into postgresql.parameters instead",
    ),
    (
        "postgresql.bin_name",
        "custom binary names are not supported; point bin_dir at the binaries",
    ),
    (
        "restapi.keyfile_password",
        "encrypted keys are not supported; give an unencrypted keyfile",
    ),
    (
        "etcd3.srv",
        "SRV discovery is not supported; list the endpoints in etcd3.hosts",
    ),
    (
        "etcd3.srv_suffix",
        "SRV discovery is not supported; list the endpoints in etcd3.hosts",
    ),
    (
        "etcd3.proxy",
        "list the proxy in etcd3.hosts or etcd3.url instead",
    ),
];

/// The reason a refused key is refused, if it is one.
pub fn unsupported(path: &str) -> Option<&'static str> {
    UNSUPPORTED
        .iter()
        .find(|(p, _)| matches(p, path))
        .map(|(_, why)| *why)
}

/// Every ignored key present in the document, as `(path, reason)`, in document order.
pub fn present(doc: &Value) -> Vec<(String, &'static str)> {
    let mut found = Vec::new();
    walk(doc, "", &mut found);
    found
}

fn walk(v: &Value, prefix: &str, found: &mut Vec<(String, &'static str)>) {
    let Value::Mapping(map) = v else { return };
    for (k, child) in map {
        let Some(k) = k.as_str() else { continue };
        let path = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        if let Some((_, why)) = IGNORED.iter().find(|(p, _)| matches(p, &path)) {
            found.push((path, why));
        } else if !path.starts_with("tags") {
            walk(child, &path, found);
        }
    }
}

/// Whether a table pattern (segments, `*` for any one) names `path`.
fn matches(pattern: &str, path: &str) -> bool {
    let (mut p, mut k) = (pattern.split('.'), path.split('.'));
    loop {
        match (p.next(), k.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == "*" || a == b => {}
            _ => return false,
        }
    }
}
