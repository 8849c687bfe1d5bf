//! Expressions over protected rows never raise an error: a row on which one fails gets NULL.
//!
//! An error is an output. `CAST(diagnosis AS INT)` fails with "Cannot cast string 'HIV' to
//! ..."; `CASE WHEN patient_id = 17 THEN CAST(outcome || 'x' AS INT) END` fails exactly when
//! patient 17 is in the table and prints their outcome; any DP call's budget, however small,
//! would buy that exact answer. So in every query with a DP call the planner rule makes each
//! expression that can fail *total* before the plan is optimised (so filters pushed into scans
//! or below aggregates carry the total form), as Spark's `try_` functions are:
//! - a cast that can fail becomes [`TryCastRows`] `try_cast_to_<type>(x)`: Arrow's safe cast
//!   (NULL where the value does not convert), with the row-by-row fallback below where even
//!   that fails for a batch (a date out of range does not format as a string);
//! - a scalar function call `f(..)` becomes [`TryFunction`] `try_f(..)`, which evaluates `f`
//!   on the batch and, only if that fails, row by row, giving NULL on the rows where it fails
//!   (a function that simplifies to another expression, `regexp_like` to `~`, is simplified
//!   first and the result made total);
//! - an operator that can fail (`/` and `%` unless by a constant other than 0 and -1, the
//!   regular-expression matches, shifts, arithmetic on other than integers and floats, ...)
//!   becomes [`TryBinary`] (`try_divide(a, b)`), the operator's own kernel with the same
//!   row-by-row fallback;
//! - `LIKE`, whose pattern compiles to a regular expression (which fails past a size limit),
//!   becomes the operator form with the same kernel, `try_like_match(a, pattern)`;
//! - `SIMILAR TO`, which has no operator form, is refused (use `regexp_like`, which becomes
//!   `try_regex_match`).
//!
//! What is left is total: columns, constants, comparisons, `AND`/`OR`/`NOT`, `IS [NOT] NULL`,
//! `CASE`, `IN` lists, `BETWEEN` and integer and float `+ - *` (which wrap). Output
//! column names are kept. Errors raised by operators rather than expressions (a window
//! function's overflow, memory exhausted) are still possible; [`crate::sql::privacy::exec::release`] withholds
//! the text of every error raised below a DP aggregation, so at most their occurrence shows.

use crate::sql::privacy::udf::total::{TryBinary, TryCastRows, TryFunction};
use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{plan_err, DFSchema, DFSchemaRef, Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, ScalarUDF, WindowFunctionDefinition,
};
use std::sync::Arc;

fn is_number(t: &DataType) -> bool {
    t.is_integer() || t.is_floating()
}

/// `f` as its total form `try_f(..)`, whose simplification is made total by this rewrite.
pub fn total_function(f: Arc<ScalarUDF>) -> TryFunction {
    TryFunction::new(f, total_expr)
}

/// Whether `left op right` cannot fail on any row (module docs).
fn operator_is_total(op: Operator, left: &DataType, right: &DataType, divisor: &Expr) -> bool {
    use Operator::*;
    match op {
        Eq | NotEq | Lt | LtEq | Gt | GtEq | IsDistinctFrom | IsNotDistinctFrom | And | Or => true,
        // `||` doubles a string once per CTE level (exponential in the SQL's length): it runs
        // as `try_string_concat`, whose output per row is capped like the functions'.
        // Integers wrap and floats overflow to infinity; decimals, dates and intervals fail.
        Plus | Minus | Multiply | BitwiseAnd | BitwiseOr | BitwiseXor => {
            is_number(left) && is_number(right)
        }
        Divide | Modulo => {
            (left.is_floating() && right.is_floating())
                || (left.is_integer()
                    && right.is_integer()
                    && matches!(divisor, Expr::Literal(v, _) if nonzero_not_minus_one(v)))
        }
        _ => false,
    }
}

/// Whether [`operator_is_total`] reads its operands' types (arithmetic does; comparisons,
/// `AND`/`OR` are total and `||` never is, whatever the types).
fn operator_needs_types(op: Operator) -> bool {
    use Operator::*;
    matches!(
        op,
        Plus | Minus | Multiply | BitwiseAnd | BitwiseOr | BitwiseXor | Divide | Modulo
    )
}

