//! Root never follows a path the PostgreSQL user controls (issue 29 item 2): the data directory swapped
//! for a link is not emptied through it.
#[path = "support/pg.rs"]
mod pg_support;

use pg_support::PgNode;

/// A re-clone empties the data directory first. Swapped for a link to a folder standing in for `/etc`,
/// the link is refused and the folder keeps every file; the error names the path. Seen failing before the
/// fix: the folder was emptied through the link.
#[test]
fn a_data_directory_swapped_for_a_link_is_not_emptied_through_it() {
    let node = PgNode::new("host-a");
    let etc = node.dir.path().join("etc");
    std::fs::create_dir_all(etc.join("ssl")).unwrap();
    std::fs::write(etc.join("shadow"), "root:x").unwrap();
    std::fs::write(etc.join("ssl/key.pem"), "key").unwrap();
    std::os::unix::fs::symlink(&etc, &node.settings.data_dir).unwrap();
    let result = tenure::pg::ctl::remove_data_dir_contents(&node.settings);
    assert!(
        etc.join("shadow").exists() && etc.join("ssl/key.pem").exists(),
        "the link's target was emptied"
    );
    let e = result.expect_err("a link is refused").to_string();
    assert!(
        e.contains(&node.settings.data_dir.display().to_string()) && e.contains("symbolic link"),
        "{e}"
    );
}

/// `tenure agent` as the given user (`None`: as ourselves) with `config`; exit code and stderr.
fn agent(as_user: Option<&str>, config: &std::path::Path) -> (i32, String) {
    let bin = env!("CARGO_BIN_EXE_tenure");
    let mut cmd = match as_user {
        Some(user) => {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", user, "--", bin]);
            c
        }
        None => std::process::Command::new(bin),
    };
    let out = cmd
        .args(["agent", "--config"])
        .arg(config)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("run tenure");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The packaged template with its socket directory set to `socket_dir`, written for the postgres user.
fn config_with_socket_dir(
    dir: &std::path::Path,
    socket_dir: &std::path::Path,
) -> std::path::PathBuf {
    let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/tenure.yml");
    let mut doc: yaml_serde::Value =
        yaml_serde::from_str(&std::fs::read_to_string(template).unwrap()).unwrap();
    doc["postgresql"]["parameters"] = yaml_serde::from_str(&format!(
        "{{unix_socket_directories: '{}'}}",
        socket_dir.display()
    ))
    .unwrap();
    let path = dir.join("tenure.yml");
    std::fs::write(&path, yaml_serde::to_string(&doc).unwrap()).unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    for p in [dir, &path] {
        nix::unistd::chown(p, Some(pg.uid), Some(pg.gid)).unwrap();
    }
    path
}

/// The agent refuses root (root mode is gone), and, as the postgres user, a socket directory any local user
/// can write: exit 64 naming `postgresql.use_unix_socket`, before it reaches the store or PostgreSQL (a
/// socket planted there would get the superuser's password). The checks are new: before them the agent
/// went on to its store.
#[test]
fn the_agent_refuses_root_and_a_socket_directory_others_can_write() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket_dir = dir.path().join("sock");
    std::fs::create_dir(&socket_dir).unwrap();
    std::fs::set_permissions(&socket_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let config = config_with_socket_dir(dir.path(), &socket_dir);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, err) = agent(None, &config);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("does not run as root"), "{err}");
    let (code, err) = agent(Some("postgres"), &config);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("postgresql.use_unix_socket") && err.contains("other users can write"),
        "{err}"
    );
}
