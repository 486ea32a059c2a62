//! A real PgBouncer 1.18 for tests: its own folder owned by `postgres`, a free loopback port, transaction pooling,
//! the `[databases]` include file tenure writes; run as `postgres` in the foreground and killed by PID on drop.
#![allow(dead_code)]
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tenure::pgbouncer::{AdminAddress, PgBouncerSettings, Secret};

pub const ADMIN_USER: &str = "pgbouncer";
pub const ADMIN_PASSWORD: &str = "admin's \"pw\"";

pub struct PgBouncerProc {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub child: Option<Child>,
    pub databases: Vec<String>,
}

fn postgres_user() -> nix::unistd::User {
    nix::unistd::User::from_name("postgres")
        .unwrap()
        .expect("postgres user")
}

/// A quoted `auth_file` field: `"` doubled.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

impl PgBouncerProc {
    /// Routing `databases` to `127.0.0.1:target_port`; `users` may log in with their passwords (and are used
    /// to log in to PostgreSQL).
    pub fn start(target_port: u16, databases: &[&str], users: &[(&str, &str)]) -> PgBouncerProc {
        let dir = tempfile::Builder::new()
            .prefix("tenure-pgbouncer-")
            .tempdir()
            .unwrap();
        let pg = postgres_user();
        nix::unistd::chown(dir.path(), Some(pg.uid), Some(pg.gid)).unwrap();
        let port = tenure::demo::local::free_port().expect("a free port");
        let d = dir.path().display().to_string();
        let mut userlist = format!("{} {}\n", quoted(ADMIN_USER), quoted(ADMIN_PASSWORD));
        for (u, p) in users {
            userlist.push_str(&format!("{} {}\n", quoted(u), quoted(p)));
        }
        let ini = format!(
            "[databases]\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir = {d}\n\
             auth_type = scram-sha-256\n\
             auth_file = {d}/userlist.txt\n\
             admin_users = {ADMIN_USER}\n\
             pool_mode = transaction\n\
             max_client_conn = 200\n\
             default_pool_size = 40\n\
             ignore_startup_parameters = extra_float_digits\n\
             server_login_retry = 0.1\n\
             logfile = {d}/pgbouncer.log\n\
             %include {d}/tenure-databases.ini\n"
        );
        let mut p = PgBouncerProc {
            dir,
            port,
            child: None,
            databases: databases.iter().map(|s| s.to_string()).collect(),
        };
        let first = tenure::pgbouncer::PgBouncer::new(p.settings(ADMIN_PASSWORD));
        let target = tenure::pgbouncer::Target::new("127.0.0.1", target_port).unwrap();
        for (name, text) in [
            ("pgbouncer.ini", ini),
            ("userlist.txt", userlist),
            ("tenure-databases.ini", first.databases_text(&target)),
        ] {
            let path = p.dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            nix::unistd::chown(&path, Some(pg.uid), Some(pg.gid)).unwrap();
        }
        p.run();
        p
    }

    /// Start (again) in the foreground as `postgres`, and wait until it listens.
    pub fn run(&mut self) {
        let pg = postgres_user();
        let child = Command::new("/usr/sbin/pgbouncer")
            .arg(self.dir.path().join("pgbouncer.ini"))
            .uid(pg.uid.as_raw())
            .gid(pg.gid.as_raw())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        self.child = Some(child);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("pgbouncer did not listen:\n{}", self.log());
    }

    /// Kill it (SIGKILL, by PID) and reap it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }

    pub fn databases_file(&self) -> PathBuf {
        self.dir.path().join("tenure-databases.ini")
    }

    /// What the agent's `pgbouncer:` section would say, with `password` for the admin user.
    pub fn settings(&self, password: &str) -> PgBouncerSettings {
        PgBouncerSettings {
            admin: AdminAddress::Socket {
                dir: self.dir.path().to_path_buf(),
            },
            port: self.port,
            user: ADMIN_USER.into(),
            password: Some(Secret(password.into())),
            databases: self.databases.clone(),
            databases_file: self.databases_file(),
            step_timeout_ms: 2_000,
            chain: false,
        }
    }
}

impl Drop for PgBouncerProc {
    fn drop(&mut self) {
        self.stop();
    }
}
