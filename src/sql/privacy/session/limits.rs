//! Limits on one analyst statement, so that one statement cannot take the process down.
//!
//! DataFusion's planner and optimizer recurse over the statement's tree: a 4 KB statement such
//! as `SELECT 1+1+...+1` (2,000 terms), a `UNION ALL` of 3,000 `SELECT 1` or 1,000 chained
//! CTEs overflowed the stack of the thread planning it, and a stack overflow aborts the whole
//! process (every analyst's session of `dp-server`). sqlparser's recursion limit
//! (`datafusion.sql_parser.recursion_limit`) does not see these: it parses operator chains,
//! set operations and CTE lists iteratively. So [`crate::analyst_sql`]:
//!
//! 1. refuses a statement longer than [`MAX_STATEMENT_BYTES`];
//! 2. parses it with the session's parser recursion limit, then measures its nesting depth
//!    ([`nesting_depth`]: expressions, subqueries, set operations, CTEs and joins, each level
//!    counted) and refuses it over [`MAX_NESTING_DEPTH`], and the tables it reads with its
//!    CTEs expanded ([`table_references`]) over [`MAX_TABLE_REFERENCES`];
//! 3. plans it on a thread with a [`PLANNING_STACK_BYTES`] stack ([`on_planning_stack`]), far
//!    more than a statement within the limits needs, so that what passes the limits cannot
//!    overflow either;
//! 4. measures the plan as it will run, every CTE inlined, against the limits on a plan
//!    ([`crate::sql::privacy::plan::size`]: depth, size, the widths of its types).
//!
//! The threads that execute analysts' queries in this crate's programs have stacks sized for
//! those limits ([`execution_runtime`], [`EXECUTION_STACK_BYTES`]).
//!
//! The DataFrame it returns is analysed, optimised and physically planned later, where the
//! caller runs it (`collect()` in an embedding application: any thread, a tokio worker's
//! 2 MiB stack included). DataFusion's own plan walks grow the stack on demand there
//! (`recursive_protection`), and so do the crate's (`#[recursive::recursive]` on the privacy
//! analysis, the rewrites' plan and expression walks): a `cte` or `joins` chain of 120
//! levels overflowed 2 MiB in `PlanAnalysis::relation` before (tests/limits.rs,
//! `the_rust_api_answers_statements_within_the_limits_on_a_small_stack`). A new function
//! that recurses once per level of a plan or expression takes the attribute too.

use datafusion::common::{plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{Expr, Query, Select, SetExpr, TableFactor, Visit, Visitor};
use std::future::Future;
use std::ops::ControlFlow;

/// The longest analyst statement, in bytes (256 KiB): far above any hand-written query, and
/// small enough that parsing it is cheap.
pub const MAX_STATEMENT_BYTES: usize = 256 * 1024;

/// The deepest analyst statement ([`nesting_depth`]): 256 levels. A sum of 2,000 terms is
/// 2,000 levels deep for the planner, which recurses once per level.
pub const MAX_NESTING_DEPTH: usize = 256;

/// The most tables and queries one analyst statement reads once its CTEs are expanded
/// ([`table_references`]): 1,024. DataFusion's SQL planner plans a CTE anew for every reference
/// to it, so a chain of CTEs that each read the previous one twice doubles per level: 16
/// levels (a few hundred bytes of SQL) took 67 s and 880 MB to plan, 18 levels 1.7 GB, and 40
/// would exhaust memory (an abort) before any limit on the plan could see it.
pub const MAX_TABLE_REFERENCES: u64 = 1024;

/// The stack of the thread an analyst statement is planned on (256 MiB, reserved, not
/// committed: only the pages used are backed by memory).
pub const PLANNING_STACK_BYTES: usize = 256 * 1024 * 1024;

/// The stack of every thread that executes analysts' queries (64 MiB, reserved, not
/// committed): DataFusion evaluates an expression recursively, one call per level, and polls a
/// plan's streams one call per operator, on the runtime's worker threads, whose stacks tokio
/// makes 2 MiB; overflowing one aborts the process. A debug build used about 0.7 KiB per level
/// of `+` and 1 KiB per level of a total function (2,000 levels passed on 2 MiB, 3,000 and
/// 4,000 overflowed), so this holds 64 times the deepest expression and plan the limits on the
/// plan let through. Every program that executes analysts'
/// queries builds its runtime with [`execution_runtime`].
pub const EXECUTION_STACK_BYTES: usize = 64 * 1024 * 1024;

/// A multi-threaded tokio runtime builder (every driver the build has enabled) whose worker
/// threads have [`EXECUTION_STACK_BYTES`] stacks: `dpsql`, `dp-server`'s runtimes, the
/// Ballista scheduler and executor and the Python binding execute analysts' queries on one.
pub fn execution_runtime() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .thread_stack_size(EXECUTION_STACK_BYTES);
    builder
}

