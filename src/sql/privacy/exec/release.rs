//! One charge buys one release.
//!
//! A query is charged when its DP calls are bound (in the analyzer), but a bound plan could be
//! run many times, each time with fresh noise: a physical plan executed twice, or a bound
//! logical plan planned twice (from Rust), would average the noise away for one charge. Two
//! guards make every charge buy exactly one draw:
//! - each bound call carries a
//!   [`ReleaseTicket`](crate::sql::functions::aggregate::ReleaseTicket), taken when a physical plan is made from it
//!   ([`ReleaseOnce`], a physical optimizer rule): a second physical plan of the same bound
//!   call is refused (planning the SQL again binds, and charges, anew);
//! - every aggregation with DP calls (the final or single-stage one draws the noise) is
//!   wrapped in a [`ReleaseOnceExec`], which runs each of its output partitions at most once:
//!   a second execution of the same physical plan is refused.
//!
//! [`ReleaseOnceExec`] also withholds the text of every error raised below it: rows of
//! protected tables are read only below DP aggregations, and an error's text can hold their
//! values (Arrow's "Cannot cast string 'HIV' ..."). So partial aggregations with DP calls are
//! wrapped too (they draw no noise and run once anyway): on Ballista they run on executors,
//! in a stage of their own. The planner rule makes expressions total ([`crate::sql::privacy::rewrite::total`]), so
//! what remains are operators' errors; their occurrence still shows.
//!
//! Recursive terms with DP calls are refused by the planner rule. On Ballista each task runs
//! a freshly decoded copy of its stage; the scheduler runs each partition once (a retried
//! task after an executor failure draws again: its first result was never delivered).

use crate::sql::functions::aggregate::{DpAggregate, ReleaseTicket};
use crate::sql::privacy::exec::pass_through::{pass_through_plan, PassThrough};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_err, plan_err, DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
};
use futures::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn dp_calls(aggregate: &AggregateExec) -> Vec<&DpAggregate> {
    aggregate
        .aggr_expr()
        .iter()
        .filter_map(|e| e.fun().inner().downcast_ref::<DpAggregate>())
        .collect()
}

/// The tickets not yet taken of every bound DP call in `plan` (subqueries included).
///
/// `EXPLAIN` without `ANALYZE` makes a physical plan of its query only to print it (DataFusion's
/// `ExplainExec` keeps the text, never the plan), so the query planner puts these back once it
/// has: the charge that `EXPLAIN` made still buys at most one release. Ballista's static
/// planner needs it, as it plans an explained query twice (the physical plan, then its stages
/// for `distributed_plan`: ballista-scheduler 55 `distributed_explain.rs`).
pub fn untaken_tickets(plan: &LogicalPlan) -> Result<Vec<ReleaseTicket>> {
    let mut tickets: Vec<ReleaseTicket> = Vec::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::AggregateFunction(f) = e {
                    if let Some(bound) = f
                        .func
                        .inner()
                        .downcast_ref::<DpAggregate>()
                        .and_then(|call| call.plan())
                    {
                        if !bound.ticket.taken() {
                            tickets.push(bound.ticket.clone());
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(tickets)
}

/// The physical optimizer rule (see the module docs). Runs last.
#[derive(Debug, Default)]
pub struct ReleaseOnce;

pub const RELEASE_RULE_NAME: &str = "datafusion_dp_release_once";

impl PhysicalOptimizerRule for ReleaseOnce {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Take every ticket of the plan once (an aggregation's calls appear in its partial
        // and its final stage: the same Arc'd call plan).
        let mut seen: Vec<*const ()> = Vec::new();
        plan.apply(|node| {
            if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
                for call in dp_calls(aggregate) {
                    let Some(bound) = call.plan() else { continue };
                    let key = Arc::as_ptr(bound) as *const ();
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key);
                    if !bound.ticket.take() {
                        return plan_err!(
                            "{}: this bound query was already planned for execution once; its \
                             noise is drawn once per charge. Plan it again from SQL (a new \
                             charge) to get a new release",
                            call.function().name()
                        );
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        plan.transform_up(|node| {
            // Partial aggregations too: they draw no noise, but they read the protected rows
            // (on a Ballista executor, in a stage of their own), and errors' text is withheld
            // where it is raised.
            let dp_aggregation = node
                .downcast_ref::<AggregateExec>()
                .is_some_and(|a| !dp_calls(a).is_empty());
            if dp_aggregation {
                Ok(Transformed::yes(
                    Arc::new(ReleaseOnceExec::new(node)) as Arc<dyn ExecutionPlan>
                ))
            } else {
                Ok(Transformed::no(node))
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        RELEASE_RULE_NAME
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Runs each output partition of a noise-drawing aggregation at most once (module docs).
#[derive(Debug)]
pub struct ReleaseOnceExec {
    input: Arc<dyn ExecutionPlan>,
    executed: Vec<AtomicBool>,
    /// The DP functions of the aggregation, named in a withheld error.
    functions: String,
}

/// The error that replaces `error`, raised while reading protected rows (module docs). A
/// resources error (memory refused by the query's pool) stays one, so that the server can
/// name the limit that refused it (`crate::server::memory::name_the_limit`): an analyst whose
/// query was refused memory is told so, not that a row's error was withheld. Its occurrence
/// shows, as every error's does; its kind says that it was memory.
fn withheld(functions: &str, error: &DataFusionError) -> DataFusionError {
    if matches!(error.find_root(), DataFusionError::ResourcesExhausted(_)) {
        return DataFusionError::ResourcesExhausted(format!(
            "{functions}: the query was refused memory while reading protected rows (the \
             error's text is withheld)"
        ));
    }
    DataFusionError::Execution(format!(
        "{functions}: the query failed while reading protected rows. The error is withheld: its \
         text can contain their values. (In a DP query an expression that fails on a row gives \
         NULL; this error came from reading the table, e.g. a value that does not parse as its \
         column's type, or from an operator, e.g. memory.) The data owner can see it by reading \
         the table with its protection lifted, in a session of their own"
    ))
}

impl ReleaseOnceExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let partitions = input.output_partitioning().partition_count();
        let mut functions: Vec<&str> = input
            .downcast_ref::<AggregateExec>()
            .map(|a| dp_calls(a).iter().map(|c| c.function().name()).collect())
            .unwrap_or_default();
        functions.dedup();
        let functions = if functions.is_empty() {
            "DP aggregate".to_string()
        } else {
            functions.join(", ")
        };
        Self {
            input,
            executed: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
            functions,
        }
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for ReleaseOnceExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "ReleaseOnceExec")
    }
}

impl PassThrough for ReleaseOnceExec {
    const NAME: &'static str = "ReleaseOnceExec";
    const BENEFITS_FROM_INPUT_PARTITIONING: bool = true;

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        ReleaseOnceExec::new(input)
    }

    fn execute_input(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(flag) = self.executed.get(partition) else {
            return exec_err!("ReleaseOnceExec: no partition {partition}");
        };
        if flag.swap(true, Ordering::SeqCst) {
            return exec_err!(
                "this DP release (partition {partition}) was already executed; its noise is \
                 drawn once per charge. Plan the query again from SQL (a new charge) to run it again"
            );
        }
        let functions = self.functions.clone();
        let stream = self
            .input
            .execute(partition, context)
            .map_err(|e| withheld(&functions, &e))?;
        let schema = stream.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.map(move |batch| batch.map_err(|e| withheld(&functions, &e))),
        )))
    }
}

pass_through_plan!(ReleaseOnceExec);
