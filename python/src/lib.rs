//! `datafusion_dp._internal`: the native half of the `datafusion_dp` Python package.
//!
//! One class, [`Session`]: a DataFusion session with the DP functions installed
//! ([`datafusion_dp::register`]), the data owner's calls on it (register tables, [`protect`],
//! lock) and [`Session::sql`], which returns the result as Arrow through the PyCapsule
//! interface (zero-copy) with the privacy cost the query was charged.
//!
//! The privacy layer is the Rust one: nothing here re-implements a rule. Before the lock the
//! session is the owner's (trusted: any SQL, tables, declarations); [`Session::lock`] hands
//! it to an untrusted analyst, irreversibly: from then on every statement goes through
//! [`datafusion_dp::analyst_sql`], and tables, declarations and the owner's options are
//! refused. No DataFusion context is exposed to Python.
//!
//! Errors become `datafusion_dp.DpError` with the one-line message `dpsql` prints; a Rust
//! panic becomes a `DpError` too (never an abort, never a bare `PanicException`).
//!
//! [`protect`]: datafusion_dp::protect

use datafusion::arrow::datatypes::Field;
use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::execute_stream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_dp::owner::{tables, Owner, OwnerConfig, TableConfig};
use datafusion_dp::sql::accounting::budget::Cost;
use datafusion_dp::sql::accounting::measure::{Budget, BudgetMeasure};
use datafusion_dp::sql::options::DpOptions;
use datafusion_dp::Protection;
use futures::TryStreamExt;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3_arrow::PyTable;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};

create_exception!(
    datafusion_dp,
    DpError,
    PyException,
    "A refused or failed statement: the one-line message the data owner's tools print \
     (e.g. a query that releases protected rows, an exhausted privacy budget, a bad table)."
);

/// The tokio runtime every session's queries run on (one per process, created on first use;
/// DataFusion spreads a query's partitions over its worker threads).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        // Stacks sized for the limits on a plan, as every program that runs analysts' queries.
        datafusion_dp::sql::privacy::session::limits::execution_runtime()
            .thread_name("datafusion-dp")
            .build()
            .expect("a tokio runtime (threads from the OS)")
    })
}

/// `error` as a `DpError` with its one-line message.
fn dp_error(error: &DataFusionError) -> PyErr {
    DpError::new_err(datafusion_dp::cli::one_line_error(error))
}

/// A caught panic's message as a `DpError`: a bug, reported, never an abort across the FFI.
fn panic_error(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    DpError::new_err(format!(
        "internal error (a bug in datafusion-dp, please report it): {message}"
    ))
}

/// Runs the future `work` makes on the runtime with the GIL released (other Python threads
/// run meanwhile), mapping its error to `DpError` and a panic to `DpError` too. The future is
/// made and driven on this thread (`block_on`), so it need not be `Send` (opening a table's
/// is not); its tasks run on the runtime's workers.
fn run<T, F, Fut>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = Result<T>>,
    T: Send,
{
    let outcome = py.detach(|| {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            runtime().block_on(until_interrupted(work()))
        }))
    });
    match outcome {
        Ok(Ok(Ok(value))) => Ok(value),
        Ok(Ok(Err(error))) => Err(dp_error(&error)),
        Ok(Err(interrupt)) => Err(interrupt),
        Err(payload) => Err(panic_error(payload)),
    }
}

/// Drives `work`, checking every 100 ms for a signal Python must handle (Ctrl-C in a notebook
/// or a shell): then `work` is dropped, which stops the query (a charge already made stays),
/// and the signal's exception (`KeyboardInterrupt`) is returned. The tick comes from a plain
/// OS thread, not the runtime's timer: a query whose tasks hold every worker in long polls
/// stops the runtime's timer from firing, so the check must not depend on it.
async fn until_interrupted<T>(work: impl Future<Output = T>) -> std::result::Result<T, PyErr> {
    let ticker = Ticker::start(std::time::Duration::from_millis(100));
    let mut work = std::pin::pin!(work);
    loop {
        let tick = std::pin::pin!(ticker.tick.notified());
        match futures::future::select(work.as_mut(), tick).await {
            futures::future::Either::Left((value, _)) => return Ok(value),
            futures::future::Either::Right(((), _)) => {
                Python::attach(|py| py.check_signals())?;
            }
        }
    }
}

