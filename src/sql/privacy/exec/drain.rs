//! An operator over protected rows never stops reading an input early because of what another
//! input held (issue 41: "constant-shape execution").
//!
//! DataFusion's hash and cross joins read their build side first and skip the probe side when
//! the build side is empty (a hash join also when every build key is NULL); a nested-loop join
//! likewise; a join or a limit that has produced what it needs stops pulling from its inputs.
//! With both sides protected, whether the probe side ran at all depended on one person: in
//! `(SELECT * FROM visits WHERE patient_id = K) a JOIN (SELECT patient_id, sha256(repeat(...))
//! FROM visits) b ON ...`, the costly side ran only when patient K was in the table (0.18 s and
//! 253 MB against 0.02 s and 68 MB), and a probe side over the per-query memory gave an error
//! instead of an answer. (`PublicBuildSide` builds a public side first; that covers joins
//! with public relations, not joins of two protected ones.)
//!
//! [`DrainInputs`], a physical rule, wraps every join and limit of a plan that reads a
//! protected table: each input in a [`DrainOnDropExec`], and the operator in a
//! [`DrainedExec`]. When the operator's output ends, `DrainedExec` drops the operator's stream
//! (and with it its inputs' streams); an input dropped before its end hands its stream to
//! `DrainedExec`, which reads it to its end, discarding its batches, before it ends its own
//! output. Every input is then read in full whatever the other held, and an error an input
//! raises on the way is the query's, as it would be had the operator read it. A query stopped
//! from outside (its deadline, a cancel) drops `DrainedExec` itself, which drains nothing.

use crate::sql::privacy::exec::pass_through::{pass_through_plan, PassThrough};
use crate::sql::privacy::exec::protected_scan::ProtectedScanExec;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec,
};
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// How the wrapped operator is rebuilt over its wrapped inputs (their properties are their
/// inputs').
const RECOMPUTE: ReplaceChildrenOptions =
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);

/// The rule's name.
pub const DRAIN_RULE_NAME: &str = "datafusion_dp_drain_inputs";

/// The rule (module docs). Idempotent: a wrapped operator is not wrapped again.
#[derive(Debug, Default)]
pub struct DrainInputs;

/// Whether `plan` scans a protected table (hidden from the optimiser: a locked DP query).
pub fn reads_protected(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| Ok(node.downcast_ref::<ProtectedScanExec>().is_some()))
}

/// Whether `node` may stop reading an input before its end: a join or a limit.
fn may_stop_early(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<HashJoinExec>().is_some()
        || node.downcast_ref::<NestedLoopJoinExec>().is_some()
        || node.downcast_ref::<CrossJoinExec>().is_some()
        || node.downcast_ref::<SortMergeJoinExec>().is_some()
        || node.downcast_ref::<SymmetricHashJoinExec>().is_some()
        || node.downcast_ref::<GlobalLimitExec>().is_some()
        || node.downcast_ref::<LocalLimitExec>().is_some()
}

impl PhysicalOptimizerRule for DrainInputs {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !reads_protected(&plan)? {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            if !may_stop_early(&node) {
                return Ok(Transformed::no(node));
            }
            // Already wrapped (the plan was optimised before).
            if node
                .children()
                .iter()
                .all(|c| c.downcast_ref::<DrainOnDropExec>().is_some())
            {
                return Ok(Transformed::no(node));
            }
            let mut protected = false;
            for child in node.children() {
                protected |= reads_protected(child)?;
            }
            if !protected {
                return Ok(Transformed::no(node));
            }
            let children = node
                .children()
                .into_iter()
                .map(|c| Arc::new(DrainOnDropExec::new(Arc::clone(c))) as Arc<dyn ExecutionPlan>)
                .collect();
            let wrapped = Arc::clone(&node).replace_children(children, RECOMPUTE)?;
            Ok(Transformed::yes(
                Arc::new(DrainedExec::new(wrapped)) as Arc<dyn ExecutionPlan>
            ))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        DRAIN_RULE_NAME
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The streams of one input that were dropped before their end, waiting to be drained.
#[derive(Default)]
struct Undrained(Mutex<Vec<SendableRecordBatchStream>>);

impl std::fmt::Debug for Undrained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Undrained({})", self.lock().len())
    }
}

