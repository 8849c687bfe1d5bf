//! Every branch of a conditional is evaluated on every row of protected data (issue 41).
//!
//! DataFusion evaluates `CASE` branch by branch on the rows each condition selects, and `AND`
//! and `OR` skip their right side where the left decides, or evaluate it only on the rows that
//! remain (its `pre_selection_scatter`). So which rows run a function depends on the data: in
//! `CASE WHEN patient_id = K THEN f(note) ELSE 0 END`, `f` runs on patient K's rows only, and
//! the query takes longer (an allocation sized by a type, a costly function) exactly when K is
//! in the table. `COALESCE`, `NVL`, `NVL2` and `NULLIF` simplify to `CASE`.
//!
//! In a locked session the plan that will run, once optimised, has every `CASE` replaced by
//! [`EagerCase`](crate::sql::privacy::udf::eager::EagerCase) (`dp_eager_case(when_1, then_1, ..., else)`) and every `AND` / `OR` by
//! [`EagerBoolean`](crate::sql::privacy::udf::eager::EagerBoolean) (`dp_eager_and`, `dp_eager_or`): scalar functions, whose arguments
//! DataFusion evaluates in full on every batch before the function picks each row's value
//! with Arrow's `zip` (and Kleene logic's `and_kleene` / `or_kleene`, the kernels DataFusion's
//! own `AND` / `OR` use). The values are the same; the work no longer depends on which rows
//! select a branch. Branches cannot fail on the rows they did not select: in such a query
//! every expression is total ([`crate::sql::privacy::rewrite::total`]), NULL where it would
//! fail. The rewrite runs after the optimiser (in the locked session's query planner,
//! [`crate::sql::privacy::session::planner`]), so the optimiser still splits conjunctions,
//! pushes filters and extracts join keys as it does; `EXPLAIN` shows the plan before it.

use crate::sql::privacy::udf::eager::{internal_udf, AND, CASE, CASE_NOT_NULL, OR};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Case, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use std::sync::Arc;

/// `expr` (over `schema`) with every `CASE`, `AND` and `OR` made eager, nested ones too. Top
/// down, so that a CASE's nullability is DataFusion's own typing of the expression as written
/// (a walk as deep as DataFusion's), not of eager calls whose typing formats every argument.
pub fn eager_expr(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let case = internal_udf(CASE).expect("registered above");
    let case_not_null = internal_udf(CASE_NOT_NULL).expect("registered above");
    let and = internal_udf(AND).expect("registered above");
    let or = internal_udf(OR).expect("registered above");
    expr.transform_down(|e| match e {
        Expr::Case(case_expr) => {
            let (case_expr, nullable) = case_nullable(case_expr, schema);
            let udf = match nullable {
                true => Arc::clone(&case),
                false => Arc::clone(&case_not_null),
            };
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(udf, case_arguments(case_expr)),
            )))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::And | Operator::Or) =>
        {
            let udf = match op {
                Operator::And => Arc::clone(&and),
                _ => Arc::clone(&or),
            };
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(udf, vec![*left, *right]),
            )))
        }
        other => Ok(Transformed::no(other)),
    })
}

/// `case` back, and whether DataFusion types it nullable.
/// Moved in and out rather than cloned, and on a stack grown on demand: the walk over its
/// branches is as deep as the expression, up to `max_expression_depth`.
#[recursive::recursive]
fn case_nullable(case: Case, schema: &DFSchema) -> (Case, bool) {
    let expr = Expr::Case(case);
    let nullable = expr.nullable(schema).unwrap_or(true);
    match expr {
        Expr::Case(case) => (case, nullable),
        _ => unreachable!("built as a CASE above"),
    }
}

/// The eager CASE's arguments: each `WHEN` (as `base = WHEN` for a simple CASE) then its
/// `THEN`, and the `ELSE` last (`NULL` when absent).
fn case_arguments(case: Case) -> Vec<Expr> {
    let mut args = Vec::with_capacity(case.when_then_expr.len() * 2 + 1);
    for (when, then) in case.when_then_expr {
        let when = match &case.expr {
            Some(base) => Expr::BinaryExpr(BinaryExpr::new(
                Box::new(base.as_ref().clone()),
                Operator::Eq,
                when,
            )),
            None => *when,
        };
        args.push(when);
        args.push(*then);
    }
    args.push(match case.else_expr {
        Some(otherwise) => *otherwise,
        None => Expr::Literal(ScalarValue::Null, None),
    });
    args
}

