//! Every operator that multiplies its input yields to the runtime: [`YieldFromJoins`], a
//! physical optimizer rule that [`crate::sql::privacy::session::lock::lock`] adds to a locked session after DataFusion's
//! own rules, so every plan of a locked session gets it: `dp-server`'s, `dpsql --config`'s
//! and a locked Ballista scheduler's (whose stages carry it to the executors). A trusted
//! session (the owner's, `dpsql` without `--config`, a trusted Ballista client) keeps
//! DataFusion's plans: its queries are stopped as DataFusion stops them.
//!
//! A query's tasks are stopped (its stream dropped, its tasks aborted: a deadline,
//! `CancelFlightInfo`, a client gone, Ctrl-C in the shell) only when they next yield to the
//! tokio runtime. DataFusion's own `EnsureCooperative` rule (55) wraps only leaves and
//! exchanges in a `CooperativeExec`. A join emits many batches per batch it reads (a cross
//! join, a probe batch's rows against the whole build side), and an aggregation pulling from
//! it never reaches a leaf: its task never yielded, and a stopped query kept its threads busy
//! for ever (in `dp-server`, its analyst's runtime; in the shell, the process's). With every
//! join's (every operator of two inputs or more) and unnest's output in a [`YieldExec`], the
//! task yields every [`YIELD_EVERY`] batches of that output, and a stopped query ends within
//! about a second (`tests/server_limits.rs`, `a_stopped_query_stops_using_the_cpu`;
//! `tests/limits.rs`, `a_locked_session_s_cross_join_stops_at_a_timeout`).
//!
//! [`YieldExec`] counts its own batches. DataFusion's `CooperativeExec` spends the task's
//! tokio budget (128 units) before it polls its input, and gives it back if the input is not
//! ready: nested more than 128 deep in one task (a chain of 130 cross joins, each wrapped),
//! a poll ran out of budget before reaching the leaves, every time, and the query never
//! ended (`tests/limits.rs`, `a_locked_session_s_long_join_chain_is_answered`). DataFusion's
//! rule avoids nesting its wrappers for this reason; a count per stream cannot run out.

use crate::sql::privacy::exec::pass_through::{pass_through_plan, PassThrough};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_err, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::unnest::UnnestExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The rule (see the module docs). Idempotent: a plan optimised twice gets one wrapper per
/// operator.
#[derive(Debug, Default)]
pub struct YieldFromJoins;

pub const COOPERATIVE_RULE_NAME: &str = "datafusion_dp_yield_from_joins";

/// Batches of a wrapped operator's output between two yields.
pub const YIELD_EVERY: usize = 128;

/// Whether `node` can emit many batches for each it reads without reaching a leaf.
pub(crate) fn multiplies(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.children().len() >= 2 || node.downcast_ref::<UnnestExec>().is_some()
}

impl PhysicalOptimizerRule for YieldFromJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if multiplies(&node) {
                return Ok(Transformed::yes(
                    Arc::new(YieldExec::new(node)) as Arc<dyn ExecutionPlan>
                ));
            }
            // A wrapper directly above one just added (the plan was optimised before): one
            // is enough.
            if let Some(outer) = node.downcast_ref::<YieldExec>() {
                if outer.input().downcast_ref::<YieldExec>().is_some() {
                    return Ok(Transformed::yes(Arc::clone(outer.input())));
                }
            }
            Ok(Transformed::no(node))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        COOPERATIVE_RULE_NAME
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Its input's output, unchanged, yielding to the runtime after every [`YIELD_EVERY`]
/// batches (see the module docs).
#[derive(Debug)]
pub struct YieldExec {
    input: Arc<dyn ExecutionPlan>,
}

impl YieldExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for YieldExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "YieldExec: every {YIELD_EVERY} batches")
    }
}

impl PassThrough for YieldExec {
    const NAME: &'static str = "YieldExec";
    const BENEFITS_FROM_INPUT_PARTITIONING: bool = false;

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        YieldExec::new(input)
    }

    fn execute_input(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            Yielding {
                input,
                since_yield: 0,
            },
        )))
    }
}

pass_through_plan!(YieldExec);

/// A stream that returns `Pending` (waking its task at once) after every [`YIELD_EVERY`]
/// items, so the task goes back to the runtime, which ends it there if it was aborted.
struct Yielding {
    input: SendableRecordBatchStream,
    since_yield: usize,
}