impl Undrained {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SendableRecordBatchStream>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An input of an operator that may stop reading it: its output unchanged; its stream, if
/// dropped before its end, is kept for the [`DrainedExec`] above to read to its end.
#[derive(Debug)]
pub struct DrainOnDropExec {
    input: Arc<dyn ExecutionPlan>,
    undrained: Arc<Undrained>,
}

impl DrainOnDropExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            input,
            undrained: Arc::default(),
        }
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for DrainOnDropExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "DrainOnDropExec")
    }
}

impl PassThrough for DrainOnDropExec {
    const NAME: &'static str = "DrainOnDropExec";
    const BENEFITS_FROM_INPUT_PARTITIONING: bool = false;

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        DrainOnDropExec::new(input)
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
            DrainOnDropStream {
                input: Some(input),
                undrained: Arc::clone(&self.undrained),
            },
        )))
    }
}

pass_through_plan!(DrainOnDropExec);

/// [`DrainOnDropExec`]'s stream.
struct DrainOnDropStream {
    /// `None` once it has ended.
    input: Option<SendableRecordBatchStream>,
    undrained: Arc<Undrained>,
}

impl Stream for DrainOnDropStream {
    type Item = <SendableRecordBatchStream as Stream>::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(input) = self.input.as_mut() else {
            return Poll::Ready(None);
        };
        let next = input.poll_next_unpin(cx);
        if let Poll::Ready(None) = next {
            self.input = None;
        }
        next
    }
}

impl Drop for DrainOnDropStream {
    fn drop(&mut self) {
        if let Some(input) = self.input.take() {
            self.undrained.lock().push(input);
        }
    }
}

/// An operator that may stop reading its inputs (its inputs each in a [`DrainOnDropExec`]):
/// its output unchanged, then, before its end, every input stream it dropped read to its end.
#[derive(Debug)]
pub struct DrainedExec {
    input: Arc<dyn ExecutionPlan>,
    /// The [`DrainOnDropExec`]s directly under `input`.
    inputs: Vec<Arc<Undrained>>,
}

impl DrainedExec {
    /// `input` (whose children are [`DrainOnDropExec`]s, as [`DrainInputs`] makes them)
    /// draining what it leaves of them.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        // The `DrainOnDropExec`s under it and under no other `DrainedExec`: its operator's
        // inputs, wherever later rules put wrappers of their own (a `YieldExec`) between.
        let mut inputs = Vec::new();
        let mut pending = vec![&input];
        while let Some(node) = pending.pop() {
            if let Some(drain) = node.downcast_ref::<DrainOnDropExec>() {
                inputs.push(Arc::clone(&drain.undrained));
            } else if node.downcast_ref::<DrainedExec>().is_none() {
                pending.extend(node.children());
            }
        }
        Self { input, inputs }
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for DrainedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "DrainedExec: reads every input to its end")
    }
}