/// A thread that wakes `tick` every `period` until dropped (`notify_one` keeps one wake-up
/// for a waiter that is not listening yet, so none is lost).
struct Ticker {
    tick: std::sync::Arc<tokio::sync::Notify>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Ticker {
    fn start(period: std::time::Duration) -> Self {
        let tick = std::sync::Arc::new(tokio::sync::Notify::new());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (thread_tick, thread_stop) = (tick.clone(), stop.clone());
        std::thread::Builder::new()
            .name("datafusion-dp-signals".into())
            .spawn(move || {
                while !thread_stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(period);
                    thread_tick.notify_one();
                }
            })
            .expect("a thread from the OS");
        Self { tick, stop }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs `work` (no async) mapping a panic to `DpError`.
fn guarded<T>(work: impl FnOnce() -> Result<T>) -> PyResult<T> {
    match std::panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(dp_error(&error)),
        Err(payload) => Err(panic_error(payload)),
    }
}

fn refused(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Plan(message.into())
}

/// `"name TYPE"` declarations as Arrow fields (nullable), as the owner's configuration file
/// reads `columns = [...]` ([`datafusion_dp::owner::config::sql_type`]).
fn declared_fields(table: &str, what: &str, declarations: &[String]) -> Result<Vec<Field>> {
    let mut fields: Vec<Field> = Vec::with_capacity(declarations.len());
    for declaration in declarations {
        let (name, sql) = declaration
            .trim()
            .split_once(char::is_whitespace)
            .ok_or_else(|| {
                refused(format!(
                    "table '{table}': {what} entry '{declaration}' must be \"NAME TYPE\" \
                     (e.g. \"patient_id BIGINT\")"
                ))
            })?;
        let data_type = datafusion_dp::owner::config::sql_type(sql).map_err(|e| {
            refused(format!(
                "table '{table}': {what} entry '{declaration}': {e}"
            ))
        })?;
        if fields.iter().any(|f| f.name() == name) {
            return Err(refused(format!(
                "table '{table}': column '{name}' is declared twice"
            )));
        }
        fields.push(Field::new(name, data_type, true));
    }
    Ok(fields)
}

/// The privacy cost a query was charged: `(epsilon, delta, rho)`, `rho` the query's ρ when
/// the session's budget is counted in zCDP (`dp.budget_measure = 'zcdp'`), else `None`.
type Charge = (f64, f64, Option<f64>);

/// A query's result: the Arrow table (exported through the PyCapsule interface) and the
/// privacy cost the query was charged (`None` when it cannot be told, e.g. `EXPLAIN`).
type Answer = (PyTable, Option<Charge>);

/// A session of `datafusion_dp`: the owner's until [`Session::lock`], an analyst's after.
#[pyclass(module = "datafusion_dp._internal", frozen)]
struct Session {
    ctx: SessionContext,
    /// Tables whose schema was inferred from their rows (CSV or NDJSON registered without
    /// `columns`): refused at [`Session::lock`] unless declared public, as `dp-server`
    /// refuses them, because a protected table's inferred types show its rows.
    inferred: Mutex<Vec<String>>,
}

impl Session {
    fn locked(&self) -> bool {
        datafusion_dp::is_locked(&self.ctx)
    }

    /// Refuses the owner's calls once the session is locked.
    fn owner_call(&self, what: &str) -> Result<()> {
        match self.locked() {
            true => Err(refused(format!(
                "{what}: the session is locked; only the data owner, before locking, can \
                 change its tables and declarations"
            ))),
            false => Ok(()),
        }
    }

