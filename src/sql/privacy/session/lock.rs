//! The data owner's calls: declare tables ([`protect`]) and lock a session for an untrusted
//! analyst ([`lock`], then [`analyst_sql`] for every statement the analyst sends).
//!
//! ```no_run
//! # async fn demo() -> datafusion::error::Result<()> {
//! use datafusion::prelude::*;
//! use datafusion_dp::Protection;
//! let ctx = SessionContext::new();
//! datafusion_dp::register(&ctx)?;
//! ctx.register_csv("visits", "data/visits.csv", CsvReadOptions::new()).await?;
//! datafusion_dp::protect(&ctx, "visits", Protection::Unit("patient_id".into()))?;
//! ctx.sql("SET dp.epsilon_budget = 3").await?;
//! datafusion_dp::lock(&ctx)?;
//! // Hand the analyst only this:
//! let answer = datafusion_dp::analyst_sql(&ctx, "SELECT dp_count(patient_id, 1.0) FROM visits").await?;
//! # Ok(()) }
//! ```
//!
//! What the lock holds: the owner's `dp.*` options ([`crate::sql::options::SetBy::Owner`]:
//! the protection, the budgets, the ledger, `dp.seed`, `dp.require_secure`,
//! `dp.public_groups`, `group_sizes`) can no longer be changed by `SET` or a call's options
//! string, from any path into the session; `require_secure` is on. [`analyst_sql`] also
//! refuses DDL (`CREATE TABLE`, `CREATE EXTERNAL TABLE`, `CREATE VIEW`, `DROP`), DML
//! (`INSERT`, `COPY ... TO`) and `SET` of DataFusion options other than the few in
//! [`ANALYST_SETTINGS`], with bounded values (the catalog defaults decide which table a
//! declared name means; `datafusion.explain.*` can print file statistics; some execution
//! options size allocations by a row's value). `EXPLAIN` shows the logical plan only. Accuracy options (`confidence`,
//! `ci_method`, `mechanism`, `delta`, `method`, `max_rows_per_unit`, ...) stay settable: they
//! change the noise, never the guarantee. The Rust code holding the `SessionContext` is the
//! owner's and is trusted.

use crate::sql::options::DpOptions;
use crate::sql::privacy::plan::protection::Protection;
use crate::sql::privacy::session::limits;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::ParamValues;
use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::dataframe::DataFrame;
use datafusion::execution::context::{SQLOptions, SessionContext, SessionState};
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Execute, Expr, LogicalPlan, Prepare, Statement};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use std::sync::Arc;

fn with_options<T>(
    ctx: &SessionContext,
    f: impl FnOnce(&mut DpOptions) -> std::result::Result<T, String>,
    what: &str,
) -> Result<T> {
    let state = ctx.state_ref();
    let mut state = state.write();
    let options = state
        .config_mut()
        .options_mut()
        .extensions
        .get_mut::<DpOptions>()
        .ok_or_else(|| plan_datafusion_err!("{what}: call datafusion_dp::register(&ctx) first"))?;
    f(options).map_err(|e| plan_datafusion_err!("{what}: {e}"))
}

/// Declares how `table` (a name as SQL writes it) protects people: the data owner's call, the
/// Rust form of `SET dp.protected_tables` / `dp.public_tables`. Tables not declared are
/// protected row by row ([`crate::sql::privacy::plan::protection`]). Refused in a locked session.
pub fn protect(ctx: &SessionContext, table: &str, protection: Protection) -> Result<()> {
    with_options(
        ctx,
        |o| {
            if o.locked {
                return Err("the session is locked".to_string());
            }
            o.protections.declare(table, protection)
        },
        "protect",
    )
}

/// Locks `ctx` for an untrusted analyst (see the module docs). Needs a budget
/// (`dp.epsilon_budget`, or a zCDP one: [`DpOptions::lock`]); refused with `dp.seed` set.
/// Irreversible for the session.
pub fn lock(ctx: &SessionContext) -> Result<()> {
    with_options(ctx, DpOptions::lock, "lock")?;
    lock_execution(ctx);
    Ok(())
}