/// Refuses `sql` longer than [`MAX_STATEMENT_BYTES`].
pub fn check_statement_size(sql: &str) -> Result<()> {
    match sql.len() {
        n if n > MAX_STATEMENT_BYTES => plan_err!(
            "statement too long: {n} bytes, over the limit of {MAX_STATEMENT_BYTES} bytes \
             (max_statement_bytes)"
        ),
        _ => Ok(()),
    }
}

/// Refuses a parsed statement deeper than [`MAX_NESTING_DEPTH`] (the statement an `EXPLAIN`
/// explains and a `COPY`'s query included).
pub fn check_nesting_depth(statement: &DFStatement) -> Result<()> {
    let depth = match statement {
        DFStatement::Statement(statement) => nesting_depth(statement.as_ref(), MAX_NESTING_DEPTH),
        DFStatement::Explain(explain) => return check_nesting_depth(&explain.statement),
        DFStatement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(query) => nesting_depth(query.as_ref(), MAX_NESTING_DEPTH),
            CopyToSource::Relation(_) => Some(0),
        },
        DFStatement::CreateExternalTable(_) | DFStatement::Reset(_) => Some(0),
    };
    match depth {
        Some(depth) if depth <= MAX_NESTING_DEPTH => Ok(()),
        _ => plan_err!(
            "statement too deep: its nesting (operators, subqueries, set operations, CTEs, \
             joins) is over the limit of {MAX_NESTING_DEPTH} levels (max_nesting_depth)"
        ),
    }
}

/// Refuses a parsed statement that reads more than [`MAX_TABLE_REFERENCES`] tables once its
/// CTEs are expanded ([`table_references`]).
pub fn check_table_references(statement: &DFStatement) -> Result<()> {
    let references = match statement {
        DFStatement::Statement(statement) => table_references(statement.as_ref()),
        DFStatement::Explain(explain) => return check_table_references(&explain.statement),
        DFStatement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(query) => table_references(query.as_ref()),
            CopyToSource::Relation(_) => 1,
        },
        DFStatement::CreateExternalTable(_) | DFStatement::Reset(_) => 0,
    };
    match references {
        n if n > MAX_TABLE_REFERENCES => plan_err!(
            "statement too large: with its CTEs expanded (each reference to a CTE reads every \
             table the CTE reads), its tables and queries are over the limit of \
             {MAX_TABLE_REFERENCES} (max_table_references)"
        ),
        _ => Ok(()),
    }
}

/// The tables and queries `statement` reads with every reference to a CTE counted as the
/// tables and queries the CTE reads (saturating): what DataFusion's SQL planner plans. CTE names are matched by their
/// unqualified name wherever they occur after their definition (an approximation of SQL's
/// scopes that can only count more).
pub fn table_references(statement: &impl Visit) -> u64 {
    let mut count = References::default();
    let _ = statement.visit(&mut count);
    count.frames.iter().sum::<u64>().saturating_add(count.total)
}