impl PassThrough for DrainedExec {
    const NAME: &'static str = "DrainedExec";
    const BENEFITS_FROM_INPUT_PARTITIONING: bool = false;

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        DrainedExec::new(input)
    }

    fn execute_input(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let output = self.input.execute(partition, context)?;
        let schema = output.schema();
        let state = Draining {
            output: Some(output),
            inputs: self.inputs.clone(),
            ended: false,
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            if let Some(output) = state.output.as_mut() {
                match output.next().await {
                    Some(item) => return Some((item, state)),
                    // Dropping the operator's stream drops its inputs' streams, and those it
                    // did not read to their end are handed to `inputs`.
                    None => state.output = None,
                }
            }
            if state.ended {
                return None;
            }
            state.ended = true;
            for input in &state.inputs {
                loop {
                    let pending = std::mem::take(&mut *input.lock());
                    if pending.is_empty() {
                        break;
                    }
                    for mut stream in pending {
                        while let Some(item) = stream.next().await {
                            if let Err(e) = item {
                                return Some((Err(e), state));
                            }
                        }
                    }
                }
            }
            None
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

pass_through_plan!(DrainedExec);

/// [`DrainedExec`]'s stream state.
struct Draining {
    output: Option<SendableRecordBatchStream>,
    inputs: Vec<Arc<Undrained>>,
    ended: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::common::{JoinType, NullEquality};
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_plan::joins::utils::JoinOn;
    use datafusion::physical_plan::joins::PartitionMode;
    use datafusion::physical_plan::test::TestMemoryExec;
    use datafusion::physical_plan::PlanProperties;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An input that counts the batches read from it.
    #[derive(Debug)]
    struct Counted {
        input: Arc<dyn ExecutionPlan>,
        read: Arc<AtomicUsize>,
    }

    impl DisplayAs for Counted {
        fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "Counted")
        }
    }

    impl ExecutionPlan for Counted {
        fn name(&self) -> &str {
            "Counted"
        }
        fn properties(&self) -> &Arc<PlanProperties> {
            self.input.properties()
        }
        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            vec![&self.input]
        }
        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
        ) -> Result<TreeNodeRecursion> {
            Ok(TreeNodeRecursion::Continue)
        }
        fn with_new_children(
            self: Arc<Self>,
            mut children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            Ok(Arc::new(Counted {
                input: children.swap_remove(0),
                read: Arc::clone(&self.read),
            }))
        }
        fn execute(
            &self,
            partition: usize,
            context: Arc<TaskContext>,
        ) -> Result<SendableRecordBatchStream> {
            let input = self.input.execute(partition, context)?;
            let read = Arc::clone(&self.read);
            let schema = input.schema();
            Ok(Box::pin(RecordBatchStreamAdapter::new(
                schema,
                input.inspect(move |_| {
                    read.fetch_add(1, Ordering::SeqCst);
                }),
            )))
        }
    }

    /// `batches` batches of one row each of `k`, counted.
    fn source(name: &str, values: &[i64], read: &Arc<AtomicUsize>) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, true)]));
        let batches: Vec<RecordBatch> = values
            .iter()
            .map(|v| {
                RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![Arc::new(Int64Array::from(vec![*v]))],
                )
                .unwrap()
            })
            .collect();
        let memory = TestMemoryExec::try_new_exec(&[batches], schema, None).unwrap();
        Arc::new(Counted {
            input: memory,
            read: Arc::clone(read),
        })
    }

    /// A hash join whose build side is empty skips its probe side: wrapped, the probe side is
    /// read to its end (its 50 batches), and the answer is the same (no rows). (Before the
    /// wrapper looked through the `YieldExec` the session's next rule puts under it, it
    /// drained nothing in a real plan.)
    #[tokio::test]
    async fn an_empty_build_side_does_not_skip_the_probe_side() {
        for drain in [false, true] {
            let (build_read, probe_read) = (Arc::default(), Arc::default());
            let build = source("a", &[], &build_read);
            let probe = source("b", &(0..50).collect::<Vec<_>>(), &probe_read);
            let on: JoinOn = vec![(
                Arc::new(Column::new("a", 0)) as Arc<dyn PhysicalExpr>,
                Arc::new(Column::new("b", 0)) as Arc<dyn PhysicalExpr>,
            )];
            let join: Arc<dyn ExecutionPlan> = Arc::new(
                HashJoinExec::try_new(
                    build,
                    probe,
                    on,
                    None,
                    &JoinType::Inner,
                    None,
                    PartitionMode::CollectLeft,
                    NullEquality::NullEqualsNothing,
                    false,
                )
                .unwrap(),
            );
            let plan = match drain {
                false => join,
                true => {
                    let children = join
                        .children()
                        .into_iter()
                        .map(|c| {
                            Arc::new(DrainOnDropExec::new(Arc::clone(c))) as Arc<dyn ExecutionPlan>
                        })
                        .collect();
                    let drained: Arc<dyn ExecutionPlan> = Arc::new(DrainedExec::new(
                        join.replace_children(children, RECOMPUTE).unwrap(),
                    ));
                    // As the session's rules leave it: a `YieldExec` between the join and
                    // its `DrainedExec` (the drained inputs are found through it).
                    crate::sql::cooperative::YieldFromJoins
                        .optimize(drained, &ConfigOptions::default())
                        .unwrap()
                }
            };
            let ctx = datafusion::prelude::SessionContext::new();
            let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
                .await
                .unwrap();
            assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
            let probed = probe_read.load(Ordering::SeqCst);
            match drain {
                false => assert_eq!(probed, 0, "DataFusion's join reads its probe side"),
                true => assert_eq!(probed, 50),
            }
        }
    }
}