/// How a locked session executes, set by [`lock`] and again on every analyst statement
/// (however the session was locked): the query planner checks and rewrites the plan that
/// will run ([`crate::sql::privacy::session::planner`]), and no operator skips work by what
/// another input holds. DataFusion's dynamic filters push a join's build-side keys and a
/// top-k's threshold into the other input's scan, and Parquet prunes row groups and pages by
/// their statistics, so a scan read more or less of other people's rows depending on one
/// person's values (a row group's maximum moves with them); in a locked session both are off.
fn lock_execution(ctx: &SessionContext) {
    use crate::sql::privacy::session::planner::LockedQueryPlanner;
    let state = ctx.state_ref();
    let mut state = state.write();
    let options = state.config_mut().options_mut();
    options.optimizer.enable_dynamic_filter_pushdown = false;
    options.optimizer.enable_join_dynamic_filter_pushdown = false;
    options.optimizer.enable_topk_dynamic_filter_pushdown = false;
    options.optimizer.enable_aggregate_dynamic_filter_pushdown = false;
    options.execution.parquet.pruning = false;
    options.execution.parquet.bloom_filter_on_read = false;
    options.execution.parquet.enable_page_index = false;
    let planner: &dyn std::any::Any = state.query_planner().as_ref();
    if planner.downcast_ref::<LockedQueryPlanner>().is_none() {
        let locked = Arc::new(LockedQueryPlanner::new(Arc::clone(state.query_planner())));
        let rules = with_yielding_joins(state.physical_optimizers().to_vec());
        let rebuilt = datafusion::execution::SessionStateBuilder::new_from_existing(state.clone())
            .with_query_planner(locked)
            .with_physical_optimizer_rules(rules)
            .build();
        // A statement's planning stops between optimiser rules once past its deadline or
        // abandoned (`dp-server`; limits::planning_checkpoint).
        *state = limits::interleave_checkpoints(rebuilt);
    }
}

/// `rules` with [`YieldFromJoins`](crate::sql::cooperative::YieldFromJoins) (once): every join
/// of a locked session's plans yields to the runtime, so that a query stopped by its deadline,
/// a cancel or Ctrl-C stops ([`crate::sql::cooperative`]). Only locked sessions (`dp-server`,
/// `dpsql --config`, a locked Ballista scheduler's jobs) get it: a trusted session's plans are
/// DataFusion's. It goes after [`DrainInputs`](crate::sql::privacy::exec::drain::DrainInputs)
/// (which looks through the wrapper) and before the rules that end the list.
fn with_yielding_joins(
    mut rules: Vec<Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>>,
) -> Vec<Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>> {
    use crate::sql::cooperative::{YieldFromJoins, COOPERATIVE_RULE_NAME};
    use crate::sql::privacy::exec::drain::DRAIN_RULE_NAME;
    if rules.iter().any(|r| r.name() == COOPERATIVE_RULE_NAME) {
        return rules;
    }
    let at = rules
        .iter()
        .position(|r| r.name() == DRAIN_RULE_NAME)
        .map_or(rules.len(), |i| i + 1);
    rules.insert(at, Arc::new(YieldFromJoins));
    rules
}

/// A locked session's `EXPLAIN` shows the logical plan only (see `refuse_physical_explain`);
/// set on every analyst statement, however the session was locked (`lock` or the owner's
/// `SET dp.locked`), and the analyst cannot set `datafusion.explain.*` back.
fn explain_logical_plan_only(ctx: &SessionContext) {
    let state = ctx.state_ref();
    let mut state = state.write();
    let explain = &mut state.config_mut().options_mut().explain;
    explain.logical_plan_only = true;
    explain.physical_plan_only = false;
    explain.show_statistics = false;
    explain.format = datafusion::common::format::ExplainFormat::Indent;
}

/// Whether `ctx` is locked.
pub fn is_locked(ctx: &SessionContext) -> bool {
    ctx.state_ref()
        .read()
        .config()
        .options()
        .extensions
        .get::<DpOptions>()
        .is_some_and(|o| o.locked)
}

