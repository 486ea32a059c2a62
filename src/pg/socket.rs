//! The Unix socket the agent reaches its own PostgreSQL through, checked at start-up: no other user can replace it.
// Over TCP at 127.0.0.1, any local user can bind the port while PostgreSQL is down and ask the next probe
// for its password. A socket in a directory only the agent's user (or root) can write cannot be replaced,
// so a connection there is as good as a verified one (`tls::connect`).
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::PgSettings;

/// Where Debian's PostgreSQL puts its socket when `unix_socket_directories` is not set.
pub const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

impl PgSettings {
    /// The first of `unix_socket_directories` (PostgreSQL's order), else Debian's default.
    pub fn socket_dir(&self) -> PathBuf {
        let first = self
            .parameters
            .get("unix_socket_directories")
            .map(|v| v.split(',').next().unwrap_or("").trim().to_string());
        PathBuf::from(first.unwrap_or_else(|| DEFAULT_SOCKET_DIR.to_string()))
    }

    /// What the agent's own connections to its PostgreSQL go to: the socket directory when
    /// `use_unix_socket`, else the first listen address.
    pub fn local_target(&self) -> String {
        if self.use_unix_socket {
            self.socket_dir().display().to_string()
        } else {
            self.local_host()
        }
    }
}

/// At start, with `use_unix_socket`: the socket directory, and every folder above it, must be out of
/// reach of other users. The directory: owned by the agent's user or root, writable by no other user
/// (group write only for the agent's own group: Debian's `/var/run/postgresql` is `postgres:postgres
/// 2775`, and that group's members are trusted as the postgres user is). A folder above: owned by the
/// agent's user or root, and writable by others only with the sticky bit (`/tmp`), so nobody else can
/// rename what lies below it.
pub fn check_socket_dir(settings: &PgSettings) -> Result<(), String> {
    if !settings.use_unix_socket {
        return Ok(());
    }
    let dir = settings.socket_dir();
    let why = |problem: String| {
        format!(
            "postgresql.use_unix_socket: the socket directory {} (the first of \
             postgresql.parameters.unix_socket_directories, default {DEFAULT_SOCKET_DIR}) {problem}; another \
             local user could put a socket there and take the superuser's password. Make it a directory owned \
             by the agent's user and writable by no one else, name such a directory in unix_socket_directories, \
             or set use_unix_socket: false (then the agent connects over TCP and sends no cleartext or MD5 \
             password to an unverified server)",
            dir.display()
        )
    };
    if !dir.is_absolute() {
        return Err(why("is not an absolute path".into()));
    }
    let real = std::fs::canonicalize(&dir).map_err(|e| why(format!("cannot be used ({e})")))?;
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let meta = std::fs::metadata(&real).map_err(|e| why(format!("cannot be used ({e})")))?;
    if !meta.is_dir() {
        return Err(why("is not a directory".into()));
    }
    check_one(&real, &meta, uid, gid, false).map_err(why)?;
    for folder in real.ancestors().skip(1) {
        let meta = std::fs::metadata(folder).map_err(|e| why(format!("cannot be used ({e})")))?;
        check_one(folder, &meta, uid, gid, true).map_err(why)?;
    }
    Ok(())
}

fn check_one(
    path: &Path,
    meta: &std::fs::Metadata,
    uid: u32,
    gid: u32,
    above: bool,
) -> Result<(), String> {
    let mode = meta.mode();
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(format!(
            "is unsafe: {} is owned by uid {}",
            path.display(),
            meta.uid()
        ));
    }
    let sticky = above && mode & 0o1000 != 0;
    let other_write = mode & 0o002 != 0;
    let group_write = mode & 0o020 != 0 && meta.gid() != gid;
    if (other_write || group_write) && !sticky {
        return Err(format!(
            "is unsafe: other users can write {} (mode {:o}, group {})",
            path.display(),
            mode & 0o7777,
            meta.gid()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn settings(dir: &Path) -> PgSettings {
        let creds = super::super::Credentials {
            username: "postgres".into(),
            password: "x".into(),
            ssl: Default::default(),
        };
        PgSettings {
            name: "n".into(),
            bin_dir: "/bin".into(),
            data_dir: "/nonexistent".into(),
            listen_host: "127.0.0.1".into(),
            listen_port: 5432,
            use_unix_socket: true,
            connect_address: "127.0.0.1:5432".into(),
            superuser: creds.clone(),
            replication: creds.clone(),
            rewind: creds,
            parameters: [(
                "unix_socket_directories".to_string(),
                format!("{}, /elsewhere", dir.display()),
            )]
            .into(),
            pg_hba: Vec::new(),
            run_as: None,
            pgpass_path: "/nonexistent/pgpass".into(),
            log_file: "/nonexistent/log".into(),
            pg_ctl_timeout_s: 10,
        }
    }

    /// The first directory counts; one that others can write, or a missing one, names the key and the fix.
    #[test]
    fn a_socket_directory_others_can_write_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sock");
        let s = settings(&dir);
        assert_eq!(s.socket_dir(), dir);
        assert_eq!(s.local_target(), dir.display().to_string());
        let e = check_socket_dir(&s).unwrap_err();
        assert!(e.starts_with("postgresql.use_unix_socket:"), "{e}");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_socket_dir(&s).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = check_socket_dir(&s).unwrap_err();
        assert!(
            e.contains("other users can write") && e.contains("use_unix_socket: false"),
            "{e}"
        );
        let tcp = PgSettings {
            use_unix_socket: false,
            ..s
        };
        check_socket_dir(&tcp).unwrap();
        assert_eq!(tcp.local_target(), "127.0.0.1");
    }
}
