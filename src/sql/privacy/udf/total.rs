//! The total forms at run time: scalar functions that evaluate a function, an operator or a
//! cast that can fail, giving NULL on the rows where it fails instead of an error.
//!
//! The rewrite [`crate::sql::privacy::rewrite::total`] puts them in place of every expression
//! over protected rows that can fail (its module docs say why an error is an output). Each
//! evaluates the whole batch and, only where that fails, halves of it down to the rows that
//! fail, which get NULL (`or_null`); a panic counts as a failure, the query's cancellation is
//! checked before each evaluation, and each row's output is capped at [`row_cap`]:
//! - [`TryFunction`] `try_f(..)`: a scalar function `f`;
//! - [`TryBinary`] `try_divide(a, b)`: an operator, by DataFusion's own kernel;
//! - [`TryCastRows`] `try_cast_to_<type>(x)`: Arrow's safe cast.
//!
//! They reach Ballista executors by name (`src/distributed/codec.rs`).

use crate::sql::privacy::plan::size::max_value_bytes;
use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{plan_err, DFSchemaRef, Result, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Operator, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::physical_expr::expressions::{BinaryExpr as PhysicalBinary, Column};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// How an expression is made total: the rewrite's `total_expr`
/// ([`crate::sql::privacy::rewrite::total`]), handed to each [`TryFunction`] so that what `f`
/// simplifies to is made total too, without the runtime functions depending on the rewrite.
pub type MakeTotal = fn(Expr, &DFSchemaRef) -> Result<Transformed<Expr>>;

/// `f` wrapped to be total: `try_f(..)` is `f(..)` where that succeeds and NULL on a row where
/// it fails (module docs).
#[derive(Debug)]
pub struct TryFunction {
    inner: Arc<ScalarUDF>,
    name: String,
    make_total: MakeTotal,
}

// Equal and hashed by the function it wraps: `make_total` is always the rewrite's.
impl PartialEq for TryFunction {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && self.name == other.name
    }
}

impl Eq for TryFunction {}

impl std::hash::Hash for TryFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.name.hash(state);
    }
}

impl TryFunction {
    /// `inner` made total; what it simplifies to is made total by `make_total`.
    pub fn new(inner: Arc<ScalarUDF>, make_total: MakeTotal) -> Self {
        let name = format!("try_{}", inner.name());
        Self {
            inner,
            name,
            make_total,
        }
    }

    /// The wrapped function.
    pub fn inner(&self) -> &Arc<ScalarUDF> {
        &self.inner
    }
}

impl ScalarUDFImpl for TryFunction {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let field = self.inner.return_field_from_args(args)?;
        Ok(Arc::new(field.as_ref().clone().with_nullable(true)))
    }

    fn is_strict(&self) -> bool {
        self.inner.inner().is_strict()
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let updated = self.inner.inner().with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(TryFunction::new(
            Arc::new(updated),
            self.make_total,
        )))
    }

    /// `f`'s own simplification, made total: some functions are only ever run as what they
    /// simplify to (`arrow_cast(x, 'UInt64')` is `CAST(x AS UInt64)`, here `try_cast_to_UInt64`).
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        Ok(match self.inner.simplify(args.clone(), info)? {
            // Its own call again (the rewrite's `total_expr_at`): nothing to simplify.
            ExprSimplifyResult::Simplified(Expr::ScalarFunction(again))
                if again.func.as_ref() == self.inner.as_ref() && again.args == args =>
            {
                ExprSimplifyResult::Original(args)
            }
            ExprSimplifyResult::Simplified(expr) => {
                ExprSimplifyResult::Simplified((self.make_total)(expr, info.schema())?.data)
            }
            original => original,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.inner.name();
        // Rows whose output would pass the cap get NULL inputs, on every batch whether or not
        // a row is over: one evaluation of the batch either way. (Failing the batch instead
        // made one person's long value turn the whole batch's evaluation into the fallback
        // below: twice the memory of a `repeat` near the cap, with one person; issue 41.)
        let args = match output_bounds(name, &args) {
            Some(bounds) => match without_rows_over_the_cap(args, &bounds)? {
                Ok(args) => args,
                Err(every_row_null) => return Ok(every_row_null),
            },
            None => args,
        };
        or_null(args, |args| match output_bounds(name, &args) {
            // Past the cap on one row's output the function is not run: an allocation that
            // fails aborts the process (session 14's red team, `repeat` nested through
            // subqueries). Only a constant argument can still be over here.
            Some(bounds) if bounds.iter().any(|b| *b > row_cap(&args.config_options)) => {
                Err(datafusion::common::DataFusionError::Execution(format!(
                    "{name}: output over {} bytes a row",
                    row_cap(&args.config_options)
                )))
            }
            _ => self.inner.invoke_with_args(args),
        })
    }
}

