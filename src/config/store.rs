//! The store sections: `consul` and `etcd3` into the adapters' settings, with Patroni's defaults and TLS rules.
use crate::dcs::consul::{Consistency, ConsulSettings};
use crate::dcs::etcd::{EtcdSettings, EtcdTls};
use crate::ha::Timing;

use super::ctx::Ctx;
use super::raw::{Hosts, RawConsistency, RawConsul, RawEtcd};

/// `host:port` with a default port; URLs pass through.
fn with_port(host: &str, default_port: u16) -> String {
    if host.contains("://")
        || host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else {
        format!("{host}:{default_port}")
    }
}

pub(super) fn consul(
    raw: RawConsul,
    scope: &str,
    namespace: &str,
    name: &str,
    timing: &Timing,
    ctx: &mut Ctx,
) -> Option<ConsulSettings> {
    if raw.checks.as_ref().is_some_and(|c| !c.is_empty()) {
        ctx.invalid(
            "consul.checks",
            "session health checks would let Consul free the leader key before its lease runs out",
            Some("use `checks: []` or remove the key"),
        );
    }
    let url = match raw.url {
        Some(u) => u,
        None => {
            let host = raw.host.unwrap_or_else(|| "127.0.0.1:8500".to_string());
            let host = match raw.port {
                Some(p) => format!(
                    "{}:{p}",
                    host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h)
                ),
                None => with_port(&host, 8500),
            };
            format!("{}://{host}", raw.scheme.as_deref().unwrap_or("http"))
        }
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        ctx.invalid(
            "consul.url",
            format!("{url:?} is not an http(s) URL"),
            Some("e.g. `url: https://127.0.0.1:8501`"),
        );
        return None;
    }
    if timing.session_ttl_ms < 10_000 {
        ctx.warn(
            "bootstrap.dcs.ttl",
            "below 20 s: tenure sends ttl/2 as the Consul session TTL and Consul rejects TTLs below 10 s \
             (only test doubles accept it)",
        );
    }
    let mut s = ConsulSettings::new(
        url.trim_end_matches('/'),
        scope,
        name,
        timing.session_ttl_ms,
    );
    s.namespace = namespace.to_string();
    s.token = raw.token.filter(|t| !t.is_empty());
    s.cacert = raw.cacert;
    s.cert = raw.cert;
    s.key = raw.key;
    s.consistency = match raw.consistency.unwrap_or(RawConsistency::Default) {
        RawConsistency::Default => Consistency::Default,
        RawConsistency::Consistent => Consistency::Consistent,
        RawConsistency::Stale => Consistency::Stale,
    };
    Some(s)
}

pub(super) fn etcd(
    mut raw: RawEtcd,
    scope: &str,
    namespace: &str,
    name: &str,
    timing: &Timing,
    ctx: &mut Ctx,
) -> Option<EtcdSettings> {
    let tls_material = raw.cacert.is_some() || raw.cert.is_some() || raw.key.is_some();
    // Certificates without a protocol mean https, as Patroni reads them.
    let default_protocol = if tls_material { "https" } else { "http" };
    let protocol = raw
        .protocol
        .take()
        .unwrap_or_else(|| default_protocol.to_string());
    if protocol != "http" && protocol != "https" {
        ctx.invalid(
            "etcd3.protocol",
            format!("{protocol:?}"),
            Some("use http or https"),
        );
    }
    let endpoints = etcd_endpoints(&mut raw, &protocol, ctx)?;
    let (user, password) = match (raw.username.take(), raw.password.take()) {
        (Some(u), Some(p)) => (Some(u), Some(p)),
        (None, None) => (None, None),
        _ => {
            ctx.invalid(
                "etcd3.username",
                "username and password go together",
                None::<&str>,
            );
            return None;
        }
    };
    etcd_tls_checks(&raw, &endpoints, tls_material, ctx);
    let tls = tls_material.then_some(EtcdTls {
        ca_file: raw.cacert,
        cert_file: raw.cert,
        key_file: raw.key,
    });
    Some(EtcdSettings {
        endpoints,
        scope: scope.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        ttl_ms: timing.session_ttl_ms,
        user,
        password,
        tls,
    })
}

/// `etcd3.url`, `hosts` (a list or Patroni's comma string) or `host`, as URLs with `protocol` and port 2379.
fn etcd_endpoints(raw: &mut RawEtcd, protocol: &str, ctx: &mut Ctx) -> Option<Vec<String>> {
    let hosts: Vec<String> = match (raw.url.take(), raw.hosts.take(), raw.host.take()) {
        (Some(url), _, _) => vec![url],
        (None, Some(Hosts::List(l)), _) => l,
        (None, Some(Hosts::Comma(c)), _) => c
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|h| h.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
            .filter(|h| !h.is_empty())
            .collect(),
        (None, None, Some(h)) => vec![h],
        (None, None, None) => vec![],
    };
    if hosts.is_empty() {
        ctx.missing(
            "etcd3.hosts",
            "list the etcd endpoints, e.g. `hosts: 10.0.0.1:2379,10.0.0.2:2379`",
        );
        return None;
    }
    let endpoints = hosts
        .iter()
        .map(|h| match with_port(h, 2379) {
            u if u.contains("://") => u,
            hp => format!("{protocol}://{hp}"),
        })
        .collect();
    Some(endpoints)
}

/// The client certificate with its key, a CA for https, and no plain http beside TLS material.
fn etcd_tls_checks(raw: &RawEtcd, endpoints: &[String], tls_material: bool, ctx: &mut Ctx) {
    if raw.cert.is_some() != raw.key.is_some() {
        ctx.invalid(
            "etcd3.cert",
            "etcd3.cert and etcd3.key go together",
            Some("set both (the client certificate and its key), or neither"),
        );
    }
    let https = endpoints.iter().any(|e| e.starts_with("https://"));
    if https && raw.cacert.is_none() {
        ctx.missing(
            "etcd3.cacert",
            "https endpoints need the CA that signed etcd's certificate (PEM); tenure does not read the system trust store",
        );
    }
    if let Some(plain) = endpoints.iter().find(|e| e.starts_with("http://")) {
        if tls_material {
            ctx.invalid(
                "etcd3.hosts",
                format!("{plain} is plain http but etcd3.cacert/cert/key are set"),
                Some("use https:// (or no scheme, with protocol: https)"),
            );
        }
    }
}
