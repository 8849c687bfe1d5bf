//! Sorts that a task's partitions leave without a partition, set aside before Ballista resets
//! the plan: a workaround for Ballista 55 with DataFusion 55.2 under push scheduling.
//!
//! Ballista restricts each task's plan to the task's partitions
//! (`restrict_plan_to_partitions`, ballista-scheduler 55.0.0 `src/state/task_builder.rs:112`):
//! below a `UnionExec`, a branch none of whose partitions the task runs keeps zero partitions.
//! Under push scheduling the executor then resets every node of the decoded plan
//! (`reset_metrics_for_execution_plan`, ballista-core 55.0.0
//! `src/serde/scheduler/from_proto.rs:503`, called by `get_task_definition_vec`; the pull path,
//! `get_task_definition`, does not reset). `SortExec::reset_state` (datafusion-physical-plan
//! 55.2.0 `src/sorts/sort.rs:1353`) builds a TopK dynamic filter, with or without a fetch, for
//! as many emitters as the sort has output partitions, and zero fails
//! `debug_assert!(topk_emitter_count > 0)` (`src/topk/mod.rs:275`): in a debug build the
//! executor's task launch panics, the scheduler loses the executor and the job never finishes
//! (release builds skip the assertion, and the filter is never used).
//!
//! A unit-protected query grouped by a table of public keys has this shape: the keys' phantom
//! rows ([`crate::sql::privacy::rewrite::public_groups`]) are a union branch beside the bounded rows,
//! whose unit-sampling window sorts within the stage. Any SQL union with a partition-preserving
//! sort in one branch has it too. The physical codec ([`super::DpPhysicalCodec`]) replaces each
//! such sort by an [`UnreadSortExec`] while decoding the stage's root, before the reset.

use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_err, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use std::sync::Arc;

/// `plan` with every `SortExec` of zero output partitions replaced by an [`UnreadSortExec`]
/// over the same input. Exact: a node of zero partitions is never executed.
pub(crate) fn without_unread_sorts(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| match node.downcast_ref::<SortExec>() {
        Some(sort) if sort.properties().output_partitioning().partition_count() == 0 => Ok(
            Transformed::yes(Arc::new(UnreadSortExec::new(sort)) as Arc<dyn ExecutionPlan>),
        ),
        _ => Ok(Transformed::no(node)),
    })
    .data()
}

/// A `SortExec` restricted to no partition: the sort's properties (schema, ordering, zero
/// partitions) over its input, and nothing to run. It keeps the sort's place in the plan, with
/// a metrics set of its own, so the task reports one metrics set per operator as the
/// scheduler's copy of the stage expects.
#[derive(Debug)]
pub(crate) struct UnreadSortExec {
    input: Arc<dyn ExecutionPlan>,
    expr: LexOrdering,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl UnreadSortExec {
    fn new(sort: &SortExec) -> Self {
        Self {
            input: Arc::clone(sort.input()),
            expr: sort.expr().clone(),
            properties: Arc::clone(sort.properties()),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for UnreadSortExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "UnreadSortExec: expr=[{}]", self.expr)
    }
}

impl ExecutionPlan for UnreadSortExec {
    fn name(&self) -> &str {
        "UnreadSortExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
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
        match children.as_slice() {
            [input]
                if input.output_partitioning().partition_count() == 0
                    && input.schema() == self.input.schema() =>
            {
                Ok(Arc::new(Self {
                    input: children.swap_remove(0),
                    expr: self.expr.clone(),
                    properties: Arc::clone(&self.properties),
                    metrics: ExecutionPlanMetricsSet::new(),
                }))
            }
            _ => exec_err!("UnreadSortExec takes one input of zero partitions and the same schema"),
        }
    }

    fn execute(&self, partition: usize, _: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        exec_err!("UnreadSortExec has no partition (asked for partition {partition})")
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;
    use datafusion::physical_plan::execution_plan::reset_plan_states;
    use datafusion::physical_plan::union::UnionExec;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// A partition-preserving sort of `partitions` empty partitions.
    fn sort_of(partitions: usize) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let source = MemorySourceConfig::try_new(&vec![vec![]; partitions], schema.clone(), None);
        let ordering =
            LexOrdering::new([PhysicalSortExpr::new_default(col("a", &schema).unwrap())]);
        Arc::new(
            SortExec::new(
                ordering.unwrap(),
                DataSourceExec::from_data_source(source.unwrap()),
            )
            .with_preserve_partitioning(true),
        )
    }

    /// How many metrics sets a task reports for `plan` (Ballista's `collect_plan_metrics`).
    fn metrics_sets(plan: &Arc<dyn ExecutionPlan>) -> usize {
        usize::from(plan.metrics().is_some())
            + plan.children().into_iter().map(metrics_sets).sum::<usize>()
    }

    #[test]
    fn a_sort_without_partitions_is_set_aside_before_the_reset() {
        // A task's plan as Ballista restricts it: the union's first branch has no partition
        // of the task, the second two.
        let task = UnionExec::try_new(vec![sort_of(0), sort_of(2)]).unwrap();
        // What Ballista's push path then does, on DataFusion's plan as it is (debug builds
        // only: the assertion is a `debug_assert!`).
        if cfg!(debug_assertions) {
            let reset = catch_unwind(AssertUnwindSafe(|| reset_plan_states(Arc::clone(&task))));
            assert!(
                reset.is_err(),
                "SortExec::reset_state accepts zero partitions now"
            );
        }
        let plan = reset_plan_states(without_unread_sorts(Arc::clone(&task)).unwrap()).unwrap();
        let branches = plan.children();
        assert_eq!(
            branches.iter().map(|b| b.name()).collect::<Vec<_>>(),
            ["UnreadSortExec", "SortExec"]
        );
        for (fixed, original) in branches.iter().zip(task.children()) {
            assert_eq!(fixed.schema(), original.schema());
            assert_eq!(fixed.output_ordering(), original.output_ordering());
            assert_eq!(
                fixed.output_partitioning().partition_count(),
                original.output_partitioning().partition_count()
            );
        }
        assert_eq!(plan.output_partitioning().partition_count(), 2);
        assert_eq!(metrics_sets(&plan), metrics_sets(&task));
        assert!(branches[0]
            .execute(0, Arc::new(TaskContext::default()))
            .is_err());
    }
}
