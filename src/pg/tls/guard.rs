//! The agent's own SQL sockets (TCP or Unix), and a guard: no cleartext or MD5 password to an unverified server.
// tokio-postgres answers AuthenticationCleartextPassword and AuthenticationMD5Password on its own, and
// `channel_binding=require` (which would refuse both) needs TLS with SCRAM. So the guard reads what the
// server sends before tokio-postgres does: at the first such request it fails the read, and the password
// never leaves. It scans only up to AuthenticationOk; a verified connection (a Unix socket in a checked
// directory, TLS with verify-ca/verify-full) is not scanned at all.
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

/// A TCP or Unix socket to a PostgreSQL server.
pub enum RawSocket {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// The password request the guard refused, once it has (shared between the socket and TLS layers).
pub type Tripped = Arc<Mutex<Option<&'static str>>>;

/// Where in the server's byte stream the guard is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Not scanning: verified, encrypted below (the TLS layer scans), or past authentication.
    Off,
    /// The one-byte answer to SSLRequest: `S` (TLS follows), `N` (plain messages follow).
    SslReply,
    /// A message header: type byte and 4-byte length.
    Header { buf: [u8; 5], have: u8 },
    /// An authentication request's 4-byte code, then `rest` more bytes of its body.
    Code { buf: [u8; 4], have: u8, rest: u32 },
    /// The rest of a message body.
    Skip(u32),
    /// A request was refused: every further read fails.
    Refused(&'static str),
}

const HEADER: Scan = Scan::Header {
    buf: [0; 5],
    have: 0,
};

impl Scan {
    /// Start of the plain message stream.
    pub fn messages() -> Scan {
        HEADER
    }

    /// Scan `bytes`, the next ones the server sent; `Err` names the password method requested.
    fn feed(&mut self, bytes: &[u8]) -> Result<(), &'static str> {
        let mut i = 0;
        while i < bytes.len() {
            match self {
                Scan::Off => return Ok(()),
                Scan::Refused(method) => return Err(method),
                Scan::SslReply => {
                    // Anything but `S` is the plain stream (`N`, or an old server's error message).
                    *self = if bytes[i] == b'S' { Scan::Off } else { HEADER };
                    if bytes[i] == b'S' || bytes[i] == b'N' {
                        i += 1;
                    }
                }
                Scan::Header { buf, have } => {
                    buf[*have as usize] = bytes[i];
                    *have += 1;
                    i += 1;
                    if *have == 5 {
                        let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
                        let body = u32::try_from(len.saturating_sub(4)).unwrap_or(0);
                        *self = match (buf[0], body) {
                            (b'R', 4..) => Scan::Code {
                                buf: [0; 4],
                                have: 0,
                                rest: body - 4,
                            },
                            (_, 0) => HEADER,
                            (_, n) => Scan::Skip(n),
                        };
                    }
                }
                Scan::Code { buf, have, rest } => {
                    buf[*have as usize] = bytes[i];
                    *have += 1;
                    i += 1;
                    if *have == 4 {
                        *self = match (i32::from_be_bytes(*buf), *rest) {
                            (3, _) => Scan::Refused("cleartext"),
                            (5, _) => Scan::Refused("MD5"),
                            (0, _) => Scan::Off,
                            (_, 0) => HEADER,
                            (_, n) => Scan::Skip(n),
                        };
                        if let Scan::Refused(method) = self {
                            return Err(method);
                        }
                    }
                }
                Scan::Skip(n) => {
                    let take = (*n).min((bytes.len() - i) as u32);
                    i += take as usize;
                    *n -= take;
                    if *n == 0 {
                        *self = HEADER;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A stream whose reads pass the guard first.
pub struct Guarded<S> {
    inner: S,
    scan: Scan,
    tripped: Tripped,
}

impl<S> Guarded<S> {
    pub fn new(inner: S, scan: Scan, tripped: Tripped) -> Guarded<S> {
        Guarded {
            inner,
            scan,
            tripped,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        if let Scan::Refused(method) = me.scan {
            return Poll::Ready(Err(refused(method)));
        }
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        if let Err(method) = me.scan.feed(&buf.filled()[before..]) {
            // The request never reaches tokio-postgres, so it never answers it.
            buf.set_filled(before);
            if let Ok(mut t) = me.tripped.lock() {
                *t = Some(method);
            }
            return Poll::Ready(Err(refused(method)));
        }
        Poll::Ready(Ok(()))
    }
}

fn refused(method: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("the server asked for a {method} password and its identity is not verified"),
    )
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Guarded<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose stream is guarded from its first decrypted byte (`scan`).
pub struct GuardedConnect<C> {
    pub inner: C,
    pub scan: Scan,
    pub tripped: Tripped,
}

impl<S, C> TlsConnect<S> for GuardedConnect<C>
where
    C: TlsConnect<S>,
    C::Future: Send + 'static,
    C::Stream: Send + 'static,
{
    type Stream = Guarded<C::Stream>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, C::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let (scan, tripped) = (self.scan, self.tripped);
        let tls = self.inner.connect(stream);
        Box::pin(async move { Ok(Guarded::new(tls.await?, scan, tripped)) })
    }
}

impl AsyncRead for RawSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RawSocket::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            RawSocket::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for RawSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            RawSocket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            RawSocket::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RawSocket::Tcp(s) => Pin::new(s).poll_flush(cx),
            RawSocket::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RawSocket::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            RawSocket::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// Byte by byte and whole: a notice, then a request; only cleartext (3) and MD5 (5) are refused,
    /// and nothing after AuthenticationOk is looked at.
    #[test]
    fn the_scan_stops_at_cleartext_and_md5_requests_only() {
        let notice = msg(b'N', b"Sx\0\0");
        for (code, refused) in [(3, Some("cleartext")), (5, Some("MD5")), (10, None)] {
            let mut body = i32::to_be_bytes(code).to_vec();
            if code == 5 {
                body.extend_from_slice(b"salt");
            }
            let stream = [b"N".to_vec(), notice.clone(), msg(b'R', &body)].concat();
            let mut whole = Scan::SslReply;
            assert_eq!(whole.feed(&stream).err(), refused, "code {code}");
            let mut bytewise = Scan::SslReply;
            let got = stream.iter().find_map(|b| bytewise.feed(&[*b]).err());
            assert_eq!(got, refused, "code {code}, byte by byte");
        }
        let mut s = Scan::messages();
        s.feed(&msg(b'R', &0i32.to_be_bytes())).unwrap();
        assert_eq!(s, Scan::Off);
        s.feed(&msg(b'R', &3i32.to_be_bytes())).unwrap();
        let mut tls = Scan::SslReply;
        tls.feed(b"S").unwrap();
        assert_eq!(tls, Scan::Off);
    }
}