/// Plans and runs one statement of an untrusted analyst in a locked session: DDL, DML and
/// `SET` of DataFusion options other than [`ANALYST_SETTINGS`] are refused; `dp.*`
/// options are refused by the lock itself when they are the owner's; every query goes
/// through the DP planner rule (only DP leaves a protected table). A statement over the limits
/// of [`crate::sql::privacy::session::limits`] (size, nesting depth) is refused before it is planned.
pub async fn analyst_sql(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    if !is_locked(ctx) {
        return plan_err!(
            "analyst_sql: the session is not locked; call datafusion_dp::lock(&ctx) first"
        );
    }
    limits::check_statement_size(sql)?;
    // Planned on a thread with a large stack, after the limits on the parsed statement
    // (crate::sql::privacy::session::limits): a deep statement is refused, never a stack overflow.
    let ctx = ctx.clone();
    let sql = sql.to_string();
    limits::on_planning_stack(async move { plan_analyst_statement(&ctx, &sql).await }).await
}

/// Refuses `sql` over the size limit, parses it with the session's parser and recursion
/// limit, refuses it over the nesting limit, and plans it (nothing analysed, charged or run:
/// a prepared statement's schemas come from this plan). Call it on a thread with a large
/// stack ([`limits::on_planning_stack`]), as [`analyst_sql`] does.
#[cfg(feature = "server")]
pub(crate) async fn limited_plan(ctx: &SessionContext, sql: &str) -> Result<LogicalPlan> {
    Ok(limited_plan_in(ctx, sql).await?.1)
}

/// [`limited_plan`], with the copy of the session's state it was planned in.
async fn limited_plan_in(ctx: &SessionContext, sql: &str) -> Result<(SessionState, LogicalPlan)> {
    limits::check_statement_size(sql)?;
    let state = ctx.state();
    let dialect = state.config().options().sql_parser.dialect;
    let statement = state.sql_to_statement(sql, &dialect)?;
    limits::check_nesting_depth(&statement)?;
    limits::check_table_references(&statement)?;
    let plan = state
        .statement_to_plan(statement)
        .await
        .map_err(without_suggestion)?;
    // What the plan will be once its CTEs are inlined and optimised, measured before any of
    // that runs (a CTE read twice per level doubles per level): plan::size.
    crate::sql::privacy::plan::size::check_plan(&plan, state.config_options())?;
    Ok((state, plan))
}

/// A planning error without DataFusion's suggestion of a registered name for an unknown one
/// ("Invalid function 'f'. Did you mean 'g'?"). DataFusion picks among equally close names in a
/// hash map's order, which differs between processes, so the same statement got different
/// error text from two servers (the neighbour fuzzer's seed 41, program 1373: `array_has` on
/// one side, `map_keys` on the other); a locked session's error text is a function of the
/// statement alone.
fn without_suggestion(error: DataFusionError) -> DataFusionError {
    let text = error.strip_backtrace();
    match text.find("Did you mean '") {
        Some(i) => {
            let message = text[..i].trim_end();
            let message = message
                .strip_prefix("Error during planning: ")
                .unwrap_or(message);
            DataFusionError::Plan(message.to_string())
        }
        None => error,
    }
}

/// [`analyst_sql`] on the planning thread: parse, limits, plan, refusals.
async fn plan_analyst_statement(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    explain_logical_plan_only(ctx);
    lock_execution(ctx);
    let (state, plan) = limited_plan_in(ctx, sql).await?;
    refuse_owner_statements(&plan)?;
    refuse_verbose_explain(&plan)?;
    refuse_physical_explain(&plan)?;
    crate::sql::privacy::pass::refuse_correlated_dp_calls(&plan)?;
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(true)
        .verify_plan(&plan)
        .map_err(|e| {
            plan_datafusion_err!("{e} (this session is locked: the data owner manages tables)")
        })?;
    match plan {
        LogicalPlan::Statement(Statement::Prepare(prepare)) => prepare_once(ctx, &state, prepare),
        LogicalPlan::Statement(Statement::Execute(execute)) => {
            match prepared_statements(ctx).get(&execute.name) {
                Some(prepare) => Ok(DataFrame::new(state, bind_parameters(&prepare, execute)?)),
                None => {
                    ctx.execute_logical_plan(LogicalPlan::Statement(Statement::Execute(execute)))
                        .await
                }
            }
        }
        LogicalPlan::Statement(Statement::Deallocate(deallocate)) => {
            // The analyst's own statements are kept here only; a name not here may be one the
            // owner prepared before the lock, in DataFusion's store.
            if prepared_statements(ctx).remove(&deallocate.name) {
                return empty_frame(state);
            }
            ctx.execute_logical_plan(LogicalPlan::Statement(Statement::Deallocate(deallocate)))
                .await
        }
        // What `execute_logical_plan` does itself (SET, ...).
        LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => ctx.execute_logical_plan(plan).await,
        // A query, in the copy of the state it was planned in, as `execute_logical_plan` would
        // run it in a new copy: each copies every registered function's name and option.
        plan => Ok(DataFrame::new(state, plan)),
    }
}