/// `args` with every array argument NULL on the rows whose bound in `bounds` is over
/// [`row_cap`] (each size-multiplying function gives NULL for a NULL input); or,
/// when every argument is a constant and the row is over, the NULL the call returns.
fn without_rows_over_the_cap(
    args: ScalarFunctionArgs,
    bounds: &[u64],
) -> Result<std::result::Result<ScalarFunctionArgs, ColumnarValue>> {
    let cap = row_cap(&args.config_options);
    let constant = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    if constant {
        return Ok(match bounds.first() {
            Some(bound) if *bound > cap => Err(ColumnarValue::Scalar(ScalarValue::try_from(
                args.return_field.data_type(),
            )?)),
            _ => Ok(args),
        });
    }
    let over: arrow::array::BooleanArray = bounds.iter().map(|b| Some(*b > cap)).collect();
    let masked = args
        .args
        .iter()
        .map(|a| match a {
            ColumnarValue::Array(array) => Ok(ColumnarValue::Array(
                arrow::compute::kernels::nullif::nullif(array.as_ref(), &over)?,
            )),
            scalar => Ok(scalar.clone()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Ok(ScalarFunctionArgs {
        args: masked,
        ..args
    }))
}

/// The most bytes one row's output of a total form may take in a query whose configuration
/// is `config`; a row past it gets NULL. It is the bound on a type's fixed width
/// ([`max_value_bytes`]): `MAX_OUTPUT_BYTES` (64 KiB), and
/// at most `MAX_FIXED_ARRAY_BYTES` (64 MiB) for a batch of the session's `batch_size` rows, 8
/// KiB at the default 8,192. So one array an expression computes for a batch takes at most
/// 64 MiB. DataFusion's memory pool counts what operators hold, not the arrays expressions
/// hand on: at 64 KiB a row, a chain of `upper`s over 4,000 rows of 50 KB strings held arrays
/// of 200 MB each, and a few such queries, cancelled, took `dp-server` 800 MB past its
/// `memory_limit` (issue 42). The cap reads the session's settings only, never another row,
/// so a row's output stays a function of that row.
pub fn row_cap(config: &datafusion::common::config::ConfigOptions) -> u64 {
    max_value_bytes(config.execution.batch_size.get())
}

/// An upper bound on the bytes `name(args)` produces for each row, for the functions whose
/// output can be many times their input; `None` for the others.
fn output_bounds(name: &str, args: &ScalarFunctionArgs) -> Option<Vec<u64>> {
    use arrow::array::AsArray;
    let rows = args.number_rows;
    // Each argument's per-row byte length (strings, bytes, lists, or the text of other
    // values) or value (integers), as u64; 0 on a NULL row.
    let lengths = |i: usize| -> Option<Vec<u64>> {
        let array = args.args.get(i)?.to_array(rows).ok()?;
        let bytes = match row_bytes(array.as_ref()) {
            Some(bytes) => bytes,
            None => {
                let text = arrow::compute::cast(&array, &DataType::LargeUtf8).ok()?;
                let text = text.as_string::<i64>();
                (0..rows).map(|r| text.value_length(r) as u64).collect()
            }
        };
        Some(
            (0..rows)
                .map(|r| if array.is_null(r) { 0 } else { bytes[r] })
                .collect(),
        )
    };
    let integers = |i: usize| -> Option<Vec<u64>> {
        let array = args.args.get(i)?.to_array(rows).ok()?;
        let array = arrow::compute::cast(&array, &DataType::Int64).ok()?;
        let values = array.as_primitive::<arrow::datatypes::Int64Type>();
        Some(
            (0..rows)
                .map(|r| match values.is_null(r) {
                    true => 0,
                    false => values.value(r).max(0) as u64,
                })
                .collect(),
        )
    };
    let per_row: Vec<u64> = match name {
        "repeat" => {
            let (text, times) = (lengths(0)?, integers(1)?);
            text.iter()
                .zip(&times)
                .map(|(l, n)| l.saturating_mul(*n))
                .collect()
        }
        "array_repeat" | "list_repeat" | "array_resize" | "list_resize" => {
            // Each row's element: its bytes (a string, bytes or list), its width, or the
            // average of a nested type; at least 8 (a NULL element still takes a slot).
            let element = args
                .args
                .get(if name.ends_with("repeat") { 0 } else { 2 })
                .and_then(|e| e.to_array(rows).ok());
            let element_bytes: Vec<u64> = match &element {
                Some(a) => match (row_bytes(a.as_ref()), a.data_type().primitive_width()) {
                    (Some(bytes), _) => (0..rows)
                        .map(|r| if a.is_null(r) { 0 } else { bytes[r] })
                        .collect(),
                    (None, Some(width)) => vec![width as u64; rows],
                    (None, None) => {
                        let average = (a.get_array_memory_size() as u64)
                            .checked_div(rows as u64)
                            .unwrap_or(0);
                        vec![average; rows]
                    }
                },
                None => vec![0; rows],
            };
            integers(1)?
                .iter()
                .zip(element_bytes)
                .map(|(n, e)| n.saturating_mul(e.max(8)))
                .collect()
        }
        // Every match (at most one per byte, and one more) becomes the replacement, which can
        // quote the whole input (`regexp_replace` back-references).
        "replace" | "regexp_replace" => {
            let (text, with) = (lengths(0)?, lengths(2)?);
            text.iter()
                .zip(&with)
                .map(|(l, w)| (l + 1).saturating_mul(w + 1).saturating_mul(l + 1))
                .collect()
        }
        _ => return None,
    };
    Some(per_row)
}

/// A binary operator that can fail, as a total function: `try_divide(a, b)` is `a / b`, NULL
/// on a row where that fails (module docs). Evaluated by DataFusion's own kernel for `op`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TryBinary {
    op: Operator,
    name: String,
    signature: Signature,
}

impl TryBinary {
    pub fn new(op: Operator) -> Self {
        Self {
            op,
            name: format!("try_{}", operator_name(op)),
            signature: Signature::any(2, Volatility::Immutable),
        }
    }

    /// The operator's physical expression over a two-column batch of `left` and `right`.
    fn kernel(&self, left: &DataType, right: &DataType) -> (Arc<Schema>, PhysicalBinary) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("left", left.clone(), true),
            Field::new("right", right.clone(), true),
        ]));
        let expr = PhysicalBinary::new(
            Arc::new(Column::new("left", 0)),
            self.op,
            Arc::new(Column::new("right", 1)),
        );
        (schema, expr)
    }
}

