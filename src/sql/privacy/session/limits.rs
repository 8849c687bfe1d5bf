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
//!    counted) and refuses it over [`MAX_NESTING_DEPTH`];
//! 3. plans it on a thread with a [`PLANNING_STACK_BYTES`] stack ([`on_planning_stack`]), far
//!    more than a statement within the limits needs, so that what passes the limits cannot
//!    overflow either.

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

/// The stack of the thread an analyst statement is planned on (256 MiB, reserved, not
/// committed: only the pages used are backed by memory).
pub const PLANNING_STACK_BYTES: usize = 256 * 1024 * 1024;

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

/// Runs `work` to completion on a new thread with a [`PLANNING_STACK_BYTES`] stack (on the
/// current tokio runtime, if any), and returns its result. DataFusion's planning recurses over
/// the statement; the threads of a tokio runtime have 2 MiB stacks, and overflowing one aborts
/// the process, so an analyst's statement is planned here.
pub async fn on_planning_stack<T, F>(work: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let (send, receive) = futures::channel::oneshot::channel();
    let runtime = tokio::runtime::Handle::try_current().ok();
    std::thread::Builder::new()
        .name("dp-planner".to_string())
        .stack_size(PLANNING_STACK_BYTES)
        .spawn(move || {
            let result = match runtime {
                Some(runtime) => runtime.block_on(work),
                None => futures::executor::block_on(work),
            };
            let _ = send.send(result);
        })
        .map_err(|e| plan_datafusion_err!("cannot start a planning thread: {e}"))?;
    receive.await.map_err(|_| {
        DataFusionError::Execution("the planning thread stopped without an answer".to_string())
    })?
}

/// The owner's per-query deadline (`[limits] query_timeout_seconds`), kept in a locked
/// session's configuration ([`datafusion::prelude::SessionConfig::with_extension`]) by
/// [`crate::owner::Owner::locked_session`]; `dpsql --config` and `dp-server` stop a query's
/// execution when it runs out ([`with_deadline`], [`query_deadline`]).
#[derive(Debug, Clone, Copy)]
pub struct QueryDeadline(pub std::time::Duration);

/// The deadline of `ctx`'s queries, if the owner set one.
pub fn query_deadline(ctx: &datafusion::prelude::SessionContext) -> Option<std::time::Duration> {
    ctx.state()
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
