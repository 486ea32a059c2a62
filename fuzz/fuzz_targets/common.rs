//! What the targets share: one real config file, parsed once, as an agent would load it.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use tenure::config::Config;

/// A small valid config on Consul (its tighter timing rule), with REST credentials.
pub const CONFIG_YAML: &str = "\
scope: main
name: pg1
restapi:
  listen: 127.0.0.1:8008
  authentication: {username: admin, password: secret}
consul:
  host: 127.0.0.1:8500
postgresql:
  data_dir: /var/lib/pg/main
  listen: 127.0.0.1:5432
  authentication:
    superuser: {username: postgres, password: s}
    replication: {username: replicator, password: r}
";

pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        tenure::config::parse(CONFIG_YAML, Path::new("fuzz.yml"), &BTreeMap::new())
            .expect("the fuzz targets' base config is valid")
            .config
    })
}