/// The type of `expr` over `schema`, as `Expr::get_type` gives it, computed without naming
/// every subexpression: `get_type` builds each level's display name, so asking it at every
/// level of a chain of `n` operators cost `O(n^3)` (400 terms of `+` or `||` planned for
/// 6.7 s, issue 28). Operators and the total forms' functions are typed from their operands
/// here, each level in time linear in its size; other expressions ask DataFusion.
#[recursive::recursive]
fn type_of(expr: &Expr, schema: &DFSchemaRef) -> Option<DataType> {
    match expr {
        Expr::Alias(alias) => type_of(&alias.expr, schema),
        Expr::Column(column) => schema
            .qualified_field_from_column(column)
            .ok()
            .map(|(_, f)| f.data_type().clone()),
        Expr::Literal(value, _) => Some(value.data_type()),
        Expr::Cast(Cast { field, .. }) | Expr::TryCast(TryCast { field, .. }) => {
            Some(field.data_type().clone())
        }
        Expr::BinaryExpr(binary) => {
            let left = type_of(&binary.left, schema)?;
            let right = type_of(&binary.right, schema)?;
            BinaryTypeCoercer::new(&left, &binary.op, &right)
                .get_result_type()
                .ok()
        }
        Expr::ScalarFunction(call)
            if call.func.inner().downcast_ref::<TryBinary>().is_some()
                || call.func.inner().downcast_ref::<TryCastRows>().is_some() =>
        {
            let types: Option<Vec<DataType>> =
                call.args.iter().map(|a| type_of(a, schema)).collect();
            call.func.return_type(&types?).ok()
        }
        other => other.get_type(schema).ok(),
    }
}

/// Whether a constant divisor is safe for every dividend: not NULL, 0 or -1 (`MIN / -1`
/// overflows).
fn nonzero_not_minus_one(value: &ScalarValue) -> bool {
    match value.cast_to(&DataType::Float64) {
        Ok(ScalarValue::Float64(Some(v))) => v != 0.0 && v != -1.0 && v.fract() == 0.0,
        _ => false,
    }
}

/// Whether a cast from `from` to `to` cannot fail: the same type, to a string from a number or
/// a boolean (or a string to a wider string type), or a widening between numbers (integers to wider integers of the same
/// signedness or to floats, `Float32` to `Float64`).
fn cast_is_total(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    if from == to || from.is_null() {
        return true;
    }
    let width = |t: &DataType| match t {
        Int8 | UInt8 => 8,
        Int16 | UInt16 => 16,
        Int32 | UInt32 => 32,
        Int64 | UInt64 => 64,
        _ => 0,
    };
    match (from, to) {
        // To a string: numbers, booleans and strings that fit (temporal values out of range
        // fail to format; a large string array's bytes may not fit a `Utf8` array's offsets).
        (_, Utf8 | LargeUtf8 | Utf8View) if from.is_numeric() || matches!(from, Boolean) => true,
        (Utf8, LargeUtf8 | Utf8View) | (LargeUtf8 | Utf8View, LargeUtf8 | Utf8View) => true,
        (f, t) if f.is_signed_integer() && t.is_signed_integer() => width(f) <= width(t),
        (f, t) if f.is_unsigned_integer() && t.is_unsigned_integer() => width(f) <= width(t),
        (f, t) if f.is_unsigned_integer() && t.is_signed_integer() => width(f) < width(t),
        (f, Float32 | Float64) if f.is_integer() => true,
        (Float16 | Float32, Float64) | (Float16, Float32) => true,
        _ => false,
    }
}

/// The largest output a function whose size is an argument (`lpad`, `repeat`, `range`, ...)
/// may generate per row in a DP query.
pub const MAX_GENERATED: i64 = 10_000;

/// Aggregates that collect their input into one value.
const COLLECTING: [&str; 3] = ["string_agg", "array_agg", "listagg"];

/// The functions whose output size is an argument.
const GENERATORS: [&str; 9] = [
    "lpad",
    "rpad",
    "repeat",
    "array_repeat",
    "list_repeat",
    "array_resize",
    "list_resize",
    "range",
    "generate_series",
];