/// The most statements one locked session keeps prepared (each holds a plan in memory), unless
/// the program serving it shares another cap ([`share_prepared_statement_cap`]: `dp-server`
/// counts these with its Flight SQL prepared statements against `[server]
/// max_prepared_statements`).
pub const MAX_PREPARED_STATEMENTS: usize = 256;

/// The cap on the prepared statements of one locked session: SQL `PREPARE`s, and whatever else
/// the serving program counts with them (`dp-server`'s Flight SQL prepared statements), so that
/// the session's statements together stay under one limit. A statement takes a place
/// ([`PreparedStatementCap::try_take`]) before it is kept and gives it back when it is dropped.
#[derive(Debug)]
pub struct PreparedStatementCap {
    max: usize,
    /// The option (or the fixed limit) a refusal names.
    name: &'static str,
    held: std::sync::atomic::AtomicUsize,
}

impl PreparedStatementCap {
    /// A cap of `max` statements, named `name` in refusals.
    pub fn new(max: usize, name: &'static str) -> Self {
        Self {
            max,
            name,
            held: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Takes a place for one more statement; `false` (nothing taken) at the cap.
    pub fn try_take(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                (held < self.max).then_some(held + 1)
            })
            .is_ok()
    }

    /// Gives back the place of a statement dropped.
    pub fn give_back(&self) {
        use std::sync::atomic::Ordering;
        let _ = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                held.checked_sub(1)
            });
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// Makes `cap` the cap of `ctx`'s SQL prepared statements, shared with the caller's own
/// (`dp-server` counts its Flight SQL prepared statements in it). Call it before the analyst's
/// first statement: statements prepared before are not counted.
pub fn share_prepared_statement_cap(ctx: &SessionContext, cap: Arc<PreparedStatementCap>) {
    let prepared = Arc::new(PreparedStatements {
        statements: Default::default(),
        cap,
    });
    ctx.state_ref().write().config_mut().set_extension(prepared);
}

/// The statements an analyst prepared in a locked session, as planned, before any analysis
/// or optimisation: the one copy kept (DataFusion's own store is not used for them). DataFusion
/// (55) stores a prepared statement optimised, before the analyzer rules have run: projection
/// pushdown then pruned a protected table's unit column from its scan, and the planner rule
/// refused every `EXECUTE` of a DP query over a unit-protected table ("the scan does not read
/// the unit column"). `EXECUTE` in a locked session binds its parameters to this copy instead,
/// which is analysed, charged and optimised like any query. Storing DataFusion's optimised copy
/// too doubled each statement's memory and ran the whole optimiser over it for nothing.
#[derive(Debug)]
struct PreparedStatements {
    statements: std::sync::Mutex<std::collections::HashMap<String, Prepare>>,
    cap: Arc<PreparedStatementCap>,
}

impl Default for PreparedStatements {
    fn default() -> Self {
        Self {
            statements: Default::default(),
            cap: Arc::new(PreparedStatementCap::new(
                MAX_PREPARED_STATEMENTS,
                "a locked session's fixed limit",
            )),
        }
    }
}

