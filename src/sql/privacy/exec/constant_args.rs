//! Constant arguments are not copied into every row.
//!
//! An aggregation evaluates each argument of each aggregate call into an array as long as the
//! batch, so a DP call's constants (clamping bounds, ε, the options string: three or four per
//! call) would be copied into every row, and the copies read by no one: the call's bound
//! [`CallPlan`](crate::sql::functions::aggregate::CallPlan) already holds their values. This
//! rule drops them from every aggregation that reads raw rows
//! ([`DpAggregate::without_constant_args`]); the accumulators read the data columns and the
//! group keys, which stay. Names, `EXPLAIN` and the output schema are unchanged.

use crate::sql::functions::aggregate::DpAggregate;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode};
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// The physical optimizer rule (see the module docs).
#[derive(Debug, Default)]
pub struct DropConstantArgs;

impl PhysicalOptimizerRule for DropConstantArgs {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            // A final aggregation reads partial states, not its calls' arguments.
            if aggregate.mode().input_mode() != AggregateInputMode::Raw {
                return Ok(Transformed::no(node));
            }
            let input_schema = aggregate.input_schema();
            let mut changed = false;
            let calls = aggregate
                .aggr_expr()
                .iter()
                .map(|call| {
                    Ok(
                        match DpAggregate::without_constant_args(call, &input_schema)? {
                            Some(trimmed) => {
                                changed = true;
                                Arc::new(trimmed)
                            }
                            None => Arc::clone(call),
                        },
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            if !changed {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(
                Arc::new(aggregate.with_new_aggr_exprs(calls)) as Arc<dyn ExecutionPlan>,
            ))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "datafusion_dp_drop_constant_args"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    const QUERY: &str = "SELECT g, dp_sum(x, 0.0, 10.0, 1.0, 'mechanism=laplace') AS s, \
                         dp_avg(x, -1, 5, 2.0) AS a, dp_count(x, 1.0) AS c \
                         FROM t GROUP BY g ORDER BY g";

    /// A registered session over `t`, with `settings` applied; `rule` false leaves this rule
    /// out of its physical optimizer.
    async fn session(settings: &[&str], rule: bool) -> SessionContext {
        let ctx = SessionContext::new();
        crate::sql::register(&ctx).unwrap();
        let ctx = if rule {
            ctx
        } else {
            let rules = ctx
                .state()
                .physical_optimizers()
                .iter()
                .filter(|r| r.name() != DropConstantArgs.name())
                .cloned()
                .collect();
            SessionContext::new_with_state(
                SessionStateBuilder::new_from_existing(ctx.state())
                    .with_physical_optimizer_rules(rules)
                    .build(),
            )
        };
        for sql in [
            "CREATE TABLE t (g VARCHAR, k INT, x DOUBLE) AS VALUES ('a', 1, 0.5), ('a', 2, 7.0), \
             ('b', 1, 2.5), ('b', 1, NULL), ('c', 3, 'NaN'::double)",
            "SET dp.public_groups = 'assert'",
        ]
        .iter()
        .chain(settings)
        {
            ctx.sql(sql).await.unwrap().collect().await.unwrap();
        }
        ctx
    }

    /// The number of arguments of each DP call in the aggregations that read rows, and the
    /// query's result.
    async fn run(ctx: &SessionContext) -> (Vec<usize>, Vec<RecordBatch>) {
        let plan = ctx
            .sql(QUERY)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut args = Vec::new();
        plan.apply(|node| {
            if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
                if aggregate.mode().input_mode() == AggregateInputMode::Raw {
                    args.extend(aggregate.aggr_expr().iter().map(|c| c.expressions().len()));
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        (args, collect(plan, ctx.task_ctx()).await.unwrap())
    }

    /// Only the data columns stay (and, seeded, the group key after them); the seeded output
    /// is the one computed with every argument, so each accumulator still finds its data and
    /// its group keys.
    #[tokio::test]
    async fn dp_calls_keep_their_data_and_group_keys_only() {
        let (args, _) = run(&session(&[], true).await).await;
        assert_eq!(args, vec![1, 1, 1]);
        let seeded = ["SET dp.seed = 11"];
        let (args, with_rule) = run(&session(&seeded, true).await).await;
        assert_eq!(args, vec![2, 2, 2]);
        let (args, without) = run(&session(&seeded, false).await).await;
        assert_eq!(args, vec![6, 5, 3]);
        let text = |b: &[RecordBatch]| pretty_format_batches(b).unwrap().to_string();
        assert_eq!(text(&with_rule), text(&without));
    }

    /// `EXPLAIN` shows the call as written.
    #[tokio::test]
    async fn explain_is_unchanged() {
        let explain = |ctx: SessionContext| async move {
            let batches = ctx
                .sql(&format!("EXPLAIN {QUERY}"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            pretty_format_batches(&batches).unwrap().to_string()
        };
        let with_rule = explain(session(&[], true).await).await;
        assert!(
            with_rule.contains("dp_sum(t.x, 0, 10, 1, mechanism=laplace)"),
            "{with_rule}"
        );
        assert_eq!(with_rule, explain(session(&[], false).await).await);
    }
}
