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
//! [`EagerCase`] (`dp_eager_case(when_1, then_1, ..., else)`) and every `AND` / `OR` by
//! [`EagerBoolean`] (`dp_eager_and`, `dp_eager_or`): scalar functions, whose arguments
//! DataFusion evaluates in full on every batch before the function picks each row's value
//! with Arrow's `zip` (and Kleene logic's `and_kleene` / `or_kleene`, the kernels DataFusion's
//! own `AND` / `OR` use). The values are the same; the work no longer depends on which rows
//! select a branch. Branches cannot fail on the rows they did not select: in such a query
//! every expression is total ([`crate::sql::privacy::rewrite::total`]), NULL where it would
//! fail. The rewrite runs after the optimiser (in the locked session's query planner,
//! [`crate::sql::privacy::session::planner`]), so the optimiser still splits conjunctions,
//! pushes filters and extracts join keys as it does; `EXPLAIN` shows the plan before it.

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::kernels::boolean::{and_kleene, or_kleene};
use arrow::compute::kernels::zip::zip;
use arrow::compute::prep_null_mask_filter;
use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_err, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Case, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

/// The name of [`EagerCase`] (its values may be NULL).
pub const CASE: &str = "dp_eager_case";
/// The name of [`EagerCase`] for a `CASE` DataFusion proves never NULL (`COALESCE(x, 0)`).
pub const CASE_NOT_NULL: &str = "dp_eager_case_not_null";
/// The name of [`EagerBoolean`] for `AND`.
pub const AND: &str = "dp_eager_and";
/// The name of [`EagerBoolean`] for `OR`.
pub const OR: &str = "dp_eager_or";

/// `CASE WHEN when_1 THEN then_1 ... ELSE else END` with every argument evaluated on every
/// row: `dp_eager_case(when_1, then_1, ..., when_n, then_n, else)` (module docs). A `CASE`
/// with a base expression arrives as `base = value_i` conditions; one without `ELSE` has a
/// NULL there. Its values are nullable as the `CASE` was (DataFusion proves `CASE WHEN x IS
/// NOT NULL THEN x ELSE 0 END` never NULL), so the plan's schema is the same after the rewrite.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EagerCase {
    nullable: bool,
    signature: Signature,
}

impl EagerCase {
    pub fn new(nullable: bool) -> Self {
        Self {
            nullable,
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

/// The type of the values of a `dp_eager_case` call: its first branch (or `ELSE`) that is not
/// an untyped NULL (the analyzer coerces every branch to one type).
fn case_type<'a>(arg_types: impl Iterator<Item = &'a DataType>) -> DataType {
    let mut branches = arg_types.enumerate().filter_map(|(i, t)| match i % 2 {
        1 => Some(t),
        _ => None,
    });
    branches
        .find(|t| !t.is_null())
        .cloned()
        .unwrap_or(DataType::Null)
}

impl ScalarUDFImpl for EagerCase {
    fn name(&self) -> &str {
        match self.nullable {
            true => CASE,
            false => CASE_NOT_NULL,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        // (when, then) pairs then the else: the else sits at an odd index too once a NULL
        // is put before it.
        let mut padded: Vec<&DataType> = arg_types.iter().collect();
        let last = padded.pop();
        padded.push(&DataType::Boolean);
        padded.extend(last);
        Ok(case_type(padded.into_iter()))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Arc::new(arrow::datatypes::Field::new(
            self.name(),
            self.return_type(&types)?,
            self.nullable,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let to = args.return_field.data_type().clone();
        let (arrays, scalar) = arrays(&args)?;
        let Some((otherwise, pairs)) = arrays.split_last() else {
            return exec_err!("{CASE} takes an ELSE argument");
        };
        if pairs.len() % 2 != 0 {
            return exec_err!("{CASE} takes WHEN, THEN pairs and an ELSE");
        }
        let mut result = cast_to(otherwise, &to)?;
        for pair in pairs.chunks(2).rev() {
            let when = selected(&pair[0])?;
            let then = cast_to(&pair[1], &to)?;
            result = zip(&when, &then, &result)?;
        }
        output(result, scalar)
    }
}

/// `AND` or `OR` with both sides evaluated on every row (module docs), in Kleene logic.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EagerBoolean {
    op: Operator,
    signature: Signature,
}

impl EagerBoolean {
    /// `op` is [`Operator::And`] or [`Operator::Or`].
    pub fn new(op: Operator) -> Self {
        Self {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for EagerBoolean {
    fn name(&self) -> &str {
        match self.op {
            Operator::And => AND,
            _ => OR,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    /// Nullable as DataFusion's `AND` / `OR` is: when either side is.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(arrow::datatypes::Field::new(
            self.name(),
            DataType::Boolean,
            nullable,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (arrays, scalar) = arrays(&args)?;
        let [left, right] = arrays.as_slice() else {
            return exec_err!("{} takes two arguments", self.name());
        };
        let (left, right) = (booleans(left)?, booleans(right)?);
        let result = match self.op {
            Operator::And => and_kleene(&left, &right)?,
            _ => or_kleene(&left, &right)?,
        };
        output(Arc::new(result), scalar)
    }
}

/// Every argument as an array of the batch's rows (of one row when all are scalars: the
/// result is then a scalar, as DataFusion's own `CASE` gives for constants).
fn arrays(args: &ScalarFunctionArgs) -> Result<(Vec<ArrayRef>, bool)> {
    let scalar = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let rows = if scalar { 1 } else { args.number_rows };
    let arrays = args
        .args
        .iter()
        .map(|a| a.to_array(rows))
        .collect::<Result<Vec<_>>>()?;
    Ok((arrays, scalar))
}

fn output(result: ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    Ok(match scalar {
        true => ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?),
        false => ColumnarValue::Array(result),
    })
}

fn booleans(array: &ArrayRef) -> Result<BooleanArray> {
    let array = cast_to(array, &DataType::Boolean)?;
    match array.as_any().downcast_ref::<BooleanArray>() {
        Some(booleans) => Ok(booleans.clone()),
        None => exec_err!("expected booleans, got {}", array.data_type()),
    }
}

/// The rows a condition selects: true, not false or NULL.
fn selected(condition: &ArrayRef) -> Result<BooleanArray> {
    let condition = booleans(condition)?;
    Ok(match condition.null_count() {
        0 => condition,
        _ => prep_null_mask_filter(&condition),
    })
}

fn cast_to(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    match array.data_type() == to {
        true => Ok(Arc::clone(array)),
        false => Ok(arrow::compute::cast(array, to)?),
    }
}

/// The rewrite's function named `name`, for the Ballista codecs (it is not registered: an
/// analyst's SQL cannot call it).
pub fn internal_udf(name: &str) -> Option<Arc<ScalarUDF>> {
    match name {
        CASE => Some(Arc::new(ScalarUDF::new_from_impl(EagerCase::new(true)))),
        CASE_NOT_NULL => Some(Arc::new(ScalarUDF::new_from_impl(EagerCase::new(false)))),
        AND => Some(Arc::new(ScalarUDF::new_from_impl(EagerBoolean::new(
            Operator::And,
        )))),
        OR => Some(Arc::new(ScalarUDF::new_from_impl(EagerBoolean::new(
            Operator::Or,
        )))),
        _ => None,
    }
}

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
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use arrow::record_batch::RecordBatch;
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