    /// Sets `dp.KEY` as the owner (before locking; no SQL involved, so a ledger path or any
    /// other value needs no quoting).
    fn set_option(&self, key: &str, value: &str) -> Result<()> {
        let key = key.trim();
        let key = key.strip_prefix("dp.").unwrap_or(key);
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state
            .config_mut()
            .options_mut()
            .set(&format!("dp.{key}"), value)
    }
}

/// Plans `sql` in `ctx` (through [`datafusion_dp::analyst_sql`] when `locked`), charges it,
/// runs it and collects the result, with the cost the planner rule charged: the analysed plan's
/// bound DP calls, read before the optimizer may drop an unused one.
async fn answer(ctx: SessionContext, sql: String, locked: bool) -> Result<Answer> {
    let limits_ctx = ctx.clone();
    let (physical, task, cost) =
        datafusion_dp::sql::privacy::session::limits::on_planning_stack(async move {
            let frame = match locked {
                true => datafusion_dp::analyst_sql(&ctx, &sql).await?,
                false => ctx.sql(&sql).await?,
            };
            let task = Arc::new(frame.task_ctx());
            let (state, plan) = frame.into_parts();
            let (optimized, cost) = match &plan {
                // EXPLAIN's own path (it records each rule's output): no cost to report.
                LogicalPlan::Explain(_) => (state.optimize(&plan)?, None),
                _ => {
                    let analyzed = state.analyzer().execute_and_check(
                        plan,
                        state.config_options(),
                        |_, _| {},
                    )?;
                    let cost = Cost::of_plan(&analyzed)?;
                    // ρ is what a zCDP budget charges; an (ε, δ) budget charges (ε, δ) only.
                    let zcdp = state
                        .config_options()
                        .extensions
                        .get::<DpOptions>()
                        .is_some_and(|o| o.budget_measure == BudgetMeasure::Zcdp);
                    let rho = if zcdp { cost.rho() } else { None };
                    let optimized = state.optimizer().optimize(analyzed, &state, |_, _| {})?;
                    (optimized, Some((cost.epsilon(), cost.delta(), rho)))
                }
            };
            let physical = state
                .query_planner()
                .create_physical_plan(&optimized, &state)
                .await?;
            Ok::<_, DataFusionError>((physical, task, cost))
        })
        .await?;
    let schema = physical.schema();
    let task: Arc<TaskContext> = task;
    let stream = execute_stream(physical, task)?;
    // The owner's per-query deadline (a session opened from a configuration file has one).
    let stream =
        datafusion_dp::sql::privacy::session::limits::within_session_deadline(&limits_ctx, stream);
    // Its release schedule (`[limits] release_quantum_ms`), as in `dpsql --config`.
    let stream = datafusion_dp::sql::privacy::session::release_time::on_release_schedule(
        &limits_ctx,
        stream,
    );
    let batches = stream.try_collect::<Vec<_>>().await?;
    let table = PyTable::try_new(batches, schema)
        .map_err(|e| DataFusionError::Execution(format!("exporting the result: {e}")))?;
    Ok((table, cost))
}

/// The budget [`Session::lock`] declares, checked as an owner configuration's `[[analyst]]`
/// section is (`datafusion_dp::owner`): each amount in its range, one budget in one measure
/// ([`Budget::new`]), and one that is enforced (a locked session requires a budget). The
/// measure is `budget_measure` when given, else zCDP when `rho_budget` is given (a ρ names
/// no other measure), else (ε, δ). Errors name the argument.
fn lock_budget(
    epsilon_budget: Option<f64>,
    delta_budget: Option<f64>,
    rho_budget: Option<f64>,
    budget_measure: Option<&str>,
) -> std::result::Result<Budget, String> {
    let measure = match budget_measure {
        Some(name) => BudgetMeasure::parse(name)?,
        None if rho_budget.is_some() => BudgetMeasure::Zcdp,
        None => BudgetMeasure::EpsilonDelta,
    };
    if let Some(epsilon) = epsilon_budget {
        if !(epsilon.is_finite() && epsilon >= 0.0) {
            return Err(format!(
                "epsilon_budget must be a finite number >= 0, got {epsilon}"
            ));
        }
    }
    if let Some(delta) = delta_budget {
        if !(0.0..1.0).contains(&delta) {
            return Err(format!("delta_budget must be in [0, 1), got {delta}"));
        }
    }
    if let Some(rho) = rho_budget {
        if !(rho.is_finite() && rho > 0.0) {
            return Err(format!("rho_budget must be a positive number, got {rho}"));
        }
    }
    let budget = Budget::new(measure, epsilon_budget, delta_budget, rho_budget, "")?;
    match measure {
        BudgetMeasure::EpsilonDelta if budget.epsilon.is_none() => Err(
            "needs a budget: epsilon_budget (with delta_budget for (epsilon, delta) mechanisms), or rho_budget (zCDP), or budget_measure='zcdp' with epsilon_budget and delta_budget as a target"
                .to_string(),
        ),
        BudgetMeasure::Zcdp if !budget.is_enforced() => Err(
            "budget_measure='zcdp' needs rho_budget, or epsilon_budget and delta_budget (a target converted to rho): a locked session requires a budget"
                .to_string(),
        ),
        _ => Ok(budget),
    }
}

#[pymethods]
impl Session {
    /// A new, unlocked session with the DP functions, `information_schema`, and object stores
    /// resolved on first use (local files; `s3://` from the `AWS_*` environment variables).
    #[new]
    fn new() -> PyResult<Self> {
        let ctx = guarded(|| tables::session(SessionConfig::new().with_information_schema(true)))?;
        Ok(Self {
            ctx,
            inferred: Mutex::new(Vec::new()),
        })
    }

