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

use crate::sql::privacy::plan::size::{fixed_width, max_value_bytes};
use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
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
        let bounds = output_bounds(name, &args);
        let (args, over) = match within_the_cap(args, bounds)? {
            Ok(within) => within,
            Err(every_row_null) => return Ok(every_row_null),
        };
        or_null(args, over, |args| match output_bounds(name, &args) {
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

/// `args` with every array argument NULL on the rows that would take more than [`row_cap`],
/// and which rows those are (their output is made NULL too, by [`or_null`]); or, when no row
/// can be within it, the NULL the call returns without being run.
///
/// A row is over when `bounds` (a function's own bound on its output, [`output_bounds`]) says
/// so, or, for a function whose output has a variable width, when its arguments other than
/// its largest array argument take more than the cap together ([`other_arguments_bytes`]).
/// Every value a total form outputs is within the cap ([`cap_output`]), but a call can take
/// the same value many times (`concat(x, x, ..., x)`, `make_array` of hundreds of
/// arguments, a constant as long as the statement): 300 copies of an 8 KB value on 4,000 rows
/// allocated 9 GB before its output could be capped (issue 41). Counted so, a row's output is
/// at most a bounded factor of one array's own row and the cap, whatever the call.
fn within_the_cap(
    args: ScalarFunctionArgs,
    bounds: Option<Vec<u64>>,
) -> Result<std::result::Result<(ScalarFunctionArgs, Option<BooleanArray>), ColumnarValue>> {
    let cap = row_cap(&args.config_options);
    let others = match is_fixed_width(args.return_field.data_type()) {
        true => None,
        false => other_arguments_bytes(&args),
    };
    let bounds = match (bounds, others) {
        (Some(b), Some(o)) => Some(b.iter().zip(&o).map(|(b, o)| (*b).max(*o)).collect()),
        (b, o) => b.or(o),
    };
    let Some(bounds) = bounds else {
        return Ok(Ok((args, None)));
    };
    let constant = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    if constant {
        return Ok(match bounds.first() {
            Some(bound) if *bound > cap => Err(ColumnarValue::Scalar(ScalarValue::try_from(
                args.return_field.data_type(),
            )?)),
            _ => Ok((args, None)),
        });
    }
    // The constants alone over the cap: every row is, and the call is not run (a constant is
    // not made NULL on some rows: it would still be broadcast to every row).
    let constants: u64 = args
        .args
        .iter()
        .filter_map(|a| match a {
            ColumnarValue::Scalar(s) => Some(constant_bytes(s)),
            ColumnarValue::Array(_) => None,
        })
        .fold(0u64, u64::saturating_add);
    if constants > cap {
        return Ok(Err(ColumnarValue::Array(new_null_array(
            args.return_field.data_type(),
            args.number_rows,
        ))));
    }
    let over = BooleanArray::new(
        BooleanBuffer::collect_bool(bounds.len(), |i| bounds[i] > cap),
        None,
    );
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
    Ok(Ok((
        ScalarFunctionArgs {
            args: masked,
            ..args
        },
        Some(over),
    )))
}

/// Each row's bytes in every argument but its largest array argument (a constant counts on
/// every row), when there are two arguments or more; `None` for one. The largest array is
/// held whatever the call does; what more a row's output can take is what the others add.
fn other_arguments_bytes(args: &ScalarFunctionArgs) -> Option<Vec<u64>> {
    if args.args.len() < 2 {
        return None;
    }
    let rows = args.number_rows;
    let mut sum = vec![0u64; rows];
    let mut largest = vec![0u64; rows];
    for a in &args.args {
        match a {
            ColumnarValue::Scalar(s) => {
                let bytes = constant_bytes(s);
                sum.iter_mut().for_each(|s| *s = s.saturating_add(bytes));
            }
            ColumnarValue::Array(array) => {
                let bytes = row_bytes(array.as_ref())
                    .unwrap_or_else(|| vec![fixed_width(array.data_type()); rows]);
                for ((s, l), b) in sum.iter_mut().zip(largest.iter_mut()).zip(bytes) {
                    *s = s.saturating_add(b);
                    *l = (*l).max(b);
                }
            }
        }
    }
    Some(sum.iter().zip(&largest).map(|(s, l)| s - l).collect())
}

/// The bytes of a constant argument, as [`row_bytes`] counts a row; its type's fixed width
/// where that does not read it (as an array argument's).
fn constant_bytes(scalar: &ScalarValue) -> u64 {
    scalar
        .to_array_of_size(1)
        .ok()
        .and_then(|one| row_bytes(one.as_ref()))
        .map_or_else(|| fixed_width(&scalar.data_type()), |b| b[0])
}

/// Whether every value of `data_type` takes the same bytes (numbers, booleans, dates,
/// fixed-size binaries): nothing a row holds can pass the cap that the type does not.
fn is_fixed_width(data_type: &DataType) -> bool {
    use DataType::*;
    match data_type {
        Null | Boolean | FixedSizeBinary(_) => true,
        FixedSizeList(field, _) => is_fixed_width(field.data_type()),
        Struct(fields) => fields.iter().all(|f| is_fixed_width(f.data_type())),
        other => other.primitive_width().is_some(),
    }
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
                Some(a) => match row_bytes(a.as_ref()) {
                    Some(bytes) => (0..rows)
                        .map(|r| if a.is_null(r) { 0 } else { bytes[r] })
                        .collect(),
                    // A union or run-end encoded element (`row_bytes` reads the others).
                    None => {
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
        let (args, over) = match within_the_cap(args, None)? {
            Ok(within) => within,
            Err(every_row_null) => return Ok(every_row_null),
        };
        or_null(args, over, |args| {
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
        or_null(args, None, |args| {
            let array = args.args[0].to_array(args.number_rows)?;
            Ok(ColumnarValue::Array(arrow::compute::cast_with_options(
                &array, &self.to, &options,
            )?))
        })
    }
}

/// `evaluate(args)`, or where it fails, `evaluate` on halves of the rows down to the rows
/// where it fails, which get NULL ([`by_halves`]); and NULL on the rows `over` names
/// ([`within_the_cap`]). Rows where it succeeds get the same values either way (every
/// function here is row-wise), so the result depends on each row alone.
fn or_null(
    args: ScalarFunctionArgs,
    over: Option<BooleanArray>,
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
    let evaluate = |args: ScalarFunctionArgs, over: Option<&BooleanArray>| {
        let rows = args.number_rows;
        evaluate(args).and_then(|v| cap_output(v, rows, cap, over))
    };
    // A stopped query stops here, before each call and each half of the fallback, not only
    // at its next yield to the runtime (crate::sql::cooperative::QueryCancellation).
    let cancelled = || crate::sql::cooperative::check_cancelled(&args.config_options);
    cancelled()?;
    if let Ok(value) = evaluate(args.clone(), over.as_ref()) {
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
        return Ok(match evaluate(one, None) {
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
            let part = Part {
                args: &args,
                over: over.as_ref(),
                return_type: &return_type,
            };
            part.by_halves(0, rows / 2, &evaluate, &mut parts);
            part.by_halves(rows / 2, rows, &evaluate, &mut parts);
        }
    }
    cancelled()?;
    let parts: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(ColumnarValue::Array(arrow::compute::concat(&parts)?))
}

/// A batch whose evaluation failed, evaluated again in parts by [`Part::by_halves`].
struct Part<'a> {
    args: &'a ScalarFunctionArgs,
    /// The rows of the batch made NULL whatever the evaluation gives ([`within_the_cap`]).
    over: Option<&'a BooleanArray>,
    return_type: &'a DataType,
}

impl Part<'_> {
    /// Rows `start..end` evaluated into `parts`: in one call if that succeeds, else as two
    /// halves, down to a single row that fails, which gets NULL. A batch with one failing row
    /// costs about twice its evaluation and 2 log2(rows) calls, not one call a row: the
    /// fallback row by row made one person's failing value (`1 / (patient_id - K)`) cost the
    /// whole batch a call per row (issue 41).
    fn by_halves(
        &self,
        start: usize,
        end: usize,
        evaluate: &dyn Fn(ScalarFunctionArgs, Option<&BooleanArray>) -> Result<ColumnarValue>,
        parts: &mut Vec<ArrayRef>,
    ) {
        let rows = end - start;
        if crate::sql::cooperative::check_cancelled(&self.args.config_options).is_err() {
            // The query is stopped: the caller fails; no more calls.
            parts.push(new_null_array(self.return_type, rows));
            return;
        }
        let slice = ScalarFunctionArgs {
            args: self
                .args
                .args
                .iter()
                .map(|a| match a {
                    ColumnarValue::Array(array) => ColumnarValue::Array(array.slice(start, rows)),
                    scalar => scalar.clone(),
                })
                .collect(),
            number_rows: rows,
            ..self.args.clone()
        };
        let over = self.over.map(|o| o.slice(start, rows));
        match evaluate(slice, over.as_ref()).and_then(|v| v.to_array(rows)) {
            Ok(value) if value.len() == rows => parts.push(value),
            // One row that fails gets NULL; so do no rows (an empty batch on which the call
            // fails whatever the rows: a pattern that does not compile), which must not split.
            _ if rows <= 1 => parts.push(new_null_array(self.return_type, rows)),
            _ => {
                let middle = start + rows / 2;
                self.by_halves(start, middle, evaluate, parts);
                self.by_halves(middle, end, evaluate, parts);
            }
        }
    }
}

/// `value` with NULL on each row whose value takes more than `cap` bytes ([`row_cap`], by
/// [`row_bytes`]) and on each row `over` names, and with no bytes kept for any NULL row
/// ([`compact`]). Every total form's output is capped, so no chain of them (`s || s` once per
/// CTE level, `array_concat(a, a)`) grows a row past it, and a function that multiplies its
/// input's size by a bounded factor stays within memory. A constant output is capped as
/// one row.
fn cap_output(
    value: ColumnarValue,
    rows: usize,
    cap: u64,
    over: Option<&BooleanArray>,
) -> Result<ColumnarValue> {
    let array = match value {
        ColumnarValue::Scalar(scalar) if over.is_none() && is_fixed_width(&scalar.data_type()) => {
            return Ok(ColumnarValue::Scalar(scalar))
        }
        ColumnarValue::Scalar(scalar) => {
            let one = scalar.to_array_of_size(1)?;
            let too_long = row_bytes(one.as_ref()).is_some_and(|b| b[0] > cap);
            match (too_long, over) {
                (true, _) => {
                    return Ok(ColumnarValue::Scalar(ScalarValue::try_from(
                        scalar.data_type(),
                    )?))
                }
                (false, None) => return Ok(ColumnarValue::Scalar(scalar)),
                (false, Some(_)) => scalar.to_array_of_size(rows)?,
            }
        }
        ColumnarValue::Array(array) => array,
    };
    if matches!(array.data_type(), DataType::Null)
        || (over.is_none() && is_fixed_width(array.data_type()))
    {
        return Ok(ColumnarValue::Array(array));
    }
    let len = array.len();
    let mut keep = match row_bytes(array.as_ref()) {
        Some(sizes) => BooleanBuffer::collect_bool(len, |i| sizes[i] <= cap),
        None => BooleanBuffer::new_set(len),
    };
    if let Some(valid) = array.nulls() {
        keep = &keep & valid.inner();
    }
    if let Some(over) = over {
        keep = &keep & &!over.values();
    }
    Ok(ColumnarValue::Array(compact(&array, keep)?))
}

/// `array` with NULL on the rows `keep` does not keep, and no bytes held for them: the rows'
/// strings, bytes and list elements are dropped, not only masked. Arrow's kernels copy a NULL
/// row's bytes as they are (`concat_elements_utf8`, which `||` runs, does): masked only, a
/// row over the cap was doubled again at every level of a chain of `x || x`, and 8 levels
/// over 4,000 rows of 7.5 KB took 7 GB (issue 41). The copy is made on every batch whatever
/// its rows, so its cost is linear in the rows kept, never a branch on one of them.
fn compact(array: &ArrayRef, keep: BooleanBuffer) -> Result<ArrayRef> {
    use arrow::array::AsArray;
    use arrow::datatypes::{BinaryViewType, StringViewType};
    let nulls = arrow::buffer::NullBuffer::new(keep);
    Ok(match array.data_type() {
        t if is_fixed_width(t) => {
            let data = array.to_data().into_builder().nulls(Some(nulls));
            // SAFETY: only the validity bitmap changes, to one of the array's length;
            // offsets, values and children are the array's own, already valid.
            arrow::array::make_array(unsafe { data.build_unchecked() })
        }
        DataType::Utf8 => Arc::new(without_bytes(array.as_string::<i32>(), nulls)),
        DataType::LargeUtf8 => Arc::new(without_bytes(array.as_string::<i64>(), nulls)),
        DataType::Binary => Arc::new(without_bytes(array.as_binary::<i32>(), nulls)),
        DataType::LargeBinary => Arc::new(without_bytes(array.as_binary::<i64>(), nulls)),
        DataType::Utf8View => Arc::new(without_views::<StringViewType>(
            array.as_string_view(),
            nulls,
        )),
        DataType::BinaryView => Arc::new(without_views::<BinaryViewType>(
            array.as_binary_view(),
            nulls,
        )),
        _ => {
            let indices: arrow::array::UInt32Array = (0..array.len())
                .map(|i| nulls.is_valid(i).then_some(i as u32))
                .collect();
            arrow::compute::take(array.as_ref(), &indices, None)?
        }
    })
}

/// A string or bytes array holding only the bytes of the rows `nulls` keeps: each run of kept
/// rows copied in one piece (Arrow's `take` copies row by row, 3x slower on short strings).
fn without_bytes<T: arrow::datatypes::ByteArrayType>(
    array: &arrow::array::GenericByteArray<T>,
    nulls: arrow::buffer::NullBuffer,
) -> arrow::array::GenericByteArray<T> {
    use arrow::datatypes::ArrowNativeType;
    let offsets = array.value_offsets();
    let data = array.value_data();
    let kept: usize = nulls
        .inner()
        .set_slices()
        .map(|(start, end)| offsets[end].as_usize() - offsets[start].as_usize())
        .sum();
    let mut values: Vec<u8> = Vec::with_capacity(kept);
    let mut starts: Vec<T::Offset> = Vec::with_capacity(offsets.len());
    starts.push(T::Offset::usize_as(0));
    let mut done = 0;
    for (start, end) in nulls.inner().set_slices() {
        // The rows dropped before this run: empty.
        let here = T::Offset::usize_as(values.len());
        starts.extend(std::iter::repeat_n(here, start - done));
        let first = offsets[start];
        values.extend_from_slice(&data[first.as_usize()..offsets[end].as_usize()]);
        starts.extend(offsets[start + 1..=end].iter().map(|o| *o - first + here));
        done = end;
    }
    let here = T::Offset::usize_as(values.len());
    starts.extend(std::iter::repeat_n(here, array.len() - done));
    // SAFETY: the offsets start at 0, never decrease (each run's are its own, shifted to where
    // its bytes were copied; a dropped row repeats the last), end at `values.len()`, and cut the
    // kept runs where the array's own offsets cut them (valid UTF-8 boundaries for strings).
    unsafe {
        arrow::array::GenericByteArray::<T>::new_unchecked(
            arrow::buffer::OffsetBuffer::new_unchecked(starts.into()),
            values.into(),
            Some(nulls),
        )
    }
}

/// A view array holding only the bytes of the rows `nulls` keeps: the others' views emptied,
/// then the buffers rewritten with the kept rows' bytes alone (`gc` copies what every view
/// points at, NULL or not).
fn without_views<T: arrow::datatypes::ByteViewType>(
    array: &arrow::array::GenericByteViewArray<T>,
    nulls: arrow::buffer::NullBuffer,
) -> arrow::array::GenericByteViewArray<T> {
    let views: arrow::buffer::ScalarBuffer<u128> = array
        .views()
        .iter()
        .enumerate()
        .map(|(i, v)| if nulls.is_valid(i) { *v } else { 0 })
        .collect();
    // SAFETY: each view is the array's own (valid for its buffers) or 0, an empty inline view.
    let kept = unsafe {
        arrow::array::GenericByteViewArray::<T>::new_unchecked(
            views,
            array.data_buffers().to_vec(),
            Some(nulls),
        )
    };
    kept.gc()
}

/// Each row's bytes: a string's or bytes' length, a fixed width, a list's elements' bytes, a
/// struct's fields' bytes, a dictionary value's bytes; what a row holds however it is laid
/// out (a NULL element's bytes count: kernels copy them), so a struct of 300 references to
/// one column counts 300 times. `None` for types it does not read (unions, run-end encoding).
fn row_bytes(array: &dyn Array) -> Option<Vec<u64>> {
    use arrow::array::AsArray;
    use DataType::*;
    let rows = array.len();
    // A list's row: its child's rows from `start` to `end`.
    fn spans(child: &dyn Array, spans: impl Iterator<Item = (usize, usize)>) -> Option<Vec<u64>> {
        let bytes = row_bytes(child)?;
        let mut prefix = Vec::with_capacity(bytes.len() + 1);
        prefix.push(0u64);
        for b in bytes {
            prefix.push(prefix[prefix.len() - 1].saturating_add(b));
        }
        spans
            .map(|(start, end)| Some(prefix.get(end)? - prefix.get(start)?))
            .collect()
    }
    fn offsets<O: arrow::array::OffsetSizeTrait>(
        offsets: &[O],
    ) -> impl Iterator<Item = (usize, usize)> + '_ {
        offsets
            .windows(2)
            .map(|w| (w[0].as_usize(), w[1].as_usize()))
    }
    let view_lengths = |views: &[u128]| views.iter().map(|v| *v as u32 as u64).collect();
    Some(match array.data_type() {
        Null => vec![0; rows],
        Boolean => vec![1; rows],
        FixedSizeBinary(n) => vec![(*n).max(0) as u64; rows],
        t if t.primitive_width().is_some() => vec![fixed_width(t); rows],
        Utf8 => offsets(array.as_string::<i32>().value_offsets())
            .map(|(s, e)| (e - s) as u64)
            .collect(),
        LargeUtf8 => offsets(array.as_string::<i64>().value_offsets())
            .map(|(s, e)| (e - s) as u64)
            .collect(),
        Binary => offsets(array.as_binary::<i32>().value_offsets())
            .map(|(s, e)| (e - s) as u64)
            .collect(),
        LargeBinary => offsets(array.as_binary::<i64>().value_offsets())
            .map(|(s, e)| (e - s) as u64)
            .collect(),
        Utf8View => view_lengths(array.as_string_view().views()),
        BinaryView => view_lengths(array.as_binary_view().views()),
        List(_) => {
            let a = array.as_list::<i32>();
            spans(a.values().as_ref(), offsets(a.value_offsets()))?
        }
        LargeList(_) => {
            let a = array.as_list::<i64>();
            spans(a.values().as_ref(), offsets(a.value_offsets()))?
        }
        Map(..) => {
            let a = array.as_map();
            spans(a.entries(), offsets(a.value_offsets()))?
        }
        ListView(_) => {
            let a = array.as_list_view::<i32>();
            let ends = a.offsets().iter().zip(a.sizes().iter());
            spans(
                a.values().as_ref(),
                ends.map(|(o, s)| (*o as usize, (*o + *s) as usize)),
            )?
        }
        LargeListView(_) => {
            let a = array.as_list_view::<i64>();
            let ends = a.offsets().iter().zip(a.sizes().iter());
            spans(
                a.values().as_ref(),
                ends.map(|(o, s)| (*o as usize, (*o + *s) as usize)),
            )?
        }
        FixedSizeList(_, n) => {
            let a = array.as_fixed_size_list();
            let n = (*n).max(0) as usize;
            spans(a.values().as_ref(), (0..rows).map(|r| (r * n, (r + 1) * n)))?
        }
        Struct(_) => {
            let mut sum = vec![0u64; rows];
            for column in array.as_struct().columns() {
                for (s, b) in sum.iter_mut().zip(row_bytes(column.as_ref())?) {
                    *s = s.saturating_add(b);
                }
            }
            sum
        }
        Dictionary(..) => {
            let a = array.as_any_dictionary();
            let values = row_bytes(a.values().as_ref())?;
            a.normalized_keys()
                .iter()
                .map(|k| values.get(*k).copied().unwrap_or(0))
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
            None,
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
            let out = or_null(args(vec![values], DataType::Int64), None, always)
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

    /// `x || x` once per CTE level: a row past the cap becomes NULL and its bytes go, so the
    /// next level copies none of them. Masked only (the bitmap), 12 levels over a 6 KB row
    /// held 6 KB × 2^12 = 24 MiB (issue 41: 8 levels over 4,000 rows took 7 GB).
    #[test]
    fn a_chain_of_concatenations_holds_no_bytes_of_its_null_rows() {
        use arrow::array::StringViewArray;
        let concat = TryBinary::new(Operator::StringConcat);
        let long = "x".repeat(6_000);
        let utf8: ArrayRef = Arc::new(StringArray::from(vec!["a", long.as_str(), "b"]));
        let views: ArrayRef = Arc::new(StringViewArray::from(vec![
            "a".repeat(20).as_str(),
            long.as_str(),
            "b",
        ]));
        for mut x in [utf8, views] {
            let data_type = x.data_type().clone();
            for level in 1..=12 {
                x = concat
                    .invoke_with_args(args(
                        vec![Arc::clone(&x), Arc::clone(&x)],
                        data_type.clone(),
                    ))
                    .unwrap()
                    .to_array(3)
                    .unwrap();
                assert!(x.is_null(1), "{data_type} level {level}");
                let rows = row_bytes(x.as_ref()).unwrap();
                assert_eq!(
                    rows[1], 0,
                    "{data_type} level {level}: a NULL row holds bytes"
                );
                assert!(
                    x.get_array_memory_size() < 64 << 10,
                    "{data_type} level {level}: {} bytes",
                    x.get_array_memory_size()
                );
            }
            // The rows within the cap are what the operator gives: "a" doubled until past
            // 8 KiB (2^13 bytes), "b" doubled 12 times (4 KiB).
            assert_eq!(row_bytes(x.as_ref()).unwrap()[2], 1 << 12, "{data_type}");
        }
    }

    /// A function that gives the number of its non-NULL arguments on each row as a string of
    /// that many `*`, even on NULLs (as `concat` does), and counts the non-NULL argument
    /// values it was handed.
    #[derive(Debug)]
    struct Probe(Signature, Arc<std::sync::atomic::AtomicUsize>);

    impl PartialEq for Probe {
        fn eq(&self, _: &Self) -> bool {
            true
        }
    }
    impl Eq for Probe {}
    impl std::hash::Hash for Probe {
        fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
    }

    impl ScalarUDFImpl for Probe {
        fn name(&self) -> &str {
            "probe"
        }
        fn signature(&self) -> &Signature {
            &self.0
        }
        fn return_type(&self, _: &[DataType]) -> Result<DataType> {
            Ok(DataType::Utf8)
        }
        fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
            let rows = args.number_rows;
            let arrays = args
                .args
                .iter()
                .map(|a| a.to_array(rows))
                .collect::<Result<Vec<_>>>()?;
            let out: StringArray = (0..rows)
                .map(|r| {
                    let n = arrays.iter().filter(|a| a.is_valid(r)).count();
                    self.1.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    Some("*".repeat(n))
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }
    }

    /// One call on 300 copies of a column: a row whose copies together pass the cap is not
    /// run (its inputs are NULL) and gets NULL, though the function gives a value on NULLs;
    /// the other rows are the function's. Constants count on every row, and constants alone
    /// past the cap give NULL everywhere without a call (a constant cannot be made NULL on
    /// one row). Before, 300 copies of an 8 KB value on 4,000 rows took 9 GB.
    #[test]
    fn a_call_whose_other_arguments_pass_the_cap_is_not_run_on_that_row() {
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let probe = ScalarUDF::new_from_impl(Probe(
            Signature::variadic_any(Volatility::Immutable),
            Arc::clone(&seen),
        ));
        let wrapped = TryFunction::new(Arc::new(probe), as_is);
        let long = "y".repeat(7_000);
        let column: ArrayRef = Arc::new(StringArray::from(vec!["b", long.as_str(), "c"]));
        let copies = vec![Arc::clone(&column); 300];
        let out = wrapped
            .invoke_with_args(args(copies, DataType::Utf8))
            .unwrap()
            .to_array(3)
            .unwrap();
        let out = out.as_any().downcast_ref::<StringArray>().unwrap();
        let stars = "*".repeat(300);
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![Some(stars.as_str()), None, Some(stars.as_str())]
        );
        // Rows 0 and 2 handed over, row 1 not.
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 600);

        // Two arguments, one of them long: the long one is the largest, so the row runs.
        seen.store(0, std::sync::atomic::Ordering::Relaxed);
        let short: ArrayRef = Arc::new(StringArray::from(vec!["b", "c", "d"]));
        let out = wrapped
            .invoke_with_args(args(vec![Arc::clone(&column), short], DataType::Utf8))
            .unwrap()
            .to_array(3)
            .unwrap();
        assert_eq!(out.null_count(), 0);
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 6);

        // Constants: 5 KB twice is past the 8 KiB cap on every row; no call.
        seen.store(0, std::sync::atomic::Ordering::Relaxed);
        let constant = ColumnarValue::Scalar(ScalarValue::Utf8(Some("z".repeat(5_000))));
        let mut call = args(vec![Arc::clone(&column)], DataType::Utf8);
        call.args.extend([constant.clone(), constant.clone()]);
        let out = wrapped.invoke_with_args(call).unwrap().to_array(3).unwrap();
        assert_eq!(out.null_count(), 3);
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 0);
        // One 5 KB constant and the column: every row runs (on the long row the column's 7 KB
        // is the largest argument, and the constant beside it is within the cap).
        let mut call = args(vec![Arc::clone(&column)], DataType::Utf8);
        call.args.push(constant);
        let out = wrapped.invoke_with_args(call).unwrap().to_array(3).unwrap();
        assert_eq!(
            (0..3).map(|r| out.is_null(r)).collect::<Vec<_>>(),
            vec![false, false, false],
            "the constant (5 KB) alone besides the largest is within the cap"
        );
    }

    /// `compact` keeps the kept rows' values and no other bytes, for strings (each run copied in
    /// one piece), views and lists, from sliced arrays too (offsets not starting at 0).
    #[test]
    fn compacted_arrays_hold_the_kept_rows_only() {
        use arrow::array::{LargeStringArray, ListArray, StringViewArray};
        let long = "z".repeat(100);
        let texts = vec![
            Some("skipped"),
            Some("a"),
            Some(long.as_str()),
            None,
            Some("ccc"),
            Some(long.as_str()),
            Some("e"),
        ];
        // Row 1 of each slice (the long one) and the last long one are dropped.
        let keep = || BooleanBuffer::from(vec![true, false, true, true, false, true]);
        let expected = vec![Some("a"), None, None, Some("ccc"), None, Some("e")];
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(texts.clone())),
            Arc::new(LargeStringArray::from(texts.clone())),
            Arc::new(StringViewArray::from(texts.clone())),
        ];
        for array in arrays {
            let sliced = array.slice(1, 6);
            let keep = keep();
            let valid: BooleanBuffer = (0..6)
                .map(|i| keep.value(i) && sliced.is_valid(i))
                .collect();
            let out = compact(&sliced, valid).unwrap();
            let text = arrow::compute::cast(&out, &DataType::Utf8).unwrap();
            let text = text.as_any().downcast_ref::<StringArray>().unwrap();
            assert_eq!(
                text.iter().collect::<Vec<_>>(),
                expected,
                "{}",
                array.data_type()
            );
            assert_eq!(row_bytes(out.as_ref()).unwrap(), vec![1, 0, 0, 3, 0, 1]);
            assert!(
                out.get_array_memory_size() < 200 + 6 * 16,
                "{}",
                array.data_type()
            );
        }
        let lists = ListArray::from_iter_primitive::<arrow::datatypes::Int64Type, _, _>(vec![
            Some(vec![Some(1)]),
            Some(vec![Some(2); 50]),
            Some(vec![Some(3), Some(4)]),
        ]);
        let out = compact(
            &(Arc::new(lists) as ArrayRef),
            BooleanBuffer::from(vec![true, false, true]),
        )
        .unwrap();
        assert_eq!(row_bytes(out.as_ref()).unwrap(), vec![8, 0, 16]);
        assert_eq!(
            out.as_any()
                .downcast_ref::<ListArray>()
                .unwrap()
                .values()
                .len(),
            3
        );
    }

    /// A row's bytes are what it holds however it is laid out: a struct of the same column
    /// twice holds it twice, a dictionary row its value, a list row its elements.
    #[test]
    fn a_row_s_bytes_count_every_reference() {
        use arrow::array::{DictionaryArray, ListArray, StructArray};
        use arrow::datatypes::Int32Type;
        let text: ArrayRef = Arc::new(StringArray::from(vec!["abc", "", "defgh"]));
        let fields = vec![
            Arc::new(Field::new("a", DataType::Utf8, true)),
            Arc::new(Field::new("b", DataType::Utf8, true)),
        ];
        let pair = StructArray::new(
            fields.into(),
            vec![Arc::clone(&text), Arc::clone(&text)],
            None,
        );
        assert_eq!(row_bytes(&pair), Some(vec![6, 0, 10]));
        let dictionary: DictionaryArray<Int32Type> = vec!["abc", "abc", "x"].into_iter().collect();
        assert_eq!(row_bytes(&dictionary), Some(vec![3, 3, 1]));
        let lists = ListArray::from_iter_primitive::<arrow::datatypes::Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![Some(3)]),
        ]);
        assert_eq!(row_bytes(&lists), Some(vec![16, 0, 8]));
        assert_eq!(row_bytes(&lists.slice(1, 2)), Some(vec![0, 8]));
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