impl PreparedStatements {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Prepare>> {
        self.statements.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `prepare`, or refuses it: its name in use, or the cap reached.
    fn insert(&self, prepare: Prepare) -> Result<()> {
        let mut statements = self.lock();
        if statements.contains_key(&prepare.name) {
            return plan_err!("Prepared statement '{}' already exists", prepare.name);
        }
        if !self.cap.try_take() {
            return Err(datafusion::error::DataFusionError::ResourcesExhausted(
                format!(
                    "PREPARE '{}': this session holds {} prepared statements, the limit ({}); \
                 DEALLOCATE or close one first",
                    prepare.name,
                    self.cap.max(),
                    self.cap.name()
                ),
            ));
        }
        statements.insert(prepare.name.clone(), prepare);
        Ok(())
    }

    fn get(&self, name: &str) -> Option<Prepare> {
        self.lock().get(name).cloned()
    }

    /// Drops the statement `name`; whether there was one.
    fn remove(&self, name: &str) -> bool {
        let removed = self.lock().remove(name).is_some();
        if removed {
            self.cap.give_back();
        }
        removed
    }
}

/// A locked session's `PREPARE`: checked as DataFusion checks it (the declared parameter types
/// against the parameters used), then kept once, in [`PreparedStatements`], within its cap.
fn prepare_once(ctx: &SessionContext, state: &SessionState, prepare: Prepare) -> Result<DataFrame> {
    if !prepare.fields.is_empty() {
        let used = prepare.input.get_parameter_names()?.len();
        if used != prepare.fields.len() {
            return plan_err!(
                "Prepare specifies {} data types but query has {used} parameters",
                prepare.fields.len()
            );
        }
    }
    prepared_statements(ctx).insert(prepare)?;
    empty_frame(state.clone())
}

/// The empty result of a statement (as DataFusion's `PREPARE`, `DEALLOCATE` and `SET` answer).
fn empty_frame(state: SessionState) -> Result<DataFrame> {
    let plan = datafusion::logical_expr::LogicalPlanBuilder::empty(false).build()?;
    Ok(DataFrame::new(state, plan))
}

/// `ctx`'s [`PreparedStatements`], installed on first use.
fn prepared_statements(ctx: &SessionContext) -> Arc<PreparedStatements> {
    let state = ctx.state_ref();
    if let Some(prepared) = state.read().config().get_extension::<PreparedStatements>() {
        return prepared;
    }
    let mut state = state.write();
    match state.config().get_extension::<PreparedStatements>() {
        Some(prepared) => prepared,
        None => {
            let prepared = Arc::new(PreparedStatements::default());
            state.config_mut().set_extension(Arc::clone(&prepared));
            prepared
        }
    }
}

/// `prepare`'s plan with `execute`'s parameters, as DataFusion's `EXECUTE` binds them: each
/// folded to a literal, cast to its declared type.
fn bind_parameters(prepare: &Prepare, execute: Execute) -> Result<LogicalPlan> {
    let simplifier = ExprSimplifier::new(SimplifyContext::default());
    let mut params = execute
        .parameters
        .into_iter()
        .map(|e| match simplifier.simplify(e)? {
            Expr::Literal(scalar, metadata) => Ok(ScalarAndMetadata::new(scalar, metadata)),
            e => plan_err!(
                "EXECUTE '{}': parameter {e} is not a constant",
                prepare.name
            ),
        })
        .collect::<Result<Vec<_>>>()?;
    if !prepare.fields.is_empty() {
        if params.len() != prepare.fields.len() {
            return plan_err!(
                "Prepared statement '{}' expects {} parameters, but {} provided",
                prepare.name,
                prepare.fields.len(),
                params.len()
            );
        }
        params = params
            .into_iter()
            .zip(prepare.fields.iter())
            .map(|(p, field)| p.cast_storage_to(field.data_type()))
            .collect::<Result<_>>()?;
    }
    prepare
        .input
        .as_ref()
        .clone()
        .replace_params_with_values(&ParamValues::List(params))
}

/// Refuses `EXPLAIN VERBOSE`: it prints the plan's statistics, which for Parquet are the exact
/// row count and each column's exact minimum and maximum (the file's metadata). DataFusion
/// plans an `EXPLAIN`'s query without showing the planner rule the `EXPLAIN`, so it is refused
/// here, where the analyst's statement arrives.
fn refuse_verbose_explain(plan: &LogicalPlan) -> Result<()> {
    // Anywhere in the statement: `PREPARE q AS EXPLAIN VERBOSE ...` runs it at `EXECUTE q`.
    let verbose =
        plan.exists(|node| Ok(matches!(node, LogicalPlan::Explain(explain) if explain.verbose)))?;
    match verbose {
        true => plan_err!(
            "EXPLAIN VERBOSE: this session is locked; it would print the plan's statistics, \
             which are exact row counts and each column's minimum and maximum where the source \
             keeps them (Parquet). Use EXPLAIN (the plan, with each DP aggregate's \
             contribution bound)"
        ),
        false => Ok(()),
    }
}

/// Whether `value` (a `SET` value, quoted or not) is an integer from `low` to `high`: the
/// check of an [`ANALYST_SETTINGS`] value, here and on a locked cluster's scheduler.
pub(crate) fn in_analyst_range(value: &str, low: u64, high: u64) -> bool {
    value
        .trim()
        .trim_matches('\'')
        .parse::<u64>()
        .is_ok_and(|v| (low..=high).contains(&v))
}

/// The DataFusion options an analyst may set in a locked session, each with the range of
/// values accepted. Every other option is the owner's: several turn one large value in a row
/// into an allocation (`perfect_hash_join_min_key_density = 0` sizes a hash table by the
/// largest key, so one person's key aborted the process), others change what `EXPLAIN`
/// prints or which files a scan reads.
pub const ANALYST_SETTINGS: &[(&str, u64, u64)] = &[
    // Rows per batch: performance only; bounded so no batch buffer is sized by the analyst.
    ("datafusion.execution.batch_size", 8, 65_536),
    // Parallelism: the release order does not depend on it (releases are sorted).
    ("datafusion.execution.target_partitions", 1, 64),
];

/// Refuses `SET`/`RESET` of options an analyst must not change: `dp.*` options pass (the lock
/// refuses the owner's), DataFusion's only as [`ANALYST_SETTINGS`] allows.
fn refuse_owner_statements(plan: &LogicalPlan) -> Result<()> {
    let (variable, value) = match plan {
        LogicalPlan::Statement(Statement::SetVariable(set)) => (&set.variable, Some(&set.value)),
        LogicalPlan::Statement(Statement::ResetVariable(reset)) => (&reset.variable, None),
        _ => return Ok(()),
    };
    let key = variable.to_ascii_lowercase();
    if key.starts_with("dp.") {
        return Ok(());
    }
    let Some((_, low, high)) = ANALYST_SETTINGS.iter().find(|(name, ..)| *name == key) else {
        let allowed: Vec<&str> = ANALYST_SETTINGS.iter().map(|(name, ..)| *name).collect();
        return plan_err!(
            "SET {variable}: this session is locked; only dp.* accuracy options and {} can be \
             set",
            allowed.join(", ")
        );
    };
    match value {
        None => Ok(()),
        Some(v) if in_analyst_range(v, *low, *high) => Ok(()),
        Some(_) => plan_err!(
            "SET {variable}: this session is locked; the value must be an integer from {low} \
             to {high}"
        ),
    }
}

/// Refuses `EXPLAIN FORMAT TREE`, which prints the physical plan: a locked session's `EXPLAIN`
/// shows the logical plan only ([`lock`]), because the physical plan names the files a table
/// reads (in a hive layout, protected values in their paths) with their byte ranges, and its
/// shape (file groups, partitions) follows the files' sizes.
fn refuse_physical_explain(plan: &LogicalPlan) -> Result<()> {
    use datafusion::common::format::ExplainFormat;
    let physical = plan.exists(|node| {
        Ok(matches!(node, LogicalPlan::Explain(explain)
            if matches!(explain.explain_format, ExplainFormat::Tree)))
    })?;
    match physical {
        true => plan_err!(
            "EXPLAIN FORMAT TREE: this session is locked; it would print the physical plan, \
             which names the files read and their byte ranges. Use EXPLAIN (the logical plan)"
        ),
        false => Ok(()),
    }
}