/// Refuses a function whose output size is an argument unless that size is a constant of at
/// most [`MAX_GENERATED`]: `lpad('a', CASE WHEN patient_id = K THEN 1e12 ELSE 1 END)` made the
/// process abort (a failed allocation cannot be caught) exactly when patient K exists, and a
/// constant size is reached only on rows an `AND`/`OR` lets through (session 14's red team).
fn check_generated_size(name: &str, args: &[Expr]) -> Result<()> {
    let constant = |i: usize| match args.get(i) {
        Some(Expr::Literal(value, _)) => match value.cast_to(&DataType::Int64) {
            Ok(ScalarValue::Int64(Some(v))) => Some(v),
            _ => None,
        },
        _ => None,
    };
    // Sizes multiply when one generates from another's output
    // (`repeat(repeat(repeat(g, 10000), 10000), 10000)`): the input must not be generated.
    let generates = |e: &Expr| {
        e.exists(|inner| {
            Ok(matches!(inner, Expr::ScalarFunction(f)
                if GENERATORS.contains(&f.func.name().trim_start_matches("try_"))))
        })
        .unwrap_or(true)
    };
    if GENERATORS.contains(&name) && args.iter().any(generates) {
        return plan_err!(
            "{name} (in a DP query or a locked session) generates from what another such \
             function generated: the sizes multiply past what one row may allocate \
             ({MAX_GENERATED} per function)"
        );
    }
    let size = match name {
        "lpad" | "rpad" | "repeat" | "array_repeat" | "list_repeat" | "array_resize"
        | "list_resize" => constant(1),
        "range" | "generate_series" => {
            let values: Option<Vec<i64>> = (0..args.len()).map(constant).collect();
            values.and_then(|v| match v.as_slice() {
                [stop] => Some(*stop),
                [start, stop] => stop.checked_sub(*start),
                [start, stop, step] if *step != 0 => stop.checked_sub(*start).map(|d| d / step),
                _ => None,
            })
        }
        _ => return Ok(()),
    };
    match size {
        Some(size) if size.unsigned_abs() <= MAX_GENERATED as u64 => Ok(()),
        _ => plan_err!(
            "{name} (in a DP query or a locked session): the size it generates must be a \
             constant of at most {MAX_GENERATED}: a size computed from a row, or a larger one, \
             could exhaust memory and stop the process on one row alone, which would tell that \
             row exists"
        ),
    }
}

/// Whether a cast to `to` can fail for a whole batch because of one row: dictionary and
/// run-end encoded types, whose keys are shared by the rows of a batch (a 129th distinct value
/// overflows `Dictionary(Int8, _)`, even in a safe cast).
fn batch_level_cast(to: &DataType) -> bool {
    matches!(to, DataType::Dictionary(..) | DataType::RunEndEncoded(..))
}

/// The total form of `expr`, evaluated over rows of `schema` (module docs).
fn total_expr(expr: Expr, schema: &DFSchemaRef) -> Result<Transformed<Expr>> {
    total_expr_at(expr, schema, 0)
}

/// How many times a function's simplification may be simplified again: a simplification
/// that gives back its own call (`starts_with(concat_ws('x', s), NULL)` did) or keeps growing
/// would otherwise recurse until the process's memory is gone, each level on a stack segment
/// grown on demand (the fuzzer's abort at program 12,915 of its 30-minute run, seed 7).
const MAX_SIMPLIFICATIONS: usize = 16;

