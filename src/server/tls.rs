//! TLS for the server with rustls (ring provider): the owner's PEM certificate chain and key,
//! ALPN `h2` (gRPC clients such as grpc-go require it), connections handshaken as they arrive
//! and handed to tonic as an incoming stream (connections.rs). The TLS stream runs over the
//! [`Guarded`] socket, so the connection gate's login window and caps close it during the
//! handshake as after it.

use crate::owner::connections::{ConnectionInfo, Guarded};
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// An acceptor for the certificate chain at `cert` and the private key at `key` (PEM).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("tls_cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "tls_cert {}: no certificate in the file",
            cert.display()
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("tls_key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|e| format!("tls_cert/tls_key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// One TLS connection, as tonic's server takes it.
pub struct TlsConnection(tokio_rustls::server::TlsStream<Guarded>);

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.info()
    }
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
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

/// The TLS connection of `tcp` once its handshake is done (within 10 s, and within the
/// connection's login window), or `None`.
pub async fn handshake(acceptor: TlsAcceptor, tcp: Guarded) -> Option<TlsConnection> {
    let handshake =
        tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp)).await;
    match handshake {
        Ok(Ok(stream)) => Some(TlsConnection(stream)),
        _ => None,
    }
}