#[derive(Default)]
struct References {
    /// The tables of each open query, innermost last.
    frames: Vec<u64>,
    /// Tables of queries closed at the top level.
    total: u64,
    /// Each CTE's tables, by its lower-case name.
    ctes: std::collections::HashMap<String, u64>,
    /// The queries that define a CTE (by address), with the CTE's name.
    definitions: std::collections::HashMap<*const Query, String>,
}

impl Visitor for References {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                let name = cte.alias.name.value.to_lowercase();
                self.definitions
                    .insert(cte.query.as_ref() as *const Query, name);
            }
        }
        // The query itself counts (a CTE of `SELECT 1` reads no table, and is planned anew for
        // every reference all the same).
        self.frames.push(1);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let tables = self.frames.pop().unwrap_or(0);
        match self.definitions.get(&(query as *const Query)) {
            // A CTE's tables count where it is referenced.
            Some(name) => {
                self.ctes.insert(name.clone(), tables);
            }
            None => match self.frames.last_mut() {
                Some(parent) => *parent = parent.saturating_add(tables),
                None => self.total = self.total.saturating_add(tables),
            },
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let tables = match factor {
            TableFactor::Table { name, .. } => match name.0.as_slice() {
                [only] => only
                    .as_ident()
                    .and_then(|ident| self.ctes.get(&ident.value.to_lowercase()))
                    .copied()
                    .unwrap_or(1),
                _ => 1,
            },
            _ => 0,
        };
        if let Some(frame) = self.frames.last_mut() {
            *frame = frame.saturating_add(tables);
        }
        ControlFlow::Continue(())
    }
}

/// The nesting depth of `statement` as the planner recurses over it: one level per expression
/// inside another (`1+1+1` is two `+` levels over three literals), per query inside another,
/// per set operation (`UNION`, ...) over its left side, per CTE of a `WITH` (a CTE can read the
/// previous one) and per table of a `FROM` (each join is a level). `None` once the depth is
/// over `limit`: the walk stops there, so it never recurses deeper than `limit`.
pub fn nesting_depth(statement: &impl Visit, limit: usize) -> Option<usize> {
    let mut depth = Depth {
        current: 0,
        deepest: 0,
        limit,
        levels: Vec::new(),
    };
    match statement.visit(&mut depth) {
        ControlFlow::Break(()) => None,
        ControlFlow::Continue(()) => Some(depth.deepest),
    }
}

struct Depth {
    current: usize,
    deepest: usize,
    limit: usize,
    /// The levels each open query and select added, removed when it closes.
    levels: Vec<usize>,
}

impl Depth {
    fn enter(&mut self, levels: usize) -> ControlFlow<()> {
        self.current = self.current.saturating_add(levels);
        self.deepest = self.deepest.max(self.current);
        match self.current > self.limit {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        }
    }

    fn open(&mut self, levels: usize) -> ControlFlow<()> {
        self.levels.push(levels);
        self.enter(levels)
    }

    fn close(&mut self) -> ControlFlow<()> {
        let levels = self.levels.pop().unwrap_or(0);
        self.current = self.current.saturating_sub(levels);
        ControlFlow::Continue(())
    }
}

/// The depth of a tree of set operations (without recursion: it can be thousands deep).
fn set_operation_depth(body: &SetExpr) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(body, 0usize)];
    while let Some((node, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        if let SetExpr::SetOperation { left, right, .. } = node {
            pending.push((left, depth + 1));
            pending.push((right, depth + 1));
        }
    }
    deepest
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let ctes = query.with.as_ref().map_or(0, |with| with.cte_tables.len());
        self.open(1 + ctes + set_operation_depth(&query.body))
    }

    fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        self.close()
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        let tables: usize = select.from.iter().map(|t| 1 + t.joins.len()).sum();
        self.open(tables)
    }

    fn post_visit_select(&mut self, _: &Select) -> ControlFlow<()> {
        self.close()
    }

    fn pre_visit_table_factor(&mut self, _: &TableFactor) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_table_factor(&mut self, _: &TableFactor) -> ControlFlow<()> {
        self.current = self.current.saturating_sub(1);
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.current = self.current.saturating_sub(1);
        ControlFlow::Continue(())
    }
}