impl ScalarUDFImpl for TryBinary {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let [left, right] = arg_types else {
            return plan_err!("{} takes two arguments", self.name);
        };
        let (schema, expr) = self.kernel(left, right);
        expr.data_type(&schema)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let types: Vec<DataType> = args.args.iter().map(|a| a.data_type()).collect();
        let [left, right] = types.as_slice() else {
            return plan_err!("{} takes two arguments", self.name);
        };
        let (schema, expr) = self.kernel(left, right);
        or_null(args, |args| {
            let rows = args.number_rows;
            let columns = args
                .args
                .iter()
                .map(|a| a.to_array(rows))
                .collect::<Result<Vec<ArrayRef>>>()?;
            let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
            expr.evaluate(&batch)
        })
    }
}

/// A cast that can fail, as a total function: `try_cast_to(x)` is Arrow's safe cast (NULL
/// where a value does not convert) with the row-by-row fallback where the cast still fails for
/// the batch (module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TryCastRows {
    to: DataType,
    name: String,
    signature: Signature,
}

impl TryCastRows {
    pub fn new(to: DataType) -> Self {
        Self {
            name: format!("try_cast_to_{to}"),
            to,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }

    /// The type it casts to.
    pub fn to(&self) -> &DataType {
        &self.to
    }
}

impl ScalarUDFImpl for TryCastRows {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let options = arrow::compute::CastOptions {
            safe: true,
            ..Default::default()
        };
        or_null(args, |args| {
            let array = args.args[0].to_array(args.number_rows)?;
            Ok(ColumnarValue::Array(arrow::compute::cast_with_options(
                &array, &self.to, &options,
            )?))
        })
    }
}