/// `plan` (optimised) with every expression of every node and subquery made eager, output
/// names kept (module docs).
pub fn evaluate_every_branch(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let schema = input_schema(&node);
        let names = NamePreserver::new(&node);
        let rewritten = node.map_expressions(|expr| {
            let saved = names.save(&expr);
            Ok(eager_expr(expr, &schema)?.update_data(|e| saved.restore(e)))
        })?;
        if !rewritten.transformed {
            return Ok(rewritten);
        }
        rewritten.map_data(|plan| plan.recompute_schema())
    })
    .map(|t| t.data)
}

/// The schema `node`'s expressions are typed in: its input's, its inputs' together (a join's),
/// or its own (a scan's filters).
fn input_schema(node: &LogicalPlan) -> DFSchema {
    match node.inputs().as_slice() {
        [] => node.schema().as_ref().clone(),
        [only] => only.schema().as_ref().clone(),
        [first, rest @ ..] => rest
            .iter()
            .try_fold(first.schema().as_ref().clone(), |schema, other| {
                schema.join(other.schema())
            })
            .unwrap_or_else(|_| node.schema().as_ref().clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::BooleanArray;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::DataType;
    use arrow::datatypes::{Field, Schema};
    use arrow::record_batch::RecordBatch;
    use datafusion::logical_expr::{
        ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
    };
    use datafusion::prelude::SessionContext;

    /// A table of 300 rows of every combination of NULL, false and true in `a` and `b`, and
    /// numbers with NULLs in `x`, `y` and strings in `s`.
    fn batch() -> RecordBatch {
        let rows = 300;
        let tri = |i: usize, k: usize| match (i / k) % 3 {
            0 => None,
            1 => Some(false),
            _ => Some(true),
        };
        let a: BooleanArray = (0..rows).map(|i| tri(i, 1)).collect();
        let b: BooleanArray = (0..rows).map(|i| tri(i, 3)).collect();
        let x: Int64Array = (0..rows)
            .map(|i| (i % 7 != 0).then_some(i as i64 % 11))
            .collect();
        let y: Int64Array = (0..rows)
            .map(|i| (i % 5 != 0).then_some(i as i64 % 4))
            .collect();
        let s: StringArray = (0..rows)
            .map(|i| (i % 6 != 0).then(|| format!("s{}", i % 9)))
            .collect();
        let n: Int64Array = (0..rows).map(|i| i as i64 % 13).collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("a", DataType::Boolean, true),
                Field::new("b", DataType::Boolean, true),
                Field::new("x", DataType::Int64, true),
                Field::new("y", DataType::Int64, true),
                Field::new("s", DataType::Utf8, true),
                Field::new("n", DataType::Int64, false),
            ])),
            vec![
                Arc::new(a),
                Arc::new(b),
                Arc::new(x),
                Arc::new(y),
                Arc::new(s),
                Arc::new(n),
            ],
        )
        .unwrap()
    }

    /// Every expression below gives the same column made eager as DataFusion gives: CASE with
    /// and without a base and an ELSE, nested, with NULL conditions; AND / OR in Kleene logic
    /// (NULL and false, NULL or true); COALESCE and NVL2 (which simplify to CASE), NULLIF.
    #[tokio::test]
    async fn eager_forms_give_datafusion_s_values() {
        let ctx = SessionContext::new();
        ctx.register_batch("t", batch()).unwrap();
        let exprs = [
            "CASE WHEN a THEN x ELSE y END",
            "CASE WHEN a THEN x END",
            "CASE WHEN a THEN x WHEN b THEN y * 2 ELSE -1 END",
            "CASE x WHEN 1 THEN 'one' WHEN 2 THEN s ELSE 'other' END",
            "CASE x WHEN 3 THEN s END",
            "CASE WHEN a THEN CASE WHEN b THEN 1 ELSE 2 END ELSE CASE WHEN x > 5 THEN 3 END END",
            "a AND b",
            "a OR b",
            "(a AND x > 3) OR (b AND y IS NULL)",
            "NOT (a OR b) AND x = y",
            "coalesce(x, y, 0)",
            "nullif(x, 3)",
            "nvl2(x, s, 'none')",
            "CASE WHEN a THEN NULL ELSE s END",
            "CASE WHEN true THEN 1 ELSE 2 END",
            // Of columns without NULLs: not nullable, before and after.
            "CASE WHEN n > 3 THEN n ELSE 0 END",
            "n > 3 AND n < 10",
            "n = 1 OR n = 2",
        ];
        for sql in exprs {
            let frame = ctx.sql(&format!("SELECT {sql} AS v FROM t")).await.unwrap();
            let (state, plan) = frame.into_parts();
            let optimized = state.optimize(&plan).unwrap();
            let expected = ctx
                .execute_logical_plan(optimized.clone())
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let eager = evaluate_every_branch(optimized.clone()).unwrap();
            assert_eq!(eager.schema(), optimized.schema(), "{sql}");
            let text = format!("{}", eager.display_indent());
            let has_eager = text.contains(CASE) || text.contains(AND) || text.contains(OR);
            // (CASE_NOT_NULL starts with CASE's name.)
            // NULLIF is a function (its arguments are evaluated anyway); a constant CASE is
            // folded by the optimiser.
            let plain = sql.starts_with("nullif") || sql.starts_with("CASE WHEN true");
            assert_eq!(has_eager, !plain, "{sql}: {text}");
            assert!(!text.contains("CASE WHEN"), "{sql}: {text}");
            let got = datafusion::physical_plan::collect(
                state.create_physical_plan(&eager).await.unwrap(),
                ctx.task_ctx(),
            )
            .await
            .unwrap();
            assert_eq!(
                arrow::util::pretty::pretty_format_batches(&expected)
                    .unwrap()
                    .to_string(),
                arrow::util::pretty::pretty_format_batches(&got)
                    .unwrap()
                    .to_string(),
                "{sql}"
            );
        }
    }

    /// The branch a condition does not select is still evaluated on every row: a function
    /// that counts the rows it sees sees all 300, where DataFusion's CASE shows it only the
    /// rows of `a`.
    #[tokio::test]
    async fn every_branch_sees_every_row() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        #[derive(Debug)]
        struct Counting(Signature, Arc<AtomicUsize>);
        impl PartialEq for Counting {
            fn eq(&self, _: &Self) -> bool {
                true
            }
        }
        impl Eq for Counting {}
        impl std::hash::Hash for Counting {
            fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
        }
        impl ScalarUDFImpl for Counting {
            fn name(&self) -> &str {
                "counting"
            }
            fn signature(&self) -> &Signature {
                &self.0
            }
            fn return_type(&self, _: &[DataType]) -> Result<DataType> {
                Ok(DataType::Int64)
            }
            fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
                self.1.fetch_add(args.number_rows, Ordering::SeqCst);
                Ok(args.args[0].clone())
            }
        }
        let seen = Arc::new(AtomicUsize::new(0));
        let ctx = SessionContext::new();
        ctx.register_batch("t", batch()).unwrap();
        ctx.register_udf(ScalarUDF::new_from_impl(Counting(
            Signature::any(1, Volatility::Immutable),
            Arc::clone(&seen),
        )));
        // DataFusion evaluates the function on the rows of `a` only, and the right side of an
        // AND (an OR) only where the left, without NULLs, is true (false) for at most a fifth
        // of the rows (`x` is 3 on 24 rows).
        for sql in [
            "CASE WHEN a THEN counting(x) ELSE 0 END",
            "coalesce(x, 0) = 3 AND counting(y) > 1",
            "coalesce(x, 0) <> 3 OR counting(y) > 1",
        ] {
            let frame = ctx.sql(&format!("SELECT {sql} AS v FROM t")).await.unwrap();
            let (state, plan) = frame.into_parts();
            let optimized = state.optimize(&plan).unwrap();
            seen.store(0, Ordering::SeqCst);
            datafusion::physical_plan::collect(
                state.create_physical_plan(&optimized).await.unwrap(),
                ctx.task_ctx(),
            )
            .await
            .unwrap();
            let datafusion_rows = seen.load(Ordering::SeqCst);
            assert!(datafusion_rows < 300, "{sql}: {datafusion_rows}");
            seen.store(0, Ordering::SeqCst);
            let eager = evaluate_every_branch(optimized).unwrap();
            datafusion::physical_plan::collect(
                state.create_physical_plan(&eager).await.unwrap(),
                ctx.task_ctx(),
            )
            .await
            .unwrap();
            assert_eq!(seen.load(Ordering::SeqCst), 300, "{sql}");
        }
    }
}
