//! Connections: a cap on open connections (the oldest idle one makes room), a share kept for health checks,
//! a header-read and an idle timeout, and a bounded shutdown.
//!
//! Why not warp's own `serve`: it has no header-read timeout, no connection cap and an unbounded graceful shutdown;
//! so warp's hyper (0.14, features `server`, `http1`, `runtime`) is driven per connection here.
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::server::conn::Http;
use hyper::service::service_fn;
use hyper::{Body, Request, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use warp::Filter;

use super::health::Check;
use super::refusals::RefusalLog;
use super::transport::Conn;

/// Open connections at most. Patroni has no cap; an agent under an idle-connection flood must keep file
/// descriptors for its store and PostgreSQL connections.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections only health checks may keep busy: other requests beyond `MAX_CONNECTIONS - this` get 503.
pub const RESERVED_FOR_HEALTH: usize = 32;
/// A client must send a request's headers within this time (hyper's own timer).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight for this long is closed: a kept-alive one (hyper 0.14 does not
/// restart its header timer between requests), and a slow sender as well.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// After the shutdown signal, in-flight requests get this long; then every connection is dropped.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);
/// A client that does not finish its TLS handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// A connection flood, or a descriptor shortage that lasts, writes a few lines per interval and a count.
static BUSY_LOG: RefusalLog = RefusalLog::new("connections closed while all were busy");
static ACCEPT_LOG: RefusalLog = RefusalLog::new("failed accepts");

/// The peer's address, put into every request's extensions for the router's log lines.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// One open connection: busy while a request is being answered; `evict` asks its task to drop it.
struct Slot {
    busy: AtomicBool,
    evict: Notify,
    /// When the connection last became idle (accepted, or a response done).
    idle_since: Mutex<Instant>,
}

impl Slot {
    fn new() -> Self {
        Slot {
            busy: AtomicBool::new(false),
            evict: Notify::new(),
            idle_since: Mutex::new(crate::clock::now()),
        }
    }

    /// When an idle connection must be closed; `None` while a request is in flight.
    fn idle_deadline(&self) -> Option<Instant> {
        if self.busy.load(Ordering::SeqCst) {
            return None;
        }
        Some(*self.idle_since.lock().unwrap_or_else(|e| e.into_inner()) + IDLE_TIMEOUT)
    }
}

/// The open connections, oldest first, and how many non-health requests are being answered.
#[derive(Default)]
struct Pool {
    open: Mutex<VecDeque<Arc<Slot>>>,
    busy_other: AtomicUsize,
}

impl Pool {
    /// A slot for a new connection; at the cap the oldest idle connection is closed to make room (an idle
    /// flood cannot lock health checks out). `None` when every connection is busy.
    fn admit(&self) -> Option<Arc<Slot>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= MAX_CONNECTIONS {
            let idle = open.iter().position(|s| !s.busy.load(Ordering::SeqCst))?;
            if let Some(victim) = open.remove(idle) {
                victim.evict.notify_one();
            }
        }
        let slot = Arc::new(Slot::new());
        open.push_back(slot.clone());
        Some(slot)
    }

    fn release(&self, slot: &Arc<Slot>) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = open.iter().position(|s| Arc::ptr_eq(s, slot)) {
            open.remove(i);
        }
    }
}

