//! `dp-server`: an Arrow Flight SQL server for untrusted analysts (feature `server`).
//!
//! The owner's configuration ([`crate::owner::OwnerConfig`]) names the tables, their
//! protection and the analysts; an analyst logs in with a Flight handshake (user name and
//! password, `Basic`), receives a bearer token, and every call on that token runs in the
//! analyst's own locked session, spending the analyst's budget through the analyst's ledger
//! (shared by all the analyst's sessions: concurrent queries cannot overspend, and the spending
//! survives restarts). Any Flight SQL client works: ADBC (Python, R, Go, C), JDBC, `arrow-flight`.
//!
//! What one analyst, or anyone reaching the port, may take from the server is bounded by the
//! owner's `[server]` and `[limits]` options (docs/server-limits.md): connections (caps, a
//! login window for strangers' connections, an idle time for analysts', `crate::owner::connections`),
//! password checks and back-off after failed logins (`crate::owner::auth`), token lifetime,
//! sessions, prepared statements and queries at once (`session.rs`), message and parameter
//! sizes (`service.rs`), threads per analyst (`executors.rs`) and memory per analyst and per
//! query (`memory.rs`).

mod executors;
mod memory;
mod service;
mod session;
mod tls;

use crate::owner::{auth, connections};
pub use auth::hash_password;
pub use service::{status, DpFlightSqlService};

use crate::owner::{AnalystConfig, Owner};
use arrow_flight::flight_service_server::FlightServiceServer;
use datafusion::prelude::SessionContext;
use session::Sessions;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::Server;

/// Where the analysts' queries run.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Execution {
    /// In the server's process.
    #[default]
    Local,
    /// On the trusted Ballista cluster whose scheduler is at this URL (`df://host:port`): each
    /// analyst's locked session is a client of it, so the server binds and charges every query
    /// (as `dpsql --scheduler` does on a trusted cluster) and the executors run it. The cluster
    /// must be reachable by the server only (docs/distributed.md).
    #[cfg(feature = "ballista")]
    Cluster(String),
}

impl Execution {
    /// The owner's tables of `config`, opened for this execution: a small text table kept
    /// parsed in the server's process ([`Owner::open`]), or read from the files by every query
    /// on a cluster, whose executors read them ([`Owner::open_files`]).
    pub async fn open(
        &self,
        config: crate::owner::OwnerConfig,
    ) -> datafusion::error::Result<Owner> {
        match self {
            Self::Local => Owner::open(config).await,
            #[cfg(feature = "ballista")]
            Self::Cluster(_) => Owner::open_files(config).await,
        }
    }

    /// The locked session `analyst` spends in: the owner's tables, protection, options, and the
    /// analyst's budget and ledger, planned here or onto the cluster.
    pub async fn analyst_session(
        &self,
        owner: &Owner,
        analyst: &AnalystConfig,
    ) -> datafusion::error::Result<SessionContext> {
        match self {
            Execution::Local => owner.analyst_session(analyst),
            #[cfg(feature = "ballista")]
            Execution::Cluster(url) => {
                let ctx = crate::distributed::trusted_remote_context(url).await?;
                owner.lock_into(&ctx, &analyst.budget())?;
                Ok(ctx)
            }
        }
    }
}

/// Serves `owner`'s tables on `listener` until `shutdown` completes, running queries as
/// `execution` says: TLS when the configuration names a certificate and key, plain gRPC
/// otherwise.
pub async fn serve(
    owner: Owner,
    execution: Execution,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), String> {
    let server_config = owner.config().server.clone();
    let sessions = Arc::new(Sessions::new(&server_config));
    let executors = Arc::new(executors::Executors::new(
        server_config.threads_per_analyst,
        server_config.max_query_threads,
        owner.config().limits.query_memory_limit,
        owner.config().limits.analyst_memory_limit,
    ));
    // Ended sessions and unfetched results are dropped every few seconds, not only when
    // someone logs in, so a client that went away frees its memory and query slots; so are
    // the query runtimes of analysts who stopped querying.
    let sweeper = {
        let (sessions, executors) = (Arc::clone(&sessions), Arc::clone(&executors));
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SWEEP_EVERY);
            loop {
                every.tick().await;
                sessions.sweep();
                executors.sweep();
            }
        })
    };
    let service = DpFlightSqlService::new(Arc::new(owner), execution, sessions, executors);
    let flight = FlightServiceServer::new(service)
        .max_decoding_message_size(server_config.max_message_bytes);
    // HTTP/2 pings find peers that went away without closing, so their connections stop
    // counting against max_connections; streams per connection are bounded explicitly.
    let router = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(60)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .add_service(flight);
    let gate = connections::ConnectionGate::new(connections::ConnectionLimits::of(&server_config));
    let served = match (&server_config.tls_cert, &server_config.tls_key) {
        (Some(cert), Some(key)) => {
            let acceptor = tls::acceptor(cert, key).inspect_err(|_| sweeper.abort())?;
            let incoming = connections::incoming(listener, gate, move |tcp| {
                tls::handshake(acceptor.clone(), tcp)
            });
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        _ => {
            let incoming =
                connections::incoming(listener, gate, |tcp| std::future::ready(Some(tcp)));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    }
    .map_err(|e| format!("server: {e}"));
    sweeper.abort();
    served
}

/// HTTP/2 streams (calls) open at once on one connection.
const MAX_STREAMS_PER_CONNECTION: u32 = 100;

/// How often ended sessions and stale unfetched results are dropped.
const SWEEP_EVERY: Duration = Duration::from_secs(5);