/// [`total_expr`], `depth` simplifications in.
fn total_expr_at(expr: Expr, schema: &DFSchemaRef, depth: usize) -> Result<Transformed<Expr>> {
    expr.transform_up(|e| match e {
        Expr::Cast(Cast { ref field, .. }) | Expr::TryCast(TryCast { ref field, .. })
            if batch_level_cast(field.data_type()) =>
        {
            plan_err!(
                "CAST to {} over protected rows: the rows of a batch share its keys, so the cast \
                 can fail for a whole batch because of one row (too many distinct values), and \
                 the failure would tell that row exists. Cast to the value type instead",
                field.data_type()
            )
        }
        // Arrow's safe cast still fails for a whole batch in places (a date out of range
        // does not format as a string): a cast that can fail runs as [`TryCastRows`].
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            let from = expr.get_type(schema).ok();
            if from.is_some_and(|from| cast_is_total(&from, field.data_type())) {
                Ok(Transformed::no(Expr::Cast(Cast { expr, field })))
            } else {
                let udf = ScalarUDF::new_from_impl(TryCastRows::new(field.data_type().clone()));
                Ok(Transformed::yes(Expr::ScalarFunction(
                    ScalarFunction::new_udf(Arc::new(udf), vec![*expr]),
                )))
            }
        }
        Expr::ScalarFunction(call) => {
            let func = call.func.inner();
            let ours = call.func.name().starts_with("dp_")
                || func.downcast_ref::<TryFunction>().is_some()
                || func.downcast_ref::<TryBinary>().is_some()
                || func.downcast_ref::<TryCastRows>().is_some();
            if ours {
                return Ok(Transformed::no(Expr::ScalarFunction(call)));
            }
            // A function that simplifies to another expression is only ever run as that
            // (`arrow_cast(1, 'UInt64')` is `CAST(1 AS UInt64)`; run as itself it fails, so its
            // total form would be NULL): simplify it first and make the result total.
            let context = SimplifyContext::builder()
                .with_schema(Arc::clone(schema))
                .build();
            // (A simplification that fails, e.g. on a column it cannot resolve, is skipped.)
            check_generated_size(call.func.name(), &call.args)?;
            let ScalarFunction { func, args } = call;
            let simplified = func
                .simplify(args.clone(), &context)
                .unwrap_or_else(|_| ExprSimplifyResult::Original(args.clone()));
            let simplified = match simplified {
                // Its own call again: nothing was simplified.
                ExprSimplifyResult::Simplified(Expr::ScalarFunction(again))
                    if again.func == func && again.args == args =>
                {
                    ExprSimplifyResult::Original(args)
                }
                other => other,
            };
            match simplified {
                ExprSimplifyResult::Simplified(_) if depth >= MAX_SIMPLIFICATIONS => plan_err!(
                    "{} over protected rows: its simplification does not settle after \
                     {MAX_SIMPLIFICATIONS} rounds; the statement was refused before it ran",
                    func.name()
                ),
                ExprSimplifyResult::Simplified(expr) => Ok(Transformed::yes(
                    total_expr_at(expr, schema, depth + 1)?.data,
                )),
                ExprSimplifyResult::Original(args) => {
                    let wrapped = ScalarUDF::new_from_impl(total_function(func));
                    Ok(Transformed::yes(Expr::ScalarFunction(
                        ScalarFunction::new_udf(Arc::new(wrapped), args),
                    )))
                }
            }
        }
        Expr::BinaryExpr(binary) => {
            let total = match operator_needs_types(binary.op) {
                false => {
                    operator_is_total(binary.op, &DataType::Null, &DataType::Null, &binary.right)
                }
                true => match (
                    type_of(&binary.left, schema),
                    type_of(&binary.right, schema),
                ) {
                    (Some(left), Some(right)) => {
                        operator_is_total(binary.op, &left, &right, &binary.right)
                    }
                    _ => false,
                },
            };
            if total {
                return Ok(Transformed::no(Expr::BinaryExpr(binary)));
            }
            let BinaryExpr { left, op, right } = binary;
            let udf = ScalarUDF::new_from_impl(TryBinary::new(op));
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(Arc::new(udf), vec![*left, *right]),
            )))
        }
        // A LIKE pattern compiles to a regular expression, which can fail (a pattern past the
        // size limit, built from a row's values): the operator form with the same kernel.
        // (An escape character other than the backslash is refused when planned.)
        Expr::Like(like) if matches!(like.escape_char, None | Some('\\')) => {
            let op = match (like.negated, like.case_insensitive) {
                (false, false) => Operator::LikeMatch,
                (false, true) => Operator::ILikeMatch,
                (true, false) => Operator::NotLikeMatch,
                (true, true) => Operator::NotILikeMatch,
            };
            let udf = ScalarUDF::new_from_impl(TryBinary::new(op));
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(Arc::new(udf), vec![*like.expr, *like.pattern]),
            )))
        }
        // A window aggregate's accumulator can fail on a decimal (`avg` overflows where the
        // sum does not fit), and a window `PARTITION BY` the unit runs on one person's rows.
        Expr::WindowFunction(ref window)
            if matches!(window.fun, WindowFunctionDefinition::AggregateUDF(_))
                && window.params.args.iter().any(|a| {
                    a.get_type(schema).map_or(true, |t| {
                        matches!(
                            t,
                            DataType::Decimal32(..)
                                | DataType::Decimal64(..)
                                | DataType::Decimal128(..)
                                | DataType::Decimal256(..)
                        )
                    })
                }) =>
        {
            plan_err!(
                "{} over a DECIMAL in a window of a DP query: its accumulator can fail on one \
                 person's rows (an overflow), and the failure would tell about them. Cast the \
                 argument to DOUBLE",
                window.fun
            )
        }
        // An aggregate that collects its frame (`string_agg`, `array_agg`) grows with the
        // square of a person's rows in a growing frame, and a join with a public table can
        // give one person thousands of rows before the bounding: memory exhausted for one
        // person aborted the process (round 3 of the red team).
        Expr::WindowFunction(ref window)
            if matches!(&window.fun, WindowFunctionDefinition::AggregateUDF(f)
                if COLLECTING.contains(&f.name())) =>
        {
            plan_err!(
                "{} as a window in a DP query: it collects its frame, whose size one person's \
                 rows decide, into one value per row",
                window.fun
            )
        }
        Expr::SimilarTo(_) => plan_err!(
            "SIMILAR TO over protected rows: its pattern is compiled to a regular expression, \
             which can fail on a row, and an error would tell which rows exist. Use \
             regexp_like(value, pattern), which gives NULL on such a row"
        ),
        other => Ok(Transformed::no(other)),
    })
}

