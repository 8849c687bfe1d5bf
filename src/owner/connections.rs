//! Connections as they arrive, and how long they may stay (docs/server-limits.md,
//! "Connections").
//!
//! - At most `[server] max_connections` open at once, and at most
//!   `max_connections_per_address` from one peer IP address. A connection over the address
//!   cap, or over the total when every open connection is an analyst's, is closed as soon as it
//!   is accepted (before any TLS handshake), so a stranger opening connections without end
//!   holds a bounded number of the process's file descriptors.
//! - A connection is a *stranger's* until a login (Flight handshake) succeeds on it or a call
//!   on it carries a valid token; then it is an *analyst's*. Strangers' connections are at most
//!   `max_unauthenticated_connections` (half of `max_connections` by default), so the rest is
//!   kept for analysts. When a new connection finds the strangers' share (or the total) full,
//!   the oldest stranger's connection of the address holding the most is closed to make room,
//!   rather than the newcomer refused: idle connections, even from many addresses, cannot keep
//!   an honest analyst from connecting and logging in.
//! - A stranger's connection is closed `login_window_seconds` after it was accepted, whatever
//!   it sent (nothing, a TLS handshake, the HTTP/2 preface): the window bounds the TLS
//!   handshake, the preface and the login together, on plain TCP and TLS alike.
//! - An analyst's connection on which no call started for `connection_idle_seconds` is closed
//!   (HTTP/2 keep-alive pings do not count: they only prove the peer is there).
//!
//! A connection is closed from outside tonic through its [`Guarded`] stream: the gate marks it
//! closed and wakes the task serving it, whose next read ends (EOF) and next write fails; the
//! socket is dropped at that moment, so its file descriptor is released at once, and the
//! gate stops counting it as soon as it is marked.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// How often stale connections (past the login window, or idle) are looked for: the windows
/// are kept to within this much.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// The limits a [`ConnectionGate`] enforces (the `[server]` options of the same names).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    pub max_unauthenticated_connections: usize,
    pub login_window: Duration,
    pub connection_idle: Duration,
}

impl ConnectionLimits {
    /// The limits of the owner's `[server]` section: `dp-server`'s port and a locked
    /// cluster's client port.
    pub fn of(server: &crate::owner::ServerConfig) -> Self {
        Self {
            max_connections: server.max_connections,
            max_connections_per_address: server.max_connections_per_address,
            max_unauthenticated_connections: server.max_unauthenticated_connections,
            login_window: Duration::from_secs(server.login_window_seconds),
            connection_idle: Duration::from_secs(server.connection_idle_seconds),
        }
    }
}

/// The open connections: counted in total and per peer address, strangers' and analysts'
/// apart, so that strangers' can be capped, replaced oldest first and timed out.
pub struct ConnectionGate {
    limits: ConnectionLimits,
    /// The origin of [`Connection::last_call`]'s milliseconds.
    started: Instant,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Counted connections from each peer address (strangers' and analysts').
    per_address: HashMap<IpAddr, usize>,
    /// Strangers' connections, by id: oldest first, as ids grow with each accept.
    strangers: BTreeMap<u64, Arc<Connection>>,
    strangers_per_address: HashMap<IpAddr, usize>,
    /// Analysts' connections, by id.
    analysts: HashMap<u64, Arc<Connection>>,
}

impl State {
    fn total(&self) -> usize {
        self.strangers.len() + self.analysts.len()
    }

    /// Stops counting connection `id` (closed, or being closed); whether it was counted.
    fn remove(&mut self, id: u64) -> Option<Arc<Connection>> {
        let connection = match self.strangers.remove(&id) {
            Some(connection) => {
                decrement(&mut self.strangers_per_address, connection.peer);
                connection
            }
            None => self.analysts.remove(&id)?,
        };
        decrement(&mut self.per_address, connection.peer);
        Some(connection)
    }

    /// The stranger's connection to close for a newcomer: the oldest of the address holding
    /// the most strangers' connections (so a flood from a few addresses replaces its own
    /// connections, not a lone analyst's still logging in).
    fn stranger_to_replace(&self) -> Option<u64> {
        let most = *self.strangers_per_address.values().max()?;
        self.strangers
            .values()
            .find(|c| self.strangers_per_address.get(&c.peer) == Some(&most))
            .map(|c| c.id)
    }
}

fn decrement(counts: &mut HashMap<IpAddr, usize>, peer: IpAddr) {
    if let Some(count) = counts.get_mut(&peer) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(&peer);
        }
    }
}

/// One accepted connection as the gate and its [`Guarded`] stream share it.
pub struct Connection {
    id: u64,
    peer: IpAddr,
    accepted: Instant,
    /// A login or a call with a valid token succeeded on it.
    authenticated: AtomicBool,
    /// When its last call started, in milliseconds since the gate's start.
    last_call: AtomicU64,
    /// Set once, by the gate: the stream ends at its next read or write.
    closed: AtomicBool,
    /// The task serving the stream, woken when it is closed.
    waker: AtomicWaker,
}

impl Connection {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }
}

