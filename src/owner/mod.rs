//! What the data owner sets up for untrusted analysts: the configuration file ([`config`]), the
//! tables it names ([`tables`]), and locked sessions built from both ([`Owner`]), which
//! `dpsql --config` and `dp-server` hand to analysts.
//!
//! Tables are opened once ([`Owner::open`]: file listing, with the schemas the owner declared,
//! never inferred from a protected table's rows) and shared by every session; each session gets the owner's protection declarations, options, the
//! analyst's budget and ledger, and is locked before the analyst's first statement.

/// Analysts' logins, shared by `dp-server` and a locked cluster's client port.
#[cfg(any(feature = "server", feature = "ballista"))]
pub mod auth;
pub mod config;
#[cfg(any(feature = "server", feature = "ballista"))]
pub mod connections;
mod lockdown;
pub mod parsed;
pub mod tables;

pub use config::{AnalystConfig, Credential, LimitsConfig, OwnerConfig, ServerConfig, TableConfig};
pub use lockdown::SessionBudget;

use crate::sql::privacy::session::limits::QueryDeadline;
use crate::sql::privacy::session::release_time::{ReleaseSchedule, ReleaseTiming};
use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use std::sync::Arc;

/// The owner's tables, opened, and the configuration that locks sessions over them.
#[derive(Debug)]
pub struct Owner {
    config: OwnerConfig,
    runtime: Arc<RuntimeEnv>,
    tables: Vec<(TableConfig, Arc<dyn TableProvider>)>,
    /// Each analyst's release schedule (`[limits] release_quantum_ms`), by ledger: shared by
    /// all of the analyst's sessions, so a new session does not start at level 0 again.
    schedules: std::sync::Mutex<std::collections::HashMap<String, Arc<ReleaseSchedule>>>,
}

/// The configuration of every session: DataFusion's defaults with `information_schema`, as
/// `dpsql` has.
fn session_config() -> SessionConfig {
    SessionConfig::new().with_information_schema(true)
}

impl Owner {
    /// Opens every table of `config` (listing files once, with the declared schemas:
    /// [`tables::open_table`]) for `dpsql --config` and `dp-server`: a small CSV or NDJSON
    /// table is parsed once per version of its files ([`parsed::ParsedFiles`]). An error
    /// names the table and its location.
    pub async fn open(config: OwnerConfig) -> Result<Self> {
        Self::open_reading(config, tables::Reading::ParsedOnce).await
    }

    /// [`Owner::open`] for a locked cluster: every query scans the files (its executors read
    /// them; a copy in the scheduler would be shipped in every plan).
    pub async fn open_files(config: OwnerConfig) -> Result<Self> {
        Self::open_reading(config, tables::Reading::Files).await
    }

    async fn open_reading(config: OwnerConfig, reading: tables::Reading) -> Result<Self> {
        let runtime = tables::limited_runtime(&config.limits)?;
        let loader = tables::session_with_runtime(session_config(), Arc::clone(&runtime))?;
        let mut opened = Vec::with_capacity(config.tables.len());
        for table in &config.tables {
            let provider = tables::open_table(&loader, table, reading)
                .await
                .map_err(|source| {
                    DataFusionError::External(Box::new(crate::sql::errors::TableError {
                        table: table.name.clone(),
                        location: table.location.clone(),
                        source,
                    }))
                })?;
            opened.push((table.clone(), provider));
        }
        Ok(Self {
            config,
            runtime,
            tables: opened,
            schedules: Default::default(),
        })
    }

    pub fn config(&self) -> &OwnerConfig {
        &self.config
    }

    /// A locked session for `analyst`: the owner's tables with their protection, the owner's
    /// options, the analyst's budget and ledger.
    pub fn analyst_session(&self, analyst: &AnalystConfig) -> Result<SessionContext> {
        self.locked_session(&analyst.budget())
    }

    /// A locked session spending `budget`.
    pub fn locked_session(&self, budget: &SessionBudget) -> Result<SessionContext> {
        let ctx = tables::session_with_runtime(session_config(), Arc::clone(&self.runtime))?;
        self.lock_into(&ctx, budget)?;
        Ok(ctx)
    }

    /// The release schedule of the analyst spending `ledger`, made at its first session;
    /// `None` when `[limits] release_quantum_ms` is 0.
    pub(crate) fn release_schedule(&self, ledger: &str) -> Option<Arc<ReleaseSchedule>> {
        let limits = &self.config.limits;
        let mut schedules = self.schedules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(schedule) = schedules.get(ledger) {
            return Some(Arc::clone(schedule));
        }
        let schedule = Arc::new(ReleaseSchedule::new(
            std::time::Duration::from_millis(limits.release_quantum_ms),
            std::time::Duration::from_secs(limits.query_timeout_seconds),
        )?);
        schedules.insert(ledger.to_string(), Arc::clone(&schedule));
        Some(schedule)
    }

    /// Registers the owner's tables in `ctx` (a session with the DP functions, e.g. a locked
    /// Ballista scheduler's per-job session), declares their protection, applies the owner's
    /// options and `budget`, and locks it.
    pub fn lock_into(&self, ctx: &SessionContext, budget: &SessionBudget) -> Result<()> {
        for (table, provider) in &self.tables {
            ctx.register_table(
                TableReference::bare(table.name.as_str()),
                Arc::clone(provider),
            )?;
        }
        // The owner's per-query deadline and the analyst's release schedule, in every locked
        // session that spends her ledger (`dpsql --config`, `dp-server` in process or onto a
        // cluster, a locked cluster's jobs, the Python binding).
        {
            let state = ctx.state_ref();
            let mut state = state.write();
            let config = state.config_mut();
            config.set_extension(Arc::new(QueryDeadline(std::time::Duration::from_secs(
                self.config.limits.query_timeout_seconds,
            ))));
            if let Some(schedule) = self.release_schedule(&budget.ledger) {
                config.set_extension(Arc::new(ReleaseTiming(schedule)));
            }
        }
        let protections: Vec<_> = self
            .tables
            .iter()
            .map(|(t, _)| (t.name.clone(), t.protection.clone()))
            .collect();
        lockdown::lock_session(ctx, &protections, &self.config.options, budget)
    }
}

impl AnalystConfig {
    /// The budget and ledger this analyst's sessions spend.
    pub fn budget(&self) -> SessionBudget {
        SessionBudget {
            budget: self.budget,
            ledger: self.ledger.to_string_lossy().into_owned(),
        }
    }
}

/// Runs one statement of an untrusted analyst in a locked session: [`crate::analyst_sql`]
/// (DDL, DML and `COPY` refused; `SET` only for accuracy options; only DP leaves a protected
/// table).
pub async fn analyst_sql(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    crate::analyst_sql(ctx, sql).await
}