/// `evaluate(args)`, or where it fails, `evaluate` on halves of the rows down to the rows
/// where it fails, which get NULL ([`by_halves`]). Rows where it succeeds get the same values either way (every function
/// here is row-wise), so the result depends on each row alone.
fn or_null(
    args: ScalarFunctionArgs,
    evaluate: impl Fn(ScalarFunctionArgs) -> Result<ColumnarValue>,
) -> Result<ColumnarValue> {
    // A panic (a kernel's `capacity overflow`) counts as a failure: caught, it fails the
    // batch or the row like an error instead of failing the query. (What the panic hook prints
    // is the process's: `dpsql --config` installs a silent one.)
    let evaluate = |args: ScalarFunctionArgs| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| evaluate(args))).unwrap_or_else(
            |_| {
                Err(datafusion::common::DataFusionError::Execution(
                    "a function panicked".to_string(),
                ))
            },
        )
    };
    let cap = row_cap(&args.config_options);
    let evaluate = |args: ScalarFunctionArgs| evaluate(args).and_then(|v| cap_output(v, cap));
    // A stopped query stops here, before each call and each half of the fallback, not only
    // at its next yield to the runtime (crate::sql::cooperative::QueryCancellation).
    let cancelled = || crate::sql::cooperative::check_cancelled(&args.config_options);
    cancelled()?;
    if let Ok(value) = evaluate(args.clone()) {
        return Ok(value);
    }
    let return_type = args.return_field.data_type().clone();
    if args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)))
    {
        let mut one = args.clone();
        one.number_rows = 1;
        return Ok(match evaluate(one) {
            Ok(value) => value,
            Err(_) => ColumnarValue::Scalar(ScalarValue::try_from(&return_type)?),
        });
    }
    // The batch failed: its halves, unless it is one row (or none).
    let mut parts: Vec<ArrayRef> = Vec::new();
    let rows = args.number_rows;
    match rows <= 1 {
        true => parts.push(new_null_array(&return_type, rows)),
        false => {
            by_halves(&args, 0, rows / 2, &evaluate, &return_type, &mut parts);
            by_halves(&args, rows / 2, rows, &evaluate, &return_type, &mut parts);
        }
    }
    cancelled()?;
    let parts: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(ColumnarValue::Array(arrow::compute::concat(&parts)?))
}

/// Rows `start..end` of `args` evaluated into `parts`: in one call if that succeeds, else as
/// two halves, down to a single row that fails, which gets NULL. A batch with one failing row
/// costs about twice its evaluation and 2 log2(rows) calls, not one call a row: the fallback
/// row by row made one person's failing value (`1 / (patient_id - K)`) cost the whole batch
/// a call per row (issue 41).
fn by_halves(
    args: &ScalarFunctionArgs,
    start: usize,
    end: usize,
    evaluate: &dyn Fn(ScalarFunctionArgs) -> Result<ColumnarValue>,
    return_type: &DataType,
    parts: &mut Vec<ArrayRef>,
) {
    let rows = end - start;
    if crate::sql::cooperative::check_cancelled(&args.config_options).is_err() {
        // The query is stopped: the caller fails; no more calls.
        parts.push(new_null_array(return_type, rows));
        return;
    }
    let slice = ScalarFunctionArgs {
        args: args
            .args
            .iter()
            .map(|a| match a {
                ColumnarValue::Array(array) => ColumnarValue::Array(array.slice(start, rows)),
                scalar => scalar.clone(),
            })
            .collect(),
        number_rows: rows,
        ..args.clone()
    };
    match evaluate(slice).and_then(|v| v.to_array(rows)) {
        Ok(value) if value.len() == rows => parts.push(value),
        // One row that fails gets NULL; so do no rows (an empty batch on which the call
        // fails whatever the rows: a pattern that does not compile), which must not split.
        _ if rows <= 1 => parts.push(new_null_array(return_type, rows)),
        _ => {
            let middle = start + rows / 2;
            by_halves(args, start, middle, evaluate, return_type, parts);
            by_halves(args, middle, end, evaluate, return_type, parts);
        }
    }
}

