//! Patroni's key layout under `<namespace>/<scope>/` (patroni-compat §2.2).

/// Where each key lives for one scope, under a namespace (`service` by default, as in Patroni).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// `namespace` without slashes at either end, e.g. `service`; `scope` the cluster name.
    pub fn new(namespace: &str, scope: &str) -> Self {
        let ns = namespace.trim_matches('/');
        KeyLayout {
            prefix: format!("{ns}/{scope}/"),
        }
    }
    /// The same keys with a leading slash, `/service/<scope>/...`, as Patroni's etcd3 backend writes them.
    pub fn rooted(namespace: &str, scope: &str) -> Self {
        let mut layout = KeyLayout::new(namespace, scope);
        layout.prefix.insert(0, '/');
        layout
    }
    /// `service/<scope>/`
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    pub fn leader(&self) -> String {
        format!("{}leader", self.prefix)
    }
    pub fn member(&self, name: &str) -> String {
        format!("{}members/{name}", self.prefix)
    }
    pub fn members_prefix(&self) -> String {
        format!("{}members/", self.prefix)
    }
    pub fn config(&self) -> String {
        format!("{}config", self.prefix)
    }
    pub fn initialize(&self) -> String {
        format!("{}initialize", self.prefix)
    }
    pub fn failover(&self) -> String {
        format!("{}failover", self.prefix)
    }
    pub fn sync(&self) -> String {
        format!("{}sync", self.prefix)
    }
    pub fn history(&self) -> String {
        format!("{}history", self.prefix)
    }
    pub fn status(&self) -> String {
        format!("{}status", self.prefix)
    }
    pub fn failsafe(&self) -> String {
        format!("{}failsafe", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_patroni() {
        let k = KeyLayout::new("/service/", "batman");
        assert_eq!(k.leader(), "service/batman/leader");
        assert_eq!(k.member("pg1"), "service/batman/members/pg1");
        assert_eq!(k.config(), "service/batman/config");
        assert_eq!(k.initialize(), "service/batman/initialize");
        assert_eq!(k.failover(), "service/batman/failover");
        assert_eq!(k.status(), "service/batman/status");
        let etcd = KeyLayout::rooted("/service/", "batman");
        assert_eq!(etcd.prefix(), "/service/batman/");
        assert_eq!(etcd.sync(), "/service/batman/sync");
    }
}