    /// The locked session `dpsql --config PATH --analyst ANALYST` gives: the owner's tables,
    /// protection and options from the configuration file, the analyst's budget and ledger,
    /// the owner's limits (memory, per-query deadline).
    #[staticmethod]
    #[pyo3(signature = (path, analyst=None))]
    fn from_config(py: Python<'_>, path: String, analyst: Option<String>) -> PyResult<Self> {
        let ctx = run(py, move || async move {
            let config = OwnerConfig::load(std::path::Path::new(&path))?;
            let spender = config
                .spending_analyst(analyst.as_deref())
                .map_err(|e| DataFusionError::Configuration(format!("config {path}: {e}")))?
                .clone();
            let owner = Owner::open(config).await?;
            owner.analyst_session(&spender)
        })?;
        Ok(Self {
            ctx,
            inferred: Mutex::new(Vec::new()),
        })
    }

    /// Registers the file, directory or hive layout at `path` as table `name`, in `format`
    /// (`parquet`, `csv` with a header line, `json` for NDJSON). With `columns` (`"NAME TYPE"`
    /// each) the schema is the declared one, as `dp-server` reads the owner's tables; Parquet
    /// without them reads its files' own schema (refused when they differ). A CSV or NDJSON
    /// table without them is inferred from its rows: fine for the owner's own exploration,
    /// refused at `lock` unless the table is declared public.
    #[pyo3(signature = (name, path, format, columns=None, partition_columns=None))]
    fn register(
        &self,
        py: Python<'_>,
        name: String,
        path: String,
        format: String,
        columns: Option<Vec<String>>,
        partition_columns: Option<Vec<String>>,
    ) -> PyResult<()> {
        guarded(|| self.owner_call(&format!("register table '{name}'")))?;
        let columns = guarded(|| {
            columns
                .as_deref()
                .map(|c| declared_fields(&name, "columns", c))
                .transpose()
        })?;
        let partition_columns = guarded(|| {
            declared_fields(
                &name,
                "partition_columns",
                partition_columns.as_deref().unwrap_or_default(),
            )
        })?;
        let inferred = columns.is_none() && format != "parquet";
        let ctx = self.ctx.clone();
        let table = name.clone();
        run(py, move || async move {
            if inferred && partition_columns.is_empty() {
                return tables::register_table(&ctx, &table, &path, Some(&format)).await;
            }
            let config = TableConfig {
                name: table.clone(),
                location: path.clone(),
                format: Some(format),
                // Opened as a protected table would be (declared or file schema, checked
                // files); the protection itself is declared with `protect`.
                protection: if inferred {
                    Protection::Public
                } else {
                    Protection::Rows
                },
                columns,
                partition_columns,
                // A session's table is read where it lies, at each query.
                in_memory: false,
            };
            let provider = tables::open_table(&ctx, &config, tables::Reading::Files)
                .await
                .map_err(|source| {
                    DataFusionError::External(Box::new(datafusion_dp::cli::TableError {
                        table: table.clone(),
                        location: path.clone(),
                        source,
                    }))
                })?;
            ctx.register_table(TableReference::bare(table.as_str()), provider)?;
            Ok(())
        })?;
        if inferred {
            self.inferred
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(name);
        }
        Ok(())
    }

    /// Declares how `table` protects people: `unit` (a person is every row with one value of
    /// that column), row by row (`unit=None`, the default for undeclared tables), or public
    /// (released exactly). The owner's call ([`datafusion_dp::protect`]); refused once locked.
    #[pyo3(signature = (table, unit=None, public=false))]
    fn protect(&self, table: &str, unit: Option<String>, public: bool) -> PyResult<()> {
        guarded(|| {
            let protection = match (unit, public) {
                (Some(_), true) => {
                    return Err(refused(format!(
                        "protect '{table}': a public table has no unit column (give unit= or \
                         public=True, not both)"
                    )))
                }
                (Some(unit), false) => Protection::Unit(unit),
                (None, true) => Protection::Public,
                (None, false) => Protection::Rows,
            };
            datafusion_dp::protect(&self.ctx, table, protection)
        })
    }