/// `value` with NULL on each row whose string, bytes or list takes more than `cap`
/// ([`row_cap`]): every total form's output is capped, so no chain of them (`s || s` once per
/// CTE level, `array_concat(a, a)`) grows a row past it, and a function that multiplies its
/// input's size by a bounded factor stays within memory.
fn cap_output(value: ColumnarValue, cap: u64) -> Result<ColumnarValue> {
    let ColumnarValue::Array(array) = value else {
        return Ok(value);
    };
    let sizes: Option<Vec<u64>> = row_bytes(array.as_ref());
    let Some(sizes) = sizes else {
        return Ok(ColumnarValue::Array(array));
    };
    // The rows over the cap made NULL through the validity bitmap on every batch, whether or
    // not one is over: the values stay where they are (no copy whose size would depend on
    // one person's row), and only the bitmap is rebuilt.
    let keep: arrow::buffer::BooleanBuffer = sizes.iter().map(|s| *s <= cap).collect();
    let nulls = arrow::buffer::NullBuffer::union(
        array.nulls(),
        Some(&arrow::buffer::NullBuffer::new(keep)),
    );
    let data = array.to_data().into_builder().nulls(nulls);
    // SAFETY: only the validity bitmap changes, to one of the array's length; offsets, values
    // and children are the array's own, already valid.
    let data = unsafe { data.build_unchecked() };
    Ok(ColumnarValue::Array(arrow::array::make_array(data)))
}

/// Each row's bytes, for strings, bytes and lists (a list row: its elements' share of the
/// child array's bytes); `None` for other types.
fn row_bytes(array: &dyn Array) -> Option<Vec<u64>> {
    use arrow::array::AsArray;
    use DataType::*;
    let rows = array.len();
    Some(match array.data_type() {
        Utf8 => {
            let a = array.as_string::<i32>();
            (0..rows).map(|i| a.value_length(i) as u64).collect()
        }
        LargeUtf8 => {
            let a = array.as_string::<i64>();
            (0..rows).map(|i| a.value_length(i) as u64).collect()
        }
        Utf8View => {
            let a = array.as_string_view();
            (0..rows).map(|i| a.value(i).len() as u64).collect()
        }
        Binary => {
            let a = array.as_binary::<i32>();
            (0..rows).map(|i| a.value_length(i) as u64).collect()
        }
        LargeBinary => {
            let a = array.as_binary::<i64>();
            (0..rows).map(|i| a.value_length(i) as u64).collect()
        }
        List(_) | LargeList(_) => {
            let (offsets, child): (Vec<u64>, &ArrayRef) = match array.data_type() {
                List(_) => {
                    let a = array.as_list::<i32>();
                    (
                        a.value_offsets().iter().map(|o| *o as u64).collect(),
                        a.values(),
                    )
                }
                _ => {
                    let a = array.as_list::<i64>();
                    (
                        a.value_offsets().iter().map(|o| *o as u64).collect(),
                        a.values(),
                    )
                }
            };
            let per_element = (child.get_array_memory_size() as u64)
                .checked_div(child.len() as u64)
                .unwrap_or(0)
                .max(1);
            offsets
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]).saturating_mul(per_element))
                .collect()
        }
        _ => return None,
    })
}

/// The lower-case name of an operator in `try_` names (Spark's: `try_divide`).
fn operator_name(op: Operator) -> String {
    match op {
        Operator::Plus => "add".into(),
        Operator::Minus => "subtract".into(),
        Operator::Multiply => "multiply".into(),
        Operator::Divide => "divide".into(),
        Operator::Modulo => "mod".into(),
        Operator::IntegerDivide => "div".into(),
        other => {
            // Names like RegexMatch → regex_match.
            let mut name = String::new();
            for (i, c) in format!("{other:?}").chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_lowercase());
            }
            name
        }
    }
}