impl Stream for Yielding {
    type Item = <SendableRecordBatchStream as Stream>::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.since_yield >= YIELD_EVERY {
            self.since_yield = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = self.input.poll_next_unpin(cx);
        if next.is_ready() {
            self.since_yield += 1;
        }
        next
    }
}

/// A query's cancellation, seen inside expression evaluation. A stopped query's tasks end at
/// their next yield, but one batch of a function over large values (a total form's fallback
/// by halves, 64 KiB strings through a chain of calls) can run for seconds without one: a
/// cancelled query burned a core for 4-13 s more (issue 42). The server puts one of these
/// in the configuration its query's physical plan is made with ([`QueryCancellation::install`]),
/// sets it when the query's stream is dropped, and every total form
/// ([`crate::sql::privacy::udf::total`]) checks it before each call and each half of its
/// fallback ([`check_cancelled`]): the query stops within one function call on one batch.
#[derive(Debug, Clone, Default)]
pub struct QueryCancellation {
    cancelled: Arc<std::sync::atomic::AtomicBool>,
}

impl QueryCancellation {
    /// Installs a new cancellation in `config` (a query's own copy of its session's
    /// configuration, before its physical plan is made) and returns it.
    pub fn install(config: &mut ConfigOptions) -> Self {
        let cancellation = Self::default();
        config.extensions.insert(cancellation.clone());
        cancellation
    }

    /// Cancels the query: its next checked function call fails.
    pub fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A guard that cancels the query when dropped (its stream's end, whatever ended it).
    pub fn on_drop(self) -> CancelOnDrop {
        CancelOnDrop(self)
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Cancels its query when dropped ([`QueryCancellation::on_drop`]).
#[derive(Debug)]
pub struct CancelOnDrop(QueryCancellation);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// An error when the query whose configuration is `config` was cancelled
/// ([`QueryCancellation`]); `Ok` otherwise, and for queries without one.
pub fn check_cancelled(config: &ConfigOptions) -> Result<()> {
    match config.extensions.get::<QueryCancellation>() {
        Some(cancellation) if cancellation.is_cancelled() => {
            exec_err!("the query was stopped (cancelled, past its deadline, or its client left)")
        }
        _ => Ok(()),
    }
}

impl datafusion::common::config::ConfigExtension for QueryCancellation {
    const PREFIX: &'static str = "datafusion_dp_query";
}

impl datafusion::common::config::ExtensionOptions for QueryCancellation {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn cloned(&self) -> Box<dyn datafusion::common::config::ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, _value: &str) -> Result<()> {
        datafusion::common::config_err!("{key}: not an option")
    }

    fn entries(&self) -> Vec<datafusion::common::config::ConfigEntry> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::prelude::SessionContext;

    /// (operators of two inputs or more, those directly under a `YieldExec`, `YieldExec`s
    /// directly under another).
    fn count(plan: &Arc<dyn ExecutionPlan>) -> (usize, usize, usize) {
        let (mut joins, mut covered, mut doubled) = (0, 0, 0);
        plan.apply(|node| {
            if node.children().len() >= 2 {
                joins += 1;
            }
            if let Some(wrapper) = node.downcast_ref::<YieldExec>() {
                if wrapper.input().children().len() >= 2 {
                    covered += 1;
                }
                if wrapper.input().downcast_ref::<YieldExec>().is_some() {
                    doubled += 1;
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        (joins, covered, doubled)
    }

    /// Every join's output is wrapped once, even when the rule runs twice, other operators
    /// are left as they are (DataFusion's own rule wraps the leaves), and the result is the
    /// same.
    #[tokio::test]
    async fn wraps_every_join_once() {
        let ctx = SessionContext::new();
        let plan = ctx
            .sql(
                "SELECT count(*) AS n FROM range(10) a CROSS JOIN range(10) b \
                 JOIN range(5) c ON b.value = c.value",
            )
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert_eq!(count(&plan), (2, 0, 0), "DataFusion's own rules");
        let config = ConfigOptions::default();
        let wrapped = YieldFromJoins.optimize(plan, &config).unwrap();
        assert_eq!(count(&wrapped), (2, 2, 0));
        let twice = YieldFromJoins
            .optimize(Arc::clone(&wrapped), &config)
            .unwrap();
        assert_eq!(count(&twice), (2, 2, 0));
        let batches = datafusion::physical_plan::collect(twice, ctx.task_ctx())
            .await
            .unwrap();
        let n = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(n, 50);
    }
}
