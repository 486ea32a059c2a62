//! A loopback TCP forwarder that can black-hole its traffic, to partition one agent from its store: each
//! node gets its own [`Blackhole`] in front of the store (`Cluster::start_with`), and the one cut loses the
//! store while the others keep it. Shared by `e2e_outage` (the partition scenario) and `e2e_sync`.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::demo::local::StoreAddr;

/// A loopback TCP forwarder that can black-hole its traffic: while `holding`, nothing is forwarded in
/// either direction (bytes stay in the kernel's buffers, new connections are accepted and stay silent),
/// as in a network partition; when released, forwarding resumes with nothing lost, as TCP would.
pub struct Blackhole {
    /// Where the agents connect.
    pub addr: SocketAddr,
    holding: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Blackhole {
    /// Forward `127.0.0.1:<free port>` to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let holding = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s, up) = (holding.clone(), stop.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(&up) else {
                    continue;
                };
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                forward(client, s2, h.clone(), s.clone());
                forward(server, c2, h.clone(), s.clone());
            }
        });
        Blackhole {
            addr,
            holding,
            stop,
        }
    }

    /// Black-hole the traffic from now on (`true`), or forward again, held bytes first (`false`).
    pub fn set_holding(&self, on: bool) {
        self.holding.store(on, Ordering::SeqCst);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wake the accept loop so it sees `stop`
    }
}

/// Copy `from` to `to` on a thread, pausing while `holding`, until either side closes or `stop`.
fn forward(
    mut from: TcpStream,
    mut to: TcpStream,
    holding: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
        let mut buf = vec![0u8; 64 * 1024];
        let held = || holding.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst);
        while !stop.load(Ordering::SeqCst) {
            if held() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            match from.read(&mut buf) {
                Ok(0) => {
                    let _ = to.shutdown(std::net::Shutdown::Write);
                    return;
                }
                Ok(n) => {
                    while held() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
        let _ = from.shutdown(std::net::Shutdown::Both);
    });
}

/// `Cluster::start_with`'s `node_store` for a partitionable cluster: a new [`Blackhole`] in front of `addr`,
/// pushed on `proxies` (node `i`'s is `proxies[i]`), and the address that goes through it. Declare
/// `proxies` before the cluster, so they drop after it and the agents keep their store until they stop.
pub fn through_blackhole(proxies: &mut Vec<Blackhole>, addr: &StoreAddr) -> StoreAddr {
    let (hp, through): (&String, fn(String) -> StoreAddr) = match addr {
        StoreAddr::Etcd(hp) => (hp, StoreAddr::Etcd),
        StoreAddr::Consul(hp) => (hp, StoreAddr::Consul),
        StoreAddr::EtcdTls { .. } => unreachable!("plain stores only"),
    };
    let proxy = Blackhole::start(hp);
    let mine = through(proxy.addr.to_string());
    proxies.push(proxy);
    mine
}