/// Every operator a [`TryBinary`] can carry, for decoding one by its name.
pub fn operator_from_name(name: &str) -> Option<Operator> {
    use Operator::*;
    [
        Plus,
        Minus,
        Multiply,
        Divide,
        Modulo,
        IntegerDivide,
        RegexMatch,
        RegexIMatch,
        RegexNotMatch,
        RegexNotIMatch,
        LikeMatch,
        ILikeMatch,
        NotLikeMatch,
        NotILikeMatch,
        BitwiseAnd,
        BitwiseOr,
        BitwiseXor,
        BitwiseShiftRight,
        BitwiseShiftLeft,
        StringConcat,
        AtArrow,
        ArrowAt,
        Arrow,
        LongArrow,
        HashArrow,
        HashLongArrow,
        AtAt,
        HashMinus,
        AtQuestion,
        Question,
        QuestionAnd,
        QuestionPipe,
        Colon,
    ]
    .into_iter()
    .find(|op| operator_name(*op) == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::FieldRef;

    /// A [`MakeTotal`] that leaves an expression as it is (the rewrite's is tested there).
    fn as_is(expr: Expr, _: &DFSchemaRef) -> Result<Transformed<Expr>> {
        Ok(Transformed::no(expr))
    }

    fn args(columns: Vec<ArrayRef>, return_type: DataType) -> ScalarFunctionArgs {
        let rows = columns[0].len();
        ScalarFunctionArgs {
            arg_fields: columns
                .iter()
                .map(|c| Arc::new(Field::new("a", c.data_type().clone(), true)) as FieldRef)
                .collect(),
            args: columns.into_iter().map(ColumnarValue::Array).collect(),
            number_rows: rows,
            return_field: Arc::new(Field::new("r", return_type, true)),
            config_options: Arc::new(ConfigOptions::default()),
        }
    }

    /// A batch with one failing row costs 2 log2(rows) + 1 calls and gives NULL on that row
    /// only; a call that fails on every batch (a pattern that does not compile) gives NULL on
    /// every row, an empty batch included (it split forever before: the fuzzer's abort at
    /// program 12,915 of its 30-minute run, seed 7).
    #[test]
    fn a_failing_row_is_found_by_halves() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1024));
        let calls = AtomicUsize::new(0);
        let fails_on_700 = |args: ScalarFunctionArgs| {
            calls.fetch_add(1, Ordering::Relaxed);
            let a = args.args[0].to_array(args.number_rows)?;
            let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
            match a.values().contains(&700) {
                true => plan_err!("fails on 700"),
                false => Ok(ColumnarValue::Array(Arc::new(a.clone()) as ArrayRef)),
            }
        };
        let out = or_null(
            args(vec![Arc::clone(&values)], DataType::Int64),
            fails_on_700,
        )
        .unwrap()
        .to_array(1024)
        .unwrap();
        let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(out.len(), 1024);
        assert_eq!(out.null_count(), 1);
        assert!(out.is_null(700));
        assert_eq!(out.value(699), 699);
        // The whole batch, then two halves at each of 10 levels.
        assert_eq!(calls.load(Ordering::Relaxed), 1 + 2 * 10);

        let always: fn(ScalarFunctionArgs) -> Result<ColumnarValue> = |_| plan_err!("no");
        for rows in [0usize, 1, 5] {
            let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
            let out = or_null(args(vec![values], DataType::Int64), always)
                .unwrap()
                .to_array(rows)
                .unwrap();
            assert_eq!((out.len(), out.null_count()), (rows, rows));
        }
    }

    #[test]
    fn a_failing_division_gives_null_on_its_rows_only() {
        let divide = TryBinary::new(Operator::Divide);
        let numerators: ArrayRef = Arc::new(Int64Array::from(vec![10, 7, i64::MIN, 9]));
        let divisors: ArrayRef = Arc::new(Int64Array::from(vec![2, 0, -1, 3]));
        // The batch fails (7 / 0, MIN / -1); the other rows keep their quotients.
        let out = divide
            .invoke_with_args(args(vec![numerators, divisors], DataType::Int64))
            .unwrap()
            .to_array(4)
            .unwrap();
        let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![Some(5), None, None, Some(3)]
        );
    }

    /// `udf(values, patterns)` for a function of two strings returning booleans.
    fn booleans(
        udf: &dyn ScalarUDFImpl,
        values: [&str; 3],
        patterns: [&str; 3],
    ) -> Vec<Option<bool>> {
        let values: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
        let patterns: ArrayRef = Arc::new(StringArray::from(patterns.to_vec()));
        let out = udf
            .invoke_with_args(args(vec![values, patterns], DataType::Boolean))
            .unwrap()
            .to_array(3)
            .unwrap();
        out.as_any()
            .downcast_ref::<arrow::array::BooleanArray>()
            .unwrap()
            .iter()
            .collect()
    }

    #[test]
    fn a_failing_function_gives_null_on_its_rows_only() {
        let wrapped = TryFunction::new(datafusion::functions::regex::regexp_like(), as_is);
        assert_eq!(wrapped.name(), "try_regexp_like");
        // "(" does not compile; the other patterns do.
        let out = booleans(&wrapped, ["north", "south", "east"], ["^n", "(", "t$"]);
        assert_eq!(out, vec![Some(true), None, Some(true)]);
    }

    #[test]
    fn like_runs_as_its_operator() {
        let like = TryBinary::new(Operator::LikeMatch);
        assert_eq!(like.name(), "try_like_match");
        let out = booleans(&like, ["north", "south", "east"], ["n%", "%h", "w_st"]);
        assert_eq!(out, vec![Some(true), Some(true), Some(false)]);
    }

    /// A function that panics on the value 13 (as a kernel's `capacity overflow` does).
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct PanicsOn13(Signature);

    impl ScalarUDFImpl for PanicsOn13 {
        fn name(&self) -> &str {
            "panics_on_13"
        }
        fn signature(&self) -> &Signature {
            &self.0
        }
        fn return_type(&self, _: &[DataType]) -> Result<DataType> {
            Ok(DataType::Int64)
        }
        fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
            let values = args.args[0].to_array(args.number_rows)?;
            let values = values.as_any().downcast_ref::<Int64Array>().unwrap();
            assert!(!values.iter().any(|v| v == Some(13)), "13 seen");
            Ok(ColumnarValue::Array(Arc::new(values.clone())))
        }
    }

    #[test]
    fn a_panicking_function_gives_null_on_its_rows_only() {
        let inner = ScalarUDF::new_from_impl(PanicsOn13(Signature::any(1, Volatility::Immutable)));
        let wrapped = TryFunction::new(Arc::new(inner), as_is);
        let values: ArrayRef = Arc::new(Int64Array::from(vec![12, 13, 14]));
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let out = wrapped.invoke_with_args(args(vec![values], DataType::Int64));
        std::panic::set_hook(hook);
        let out = out.unwrap().to_array(3).unwrap();
        let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![Some(12), None, Some(14)]
        );
    }

    #[test]
    fn the_row_cap_is_a_batch_s_share_of_64_mib() {
        let mut config = datafusion::common::config::ConfigOptions::default();
        assert_eq!(row_cap(&config), 8 << 10, "8 KiB at 8,192 rows a batch");
        let mut with_batch = |rows: usize| {
            config
                .set("datafusion.execution.batch_size", &rows.to_string())
                .unwrap();
            row_cap(&config)
        };
        assert_eq!(with_batch(65_536), 1 << 10);
        assert_eq!(
            with_batch(512),
            crate::sql::privacy::plan::size::MAX_OUTPUT_BYTES
        );
        // The output of one total form for a batch: at most 64 MiB whatever the batch size.
        for batch_size in [8, 512, 1024, 8192, 65_536] {
            assert!(with_batch(batch_size) * batch_size as u64 <= 64 << 20);
        }
    }

    #[test]
    fn a_row_past_the_output_cap_gets_null() {
        // `s || s` doubles a row once per CTE level: each total form's output is capped.
        let concat = TryBinary::new(Operator::StringConcat);
        let long = "x".repeat(40_000);
        let left: ArrayRef = Arc::new(StringArray::from(vec!["a", long.as_str()]));
        let right: ArrayRef = Arc::new(StringArray::from(vec!["b", long.as_str()]));
        let out = concat
            .invoke_with_args(args(vec![left, right], DataType::Utf8))
            .unwrap()
            .to_array(2)
            .unwrap();
        let out = out.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(out.iter().collect::<Vec<_>>(), vec![Some("ab"), None]);
    }

    #[test]
    fn operator_names_decode() {
        for op in [
            Operator::Divide,
            Operator::Modulo,
            Operator::RegexMatch,
            Operator::BitwiseShiftLeft,
            Operator::Plus,
            Operator::StringConcat,
        ] {
            let udf = TryBinary::new(op);
            let name = udf.name().strip_prefix("try_").unwrap();
            assert_eq!(operator_from_name(name), Some(op), "{name}");
        }
        assert_eq!(TryBinary::new(Operator::Divide).name(), "try_divide");
        assert_eq!(
            TryBinary::new(Operator::RegexIMatch).name(),
            "try_regex_i_match"
        );
    }
}