/// Runs `work` to completion on a thread with a [`PLANNING_STACK_BYTES`] stack (on the
/// current tokio runtime, if any), and returns its result. DataFusion's planning recurses over
/// the statement; the threads of a tokio runtime have 2 MiB stacks, and overflowing one aborts
/// the process, so an analyst's statement is planned here. The thread is one of
/// [`PlanningThreads`]: an idle one if there is one, else a new one, so no statement waits for
/// another's planning, and a busy server does not start (and fault in the stack of) a thread
/// per statement.
pub async fn on_planning_stack<T, F>(work: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    // Already on one (the server plans a query, and `analyst_sql` inside it plans its
    // statement): go on here rather than take a second thread.
    if ON_PLANNING_THREAD.with(|on| on.get()) {
        return work.await;
    }
    let (send, receive) = futures::channel::oneshot::channel();
    let runtime = tokio::runtime::Handle::try_current().ok();
    PLANNING_THREADS.run(Box::new(move || {
        let result = match runtime {
            Some(runtime) => runtime.block_on(work),
            None => futures::executor::block_on(work),
        };
        let _ = send.send(result);
    }))?;
    receive.await.map_err(|_| {
        DataFusionError::Execution("the planning thread stopped without an answer".to_string())
    })?
}

thread_local! {
    /// Whether this thread is one of [`PlanningThreads`].
    static ON_PLANNING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One statement's planning, as [`on_planning_stack`] hands it to a planning thread.
type PlanningJob = Box<dyn FnOnce() + Send + 'static>;

/// The process's planning threads.
static PLANNING_THREADS: PlanningThreads = PlanningThreads::new();

/// Threads with [`PLANNING_STACK_BYTES`] stacks, kept for reuse: a job goes to an idle thread
/// or, when none is idle, to a new one (never queued behind another statement). A thread that
/// has waited [`PlanningThreads::IDLE`] for work ends, and at most
/// [`PlanningThreads::MAX_IDLE`] wait at once, so the stack pages a deep statement touched are
/// not held for long.
pub struct PlanningThreads {
    /// The idle threads, by id, with the sender of each one's work.
    idle: std::sync::Mutex<Vec<(u64, std::sync::mpsc::Sender<PlanningJob>)>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl PlanningThreads {
    /// How long an idle planning thread waits for work before it ends.
    const IDLE: std::time::Duration = std::time::Duration::from_secs(10);
    /// The most planning threads kept waiting for work.
    const MAX_IDLE: usize = 16;

    const fn new() -> Self {
        Self {
            idle: std::sync::Mutex::new(Vec::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock_idle(
        &self,
    ) -> std::sync::MutexGuard<'_, Vec<(u64, std::sync::mpsc::Sender<PlanningJob>)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `job` on an idle planning thread, or on a new one.
    fn run(&'static self, job: PlanningJob) -> Result<()> {
        let idle = self.lock_idle().pop();
        let job = match idle {
            // A thread taken from the list waits for this send (it leaves the list itself
            // before it ends), so the send only fails if that thread died.
            Some((_, sender)) => match sender.send(job) {
                Ok(()) => return Ok(()),
                Err(std::sync::mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::thread::Builder::new()
            .name("dp-planner".to_string())
            .stack_size(PLANNING_STACK_BYTES)
            .spawn(move || self.serve(id, job))
            .map(|_| ())
            .map_err(|e| plan_datafusion_err!("cannot start a planning thread: {e}"))
    }

    /// A planning thread's life: `job`, then each job sent to it while idle, until it has
    /// waited [`Self::IDLE`] or there are [`Self::MAX_IDLE`] idle threads already.
    fn serve(&self, id: u64, mut job: PlanningJob) {
        ON_PLANNING_THREAD.with(|on| on.set(true));
        let (sender, receiver) = std::sync::mpsc::channel::<PlanningJob>();
        loop {
            job();
            {
                let mut idle = self.lock_idle();
                if idle.len() >= Self::MAX_IDLE {
                    return;
                }
                idle.push((id, sender.clone()));
            }
            job = match receiver.recv_timeout(Self::IDLE) {
                Ok(next) => next,
                Err(_) => {
                    let mut idle = self.lock_idle();
                    match idle.iter().position(|(other, _)| *other == id) {
                        Some(at) => {
                            idle.swap_remove(at);
                            return;
                        }
                        // Taken from the list just now: its job is on the way.
                        None => {
                            drop(idle);
                            match receiver.recv() {
                                Ok(next) => next,
                                Err(_) => return,
                            }
                        }
                    }
                }
            };
        }
    }
}

/// What stops the planning of one statement on its planning thread: its deadline, and its
/// request's end (`dp-server`: the client gave up). Set by [`watch_planning`] for the thread's
/// current statement; read by [`planning_checkpoint`].
struct PlanningWatch {
    started: std::time::Instant,
    limit: Option<std::time::Duration>,
    abandoned: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

thread_local! {
    /// The watch over the statement planned on this thread, if its planner set one.
    static PLANNING_WATCH: std::cell::RefCell<Option<PlanningWatch>> =
        const { std::cell::RefCell::new(None) };
}

/// Ends the watch [`watch_planning`] set when dropped.
pub struct PlanningWatchGuard(());

impl Drop for PlanningWatchGuard {
    fn drop(&mut self) {
        PLANNING_WATCH.with(|watch| watch.borrow_mut().take());
    }
}

/// Watches the statement planned on this thread until the guard is dropped: from now,
/// [`planning_checkpoint`] fails once `limit` has passed (the session's
/// `query_timeout_seconds`) or `abandoned` is set (the request that wanted the plan is gone).
/// Planning runs on one thread from start to end ([`on_planning_stack`]), so a thread-local
/// watch reaches every rule that runs for it.
pub fn watch_planning(
    limit: Option<std::time::Duration>,
    abandoned: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> PlanningWatchGuard {
    PLANNING_WATCH.with(|watch| {
        *watch.borrow_mut() = Some(PlanningWatch {
            started: std::time::Instant::now(),
            limit,
            abandoned,
        })
    });
    PlanningWatchGuard(())
}

/// Fails when the statement planned on this thread must stop ([`watch_planning`]): past its
/// deadline (a resources error naming `query_timeout_seconds`), or abandoned. Without a watch
/// (`dpsql`, an embedding application), always `Ok`. Checked between the stages of
/// `dp-server`'s planning and between the optimiser's rules ([`PlanningCheckpoint`]): a
/// planning step in progress is not interrupted, so a statement stops at the end of the step
/// running at its deadline.
pub fn planning_checkpoint() -> Result<()> {
    PLANNING_WATCH.with(|watch| match watch.borrow().as_ref() {
        Some(watch) if watch.abandoned.load(std::sync::atomic::Ordering::SeqCst) => Err(
            DataFusionError::Execution("planning stopped: its request was abandoned".to_string()),
        ),
        Some(PlanningWatch {
            started,
            limit: Some(limit),
            ..
        }) if started.elapsed() > *limit => Err(DataFusionError::ResourcesExhausted(format!(
            "planning stopped: it ran over the limit of {} s (query_timeout_seconds)",
            limit.as_secs()
        ))),
        _ => Ok(()),
    })
}

/// A logical and physical optimiser rule that changes nothing and fails at
/// [`planning_checkpoint`]: a locked session runs one after each of its optimiser rules
/// ([`interleave_checkpoints`]), so that a statement's planning stops between rules once it is
/// past its deadline or abandoned, rather than running every rule to the end.
#[derive(Debug)]
pub struct PlanningCheckpoint;

/// The name of [`PlanningCheckpoint`] in a session's rule lists.
pub const PLANNING_CHECKPOINT: &str = "dp_planning_checkpoint";

impl datafusion::optimizer::OptimizerRule for PlanningCheckpoint {
    fn name(&self) -> &str {
        PLANNING_CHECKPOINT
    }

    fn rewrite(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
        _config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> Result<datafusion::common::tree_node::Transformed<datafusion::logical_expr::LogicalPlan>>
    {
        planning_checkpoint()?;
        Ok(datafusion::common::tree_node::Transformed::no(plan))
    }
}

impl datafusion::physical_optimizer::PhysicalOptimizerRule for PlanningCheckpoint {
    fn optimize(
        &self,
        plan: std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        _config: &datafusion::common::config::ConfigOptions,
    ) -> Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        planning_checkpoint()?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        PLANNING_CHECKPOINT
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `state` with a [`PlanningCheckpoint`] after each of its logical and physical optimiser
/// rules (none added twice).
pub fn interleave_checkpoints(
    state: datafusion::execution::SessionState,
) -> datafusion::execution::SessionState {
    use std::sync::Arc;
    if state
        .optimizer()
        .rules
        .iter()
        .any(|rule| rule.name() == PLANNING_CHECKPOINT)
    {
        return state;
    }
    let checkpoint = Arc::new(PlanningCheckpoint);
    let mut logical: Vec<Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>> = Vec::new();
    for rule in &state.optimizer().rules {
        logical.push(Arc::clone(rule));
        logical.push(Arc::clone(&checkpoint) as _);
    }
    let mut physical: Vec<
        Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>,
    > = Vec::new();
    for rule in state.physical_optimizers() {
        physical.push(Arc::clone(rule));
        physical.push(Arc::clone(&checkpoint) as _);
    }
    datafusion::execution::SessionStateBuilder::new_from_existing(state)
        .with_optimizer_rules(logical)
        .with_physical_optimizer_rules(physical)
        .build()
}

/// The owner's per-query deadline (`[limits] query_timeout_seconds`), kept in a locked
/// session's configuration ([`datafusion::prelude::SessionConfig::with_extension`]) by
/// [`crate::owner::Owner::lock_into`]; `dpsql --config` and `dp-server` (in process or onto a
/// cluster) stop a query's execution when it runs out ([`with_deadline`], [`query_deadline`]),
/// and a locked cluster's scheduler cancels a job still running then.
#[derive(Debug, Clone, Copy)]
pub struct QueryDeadline(pub std::time::Duration);

/// The deadline of `ctx`'s queries, if the owner set one.
pub fn query_deadline(ctx: &datafusion::prelude::SessionContext) -> Option<std::time::Duration> {
    // Read in place: `ctx.state()` would copy the whole state (every function's name).
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<QueryDeadline>()
        .map(|d| d.0)
}

/// The error of a query stopped at its deadline: one line naming the limit and its value.
pub fn deadline_error(limit: std::time::Duration) -> DataFusionError {
    DataFusionError::ResourcesExhausted(format!(
        "query stopped: it ran over the limit of {} s (query_timeout_seconds)",
        limit.as_secs()
    ))
}

/// `stream` with `ctx`'s deadline ([`with_deadline`]) when the owner set one, else as it is.
#[cfg(feature = "cli")]
pub fn within_session_deadline(
    ctx: &datafusion::prelude::SessionContext,
    stream: datafusion::execution::SendableRecordBatchStream,
) -> datafusion::execution::SendableRecordBatchStream {
    match query_deadline(ctx) {
        Some(limit) => with_deadline(stream, limit),
        None => stream,
    }
}

/// `stream`, ending with [`deadline_error`] once `limit` has passed since this call: dropping
/// the inner stream there stops the query's execution (DataFusion aborts its tasks). A
/// timeout around collecting is not enough for `dp-server`, which streams batches as they come.
#[cfg(feature = "cli")]
pub fn with_deadline(
    stream: datafusion::execution::SendableRecordBatchStream,
    limit: std::time::Duration,
) -> datafusion::execution::SendableRecordBatchStream {
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use futures::StreamExt;
    let schema = stream.schema();
    let sleep = Box::pin(tokio::time::sleep(limit));
    let state = (Some(stream), sleep);
    let limited = futures::stream::unfold(state, move |(stream, mut sleep)| async move {
        let mut stream = stream?;
        tokio::select! {
            biased;
            _ = &mut sleep => Some((Err(deadline_error(limit)), (None, sleep))),
            next = stream.next() => next.map(|item| (item, (Some(stream), sleep))),
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, limited))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of this test's own, so other tests' statements do not take its threads.
    fn pool() -> &'static PlanningThreads {
        Box::leak(Box::new(PlanningThreads::new()))
    }

    /// The id of the thread `threads` runs a job on.
    fn thread_of(threads: &'static PlanningThreads) -> std::thread::ThreadId {
        let (send, receive) = std::sync::mpsc::channel();
        threads
            .run(Box::new(move || {
                send.send(std::thread::current().id()).unwrap()
            }))
            .unwrap();
        receive.recv().unwrap()
    }

    /// Waits until `threads` has `n` idle threads (a thread lists itself just after its job's
    /// answer is sent), for at most 10 s.
    fn until_idle(threads: &PlanningThreads, n: usize) {
        let start = std::time::Instant::now();
        while threads.lock_idle().len() != n {
            assert!(start.elapsed().as_secs() < 10, "never {n} idle threads");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Each reference to a CTE counts the tables and queries the CTE reads: a chain that
    /// reads the previous CTE twice a level doubles (refused at 10 levels, 2,047), one that
    /// reads it once grows by one a level.
    #[test]
    fn a_cte_counts_what_it_reads_at_each_reference() {
        let parse = |sql: &str| {
            let dialect = datafusion::sql::sqlparser::dialect::GenericDialect {};
            datafusion::sql::parser::DFParser::parse_sql_with_dialect(sql, &dialect)
                .unwrap()
                .pop_front()
                .unwrap()
        };
        let chain = |n: usize, reads: &str| {
            let mut ctes = vec!["c0 AS (SELECT 1 AS x)".to_string()];
            for i in 1..=n {
                ctes.push(format!(
                    "c{i} AS (SELECT a.x FROM {})",
                    reads.replace("{p}", &format!("c{}", i - 1))
                ));
            }
            format!("WITH {} SELECT x FROM c{n}", ctes.join(", "))
        };
        let twice = "{p} a CROSS JOIN {p} b";
        let references = |sql: &str| match parse(sql) {
            DFStatement::Statement(s) => table_references(s.as_ref()),
            _ => unreachable!(),
        };
        // c0 is one query; each level, its own query and two copies of the last.
        assert_eq!(references(&chain(9, twice)), 1023 + 1);
        assert!(check_table_references(&parse(&chain(9, twice))).is_ok());
        let refused = check_table_references(&parse(&chain(10, twice))).unwrap_err();
        assert!(
            refused.to_string().contains("max_table_references"),
            "{refused}"
        );
        assert!(check_table_references(&parse(&chain(60, twice))).is_err());
        assert_eq!(references(&chain(250, "{p} a")), 251 + 1);
        // Tables that are not CTEs count once each, subqueries too.
        assert_eq!(
            references("SELECT 1 FROM t JOIN u ON true WHERE EXISTS (SELECT 1 FROM v)"),
            1 + 2 + 1 + 1
        );
    }

    /// A watched planning stops at its checkpoints once abandoned or past its deadline, with
    /// the deadline's error naming the limit; unwatched (or after its guard), never.
    #[test]
    fn a_watched_planning_stops_at_its_checkpoints() {
        use std::sync::atomic::{AtomicBool, Ordering};
        assert!(planning_checkpoint().is_ok());
        let abandoned = std::sync::Arc::new(AtomicBool::new(false));
        {
            let _watch = watch_planning(None, std::sync::Arc::clone(&abandoned));
            assert!(planning_checkpoint().is_ok());
            abandoned.store(true, Ordering::SeqCst);
            let err = planning_checkpoint().unwrap_err().to_string();
            assert!(err.contains("abandoned"), "{err}");
        }
        assert!(planning_checkpoint().is_ok());
        let _watch = watch_planning(
            Some(std::time::Duration::from_millis(1)),
            std::sync::Arc::new(AtomicBool::new(false)),
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        let err = planning_checkpoint().unwrap_err().to_string();
        assert!(err.contains("query_timeout_seconds"), "{err}");
    }

    /// A checkpoint follows each optimiser rule, once however often the state is rebuilt.
    #[test]
    fn checkpoints_follow_every_optimiser_rule_once() {
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .build();
        let rules = state.optimizer().rules.len();
        let physical = state.physical_optimizers().len();
        let state = interleave_checkpoints(interleave_checkpoints(state));
        assert_eq!(state.optimizer().rules.len(), 2 * rules);
        assert_eq!(state.physical_optimizers().len(), 2 * physical);
        assert!(state
            .optimizer()
            .rules
            .iter()
            .skip(1)
            .step_by(2)
            .all(|rule| rule.name() == PLANNING_CHECKPOINT));
    }

    #[test]
    fn an_idle_planning_thread_is_reused() {
        let threads = pool();
        let first = thread_of(threads);
        until_idle(threads, 1);
        assert_eq!(thread_of(threads), first);
        assert_ne!(first, std::thread::current().id());
    }

    #[test]
    fn a_statement_planned_within_another_stays_on_its_thread() {
        let (outer, inner) = futures::executor::block_on(on_planning_stack(async {
            let outer = std::thread::current().id();
            let inner = on_planning_stack(async { Ok(std::thread::current().id()) }).await?;
            Ok((outer, inner))
        }))
        .unwrap();
        assert_eq!(outer, inner);
        assert_ne!(outer, std::thread::current().id());
    }

    #[test]
    fn concurrent_statements_each_get_a_thread_and_an_answer() {
        // 40 statements that each wait until all 40 have started: they can only finish if
        // none is queued behind another (more than MAX_IDLE, so new threads are started and
        // the surplus ends).
        let started = std::sync::Arc::new(std::sync::Barrier::new(40));
        let handles: Vec<_> = (0..40)
            .map(|i| {
                let started = std::sync::Arc::clone(&started);
                std::thread::spawn(move || {
                    futures::executor::block_on(on_planning_stack(async move {
                        started.wait();
                        Ok(i)
                    }))
                })
            })
            .collect();
        let answers: Vec<i32> = handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        assert_eq!(answers, (0..40).collect::<Vec<_>>());
        assert!(PLANNING_THREADS.lock_idle().len() <= PlanningThreads::MAX_IDLE);
    }

    #[test]
    fn a_panicking_statement_is_an_error_and_the_pool_goes_on() {
        let result: Result<()> =
            futures::executor::block_on(on_planning_stack(async { panic!("planner bug") }));
        assert!(result
            .unwrap_err()
            .to_string()
            .contains("stopped without an answer"));
        let threads = pool();
        let (send, receive) = std::sync::mpsc::channel::<()>();
        threads
            .run(Box::new(move || {
                let _keep = send;
                panic!("planner bug")
            }))
            .unwrap();
        // The panicking thread never lists itself as idle; the next job gets a new thread.
        assert!(receive.recv().is_err());
        thread_of(threads);
        until_idle(threads, 1);
    }
}