/// Marks a slot busy (and counts a non-health request) until dropped.
struct Busy {
    slot: Arc<Slot>,
    pool: Arc<Pool>,
    other: bool,
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self
            .slot
            .idle_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = crate::clock::now();
        self.slot.busy.store(false, Ordering::SeqCst);
        if self.other {
            self.pool.busy_other.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Accept and serve until `shutdown`; then in-flight requests get `SHUTDOWN_TIMEOUT` and idle ones end.
pub async fn run<F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    filter: F,
    shutdown: impl Future<Output = ()>,
) where
    F: Filter<Extract = (Response<Body>,), Error = warp::Rejection> + Clone + Send + Sync + 'static,
{
    let svc = warp::service(filter);
    let pool = Arc::new(Pool::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    if ACCEPT_LOG.admit(crate::clock::monotonic().0) {
                        tracing::warn!(error = %e, "REST API: accept failed");
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        while conns.try_join_next().is_some() {}
        let Some(slot) = pool.admit() else {
            if BUSY_LOG.admit(crate::clock::monotonic().0) {
                tracing::warn!(%peer, "REST API: {MAX_CONNECTIONS} connections busy, closing a new one");
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (pool, svc, tls, stop) = (pool.clone(), svc.clone(), tls.clone(), stop_rx.clone());
        conns.spawn(async move {
            connection(stream, peer, tls, &slot, &pool, svc, stop).await;
            pool.release(&slot);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, drain).await.is_err() {
        tracing::warn!("REST API: requests still open after {SHUTDOWN_TIMEOUT:?}, dropping them");
        conns.abort_all();
    }
}

/// One connection: TLS handshake when configured, then HTTP/1.1 until the client leaves, the header-read
/// timeout passes, the pool evicts it, or shutdown (graceful: the request in flight is answered).
async fn connection<S>(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    slot: &Arc<Slot>,
    pool: &Arc<Pool>,
    svc: S,
    mut stop: watch::Receiver<bool>,
) where
    S: hyper::service::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let conn = match tls {
        None => Conn::Plain(stream),
        Some(acceptor) => {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            tokio::select! {
                _ = slot.evict.notified() => return,
                r = handshake => match r {
                    Ok(Ok(s)) => Conn::Tls(Box::new(s)),
                    Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "REST API: TLS handshake failed"),
                    Err(_) => return tracing::debug!(%peer, "REST API: TLS handshake timed out"),
                },
            }
        }
    };
    let service = {
        let (slot, pool) = (slot.clone(), pool.clone());
        service_fn(move |mut req: Request<Body>| {
            req.extensions_mut().insert(PeerAddr(peer));
            let busy = mark_busy(&slot, &pool, &req);
            let mut svc = svc.clone();
            async move {
                let Some(busy) = busy else {
                    return Ok(overloaded());
                };
                let r = hyper::service::Service::call(&mut svc, req).await;
                drop(busy);
                r
            }
        })
    };
    let http = Http::new()
        .http1_only(true)
        .http1_header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(conn, service);
    tokio::pin!(http);
    loop {
        // While busy, look again after one timeout: the request's end resets the idle clock.
        let check_at = slot
            .idle_deadline()
            .unwrap_or_else(|| crate::clock::now() + IDLE_TIMEOUT);
        tokio::select! {
            _ = &mut http => return,
            _ = slot.evict.notified() => return,
            _ = stop.wait_for(|s| *s) => break,
            _ = tokio::time::sleep_until(check_at) => {
                if slot.idle_deadline().is_some_and(|d| d <= crate::clock::now()) {
                    return;
                }
            }
        }
    }
    http.as_mut().graceful_shutdown();
    let _ = http.await;
}

/// Mark the connection busy; `None` when the request is not a health check and the other requests
/// already hold every connection outside the health checks' share.
fn mark_busy(slot: &Arc<Slot>, pool: &Arc<Pool>, req: &Request<Body>) -> Option<Busy> {
    let other = Check::for_path(req.uri().path()).is_none();
    if other {
        let before = pool.busy_other.fetch_add(1, Ordering::SeqCst);
        if before >= MAX_CONNECTIONS - RESERVED_FOR_HEALTH {
            pool.busy_other.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
    }
    slot.busy.store(true, Ordering::SeqCst);
    Some(Busy {
        slot: slot.clone(),
        pool: pool.clone(),
        other,
    })
}

fn overloaded() -> Response<Body> {
    let mut r = Response::new(Body::from("too many requests in flight"));
    *r.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
    r
}
