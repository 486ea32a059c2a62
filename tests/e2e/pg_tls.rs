//! Agents whose PostgreSQL takes only TLS: `ssl = on`, a pg_hba of `hostssl` lines only, and the
//! replication section's `sslmode: verify-ca` (issue 13 item 5).
use std::path::Path;
use std::time::{Duration, Instant};

use tenure::demo::local::{self, Agent, NodeSpec, RunAs, StoreAddr, Timings};

use crate::support;

const HBA: &str = "  pg_hba:
  - hostssl all all 127.0.0.1/32 scram-sha-256
  - hostssl replication all 127.0.0.1/32 scram-sha-256
  use_unix_socket: false
";

/// `render()`'s config with the replication section's TLS keys and the server's TLS parameters added.
fn tls_config(spec: &NodeSpec, pki: &Path) -> String {
    let text = spec.render();
    let repl = "      password: local-replicator-pw\n";
    let params = "\n  parameters:\n";
    assert!(text.contains(repl) && text.contains(params), "{text}");
    text.replace(
        repl,
        &format!(
            "{repl}      sslmode: verify-ca\n      sslrootcert: {}\n",
            pki.join("ca.pem").display()
        ),
    )
    .replacen(
        params,
        &format!(
            "{params}    ssl: 'on'\n    ssl_cert_file: {}\n    ssl_key_file: {}\n",
            pki.join("server.pem").display(),
            pki.join("server.key").display()
        ),
        1,
    )
}

/// The first row's first column of `query` on the PostgreSQL at `port`, over TLS (the only way in).
fn sql_one(rt: &tokio::runtime::Runtime, port: u16, query: &str) -> Option<String> {
    rt.block_on(async {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(port)
            .user(local::SUPERUSER.0)
            .password(local::SUPERUSER.1)
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(2));
        let ssl = tenure::pg::tls::SslSettings::default();
        let (client, conn) = tenure::pg::tls::connect(&mut cfg, &ssl).await.ok()?;
        let driver = tokio::spawn(conn);
        let row = client.query_opt(query, &[]).await.ok()??;
        driver.abort();
        row.try_get::<_, String>(0).ok()
    })
}

fn wait<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two agents on etcd: the first bootstraps behind a hostssl-only pg_hba (its own loopback connection
/// over TLS), the second clones with `pg_basebackup` and streams through `primary_conninfo`, both with
/// `sslmode=verify-ca` against the test CA; the walsender on the primary is encrypted.
pub fn replica_streams_over_hostssl_with_verify_ca() {
    let _serial = support::cluster::serial();
    let run_as = RunAs::detect().expect("run as root or as the postgres user");
    let owner = run_as.owner();
    let etcd = local::reaper().spawn_with(|| {
        let e = support::etcd::EtcdServer::start();
        let pid = e.pid().as_raw();
        (e, vec![pid])
    });
    let root = tempfile::Builder::new()
        .prefix("tenure-e2e-tls-")
        .tempdir()
        .unwrap();
    let pki = root.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    support::pki::pki(&pki);
    for p in std::iter::once(pki.clone())
        .chain(std::fs::read_dir(&pki).unwrap().flatten().map(|e| e.path()))
    {
        if let Some((uid, gid)) = owner {
            nix::unistd::chown(&p, Some(uid), Some(gid)).unwrap();
        }
    }
    let key = pki.join("server.key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    if let Some((uid, gid)) = owner {
        nix::unistd::chown(root.path(), Some(uid), Some(gid)).unwrap();
    }
    let specs: Vec<NodeSpec> = (1..=2)
        .map(|i| NodeSpec {
            scope: "e2e-tls".into(),
            name: format!("t{i}"),
            dir: root.path().join(format!("t{i}")),
            pg_port: local::free_port().unwrap(),
            api_port: local::free_port().unwrap(),
            store: StoreAddr::Etcd(etcd.host_port().to_string()),
            timings: Timings::FAST,
            postgresql_extra: HBA.into(),
            initdb_extra: String::new(),
            dcs_extra: String::new(),
            extra: String::new(),
        })
        .collect();
    for s in &specs {
        s.prepare(owner).unwrap();
        std::fs::write(s.config_path(), tls_config(s, &pki)).unwrap();
    }
    // Declared before the agents, so dropped after them: a failed assertion leaves no postmaster behind.
    let _postmasters = Postmasters(specs.iter().map(|s| s.data_dir()).collect());
    let bin = Path::new(env!("CARGO_BIN_EXE_tenure"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let mut agents = vec![Agent::start(bin, &specs[0], run_as).unwrap()];
    let logs = |s: &NodeSpec| {
        format!(
            "agent:\n{}\npostgres:\n{}",
            local::tail(&s.agent_log(), 30),
            local::tail(&s.pg_log(), 15)
        )
    };
    let primary =
        |s: &NodeSpec| local::http_get(s.api_addr(), "/primary").map(|r| r.0) == Some(200);
    let up = Duration::from_secs(40);
    let until = Instant::now() + up;
    while !primary(&specs[0]) {
        assert!(
            Instant::now() < until,
            "t1 is not primary\n{}",
            logs(&specs[0])
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    agents.push(Agent::start(bin, &specs[1], run_as).unwrap());
    let until = Instant::now() + up;
    let conninfo = loop {
        let q = "SELECT conninfo FROM pg_stat_wal_receiver WHERE status = 'streaming'";
        if let Some(c) = sql_one(&rt, specs[1].pg_port, q) {
            break c;
        }
        assert!(
            Instant::now() < until,
            "t2 does not stream\n{}",
            logs(&specs[1])
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(conninfo.contains("sslmode=verify-ca"), "{conninfo}");
    let encrypted = wait("t2's walsender", Duration::from_secs(5), || {
        sql_one(
            &rt,
            specs[0].pg_port,
            "SELECT s.ssl::text FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) \
             WHERE r.application_name = 't2'",
        )
    });
    assert_eq!(encrypted, "true");
    eprintln!(
        "[e2e tls] primary, replica cloned and streaming over hostssl in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for mut a in agents.into_iter().rev() {
        a.stop(Duration::from_secs(10));
    }
    drop(etcd);
}

/// Stops the postmasters of these data directories when dropped.
struct Postmasters(Vec<std::path::PathBuf>);

impl Drop for Postmasters {
    fn drop(&mut self) {
        for dir in &self.0 {
            local::stop_postmaster(dir, Duration::from_secs(5));
        }
    }
}
