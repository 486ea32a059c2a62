//! Test harness for real PostgreSQL 15 nodes: temp dirs owned by `postgres`, free loopback ports, reaping.
#![allow(dead_code)]
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use tenure::ha::types::NodeName;
use tenure::pg::{Credentials, Endpoint, PgSettings};

pub const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// Become the subreaper of daemonized postmasters (PID 1 here does not reap) and reap their zombies: the
/// library's one reaper, which leaves a child its spawner waits for alone (a second reaper here took
/// every zombie but `runuser`, and a CLI's wait failed with ECHILD).
pub fn init_process() {
    tenure::demo::local::reaper();
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    tenure::demo::local::free_port().expect("a free loopback port")
}

fn chown_postgres(path: &std::path::Path) {
    let user = nix::unistd::User::from_name("postgres")
        .unwrap()
        .expect("postgres user");
    nix::unistd::chown(path, Some(user.uid), Some(user.gid)).unwrap();
}

fn creds(user: &str) -> Credentials {
    Credentials {
        username: user.into(),
        // Quotes, a colon and a backslash: every quoting layer (SQL, conninfo, GUC, pgpass) is exercised.
        password: format!("{user}'s:secret\\x"),
        ssl: Default::default(),
    }
}

/// One PostgreSQL node's directory and settings; its postmaster is stopped by PID on drop.
pub struct PgNode {
    pub settings: PgSettings,
    pub dir: tempfile::TempDir,
}

impl PgNode {
    /// A node with a fresh cluster in it (initdb), not started.
    pub async fn bootstrapped(name: &str) -> PgNode {
        let node = PgNode::new(name);
        let opts = tenure::pg::ctl::InitdbOptions::default();
        tenure::pg::ctl::bootstrap(&node.settings, &opts)
            .await
            .unwrap_or_else(|e| panic!("bootstrap: {e}\n{}", node.log()));
        node
    }

    pub fn new(name: &str) -> PgNode {
        init_process();
        let dir = tempfile::Builder::new()
            .prefix("tenure-pg-")
            .tempdir()
            .unwrap();
        chown_postgres(dir.path());
        let port = free_port();
        let root: PathBuf = dir.path().to_path_buf();
        let mut parameters = BTreeMap::new();
        // Small and quick: two cores are shared with concurrent builds.
        parameters.insert("shared_buffers".into(), "16MB".into());
        parameters.insert("max_connections".into(), "30".into());
        parameters.insert("fsync".into(), "off".into());
        parameters.insert("unix_socket_directories".into(), root.display().to_string());
        let settings = PgSettings {
            name: NodeName::new(name),
            bin_dir: BIN_DIR.into(),
            data_dir: root.join("data"),
            listen_host: "127.0.0.1".into(),
            listen_port: port,
            connect_address: format!("127.0.0.1:{port}"),
            use_unix_socket: true,
            superuser: creds("postgres"),
            replication: creds("replicator"),
            rewind: creds("rewinder"),
            parameters,
            pg_hba: Vec::new(),
            run_as: Some("postgres".into()),
            pgpass_path: root.join("pgpass"),
            log_file: root.join("postmaster.log"),
            pg_ctl_timeout_s: 30,
        };
        PgNode { settings, dir }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            name: self.settings.name.clone(),
            host: "127.0.0.1".into(),
            port: self.settings.listen_port,
        }
    }

    /// The postmaster's PID from `postmaster.pid`.
    pub fn postmaster_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.settings.data_dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.settings.log_file).unwrap_or_default()
    }
}

impl Drop for PgNode {
    fn drop(&mut self) {
        let Some(pid) = self.postmaster_pid() else {
            return;
        };
        // SIGQUIT is an immediate shutdown: the postmaster takes its children down with it.
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGQUIT);
        for _ in 0..50 {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
            if nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        let _ = waitpid(Pid::from_raw(pid), None);
    }
}

/// Poll `check` every 100 ms until it returns `Some`, or panic with `what` after `timeout_s`.
pub async fn eventually<T, F, Fut>(timeout_s: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let poll = async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    match tokio::time::timeout(Duration::from_secs(timeout_s), poll).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {timeout_s}s waiting for {what}"),
    }
}
