//! The `ExecutionPlan` body shared by the operators that wrap one input and change only how its
//! stream runs: the scan that hides a protected table's statistics, the release that runs once,
//! the drains of joins and limits, the cooperative yield. Each shows its input's schema,
//! partitioning and order as its own and has no expressions; it implements [`PassThrough`] (its
//! name, its input, how it wraps a partition's stream) and [`pass_through_plan!`] writes the
//! rest, so the nine methods are written once.

use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, ExecutionPlan};
use std::sync::Arc;

/// An operator of one input that passes the input's properties through (module docs).
pub trait PassThrough: std::fmt::Debug + DisplayAs + Send + Sync + Sized + 'static {
    /// The operator's name, in plans and errors.
    const NAME: &'static str;
    /// DataFusion's `benefits_from_input_partitioning`: whether the input should be
    /// repartitioned for this operator to run in parallel. An operator that adds no work per
    /// row says no, so that wrapping a plan does not change its partitioning.
    const BENEFITS_FROM_INPUT_PARTITIONING: bool;

    /// The one input.
    fn input(&self) -> &Arc<dyn ExecutionPlan>;

    /// The same operator over another input (`with_new_children`).
    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self;

    /// Runs partition `partition`: the input's stream, as this operator wraps it.
    fn execute_input(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream>;
}

/// Writes `impl ExecutionPlan` for a [`PassThrough`] operator.
macro_rules! pass_through_plan {
    ($operator:ty) => {
        impl datafusion::physical_plan::ExecutionPlan for $operator {
            fn name(&self) -> &str {
                <$operator as $crate::sql::privacy::exec::pass_through::PassThrough>::NAME
            }

            fn properties(&self) -> &std::sync::Arc<datafusion::physical_plan::PlanProperties> {
                $crate::sql::privacy::exec::pass_through::PassThrough::input(self).properties()
            }

            fn children(
                &self,
            ) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
                vec![$crate::sql::privacy::exec::pass_through::PassThrough::input(self)]
            }

            fn apply_expressions(
                &self,
                _f: &mut dyn FnMut(
                    &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
                ) -> datafusion::common::Result<
                    datafusion::common::tree_node::TreeNodeRecursion,
                >,
            ) -> datafusion::common::Result<datafusion::common::tree_node::TreeNodeRecursion>
            {
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            }

            fn maintains_input_order(&self) -> Vec<bool> {
                vec![true]
            }

            fn benefits_from_input_partitioning(&self) -> Vec<bool> {
                vec![
                    <$operator as $crate::sql::privacy::exec::pass_through::PassThrough>::BENEFITS_FROM_INPUT_PARTITIONING,
                ]
            }

            fn with_new_children(
                self: std::sync::Arc<Self>,
                mut children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
            ) -> datafusion::common::Result<
                std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
            > {
                if children.len() != 1 {
                    return datafusion::common::exec_err!(
                        "{} takes one input",
                        <$operator as $crate::sql::privacy::exec::pass_through::PassThrough>::NAME
                    );
                }
                Ok(std::sync::Arc::new(
                    $crate::sql::privacy::exec::pass_through::PassThrough::with_input(
                        self.as_ref(),
                        children.swap_remove(0),
                    ),
                ))
            }

            fn execute(
                &self,
                partition: usize,
                context: std::sync::Arc<datafusion::execution::TaskContext>,
            ) -> datafusion::common::Result<datafusion::execution::SendableRecordBatchStream>
            {
                $crate::sql::privacy::exec::pass_through::PassThrough::execute_input(
                    self, partition, context,
                )
            }
        }
    };
}
pub(crate) use pass_through_plan;