    /// Applies the owner's `dp.*` options (`options`: key, value pairs, e.g.
    /// `("public_groups", "regions")`), the budget and the ledger, then locks the session for
    /// an untrusted analyst ([`datafusion_dp::lock`]): irreversible. Refused when a table that
    /// is not public had its schema inferred from its rows.
    ///
    /// The budget ([`lock_budget`]) is declared in one measure: (ε, δ) (`epsilon_budget`, and
    /// `delta_budget` for (ε, δ) mechanisms; the default), or ρ-zCDP (`rho_budget`, which
    /// implies `budget_measure = "zcdp"`, or `budget_measure = "zcdp"` with `epsilon_budget`
    /// and `delta_budget` as a target converted once to ρ), validated as an owner
    /// configuration's `[[analyst]]` section is; no budget at all is refused.
    #[pyo3(signature = (
        epsilon_budget=None,
        delta_budget=None,
        ledger=None,
        options=Vec::new(),
        rho_budget=None,
        budget_measure=None
    ))]
    fn lock(
        &self,
        epsilon_budget: Option<f64>,
        delta_budget: Option<f64>,
        ledger: Option<String>,
        options: Vec<(String, String)>,
        rho_budget: Option<f64>,
        budget_measure: Option<String>,
    ) -> PyResult<()> {
        guarded(|| {
            self.owner_call("lock")?;
            let budget = lock_budget(
                epsilon_budget,
                delta_budget,
                rho_budget,
                budget_measure.as_deref(),
            )
            .map_err(|e| refused(format!("lock: {e}")))?;
            let inferred = self
                .inferred
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone();
            {
                let state = self.ctx.state();
                let config = state.config_options();
                let dp = config.extensions.get::<DpOptions>().ok_or_else(|| {
                    refused("lock: the session has no DP options (a bug: please report it)")
                })?;
                for table in &inferred {
                    let protection = dp
                        .protections
                        .of(&TableReference::bare(table.as_str()), config);
                    if protection != Protection::Public {
                        return Err(refused(format!(
                            "lock: table '{table}' is {protection} but its column types were \
                             inferred from its rows (one person's value could change them, and \
                             DESCRIBE would show it): register it with columns=[\"NAME TYPE\", \
                             ...] (SQL types, in the files' column order), or declare it public"
                        )));
                    }
                }
            }
            for (key, value) in &options {
                self.set_option(key, value)?;
            }
            // The budget as the session options declare it (Budget::options: the measure,
            // then each amount given).
            for (key, value) in budget.options() {
                self.set_option(key, &value)?;
            }
            if let Some(ledger) = &ledger {
                self.set_option("ledger", ledger)?;
            }
            datafusion_dp::lock(&self.ctx)
        })
    }

    /// Whether the session is locked (for an analyst).
    #[getter(locked)]
    fn is_locked(&self) -> bool {
        self.locked()
    }

    /// Runs one statement and collects its result: `(table, cost)`, the table an Arrow
    /// PyCapsule-interface object and the cost `(epsilon, delta, rho)` the query was charged
    /// (`None` when unknown; `rho` only under a zCDP budget). Locked: the statement is the
    /// analyst's ([`datafusion_dp::analyst_sql`]).
    fn sql(&self, py: Python<'_>, query: String) -> PyResult<Answer> {
        let locked = self.locked();
        let ctx = self.ctx.clone();
        run(py, move || answer(ctx, query, locked))
    }

    /// The names of the session's tables (default catalog and schema).
    fn tables(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .ctx
            .catalog("datafusion")
            .and_then(|c| c.schema("public"))
            .map(|s| s.table_names())
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// One DP aggregate as Python sees it: name, signature, and the interval's statistic and
/// whether it is a ratio.
type DpFunction = (&'static str, String, Option<(String, bool)>);

/// The DP aggregates of the registry ([`datafusion_dp::sql::functions::aggregate::STATISTICS`]),
/// in order: each one's name, SQL signature and, when it returns an interval, the statistic the
/// interval is of and whether that is a ratio (what a forest plot's axis needs). The Python
/// half reads its lists of functions from here.
#[pyfunction]
fn dp_functions() -> Vec<DpFunction> {
    datafusion_dp::sql::functions::aggregate::STATISTICS
        .iter()
        .map(|s| {
            let interval = s.interval().map(|i| (i.to_string(), i.is_ratio()));
            (s.name(), s.signature(), interval)
        })
        .collect()
}

/// The module: `Session`, `DpError` and `dp_functions`.
#[pymodule]
fn _internal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add_function(wrap_pyfunction!(dp_functions, m)?)?;
    m.add("DpError", m.py().get_type::<DpError>())?;
    Ok(())
}
