//! The TLS connector tokio-postgres takes, over rustls, with SCRAM channel binding.
//!
//! Our own `MakeTlsConnect`, some 80 lines, rather than `tokio-postgres-rustls`: one crate less, and the `verify-ca`
//! and `require` verifiers are ours anyway (`verify.rs`).
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::rustls;

/// The tokio-postgres connector over rustls.
#[derive(Clone)]
pub struct MakeRustls(Arc<rustls::ClientConfig>);

impl MakeRustls {
    pub fn new(config: rustls::ClientConfig) -> MakeRustls {
        MakeRustls(Arc::new(config))
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        let name = rustls::pki_types::ServerName::try_from(domain.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(RustlsConnect(self.0.clone(), name))
    }
}

pub struct RustlsConnect(
    Arc<rustls::ClientConfig>,
    rustls::pki_types::ServerName<'static>,
);

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let s = tokio_rustls::TlsConnector::from(self.0)
                .connect(self.1, stream)
                .await?;
            Ok(RustlsStream(s))
        })
    }
}

pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    /// `tls-server-end-point` (RFC 5929): the server certificate hashed with its signature's hash
    /// (SHA-256 for MD5 and SHA-1), for SCRAM channel binding.
    fn channel_binding(&self) -> ChannelBinding {
        let (_, conn) = self.0.get_ref();
        match conn.peer_certificates().and_then(|c| c.first()) {
            Some(cert) => ChannelBinding::tls_server_end_point(super::verify::end_point_hash(cert)),
            None => ChannelBinding::none(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
