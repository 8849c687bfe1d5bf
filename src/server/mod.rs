//! `dp-server`: an Arrow Flight SQL server for untrusted analysts (feature `server`).
//!
//! The owner's configuration ([`crate::owner::OwnerConfig`]) names the tables, their
//! protection and the analysts; an analyst logs in with a Flight handshake (user name and
//! password, `Basic`), receives a bearer token, and every call on that token runs in the
//! analyst's own locked session, spending the analyst's budget through the analyst's ledger
//! (shared by all the analyst's sessions: concurrent queries cannot overspend, and the spending
//! survives restarts). Any Flight SQL client works: ADBC (Python, R, Go, C), JDBC, `arrow-flight`.

mod auth;
mod service;
mod session;
mod tls;

pub use auth::hash_password;
pub use service::{status, DpFlightSqlService};

use crate::owner::Owner;
use arrow_flight::flight_service_server::FlightServiceServer;
use session::Sessions;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

/// Serves `owner`'s tables on `listener` until `shutdown` completes: TLS when the
/// configuration names a certificate and key, plain gRPC otherwise.
pub async fn serve(
    owner: Owner,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), String> {
    let server_config = owner.config().server.clone();
    let idle = Duration::from_secs(server_config.session_idle_seconds.max(1));
    let service = DpFlightSqlService::new(Arc::new(owner), Arc::new(Sessions::new(idle)));
    let router = Server::builder().add_service(FlightServiceServer::new(service));
    match (&server_config.tls_cert, &server_config.tls_key) {
        (Some(cert), Some(key)) => {
            let acceptor = tls::acceptor(cert, key)?;
            router
                .serve_with_incoming_shutdown(tls::incoming(listener, acceptor), shutdown)
                .await
        }
        _ => {
            router
                .serve_with_incoming_shutdown(
                    TcpIncoming::from(listener).with_nodelay(Some(true)),
                    shutdown,
                )
                .await
        }
    }
    .map_err(|e| format!("server: {e}"))
}
