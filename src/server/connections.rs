//! Connections as they arrive: at most `[server] max_connections` open at once, and at most
//! `max_connections_per_address` from one peer IP address. A connection over either is closed
//! as soon as it is accepted (before any TLS handshake), so a stranger opening connections
//! without end holds a bounded number of the process's file descriptors and cannot stop the
//! server from accepting the others' connections.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The open connections, in total and per peer address.
pub struct ConnectionGate {
    max_total: usize,
    max_per_address: usize,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

impl ConnectionGate {
    pub fn new(max_total: usize, max_per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// Counts a new connection from `peer`, or `None` when it would pass a limit.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, per_address) = &mut *open;
        let from_peer = per_address.entry(peer).or_insert(0);
        if *total >= self.max_total || *from_peer >= self.max_per_address {
            if *from_peer == 0 {
                per_address.remove(&peer);
            }
            return None;
        }
        *from_peer += 1;
        *total += 1;
        Some(Admitted {
            gate: Arc::clone(self),
            peer,
        })
    }
}

/// One counted connection: uncounted when dropped (the connection closed).
pub struct Admitted {
    gate: Arc<ConnectionGate>,
    peer: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, per_address) = &mut *open;
        *total = total.saturating_sub(1);
        if let Some(from_peer) = per_address.get_mut(&self.peer) {
            *from_peer = from_peer.saturating_sub(1);
            if *from_peer == 0 {
                per_address.remove(&self.peer);
            }
        }
    }
}

/// A connection that holds its place in the [`ConnectionGate`] while it is open.
pub struct Guarded<S> {
    inner: S,
    _admitted: Admitted,
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Guarded<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The connections arriving on `listener` within `gate`'s limits, each made ready by `open`
/// (e.g. a TLS handshake, in its own task so a slow client delays no one; `None` drops the
/// connection). An accept error (such as no file descriptor left) waits a little instead of
/// spinning.
pub fn incoming<S, F, Fut>(
    listener: TcpListener,
    gate: Arc<ConnectionGate>,
    open: F,
) -> impl futures::Stream<Item = io::Result<Guarded<S>>>
where
    S: Send + 'static,
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<S>> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel::<io::Result<Guarded<S>>>(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Over a limit: closed at once (dropped).
            let Some(admitted) = gate.admit(peer.ip()) else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let ready = open(tcp);
            let sender = sender.clone();
            tokio::spawn(async move {
                if let Some(inner) = ready.await {
                    let _ = sender
                        .send(Ok(Guarded {
                            inner,
                            _admitted: admitted,
                        }))
                        .await;
                }
            });
        }
    });
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    })
}
