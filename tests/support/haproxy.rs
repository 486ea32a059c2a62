//! A real HAProxy for tests: a shipped template (`templates/haproxy*.cfg`) with the test nodes' addresses and free
//! loopback ports for its listeners, checked with `haproxy -c`, run in the foreground and killed by PID on drop.
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tenure::demo::local::{free_port, reaper};

use super::cluster::Cluster;

/// A running HAProxy: its write (`listen primary`) and read (`listen replicas`) ports.
pub struct Haproxy {
    child: Child,
    _dir: tempfile::TempDir,
    pub write_port: u16,
    pub read_port: u16,
}

/// `templates/<name>` with each block of server lines replaced by one line per node of `c`, pointed at
/// `127.0.0.1:target(listen, i)` (`listen`: the block's `listen` name) and checked on the node's REST port.
pub fn render(
    c: &Cluster,
    name: &str,
    write_port: u16,
    read_port: u16,
    target: impl Fn(&str, usize) -> u16,
) -> String {
    let path = format!("{}/templates/{name}", env!("CARGO_MANIFEST_DIR"));
    let template = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = String::new();
    let mut listen = String::new();
    let mut in_servers = false;
    for line in template.lines() {
        let t = line.trim_start();
        if let Some(l) = t.strip_prefix("listen ") {
            listen = l.trim().to_string();
        }
        if t.starts_with("server ") {
            // Each block of the template's server lines becomes ours, once.
            if !in_servers {
                for (i, n) in c.nodes.iter().enumerate() {
                    out.push_str(&format!(
                        "    server {} 127.0.0.1:{} maxconn 100 check port {}\n",
                        n.name,
                        target(&listen, i),
                        n.api_port
                    ));
                }
            }
            in_servers = true;
            continue;
        }
        in_servers = false;
        let line = line.replace("bind *:5000", &format!("bind 127.0.0.1:{write_port}"));
        let line = line.replace("bind *:5001", &format!("bind 127.0.0.1:{read_port}"));
        out.push_str(&line);
        out.push('\n');
    }
    out
}

impl Haproxy {
    /// HAProxy on `templates/<name>` rendered by [`render`], once its write port listens.
    pub fn start(c: &Cluster, name: &str, target: impl Fn(&str, usize) -> u16) -> Haproxy {
        let (write_port, read_port) = (free_port().unwrap(), free_port().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let cfg_path = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg_path, render(c, name, write_port, read_port, target)).unwrap();
        let check = reaper()
            .output(Command::new("haproxy").arg("-c").arg("-f").arg(&cfg_path))
            .expect("haproxy installed");
        assert!(
            check.status.success(),
            "haproxy -c: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let h = Haproxy {
            child,
            _dir: dir,
            write_port,
            read_port,
        };
        let listening = super::cluster::wait_for(
            || std::net::TcpStream::connect(("127.0.0.1", write_port)).ok(),
            Duration::from_secs(10),
        );
        assert!(
            listening.is_some(),
            "haproxy did not listen on {write_port}"
        );
        h
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