/// Makes every expression of `plan` and its subqueries total (module docs), keeping output
/// names. Applied by the planner rule to each query with a DP call.
pub fn make_total(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        if node.expressions().is_empty() {
            return Ok(Transformed::no(node));
        }
        let schema = match node.inputs().as_slice() {
            [] => None,
            [only] => Some(Arc::clone(only.schema())),
            // Where the inputs' columns cannot be merged (the same qualified name on two
            // sides), types are unknown, and every cast and operator counts as fallible.
            [first, rest @ ..] => Some(Arc::new(
                rest.iter()
                    .try_fold(first.schema().as_ref().clone(), |schema, other| {
                        schema.join(other.schema())
                    })
                    .unwrap_or_else(|_| DFSchema::empty()),
            )),
        };
        let Some(schema) = schema else {
            return Ok(Transformed::no(node));
        };
        let names = NamePreserver::new(&node);
        let rewritten = node.map_expressions(|expr| {
            let saved = names.save(&expr);
            let total = total_expr(expr, &schema)?;
            Ok(total.update_data(|e| saved.restore(e)))
        })?;
        if !rewritten.transformed {
            return Ok(rewritten);
        }
        rewritten.map_data(|plan| plan.recompute_schema())
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};

    /// A function whose simplification gives back its own call is made total once, not
    /// forever (`starts_with(concat_ws('x', s), NULL)` recursed until memory ran out).
    #[test]
    fn a_simplification_that_gives_back_its_call_ends() {
        use datafusion::logical_expr::{col, lit};
        let schema: DFSchemaRef = Arc::new(
            DFSchema::try_from(Schema::new(vec![Field::new("s", DataType::Utf8, true)])).unwrap(),
        );
        let registry = datafusion::prelude::SessionContext::new();
        let f = |name: &str| {
            datafusion::execution::FunctionRegistry::udf(&registry.state(), name).unwrap()
        };
        let expr = f("starts_with").call(vec![
            f("concat_ws").call(vec![lit("x"), col("s")]),
            lit(ScalarValue::Utf8(None)),
        ]);
        let total = total_expr(expr, &schema).unwrap().data;
        assert!(total.to_string().contains("try_"), "{total}");
    }

    #[test]
    fn type_of_agrees_with_datafusion_on_every_subexpression() {
        use datafusion::logical_expr::{col, lit};
        let schema: DFSchemaRef = Arc::new(
            DFSchema::try_from(Schema::new(vec![
                Field::new("i", DataType::Int32, true),
                Field::new("l", DataType::Int64, true),
                Field::new("f", DataType::Float64, true),
                Field::new("s", DataType::Utf8, true),
                Field::new("d", DataType::Decimal128(10, 2), true),
            ]))
            .unwrap(),
        );
        let exprs = [
            col("i") + col("l") * lit(3i8) - col("f"),
            (col("i") / col("l")) % lit(0i64) + col("d"),
            binary(col("s"), Operator::StringConcat, col("s")),
            Expr::Cast(Cast::new(Box::new(col("s")), DataType::Int16)) + col("i"),
            (col("d") * col("d")).alias("x") - lit(1.5f32),
            col("l").eq(col("f")).and(col("i").lt(lit(2u8))),
        ];
        for expr in exprs {
            let total = total_expr(expr, &schema).unwrap().data;
            total
                .apply(|e| {
                    assert_eq!(type_of(e, &schema), e.get_type(&schema).ok(), "{e}");
                    Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
                })
                .unwrap();
        }
    }

    fn binary(left: Expr, op: Operator, right: Expr) -> Expr {
        Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right)))
    }

    #[test]
    fn casts_that_cannot_fail_stay_casts() {
        use DataType::*;
        for (from, to) in [
            (Int32, Int64),
            (UInt32, Int64),
            (Int64, Float64),
            (Float32, Float64),
            (Int64, Utf8),
            (Boolean, Utf8),
            (Utf8, Utf8View),
        ] {
            assert!(cast_is_total(&from, &to), "{from} -> {to}");
        }
        for (from, to) in [
            (Utf8, Int64),
            (Int64, Int32),
            (Int64, UInt64),
            (UInt64, Int64),
            (Float64, Int64),
            (Utf8, Date32),
            (Binary, Utf8),
            (Float64, Float32),
        ] {
            assert!(!cast_is_total(&from, &to), "{from} -> {to}");
        }
    }
}