impl ConnectionGate {
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        let max_connections = limits.max_connections.max(1);
        Arc::new(Self {
            limits: ConnectionLimits {
                max_connections,
                max_connections_per_address: limits.max_connections_per_address.max(1),
                max_unauthenticated_connections: limits
                    .max_unauthenticated_connections
                    .clamp(1, max_connections),
                ..limits
            },
            started: Instant::now(),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection from `peer` as a stranger's, closing another stranger's to
    /// make room if the strangers' share or the total is full; `None` (the newcomer is closed)
    /// when its address is at its cap, or when every connection is an analyst's.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Arc<Connection>> {
        let mut state = self.state();
        if state.per_address.get(&peer).copied().unwrap_or(0)
            >= self.limits.max_connections_per_address
        {
            return None;
        }
        while state.total() >= self.limits.max_connections
            || state.strangers.len() >= self.limits.max_unauthenticated_connections
        {
            let replaced = state.stranger_to_replace()?;
            if let Some(connection) = state.remove(replaced) {
                connection.close();
            }
        }
        let id = state.next_id;
        state.next_id += 1;
        let connection = Arc::new(Connection {
            id,
            peer,
            accepted: Instant::now(),
            authenticated: AtomicBool::new(false),
            last_call: AtomicU64::new(self.now_millis()),
            closed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        *state.per_address.entry(peer).or_insert(0) += 1;
        *state.strangers_per_address.entry(peer).or_insert(0) += 1;
        state.strangers.insert(id, Arc::clone(&connection));
        Some(connection)
    }

    fn now_millis(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A login or a call with a valid token succeeded on `connection`: from now on it is an
    /// analyst's (out of the strangers' share and window), and its idle time starts again.
    fn authenticated(&self, connection: &Arc<Connection>) {
        connection
            .last_call
            .store(self.now_millis(), Ordering::Relaxed);
        if connection.authenticated.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.state();
        // Not among the strangers: already closed (or being closed), nothing to move.
        if let Some(connection) = state.strangers.remove(&connection.id) {
            decrement(&mut state.strangers_per_address, connection.peer);
            connection.authenticated.store(true, Ordering::Release);
            state.analysts.insert(connection.id, connection);
        }
    }

    /// Closes the strangers' connections past the login window and the analysts' idle past
    /// `connection_idle`.
    fn sweep(&self) {
        let now = Instant::now();
        let now_millis = self.now_millis();
        let idle_millis = self.limits.connection_idle.as_millis() as u64;
        let mut state = self.state();
        let late: Vec<u64> = state
            .strangers
            .values()
            .take_while(|c| now.duration_since(c.accepted) >= self.limits.login_window)
            .map(|c| c.id)
            .collect();
        let idle: Vec<u64> = state
            .analysts
            .values()
            .filter(|c| {
                now_millis.saturating_sub(c.last_call.load(Ordering::Relaxed)) >= idle_millis
            })
            .map(|c| c.id)
            .collect();
        for id in late.into_iter().chain(idle) {
            if let Some(connection) = state.remove(id) {
                connection.close();
            }
        }
    }
}

/// What a call sees of its connection (tonic puts it in every request's extensions): the
/// peer's address, and the means to mark the connection an analyst's.
#[derive(Clone)]
pub struct ConnectionInfo {
    pub peer: Option<SocketAddr>,
    gate: Arc<ConnectionGate>,
    connection: Arc<Connection>,
}

impl ConnectionInfo {
    /// A login or a call with a valid token succeeded on this connection (see
    /// [`ConnectionGate`]'s rules: it leaves the strangers' share and login window, and its
    /// idle time starts again).
    pub fn authenticated(&self) {
        self.gate.authenticated(&self.connection);
    }
}

/// An accepted TCP connection that holds its place in the [`ConnectionGate`] while it is
/// open, and ends when the gate closes it (its socket dropped then).
pub struct Guarded {
    inner: Option<TcpStream>,
    peer: Option<SocketAddr>,
    gate: Arc<ConnectionGate>,
    connection: Arc<Connection>,
}

impl Guarded {
    /// The socket, unless the gate closed the connection (then dropped, releasing its file
    /// descriptor); registers the serving task to be woken when it is closed.
    fn open(&mut self, cx: &Context<'_>) -> Option<&mut TcpStream> {
        self.connection.waker.register(cx.waker());
        if self.connection.closed.load(Ordering::Acquire) {
            self.inner = None;
        }
        self.inner.as_mut()
    }

    /// The information tonic hands to each call on this connection.
    pub fn info(&self) -> ConnectionInfo {
        ConnectionInfo {
            peer: self.peer,
            gate: Arc::clone(&self.gate),
            connection: Arc::clone(&self.connection),
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.gate.state().remove(self.connection.id);
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.info()
    }
}

fn closed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "connection closed by the server (login window, idle time or connection caps)",
    )
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.open(cx) {
            Some(tcp) => Pin::new(tcp).poll_read(cx, buf),
            // End of stream: the reader stops and drops the connection.
            None => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.open(cx) {
            Some(tcp) => Pin::new(tcp).poll_write(cx, buf),
            None => Poll::Ready(Err(closed_error())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.open(cx) {
            Some(tcp) => Pin::new(tcp).poll_flush(cx),
            None => Poll::Ready(Err(closed_error())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.open(cx) {
            Some(tcp) => Pin::new(tcp).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// The connections arriving on `listener` within `gate`'s limits, each made ready by `open`
/// (e.g. a TLS handshake over the [`Guarded`] socket, in its own task so a slow client delays
/// no one; `None` drops the connection). The same task closes stale connections every
/// [`SWEEP_EVERY`]. An accept error (such as no file descriptor left) waits a little instead of
/// spinning.
pub fn incoming<S, F, Fut>(
    listener: TcpListener,
    gate: Arc<ConnectionGate>,
    open: F,
) -> impl futures::Stream<Item = io::Result<S>>
where
    S: Send + 'static,
    F: Fn(Guarded) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<S>> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel::<io::Result<S>>(64);
    tokio::spawn(async move {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = sweep.tick() => {
                    gate.sweep();
                    continue;
                }
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Over a cap: closed at once (dropped).
            let Some(connection) = gate.admit(peer.ip()) else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let guarded = Guarded {
                inner: Some(tcp),
                peer: Some(peer),
                gate: Arc::clone(&gate),
                connection,
            };
            let ready = open(guarded);
            let sender = sender.clone();
            tokio::spawn(async move {
                if let Some(stream) = ready.await {
                    let _ = sender.send(Ok(stream)).await;
                }
            });
        }
    });
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_gate(total: usize, per_address: usize, strangers: usize) -> Arc<ConnectionGate> {
        ConnectionGate::new(ConnectionLimits {
            max_connections: total,
            max_connections_per_address: per_address,
            max_unauthenticated_connections: strangers,
            login_window: Duration::from_secs(3600),
            connection_idle: Duration::from_secs(3600),
        })
    }

    fn closed(connection: &Connection) -> bool {
        connection.closed.load(Ordering::Acquire)
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    /// Strangers beyond their share replace the oldest connection of the address holding the
    /// most; an analyst's connection is never replaced, and the address cap refuses.
    #[test]
    fn strangers_replace_the_busiest_address_s_oldest() {
        let gate = new_gate(4, 3, 3);
        let a1 = gate.admit(ip(2)).unwrap();
        let a2 = gate.admit(ip(2)).unwrap();
        let b1 = gate.admit(ip(3)).unwrap();
        // The strangers' share (3) is full: 127.0.0.2 holds the most, its oldest goes.
        let c1 = gate.admit(ip(4)).unwrap();
        assert!(a1.closed.load(Ordering::Acquire));
        assert!(!a2.closed.load(Ordering::Acquire) && !b1.closed.load(Ordering::Acquire));
        // An analyst's connection leaves the strangers' share, and is not replaced.
        gate.authenticated(&c1);
        let d1 = gate.admit(ip(5)).unwrap();
        assert!(!closed(&a2) && !closed(&b1));
        // The total (4) is full; the strangers are at one each: the oldest (a2) goes.
        let e1 = gate.admit(ip(6)).unwrap();
        assert!(closed(&a2) && !closed(&c1));
        assert!(!closed(&b1) && !closed(&d1) && !closed(&e1));
        assert_eq!(gate.state().total(), 4);
        // The address cap refuses the newcomer, whatever the other caps.
        let capped = new_gate(10, 2, 10);
        let _held = [capped.admit(ip(2)).unwrap(), capped.admit(ip(2)).unwrap()];
        assert!(capped.admit(ip(2)).is_none());
        assert!(capped.admit(ip(3)).is_some());
        // Every connection an analyst's: the total refuses.
        let full = new_gate(1, 1, 1);
        let only = full.admit(ip(2)).unwrap();
        full.authenticated(&only);
        assert!(full.admit(ip(3)).is_none());
    }

    /// The sweep closes strangers' connections past the login window and analysts' idle
    /// past `connection_idle`, and stops counting them.
    #[test]
    fn the_sweep_closes_late_strangers_and_idle_analysts() {
        let window = ConnectionGate::new(ConnectionLimits {
            login_window: Duration::ZERO,
            ..new_gate(8, 8, 8).limits.clone()
        });
        let (stranger, analyst) = (window.admit(ip(2)).unwrap(), window.admit(ip(3)).unwrap());
        window.authenticated(&analyst);
        window.sweep();
        assert!(closed(&stranger) && !closed(&analyst));
        assert_eq!(window.state().total(), 1);
        let idle = ConnectionGate::new(ConnectionLimits {
            connection_idle: Duration::ZERO,
            ..new_gate(8, 8, 8).limits.clone()
        });
        let (stranger, analyst) = (idle.admit(ip(2)).unwrap(), idle.admit(ip(3)).unwrap());
        idle.authenticated(&analyst);
        idle.sweep();
        assert!(!closed(&stranger) && closed(&analyst));
        assert_eq!(idle.state().total(), 1);
    }
}
