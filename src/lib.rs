//! Differentially private ratio statistics for Apache DataFusion.
//!
//! ```no_run
//! # async fn demo() -> datafusion::error::Result<()> {
//! use datafusion::prelude::*;
//! let ctx = SessionContext::new();
//! datafusion_dp::register(&ctx)?;
//! ctx.sql("SELECT dp_rr_ci(outcome, exposed, 1.0) FROM visits").await?;
//! # Ok(()) }
//! ```
//!
//! Layers: [`stats`] is the pure statistics core (mechanisms, exact samplers, estimators,
//! intervals); [`sql`] adapts it to DataFusion (functions, privacy rewrites, accounting);
//! `distributed` (feature `ballista`) installs them on an Apache Ballista cluster. On top:
//! `cli` (the `dpsql` client), `owner` (the data owner's configuration and the locked sessions
//! built from it) and `server` (feature `server`: `dp-server`, Arrow Flight SQL for analysts).

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "ballista")]
pub mod distributed;
#[cfg(feature = "cli")]
pub mod owner;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "slt")]
pub mod slt;
pub mod sql;
pub mod stats;

pub use sql::options::DpOptions;
pub use sql::privacy::plan::protection::Protection;
pub use sql::privacy::session::lock::{analyst_sql, is_locked, lock, protect};
pub use sql::register;
